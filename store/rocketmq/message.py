"""A RocketMQ message as the commit log stores it: the body of one DLedger entry. Pure.

Layout (big-endian; names and offsets are RocketMQ's, ``MessageDecoder`` and
``CommitLog.calMsgLength``)::

    0  TOTALSIZE i32        4  MAGICCODE i32        8  BODYCRC i32      12 QUEUEID i32
    16 FLAG i32             20 QUEUEOFFSET i64      28 PHYSICALOFFSET i64
    36 SYSFLAG i32          40 BORNTIMESTAMP i64    48 BORNHOST (4+4, or 16+4 with BORNHOST_V6)
       STORETIMESTAMP i64   STOREHOST (4+4, or 16+4 with STOREHOSTADDRESS_V6)
       RECONSUMETIMES i32   PREPAREDTRANSACTIONOFFSET i64   BODYLENGTH i32 + BODY
       TOPICLENGTH i8 (i16 with the V2 magic of RocketMQ 5) + TOPIC
       PROPERTIESLENGTH i16 + PROPERTIES ("name\\x01value\\x02" pairs)

Rules kept here:

- :func:`decode` never reads outside the bytes it is given and never raises anything but
  :class:`NotAMessage`, whose text says what does not fit (a no-op entry, a config entry,
  a body of another kind, or a damaged message are all just "not a message").
- Only what is asked for is built: :func:`decode` makes the fixed fields, the topic and
  the property map; the body stays in the buffer (``body_at``, ``body_size``) until
  :func:`body_of` copies (and, when compressed, inflates) it, never past a limit
  (RocketMQ's ``maxMessageSize``, 4 MiB, unless the caller asks for more): a crafted body
  that inflates further is a NotAMessage (BodyTooLarge), never memory.
- Values keep RocketMQ's meaning: BODYCRC is ``crc32(body) & 0x7fffffff`` (``UtilAll.crc32``)
  of the body as stored (compressed, when it is); a consume queue's tag code is Java's
  ``String.hashCode()`` of TAGS (:func:`tags_code`); the message id is the store host's
  address and port and the PHYSICALOFFSET, in upper-case hex (``createMessageId``).
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from dataclasses import dataclass, field

from ..format import crc32

MESSAGE_MAGIC_CODE = -626843481  # MessageDecoder.MESSAGE_MAGIC_CODE (RocketMQ 4.x, MessageVersion V1)
MESSAGE_MAGIC_CODE_V2 = -626843477  # MessageVersion.MESSAGE_VERSION_V2 (RocketMQ 5: the topic length is an i16)
MAGICS = {MESSAGE_MAGIC_CODE: "v1", MESSAGE_MAGIC_CODE_V2: "v2"}

QUEUE_OFFSET_POSITION = 20  # MessageDecoder.QUEUE_OFFSET_POSITION
PHY_POS_POSITION = 28  # MessageDecoder.PHY_POS_POSITION
SYSFLAG_POSITION = 36  # MessageDecoder.SYSFLAG_POSITION
BORNHOST_POSITION = 48
# the bytes of a message with IPv4 hosts, an empty body, topic and properties (calMsgLength)
MIN_SIZE = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2

# MessageSysFlag
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOSTADDRESS_V6_FLAG = 0x1 << 5
COMPRESSION_TYPE_COMPARATOR = 0x7 << 8  # 1 LZ4, 2 ZSTD, 3 (or 0, before RocketMQ 5) ZLIB
TRANSACTIONS = {0: "", TRANSACTION_PREPARED_TYPE: "prepared", TRANSACTION_COMMIT_TYPE: "commit",
                TRANSACTION_ROLLBACK_TYPE: "rollback"}

# MessageDecoder.NAME_VALUE_SEPARATOR / PROPERTY_SEPARATOR; MessageConst property names
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # MessageStoreConfig.maxMessageSize: the most a body is inflated to here

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_FIXED = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
_V4_HOST = struct.Struct(">4si")
_V6_HOST = struct.Struct(">16si")
_AFTER_HOSTS = struct.Struct(">iqi")  # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLENGTH
_I64 = struct.Struct(">q")


class NotAMessage(ValueError):
    """The bytes are not a RocketMQ message (the text says what does not fit)."""


class BodyTooLarge(NotAMessage):
    """A compressed body inflates past the limit asked for (the text says which)."""


@dataclass(slots=True)
class Message:
    """One message's fields; the body stays where it was (``body_at`` in the buffer)."""

    size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phy_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_tx_offset: int
    body_at: int  # where the body starts in the buffer decoded
    body_size: int
    topic: str
    properties: dict = field(default_factory=dict)
    store_host_raw: bytes = b""  # address and port as stored: the message id's first part

    @property
    def version(self) -> str:
        return MAGICS[self.magic]

    @property
    def msg_id(self) -> str:
        return msg_id(self.store_host_raw, self.phy_offset)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def transaction(self) -> str:
        return TRANSACTIONS[self.sys_flag & TRANSACTION_ROLLBACK_TYPE]

    @property
    def compressed(self) -> bool:
        return bool(self.sys_flag & COMPRESSED_FLAG)

    def tags_code(self) -> int:
        """What the consume queue records for this message's tags (0 without tags); a delay
        message's records its delivery time instead (see check.py)."""
        return tags_code(self.tags)


