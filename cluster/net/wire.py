"""Frames on the wire: RocketMQ remoting framing with DLedger's request codes. Sans-I/O.

A frame is ``int32 length`` (bytes after this field) · ``int32 (serializeType << 24) |
headerLength`` · header JSON · body. The header holds ``code``, ``flag`` (bit 0 response,
bit 1 one-way), ``opaque`` (pairs a response with its request), ``remark``, ``extFields``
(string map), ``language`` and ``version``.

Rules this module keeps:

- Decoding never raises anything but :class:`ProtocolError` (and its subclasses), whatever
  the bytes: a peer's bad frame becomes an error response or a closed connection.
- A frame longer than the configured maximum is refused as soon as its length field is
  seen, before any of it is buffered; a header longer than ``MAX_HEADER_BYTES`` and JSON
  nested deeper than ``MAX_JSON_DEPTH`` (header or body) are refused before they are parsed.
- Every number a message carries is checked against its field's domain where it is
  decoded (:class:`Ints`: terms, indexes, counts, sizes), so nothing past the decoder meets
  a term that cannot be incremented or an index the log format cannot store.
- Requests carry DLedger's codes (METADATA 50000 ... LEADERSHIP_TRANSFER 51005); our operator
  requests use 52000 and up. A response's header ``code`` is the remoting status (0 when
  the request was handled; its body then holds the DLedger response code); non-zero
  header codes are transport-level refusals with the reason in ``remark``.
- PUSH carries its scalar fields in ``extFields`` and the entries as raw on-disk bytes in the
  body, so a follower writes what it receives without re-encoding; every other message
  is a JSON object body with DLedger's field names.
"""

from __future__ import annotations

import base64
import itertools
import re
import struct
from typing import NamedTuple, Sequence

import msgspec
import numpy as np

from store.base import AppendedRun, appended_rows
from store.format import INT64_MAX, TERM_MAX

try:  # the compiled loops of this module (cluster/net/_frames.c), when built
    from . import _frames
except ImportError:  # pragma: no cover - a build without a C compiler
    _frames = None

from ..raft.rpc import (
    Code,
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    ProbeRequest,
    ProbeResponse,
    PushRequest,
    PushResponse,
    PushType,
    RepairRequest,
    RepairResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)

# DLedgerRequestCode
METADATA = 50000
APPEND = 50001
GET = 50002
VOTE = 51001
HEART_BEAT = 51002
PULL = 51003
PUSH = 51004
LEADERSHIP_TRANSFER = 51005
INSTALL_SNAPSHOT = 51006  # DLedger HEAD's code; ours is sent in chunks (cluster/raft/rpc.py InstallSnapshotRequest)
# ours (operator requests), a range of their own
STATUS = 52000  # = METADATA
WATERMARKS = 52001  # operator -> leader: per-peer replication state
FORCE_COMPARE = 52002  # operator -> leader: find where a follower's log differs, repair it
FORCE_TRUNCATE = 52003  # operator -> leader: cut a follower's suffix, the leader re-fills it
PROBE = 52004  # leader -> follower: entry fingerprints (cluster/raft/rpc.py ProbeRequest)
REPAIR = 52005  # leader -> follower: forced truncation (cluster/raft/rpc.py RepairRequest)
QUERY = 52006  # client -> a node: ask its state machine (cluster/raft/statemachine.py), once it has applied what was committed
CHANGE_MEMBERS = 52007  # operator -> leader: add a learner, or remove a member (cluster/raft/membership.py)
OPERATOR_CODES = (WATERMARKS, FORCE_COMPARE, FORCE_TRUNCATE)

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
_HDR = struct.Struct(">ii")


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


_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_depth(data) -> int:
    """How deep the JSON ``data`` nests (objects and arrays; brackets inside strings do not
    count), read without parsing it. An unterminated string counts what follows it."""
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


def _refused(f: Frame) -> BadMessage:
    if f.code == REMOTING_NO_PERMISSION:
        return Forbidden(f"refused: {f.remark}")
    return BadMessage(f"refused by the peer (remoting code {f.code}): {f.remark}")


_encoder = msgspec.json.Encoder()


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
        header = _encoder.encode(h)
    else:  # what encoding the dict above gives, a third faster (every frame but errors comes here)
        header = _HEADER % (f.code, f.flag, f.opaque)
        header += b',"extFields":' + _encoder.encode(f.ext) + b"}" if f.ext else b"}"
    return _HDR.pack(4 + len(header) + len(f.body), (SERIALIZE_JSON << 24) | len(header)) + header


