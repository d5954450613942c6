"""The columns fast path (store/rocketmq/columns.py and its C twin _columns.c) agrees with
itself and with message.decode: on messages of every shape, on damaged ones, on topics
and tags that are not UTF-8, and on properties where TAGS or DELAY repeat or are empty."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.rmq_encode import encode_message
from store.rocketmq import columns
from store.rocketmq.columns import OK, SLOW, message_columns
from store.rocketmq.message import NotAMessage, body_crc, decode, tags_code

compiled = pytest.mark.skipif(columns._columns is None, reason="store.rocketmq._columns is not built")

FIELDS = ["status", "size", "queue_id", "queue_offset", "phy", "sys_flag", "store_ts", "tags", "delay", "crc_ok"]

props_raw = st.lists(st.tuples(st.sampled_from([b"TAGS", b"DELAY", b"KEYS", b"", b"T"]),
                               st.sampled_from([b"", b"a", b"tag", b"3", b"-2", b"1234567890", b"x\x01y", b"\xff",
                                                "中文".encode(), b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"+4", b"03"])),
                     max_size=5)


def _raw_props(pairs, trailing: bool) -> bytes:
    out = b"\x02".join(k + b"\x01" + v for k, v in pairs)
    return out + (b"\x02" if trailing and pairs else b"")


@st.composite
def messages(draw):
    topic = draw(st.sampled_from([b"T", b"TopicA", "主题".encode(), b"\xff\xfe", b"t" * 127, b""]))
    props = _raw_props(draw(props_raw), draw(st.booleans()))
    raw = bytearray(encode_message(topic="X", body=draw(st.binary(max_size=80)), queue_id=draw(st.integers(0, 9)),
                                   queue_offset=draw(st.integers(0, 1 << 40)), phy_offset=draw(st.integers(0, 1 << 40)),
                                   store_host=draw(st.sampled_from(["1.2.3.4:5", "[::1]:7"])),
                                   born_host=draw(st.sampled_from(["1.2.3.4:5", "[::2]:7"])),
                                   v2=draw(st.booleans())))
    m = decode(bytes(raw))
    # swap in raw topic and property bytes (the encoder takes text)
    tl = 2 if m.version == "v2" else 1
    head = bytes(raw[:m.body_at + m.body_size])
    topic_part = (struct.pack(">h", len(topic)) if tl == 2 else bytes([len(topic)])) + topic
    out = bytearray(head + topic_part + struct.pack(">h", len(props)) + props)
    struct.pack_into(">i", out, 0, len(out))
    if draw(st.booleans()):  # damage: a byte anywhere
        k = draw(st.integers(0, len(out) - 1))
        out[k] ^= draw(st.integers(1, 255))
    return bytes(out)


def _table(blobs: list[bytes]):
    buf = b"".join(blobs)
    offs = np.cumsum([0] + [len(b) for b in blobs[:-1]]).astype(np.int64)
    lens = np.array([len(b) for b in blobs], np.int64)
    return buf, offs, lens


def _same(a, b):
    for f in FIELDS:
        ok = a.status == OK
        assert np.array_equal(getattr(a, f)[ok] if f != "status" else a.status,
                              getattr(b, f)[ok] if f != "status" else b.status), f
    assert [a.topics[i] for i in a.topic[a.status == OK]] == [b.topics[i] for i in b.topic[b.status == OK]]


@compiled
@settings(max_examples=400, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=6), st.booleans())
def test_the_compiled_columns_are_the_pythons(blobs, crc):
    buf, offs, lens = _table(blobs)
    _same(message_columns(buf, offs, lens, crc), message_columns(buf, offs, lens, crc, compiled=False))


@settings(max_examples=400, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=6))
def test_an_ok_row_is_what_decode_reads_and_a_slow_one_is_left_to_it(blobs):
    buf, offs, lens = _table(blobs)
    for c in (message_columns(buf, offs, lens, True, compiled=False), message_columns(buf, offs, lens, True)):
        for k, raw in enumerate(blobs):
            if c.status[k] == SLOW:
                try:
                    decode(raw, 0, len(raw))
                except NotAMessage:
                    continue
                continue  # (decodable, with text Java would have to repair: decode does it)
            m = decode(raw, 0, len(raw))
            assert (c.size[k], c.queue_id[k], c.queue_offset[k], c.phy[k], c.sys_flag[k], c.store_ts[k]) == \
                (m.size, m.queue_id, m.queue_offset, m.phy_offset, m.sys_flag, m.store_timestamp)
            assert c.topics[c.topic[k]].decode() == m.topic and c.tags[k] == tags_code(m.tags)
            body = raw[m.body_at:m.body_at + m.body_size]
            assert bool(c.crc_ok[k]) == (body_crc(body) == m.body_crc)


def test_offsets_outside_the_buffer_are_slow_not_a_crash():
    raw = encode_message()
    for compiled_ in (True, False):
        c = message_columns(raw, np.array([0, len(raw) - 10, -5, 1 << 40], np.int64),
                            np.array([len(raw), len(raw), len(raw), 100], np.int64), True, compiled=compiled_)
        assert c.status.tolist() == [OK, SLOW, SLOW, SLOW]
