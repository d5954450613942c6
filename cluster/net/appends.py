"""A client's APPEND on the wire: the request (bodies packed behind a table of their
sizes, so a leader hands the frame's body to the store as it is) and its answer (one row
``[index, term, pos, size]`` per body). Both sides are hot paths: a client makes a request
and a leader an answer per append, without a Frame or a dict per body.

APPEND: extFields ``group``, ``count``; body = ``count`` int32 body sizes, then the bodies one
after another. Response body JSON: ``code``, ``term``, ``leaderId``, ``remark`` and on
success ``entries``. DLedger's own AppendEntryRequest (one body, base64 in JSON) is
dialect.py's.
"""

from __future__ import annotations

import itertools
import struct
from typing import Sequence

import msgspec

from store.base import AppendedRun, appended_rows

from .frames import (
    HANDLED,
    LENGTHS,
    RESPONSE_POST,
    RESPONSE_PRE,
    SERIALIZE_JSON,
    BadMessage,
    Frame,
    json_body,
    json_encoder,
    refusal_error,
    response_bytes,
)
from .wire import APPEND

try:  # the compiled loops (cluster/net/_frames.c), when built
    from . import _frames
except ImportError:  # pragma: no cover - a build without a C compiler
    _frames = None

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
        raise refusal_error(f)
    try:
        a = _append_answer_decoder.decode(f.body or b"{}")
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:  # (too deep: msgspec recurses)
        raise BadMessage(f"APPEND answer does not fit: {exc}") from None
    out = {"code": a.code, "term": a.term, "leaderId": a.leaderId, "remark": a.remark}
    if a.entries is not msgspec.UNSET:
        out["entries"] = AnswerRows(a.entries)
    return out


MAX_APPEND_COUNT = 1 << 20
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