def encode_frame(f: Frame) -> bytes:
    return frame_head(f) + f.body if f.body else frame_head(f)


# frame_head's header of a response that carries neither remark nor extFields, around its opaque
_RESPONSE_PRE = b'{"code":%d,"flag":%d,"opaque":' % (REMOTING_SUCCESS, FLAG_RESPONSE)
_RESPONSE_POST = b',"language":"PYTHON","version":0}'
_RESPONSE_HEADER = _RESPONSE_PRE + b"%d" + _RESPONSE_POST


def response_bytes(opaque: int, body: bytes) -> bytes:
    """A whole successful response frame around a JSON ``body``: the bytes
    ``encode_frame(Frame(REMOTING_SUCCESS, opaque, FLAG_RESPONSE, body=body))`` gives, made
    without a Frame or a header dict (a leader makes one per client append)."""
    header = _RESPONSE_HEADER % opaque
    return _HDR.pack(4 + len(header) + len(body), (SERIALIZE_JSON << 24) | len(header)) + header + body


def append_answers(head: bytes, waiters: list, appended) -> list[bytes]:
    """The whole answer frame of each APPEND of a proposal: ``waiters`` are (conn, opaque,
    start, n), ``appended`` what the store says it stored, and each answer's body is
    ``head`` (the JSON object up to ``"entries":``), the rows ``[index, term, pos, size]``
    of entries ``start`` to ``start + n - 1``, and ``}``. A leader makes one per client
    append: a proposal the compiled lanes stored as one run (AppendedRun, one term) is
    answered by cluster/net/_frames.c without a tuple or an int object per entry; the Python
    below is what it does."""
    if _frames is not None and type(appended) is AppendedRun and type(appended.terms) is int:
        return _frames.append_answers(_RESPONSE_PRE, _RESPONSE_POST, head, waiters, appended.first,
                                      appended.terms, appended.pos, appended.ends)
    rows = appended_rows(appended)
    return [response_bytes(opaque, head + json_body(rows[start:start + n]) + b"}") for _r, opaque, start, n in waiters]


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


FrameDecoder = FrameReceiver


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


# -- messages <-> frames ------------------------------------------------------------------

def json_body(obj: dict) -> bytes:
    return _encoder.encode(obj)


