"""Linearizable reads of a node, through :class:`ReadServing`, a base of the Node
(cluster/node/process.py): GET and QUERY with ``"consistency": "linearizable"`` (what
dledgerctl's client asks by default) are answered only after a read index is confirmed
(cluster/raft/reads.py): on the leader by a heartbeat round to a majority; on a follower by
asking the leader for one (READ_INDEX) and waiting until it holds (GET: committed; QUERY:
applied) that far. A node that cannot confirm answers NOT_LEADER, with the leader when it
knows it, or TIMEOUT; the client then asks the leader.

``"consistency": "serializable"`` answers from the asked node's own state at once, as every
read did before (and as DLedger's own GetEntriesRequest is always answered).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from ..net.frames import FLAG_RESPONSE, BadMessage, Frame, ProtocolError, json_body, json_object
from ..net.repeats import held_back
from ..net.transport import TransportError
from ..net.wire import INDEX, READ_INDEX, get_field, response_frame
from ..raft.member import Role
from ..raft.rpc import Code

LINEARIZABLE, SERIALIZABLE = "linearizable", "serializable"
log = logging.getLogger("dledgerctl.node")


def consistency_of(o: dict, default: str = LINEARIZABLE) -> str:
    """The ``consistency`` a read asks for (BadMessage when it is neither)."""
    value = get_field(o, "consistency", str, default)
    if value not in (LINEARIZABLE, SERIALIZABLE):
        raise BadMessage(f"consistency must be {LINEARIZABLE} or {SERIALIZABLE}, not {value!r}")
    return value


class ReadServing:
    """Read indexes for linearizable reads (a base of Node: core, store, applier, channels,
    loop, and Serving's _refusal)."""

    async def _read_index(self) -> tuple[Code, int, str | None, str]:
        """A confirmed read index: (SUCCESS, index, None, "") or (code, -1, leader hint, why not)."""
        core, timeout = self.core, self.cfg.max_wait_ack_ms / 1000
        if core.member.role == Role.LEADER:
            r = core.read_index(self.now())
            if not r.done:  # (the core ends every read: confirmed, timed out, or leadership lost)
                r.ctx = fut = self.loop.create_future()
                self._read_round_soon()
                await fut
            return r.code, r.index, r.leader_id, r.remark
        leader = core.member.leader_id
        ch = self.channels.get(leader) if leader else None
        if ch is None:
            return Code.NOT_LEADER, -1, None, "no leader known to ask for a read index"
        try:
            frame = await ch.request(Frame(READ_INDEX, body=json_body({"group": self.cfg.group})), timeout)
            o = json_object(frame.body)
            code = get_field(o, "code", int)
            index = get_field(o, "index", INDEX, -1)
        except (TransportError, ProtocolError) as exc:  # (no answer, or one that does not decode)
            return Code.NOT_LEADER, -1, leader, f"{leader} gave no read index: {exc}"
        if code != Code.SUCCESS:
            return Code(code) if code in Code._value2member_map_ else Code.UNKNOWN, -1, \
                get_field(o, "leaderId", str, None), get_field(o, "remark", str, "")
        return Code.SUCCESS, index, None, ""

    def _linearizable(self, f: Frame, answer, applied: bool, conn=None):
        """The answer to a linearizable read: ``answer()`` (a Frame) once a read index is
        confirmed, and with ``applied`` once the state machine has applied that far; a
        refusal Frame when it cannot be. On the leader, the answer is a Frame now or, with
        the request's connection ``conn``, None: the request is held on it and answered when
        its round is confirmed (no future, no task per read: reads are a hot path). On a
        follower (or without ``conn``), an awaitable."""
        core = self.core
        if core.member.role != Role.LEADER:
            return self._linearizable_here(f, answer, applied)
        joined, after = self._read_join
        r = core.read_index(self.now(), joined if conn is not None and conn.read_seq <= after else 0)
        if r.code is not None:
            return self._after_read(f, r.code, r.index, r.leader_id, r.remark, answer, applied)
        if conn is None:
            r.ctx = fut = self.loop.create_future()
            self._read_round_soon()
            return self._held_then(fut, r, f, answer, applied)
        r.ctx = (conn, f, answer, applied)
        conn.hold()
        if core.read_round_due:
            if core.read_rounds:
                self._read_round_soon()
            else:  # (none out: begin one now, and the reads this socket read brought with it join it)
                self._process()
        return None

    async def _held_then(self, fut, r, f: Frame, answer, applied: bool) -> Frame:
        await fut
        out = self._after_read(f, r.code, r.index, r.leader_id, r.remark, answer, applied)
        return out if isinstance(out, Frame) else await out

    def _read_round_soon(self) -> None:
        """The read just registered waits for a heartbeat round, which the core begins on the
        next take(): after the rest of this loop iteration, so that the reads that came with
        it share it (one round for them all, and the heartbeats go out once)."""
        if not self._read_round_scheduled:
            self._read_round_scheduled = True
            self.loop.call_soon(self.supervisor.guard, "a read round", self._read_round_now)

    def _read_round_now(self) -> None:
        self._read_round_scheduled = False
        if self.core is not None and self.core.has_output():
            self._process()

    async def _linearizable_here(self, f: Frame, answer, applied: bool) -> Frame:
        code, index, hint, remark = await self._read_index()
        out = self._after_read(f, code, index, hint, remark, answer, applied)
        return out if isinstance(out, Frame) else await out

    def _after_read(self, f: Frame, code: Code, index: int, hint: str | None, remark: str, answer, applied: bool):
        """A Frame, or an awaitable of one while this node catches up to ``index``."""
        if code != Code.SUCCESS:
            return self._refusal(f, code, remark, hint)
        if applied:
            if self.applier is not None and self.applier.applied >= index:
                return answer()
            return self._applied_then(f, index, answer)
        if self.store.committed_index >= index:
            return answer()
        return self._committed_then(f, index, answer)

    async def _applied_then(self, f: Frame, index: int, answer) -> Frame:
        refused = await self._wait_applied(f, index)  # (Serving's: the queries waiting for the applier)
        return refused or answer()

    async def _committed_then(self, f: Frame, index: int, answer) -> Frame:
        if not await self._committed_to(index):
            return self._refusal(f, Code.TIMEOUT, f"this node did not commit up to the read index {index} within "
                                                  f"{self.cfg.max_wait_ack_ms} ms")
        return answer()

    def _note_read_round(self) -> None:
        """From _process, after take(): a read round just begun is noted with the count of
        socket reads so far; a read parsed from any of those arrived before its heartbeats
        leave, and may join it (_linearizable)."""
        if self.core.read_round != self._read_join[0]:
            self._read_join = (self.core.read_round, self.server.reads)

    def _reads_done(self, reads) -> None:
        """The core's ReadIndex reads done (from take()): answer the held requests, or wake
        whoever awaits them (each read's ``ctx``)."""
        success = Code.SUCCESS
        applier = self.applier
        for r in reads:
            waiter = r.ctx
            if waiter is None:
                continue
            r.ctx = None
            if isinstance(waiter, asyncio.Future):  # (_read_index or _held_then, awaiting)
                if not waiter.done():
                    waiter.set_result(None)
                continue
            conn, f, answer, applied = waiter
            try:
                if r.code == success and (self.store.committed_index >= r.index if not applied else
                                          applier is not None and applier.applied >= r.index):
                    out = answer()  # (the common case, _after_read's first)
                else:
                    out = self._after_read(f, r.code, r.index, r.leader_id, r.remark, answer, applied)
            except Exception:  # noqa: BLE001 - as the server answers a handler that failed: the node goes on
                held = self._bad_requests.check(("failed", f.code), time.monotonic())
                if held is not None:  # (what a client can make happen is logged at a bounded rate)
                    log.exception("answering a linearizable read (request code %s) failed%s", f.code, held_back(held))
                out = Frame(1, f.opaque, FLAG_RESPONSE, "internal error")
            if isinstance(out, Frame):
                conn.answer(f, out)
                conn.release()
            else:  # (this node is still applying up to the read index: rare on a leader)
                task = asyncio.ensure_future(out)
                self._tasks.add(task)
                task.add_done_callback(functools.partial(self._held_answered, conn, f))

    def _held_answered(self, conn, f: Frame, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        conn.release()
        if not task.cancelled():
            conn.answer(f, task.result() if task.exception() is None else
                        self._refusal(f, Code.INTERNAL_ERROR, str(task.exception())))

    def _serve_read_index(self, f: Frame):
        """READ_INDEX from a follower serving a linearizable read: this leader's confirmed
        index (a follower asked asks its leader). The request is checked here, before any
        awaiting (BadMessage: answered UNEXPECTED_ARGUMENT); the answer is an awaitable."""
        o = json_object(f.body)
        if get_field(o, "group", str, self.cfg.group) != self.cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {self.cfg.group!r}")
        return self._read_index_answer(f)

    async def _read_index_answer(self, f: Frame) -> Frame:
        code, index, hint, remark = await self._read_index()
        if code != Code.SUCCESS:
            return self._refusal(f, code, remark, hint)
        # the leader that confirmed it: this node when it leads, else the one it asked (never a
        # follower's own id, which sent askers to a member that cannot confirm reads)
        return response_frame({"code": int(Code.SUCCESS), "index": index, "leaderId": self.core.member.leader_id},
                              f.opaque, f.code)

    async def _committed_to(self, index: int) -> bool:
        """Wait until this node's commit index reaches ``index`` (a follower behind its
        leader's read index); False after max_wait_ack_ms."""
        if self.store.committed_index >= index:
            return True
        fut = self.loop.create_future()
        self._commit_waiters.append((index, fut))
        try:
            await asyncio.wait_for(fut, self.cfg.max_wait_ack_ms / 1000)
            return True
        except asyncio.TimeoutError:
            return False

    def _wake_commit_waiters(self) -> None:
        if not self._commit_waiters:
            return
        c = self.store.committed_index
        keep = []
        for index, fut in self._commit_waiters:
            if fut.done():
                continue
            if index <= c:
                fut.set_result(None)
            else:
                keep.append((index, fut))
        self._commit_waiters = keep
