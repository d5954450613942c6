"""Reads that wait, through :class:`Reads`, a part of the request handler (requests.py).

GET and QUERY with ``"consistency": "linearizable"`` (what dledgerctl's client asks by
default) are answered only after a read index is confirmed (cluster/raft/reads.py): on the
leader by a heartbeat round to a majority; on a follower by asking the leader for one
(READ_INDEX) and waiting until it holds (GET: committed; QUERY: applied) that far. A node
that cannot confirm answers NOT_LEADER, with the leader when it knows it, or TIMEOUT; the
client then asks the leader. On the leader, the requests held on their connection until
the core finishes their read are the handler's own (requests.py ``linearizable``: the hot
path); what waits here, in an awaitable, is the rest: a follower's read, a node catching up
to a read index (committed, or applied for a QUERY), READ_INDEX asked by a follower, and
QUERY.

``"consistency": "serializable"`` answers from the asked node's own state at once, as every
read did before (and as DLedger's own GetEntriesRequest is always answered).
"""

from __future__ import annotations

import asyncio

from ..net import api
from ..net.api_client import request_frame
from ..net.frames import Frame, ProtocolError
from ..net.transport import TransportError
from ..net.api import answer_frame
from ..raft.member import Role
from ..raft.rpc import Code
from ..raft.statemachine import StateMachineError
from .nodeview import NodeView


