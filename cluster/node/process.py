"""A node process: the deciding logic (core.py) wired to the store, the clock and the network.

The node owns one asyncio loop. It ticks the core every few milliseconds, turns the core's
requests into frames on per-peer channels and feeds back their answers or failures, serves
peer requests and the client requests (METADATA, APPEND, GET) and operator STATUS, and
shuts down cleanly: on SIGTERM/SIGINT it stops serving, flushes the store and writes the
checkpoint. Client appends that arrive in the same loop iteration are proposed together,
so with ``flush=sync`` they share one fsync (group commit).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import logging
import os
import random
import signal
import time

from store.base import appended_rows
from store.errors import StoreError
from store.filestore import FileStore
from store.files import Flusher, SyncJob, flush_error, sync_fds, unlink_all
from store.packed import PackedBodies
from store.snapshot import SnapshotStore

from ..net import dialect
from ..raft.config import NodeConfig
from ..raft.core import RaftCore
from ..raft.dispatcher import DispatchState
from ..raft.proposal import Proposal
from ..raft.divergence import DivergenceSearch
from ..raft.member import Role
from .terms import FileTermStore
from ..raft.membership import initial as initial_members
from ..raft.membership import load_base, load_configs, save_base
from .metrics import Counts, MetricsServer
from ..raft.statemachine import Applier, StateMachineError
from ..raft.statemachine import load as load_state_machine
from ..net.tls import CLIENT, OPERATOR, PEER, Identity, Tls, TlsError, expect_member, refusal
from ..net.repeats import Repeats, held_back
from ..raft.rpc import Code, LeadershipTransferRequest, ProbeRequest, PushRequest, RepairRequest, split_entries
from ..net.transport import Channel, FrameServer, TooManyHandshakes, TransportError
from ..net.wire import (
    APPEND,
    CHANGE_MEMBERS,
    FORCE_COMPARE,
    GET,
    METADATA,
    FORCE_TRUNCATE,
    HEART_BEAT,
    INSTALL_SNAPSHOT,
    LEADERSHIP_TRANSFER,
    OPERATOR_CODES,
    PROBE,
    PUSH,
    QUERY,
    REMOTING_NO_PERMISSION,
    REPAIR,
    VOTE,
    WATERMARKS,
    REMOTING_NOT_SUPPORTED,
    STATUS,
    BadMessage,
    Frame,
    ProtocolError,
    append_answers,
    check_bodies,
    decode_request,
    decode_response,
    error_frame,
    json_body,
    request_code_of,
    request_frame,
    response_bytes,
    response_frame,
)
from ..net.wire import COUNT, ENTRY_INDEX, INDEX, get_field, json_object

log = logging.getLogger("dledgerctl.node")


@functools.cache
def _version() -> str:
    try:
        from importlib.metadata import version
        return version("dledgerctl")
    except Exception:  # noqa: BLE001 - run from a checkout that was never installed
        return "unknown"

# requests only members send each other (decoded, then checked against their sender)
_PEER_CODES = frozenset({VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER, PROBE, REPAIR, INSTALL_SNAPSHOT})


def _client_need(f: Frame) -> str:
    """What a client request needs under TLS: an operator for what changes a replica."""
    if f.code in (FORCE_TRUNCATE, CHANGE_MEMBERS):
        return OPERATOR
    if f.code == FORCE_COMPARE:
        try:
            return CLIENT if json_object(f.body).get("dryRun") is True else OPERATOR
        except BadMessage:
            return OPERATOR
    return CLIENT
TICK_MS = 5
MAX_GET_COUNT = 1024
MAX_GET_BYTES = 16 << 20


class BackgroundSync:
    """Runs the store's sync jobs (store.files.SyncJob) off the event loop, one batch at a
    time; :meth:`run` returns a future of the batch, failing with StoreIOError.

    With store._flusher built, a thread of its own runs them without ever taking the
    interpreter lock and wakes the loop through an eventfd. Otherwise sync_fds runs in the
    loop's default executor: a pool thread is woken through a queue, takes the interpreter
    lock around each syscall and to hand back its result, and the loop is woken through
    call_soon_threadsafe. With the loop busy in Python, that cost 1.2-1.8 ms of CPU per
    flush outside the loop thread, against 0.12-0.14 ms for the compiled thread
    (benchmarks/bench_flush.py), and a node flushes 100 times a second."""

    def __init__(self, loop: asyncio.AbstractEventLoop, compiled: bool = True) -> None:
        self.loop = loop
        self._flusher = None
        self._waiter: asyncio.Future | None = None
        if compiled and Flusher is not None:
            self._flusher = Flusher()
            loop.add_reader(self._flusher.fileno(), self._collect)

    @property
    def compiled(self) -> bool:
        return self._flusher is not None

    def run(self, jobs: list[SyncJob]) -> asyncio.Future:
        if self._flusher is None:
            return self.loop.run_in_executor(None, sync_fds, jobs)
        fut = self.loop.create_future()
        self._flusher.submit(jobs)  # (RuntimeError while the batch before is not collected)
        self._waiter = fut
        return fut

    def _collect(self) -> None:
        code = self._flusher.collect()
        if code < 0 or self._waiter is None:  # (woken early: not done yet)
            return
        fut, self._waiter = self._waiter, None
        if not fut.done():
            if code:
                fut.set_exception(flush_error(code))
            else:
                fut.set_result(None)

    def close(self) -> None:
        """Stop the thread (after a batch under way); await :meth:`run`'s future first."""
        if self._flusher is not None:
            self.loop.remove_reader(self._flusher.fileno())
            self._flusher.close()
            self._flusher = None


def node_dir(cfg: NodeConfig) -> str:
    return os.path.join(cfg.store_base_dir, f"dledger-{cfg.self_id}")


