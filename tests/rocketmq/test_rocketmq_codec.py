"""The RocketMQ message codec (store/rocketmq/message.py) on messages of our own encoder
(tests/support/rmq_encode.py): round trips of every field, RocketMQ's rules for properties, tag
codes and message ids, V2 magic, compressed bodies, and any bytes decoded without a crash.
Stores RocketMQ itself wrote are read in tests/java/test_rocketmq_java.py."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.rmq_encode import encode_message
from store.rocketmq.message import (
    BORNHOST_V6_FLAG,
    MIN_SIZE,
    STOREHOSTADDRESS_V6_FLAG,
    NotAMessage,
    body_of,
    decode,
    msg_id,
    parse_properties,
    tags_code,
)

hosts = st.one_of(
    st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255), st.integers(0, 255),
              st.integers(0, 65535)).map(lambda t: f"{t[0]}.{t[1]}.{t[2]}.{t[3]}:{t[4]}"),
    st.sampled_from(["[::1]:10911", "[fe80::1:2]:1", "[2001:db8::ff00:42:8329]:65535"]))
# property names and values as a producer sets them: no separators, not empty
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                    max_size=12)


@settings(max_examples=300, deadline=None)
@given(topic=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20).filter(
           lambda t: len(t.encode()) <= 127),
       body=st.binary(max_size=300), queue_id=st.integers(0, 1023), flag=st.integers(-(1 << 31), (1 << 31) - 1),
       queue_offset=st.integers(0, 1 << 62), phy=st.integers(0, 1 << 62), born=hosts, store=hosts,
       ts=st.integers(0, 1 << 50), props=st.dictionaries(prop_text, prop_text, max_size=5), v2=st.booleans(),
       compress=st.sampled_from([None, "zlib", "lz4", "zstd"]))
def test_every_field_round_trips(topic, body, queue_id, flag, queue_offset, phy, born, store, ts, props, v2,
                                 compress):
    raw = encode_message(topic=topic, body=body, queue_id=queue_id, flag=flag, queue_offset=queue_offset,
                         phy_offset=phy, born_host=born, store_host=store, store_timestamp=ts, born_timestamp=ts - 1,
                         properties=props, v2=v2, compress=compress)
    m = decode(raw, 0, len(raw))
    assert (m.topic, m.queue_id, m.flag, m.queue_offset, m.phy_offset, m.store_timestamp, m.born_timestamp) == \
        (topic, queue_id, flag, queue_offset, phy, ts, ts - 1)
    assert m.properties == props and m.size == len(raw) and m.version == ("v2" if v2 else "v1")
    assert (m.born_host, m.store_host) == (born, store)
    assert bool(m.sys_flag & BORNHOST_V6_FLAG) == ("[" in born)
    assert bool(m.sys_flag & STOREHOSTADDRESS_V6_FLAG) == ("[" in store)
    assert body_of(raw, m) == body and m.compressed == (compress is not None)


def test_a_message_in_a_longer_buffer_ends_where_totalsize_says():
    a, b = encode_message(topic="A"), encode_message(topic="B", body=b"")
    m = decode(a + b)
    assert m.topic == "A" and decode(a + b, m.size).topic == "B"
    with pytest.raises(NotAMessage, match="TOTALSIZE"):
        decode(a + b, 0, len(a) + 1)  # an entry's body must be exactly one message


def test_rocketmq_5_topics_longer_than_127_bytes_take_the_v2_magic():
    topic = "t" * 300
    m = decode(encode_message(topic=topic, v2=True))
    assert m.topic == topic and m.version == "v2"


def test_properties_parse_as_rocketmq_parses_them():
    # pairs split by \x02, name and value by the first \x01; empty names or values are dropped
    assert parse_properties("A\x011\x02B\x012\x02") == {"A": "1", "B": "2"}
    assert parse_properties("A\x01x\x01y\x02\x01v\x02k\x01\x02n\x02") == {"A": "x\x01y"}
    assert parse_properties("A\x011\x02A\x012") == {"A": "2"}
    assert parse_properties("") == {}


@pytest.mark.parametrize("tags, code", [
    ("TagA", 2598919), ("", 0), (None, 0), ("a", 97), ("hello world", 1794106052), ("中文", 646394),
    ("\U0001F600", 1772899)])  # (Java's "...".hashCode(), over UTF-16 units: the emoji is a surrogate pair)
def test_tag_codes_are_javas_string_hash(tags, code):
    assert tags_code(tags) == code


def test_a_negative_java_hash_stays_negative():
    assert tags_code("polygenelubricants") == -(1 << 31)  # (a known string whose hashCode is Integer.MIN_VALUE)


def test_message_ids_are_the_store_host_and_the_offset_in_hex():
    assert msg_id(bytes([10, 0, 0, 2]) + struct.pack(">i", 10911), 0x30) == "0A00000200002A9F0000000000000030"
    m = decode(encode_message(store_host="[::1]:10911", phy_offset=48))
    assert m.msg_id == "0" * 31 + "1" + "00002A9F" + "0000000000000030"


@pytest.mark.parametrize("damage, match", [
    (lambda b: b[:MIN_SIZE - 1], "fewer than"),
    (lambda b: b[:4] + struct.pack(">i", 12345) + b[8:], "magic code"),
    (lambda b: struct.pack(">i", len(b) + 5) + b[4:], "TOTALSIZE"),
    (lambda b: b[:-3], "TOTALSIZE"),
])
def test_what_is_not_a_message_is_said(damage, match):
    with pytest.raises(NotAMessage, match=match):
        raw = damage(encode_message(properties={"TAGS": "t"}))
        decode(raw, 0, len(raw))


def test_a_compressed_body_that_does_not_inflate_is_not_a_crash():
    raw = bytearray(encode_message(body=b"x" * 100, compress="zlib"))
    m = decode(bytes(raw))
    raw[m.body_at + 3] ^= 0xFF
    with pytest.raises(NotAMessage, match="inflate"):
        body_of(bytes(raw), decode(bytes(raw)))
    assert len(body_of(bytes(raw), m, inflate=False)) == m.body_size


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 400))
def test_any_bytes_decode_or_raise_not_a_message(data, cut):
    good = encode_message(properties={"TAGS": "t", "KEYS": "a b"})
    for raw in (data, good[:cut] + data, data[:8] + good[8:]):
        try:
            m = decode(raw, 0, len(raw))
        except NotAMessage:
            continue
        assert m.body_at + m.body_size <= len(raw)
