"""What a client does to append to and read from a Java DLedger node, which takes one body
per APPEND and answers one entry per GET (client.py calls these for a member it found to
be Java; the answers look like a dledgerctl node's)."""

from __future__ import annotations

import asyncio

from ..raft.rpc import Code
from . import api
from .answers import AppendAnswer
from .api_client import request_frame
from .wire import APPEND, GET

SUCCESS = int(Code.SUCCESS)


class PartlyAppended(Exception):
    """Some of the bodies are in a Java leader's log, then one was refused: one line says how
    many and why (the client raises it as an AppendError whose outcome is unknown)."""

    def __init__(self, message: str, code: Code) -> None:
        super().__init__(message)
        self.code = code


async def append(call, group: str, leader: str, bodies: list[bytes], deadline: float) -> AppendAnswer:
    """Append on Java leader ``leader`` of ``group``: the bodies one after another (so they
    land in order), each sent with ``call(peer, frame, code, timeout)`` (Client._call). A
    refusal of the first is the answer; of a later one, :class:`PartlyAppended`."""
    loop = asyncio.get_running_loop()
    rows, resp = [], {}
    for body in bodies:
        frame = request_frame(api.DLedgerAppend(group, leader, body))
        resp = await call(leader, frame, APPEND, max(0.05, deadline - loop.time()))
        if resp.get("code") != SUCCESS:
            if rows:  # some are in: neither a retry nor "failed" is right
                rc = resp.get("code", -1)
                code = Code(rc) if rc in Code._value2member_map_ else Code.UNKNOWN
                raise PartlyAppended(f"{leader}: {len(rows)} of {len(bodies)} entries appended (the last at index "
                                     f"{rows[-1][0]}), then {code.name} {resp.get('remark') or ''}".strip(), code)
            return _answer(resp, None)
        rows.append([resp.get("index", -1), resp.get("term", -1), resp.get("pos", -1), 48 + len(body)])
    return _answer(resp, rows)


def _answer(resp: dict, rows: list | None) -> AppendAnswer:
    code, term, leader = resp.get("code", -1), resp.get("term", -1), resp.get("leaderId")
    return AppendAnswer(code if isinstance(code, int) else -1, term if isinstance(term, int) else -1,
                        leader if isinstance(leader, str) else None, str(resp.get("remark") or ""), rows)


async def get(call, group: str, peer: str, index: int, count: int, timeout: float) -> dict:
    """Entries ``index..index + count - 1`` from Java node ``peer``, which answers one per GET
    (GetEntriesRequest): asked all at once, the answer is the run of entries up to the first
    that is refused, or the first refusal when it is the first entry. (A Java node answers
    with entries it holds, committed or not, and only as leader.) ``call`` as :func:`append` takes it."""
    async def one(i):
        return await call(peer, request_frame(api.DLedgerGet(group, peer, i)), GET, timeout)

    # the first alone: at the end of the log (a follower polling) one GET is refused, not
    # a page of them (Java DLedger logs each refusal with its stack trace)
    first = await one(index)
    answers = [first] + (await asyncio.gather(*(one(index + k) for k in range(1, count)))
                         if count > 1 and first.get("code") == SUCCESS else [])
    entries = []
    for k, a in enumerate(answers):
        got = a.get("entries") or []
        if a.get("code") != SUCCESS or len(got) != 1 or got[0].index != index + k:
            if not entries:
                return a if a.get("code") != SUCCESS else {**a, "code": int(Code.INDEX_OUT_OF_RANGE)}
            break
        entries.append(got[0])
    return {"code": SUCCESS, "entries": entries}
