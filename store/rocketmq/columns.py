"""The fast path of ``mq topics`` and ``mq check``: the fields they need of many messages
at once, as columns, without an object per message; and (:func:`key_columns`) the index keys
of many messages at once, for ``mq migrate`` and ``mq rebuild``.

:func:`message_columns` reads the messages at given offsets of one buffer (a data file's
map) into numpy arrays. store/rocketmq/_columns.c does it in C when it is built; the
Python below is what it does, and the reference the tests hold it to. Both judge a message
by the rules of message.py's :func:`~store.rocketmq.message.decode` (tests check all three
agree): a message that one would refuse, or whose tags or topic are not plain UTF-8, is
marked ``SLOW`` and left to that decoder, which says what is wrong with it.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

from ..format import crc32
from .message import (
    BORNHOST_V6_FLAG,
    MAGICS,
    MESSAGE_MAGIC_CODE_V2,
    MIN_SIZE,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_ROLLBACK_TYPE,
    NotAMessage,
    decode,
    tags_code,
)

try:  # the compiled loop (store/rocketmq/_columns.c), when built
    from . import _columns
except ImportError:  # pragma: no cover - a build without a C compiler
    _columns = None

OK = 0  # decoded here
SLOW = 1  # left to message.decode (not a message, or text that needs Java's decoding rules)

_FIXED = struct.Struct(">iiiiiqqiq")
_I64 = struct.Struct(">q")
_AFTER = struct.Struct(">iqi")
_I16 = struct.Struct(">h")


@dataclass
class MessageColumns:
    status: np.ndarray  # int8: OK or SLOW
    size: np.ndarray  # int64: TOTALSIZE
    queue_id: np.ndarray  # int32
    queue_offset: np.ndarray  # int64
    phy: np.ndarray  # int64: PHYSICALOFFSET as stored
    sys_flag: np.ndarray  # int32
    store_ts: np.ndarray  # int64
    topic: np.ndarray  # int32: index into ``topics``
    tags: np.ndarray  # int64: Java's hash of TAGS (0 without)
    delay: np.ndarray  # int32: the DELAY property's level, -1 without one (or one that is no integer)
    crc_ok: np.ndarray  # bool: the body matches BODYCRC (True when not asked)
    topics: list[bytes]  # the topics met, in order of first appearance


def new_columns(n: int) -> MessageColumns:
    return MessageColumns(np.zeros(n, np.int8), np.zeros(n, np.int64), np.zeros(n, np.int32), np.zeros(n, np.int64),
                          np.zeros(n, np.int64), np.zeros(n, np.int32), np.zeros(n, np.int64), np.zeros(n, np.int32),
                          np.zeros(n, np.int64), np.full(n, -1, np.int32), np.ones(n, np.bool_), [])


def message_columns(buf, offsets: np.ndarray, lengths: np.ndarray, crc: bool, *, compiled: bool = True) -> MessageColumns:
    """The messages at ``buf[offsets[k]:offsets[k] + lengths[k]]`` (each one DLedger
    entry's body), with the body checked against BODYCRC when ``crc``."""
    offsets = np.ascontiguousarray(offsets, np.int64)
    lengths = np.ascontiguousarray(lengths, np.int64)
    out = new_columns(len(offsets))
    if compiled and _columns is not None:
        out.topics = _columns.read(buf, offsets, lengths, bool(crc), out.status, out.size, out.queue_id,
                                   out.queue_offset, out.phy, out.sys_flag, out.store_ts, out.topic, out.tags,
                                   out.delay, out.crc_ok)
        return out
    topic_ids: dict[bytes, int] = {}
    for k, (off, n) in enumerate(zip(offsets.tolist(), lengths.tolist())):
        got = _one(buf, off, n, crc)
        if got is None:
            out.status[k] = SLOW
            continue
        size, qid, qoff, phy, sys_flag, store_ts, topic, tags, delay, crc_ok = got
        tid = topic_ids.get(topic)
        if tid is None:
            tid = topic_ids[topic] = len(out.topics)
            out.topics.append(topic)
        out.size[k], out.queue_id[k], out.queue_offset[k], out.phy[k] = size, qid, qoff, phy
        out.sys_flag[k], out.store_ts[k], out.topic[k], out.tags[k] = sys_flag, store_ts, tid, tags
        out.delay[k], out.crc_ok[k] = delay, crc_ok
    return out


def _one(buf, off: int, n: int, crc: bool):
    """One message's columns, or None when message.decode must judge it."""
    if off < 0 or n < MIN_SIZE or off + n > len(buf):
        return None
    size, magic, bcrc, qid, _flag, qoff, phy, sys_flag, _born = _FIXED.unpack_from(buf, off)
    if magic not in MAGICS or size != n:
        return None
    p = off + 48 + (20 if sys_flag & BORNHOST_V6_FLAG else 8)
    stop = off + n
    if p + 8 > stop:
        return None
    (store_ts,) = _I64.unpack_from(buf, p)
    p += 8 + (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8)
    if p + 16 > stop:
        return None
    _reconsume, _prepared, blen = _AFTER.unpack_from(buf, p)
    body = p + 16
    if blen < 0 or body + blen > stop:
        return None
    p = body + blen
    if magic == MESSAGE_MAGIC_CODE_V2:
        if p + 2 > stop:
            return None
        (tlen,) = _I16.unpack_from(buf, p)
        p += 2
    else:
        if p + 1 > stop:
            return None
        tlen = buf[p]
        p += 1
    if tlen < 0 or p + tlen + 2 > stop:
        return None
    topic = bytes(buf[p:p + tlen])
    p += tlen
    (plen,) = _I16.unpack_from(buf, p)
    p += 2
    if plen < 0 or p + plen != stop:
        return None
    try:
        topic.decode("utf-8")
        tags, delay = _tags_and_delay(bytes(buf[p:stop]))
    except UnicodeDecodeError:
        return None  # (Java would replace what does not decode: message.decode does as Java does)
    crc_ok = not crc or (crc32(buf[body:body + blen]) & 0x7FFFFFFF) == bcrc
    return size, qid, qoff, phy, sys_flag, store_ts, topic, tags, delay, crc_ok


def _tags_and_delay(props: bytes) -> tuple[int, int]:
    """TAGS' Java hash and DELAY's level from raw properties, by message.parse_properties'
    rules (the last pair of a name wins; a pair with an empty name or value does not count)."""
    tags, delay = None, None
    for pair in props.split(b"\x02"):
        name, sep, value = pair.partition(b"\x01")
        if not (sep and name and value):
            continue
        if name == b"TAGS":
            tags = value
        elif name == b"DELAY":
            delay = value
    code = tags_code(tags.decode("utf-8")) if tags is not None else 0
    return code, delay_level(delay)


_LEVEL = re.compile(rb"-?[0-9]{1,9}")


def delay_level(value: bytes | None) -> int:
    """The DELAY property's level: an optional '-' and 1 to 9 ASCII digits, else -1."""
    return int(value) if value is not None and _LEVEL.fullmatch(value) else -1


def body_crcs(buf, offsets: np.ndarray, lengths: np.ndarray, *, compiled: bool = True) -> np.ndarray:
    """``crc32(buf[offsets[k]:offsets[k] + lengths[k]]) & 0x7fffffff`` of each range (uint32), as
    DLedger's bodyCrc is made (store/format.py); 0xffffffff (no bodyCrc is) for a range not
    inside ``buf``. In C when _columns is built (no object per entry)."""
    offsets = np.ascontiguousarray(offsets, np.int64)
    lengths = np.ascontiguousarray(lengths, np.int64)
    out = np.empty(len(offsets), np.uint32)
    if compiled and _columns is not None and hasattr(_columns, "crcs"):
        _columns.crcs(buf, offsets, lengths, out)
        return out
    view = memoryview(buf)
    for k, (o, n) in enumerate(zip(offsets.tolist(), lengths.tolist())):
        inside = 0 <= o <= len(buf) and 0 <= n <= len(buf) - o
        out[k] = crc32(view[o:o + n]) & 0x7FFFFFFF if inside else 0xFFFFFFFF
    return out


@dataclass
class KeyColumns:
    count: np.ndarray  # int32: how many of ``hashes`` are the message's; -1: left to message.decode
    store_ts: np.ndarray  # int64: STORETIMESTAMP (0 where count is -1)
    uniq_at: np.ndarray  # int64: where the UNIQ_KEY's bytes start in the buffer, -1 without one
    uniq_len: np.ndarray  # int32: their length
    hashes: np.ndarray  # int32: Java's String.hashCode() of each key, the messages' in order


def key_columns(buf, offsets: np.ndarray, lengths: np.ndarray, *, compiled: bool = True) -> KeyColumns:
    """The index keys ``IndexService.buildIndex`` puts for the messages at
    ``buf[offsets[k]:offsets[k] + lengths[k]]`` (``topic#UNIQ_KEY``, then ``topic#k`` for each
    non-empty ``k`` of KEYS split at spaces; none for a rollback), as the hashes of index.py's
    ``java_hashes``. A message that is not one, or whose topic, UNIQ_KEY or KEYS is not plain
    UTF-8, gets count -1: message.decode reads it as Java would (index.py does)."""
    offsets = np.ascontiguousarray(offsets, np.int64)
    lengths = np.ascontiguousarray(lengths, np.int64)
    n = len(offsets)
    out = KeyColumns(np.full(n, -1, np.int32), np.zeros(n, np.int64), np.full(n, -1, np.int64),
                     np.zeros(n, np.int32), np.zeros(0, np.int32))
    if compiled and _columns is not None:
        raw = _columns.keys(buf, offsets, lengths, out.count, out.store_ts, out.uniq_at, out.uniq_len)
        out.hashes = np.frombuffer(raw, np.int32)
        return out
    hashes: list[int] = []
    for k, (off, ln) in enumerate(zip(offsets.tolist(), lengths.tolist())):
        got = _keys_one(buf, off, ln)
        if got is None:
            continue
        store_ts, uniq_at, uniq_len, keys = got
        out.count[k], out.store_ts[k], out.uniq_at[k], out.uniq_len[k] = len(keys), store_ts, uniq_at, uniq_len
        hashes += [tags_code(key) for key in keys]
    out.hashes = np.array(hashes, np.int32)
    return out


def _keys_one(buf, off: int, n: int):
    """(store time, UNIQ_KEY's place and length, index keys) of one message, or None when
    message.decode must read it (not a message, or its topic, UNIQ_KEY or KEYS is not
    plain UTF-8)."""
    if off < 0:
        return None
    try:
        m = decode(buf, off, n)
    except NotAMessage:
        return None
    p = m.body_at + m.body_size
    if m.magic == MESSAGE_MAGIC_CODE_V2:
        (tlen,) = _I16.unpack_from(buf, p)
        p += 2
    else:
        tlen = buf[p]
        p += 1
    found: dict[bytes, tuple[int, bytes]] = {}
    at = p + tlen + 2
    for pair in bytes(buf[at:off + n]).split(b"\x02"):
        name, sep, value = pair.partition(b"\x01")
        if sep and name and value:
            found[name] = (at + len(name) + 1, value)
        at += len(pair) + 1
    uniq_at, uniq = found.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX.encode(), (-1, None))
    keys = found.get(PROPERTY_KEYS.encode(), (-1, None))[1]
    try:
        topic = bytes(buf[p:p + tlen]).decode("utf-8")
        uniq_s = uniq.decode("utf-8") if uniq is not None else None
        keys_s = keys.decode("utf-8") if keys is not None else None
    except UnicodeDecodeError:
        return None
    out = []
    if m.sys_flag & TRANSACTION_ROLLBACK_TYPE != TRANSACTION_ROLLBACK_TYPE:
        out = [f"{topic}#{uniq_s}"] if uniq_s is not None else []
        out += [f"{topic}#{k}" for k in (keys_s or "").split(" ") if k]
    return m.store_timestamp, uniq_at, len(uniq) if uniq is not None else 0, out