def _allow_descriptors(want: int) -> None:
    """Raise the soft limit on open files towards ``want`` (within the hard limit): with the
    common soft limit of 1024, accepting connections would fail before --max-connections."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            if new < want:
                log.warning("open files limited to %d (hard limit): --max-connections may not be reached", new)
    except (ImportError, ValueError, OSError) as exc:
        log.warning("cannot raise the open files limit: %s", exc)


def _unlink_logged(paths: list[str]) -> None:
    try:
        unlink_all(paths)
    except StoreError as exc:
        log.warning("clean space: %s", exc)


class Node:
    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        self.dir = node_dir(cfg)
        # the term and vote first (StoreCorruptError when they cannot be used): nothing opened yet to undo
        self.terms = FileTermStore(self.dir)
        self.terms.load()
        # The core decides when to flush (flush=sync: before acknowledging); the store itself
        # never flushes inline.
        self.store = FileStore.open(self.dir, data_file_size=cfg.data_file_size,
                                    index_file_size=cfg.index_file_size, flush="async",
                                    drop_behind=cfg.drop_behind)
        dropped = self.store.recovery_warning()
        if dropped is not None:  # (said at the default level: entries this node held are gone)
            log.warning("%s: %s", self.dir, dropped)
        # what the metrics count as the node goes (cluster/node/metrics.py), served with --metrics-address
        self.counts = Counts()
        self.counts.recovery_dropped = self.store.recovery_dropped()
        self.metrics: MetricsServer | None = None
        self._leader_seen: tuple | None = None  # (term, leader) last counted as a leader change
        # Head files that retention deletes are unlinked in this thread, in order: unlinking a
        # 1 GiB file whose pages are cached takes about half a second (freeing them).
        self._unlinker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="unlink")
        self.store.remover = lambda paths: self._unlinker.submit(_unlink_logged, paths)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.core: RaftCore | None = None
        # TlsError when its files do not do, or name another identity than this member's
        self.tls = Tls(cfg.tls, Identity(cfg.group, "member", cfg.self_id)) if cfg.tls is not None else None
        # who the members are: the config entries of the log over what members.json kept,
        # else --peers (cluster/raft/membership.py)
        kept = load_base(self.dir)
        base, base_index = kept or (initial_members(cfg.peers, cfg.self_id, cfg.learner), -1)
        self.configs = load_configs(self.store, base, base_index, warn=log.warning)
        self.channels: dict[str, Channel] = {}
        self._members_seen = None
        self.server = FrameServer(self._serve, max_frame=cfg.max_frame_bytes,
                                  ssl=None if self.tls is None else self.tls.server,
                                  max_connections=cfg.max_connections, idle_timeout=cfg.idle_timeout_s,
                                  frame_timeout=cfg.frame_timeout_s, handshake_timeout=cfg.frame_timeout_s,
                                  max_inflight=cfg.max_inflight_per_connection)
        self._refusals_logged: dict[tuple, float] = {}
        self._bad_requests = Repeats()  # refused malformed requests, logged per host
        self._repeated_notes = Repeats()  # the core's notes: the same line at most every 10 s
        # a state machine fed the committed entries, with its snapshots (cluster/raft/statemachine.py)
        self.applier: Applier | None = None
        if cfg.state_machine:
            self.applier = Applier(load_state_machine(cfg.state_machine), self.store, SnapshotStore(self.dir),
                                   cfg.snapshot_threshold)
        self._snapshotter = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot")
        self._applying = False
        self._queries: list[tuple] = []  # QUERYs waiting for entries to be applied: (index, future)
        # members' connections keep their place when the connection limit is reached
        self._sync_members(self.configs.current)
        self._batch: list[tuple] = []  # APPENDs not proposed yet: (body, count, largest, opaque, connection)
        # proposals waiting for the quorum: (proposal, waiters, DLedger's waiters, when, body bytes)
        self._waiting: dict[int, tuple[Proposal, list, list, float, int]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._changes: dict[int, asyncio.Future] = {}  # membership changes waiting for their entry to commit
        self._stop = asyncio.Event()
        self._flushing = None
        self._syncer: BackgroundSync | None = None
        self._sync_waiters: list = []
        self._index_due = False  # the next flush syncs the index files too (the periodic one does)

    def now(self) -> int:
        return int(self.loop.time() * 1000)

    def _close_later(self, ch: Channel) -> None:
        if self.loop is not None:
            t = self.loop.create_task(ch.close())
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    def _sync_members(self, members) -> None:
        """A channel to every member (the leader replicates to learners too); those of members
        that left are closed. Members' connections keep their place at the connection limit."""
        if members is self._members_seen:
            return
        self._members_seen = members
        cfg = self.cfg
        ssl_out = {} if self.tls is None else {"ssl": self.tls.client}
        for p, peer in members.members.items():
            peer = cfg.peer_addresses.get(p, peer)
            ch = self.channels.get(p)
            if p == cfg.self_id or (ch is not None and (ch.host, ch.port) == (peer.host, peer.port)):
                continue
            if ch is not None:
                self._close_later(ch)
            self.channels[p] = Channel(peer.host, peer.port, max_frame=cfg.max_frame_bytes,
                                       expect=functools.partial(expect_member, cfg.group, p), **ssl_out)
        for p in [p for p in self.channels if p not in members.members]:
            self._close_later(self.channels.pop(p))
        self.server.members = frozenset(Identity(cfg.group, "member", p) for p in {**cfg.peers, **members.members})

    # -- running ----------------------------------------------------------------------
    async def run(self, ready=None) -> None:
        """Serve until stop() or SIGTERM/SIGINT; ``ready()`` is called once listening."""
        self.loop = asyncio.get_running_loop()
        # connections, as many again in TLS handshakes, the store's files and some room
        _allow_descriptors(2 * self.cfg.max_connections + 256)
        default_handler = self.loop.get_exception_handler()

        def quiet_refusals(loop, context) -> None:  # a connection refused by the limits is not an error
            if isinstance(context.get("exception"), TooManyHandshakes):
                return
            if default_handler is None:
                loop.default_exception_handler(context)
            else:
                default_handler(loop, context)
        self.loop.set_exception_handler(quiet_refusals)
        self.core = RaftCore(self.cfg, self.store, self.terms, random.Random(), self.now(),
                             self._flush_in_background, self._sync_then, time.time, self._disk_usage)
        self.core.configs = self.configs
        self.core.save_base = lambda m, index: save_base(self.dir, m, index)
        log.info("members: %s%s", self.configs.current.describe(),
                 f" (config entry {self.configs.last_index})" if self.configs.entries else
                 " (kept in members.json)" if self.configs.base_index >= 0 else " (--peers)")
        if self.applier is not None:
            started = time.perf_counter()
            said = self.applier.recover()
            self.counts.snapshot_load = time.perf_counter() - started
            log.info("state machine %s: %s", self.cfg.state_machine, said)
            self.core.retention_limit = self.applier.snapshot_index
            self.core.applier = self.applier
        self._syncer = BackgroundSync(self.loop)
        me = self.cfg.peers[self.cfg.self_id]
        try:
            await self.server.start(me.host, me.port)
        except OSError as exc:
            self._syncer.close()
            self.store.close()
            raise OSError(exc.errno, f"cannot listen on {me.address}: {exc.strerror}") from exc
        for sig, handler in ((signal.SIGTERM, self.stop), (signal.SIGINT, self.stop), (signal.SIGHUP, self.reload_tls)):
            try:
                self.loop.add_signal_handler(sig, handler)
            except (RuntimeError, ValueError):  # not the main thread
                pass
        log.info("node %s of group %s listening on %s (store %s, flush %s)", self.cfg.self_id, self.cfg.group,
                 me.address, self.dir, self.cfg.flush)
        if self.cfg.metrics_address is not None:
            host, port = self.cfg.metrics_address
            try:
                self.metrics = MetricsServer(host, port, self.loop, self.metrics_state, self.counts,
                                             {"group": self.cfg.group, "node": self.cfg.self_id},
                                             self.cfg.tls if self.cfg.metrics_tls else None)
            except OSError as exc:  # (ssl.SSLError too: a certificate file the TLS context took already)
                await self._shutdown()
                raise OSError(exc.errno, f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
            log.info("metrics on %s", self.metrics.url)
        if ready is not None:
            ready()
        ticker = asyncio.create_task(self._tick_loop())
        try:
            await self._stop.wait()
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            await self._shutdown()

    def _flush_in_background(self) -> None:
        """The periodic flush: fdatasync in a thread (BackgroundSync), so the loop keeps
        serving while the disk writes."""
        self._index_due = True
        if self._flushing is None:
            self._sync_then(None)

    def _sync_then(self, done) -> None:
        """Make everything written so far durable in a thread (BackgroundSync), then call ``done()``
        on the loop. One flush at a time: callers that arrive meanwhile share the next one
        (group commit), which covers everything written before it starts."""
        if done is not None:
            self._sync_waiters.append(done)
        if self._flushing is None:
            self._start_flush()

    def _start_flush(self) -> None:
        waiters, self._sync_waiters = self._sync_waiters, []
        # appends waiting for the disk need their data files synced, not the index files
        # (FileStore.flush); those go with the periodic flush
        index, self._index_due = self._index_due or not waiters, False
        fds = self.store.take_dirty(index=index)
        started = time.perf_counter()
        if fds:
            fut = self._syncer.run(fds)
        else:  # nothing written since the last flush: done, without waking a thread (an idle
            fut = self.loop.create_future()  # node flushes every 10 ms)
            fut.set_result(None)
        self._flushing = fut

        def finished(f) -> None:
            self._flushing = None
            if f.cancelled():
                return
            if f.exception() is not None:
                self.counts.flush_failures += 1
                log.error("flush failed, appends waiting for it stay unacknowledged: %s", f.exception())
            else:
                if fds:
                    self.counts.flush_latency.observe(time.perf_counter() - started)
                for cb in waiters:
                    cb()
                if waiters and self.core is not None:
                    self._process()
            if self._sync_waiters:
                self._start_flush()

        fut.add_done_callback(finished)

    def stop(self) -> None:
        self._stop.set()

    def reload_tls(self) -> None:
        """SIGHUP: load the TLS certificate, key and CA files again (a rotated certificate);
        new connections use them, open ones go on. A failed reload keeps the old ones."""
        if self.tls is None:
            log.info("SIGHUP: no TLS to reload")
            return
        try:
            self.tls.reload()
        except TlsError as exc:
            log.error("TLS reload failed, keeping the certificate loaded before: %s", exc)
            return
        log.warning("TLS certificate reloaded from %s", self.cfg.tls.cert)

    async def _shutdown(self) -> None:
        log.info("node %s shutting down", self.cfg.self_id)
        if self.metrics is not None:
            self.metrics.close()  # (a scrape under way runs in a thread of its own and ends by itself)
            self.metrics = None
        await self.server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for ch in self.channels.values():
            await ch.close()
        if self._flushing is not None:
            await asyncio.gather(self._flushing, return_exceptions=True)
        if self._syncer is not None:
            self._syncer.close()
        for p, waiters, dledger, _t0, _size in self._waiting.values():
            self._answer_appends(p, waiters, Code.TERM_CHANGED, "node is shutting down", dledger)
        self._unlinker.shutdown(wait=True)
        self._snapshotter.shutdown(wait=True)
        self.store.close()  # flush + checkpoint

    async def _tick_loop(self) -> None:
        while True:
            self.core.tick(self.now())
            self._process()
            await asyncio.sleep(TICK_MS / 1000)

    # -- core outputs -----------------------------------------------------------------
    def _process(self) -> None:
        ready = self.core.take()
        m = self.core.member
        if m.leader_id is not None and self._leader_seen != (m.term, m.leader_id):
            self._leader_seen = (m.term, m.leader_id)
            self.counts.leader_changes += 1
        if ready.notes:
            now = time.monotonic()
            for note in ready.notes:
                held = self._repeated_notes.check(str(note), now)  # (a loop says each line once in a while)
                if held is not None:
                    log.info("%s%s", note, held_back(held), extra=getattr(note, "fields", None))
        self._sync_members(self.core.members)  # (at once when they did not change)
        if self.applier is not None and not self._applying and self.store.committed_index > self.applier.applied:
            self._applying = True
            self.loop.call_soon(self._apply)
        timeout = self.cfg.max_push_timeout_ms / 1000
        sent = set()
        for s in ready.sends:
            ch = self.channels.get(s.to)
            if ch is None:
                continue  # (to a member that has left since)
            if ch.send(self._frame_for(s.to, s.request), timeout,
                       functools.partial(self._feed, s.to, s.request, sent=time.perf_counter())):
                sent.add(s.to)
                continue  # connected: the answer comes back through the callback, no task
            t = asyncio.create_task(self._call(s.to, s.request))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        # The followers start on a push while this node goes on (say, to the other
        # follower's answer read in the same loop iteration): the wave of work that
        # 64 clients' appends make goes round sooner. Measured with 64 clients, this and
        # the same for client replies in _finish: +2% and +12% appends/s in two series of
        # same-minute pairs.
        for peer in sent:
            self.channels[peer].flush()
        for p in ready.done:
            self._finish(p)

    def _frame_for(self, peer: str, req) -> Frame:
        """A request to ``peer`` in its dialect: DLedger's JSON PUSH to a Java member, the
        raw-bytes one to a dledgerctl member; every other request is read by both."""
        if type(req) is PushRequest and peer in self.core.java_peers:
            spans = [(off, size) for off, size, _i, _t in split_entries(req.entries)] if req.entries else []
            return Frame(PUSH, 0, body=dialect.push_body(req, peer, spans))
        return request_frame(req, 0, peer)

    async def _call(self, peer: str, req) -> None:
        """A request on a channel that must connect first."""
        sent = time.perf_counter()
        try:
            ch = self.channels.get(peer)
            if ch is None:
                raise TransportError(f"{peer} is no member now")
            frame = await ch.request(self._frame_for(peer, req), self.cfg.max_push_timeout_ms / 1000)
        except (TransportError, ProtocolError) as exc:
            self._feed(peer, req, None, exc)
        else:
            self._feed(peer, req, frame, None, sent)

    def _feed(self, peer: str, req, frame: Frame | None, exc: BaseException | None, sent: float = 0.0) -> None:
        """Hand a peer's answer (or why there is none) to the core and act on what follows;
        ``sent``: when the request left (perf_counter), for the replication metrics."""
        if self.core is None or self._stop.is_set():
            return
        if frame is not None:
            try:
                resp = decode_response(frame, request_code_of(req))
            except ProtocolError as err:
                exc = err
            else:
                if frame.language == "JAVA":  # (a peer is learnt to be Java from an answer that fits)
                    self.core.mark_java(peer)
        if exc is not None:
            self.core.on_failure(peer, req, str(exc), self.now())
        else:
            if type(req) is PushRequest and req.count and resp.code == Code.SUCCESS and sent:
                self.counts.replicated_to(peer, time.perf_counter() - sent, req.count, len(req.entries))
            self.core.on_response(peer, req, resp, self.now())
        self._process()

    def _finish(self, p: Proposal) -> None:
        fut = self._changes.pop(id(p), None)
        if fut is not None:
            if not fut.done():
                fut.set_result(None)
            return
        entry = self._waiting.pop(id(p), None)
        if entry is None:
            return
        c = self.counts
        if p.code == Code.SUCCESS:
            c.append_latency.observe(time.perf_counter() - entry[3], len(entry[1]) + len(entry[2]))
            c.appended_entries += p.count
            c.appended_bytes += entry[4]
        self._answer_appends(p, entry[1], p.code, p.remark, entry[2])
        for conn in {w[0] for w in entry[1] + entry[2]}:  # the answers leave now (see _process)
            conn.flush()

    # -- membership changes (peer add | remove | replace) -----------------------------
    def _change_members(self, f: Frame):
        """CHANGE_MEMBERS: the leader appends the config entry and answers once it commits
        (or at once when it refuses): code, remark, index, and the members then."""
        o = json_object(f.body)
        if get_field(o, "group", str, self.cfg.group) != self.cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {self.cfg.group!r}")
        kind = get_field(o, "kind", str)
        if kind not in ("add", "remove"):
            raise BadMessage(f"kind must be add or remove, not {kind!r}")
        node, address = get_field(o, "id", str), get_field(o, "address", str, None)
        if kind == "add" and not address:
            raise BadMessage("adding a member needs its address")
        p = self.core.change_members(kind, node, address, self.now())
        self._process()
        if p.done:
            return self._change_answer(f, p)
        fut = self._changes[id(p)] = self.loop.create_future()

        async def later() -> Frame:
            await fut
            return self._change_answer(f, p)
        return later()

    def _change_answer(self, f: Frame, p: Proposal) -> Frame:
        m = self.core.members
        return response_frame({"code": int(p.code), "remark": p.remark, "index": p.first_index, "term": p.term,
                               "leaderId": self.core.member.leader_id, "voters": list(m.voters),
                               "learners": list(m.learners),
                               "peers": {k: peer.address for k, peer in m.members.items()}}, f.opaque, f.code)

    # -- the state machine ------------------------------------------------------------
    def _apply(self) -> None:
        """Feed the state machine what was committed (a batch per loop iteration), answer the
        queries that waited for it, and save a snapshot in a thread when one is due."""
        self._applying = False
        a = self.applier
        started = time.perf_counter()
        try:
            a.step()
        except Exception as exc:  # noqa: BLE001 - a state machine's bug: stop applying, say why, keep serving
            log.error("state machine stopped at entry %d: %s", a.applied + 1, exc, exc_info=exc)
            self.applier = self.core.applier = None
            for _index, fut in self._queries:
                if not fut.done():
                    fut.set_exception(StateMachineError(f"the state machine stopped: {exc}"))
            self._queries = []
            return
        self.counts.apply_latency.observe(time.perf_counter() - started)
        if self._queries:
            ready = [q for q in self._queries if q[0] <= a.applied]
            self._queries = [q for q in self._queries if q[0] > a.applied]
            for _index, fut in ready:
                if not fut.done():
                    fut.set_result(None)
        if self.store.committed_index > a.applied:
            self._applying = True
            self.loop.call_soon(self._apply)
        due = a.due()
        if due is not None:
            a.writing = True

            def save_and_prune():  # (in the snapshot thread: serialising, writing, removing old ones)
                started = time.perf_counter()
                a.save(*due)
                self.loop.call_soon_threadsafe(self.counts.snapshot_save.observe, time.perf_counter() - started)
                return a.snapshots.prune(self.cfg.snapshots_kept)
            fut = self.loop.run_in_executor(self._snapshotter, save_and_prune)
            fut.add_done_callback(functools.partial(self._snapshot_saved, due[0], due[1]))

    def _snapshot_saved(self, index: int, term: int, fut) -> None:
        a = self.applier
        if a is None:
            return
        a.writing = False
        if fut.cancelled():
            return
        if fut.exception() is not None:
            log.error("snapshot at entry %d not saved: %s", index, fut.exception())
            return
        a.saved(index, term)
        self.core.snapshot_saved(index, self.now())
        gone = fut.result()
        log.info("snapshot saved at entry %d (term %d)%s", index, term,
                 f"; removed {', '.join(str(g.index) for g in gone)}" if gone else "")
        self._process()  # (the log it covers was deleted: the notes say so)

    def _query(self, f: Frame):
        """QUERY: the state machine's answer once it has applied everything committed when
        the request arrived (so a read follows the writes acknowledged before it): a Frame
        now, or an awaitable of one while entries are still being applied."""
        o = json_object(f.body)
        if get_field(o, "group", str, self.cfg.group) != self.cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {self.cfg.group!r}")
        if self.applier is None or not callable(getattr(self.applier.sm, "query", None)):
            return self._refusal(f, Code.UNSUPPORTED, "this node runs no state machine that answers queries"
                                 + ("" if self.cfg.state_machine else " (start it with --state-machine)"))
        try:
            request = base64.b64decode(get_field(o, "query", str), validate=True)
        except (ValueError, TypeError):
            raise BadMessage("field 'query' is not base64") from None
        want = self.store.committed_index
        if self.applier.applied >= want:
            return self._query_answer(f, request)
        return self._query_later(f, request, want)

    async def _query_later(self, f: Frame, request: bytes, want: int) -> Frame:
        fut = self.loop.create_future()
        self._queries.append((want, fut))
        try:
            await asyncio.wait_for(fut, self.cfg.max_wait_ack_ms / 1000)
        except asyncio.TimeoutError:
            return self._refusal(f, Code.TIMEOUT, f"entry {want} not applied within {self.cfg.max_wait_ack_ms} ms")
        except StateMachineError as exc:
            return self._refusal(f, Code.INTERNAL_ERROR, str(exc))
        if self.applier is None:
            return self._refusal(f, Code.INTERNAL_ERROR, "the state machine stopped")
        return self._query_answer(f, request)

    def _query_answer(self, f: Frame, request: bytes) -> Frame:
        answer = self.applier.sm.query(request)
        return response_frame({"code": int(Code.SUCCESS), "result": base64.b64encode(answer).decode("ascii"),
                               "appliedIndex": self.applier.applied, "role": str(self.core.member.role)},
                              f.opaque, QUERY)

    def metrics_state(self) -> dict:
        """What a metrics scrape reads of the live node (on the loop; cluster/node/metrics.py)."""
        core, s, now = self.core, self.store, self.now()
        m = core.members
        out = {"version": _version(), "flush": self.cfg.flush, "role": str(core.member.role),
               "term": core.member.term, "members": {"voter": len(m.voters), "learner": len(m.learners)},
               "begin_index": s.begin_index, "end_index": s.end_index, "committed_index": s.committed_index,
               "pending_appends": len(core.pending), "peers": [], "dispatch_states": [str(x) for x in DispatchState],
               "disk_usage": self._disk_usage(), "connections": self.server.connections,
               "closed_for": dict(self.server.closed_for),
               "store_files": {"data": (len(s.data.files), s.data.file_size),
                               "index": (len(s.index.files), s.index.file_size)}}
        if self.applier is not None:
            out["applied_index"], out["snapshot_index"] = self.applier.applied, self.applier.snapshot_index
            try:
                out["snapshots"] = len(self.applier.snapshots.list(check_data=False))
            except StoreError:
                pass  # (an unreadable snapshot directory: the node's log says so when it matters)
        if core.member.role == Role.LEADER:
            out["peers"] = [r for r in core.watermarks(now) if r["peer"] != self.cfg.self_id]
        return out

    def _disk_usage(self) -> float | None:
        """The store's file system usage as a ratio, as ``df`` shows it: used / (used +
        available to us). DLedger (DLedgerUtils.getDiskPartitionSpaceUsedPercent) divides by
        the whole size, which on a file system with reserved or quota'd space says there is
        room where writes already fail. None when it cannot be read."""
        try:
            st = os.statvfs(self.store.layout.data_dir)
        except OSError:
            return None
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        room = used + st.f_bavail * st.f_frsize
        return None if room <= 0 else used / room

    # -- serving ----------------------------------------------------------------------
    def _serve(self, f: Frame, conn):
        """The answer to a frame: a Frame now, None when it comes later through ``conn``
        (APPEND), or an awaitable of one (operator requests)."""
        try:
            if self.tls is not None and f.code not in _PEER_CODES:
                denied = self._denied(f, conn, _client_need(f))
                if denied is not None:
                    return denied
            if f.code == APPEND:
                return self._append(f, conn)
            if f.code == GET:
                started = time.perf_counter()
                try:
                    return self._get(f)
                finally:
                    self.counts.read_latency.observe(time.perf_counter() - started)
            if f.code in (METADATA, STATUS):
                refused = self._check_addressee(f)
                return refused or response_frame(self._metadata(), f.opaque, f.code)
            if f.code in OPERATOR_CODES:
                return self._operator(f)
            if f.code == QUERY:
                return self._query(f)
            if f.code == CHANGE_MEMBERS:
                return self._change_members(f)
            if f.code == PUSH and "term" not in f.ext:  # a Java leader's: JSON, entries as objects
                req = dialect.decode_push(f.body)
            else:
                req = decode_request(f)
            if self.tls is not None:
                taking = type(req) is LeadershipTransferRequest and not req.take
                denied = self._denied(f, conn, OPERATOR if taking else PEER, None if taking else req.leader_id)
                if denied is not None:
                    return denied
        except BadMessage as exc:
            if f.code == APPEND:
                self.counts.appends_answered("BAD_REQUEST", 1)
            else:
                self.counts.refusal("BAD_REQUEST")
            host = conn.peer[0] if conn.peer else None
            held = self._bad_requests.check(host, time.monotonic())
            if held is not None:
                log.warning("refused request code %d from %s: %s%s", f.code, host, exc, held_back(held))
            if "not a peer request" in str(exc):
                return error_frame(f.opaque, REMOTING_NOT_SUPPORTED, str(exc))
            # (answered, not dropped: a peer or client with a bug learns why; nothing here changed)
            return response_frame({"code": int(Code.UNEXPECTED_ARGUMENT), "term": self.core.member.term,
                                   "leaderId": self.core.member.leader_id, "remark": str(exc)}, f.opaque, f.code)
        started = time.perf_counter() if f.code == INSTALL_SNAPSHOT else 0.0  # (timed: installs only)
        # (a Java member is learnt from its request only once the core has taken it)
        resp = self.core.handle(req, self.now(), java=f.language == "JAVA")
        if f.code == PUSH and resp.code == Code.SUCCESS and req.count:
            self.counts.received_entries += req.count
            self.counts.received_bytes += len(req.entries)
        elif f.code == INSTALL_SNAPSHOT and resp.installed:
            self.counts.snapshot_install.observe(time.perf_counter() - started)
        self._process()
        if f.code == INSTALL_SNAPSHOT and resp.installed and self.applier is not None and not self._applying:
            self._applying = True  # (queries waiting for what the snapshot holds are answered)
            self.loop.call_soon(self._apply)
        return response_frame(resp, f.opaque, f.code)

    def _denied(self, f: Frame, conn, need: str, sender: str | None = None) -> Frame | None:
        """Under TLS: the refusal of a request its connection's identity may not make (one
        warning in the log per client, reason and minute), or None."""
        why = refusal(conn.identity, self.cfg.group, self.cfg.peers, need, sender)
        if why is None:
            return None
        key = (conn.peer[0] if conn.peer else None, why)
        now = time.monotonic()
        if now - self._refusals_logged.get(key, -60.0) >= 60.0:
            if len(self._refusals_logged) > 1024:
                self._refusals_logged.clear()
            self._refusals_logged[key] = now
            log.warning("refused request code %d from %s: %s", f.code, conn.peer, why)
        self.counts.refusal("NO_PERMISSION")
        return error_frame(f.opaque, REMOTING_NO_PERMISSION, why)

    # -- operator requests (peer watermarks | compare | truncate) ------------------------
    def _operator(self, f: Frame):
        """Checks the request now; WATERMARKS is answered at once, the others (which talk
        to the follower) return an awaitable of the answer."""
        o = json_object(f.body)
        if get_field(o, "group", str, self.cfg.group) != self.cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {self.cfg.group!r}")
        peer = get_field(o, "peer", str, None) if f.code != WATERMARKS else None
        if f.code != WATERMARKS and peer is None:
            raise BadMessage("missing field 'peer'")
        refused = self.core.refuse_operator(peer)
        if refused is not None:
            return self._refusal(f, *refused)
        if f.code == WATERMARKS:
            return response_frame({"code": int(Code.SUCCESS), "peers": self.core.watermarks(self.now())}, f.opaque,
                                  f.code)
        if f.code == FORCE_COMPARE:
            return self._force_compare(f, peer, get_field(o, "deep", bool, False), get_field(o, "dryRun", bool, False))
        return self._force_truncate(f, peer, get_field(o, "fromIndex", ENTRY_INDEX))

    def _refusal(self, f: Frame, code: Code, remark: str) -> Frame:
        self.counts.refusal(code.name)
        leader = self.core.member.leader_id
        out = {"code": int(code), "remark": remark, "leaderId": leader}
        if leader in self.cfg.peers:
            out["leaderAddress"] = self.cfg.peers[leader].address
        return response_frame(out, f.opaque, f.code)

    async def _ask(self, peer: str, req):
        """One request to a peer outside the core's own traffic; its decoded answer."""
        ch = self.channels.get(peer)
        if ch is None:
            raise TransportError(f"{peer} is no member now")
        frame = await ch.request(self._frame_for(peer, req), self.cfg.max_push_timeout_ms / 1000 * 5)
        return decode_response(frame, request_code_of(req))

    async def _force_compare(self, f: Frame, peer: str, deep: bool, dry_run: bool) -> Frame:
        c, term = self.cfg, self.core.member.term
        search = DivergenceSearch(self.store, peer, deep=deep)
        try:
            while (probe := search.next_probe()) is not None:
                if self.core.member.term != term or self.core.refuse_operator(peer):
                    return self._refusal(f, Code.TERM_CHANGED, "leadership changed during the compare")
                resp = await self._ask(peer, ProbeRequest(c.group, c.self_id, term, *probe))
                if resp.code != Code.SUCCESS:
                    return self._refusal(f, resp.code, f"{peer} answered the probe with {resp.code.name}: {resp.remark}")
                search.feed(resp)
            out = {"code": int(Code.SUCCESS), **search.result.as_row(), "dry_run": dry_run, "dropped": 0,
                   "repaired": False}
            if not dry_run:
                result = search.result
                if result.truncate_from is not None:
                    repaired = await self._repair(f, peer, result.truncate_from, term,
                                                  f"compare found {peer} differs from {result.truncate_from}")
                    if isinstance(repaired, Frame):
                        return repaired
                    out["dropped"], out["repaired"] = repaired.dropped, True
                self.core.compare_peer(peer, result.match_index, "an operator asked for a compare", self.now())
                self._process()
            return response_frame(out, f.opaque, f.code)
        except (TransportError, ProtocolError) as exc:
            return self._refusal(f, Code.NETWORK_ERROR, f"{peer}: {exc}")
        except StoreError as exc:
            return self._refusal(f, Code.DISK_ERROR, f"the leader's own log: {exc}")

    async def _force_truncate(self, f: Frame, peer: str, from_index: int) -> Frame:
        committed = self.store.committed_index
        if from_index <= committed:
            return self._refusal(f, Code.UNEXPECTED_ARGUMENT,
                                 f"refusing to cut {peer} from {from_index}: entries up to {committed} are committed "
                                 f"(cutting them could lose data)")
        try:
            repaired = await self._repair(f, peer, from_index, self.core.member.term,
                                          f"an operator cuts {peer} from {from_index}")
        except (TransportError, ProtocolError) as exc:
            return self._refusal(f, Code.NETWORK_ERROR, f"{peer}: {exc}")
        if isinstance(repaired, Frame):
            return repaired
        self.core.compare_peer(peer, from_index - 1, "re-filling after an operator's truncation", self.now())
        self._process()
        return response_frame({"code": int(Code.SUCCESS), "peer": peer, "from_index": from_index,
                               "dropped": repaired.dropped, "follower_end": repaired.end_index,
                               "follower_committed": repaired.committed_index, "committed_index": committed},
                              f.opaque, f.code)

    async def _repair(self, f: Frame, peer: str, from_index: int, term: int, why: str):
        """Pause replication to ``peer``, have it drop entries from ``from_index``: the
        RepairResponse, or a refusal Frame. Replication stays paused until the caller sends
        the dispatcher back to COMPARE (or, on failure, it is resumed here)."""
        c = self.cfg
        if self.core.member.term != term or not self.core.pause_peer(peer, from_index - 1, why):
            return self._refusal(f, Code.TERM_CHANGED, "leadership changed before the truncation was sent")
        try:
            resp = await self._ask(peer, RepairRequest(c.group, c.self_id, term, from_index))
        except BaseException:
            self.core.compare_peer(peer, from_index - 1, "repair failed", self.now())
            raise
        if resp.code != Code.SUCCESS:
            self.core.compare_peer(peer, from_index - 1, "repair refused", self.now())
            self._process()
            return self._refusal(f, resp.code, f"{peer} refused the truncation: {resp.remark}")
        return resp

    def _check_addressee(self, f: Frame) -> Frame | None:
        """UNKNOWN_GROUP when a client request names another group, UNKNOWN_MEMBER when it
        names another member in ``remoteId`` (as DLedger answers them: the client's idea of
        who is where is wrong); None when it names this group and node, or none (earlier
        dledgerctl clients did not say)."""
        req = dialect.client_request(f.body) if bytes(f.body[:1]) == b"{" else None
        if req is None:
            return None
        if req.group is not None and req.group != self.cfg.group:
            code, remark = Code.UNKNOWN_GROUP, f"this node serves group {self.cfg.group!r}, not {req.group!r}"
        elif req.remoteId is not None and req.remoteId != self.cfg.self_id:
            code, remark = Code.UNKNOWN_MEMBER, f"this is {self.cfg.self_id}, not {req.remoteId}"
        else:
            return None
        self.counts.refusal(code.name)
        return response_frame({"code": int(code), "group": self.cfg.group, "leaderId": self.core.member.leader_id,
                               "remark": remark}, f.opaque, f.code)

    def _metadata(self) -> dict:
        d = self.core.describe()
        d["replication"] = d.pop("peers", [])
        d["leaderId"] = d["leader"]  # (DLedger's MetadataResponse: group, leaderId, peers)
        d["code"] = int(Code.SUCCESS)
        d["address"] = self.cfg.peers[self.cfg.self_id].address
        d["peers"] = {p: peer.address for p, peer in self.core.members.members.items()}
        if self.applier is not None:
            d["applied_index"], d["snapshot_index"] = self.applier.applied, self.applier.snapshot_index
        d["flush"] = self.cfg.flush
        d["flush_interval_ms"] = self.cfg.flush_interval_ms
        return d

    def _append(self, f: Frame, conn):
        """Checks the request now (BadMessage) and queues it for the next proposal; its
        answer goes to ``conn`` once the entries commit or fail (_answer_appends). Nothing
        is made per request but the queued tuple: appends are the hot path."""
        if "count" not in f.ext:  # DLedger's own client: one body, base64 in a JSON object
            return self._append_dledger(f, conn)
        try:
            count = int(f.ext["count"])
        except ValueError:
            raise BadMessage("extField 'count' is not an integer") from None
        if f.ext.get("group", self.cfg.group) != self.cfg.group:
            self.counts.appends_answered(Code.UNKNOWN_GROUP.name, 1)
            return response_frame({"code": int(Code.UNKNOWN_GROUP), "remark": f"group is {self.cfg.group!r}"},
                                  f.opaque, APPEND)
        largest = check_bodies(f.body, count)
        if not self._batch:
            self.loop.call_soon(self._propose_batch)
        self._batch.append((f.body, count, largest, f.opaque, conn, False))
        conn.hold()
        return None

    def _append_dledger(self, f: Frame, conn):
        """An APPEND in DLedger's form (AppendEntryRequest): queued like ours, answered as
        DLedger answers (AppendEntryResponse: code, group, index, leaderId, pos, term)."""
        req = dialect.client_request(f.body)
        refusal = None
        if req.group != self.cfg.group:
            refusal = (Code.UNKNOWN_GROUP, f"{req.group} != {self.cfg.group}")
        elif req.remoteId is not None and req.remoteId != self.cfg.self_id:
            refusal = (Code.UNKNOWN_MEMBER, f"{req.remoteId} != {self.cfg.self_id}")
        elif req.body is None:
            refusal = (Code.REQUEST_WITH_EMPTY_BODYS, "the request carries no body")
        if refusal is not None:
            self.counts.appends_answered(refusal[0].name, 1)
            return response_frame({"code": int(refusal[0]), "group": self.cfg.group, "index": -1, "pos": -1,
                                   "leaderId": self.core.member.leader_id, "term": self.core.member.term,
                                   "remark": refusal[1]}, f.opaque, APPEND)
        if not self._batch:
            self.loop.call_soon(self._propose_batch)
        self._batch.append((dialect.packed_one(req.body), 1, len(req.body), f.opaque, conn, True))
        conn.hold()
        return None

    def _answer_appends(self, p: Proposal, waiters: list, code: Code, remark: str, dledger: list = ()) -> None:
        """Answer the APPENDs of a proposal (``waiters``: connection, opaque, start, n), once:
        the caller has taken the proposal out of _waiting. Each answer is
        ``{"code", "term", "leaderId", "remark"}``, and on SUCCESS ``"entries"``, the
        request's ``n`` rows from ``start``, encoded whole (wire.response_bytes,
        wire.append_answers) around JSON that is made once per proposal up to the entries;
        the answers for one connection go to it in one call. ``dledger``: (connection,
        opaque, start) of APPENDs from DLedger's own client, answered in its form."""
        leader = p.leader_id or self.core.member.leader_id
        for w in waiters:
            w[0].release()
        self.counts.appends_answered(code.name, len(waiters) + len(dledger))
        if dledger:
            rows = appended_rows(p.appended) if code == Code.SUCCESS else None
            for conn, opaque, start in dledger:
                conn.release()
                index, term, pos, _size = rows[start] if rows is not None else (-1, p.term, -1, 0)
                conn.send_bytes(response_bytes(opaque, dialect.encode({
                    "code": int(code), "group": self.cfg.group, "index": index, "leaderId": leader, "pos": pos,
                    "term": term, **({"remark": remark} if remark else {})})))
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

    def _propose_batch(self) -> None:
        """Propose the APPENDs that arrived since the last call as one batch: their frames'
        bodies go to the store as they are (store.packed), without an object per body."""
        batch, self._batch = self._batch, []
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
        p = self.core.propose(bodies, self.now())
        self._waiting[id(p)] = (p, waiters, dledger, time.perf_counter(), size)
        if p.done:
            self._finish(p)
        self._process()

    def _get(self, f: Frame) -> Frame:
        """Committed entries from ``index`` (up to ``count``, MAX_GET_COUNT, MAX_GET_BYTES),
        each as DLedger's entry object. DLedger's own client asks with ``beginIndex`` for one
        entry (GetEntriesRequest) and is answered in its form (GetEntriesResponse)."""
        o = json_object(f.body)
        s = self.store
        theirs = "index" not in o and "beginIndex" in o
        refused = self._check_addressee(f)
        if refused is not None:
            return refused
        if theirs:
            index, count = get_field(o, "beginIndex", INDEX), 1
        else:
            index, count = get_field(o, "index", INDEX), get_field(o, "count", COUNT, 1)
        base = {"group": self.cfg.group, "leaderId": self.core.member.leader_id, "term": self.core.member.term}
        if not s.begin_index <= index <= s.committed_index or s.begin_index < 0:
            self.counts.refusal(Code.INDEX_OUT_OF_RANGE.name)
            return response_frame({**base, "code": int(Code.INDEX_OUT_OF_RANGE),
                                   "remark": f"index {index} is outside the committed log "
                                             f"[{s.begin_index}, {s.committed_index}]"}, f.opaque, GET)
        last = min(s.committed_index, index + max(1, min(count, MAX_GET_COUNT)) - 1)
        entries, total = [], 0
        try:
            for i in range(index, last + 1):
                e = s.get(i)
                if entries and total + e.size > MAX_GET_BYTES:
                    break
                total += e.size
                entries.append(dialect.store_entry_object(e))
        except StoreError as exc:
            self.counts.refusal(Code.DISK_ERROR.name)
            return response_frame({**base, "code": int(Code.DISK_ERROR), "remark": str(exc)}, f.opaque, GET)
        return response_frame({**base, "code": int(Code.SUCCESS), "entries": entries}, f.opaque, GET)
