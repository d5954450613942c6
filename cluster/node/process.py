"""A node process: the deciding logic (raft/core.py) wired to the store, the clock and the network.

The node owns one asyncio loop. It ticks the core every few milliseconds, turns the core's
requests into frames on per-peer channels and feeds back their answers or failures, feeds
the state machine what is committed, and shuts down cleanly: on SIGTERM/SIGINT it stops
serving, flushes the store and writes the checkpoint. What it answers is its request
handler's (requests.py, with its parts reads.py, operator.py and peers.py; client appends
that arrive in the same loop iteration are proposed together, so with ``flush=sync`` they
share one fsync), which sees the node through nodeview.py and answers what the core
finished for clients itself; its flushes run off the loop (background.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import random
import signal
import time

from store.errors import StoreCorruptError, StoreError
from store.filestore import FileStore
from store.files import unlink_all
from store.kept import KEEP_ALL, Keeper
from store.snapshot import SnapshotStore

from ..net import dialect
from ..net.channel import Channel
from ..net.client import refusal_of
from ..net.frames import Frame, ProtocolError
from ..net.repeats import Repeats, held_back
from ..net.server import FrameServer
from ..net.tls import Identity, Tls, TlsError, expect_member
from ..net.transport import TooManyHandshakes, TransportError
from ..net.wire import PUSH, decode_response, request_code_of, request_frame
from ..raft.config import NodeConfig
from ..raft.core import RaftCore
from ..raft.dispatcher import DispatchState
from ..raft.member import Role
from ..raft.membership import initial as initial_members
from ..raft.membership import load_configs
from ..raft.rpc import Code, PushRequest, split_entries
from ..raft.statemachine import Applier
from .background import BackgroundSync
from .host import allow_descriptors, disk_usage, version
from .memberfile import load_base, save_base
from .metrics import Counts, MetricsServer
from .requests import Requests
from .scrub import Scrubber
from .statemachines import load as load_state_machine
from .supervisor import Supervisor
from .terms import FileTermStore

log = logging.getLogger("dledgerctl.node")


TICK_MS = 5
APPLY_RETRY_S = 1.0  # a state machine waiting at a damaged entry reads it again this often


def node_dir(cfg: NodeConfig) -> str:
    return os.path.join(cfg.store_base_dir, f"dledger-{cfg.self_id}")


def _unlink_logged(paths: list[str]) -> None:
    try:
        unlink_all(paths)
    except StoreError as exc:
        log.warning("clean space: %s", exc)


class Node:
    """One member of a group, in this process (see the module's docstring)."""

    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        self.dir = node_dir(cfg)
        self.served = False
        # the term and vote first (StoreCorruptError when they cannot be used): nothing opened yet to undo
        self.terms = FileTermStore(self.dir)
        self.terms.load()
        # The core decides when to flush (flush=sync: before acknowledging); the store itself
        # never flushes inline.
        # raft decides a cut; the store keeps what it cuts first (recovery's at open too).
        # An operator's cut (peer truncate, peer compare's repair) is kept either way: without
        # --keep-truncated in the node directory, unbounded (nothing of an operator's earlier
        # cuts is dropped for room), as store truncate keeps its own (LogStore.cut_ordered)
        def say(text, fields):
            log.warning("%s", text, extra=fields)
        keeper = None if cfg.keep_truncated is None else Keeper(
            os.path.abspath(cfg.keep_truncated), cfg.keep_truncated_bytes, say=say)
        self.store = FileStore.open(self.dir, data_file_size=cfg.data_file_size,
                                    index_file_size=cfg.index_file_size, flush="async",
                                    drop_behind=cfg.drop_behind, keeper=keeper,
                                    operator_keeper=Keeper(self.dir, KEEP_ALL, say=say))
        dropped = self.store.recovery_warning()
        if dropped is not None:  # (said at the default level: entries this node held are gone)
            log.warning("%s: %s", self.dir, dropped)
        held = self.store.recovery_held_warning()
        if held is not None:  # (said once: the scrub names each entry again as it meets it)
            log.warning("%s: %s", self.dir, held)
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
        # what the node answers, and the requests waiting for an answer (requests.py)
        self.requests = Requests(self, self._appends_due)
        self.server = FrameServer(self.requests.serve, max_frame=cfg.max_frame_bytes,
                                  ssl=None if self.tls is None else self.tls.server,
                                  max_connections=cfg.max_connections, idle_timeout=cfg.idle_timeout_s,
                                  frame_timeout=cfg.frame_timeout_s, handshake_timeout=cfg.frame_timeout_s,
                                  max_inflight=cfg.max_inflight_per_connection,
                                  refuse=None if self.tls is None else self.tls.refused)
        self._repeated_notes = Repeats()  # the core's notes: the same line at most every 10 s
        self._cut_off = Repeats(600.0)  # peers refusing this member (a revoked certificate, say), logged per reason
        # a state machine fed the committed entries, with its snapshots (cluster/raft/statemachine.py)
        self.applier: Applier | None = None
        if cfg.state_machine:
            self.applier = Applier(load_state_machine(cfg.state_machine), self.store, SnapshotStore(self.dir),
                                   cfg.snapshot_threshold)
        self._snapshotter = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot")
        self._applying = False
        # members' connections keep their place when the connection limit is reached
        self._sync_members(self.configs.current)
        self._tasks: set[asyncio.Task] = set()
        self._stop = asyncio.Event()
        # the first exception escaping a task or callback of the node stops it (supervisor.py)
        self.supervisor = Supervisor(self.stop)
        self._flushing = None
        self._syncer: BackgroundSync | None = None
        self._sync_waiters: list = []
        self._index_due = False  # the next flush syncs the index files too (the periodic one does)
        self.scrubber: Scrubber | None = None  # the background scrub (cluster/node/scrub.py), once serving

    def now(self) -> int:
        return int(self.loop.time() * 1000)

    def apply_soon(self) -> None:
        """Feed the state machine what is committed, on the next loop iteration (once)."""
        if self.applier is not None and not self._applying:
            self._applying = True
            self.loop.call_soon(self.supervisor.guard, "the state machine feed", self._apply)

    def _appends_due(self) -> None:
        """An APPEND was queued, the first of this loop iteration: those that arrive with it are
        proposed together, at the end of the iteration."""
        self.loop.call_soon(self.supervisor.guard, "proposing appends", self._propose)

    def _propose(self) -> None:
        """An APPEND's way, one direction: the handler proposes the iteration's appends to the
        core (requests.py propose_batch), then this node acts on the step (process): it sends
        the pushes, and the handler answers what the core finished."""
        self.requests.propose_batch()
        self.process()

    def track(self, task: asyncio.Task) -> None:
        """Keep ``task`` until it ends; the node cancels it when it shuts down."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _close_later(self, ch: Channel) -> None:
        if self.loop is not None:
            t = self.supervisor.watch(self.loop.create_task(ch.close()), f"closing the channel to {ch.host}:{ch.port}")
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
                                       expect=functools.partial(expect_member, cfg.group, p),
                                       on_lost=functools.partial(self._peer_lost, p),
                                       refuse=None if self.tls is None else self.tls.refused, **ssl_out)
        for p in [p for p in self.channels if p not in members.members]:
            self._close_later(self.channels.pop(p))
        self.server.members = frozenset(Identity(cfg.group, "member", p) for p in {**cfg.peers, **members.members})

    # -- running ----------------------------------------------------------------------
    async def run(self, ready=None) -> None:
        """Serve until stop() or SIGTERM/SIGINT; ``ready()`` is called once listening.
        NodeFailure (after a clean shutdown) when a task of the node failed (supervisor.py)."""
        self.loop = asyncio.get_running_loop()
        # connections, as many again in TLS handshakes, the store's files and some room
        allow_descriptors(2 * self.cfg.max_connections + 256)
        default_handler = self.loop.get_exception_handler()

        def quiet_refusals(loop, context) -> None:  # a connection refused by the limits is not an error
            if isinstance(context.get("exception"), TooManyHandshakes):
                return
            # what else reaches here (a transport's error, say) may be a client's doing: the same
            # line at most every 10 s, with a count of those held back
            exc = context.get("exception")
            held = self._repeated_notes.check(("loop", context.get("message"), type(exc)), time.monotonic())
            if held is None:
                return
            context = {**context, "message": f"{context.get('message')}{held_back(held)}"}
            if default_handler is None:
                loop.default_exception_handler(context)
            else:
                default_handler(loop, context)
        self.loop.set_exception_handler(quiet_refusals)
        self.core = RaftCore(self.cfg, self.store, self.terms, random.Random(), self.now(),
                             self._flush_in_background, self._sync_then, time.time, self._disk_usage,
                             configs=self.configs, save_base=functools.partial(save_base, self.dir))
        log.info("members: %s%s", self.configs.current.describe(),
                 f" (config entry {self.configs.last_index})" if self.configs.entries else
                 " (kept in members.json)" if self.configs.base_index >= 0 else " (--peers)")
        if self.applier is not None:
            started = time.perf_counter()
            said = self.applier.recover()
            self.counts.snapshot_load = time.perf_counter() - started
            log.info("state machine %s: %s", self.cfg.state_machine, said)
            self.core.compaction.retention_limit = self.applier.snapshot_index
            self.core.applier = self.applier
        self._syncer = BackgroundSync(self.loop)
        me = self.cfg.peers[self.cfg.self_id]
        try:
            await self.server.start(me.host, me.port)
        except OSError as exc:
            self._syncer.close()
            self.store.close()
            why = os.strerror(exc.errno) if exc.errno else exc.strerror  # (not uvloop's "error while attempting...")
            raise OSError(exc.errno, f"cannot listen on {me.address}: {why}") from exc
        self.supervisor.watch(self.server.upkeep, "the server (its connection upkeep)")
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
                                             self.cfg.tls if self.cfg.metrics_tls else None,
                                             refuse=self.tls.refused if self.cfg.metrics_tls else None)
            except OSError as exc:  # (ssl.SSLError too: a certificate file the TLS context took already)
                await self._shutdown()
                raise OSError(exc.errno, f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
            log.info("metrics on %s", self.metrics.url)
        self.served = True  # (listening: from here on the store is this member's, whatever follows)
        if ready is not None:
            ready()
        ticker = self.supervisor.watch(asyncio.create_task(self._tick_loop()), "the tick loop")
        if self.cfg.scrub_rate:
            self.scrubber = Scrubber(self, self.cfg.scrub_rate)
            for h in self.store.recovery_held():  # (checked first, not when a pass comes to them)
                self.scrubber.suspect(h.index)
            self.track(asyncio.create_task(self.scrubber.run()))
        try:
            await self._stop.wait()
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)  # (its failure, if any, is the supervisor's)
            await self._shutdown()
        failure = self.supervisor.error()
        if failure is not None:
            raise failure

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
            if f.exception() is not None and not isinstance(f.exception(), StoreError):
                raise f.exception()  # (not the disk's: a bug of the flusher, for the supervisor)
            if f.exception() is not None:
                self.counts.flush_failures += 1
                log.error("flush failed, appends waiting for it stay unacknowledged: %s", f.exception())
            else:
                if fds:
                    self.counts.flush_latency.observe(time.perf_counter() - started)
                for cb in waiters:
                    cb()
                if waiters and self.core is not None:
                    self.process()
            if self._sync_waiters:
                self._start_flush()

        fut.add_done_callback(functools.partial(self.supervisor.guard, "the flusher", finished))

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
            log.error("TLS reload failed, keeping the certificate (and CRL) loaded before: %s", exc)
            return
        log.warning("TLS certificate reloaded from %s%s", self.cfg.tls.cert,
                    f" (CRL {self.cfg.tls.crl}: {len(self.tls.revoked)} revoked)" if self.cfg.tls.crl else "")
        own = self.tls.refused_self()
        if own is not None:
            log.warning("this member's own %s: members that read this CRL refuse it", own)
        # connections of certificates the CRL now revokes end now, not when they next reconnect
        self.server.close_refused()
        for p, ch in self.channels.items():
            why = ch.close_if_refused()
            if why is not None:
                log.warning("closed the connection to %s: %s", p, why)

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
        self.requests.shut()
        self._unlinker.shutdown(wait=True)
        self._snapshotter.shutdown(wait=True)
        self.store.close()  # flush + checkpoint

    async def _tick_loop(self) -> None:
        while True:
            self.core.tick(self.now())
            self.process()
            await asyncio.sleep(TICK_MS / 1000)

    # -- core outputs -----------------------------------------------------------------
    def process(self) -> None:
        """Act on what the core decided: send its requests, log its notes; then the handler
        answers what it finished of what clients asked (requests.py answer_finished)."""
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
                    fields = getattr(note, "fields", None)
                    level = logging.WARNING if fields and fields.get("event") == "push_refused" else logging.INFO
                    log.log(level, "%s%s", note, held_back(held), extra=fields)
        self._sync_members(self.core.members)  # (at once when they did not change)
        if self.applier is not None and not self._applying and self.store.committed_index > self.applier.applied:
            self._applying = True
            self.loop.call_soon(self.supervisor.guard, "the state machine feed", self._apply)
        timeout = self.cfg.max_push_timeout_ms / 1000
        sent = set()
        for s in ready.sends:
            ch = self.channels.get(s.to)
            if ch is None:
                continue  # (to a member that has left since)
            if ch.send(self.frame_for(s.to, s.request), timeout,
                       functools.partial(self.supervisor.guard, "taking an answer", self._feed, s.to, s.request,
                                         sent=time.perf_counter())):
                sent.add(s.to)
                continue  # connected: the answer comes back through the callback, no task
            t = self.supervisor.watch(asyncio.create_task(self._call(s.to, s.request)), f"the request to {s.to}")
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        # The followers start on a push while this node goes on (say, to the other
        # follower's answer read in the same loop iteration): the wave of work that
        # 64 clients' appends make goes round sooner. Measured with 64 clients, this and
        # the same for client replies (Requests.finish): +2% and +12% appends/s in two
        # series of same-minute pairs.
        for peer in sent:
            self.channels[peer].flush()
        self.requests.answer_finished()

    def frame_for(self, peer: str, req) -> Frame:
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
            frame = await ch.request(self.frame_for(peer, req), self.cfg.max_push_timeout_ms / 1000)
        except (TransportError, ProtocolError) as exc:
            self._feed(peer, req, None, exc)
        else:
            self._feed(peer, req, frame, None, sent)

    def _peer_lost(self, peer: str) -> None:
        """The connection to ``peer`` went away (it stopped, say): the core counts it as
        unreachable until it answers again."""
        if self.core is not None and not self._stop.is_set():
            self.core.on_peer_lost(peer, self.now())

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
            why = refusal_of(exc)
            if why is not None:  # (the refused side says why it is cut off, once in a while)
                held = self._cut_off.check((peer, why), time.monotonic())
                if held is not None:
                    log.warning("cut off from %s: %s%s", peer, why, held_back(held))
            self.core.on_failure(peer, req, str(exc), self.now())
        else:
            if type(req) is PushRequest and req.count and resp.code == Code.SUCCESS and sent:
                self.counts.replicated_to(peer, time.perf_counter() - sent, req.count, len(req.entries))
            self.core.on_response(peer, req, resp, self.now())
        self.process()

    # -- the state machine ------------------------------------------------------------
    def _apply(self) -> None:
        """Feed the state machine what was committed (a batch per loop iteration), answer the
        queries that waited for it, and save a snapshot in a thread when one is due."""
        self._applying = False
        a = self.applier
        started = time.perf_counter()
        try:
            a.step()
        except StoreCorruptError as exc:  # a damaged entry: applied once the scrub has repaired it
            if self.scrubber is not None:
                self.scrubber.suspect(a.applied + 1)
            held = self._repeated_notes.check(("apply", a.applied + 1), time.monotonic())
            if held is not None:
                log.warning("state machine waits at entry %d: %s%s", a.applied + 1, exc, held_back(held))
            self._applying = True
            self.loop.call_later(APPLY_RETRY_S, self.supervisor.guard, "the state machine feed", self._apply)
            return
        except Exception as exc:  # noqa: BLE001 - a state machine's bug: stop applying, say why, keep serving
            log.error("state machine stopped at entry %d: %s", a.applied + 1, exc, exc_info=exc)
            self.applier = self.core.applier = None
            self.requests.reads.applier_stopped(f"the state machine stopped: {exc}")
            return
        self.counts.apply_latency.observe(time.perf_counter() - started)
        self.requests.reads.applied(a.applied)
        if self.store.committed_index > a.applied:
            self._applying = True
            self.loop.call_soon(self.supervisor.guard, "the state machine feed", self._apply)
        due = a.due()
        if due is not None:
            a.writing = True

            def save_and_prune():  # (in the snapshot thread: serialising, writing, removing old ones)
                started = time.perf_counter()
                a.save(*due)
                self.loop.call_soon_threadsafe(self.counts.snapshot_save.observe, time.perf_counter() - started)
                return a.snapshots.prune(self.cfg.snapshots_kept)
            fut = self.loop.run_in_executor(self._snapshotter, save_and_prune)
            fut.add_done_callback(functools.partial(self.supervisor.guard, "the snapshot writer",
                                                    self._snapshot_saved, due[0], due[1]))

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
        self.process()  # (the log it covers was deleted: the notes say so)

    def metrics_state(self) -> dict:
        """What a metrics scrape reads of the live node (on the loop; cluster/node/metrics.py)."""
        core, s, now = self.core, self.store, self.now()
        m = core.members
        out = {"version": version(), "flush": self.cfg.flush, "role": str(core.member.role),
               "term": core.member.term, "members": {"voter": len(m.voters), "learner": len(m.learners)},
               "begin_index": s.begin_index, "end_index": s.end_index, "committed_index": s.committed_index,
               "pending_appends": len(core.role.pending), "peers": [], "dispatch_states": [str(x) for x in DispatchState],
               "disk_usage": self._disk_usage(), "connections": self.server.connections,
               "disk_limits": {"check": self.cfg.disk_ratio_check, "force": self.cfg.disk_ratio_force,
                               "full": self.cfg.disk_full_ratio},
               "cert_expiry": self.tls.expires_at if self.tls is not None else None,
               "closed_for": dict(self.server.closed_for),
               "push_refused": dict(core.follower.refused),
               "store_files": {"data": (len(s.data.files), s.data.file_size),
                               "index": (len(s.index.files), s.index.file_size)}}
        if self.scrubber is not None:
            out["scrub"] = self.scrubber.counts()
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
        return disk_usage(self.store.layout.data_dir)
