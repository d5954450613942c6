"""DLedger's own message bodies: what a Java DLedger process sends and expects. Sans-I/O.

Java DLedger (0.2.x) puts every request and response in the frame's body as one JSON
object, written by fastjson from its protocol classes: the base fields ``group``,
``remoteId`` (the member the request is for), ``localId``, ``leaderId``, ``term`` and
``code``, then the message's own. Entries travel as JSON objects (``DLedgerEntry``: magic,
size, index, term, pos, channel, chainCrc, bodyCrc, body in base64). Its responses carry
header code 200 (dledgerctl's carry 0); the outcome is the body's ``code``.

dledgerctl's own client requests differ (APPEND: bodies packed in the frame's body, their
count in extFields; GET: ``index``/``count``); a dledgerctl node tells DLedger's from its
own by their fields and answers each in its own form. Towards a Java peer, a dledgerctl
member speaks this dialect for PUSH (cluster/node/process.py ``_frame_for``); its VOTE, HEART_BEAT
and LEADERSHIP_TRANSFER bodies carry the fields both read (cluster/net/wire.py).
"""

from __future__ import annotations

import base64
import struct

import msgspec

from store.format import ENTRY_HEADER, HEADER_SIZE

from .frames import BadMessage, check_depth
from .wire import ENTRY_INDEX, INDEX, TERM, in_range

DLEDGER_RESPONSE_HEADER = 200  # the header code of every Java DLedger response


class Entry(msgspec.Struct, omit_defaults=False):
    """DLedgerEntry as JSON (field names are DLedger's; ``body`` is base64 on the wire)."""

    index: int = -1
    term: int = -1
    pos: int = -1
    magic: int = 1
    size: int = 0
    channel: int = 0
    chainCrc: int = 0
    bodyCrc: int = 0
    body: bytes | None = None


class ClientRequest(msgspec.Struct):
    """The fields of DLedger's AppendEntryRequest, GetEntriesRequest and MetadataRequest."""

    group: str | None = None
    remoteId: str | None = None
    body: bytes | None = None  # APPEND
    beginIndex: int | None = None  # GET
    maxSize: int = 0
    indexList: list[int] | None = None


_client_request = msgspec.json.Decoder(ClientRequest)
_encoder = msgspec.json.Encoder()


def client_request(body) -> ClientRequest:
    """A DLedger client request body; BadMessage when it is not one."""
    check_depth(body, "body JSON")
    try:
        req = _client_request.decode(body or b"{}")
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise BadMessage(f"not a DLedger request body: {exc}") from None
    if req.beginIndex is not None:
        in_range(req.beginIndex, INDEX, "beginIndex")
    return req


def encode(obj) -> bytes:
    return _encoder.encode(obj)


# -- entries: raw on-disk bytes <-> DLedger's JSON ----------------------------------------

def entry_object(raw, off: int = 0) -> dict:
    """The entry at ``raw[off:]`` (on-disk bytes) as DLedger's JSON object."""
    magic, size, index, term, pos, channel, chain, bcrc, bsize = ENTRY_HEADER.unpack_from(raw, off)
    body = bytes(raw[off + HEADER_SIZE: off + HEADER_SIZE + bsize])
    return {"body": base64.b64encode(body).decode("ascii"), "bodyCrc": bcrc, "chainCrc": chain, "channel": channel,
            "index": index, "magic": magic, "pos": pos, "size": size, "term": term}


def entry_bytes(e: Entry) -> bytes:
    """DLedger's JSON entry as on-disk bytes, as Java DLedger encodes one (its size is the
    header plus the body it carries, whatever ``size`` says)."""
    body = e.body or b""
    return ENTRY_HEADER.pack(e.magic, HEADER_SIZE + len(body), e.index, e.term, e.pos, e.channel, e.chainCrc,
                             e.bodyCrc, len(body)) + body


def store_entry_object(e) -> dict:
    """A store entry (store.format.Entry) as DLedger's JSON object."""
    return {"body": base64.b64encode(e.body).decode("ascii"), "bodyCrc": e.body_crc, "chainCrc": e.chain_crc,
            "channel": e.channel, "index": e.index, "magic": e.magic, "pos": e.pos, "size": e.size, "term": e.term}


_I32 = struct.Struct(">i")


def packed_one(body: bytes) -> bytes:
    """One body as dledgerctl's packed APPEND body (its size, then the bytes)."""
    return _I32.pack(len(body)) + body


# -- peer requests towards and from Java members -------------------------------------------

class PushBody(msgspec.Struct):
    """DLedger's PushEntryRequest as it arrives (fields it sends that say nothing new, such
    as ``count`` or ``firstEntryIndex``, which it derives from the entries, are ignored)."""

    group: str = ""
    leaderId: str = ""
    remoteId: str | None = None
    term: int = -1
    type: str = "APPEND"
    commitIndex: int = -1
    entry: Entry | None = None
    batchEntry: list[Entry] = []


_push_body = msgspec.json.Decoder(PushBody)


def decode_push(body):
    """A Java leader's PUSH as a cluster/raft/rpc.py PushRequest: its JSON entries become the
    on-disk bytes a dledgerctl follower writes. A TRUNCATE from DLedger makes its entry the
    follower's last, writing it when the follower does not hold it: that is dledgerctl's cut
    back (``begin_index`` = the entry). BadMessage when it is not a push."""
    from ..raft.rpc import PushRequest, PushType
    check_depth(body, "body JSON")
    try:
        p = _push_body.decode(body)
        kind = PushType(p.type)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, ValueError) as exc:
        raise BadMessage(f"not a DLedger push: {exc}") from None
    in_range(p.term, TERM, "term")
    in_range(p.commitIndex, INDEX, "commitIndex")
    entries = p.batchEntry or ([p.entry] if p.entry is not None else [])
    if kind == PushType.COMMIT:
        entries = []
    try:
        raw = b"".join(entry_bytes(e) for e in entries)
    except struct.error as exc:  # a field out of its on-disk type's range
        raise BadMessage(f"not a DLedger push: an entry does not fit the on-disk format ({exc})") from None
    first = in_range(entries[0].index, ENTRY_INDEX, "entry.index") if entries else -1
    begin = first if kind == PushType.TRUNCATE else -1
    return PushRequest(p.group, p.leaderId, p.term, kind, p.commitIndex, first, len(entries), raw, begin)


def push_body(req, to: str, raw_entries: list) -> bytes:
    """A PushRequest as DLedger's JSON for member ``to``: one entry as ``entry``, more as
    ``batchEntry`` (which DLedger 0.2.x followers take whatever their own push setting);
    ``raw_entries``: (offset, size) of each entry in ``req.entries``."""
    out = {"code": 200, "commitIndex": req.commit_index, "group": req.group, "leaderId": req.leader_id,
           "localId": req.leader_id, "remoteId": to, "term": req.term, "type": str(req.type)}
    objs = [entry_object(req.entries, off) for off, _size in raw_entries]
    if len(objs) == 1:
        out["entry"] = objs[0]
    elif objs:
        out["batchEntry"] = objs
    return encode(out)