def json_object(body: bytes) -> dict:
    check_depth(body, "body JSON")
    try:
        obj = msgspec.json.decode(body) if body else {}
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise BadMessage(f"body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadMessage("body is not a JSON object")
    return obj


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


def _ext_int(ext: dict, name: str, kind: Ints) -> int:
    try:
        text = ext[name]
    except KeyError:
        raise BadMessage(f"missing extField {name!r}") from None
    # (int() would take "1_000", " 7" and thousands of digits: a wire number is plain)
    if not (0 < len(text) <= 20 and (text.isdigit() or (text[0] == "-" and text[1:].isdigit()))) or not text.isascii():
        raise BadMessage(f"extField {name!r} is not an integer: {text[:40]!r}")
    return in_range(int(text), kind, f"extFields.{name}")


def request_frame(req, opaque: int, to: str | None = None) -> Frame:
    """A peer request (cluster/raft/rpc.py) as a frame; ``to``: the member it is for, named in
    the body as ``remoteId`` (Java DLedger refuses a VOTE or HEART_BEAT that does not name it)."""
    if isinstance(req, PushRequest):
        ext = {"group": req.group, "leaderId": req.leader_id, "term": str(req.term), "type": str(req.type),
               "commitIndex": str(req.commit_index), "firstEntryIndex": str(req.first_index),
               "count": str(req.count)}
        if req.begin_index >= 0:
            ext["beginIndex"] = str(req.begin_index)
        if req.config_at:
            ext["configAt"] = ",".join(map(str, req.config_at))
        if req.members:
            ext["members"] = bytes(req.members).decode()
        body = req.entries  # (a view of a leader's remembered writes is sent as it is)
        return Frame(PUSH, opaque, ext=ext, body=body if isinstance(body, (bytes, memoryview)) else bytes(body))
    if isinstance(req, InstallSnapshotRequest):
        # the chunk and the leader's first entry as they are, one after the other (no base64)
        ext = {"group": req.group, "leaderId": req.leader_id, "term": str(req.term), "index": str(req.index),
               "snapTerm": str(req.snap_term), "size": str(req.size), "crc": str(req.crc),
               "offset": str(req.offset), "dataLength": str(len(req.data))}
        if req.members:
            ext["members"] = bytes(req.members).decode()
        return Frame(INSTALL_SNAPSHOT, opaque, ext=ext, body=bytes(req.data) + bytes(req.begin_entry))
    if isinstance(req, VoteRequest):
        return Frame(VOTE, opaque, body=json_body({
            "group": req.group, "remoteId": to, "leaderId": req.leader_id, "term": req.term,
            "ledgerEndIndex": req.ledger_end_index, "ledgerEndTerm": req.ledger_end_term,
            "preVote": req.pre_vote, "takeLeadership": req.take_leadership}))
    if isinstance(req, HeartBeatRequest):
        return Frame(HEART_BEAT, opaque, body=json_body({"group": req.group, "remoteId": to, "leaderId": req.leader_id,
                                                          "term": req.term}))
    if isinstance(req, LeadershipTransferRequest):
        body = {"group": req.group, "remoteId": to, "leaderId": req.leader_id, "transfereeId": req.transferee,
                "term": req.term, "take": req.take}
        if req.take:  # as DLedger's leader asks its transferee (LeadershipTransferRequest)
            body.update(transferId=req.leader_id, localId=req.leader_id, takeLeadershipLedgerIndex=req.end_index)
        return Frame(LEADERSHIP_TRANSFER, opaque, body=json_body(body))
    if isinstance(req, ProbeRequest):
        return Frame(PROBE, opaque, body=json_body({"group": req.group, "leaderId": req.leader_id, "term": req.term,
                                                    "first": req.first, "count": req.count}))
    if isinstance(req, RepairRequest):
        return Frame(REPAIR, opaque, body=json_body({"group": req.group, "leaderId": req.leader_id, "term": req.term,
                                                     "fromIndex": req.from_index}))
    raise TypeError(f"not a peer request: {type(req).__name__}")


def decode_request(f: Frame):
    """A peer request frame as a cluster/raft/rpc.py request; BadMessage if it is not one."""
    if f.code == PUSH:
        e = f.ext
        try:
            kind = PushType(e.get("type", ""))
        except ValueError:
            raise BadMessage(f"unknown push type {e.get('type')!r}") from None
        count = _ext_int(e, "count", COUNT)
        config_at = ()
        if e.get("configAt"):
            parts = e["configAt"].split(",")
            if len(parts) > count:
                raise BadMessage(f"extField 'configAt' names {len(parts)} entries of a push of {count}")
            config_at = tuple(_ext_int({"configAt": x}, "configAt", INDEX) for x in parts)
        return PushRequest(e.get("group", ""), e.get("leaderId", ""), _ext_int(e, "term", TERM), kind,
                           _ext_int(e, "commitIndex", INDEX), _ext_int(e, "firstEntryIndex", INDEX), count, f.body,
                           _ext_int(e, "beginIndex", INDEX) if "beginIndex" in e else -1, config_at,
                           e.get("members", "").encode())
    if f.code == INSTALL_SNAPSHOT:
        e = f.ext
        n = _ext_int(e, "dataLength", SIZE)
        if not 0 <= n <= len(f.body):
            raise BadMessage(f"dataLength {n} does not fit a body of {len(f.body)} bytes")
        body = bytes(f.body)
        return InstallSnapshotRequest(e.get("group", ""), e.get("leaderId", ""), _ext_int(e, "term", TERM),
                                      _ext_int(e, "index", INDEX), _ext_int(e, "snapTerm", SOME_TERM),
                                      _ext_int(e, "size", SIZE), _ext_int(e, "crc", CRC), _ext_int(e, "offset", SIZE),
                                      body[:n], body[n:], e.get("members", "").encode())
    o = json_object(f.body)
    if f.code == VOTE:
        return VoteRequest(get_field(o, "group", str), get_field(o, "leaderId", str), get_field(o, "term", TERM),
                           get_field(o, "ledgerEndIndex", INDEX), get_field(o, "ledgerEndTerm", SOME_TERM),
                           get_field(o, "preVote", bool, False), get_field(o, "takeLeadership", bool, False))
    if f.code == HEART_BEAT:
        return HeartBeatRequest(get_field(o, "group", str), get_field(o, "leaderId", str), get_field(o, "term", TERM))
    if f.code == LEADERSHIP_TRANSFER:
        # DLedger's leader asks its transferee with the same request, sent to the transferee
        theirs = o.get("remoteId") is not None and o.get("remoteId") == o.get("transfereeId")
        return LeadershipTransferRequest(get_field(o, "group", str), get_field(o, "leaderId", str),
                                         get_field(o, "transfereeId", str), get_field(o, "term", TERM),
                                         get_field(o, "take", bool, theirs),
                                         get_field(o, "takeLeadershipLedgerIndex", INDEX, -1))
    if f.code == PROBE:
        return ProbeRequest(get_field(o, "group", str), get_field(o, "leaderId", str), get_field(o, "term", TERM),
                            get_field(o, "first", INDEX), get_field(o, "count", COUNT))
    if f.code == REPAIR:
        return RepairRequest(get_field(o, "group", str), get_field(o, "leaderId", str), get_field(o, "term", TERM),
                             get_field(o, "fromIndex", ENTRY_INDEX))
    raise BadMessage(f"request code {f.code} is not a peer request")


def response_frame(resp, opaque: int, request_code: int) -> Frame:
    if isinstance(resp, VoteResponse):
        body = {"term": resp.term, "voteResult": str(resp.vote_result), "code": int(resp.code)}
    elif isinstance(resp, HeartBeatResponse):
        body = {"term": resp.term, "code": int(resp.code), "leaderId": resp.leader_id}
    elif isinstance(resp, PushResponse):
        body = {"term": resp.term, "code": int(resp.code), "index": resp.index, "count": resp.count,
                "beginIndex": resp.begin_index, "endIndex": resp.end_index, "xTerm": resp.x_term,
                "xIndex": resp.x_index, "remark": resp.remark}
    elif isinstance(resp, LeadershipTransferResponse):
        body = {"term": resp.term, "code": int(resp.code), "remark": resp.remark}
    elif isinstance(resp, ProbeResponse):
        body = {"term": resp.term, "code": int(resp.code), "beginIndex": resp.begin_index,
                "endIndex": resp.end_index, "committedIndex": resp.committed_index, "first": resp.first,
                "terms": list(resp.terms), "chains": list(resp.chains), "digests": list(resp.digests),
                "remark": resp.remark}
    elif isinstance(resp, RepairResponse):
        body = {"term": resp.term, "code": int(resp.code), "dropped": resp.dropped, "endIndex": resp.end_index,
                "committedIndex": resp.committed_index, "remark": resp.remark}
    elif isinstance(resp, InstallSnapshotResponse):
        body = {"term": resp.term, "code": int(resp.code), "received": resp.received, "installed": resp.installed,
                "beginIndex": resp.begin_index, "endIndex": resp.end_index, "remark": resp.remark}
    elif isinstance(resp, dict):
        body = resp
    else:
        raise TypeError(f"not a response: {type(resp).__name__}")
    return Frame(REMOTING_SUCCESS, opaque, FLAG_RESPONSE, body=json_body(body))


# Header codes of a handled request: dledgerctl answers 0 (RemotingSysResponseCode.SUCCESS),
# Java DLedger 200 (its DLedgerResponseCode.SUCCESS); either way the body holds the outcome.
HANDLED = (REMOTING_SUCCESS, 200)


def _code(o: dict) -> Code:
    try:
        return Code(get_field(o, "code", STATUS_CODE))
    except ValueError:
        return Code.UNKNOWN


def decode_response(f: Frame, request_code: int):
    """The response to a request of ``request_code``; BadMessage if it does not fit."""
    if f.code not in HANDLED:
        raise _refused(f)
    o = json_object(f.body)
    if request_code == VOTE:
        try:
            result = VoteResult(get_field(o, "voteResult", str))
        except ValueError:
            result = VoteResult.UNKNOWN
        return VoteResponse(get_field(o, "term", SOME_TERM), result, _code(o))
    if request_code == HEART_BEAT:
        return HeartBeatResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "leaderId", str, None))
    if request_code == PUSH:
        return PushResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "index", INDEX, -1),
                            get_field(o, "count", COUNT, 0), get_field(o, "beginIndex", INDEX, -1),
                            get_field(o, "endIndex", INDEX, -1), get_field(o, "xTerm", SOME_TERM, -1),
                            get_field(o, "xIndex", INDEX, -1), get_field(o, "remark", str, ""))
    if request_code == LEADERSHIP_TRANSFER:
        return LeadershipTransferResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "remark", str, ""))
    if request_code == PROBE:
        lists = [get_field(o, k, list, []) for k in ("terms", "chains", "digests")]
        if len({len(x) for x in lists}) != 1 or not all(isinstance(v, int) and not isinstance(v, bool)
                                                        for x in lists for v in x):
            raise BadMessage("probe answer: terms, chains and digests must be integer lists of one length")
        for name, values, kind in zip(("terms", "chains", "digests"), lists, (SOME_TERM, CRC, CRC)):
            if values and not kind.lo <= min(values) <= max(values) <= kind.hi:
                raise BadMessage(f"probe answer: a value of {name!r} is outside {kind.lo}..{kind.hi}")
        return ProbeResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "beginIndex", INDEX, -1),
                             get_field(o, "endIndex", INDEX, -1), get_field(o, "committedIndex", INDEX, -1),
                             get_field(o, "first", INDEX, -1), *map(tuple, lists), get_field(o, "remark", str, ""))
    if request_code == INSTALL_SNAPSHOT:
        return InstallSnapshotResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "received", SIZE, 0),
                                       get_field(o, "installed", bool, False), get_field(o, "beginIndex", INDEX, -1),
                                       get_field(o, "endIndex", INDEX, -1), get_field(o, "remark", str, ""))
    if request_code == REPAIR:
        return RepairResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "dropped", SIZE, 0),
                              get_field(o, "endIndex", INDEX, -1), get_field(o, "committedIndex", INDEX, -1),
                              get_field(o, "remark", str, ""))
    return o