class Reads:
    """Reads waiting in an awaitable: for this node to commit (``commit_waiters``) or to
    apply (``queries``) up to their read index. From the handler: ``refusal(f, code,
    remark, leader)``, its refusal answer; ``linearizable(f, answer, applied, conn)``, a
    linearizable read (held on the leader); ``read_waiter(r)``, a future done when the
    core finishes read ``r``."""

    def __init__(self, node: NodeView, refusal, linearizable, read_waiter) -> None:
        self.node, self._refusal, self._linearizable, self._read_waiter = node, refusal, linearizable, read_waiter
        self.queries: list[tuple] = []  # QUERYs waiting for entries to be applied: (index, future)
        self.commit_waiters: list[tuple] = []  # linearizable reads on a follower: (index, future)

    async def _read_index(self) -> tuple[Code, int, str | None, str]:
        """A confirmed read index: (SUCCESS, index, None, "") or (code, -1, leader hint, why not)."""
        node = self.node
        core, timeout = node.core, node.cfg.max_wait_ack_ms / 1000
        if core.member.role == Role.LEADER:
            r = core.read_index(node.now())
            if not r.done:  # (the core ends every read: confirmed, timed out, or leadership lost)
                await self._read_waiter(r)
            return r.code, r.index, r.leader_id, r.remark
        leader = core.member.leader_id
        ch = node.channels.get(leader) if leader else None
        if ch is None:
            return Code.NOT_LEADER, -1, None, "no leader known to ask for a read index"
        try:
            frame = await ch.request(request_frame(api.ReadIndex(node.cfg.group)), timeout)
            reply = api.read_index_reply(frame.body)
        except (TransportError, ProtocolError) as exc:  # (no answer, or one that does not decode)
            return Code.NOT_LEADER, -1, leader, f"{leader} gave no read index: {exc}"
        if isinstance(reply, api.Refusal):
            return reply.code, -1, reply.leader_id, reply.remark
        return Code.SUCCESS, reply.index, None, ""

    async def held_then(self, fut, r, f: Frame, answer, applied: bool) -> Frame:
        """The answer to a read on the leader registered as ``r``, once ``fut`` (read_waiter's) is done."""
        await fut
        out = self.after_read(f, r.code, r.index, r.leader_id, r.remark, answer, applied)
        return out if isinstance(out, Frame) else await out

    async def on_follower(self, f: Frame, answer, applied: bool) -> Frame:
        """A linearizable read on a follower: the leader's read index, then ``answer()``."""
        code, index, hint, remark = await self._read_index()
        out = self.after_read(f, code, index, hint, remark, answer, applied)
        return out if isinstance(out, Frame) else await out

    def after_read(self, f: Frame, code: Code, index: int, hint: str | None, remark: str, answer, applied: bool):
        """A Frame, or an awaitable of one while this node catches up to ``index``."""
        node = self.node
        if code != Code.SUCCESS:
            return self._refusal(f, code, remark, hint)
        if applied:
            if node.applier is not None and node.applier.applied >= index:
                return answer()
            return self._applied_then(f, index, answer)
        if node.store.committed_index >= index:
            return answer()
        return self._committed_then(f, index, answer)

    async def _applied_then(self, f: Frame, index: int, answer) -> Frame:
        refused = await self._wait_applied(f, index)
        return refused or answer()

    async def _committed_then(self, f: Frame, index: int, answer) -> Frame:
        node = self.node
        if not await self._committed_to(index):
            return self._refusal(f, Code.TIMEOUT, f"this node did not commit up to the read index {index} within "
                                                  f"{node.cfg.max_wait_ack_ms} ms")
        return answer()

    def serve_read_index(self, req: api.ReadIndex, f: Frame, conn=None):
        """READ_INDEX from a follower serving a linearizable read: this leader's confirmed
        index (a follower asked asks its leader). The request is checked before any
        awaiting (BadMessage: answered UNEXPECTED_ARGUMENT); the answer is an awaitable."""
        cfg = self.node.cfg
        if req.group is not None and req.group != cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {cfg.group!r}")
        return self._read_index_answer(f)

    async def _read_index_answer(self, f: Frame) -> Frame:
        node = self.node
        code, index, hint, remark = await self._read_index()
        if code != Code.SUCCESS:
            return self._refusal(f, code, remark, hint)
        # the leader that confirmed it: this node when it leads, else the one it asked (never a
        # follower's own id, which sent askers to a member that cannot confirm reads)
        return answer_frame(api.ReadIndexAnswer(index, node.core.member.leader_id), f.opaque)

    async def _committed_to(self, index: int) -> bool:
        """Wait until this node's commit index reaches ``index`` (a follower behind its
        leader's read index); False after max_wait_ack_ms."""
        node = self.node
        if node.store.committed_index >= index:
            return True
        fut = node.loop.create_future()
        self.commit_waiters.append((index, fut))
        try:
            await asyncio.wait_for(fut, node.cfg.max_wait_ack_ms / 1000)
            return True
        except asyncio.TimeoutError:
            return False

    def wake_commit_waiters(self) -> None:
        node = self.node
        if not self.commit_waiters:
            return
        c = node.store.committed_index
        keep = []
        for index, fut in self.commit_waiters:
            if fut.done():
                continue
            if index <= c:
                fut.set_result(None)
            else:
                keep.append((index, fut))
        self.commit_waiters = keep


    # -- QUERY (the state machine) ----------------------------------------------------------
    def query(self, req: api.Query, f: Frame, conn=None):
        """QUERY: the state machine's answer. Linearizable (the default): once it has applied
        up to a confirmed read index. Serializable: once it has applied what it knew to be
        committed when the request arrived. A Frame now, or an awaitable of one."""
        node = self.node
        cfg, applier = node.cfg, node.applier
        if req.group is not None and req.group != cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {cfg.group!r}")
        if applier is None or not callable(getattr(applier.sm, "query", None)):
            return self._refusal(f, Code.UNSUPPORTED, "this node runs no state machine that answers queries"
                                 + ("" if cfg.state_machine else " (start it with --state-machine)"))
        if req.consistency == api.LINEARIZABLE:
            return self._linearizable(f, lambda: self._query_answer(f, req.query), applied=True, conn=conn)
        want = node.store.committed_index
        if applier.applied >= want:
            return self._query_answer(f, req.query)
        return self._applied_then(f, want, lambda: self._query_answer(f, req.query))

    async def _wait_applied(self, f: Frame, want: int) -> Frame | None:
        """Wait until the state machine has applied entry ``want``: None, or the refusal
        Frame when it does not within max_wait_ack_ms or stops."""
        node = self.node
        fut = node.loop.create_future()
        self.queries.append((want, fut))
        try:
            await asyncio.wait_for(fut, node.cfg.max_wait_ack_ms / 1000)
        except asyncio.TimeoutError:
            return self._refusal(f, Code.TIMEOUT, f"entry {want} not applied within {node.cfg.max_wait_ack_ms} ms")
        except StateMachineError as exc:
            return self._refusal(f, Code.INTERNAL_ERROR, str(exc))
        if node.applier is None:
            return self._refusal(f, Code.INTERNAL_ERROR, "the state machine stopped")
        return None

    def _query_answer(self, f: Frame, request: bytes) -> Frame:
        node = self.node
        answer = node.applier.sm.query(request)
        return answer_frame(api.QueryAnswer(answer, node.applier.applied, str(node.core.member.role)), f.opaque)

    def applied(self, index: int) -> None:
        """The state machine has applied up to ``index``: the queries waiting for it go on."""
        if self.queries:
            ready = [q for q in self.queries if q[0] <= index]
            self.queries = [q for q in self.queries if q[0] > index]
            for _index, fut in ready:
                if not fut.done():
                    fut.set_result(None)

    def applier_stopped(self, why: str) -> None:
        """The state machine stopped (a bug of its own): the queries waiting for it fail."""
        for _index, fut in self.queries:
            if not fut.done():
                fut.set_exception(StateMachineError(why))
        self.queries = []
