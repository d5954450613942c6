"""GET answers in dledgerctl's binary form: the entries as they lie in the data files (48-byte
header, then the body, one after another: what a PUSH carries), not DLedger's JSON objects
with base64 bodies. A dledgerctl client asks for it (``"raw": true`` in its GET); DLedger's own
client never does, and a node that does not know the field answers in JSON, which the client
reads too.

The answer's extFields: ``code`` (SUCCESS; refusals are JSON, as ever), ``raw`` "1",
``count`` (entries in the body), ``term`` and ``leaderId`` (the answering node's).
"""

from __future__ import annotations

from store.format import ENTRY_HEADER, HEADER_SIZE

from .frames import FLAG_RESPONSE, BadMessage, Frame
from ..raft.rpc import Code, split_entries
from .wire import COUNT, INDEX, in_range


def answer_frame(opaque: int, request_code: int, raw, count: int, term: int, leader: str | None) -> Frame:
    """A node's binary GET answer of ``count`` entries ``raw``."""
    ext = {"code": str(int(Code.SUCCESS)), "raw": "1", "count": str(count), "term": str(term)}
    if leader is not None:
        ext["leaderId"] = leader
    return Frame(request_code, opaque, FLAG_RESPONSE, ext=ext, body=bytes(raw))


def is_raw(f: Frame) -> bool:
    return f.ext.get("raw") == "1"


def decode_answer(f: Frame) -> dict:
    """A binary GET answer as the client's answer dict: ``code``, ``term``, ``leaderId`` and
    ``entries`` (what the JSON form's entries are, with ``body`` as bytes already).
    BadMessage for an answer whose entries do not parse or do not match its count."""
    try:
        count = in_range(int(f.ext.get("count", "")), COUNT, "count")
        term = int(f.ext.get("term", "-1"))
        code = int(f.ext.get("code", ""))
    except ValueError:
        raise BadMessage("binary GET answer: count, term and code must be integers") from None
    entries = rows(f.body)
    if len(entries) != count:
        raise BadMessage(f"binary GET answer says {count} entries and holds {len(entries)}")
    return {"code": code, "term": term, "leaderId": f.ext.get("leaderId"), "entries": entries}


def rows(raw) -> list[dict]:
    """The entries of ``raw`` as DLedger's entry objects (the JSON form's fields), bodies as
    bytes. BadMessage when they do not parse (split_entries' checks: sizes, magics, indexes
    one after another)."""
    try:
        spans = split_entries(raw)
    except ValueError as exc:
        raise BadMessage(f"binary GET answer: {exc}") from None
    mv = memoryview(raw)
    out = []
    for off, size, index, term in spans:
        magic, _size, _index, _term, pos, channel, chain, bcrc, _bsize = ENTRY_HEADER.unpack_from(raw, off)
        in_range(index, INDEX, "index")
        out.append({"body": bytes(mv[off + HEADER_SIZE:off + size]), "bodyCrc": bcrc, "chainCrc": chain,
                    "channel": channel, "index": index, "magic": magic, "pos": pos, "size": size, "term": term})
    return out