class _AppendAnswer(msgspec.Struct):
    code: int = -1
    term: int = -1
    leaderId: str | None = None
    remark: str | None = ""
    entries: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


_append_answer_decoder = msgspec.json.Decoder(_AppendAnswer)
_rows_decoder = msgspec.json.Decoder(list[list[int]])


class AnswerRows(Sequence):
    """The ``entries`` of an APPEND answer, ``[index, term, pos, size]`` per body, read
    from their JSON when first used. A client that only waits for the acknowledgement
    (a producer, the benchmark) never builds the rows, which at 64 bodies were most of
    decoding an answer (3.0 us now, 10.5 with the rows). Equal to the list of rows."""

    __slots__ = ("_raw", "_rows")

    def __init__(self, raw: bytes) -> None:
        self._raw, self._rows = raw, None

    def _list(self) -> list:
        if self._rows is None:
            try:
                rows = _rows_decoder.decode(self._raw)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
                raise BadMessage(f"APPEND answer: entries do not fit: {exc}") from None
            if any(len(r) != 4 for r in rows):
                raise BadMessage("APPEND answer: an entry is not [index, term, pos, size]")
            self._rows = rows
        return self._rows

    def __len__(self) -> int:
        return len(self._list())

    def __getitem__(self, i):
        return self._list()[i]

    def __iter__(self):
        return iter(self._list())

    def __eq__(self, other) -> bool:
        if isinstance(other, AnswerRows):
            other = other._list()
        return self._list() == other if isinstance(other, list) else NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return repr(self._list())