def decode(buf, off: int = 0, length: int | None = None) -> Message:
    """The message at ``buf[off:]``. ``length``: the bytes that hold exactly one message
    (a DLedger entry's body), which TOTALSIZE must equal; without it, TOTALSIZE says where
    the message ends (within the buffer). NotAMessage when the bytes are not one."""
    n = len(buf) - off if length is None else min(length, len(buf) - off)
    if n < MIN_SIZE:
        raise NotAMessage(f"{n} bytes, fewer than the {MIN_SIZE} of the smallest message")
    size, magic, bcrc, queue_id, flag, qoff, phy, sys_flag, born_ts = _FIXED.unpack_from(buf, off)
    if magic not in MAGICS:
        raise NotAMessage(f"magic code {magic} is not a message's")
    if size < MIN_SIZE or size > n or (length is not None and size != length):
        raise NotAMessage(f"TOTALSIZE {size} does not fit the {n} bytes there")
    stop = off + size
    p = off + BORNHOST_POSITION
    born, p = _host(buf, p, sys_flag & BORNHOST_V6_FLAG, stop)
    if p + 8 > stop:
        raise NotAMessage("the message ends inside its fields")
    (store_ts,) = _I64.unpack_from(buf, p)
    store_at = p + 8
    store, p = _host(buf, store_at, sys_flag & STOREHOSTADDRESS_V6_FLAG, stop)
    if p + _AFTER_HOSTS.size > stop:
        raise NotAMessage("the message ends inside its fields")
    reconsume, prepared, body_size = _AFTER_HOSTS.unpack_from(buf, p)
    body_at = p + _AFTER_HOSTS.size
    if body_size < 0 or body_at + body_size > stop:
        raise NotAMessage(f"BODYLENGTH {body_size} does not fit the message")
    p = body_at + body_size
    if magic == MESSAGE_MAGIC_CODE_V2:
        if p + 2 > stop:
            raise NotAMessage("the message ends before its topic")
        (topic_len,) = _I16.unpack_from(buf, p)
        p += 2
    else:
        if p + 1 > stop:
            raise NotAMessage("the message ends before its topic")
        topic_len = buf[p]  # (RocketMQ 4 reads it as a signed byte: topics are at most 127 bytes)
        p += 1
    if topic_len < 0 or p + topic_len + 2 > stop:
        raise NotAMessage(f"TOPICLENGTH {topic_len} does not fit the message")
    topic = bytes(buf[p:p + topic_len]).decode("utf-8", "replace")
    p += topic_len
    (props_len,) = _I16.unpack_from(buf, p)
    p += 2
    if props_len < 0 or p + props_len != stop:
        raise NotAMessage(f"PROPERTIESLENGTH {props_len} does not end the message at TOTALSIZE {size}")
    props = parse_properties(bytes(buf[p:p + props_len]).decode("utf-8", "replace")) if props_len else {}
    return Message(size, magic, bcrc, queue_id, flag, qoff, phy, sys_flag, born_ts, born, store_ts, store,
                   reconsume, prepared, body_at, body_size, topic, props, bytes(buf[store_at:store_at + _host_len(
                       sys_flag & STOREHOSTADDRESS_V6_FLAG)]))


