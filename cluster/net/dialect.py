"""DLedger's own message bodies: what a Java DLedger process sends and expects. Sans-I/O.

Java DLedger (0.2.x) puts every request and response in the frame's body as one JSON
object, written by fastjson from its protocol classes: the base fields ``group``,
``remoteId`` (the member the request is for), ``localId``, ``leaderId``, ``term`` and
``code``, then the message's own. Entries travel as JSON objects (``DLedgerEntry``: magic,
size, index, term, pos, channel, chainCrc, bodyCrc, body in base64). Its responses carry
header code 200 (dledgerctl's carry 0); the outcome is the body's ``code``.

Client requests in DLedger's form (AppendEntryRequest, GetEntriesRequest, MetadataRequest)
are api.py's, beside dledgerctl's own; this module is the peers' half. Towards a Java peer, a dledgerctl
member speaks this dialect for PUSH (cluster/node/process.py ``frame_for``); its VOTE, HEART_BEAT
and LEADERSHIP_TRANSFER bodies carry the fields both read (cluster/net/wire.py).
"""

from __future__ import annotations

import base64
import struct

import msgspec

from store.format import ENTRY_HEADER, HEADER_SIZE

from ..raft.rpc import PushRequest, PushType
from .frames import ENTRY_INDEX, INDEX, TERM, BadMessage, check_depth, in_range

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


_encoder = msgspec.json.Encoder()


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