def decode_append_answer(f: Frame) -> dict:
    """The answer to an APPEND: ``code``, ``term``, ``leaderId``, ``remark`` and, when the
    leader sent them, ``entries`` (:class:`AnswerRows`); BadMessage if it does not fit."""
    if f.code not in HANDLED:
        raise _refused(f)
    try:
        a = _append_answer_decoder.decode(f.body or b"{}")
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:  # (too deep: msgspec recurses)
        raise BadMessage(f"APPEND answer does not fit: {exc}") from None
    out = {"code": a.code, "term": a.term, "leaderId": a.leaderId, "remark": a.remark}
    if a.entries is not msgspec.UNSET:
        out["entries"] = AnswerRows(a.entries)
    return out


def error_frame(opaque: int, code: int, remark: str) -> Frame:
    return Frame(code, opaque, FLAG_RESPONSE, remark)


def request_code_of(req) -> int:
    return {PushRequest: PUSH, VoteRequest: VOTE, HeartBeatRequest: HEART_BEAT,
            LeadershipTransferRequest: LEADERSHIP_TRANSFER, ProbeRequest: PROBE, RepairRequest: REPAIR,
            InstallSnapshotRequest: INSTALL_SNAPSHOT}[type(req)]


# -- client requests (APPEND, GET, METADATA) ---------------------------------------------
# APPEND: extFields group, count; body = ``count`` int32 body sizes, then the bodies one
# after another (so the sizes are read in one call, not one per body).
# Response body JSON: code, term, leaderId, index (first), entries [[index, term, pos, size]].
# GET: JSON {"group", "index", "count"}; response JSON with entries [{index, term, pos, magic,
# body (base64)}].

