"""What a client writes and reads back: the frames of the requests of api.py (dledgerctl's
APPEND made whole without a Frame: the hot path of every producer), and the answers decoded
(an APPEND's rows read when first used, a binary GET answer's entries). Sans-I/O; the wire
forms are described in api.py.
"""

from __future__ import annotations

import base64
import struct

import msgspec

from store.format import ENTRY_HEADER, HEADER_SIZE

from ..raft.rpc import split_entries
from .answers import AppendAnswer, EntryRow, append_answer
from .api import (
    ChangeMembers,
    Digests,
    DLedgerAppend,
    DLedgerGet,
    ForceCompare,
    ForceTruncate,
    Get,
    Metadata,
    Query,
    ReadIndex,
    SnapshotRead,
    Watermarks,
)
from .frames import (
    COUNT,
    HANDLED,
    INDEX,
    LENGTHS,
    SERIALIZE_JSON,
    BadMessage,
    Frame,
    in_range,
    json_body,
    json_encoder,
    refusal_error,
)
from .wire import (
    APPEND,
    CHANGE_MEMBERS,
    DIGESTS,
    FORCE_COMPARE,
    FORCE_TRUNCATE,
    GET,
    HEART_BEAT,
    LEADERSHIP_TRANSFER,
    QUERY,
    READ_INDEX,
    SNAPSHOT_READ,
    WATERMARKS,
)

def decode_append_answer(f: Frame) -> AppendAnswer:
    """The answer to an APPEND (answers.AppendAnswer; its rows read when first used);
    BadMessage if it does not fit."""
    if f.code not in HANDLED:
        raise refusal_error(f)
    return append_answer(f.body)


_BODY_LEN = struct.Struct(">i")


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
    return json_encoder.encode({"group": group, "count": str(count)})


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
    head = LENGTHS.pack(4 + len(header) + len(sizes) + blen, (SERIALIZE_JSON << 24) | len(header)) + header + sizes
    if blen < JOIN_BELOW:
        return [b"".join([head, *bodies])]
    if n > _PARTS_MAX:
        return [head, b"".join(bodies)]
    return [head, *bodies]


# -- GET answers as their bytes ------------------------------------------------------------------

def is_raw(f: Frame) -> bool:
    return f.ext.get("raw") == "1"


def decode_raw_answer(f: Frame, typed: bool = False) -> dict:
    """A binary GET answer as the client's answer dict: ``code``, ``term``, ``leaderId`` and
    ``entries`` (what the JSON form's entries are, with ``body`` as bytes already; with
    ``typed``, answers.EntryRows). BadMessage for an answer whose entries do not parse or do
    not match its count."""
    try:
        count = in_range(int(f.ext.get("count", "")), COUNT, "count")
        term = int(f.ext.get("term", "-1"))
        code = int(f.ext.get("code", ""))
    except ValueError:
        raise BadMessage("binary GET answer: count, term and code must be integers") from None
    entries = raw_entries(f.body) if typed else raw_rows(f.body)
    if len(entries) != count:
        raise BadMessage(f"binary GET answer says {count} entries and holds {len(entries)}")
    return {"code": code, "term": term, "leaderId": f.ext.get("leaderId"), "entries": entries}


def raw_rows(raw) -> list[dict]:
    """The entries of ``raw`` as DLedger's entry objects (the JSON form's fields), bodies as
    bytes. BadMessage when they do not parse (split_entries' checks: sizes, magics, indexes
    one after another)."""
    return [{"body": body, "bodyCrc": bcrc, "chainCrc": chain, "channel": channel, "index": index, "magic": magic,
             "pos": pos, "size": size, "term": term}
            for index, term, pos, size, magic, body, bcrc, chain, channel in _raw_fields(raw)]


def raw_entries(raw) -> list[EntryRow]:
    """The entries of ``raw`` as answers.EntryRows; BadMessage as :func:`raw_rows`."""
    return [EntryRow(*fields) for fields in _raw_fields(raw)]


