"""Frames: RocketMQ remoting's framing, as DLedger uses it. Sans-I/O.

A frame is ``int32 length`` (bytes after this field) · ``int32 (serializeType << 24) |
headerLength`` · header JSON · body. The header holds ``code``, ``flag`` (bit 0 response,
bit 1 one-way), ``opaque`` (pairs a response with its request), ``remark``, ``extFields``
(string map), ``language`` and ``version``. What a frame's code and body mean is wire.py's
(peer and operator messages) and api.py's (client and operator requests).

Rules this module keeps:

- Decoding never raises anything but :class:`ProtocolError` (and its subclasses), whatever
  the bytes: a peer's bad frame becomes an error response or a closed connection.
- A frame longer than the configured maximum is refused as soon as its length field is
  seen, before any of it is buffered; a header longer than ``MAX_HEADER_BYTES`` and JSON
  nested deeper than ``MAX_JSON_DEPTH`` (header or body) are refused before they are parsed.
- The header's numbers (code, opaque, flag, version) are Java ints in RocketMQ: a frame
  whose numbers do not fit one is malformed.
- A response's header ``code`` is the remoting status (0 when the request was handled; its
  body then holds the DLedger response code); non-zero header codes are transport-level
  refusals with the reason in ``remark``.
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple

import msgspec

from store.format import INT64_MAX, TERM_MAX

try:  # the compiled loops of the frame layer (cluster/net/_frames.c), when built
    from . import _frames
except ImportError:  # pragma: no cover - a build without a C compiler
    _frames = None

# RocketMQ RemotingSysResponseCode, for header codes of responses
REMOTING_SUCCESS = 0
REMOTING_SYSTEM_ERROR = 1
REMOTING_SYSTEM_BUSY = 2
REMOTING_NOT_SUPPORTED = 3
REMOTING_NO_PERMISSION = 16  # ours under TLS: the connection's certificate may not do this (remark says why)

FLAG_RESPONSE = 1
FLAG_ONEWAY = 2
SERIALIZE_JSON = 0
DEFAULT_MAX_FRAME = 64 << 20
# A header holds a few short fields (a PUSH's extFields carry the member list at most): far
# below this. Kept in step with MAX_HEADER in cluster/net/_frames.c.
MAX_HEADER_BYTES = 64 << 10
# The deepest any message of DLedger's or ours nests is 3 (a Java push: object, batchEntry,
# entry); JSON deeper than this is refused before it is parsed (a parser recurses per level).
MAX_JSON_DEPTH = 32
_LEN = struct.Struct(">i")
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1  # RemotingCommand's code, opaque, flag and version are Java ints
LENGTHS = struct.Struct(">ii")


class ProtocolError(Exception):
    """A peer sent something that is not a valid frame or message."""


class FrameTooLarge(ProtocolError):
    pass


class MalformedFrame(ProtocolError):
    pass


class BadMessage(ProtocolError):
    """The frame is well formed but its fields are not the message its code names."""


class Forbidden(BadMessage):
    """The peer refused the request for the identity of this connection's certificate."""


_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_depth(data) -> int:
    """How deep the JSON ``data`` nests (objects and arrays; brackets inside strings do not
    count), read without parsing it. An unterminated string counts what follows it."""
    import numpy as np  # (here: a client that never reads a body of many brackets starts without it)

    flat = _STRINGS.sub(b"", bytes(data))
    a = np.frombuffer(flat, np.uint8)
    step = (a == 0x5B).view(np.int8) + (a == 0x7B).view(np.int8) - (a == 0x5D).view(np.int8) - (a == 0x7D).view(np.int8)
    return int(np.cumsum(step, dtype=np.int64).max(initial=0))


def check_depth(data, what: str, error=None) -> None:
    """Refuse JSON ``data`` nested deeper than MAX_JSON_DEPTH (BadMessage, or ``error``).
    Counting the brackets is enough when there are few of them (every frame's header, every
    body but a Java push or GET answer of many entries); only more are read properly."""
    if not isinstance(data, (bytes, bytearray)):
        data = bytes(data)
    if data.count(b"{") + data.count(b"[") <= MAX_JSON_DEPTH:
        return
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise (error or BadMessage)(f"{what} nests {depth} deep, above the limit of {MAX_JSON_DEPTH}")