MAX_APPEND_COUNT = 1 << 20
_BODY_LEN = struct.Struct(">i")
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1  # RemotingCommand's code, opaque, flag and version are Java ints


def pack_bodies(bodies) -> bytes:
    bodies = list(bodies)
    if len(bodies) == 1:
        return _BODY_LEN.pack(len(bodies[0])) + bodies[0]
    return b"".join([struct.pack(f">{len(bodies)}i", *map(len, bodies)), *bodies])


_APPEND_HEAD = b'{"code":%d,"flag":0,"opaque":' % APPEND
_APPEND_MID = b',"language":"PYTHON","version":0,"extFields":'
JOIN_BELOW = 16 << 10  # bodies smaller than this are copied behind their head; larger are written as they are
_PARTS_MAX = 64  # more bodies than this are joined into one part (one copy, as pack_bodies makes)


def append_ext(group: str, count: int) -> bytes:
    """The extFields JSON of an APPEND of ``count`` bodies, for :func:`append_request`."""
    return _encoder.encode({"group": group, "count": str(count)})


def append_request(opaque: int, ext_json: bytes, bodies) -> list:
    """A whole APPEND request frame, as the parts to write one after the other: the bytes
    ``encode_frame(Frame(APPEND, opaque, ext=ext, body=pack_bodies(bodies)))`` gives, where
    ``ext_json`` is :func:`append_ext`'s encoding of ``ext``. A client's hot path: no Frame,
    no header dict, and the bodies are copied at most once (not at all when large)."""
    n = len(bodies)
    if n == 1:
        blen = len(bodies[0])
        sizes = _BODY_LEN.pack(blen)
    else:
        lens = [len(b) for b in bodies]
        blen = sum(lens)
        sizes = struct.pack(f">{n}i", *lens)
    header = b"%b%d%b%b}" % (_APPEND_HEAD, opaque, _APPEND_MID, ext_json)
    head = _HDR.pack(4 + len(header) + len(sizes) + blen, (SERIALIZE_JSON << 24) | len(header)) + header + sizes
    if blen < JOIN_BELOW:
        return [b"".join([head, *bodies])]
    if n > _PARTS_MAX:
        return [head, b"".join(bodies)]
    return [head, *bodies]


def unpack_bodies(data, count: int) -> list:
    """The bodies of an APPEND (zero-copy views of ``data``); BadMessage, as
    :func:`check_bodies` says it, if they do not add up to exactly ``count`` bodies
    filling the frame. (A leader does not cut them: it hands the frame to the store.)"""
    check_bodies(data, count)
    view = memoryview(data)
    if count == 1:
        return [view[4:]]
    ends = list(itertools.accumulate(struct.unpack_from(f">{count}i", data), initial=4 * count))
    return list(map(view.__getitem__, map(slice, ends[:-1], ends[1:])))


def check_bodies(data, count: int) -> int:
    """The largest body of an APPEND whose ``data`` holds ``count`` bodies (their sizes,
    then the bodies: a packed run, store.packed); BadMessage saying what is wrong if they
    do not add up to exactly ``count`` bodies filling the frame. Makes nothing per body:
    a leader hands the frame to the store as it is."""
    if not 0 < count <= MAX_APPEND_COUNT:
        raise BadMessage(f"APPEND count {count} is not 1-{MAX_APPEND_COUNT}")
    if count == 1 and len(data) >= 4:
        size = _BODY_LEN.unpack_from(data)[0]
        if size != len(data) - 4:
            raise BadMessage(f"APPEND body size {size} does not match the {len(data) - 4} bytes the frame carries")
        return size
    if _frames is not None:
        largest = _frames.check_bodies(data, count)
        if largest >= 0:
            return largest
    return max(_body_sizes(data, count))


def _body_sizes(data, count: int) -> tuple:
    """The size table of an APPEND of ``count`` (> 1) bodies, or BadMessage saying what is wrong with it."""
    table = 4 * count
    if len(data) < table:
        raise BadMessage(f"APPEND of {count} bodies has {len(data)} bytes, too few for its size table")
    sizes = struct.unpack_from(f">{count}i", data)
    if min(sizes) < 0 or sum(sizes) != len(data) - table:
        raise BadMessage(f"APPEND body sizes add up to {sum(sizes)}, the frame carries {len(data) - table} "
                         f"bytes of bodies" if min(sizes) >= 0 else "APPEND has a negative body size")
    return sizes


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