def _host_len(v6: int) -> int:
    return 20 if v6 else 8


def _host(buf, p: int, v6: int, stop: int) -> tuple[str, int]:
    st = _V6_HOST if v6 else _V4_HOST
    if p + st.size > stop:
        raise NotAMessage("the message ends inside its fields")
    addr, port = st.unpack_from(buf, p)
    return format_host(addr, port), p + st.size


def format_host(addr: bytes, port: int) -> str:
    if len(addr) == 4:
        return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}:{port}"
    return f"[{ipaddress.IPv6Address(addr).compressed}]:{port}"


def parse_properties(text: str) -> dict:
    """RocketMQ's ``string2messageProperties``: pairs split by \\x02, name and value by the
    first \\x01; a pair with an empty name or value is skipped, a later name wins."""
    out = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        name, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out[name] = value
    return out


def format_properties(props: dict) -> str:
    """``messageProperties2String``: each pair as name \\x01 value \\x02."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


def msg_id(store_host_raw: bytes, phy_offset: int) -> str:
    """``MessageDecoder.createMessageId``: store host address, port and commit-log offset, in hex."""
    return (store_host_raw + _I64.pack(phy_offset)).hex().upper()


def tags_code(tags: str | None) -> int:
    """``tagsString2tagsCode``: Java's ``String.hashCode()`` of the tags (0 when none), as
    the signed int a consume queue unit holds (widened to its i64)."""
    if not tags:
        return 0
    h = 0
    units = tags.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def body_crc(body) -> int:
    """``UtilAll.crc32``: what BODYCRC holds for ``body`` (as stored: compressed, when it is)."""
    return crc32(body) & 0x7FFFFFFF


def body_of(buf, m: Message, *, inflate: bool = True, limit: int = MAX_MESSAGE_SIZE) -> bytes:
    """The message's body; with ``inflate``, a compressed one uncompressed, never past
    ``limit`` bytes (NotAMessage when it does not inflate, is truncated, or would inflate
    past ``limit``: BodyTooLarge)."""
    raw = bytes(buf[m.body_at:m.body_at + m.body_size])
    if not (inflate and m.sys_flag & COMPRESSED_FLAG and raw):
        return raw
    return decompress(raw, m.sys_flag, limit)


def decompress(raw: bytes, sys_flag: int, limit: int = MAX_MESSAGE_SIZE) -> bytes:
    """``raw`` inflated as SYSFLAG says (RocketMQ 5's compression type bits; RocketMQ 4:
    zlib), streamed and never past ``limit`` bytes of output: what a crafted body (a
    "decompression bomb") costs is bounded by ``limit``, not by what it declares.

    LZ4 and ZSTD bodies may hold several frames back to back (the Java streams read on
    into the next frame): all are inflated, up to MAX_FRAMES of them (more: NotAMessage),
    by one decompressor, in work linear in ``raw``. A body that ends inside a frame is
    refused (NotAMessage saying it is truncated), never shown as what its first part
    inflates to."""
    kind = (sys_flag & COMPRESSION_TYPE_COMPARATOR) >> 8
    name = _COMPRESSION.get(kind)
    if name is None:
        raise NotAMessage(f"compression type {kind} is not LZ4, ZSTD or ZLIB")
    try:
        out = _INFLATERS[name](raw, limit)
    except (NotAMessage, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - each library raises its own kind
        raise NotAMessage(f"the compressed body does not inflate ({name}): {exc}") from None
    if out is None:
        raise BodyTooLarge(f"the {name} body inflates past {limit} bytes, the limit for a body (maxMessageSize)")
    return out


def _truncated(name: str, got: int) -> NotAMessage:
    where = "its stream" if name == "zlib" else "a frame"
    return NotAMessage(f"the {name} body is truncated: it ends inside {where} ({got} bytes inflated before it ends)")


def _zlib(raw: bytes, limit: int) -> bytes | None:
    # Java's Deflater output, zlib-wrapped: one stream (InflaterInputStream stops at its end)
    d = zlib.decompressobj()
    out = d.decompress(raw, limit + 1)
    if len(out) > limit:
        return None
    if not d.eof:
        raise _truncated("zlib", len(out))
    return out


# A body holds one frame as RocketMQ's compressors write it (LZ4FrameOutputStream and
# ZstdOutputStream, one stream per body); several back to back are read on as the Java
# streams do, up to this many. A bound of ours: 9-byte empty zstd frames would otherwise
# make a 4 MiB body half a million frames of bookkeeping that inflate to nothing.
MAX_FRAMES = 1024
_FIRST_STEP = 64  # input fed to a frame's first call; doubled per call while the frame goes on


def _too_many_frames(name: str) -> NotAMessage:
    return NotAMessage(f"the {name} body holds more than {MAX_FRAMES} frames (RocketMQ's producer writes one)")


def _lz4(raw: bytes, limit: int) -> bytes | None:
    # LZ4's frame format (LZ4FrameOutputStream); frames back to back are one body. (Imported
    # here, as before: a Spark executor without lz4 still reads every other message.)
    # One decompressor, reset between frames; the input is fed from a view in steps that
    # start small and double, so a frame's end leaves at most one step to feed again: the
    # work is linear in the body however many frames it holds.
    import lz4.frame
    d = lz4.frame.LZ4FrameDecompressor()
    view, parts, total, at, frames = memoryview(raw), [], 0, 0, 0
    while at < len(raw):
        frames += 1
        if frames > MAX_FRAMES:
            raise _too_many_frames("lz4")
        if frames > 1:
            d.reset()
        step = _FIRST_STEP
        while not d.eof:
            if d.needs_input:
                if at >= len(raw):
                    raise _truncated("lz4", total)
                chunk = view[at:at + step]
                at += len(chunk)
                step = min(step * 2, 1 << 20)
            else:  # (input held back by the output bound: go on with it)
                chunk = b""
            part = d.decompress(chunk, max_length=limit - total + 1)
            total += len(part)
            if total > limit:
                return None
            parts.append(part)
        at -= len(d.unused_data or b"")  # (the next frame's first bytes came with this frame's last step)
    return b"".join(parts)


_ZSTD_BLOCK = 128 << 10  # zstd's largest block (ZSTD_BLOCKSIZE_MAX): what a few input bytes can inflate to


def _zstd(raw: bytes, limit: int) -> bytes | None:
    # A zstd frame (ZstdOutputStream), or several back to back (ZstdInputStream reads on).
    # zstandard's decompressobj takes no output cap, so the input goes in small steps: a
    # block costs at least 3 input bytes and yields at most _ZSTD_BLOCK, so a step of at
    # most ``3 * (room // _ZSTD_BLOCK)`` bytes (at least 48) overshoots the room by at most
    # ~2 MiB. One decompression context for the body (a decompressobj per frame resets it);
    # steps fed from a view, as _lz4 feeds them, keep the work linear in the body.
    import zstandard  # (here for the reason _lz4 gives)
    dctx = zstandard.ZstdDecompressor()
    view, parts, total, at, frames = memoryview(raw), [], 0, 0, 0
    while at < len(raw):
        frames += 1
        if frames > MAX_FRAMES:
            raise _too_many_frames("zstd")
        d = dctx.decompressobj()
        step = _FIRST_STEP
        while not d.eof:
            if at >= len(raw):
                raise _truncated("zstd", total)
            chunk = view[at:at + min(step, max(48, 3 * ((limit - total) // _ZSTD_BLOCK)))]
            at += len(chunk)
            step *= 2
            part = d.decompress(chunk)
            total += len(part)
            if total > limit:
                return None
            parts.append(part)
        at -= len(d.unused_data)
    return b"".join(parts)


_INFLATERS = {"zlib": _zlib, "lz4": _lz4, "zstd": _zstd}
_COMPRESSION = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}


def compression_of(sys_flag: int) -> str | None:
    """The compression of a body with this SYSFLAG, or None when it is not compressed."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    return _COMPRESSION.get((sys_flag & COMPRESSION_TYPE_COMPARATOR) >> 8, "unknown")
