"""APPEND's bodies and the answers made of entries, on the wire (split from api.py).

An APPEND's body is ``count`` int32 body sizes, then the bodies one after another (a packed
run, store/packed.py), so a leader hands the frame's body to the store as it is; its answer
is JSON with one row ``[index, term, pos, size]`` per body, made once per proposal
(:func:`append_answers`, compiled in cluster/net/_frames.c). A GET's entries go back as
DLedger's JSON objects (:func:`store_entry_object`) or as their bytes
(:func:`raw_answer_frame`). Sans-I/O.
"""

from __future__ import annotations

import base64
import itertools
import struct

from store.base import AppendedRun, appended_rows

from ..raft.rpc import Code
from .frames import FLAG_RESPONSE, RESPONSE_POST, RESPONSE_PRE, BadMessage, Frame, json_body, response_bytes

try:  # the compiled loops (cluster/net/_frames.c), when built
    from . import _frames
except ImportError:  # pragma: no cover - a build without a C compiler
    _frames = None

MAX_APPEND_COUNT = 1 << 20
_BODY_LEN = struct.Struct(">i")


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


def packed_one(body: bytes) -> bytes:
    """One body as dledgerctl's packed APPEND body (its size, then the bytes)."""
    return _BODY_LEN.pack(len(body)) + body


def append_answers(head: bytes, waiters: list, appended) -> list[bytes]:
    """The whole answer frame of each APPEND of a proposal: ``waiters`` are (conn, opaque,
    start, n), ``appended`` what the store says it stored, and each answer's body is
    ``head`` (the JSON object up to ``"entries":``), the rows ``[index, term, pos, size]``
    of entries ``start`` to ``start + n - 1``, and ``}``. A leader makes one per client
    append: a proposal the compiled lanes stored as one run (AppendedRun, one term) is
    answered by cluster/net/_frames.c without a tuple or an int object per entry; the Python
    below is what it does."""
    if _frames is not None and type(appended) is AppendedRun and type(appended.terms) is int:
        return _frames.append_answers(RESPONSE_PRE, RESPONSE_POST, head, waiters, appended.first,
                                      appended.terms, appended.pos, appended.ends)
    rows = appended_rows(appended)
    return [response_bytes(opaque, head + json_body(rows[start:start + n]) + b"}") for _r, opaque, start, n in waiters]


def store_entry_object(e) -> dict:
    """A store entry (store.format.Entry) as DLedger's JSON object (a GET answer's entry)."""
    return {"body": base64.b64encode(e.body).decode("ascii"), "bodyCrc": e.body_crc, "chainCrc": e.chain_crc,
            "channel": e.channel, "index": e.index, "magic": e.magic, "pos": e.pos, "size": e.size, "term": e.term}


def raw_answer_frame(opaque: int, request_code: int, raw, count: int, term: int, leader: str | None) -> Frame:
    """A node's binary GET answer of ``count`` entries ``raw``."""
    ext = {"code": str(int(Code.SUCCESS)), "raw": "1", "count": str(count), "term": str(term)}
    if leader is not None:
        ext["leaderId"] = leader
    return Frame(request_code, opaque, FLAG_RESPONSE, ext=ext, body=bytes(raw))