def refusal_error(f: Frame) -> BadMessage:
    if f.code == REMOTING_NO_PERMISSION:
        return Forbidden(f"refused: {f.remark}")
    return BadMessage(f"refused by the peer (remoting code {f.code}): {f.remark}")


json_encoder = msgspec.json.Encoder()


class Frame(msgspec.Struct):
    """A frame. Decoding its header JSON makes it (msgspec), so a received frame costs one
    C call and no copy of the header's fields; ``body`` is set after (its JSON name is one
    no header holds). ``remark`` and ``ext`` are never None once decoded."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = ""
    ext: dict[str, str] | None = msgspec.field(default_factory=dict, name="extFields")
    body: bytes = msgspec.field(default=b"", name="__dledgerctl_body__")  # or a memoryview, for frames received
    # into a buffer of their own
    language: str = "PYTHON"  # (header fields of RocketMQ remoting that dledgerctl does not use)
    version: int = 0
    serializeTypeCurrentRPC: str | None = None

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)


_frame_decoder = msgspec.json.Decoder(Frame)

_HEADER = b'{"code":%d,"flag":%d,"opaque":%d,"language":"PYTHON","version":0'


def frame_head(f: Frame) -> bytes:
    """A frame's bytes up to its body: length, header length, header."""
    if f.remark:
        h = {"code": f.code, "flag": f.flag, "opaque": f.opaque, "language": "PYTHON", "version": 0,
             "remark": f.remark}
        if f.ext:
            h["extFields"] = f.ext
        header = json_encoder.encode(h)
    else:  # what encoding the dict above gives, a third faster (every frame but errors comes here)
        header = _HEADER % (f.code, f.flag, f.opaque)
        header += b',"extFields":' + json_encoder.encode(f.ext) + b"}" if f.ext else b"}"
    return LENGTHS.pack(4 + len(header) + len(f.body), (SERIALIZE_JSON << 24) | len(header)) + header


def encode_frame(f: Frame) -> bytes:
    return frame_head(f) + f.body if f.body else frame_head(f)


# frame_head's header of a response that carries neither remark nor extFields, around its opaque
RESPONSE_PRE = b'{"code":%d,"flag":%d,"opaque":' % (REMOTING_SUCCESS, FLAG_RESPONSE)
RESPONSE_POST = b',"language":"PYTHON","version":0}'
RESPONSE_HEADER = RESPONSE_PRE + b"%d" + RESPONSE_POST


def response_bytes(opaque: int, body: bytes) -> bytes:
    """A whole successful response frame around a JSON ``body``: the bytes
    ``encode_frame(Frame(REMOTING_SUCCESS, opaque, FLAG_RESPONSE, body=body))`` gives, made
    without a Frame or a header dict (a leader makes one per client append)."""
    header = RESPONSE_HEADER % opaque
    return LENGTHS.pack(4 + len(header) + len(body), (SERIALIZE_JSON << 24) | len(header)) + header + body


