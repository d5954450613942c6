"""What a node answers: every frame its server reads goes to :meth:`Requests.serve`.

A client or operator request is decoded once (cluster/net/api.py) and looked up by its type
in one table; a member's request goes to peers.py (decoded by cluster/net/wire.py, handed to
the core). Answered here: METADATA and STATUS, and the clients' hot path, APPEND (ours, and
DLedger's AppendEntryRequest) and GET (ours, and DLedger's GetEntriesRequest). Reads that
wait in an awaitable (a follower's, QUERY, READ_INDEX) are reads.py's; operator requests and
membership changes, operator.py's. Each part reaches the node through
:class:`cluster.node.nodeview.NodeView` only.

Appends are queued per loop iteration and proposed together (the node calls
:meth:`Requests.propose_batch` once per iteration that queued any);
linearizable reads on the leader are held on their connection for a read index. Both are
answered here when the core has finished them: after each step of the core, the node calls
:meth:`Requests.answer_finished`, which takes them from the core (``take_finished()``), so
a request's way back leads from the core to this module and out, as its way in did. Under
TLS every request is checked against its connection's identity first. A request that does
not decode is answered UNEXPECTED_ARGUMENT with the reason (REMOTING_NOT_SUPPORTED for a
code no request has), and changes nothing: requests are checked before any awaiting begins,
and an awaited answer that still finds one bad is answered the same way (never "internal
error"). What a peer or client can make the node log goes through a rate limit
(cluster/net/repeats.py): at most a line per host and kind every 10 s, with a count of what
was held back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time

from store.base import appended_rows
from store.errors import StoreError
from store.packed import PackedBodies

from ..net import api
from ..net.api import answer_frame, dledger_append_answer
from ..net.appends import append_answers, packed_one, raw_answer_frame, store_entry_object
from ..net.frames import (
    FLAG_RESPONSE,
    REMOTING_NO_PERMISSION,
    REMOTING_NOT_SUPPORTED,
    BadMessage,
    Frame,
    error_frame,
    json_body,
    response_bytes,
)
from ..net.repeats import Repeats, held_back
from ..net.tls import CLIENT, OPERATOR
from ..net.tls import refusal as tls_refusal
from ..net.wire import (
    APPEND,
    CHANGE_MEMBERS,
    DIGESTS,
    FORCE_COMPARE,
    FORCE_TRUNCATE,
    GET,
    METADATA,
    QUERY,
    READ_INDEX,
    SNAPSHOT_READ,
    STATUS,
    WATERMARKS,
)
from ..raft.member import Role
from ..raft.proposal import Proposal
from ..raft.reads import ReadIndex
from ..raft.rpc import Code
from ..raft.statemachine import KeyValue
from .nodeview import NodeView
from .operator import Operator
from .peers import PEER_CODES, PeerRequests
from .reads import Reads
from .scrub import digests_frame
from .snapshotreads import snapshot_read

log = logging.getLogger("dledgerctl.node")

MAX_GET_COUNT = 1024
MAX_GET_BYTES = 16 << 20


def _client_need(f: Frame) -> str:
    """What a client request needs under TLS: an operator for what changes a replica."""
    if f.code in (FORCE_TRUNCATE, CHANGE_MEMBERS):
        return OPERATOR
    if f.code == FORCE_COMPARE:
        return CLIENT if api.dry_run_asked(f) else OPERATOR
    return CLIENT


@dataclasses.dataclass(frozen=True, slots=True)
class _Addressed:
    """Where a request that did not decode was sent (what _misdirected reads)."""

    group: str | None
    remote_id: str | None


class Requests:
    """The node's answers, and the requests held for what the core finishes: APPENDs not
    proposed yet (``batch``), proposals waiting for their quorum (``waiting``) and, on the
    leader, linearizable reads waiting for their read index (each ReadIndex's ``ctx``: the
    connection, the frame, how to answer); :meth:`answer_finished` answers them. Its parts
    keep theirs: ``reads`` (what waits in an awaitable), ``operator``, ``peers``."""

    def __init__(self, node: NodeView, appends_due) -> None:
        """``appends_due()``: the node's, called when the first APPEND of a loop iteration is
        queued; the node then has :meth:`propose_batch` propose them, and acts on the step."""
        self.node, self._appends_due = node, appends_due
        self.batch: list[tuple] = []  # APPENDs not proposed yet: (body, count, largest, opaque, connection, DLedger's)
        # proposals waiting for the quorum: (proposal, waiters, DLedger's waiters, when, body bytes)
        self.waiting: dict[int, tuple[Proposal, list, list, float, int]] = {}
        self.bad_requests = Repeats()  # refused malformed requests, logged per host
        self._refusals_logged: dict[tuple, float] = {}
        self._round_scheduled = False  # a call to begin the waiting reads' round is queued
        self._join = (0, -1)  # the latest read round begun, and the server's socket reads before it
        self.reads = Reads(node, self.refusal, self.linearizable, self.read_waiter)
        self.operator = Operator(node, self.refusal)
        self.peers = PeerRequests(node, self._denied, self.bad_requests)
        r, o = self.reads, self.operator
        # what answers each client and operator request (decoded by cluster/net/api.py), by its code
        self._handlers = {METADATA: self._metadata, STATUS: self._metadata, APPEND: self._append, GET: self._timed_get,
                          QUERY: r.query, READ_INDEX: r.serve_read_index, CHANGE_MEMBERS: o.change_members,
                          WATERMARKS: o.watermarks, FORCE_COMPARE: o.force_compare, FORCE_TRUNCATE: o.force_truncate,
                          DIGESTS: lambda req, f, conn=None: self._misdirected(req, f) or digests_frame(node, req, f),
                          SNAPSHOT_READ: lambda req, f, conn=None: (self._misdirected(req, f)
                                                                    or snapshot_read(node, req, f, self.refusal))}

    def serve(self, f: Frame, conn):
        """The answer to a frame: a Frame now, None when it comes later through ``conn``
        (APPEND, reads held on the leader), or an awaitable of one."""
        try:
            out = self._answer(f, conn)
        except BadMessage as exc:
            return self._bad_request(f, conn, exc)
        if out is None or isinstance(out, Frame):
            return out
        return self._awaited(f, conn, out)

    async def _awaited(self, f: Frame, conn, out) -> Frame:
        try:
            return await out
        except BadMessage as exc:  # (a check made late: still the request's fault, answered so)
            return self._bad_request(f, conn, exc)

    def _bad_request(self, f: Frame, conn, exc: BadMessage) -> Frame:
        """UNEXPECTED_ARGUMENT with the reason (REMOTING_NOT_SUPPORTED for a code no request
        has); a warning per host every 10 s at most."""
        node = self.node
        if f.code == APPEND:
            node.counts.appends_answered("BAD_REQUEST", 1)
        else:
            node.counts.refusal("BAD_REQUEST")
        host = conn.peer[0] if conn.peer else None
        held = self.bad_requests.check(host, time.monotonic())
        if held is not None:
            log.warning("refused request code %d from %s: %s%s", f.code, host, exc, held_back(held))
        if isinstance(exc, api.NotARequest):
            return error_frame(f.opaque, REMOTING_NOT_SUPPORTED, str(exc))
        # (answered, not dropped: a peer or client with a bug learns why; nothing here changed)
        return answer_frame(api.BadRequest(node.core.member.term, node.core.member.leader_id, str(exc)), f.opaque)

    def _answer(self, f: Frame, conn):
        """serve's answer; BadMessage for a request that does not decode."""
        node = self.node
        if conn.refused is not None:  # (its certificate is revoked: cluster/net/crl.py)
            node.counts.refusal("NO_PERMISSION")
            return error_frame(f.opaque, REMOTING_NO_PERMISSION, conn.refused)
        if f.code in PEER_CODES:
            return self.peers.serve(f, conn)
        if node.tls is not None:  # (who may ask is decided before what is asked is read)
            denied = self._denied(f, conn, _client_need(f))
            if denied is not None:
                return denied
        handler = self._handlers.get(f.code)
        if handler is None:
            raise api.NotARequest(f"request code {f.code} is not a peer request")
        try:
            req = api.decode(f)
        except api.NotARequest:
            raise
        except BadMessage:
            # (where it was sent is answered before what it asks: a request for another group
            # or member, or an operator's to a follower, is refused as such even when the rest
            # of it is bad, as it was before requests were decoded whole)
            refused = self._misaddressed_request(f)
            if refused is not None:
                return refused
            raise
        return handler(req, f, conn)

    def _misaddressed_request(self, f: Frame) -> Frame | None:
        """The refusal of a client or operator request that names another group or member,
        or of an operator request this node does not serve (not the leader), read from its
        addressing alone; None when that is not the case or cannot be read."""
        node, cfg = self.node, self.node.cfg
        if f.code == APPEND and "count" in f.ext:
            group = f.ext.get("group")
            if group is not None and group != cfg.group:
                node.counts.appends_answered(Code.UNKNOWN_GROUP.name, 1)
                return answer_frame(api.AppendRefused(Code.UNKNOWN_GROUP, f"group is {cfg.group!r}"), f.opaque)
            return None
        try:
            group, remote = api.addressee(f.body)
        except BadMessage:
            return None
        refused = self._misdirected(_Addressed(group, remote), f)
        if refused is None and f.code in (WATERMARKS, FORCE_COMPARE, FORCE_TRUNCATE):
            why = node.core.refuse_operator(None)
            if why is not None:
                return self.refusal(f, *why)
        return refused

    def _denied(self, f: Frame, conn, need: str, sender: str | None = None) -> Frame | None:
        """Under TLS: the refusal of a request its connection's identity may not make (one
        warning in the log per client, reason and minute), or None."""
        node = self.node
        why = tls_refusal(conn.identity, node.cfg.group, node.cfg.peers, need, sender)
        if why is None:
            return None
        key = (conn.peer[0] if conn.peer else None, why)
        now = time.monotonic()
        if now - self._refusals_logged.get(key, -60.0) >= 60.0:
            if len(self._refusals_logged) > 1024:
                self._refusals_logged.clear()
            self._refusals_logged[key] = now
            log.warning("refused request code %d from %s: %s", f.code, conn.peer, why)
        node.counts.refusal("NO_PERMISSION")
        return error_frame(f.opaque, REMOTING_NO_PERMISSION, why)

    def refusal(self, f: Frame, code: Code, remark: str, leader: str | None = None) -> Frame:
        """A refused request's answer, naming the leader (``leader``, else the one this node knows)."""
        node = self.node
        node.counts.refusal(code.name)
        leader = leader or node.core.member.leader_id
        peer = node.cfg.peers.get(leader) if leader is not None else None
        return answer_frame(api.Refusal(code, remark, leader, peer.address if peer is not None else None), f.opaque)

    # -- METADATA, STATUS ---------------------------------------------------------------
    def _misdirected(self, req, f: Frame) -> Frame | None:
        """UNKNOWN_GROUP when a client request names another group, UNKNOWN_MEMBER when it
        names another member in ``remoteId`` (as DLedger answers them: the client's idea of
        who is where is wrong); None when it names this group and node, or none (earlier
        dledgerctl clients did not say)."""
        node = self.node
        cfg = node.cfg
        if req.group is not None and req.group != cfg.group:
            code, remark = Code.UNKNOWN_GROUP, f"this node serves group {cfg.group!r}, not {req.group!r}"
        elif req.remote_id is not None and req.remote_id != cfg.self_id:
            code, remark = Code.UNKNOWN_MEMBER, f"this is {cfg.self_id}, not {req.remote_id}"
        else:
            return None
        node.counts.refusal(code.name)
        return answer_frame(api.Misdirected(code, cfg.group, node.core.member.leader_id, remark), f.opaque)

    def _metadata(self, req: api.Metadata, f: Frame, conn) -> Frame:
        return self._misdirected(req, f) or answer_frame(api.MetadataAnswer(self.metadata()), f.opaque)

    def metadata(self) -> dict:
        node = self.node
        cfg, core, applier = node.cfg, node.core, node.applier
        d = core.describe()
        d["replication"] = d.pop("peers", [])
        d["leaderId"] = d["leader"]  # (DLedger's MetadataResponse: group, leaderId, peers)
        d["code"] = int(Code.SUCCESS)
        d["address"] = cfg.peers[cfg.self_id].address
        d["peers"] = {p: peer.address for p, peer in core.members.members.items()}
        if applier is not None:
            d["applied_index"], d["snapshot_index"] = applier.applied, applier.snapshot_index
            sm = type(applier.sm)
            d["state_machine"] = "kv" if issubclass(sm, KeyValue) else f"{sm.__module__}:{sm.__qualname__}"
        d["flush"] = cfg.flush
        d["flush_interval_ms"] = cfg.flush_interval_ms
        if node.scrubber is not None:
            d["scrub"] = node.scrubber.row()
        d["pid"] = os.getpid()  # (which process answers: 'cluster status' tells a recorded member from a stranger)
        return d

    # -- APPEND ---------------------------------------------------------------------------
    def _append(self, req: api.Append | api.DLedgerAppend, f: Frame, conn):
        """Queues a checked APPEND for the next proposal; its answer goes to ``conn`` once
        the entries commit or fail (answer_appends). Nothing is made per request but the
        queued tuple: appends are the hot path."""
        if type(req) is api.DLedgerAppend:
            return self._append_dledger(req, f, conn)
        node = self.node
        if req.group is not None and req.group != node.cfg.group:
            node.counts.appends_answered(Code.UNKNOWN_GROUP.name, 1)
            return answer_frame(api.AppendRefused(Code.UNKNOWN_GROUP, f"group is {node.cfg.group!r}"), f.opaque)
        self._queue(req.data, req.count, req.largest, f.opaque, conn, False)
        return None

    def _append_dledger(self, req: api.DLedgerAppend, f: Frame, conn):
        """An APPEND in DLedger's form (AppendEntryRequest): queued like ours, answered as
        DLedger answers (AppendEntryResponse: code, group, index, leaderId, pos, term)."""
        node = self.node
        cfg = node.cfg
        refused = None
        if req.group != cfg.group:
            refused = (Code.UNKNOWN_GROUP, f"{req.group} != {cfg.group}")
        elif req.remote_id is not None and req.remote_id != cfg.self_id:
            refused = (Code.UNKNOWN_MEMBER, f"{req.remote_id} != {cfg.self_id}")
        elif req.body is None:
            refused = (Code.REQUEST_WITH_EMPTY_BODYS, "the request carries no body")
        if refused is not None:
            node.counts.appends_answered(refused[0].name, 1)
            m = node.core.member
            return answer_frame(api.DLedgerAppendRefused(refused[0], cfg.group, m.leader_id, m.term, refused[1]),
                                f.opaque)
        self._queue(packed_one(req.body), 1, len(req.body), f.opaque, conn, True)
        return None

    def _queue(self, data, count: int, largest: int, opaque: int, conn, theirs: bool) -> None:
        if not self.batch:
            self._appends_due()
        self.batch.append((data, count, largest, opaque, conn, theirs))
        conn.hold()

    def propose_batch(self) -> None:
        """Propose the APPENDs that arrived since the last call as one batch: their frames'
        bodies go to the store as they are (store.packed), without an object per body. The
        node calls it, then acts on the core's step (process.py ``Node._propose``), which
        ends in :meth:`answer_finished`: nothing here calls the node back."""
        node = self.node
        batch, self.batch = self.batch, []
        bodies = PackedBodies()
        waiters, dledger, start, size = [], [], 0, 0
        for data, count, largest, opaque, conn, theirs in batch:
            bodies.add(data, count, largest)
            size += len(data) - 4 * count  # (a run's size table: 4 bytes a body)
            if theirs:
                dledger.append((conn, opaque, start))
            else:
                waiters.append((conn, opaque, start, count))
            start += count
        p = node.core.propose(bodies, node.now())
        self.waiting[id(p)] = (p, waiters, dledger, time.perf_counter(), size)
        if p.done:
            self.finish(p)

    def finish(self, p: Proposal) -> bool:
        """Answer the APPENDs of proposal ``p``, done; False when it is none of theirs."""
        entry = self.waiting.pop(id(p), None)
        if entry is None:
            return False
        c = self.node.counts
        if p.code == Code.SUCCESS:
            c.append_latency.observe(time.perf_counter() - entry[3], len(entry[1]) + len(entry[2]))
            c.appended_entries += p.count
            c.appended_bytes += entry[4]
        self.answer_appends(p, entry[1], p.code, p.remark, entry[2])
        for conn in {w[0] for w in entry[1] + entry[2]}:  # the answers leave now (see answer_finished)
            conn.flush()
        return True

    def shut(self) -> None:
        """The node is shutting down: every APPEND still waiting is answered TERM_CHANGED."""
        for p, waiters, dledger, _t0, _size in self.waiting.values():
            self.answer_appends(p, waiters, Code.TERM_CHANGED, "node is shutting down", dledger)

    def answer_appends(self, p: Proposal, waiters: list, code: Code, remark: str, dledger: list = ()) -> None:
        """Answer the APPENDs of a proposal (``waiters``: connection, opaque, start, n), once:
        the caller has taken the proposal out of ``waiting``. Each answer is
        ``{"code", "term", "leaderId", "remark"}``, and on SUCCESS ``"entries"``, the
        request's ``n`` rows from ``start``, encoded whole (frames.response_bytes,
        appends.append_answers) around JSON that is made once per proposal up to the
        entries; the answers for one connection go to it in one call. ``dledger``:
        (connection, opaque, start) of APPENDs from DLedger's own client, answered in its form."""
        node = self.node
        leader = p.leader_id or node.core.member.leader_id
        for w in waiters:
            w[0].release()
        node.counts.appends_answered(code.name, len(waiters) + len(dledger))
        if dledger:
            rows = appended_rows(p.appended) if code == Code.SUCCESS else None
            for conn, opaque, start in dledger:
                conn.release()
                index, term, pos, _size = rows[start] if rows is not None else (-1, p.term, -1, 0)
                conn.send_bytes(response_bytes(opaque, dledger_append_answer(code, node.cfg.group, index, leader, pos,
                                                                             term, remark)))
            if not waiters:
                return
        body = json_body({"code": int(code), "term": p.term, "leaderId": leader, "remark": remark})
        if code != Code.SUCCESS:
            answers = [response_bytes(opaque, body) for _conn, opaque, _start, _n in waiters]
        else:
            answers = append_answers(body[:-1] + b',"entries":', waiters, p.appended)
        conn = waiters[0][0]
        if all(w[0] is conn for w in waiters):  # (the usual case: one client connection)
            conn.send_parts(answers)
            return
        for w, data in zip(waiters, answers):
            w[0].send_bytes(data)

    # -- what the core finished ---------------------------------------------------------
    def answer_finished(self) -> None:
        """Answer what the core has finished of what clients asked (its take_finished():
        proposals, reads): called after every step of the core, once the node has sent what
        the step says (process.py), so the followers start on a push before the clients'
        answers are made. A read round begun by that step is noted with the server's count
        of socket reads so far: a read parsed from any of those arrived before the round's
        heartbeats left, and may join it (linearizable)."""
        node = self.node
        core = node.core
        reads = core.reads
        if reads.read_round != self._join[0]:
            self._join = (reads.read_round, node.server.reads)
        finished = core.take_finished()
        for p in finished.proposals:
            if not self.finish(p):  # (client appends', else a membership change's)
                self.operator.finish(p)
        if finished.reads:
            self._reads_done(finished.reads)
        self.reads.wake_commit_waiters()

    # -- linearizable reads on the leader: held for their read index -------------------------
    def linearizable(self, f: Frame, answer, applied: bool, conn=None):
        """The answer to a linearizable read (GET, QUERY; cluster/node/reads.py has how it
        goes): ``answer()`` (a Frame) once a read index is confirmed, and with ``applied``
        once the state machine has applied that far; a refusal Frame when it cannot be. On
        the leader the answer is a Frame now or, with the request's connection ``conn``,
        None: the request is held on it and answered when the core finishes its read (no
        future, no task per read: reads are a hot path). On a follower (or without
        ``conn``), an awaitable."""
        node = self.node
        core = node.core
        if core.member.role != Role.LEADER:
            return self.reads.on_follower(f, answer, applied)
        joined, after = self._join
        r = core.read_index(node.now(), joined if conn is not None and conn.read_seq <= after else 0)
        if r.code is not None:
            return self._read_answer(r, f, answer, applied)
        if conn is None:
            return self.reads.held_then(self.read_waiter(r), r, f, answer, applied)
        r.ctx = (conn, f, answer, applied)
        conn.hold()
        if core.reads.read_round_due:
            if core.reads.read_rounds:
                self._read_round_soon()
            else:  # (none out: begin one now, and the reads this socket read brought with it join it)
                node.process()
        return None

    def read_waiter(self, r: ReadIndex) -> asyncio.Future:
        """A future done when the core finishes read ``r`` (for a read answered by an awaitable)."""
        r.ctx = fut = self.node.loop.create_future()
        self._read_round_soon()
        return fut

    def _read_round_soon(self) -> None:
        """The read just registered waits for a heartbeat round, which the core begins on the
        next take(): after the rest of this loop iteration, so that the reads that came with
        it share it (one round for them all, and the heartbeats go out once)."""
        node = self.node
        if not self._round_scheduled:
            self._round_scheduled = True
            node.loop.call_soon(node.supervisor.guard, "a read round", self._read_round_now)

    def _read_round_now(self) -> None:
        node = self.node
        self._round_scheduled = False
        if node.core is not None and node.core.has_output():
            node.process()

    def _read_answer(self, r: ReadIndex, f: Frame, answer, applied: bool):
        """The answer to a read the core has finished: ``answer()`` when this node holds (with
        ``applied``: has applied) what ``r`` says to; else reads.py's (a refusal, or an
        awaitable while this node catches up: rare on a leader)."""
        node = self.node
        if r.code == Code.SUCCESS and (node.store.committed_index >= r.index if not applied else
                                       node.applier is not None and node.applier.applied >= r.index):
            return answer()
        return self.reads.after_read(f, r.code, r.index, r.leader_id, r.remark, answer, applied)

    def _reads_done(self, reads) -> None:
        """The core's ReadIndex reads done: answer the held requests, or wake whoever awaits
        them (each read's ``ctx``)."""
        node = self.node
        for r in reads:
            waiter = r.ctx
            if waiter is None:
                continue
            r.ctx = None
            if isinstance(waiter, asyncio.Future):  # (read_waiter's, awaited)
                if not waiter.done():
                    waiter.set_result(None)
                continue
            conn, f, answer, applied = waiter
            try:
                out = self._read_answer(r, f, answer, applied)
            except Exception:  # noqa: BLE001 - as the server answers a handler that failed: the node goes on
                held = self.bad_requests.check(("failed", f.code), time.monotonic())
                if held is not None:  # (what a client can make happen is logged at a bounded rate)
                    log.exception("answering a linearizable read (request code %s) failed%s", f.code, held_back(held))
                out = Frame(1, f.opaque, FLAG_RESPONSE, "internal error")
            if isinstance(out, Frame):
                conn.answer(f, out)
                conn.release()
            else:  # (this node is still applying up to the read index)
                task = asyncio.ensure_future(out)
                node.track(task)
                task.add_done_callback(functools.partial(self._held_answered, conn, f))

    def _held_answered(self, conn, f: Frame, task: asyncio.Task) -> None:
        conn.release()
        if not task.cancelled():
            conn.answer(f, task.result() if task.exception() is None else
                        self.refusal(f, Code.INTERNAL_ERROR, str(task.exception())))

    # -- GET ------------------------------------------------------------------------------
    def _timed_get(self, req, f: Frame, conn):
        started = time.perf_counter()
        try:
            return self._get(req, f, conn)
        finally:
            self.node.counts.read_latency.observe(time.perf_counter() - started)

    def _get(self, req: api.Get | api.DLedgerGet, f: Frame, conn=None):
        """Committed entries from ``index`` (up to ``count``, MAX_GET_COUNT, MAX_GET_BYTES),
        each as DLedger's entry object, or as their bytes (``raw``). DLedger's own client
        asks with ``beginIndex`` for one entry (GetEntriesRequest) and is answered in its
        form (GetEntriesResponse), from this node's log."""
        refused = self._misdirected(req, f)
        if refused is not None:
            return refused
        if type(req) is api.DLedgerGet:
            return self._entries(f, req.begin_index, 1)
        if req.consistency == api.SERIALIZABLE:
            return self._entries(f, req.index, req.count, req.raw)
        return self.linearizable(f, lambda: self._entries(f, req.index, req.count, req.raw), applied=False,
                                 conn=conn)

    def _entries(self, f: Frame, index: int, count: int, raw: bool = False) -> Frame:
        node = self.node
        s = node.store
        group, leader, term = node.cfg.group, node.core.member.leader_id, node.core.member.term
        if not s.begin_index <= index <= s.committed_index or s.begin_index < 0:
            node.counts.refusal(Code.INDEX_OUT_OF_RANGE.name)
            return answer_frame(api.Entries(Code.INDEX_OUT_OF_RANGE, group, leader, term, remark=(
                f"index {index} is outside the committed log [{s.begin_index}, {s.committed_index}]")), f.opaque)
        last = min(s.committed_index, index + max(1, min(count, MAX_GET_COUNT)) - 1)
        bad = node.scrubber.first_damaged(index, last) if node.scrubber is not None else None
        if bad == index:  # (what the scrub holds damaged: never served, CRCs recorded or not)
            node.counts.refusal(Code.DISK_ERROR.name)
            return answer_frame(api.Entries(Code.DISK_ERROR, group, leader, term, remark=(
                f"entry {index} is damaged on {node.cfg.self_id}: {node.scrubber.damaged[index].detail}")), f.opaque)
        if bad is not None:
            last = bad - 1
        if raw:
            try:
                blob, n = s.read_entries(index, last - index + 1, MAX_GET_BYTES)
            except StoreError as exc:
                if node.scrubber is not None:
                    node.scrubber.suspect(index)
                node.counts.refusal(Code.DISK_ERROR.name)
                return answer_frame(api.Entries(Code.DISK_ERROR, group, leader, term, remark=str(exc)), f.opaque)
            return raw_answer_frame(f.opaque, GET, blob, n, term, leader)
        entries, total = [], 0
        try:
            for i in range(index, last + 1):
                e = s.get(i, checked=True)  # (a body failing its CRC is never served)
                if entries and total + e.size > MAX_GET_BYTES:
                    break
                total += e.size
                entries.append(store_entry_object(e))
        except StoreError as exc:
            if not entries:  # (else the entries before it are answered; asked next, it is named)
                if node.scrubber is not None:
                    node.scrubber.suspect(index)
                node.counts.refusal(Code.DISK_ERROR.name)
                return answer_frame(api.Entries(Code.DISK_ERROR, group, leader, term, remark=str(exc)), f.opaque)
        return answer_frame(api.Entries(Code.SUCCESS, group, leader, term, entries), f.opaque)