def _raw_fields(raw):
    """Each entry of ``raw``: (index, term, pos, size, magic, body, body CRC, chain CRC, channel)."""
    try:
        spans = split_entries(raw)
    except ValueError as exc:
        raise BadMessage(f"binary GET answer: {exc}") from None
    mv = memoryview(raw)
    for off, size, index, term in spans:
        magic, _size, _index, _term, pos, channel, chain, bcrc, _bsize = ENTRY_HEADER.unpack_from(raw, off)
        in_range(index, INDEX, "index")
        yield index, term, pos, size, magic, bytes(mv[off + HEADER_SIZE:off + size]), bcrc, chain, channel


# -- the frames a client sends ------------------------------------------------------------------

_encoder = msgspec.json.Encoder()


def _body(req, remote_id: str | None) -> bytes:
    """The JSON body of a request, with DLedger's field names."""
    t = type(req)
    if t is Metadata:
        return json_body({"group": req.group, "remoteId": req.remote_id})
    if t is Get:
        return json_body({"group": req.group, "remoteId": req.remote_id, "index": req.index, "count": req.count,
                          "consistency": req.consistency, "raw": req.raw})
    if t is DLedgerGet:  # (as DLedger's own client writes it)
        return _encoder.encode({"beginIndex": req.begin_index, "code": 200, "group": req.group, "maxSize": 0,
                                "remoteId": req.remote_id, "term": -1})
    if t is DLedgerAppend:
        return _encoder.encode({"body": req.body, "code": 200, "group": req.group, "remoteId": req.remote_id,
                                "term": -1})
    if t is Query:
        return json_body({"group": req.group, "remoteId": remote_id, "query": base64.b64encode(req.query).decode("ascii"),
                          "consistency": req.consistency})
    if t is ReadIndex or t is Watermarks:
        return json_body({"group": req.group})
    if t is Digests:
        return json_body({"group": req.group, "remoteId": req.remote_id, "first": req.first, "count": req.count})
    if t is SnapshotRead:
        return json_body({"group": req.group, "remoteId": req.remote_id, "index": req.index, "offset": req.offset,
                          "length": req.length})
    if t is ForceCompare:
        return json_body({"group": req.group, "peer": req.peer, "deep": req.deep, "dryRun": req.dry_run})
    if t is ForceTruncate:
        return json_body({"group": req.group, "peer": req.peer, "fromIndex": req.from_index})
    if t is ChangeMembers:
        body = {"group": req.group, "kind": req.kind, "id": req.node}
        if req.address is not None:
            body["address"] = req.address
        return json_body(body)
    raise TypeError(f"not a client request with a JSON body: {t.__name__}")


_CODES = {Get: GET, DLedgerGet: GET, DLedgerAppend: APPEND, Query: QUERY, ReadIndex: READ_INDEX,
          Watermarks: WATERMARKS, ForceCompare: FORCE_COMPARE, ForceTruncate: FORCE_TRUNCATE,
          ChangeMembers: CHANGE_MEMBERS, Digests: DIGESTS, SnapshotRead: SNAPSHOT_READ}


def code_of(req) -> int:
    return req.code if type(req) is Metadata else _CODES[type(req)]


def request_frame(req, remote_id: str | None = None) -> Frame:
    """The frame of a client or operator request (dledgerctl's APPEND is
    append_request: its hot path makes no Frame). ``remote_id``: the member asked, for a
    QUERY (the others carry it in the request)."""
    return Frame(code_of(req), body=_body(req, remote_id))


def transfer_frame(group: str, leader: str, target: str, term: int) -> Frame:
    """A client's LEADERSHIP_TRANSFER to ``leader``, as DLedger's LeadershipTransferRequest
    (which dledgerctl members read too: wire.py decodes it as a peer request)."""
    return Frame(LEADERSHIP_TRANSFER, body=json_body({
        "group": group, "remoteId": leader, "leaderId": leader, "transferId": leader, "transfereeId": target,
        "term": term, "take": False}))


def term_probe_frame(group: str, peer: str, sender: str) -> Frame:
    """A HEART_BEAT of term -1 to a Java DLedger node, in ``sender``'s name: it changes
    nothing and is answered EXPIRED_TERM with the node's term (its METADATA does not say it)."""
    return Frame(HEART_BEAT, body=json_body({"group": group, "remoteId": peer, "leaderId": sender,
                                             "localId": sender, "term": -1, "code": 200}))