class FrameReceiver:
    """Bytes in, frames out, receiving straight into buffers it lends out.

    ``buffer()`` is where the next bytes go (a socket reads into it, e.g. an asyncio
    BufferedProtocol's ``get_buffer``); ``received(n)`` says how many arrived and returns the
    frames completed. Small frames are cut out of one reused chunk, their body copied once.
    A frame longer than ``BIG`` gets a buffer of its own, uninitialised and exactly its size,
    that the rest of it is received into; its body is a view of that buffer, so a push or a
    batched append of megabytes reaches the store without any copy after the kernel's.
    At most one partial frame is kept. A frame longer than ``max_frame`` is refused from its
    length field alone, before anything of it is kept.
    """

    CHUNK = 256 << 10
    BIG = 64 << 10

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = self._view = None  # made at the first bytes: an idle connection holds no buffer
        self._start = self._end = 0
        self._big: memoryview | None = None  # the frame (after its length field) being filled
        self._have = 0

    def release(self) -> None:
        """Give the receive buffer back while nothing is in it (it is made again when bytes come)."""
        if not self.partial:
            self._buf = self._view = None
            self._start = self._end = 0

    @property
    def partial(self) -> bool:
        """Part of a frame has arrived and the rest has not."""
        return self._big is not None or self._end > self._start

    def buffer(self) -> memoryview:
        if self._big is not None:
            return self._big[self._have :]
        if self._buf is None:
            self._buf = bytearray(self.CHUNK)
            self._view = memoryview(self._buf)
        if self.CHUNK - self._end < self.BIG and self._start:  # little room left: move the partial frame
            n = self._end - self._start  # (at most BIG + 4 bytes: longer ones have their own buffer)
            self._buf[:n] = bytes(self._view[self._start : self._end])  # a copy: the ranges may overlap
            self._start, self._end = 0, n
        return self._view[self._end :]

    def received(self, n: int) -> list[Frame]:
        if self._big is not None:
            self._have += n
            if self._have < len(self._big):
                return []
            big, self._big = self._big, None
            return [decode_frame_body(big, copy=False)]
        self._end += n
        out, start, error, length = _split(self._buf, self._view, self._start, self._end, self.max_frame,
                                           Frame, decode_frame_body)
        end = self._end
        if error == 1:
            err = FrameTooLarge(f"frame of {length} bytes is above the {self.max_frame}-byte limit")
            err.length = length
            raise err
        if error == 2:
            raise MalformedFrame(f"frame length {length} is too small")
        if length > self.BIG:  # the rest goes straight into a buffer of the frame's size
            have = end - start - 4
            import numpy as np  # (here: only a frame this long needs it, not a client's start)

            big = memoryview(np.empty(length, np.uint8)).cast("B")
            big[:have] = self._view[start + 4 : end]
            self._big, self._have = big, have
            start = end = 0
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        return out

    def feed(self, data) -> list[Frame]:
        """Frames completed by ``data`` (any split of the stream)."""
        out = []
        data = memoryview(data).cast("B")
        while data:
            space = self.buffer()
            n = min(len(space), len(data))
            space[:n] = data[:n]
            data = data[n:]
            out += self.received(n)
        return out


def decode_frame_body(data, *, copy: bool = True) -> Frame:
    """One frame without its leading length field. The body is a copy (``bytes``), or
    with ``copy=False`` a view of ``data``."""
    if len(data) < 4:
        raise MalformedFrame(f"frame of {len(data)} bytes has no header length")
    (mark,) = _LEN.unpack_from(data, 0)
    kind, hlen = (mark >> 24) & 0xFF, mark & 0xFFFFFF
    if kind != SERIALIZE_JSON:
        raise MalformedFrame(f"serialize type {kind} is not supported (JSON only)")
    if hlen > len(data) - 4:
        raise MalformedFrame(f"header length {hlen} exceeds the frame ({len(data) - 4} bytes)")
    if hlen > MAX_HEADER_BYTES:
        raise MalformedFrame(f"header of {hlen} bytes is above the {MAX_HEADER_BYTES}-byte limit")
    header = data[4 : 4 + hlen]
    check_depth(bytes(header), "header JSON", MalformedFrame)
    try:
        f = _frame_decoder.decode(header)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise MalformedFrame(f"bad header: {exc}") from None
    if not (_I32_MIN <= f.code <= _I32_MAX and _I32_MIN <= f.opaque <= _I32_MAX and _I32_MIN <= f.flag <= _I32_MAX
            and _I32_MIN <= f.version <= _I32_MAX):
        raise MalformedFrame("a header number (code, opaque, flag or version) is outside int32")
    if f.remark is None:
        f.remark = ""
    if f.ext is None:
        f.ext = {}
    body = data[4 + hlen :]
    f.body = bytes(body) if copy else body
    return f


def split_frames(buf, view, start: int, end: int, max_frame: int, frame_type=None, decode=None):
    """The frames complete in ``buf[start:end]`` (``view``: a memoryview of ``buf``), as
    ``(frames, start, error, length)``: where the unread bytes now start; error 0 with the
    length of the incomplete frame there (-1 when fewer than 4 bytes are left), error 1 when
    that length is above ``max_frame``, error 2 when it is below 4. The reference of
    cluster/net/_frames.c split, which FrameReceiver uses when it is built (the signature is
    that one's; ``frame_type`` and ``decode`` are Frame and decode_frame_body)."""
    out = []
    while end - start >= 4:
        (length,) = _LEN.unpack_from(buf, start)
        if length > max_frame:
            return out, start, 1, length
        if length < 4:
            return out, start, 2, length
        if end - start < 4 + length:
            return out, start, 0, length
        out.append(decode_frame_body(view[start + 4 : start + 4 + length]))
        start += 4 + length
    return out, start, 0, -1


_split = split_frames if _frames is None else _frames.split  # compiled (cluster/net/_frames.c) when built


def json_body(obj: dict) -> bytes:
    return json_encoder.encode(obj)


def json_object(body: bytes) -> dict:
    check_depth(body, "body JSON")
    try:
        obj = msgspec.json.decode(body) if body else {}
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise BadMessage(f"body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadMessage("body is not a JSON object")
    return obj


# -- the fields of a JSON body or extFields, checked against their domains -----------------

class Ints(NamedTuple):
    """The integers a field may hold: ``lo .. hi``, both included."""

    lo: int
    hi: int


TERM = Ints(0, TERM_MAX)  # a term a message is sent in: one that can be incremented
SOME_TERM = Ints(-1, TERM_MAX)  # a term or -1 for none (an empty log's last term, a hint not given)
INDEX = Ints(-1, INT64_MAX)  # a log index, or -1 for none
ENTRY_INDEX = Ints(0, INT64_MAX)  # the index of an entry
COUNT = Ints(0, 1 << 31)  # entries, bytes of a chunk, fingerprints asked for
SIZE = Ints(0, INT64_MAX)  # bytes of a whole snapshot, offsets in it
CRC = Ints(-(1 << 31), (1 << 32) - 1)  # a crc32, as Java's int or as unsigned
STATUS_CODE = Ints(-(1 << 31), (1 << 31) - 1)  # a response code (unknown ones read as UNKNOWN)


def in_range(value: int, kind: Ints, name: str) -> int:
    """``value`` when it lies in ``kind``'s range, else BadMessage naming the field."""
    if not kind.lo <= value <= kind.hi:
        raise BadMessage(f"field {name!r} is {_short(value)}, outside {kind.lo}..{kind.hi}")
    return value


def _short(value: int) -> str:
    """A number for an error message (one of thousands of digits is not printed)."""
    return str(value) if abs(value) < 10**30 else f"a number of {value.bit_length()} bits"


def get_field(obj: dict, name: str, kind, default=msgspec.NODEFAULT):
    """Field ``name`` of a decoded JSON body, of ``kind``: str, bool, list, or the integer
    domain of :class:`Ints` (a default is taken as it is). BadMessage when it is missing or
    of another type or range."""
    value = obj.get(name, default)
    if value is msgspec.NODEFAULT:
        raise BadMessage(f"missing field {name!r}")
    if type(kind) is Ints:
        if name not in obj:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadMessage(f"field {name!r} must be an integer")
        return in_range(value, kind, name)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise BadMessage(f"field {name!r} must be an integer")
    if kind is str and value is not None and not isinstance(value, str):
        raise BadMessage(f"field {name!r} must be a string")
    if kind is bool and not isinstance(value, bool):
        raise BadMessage(f"field {name!r} must be true or false")
    if kind is list and not isinstance(value, list):
        raise BadMessage(f"field {name!r} must be a list")
    return value


def ext_int(ext: dict, name: str, kind: Ints) -> int:
    try:
        text = ext[name]
    except KeyError:
        raise BadMessage(f"missing extField {name!r}") from None
    # (int() would take "1_000", " 7" and thousands of digits: a wire number is plain)
    if not (0 < len(text) <= 20 and (text.isdigit() or (text[0] == "-" and text[1:].isdigit()))) or not text.isascii():
        raise BadMessage(f"extField {name!r} is not an integer: {text[:40]!r}")
    return in_range(int(text), kind, f"extFields.{name}")


# Header codes of a handled request: dledgerctl answers 0 (RemotingSysResponseCode.SUCCESS),
# Java DLedger 200 (its DLedgerResponseCode.SUCCESS); either way the body holds the outcome.
HANDLED = (REMOTING_SUCCESS, 200)


def error_frame(opaque: int, code: int, remark: str) -> Frame:
    return Frame(code, opaque, FLAG_RESPONSE, remark)
