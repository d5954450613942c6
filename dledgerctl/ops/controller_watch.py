"""The failover a RocketMQ 5 controller failed to make: a broker set whose master is gone while
an in-sync replica is alive, and no election followed within a bound (apache/rocketmq #9717,
#10416, #10875). ``controller watch`` is thin over this.

Three parts, each with its own state:

- :class:`HoldBackTracker` decides (pure: time is an argument). Per broker set it keeps when the
  set was first seen with its master gone and an in-sync replica alive, at which master epoch.
  Invariants: the clock of a set starts at the first look that sees that condition; it restarts
  when the master epoch changes (an ElectMasterEvent followed, even one that elected no one);
  it stops when the condition ends (a master alive again, or no in-sync replica alive: then
  there is no one the controller may elect, which is no held-back election). A set is *held
  back* once its clock has run ``bound`` seconds; each such episode is reported once
  (:attr:`Status.new`).
- :class:`LogNames` follows the controller's own log over the wire (DLedger GETs, the replay of
  store/rocketmq/controller_state.py) for the broker sets it knows and each one's last
  ElectMasterEvent, reading only entries it has not read yet.
- :func:`look` asks the controller (cluster/net/remoting.py): which member leads
  (``getControllerMetaData``), then the leader's sync-state data for those broker sets
  (``getSyncStateSet``: master, SyncStateSet, every replica's liveness as the controller's
  heartbeat manager sees it). Brokers heartbeat to the leader only, so only its answer says who
  is alive.

Errors: cluster.net.remoting.ControllerError (Unreachable, Refused, BadAnswer) and
cluster.net.client.ClientError from the log's reading, each one line. Results are msgspec
Structs; :func:`status_row` gives the dict a ``--format json`` line shows.
"""

from __future__ import annotations

import asyncio
import threading

import msgspec

from cluster.net.client import Client, ClientError, OutOfRange
from cluster.net.remoting import ControllerClient, ControllerError, ControllerMetadata, ReplicasInfo, Unreachable
from cluster.raft.config import ConfigError, parse_peers
from store.rocketmq.controller import ElectMaster, entry_event
from store.rocketmq.controller_state import ControllerState

# the states a broker set is in, as rows and metrics say them
OK = "ok"  # its master is alive
NO_MASTER = "no-master"  # master gone, no in-sync replica alive: nothing the controller may elect (cleanly)
WAITING = "waiting"  # master gone, an in-sync replica alive, for less than the bound so far
HELD_BACK = "held-back"  # ... for the bound or longer: the election a controller failed to hold


class View(msgspec.Struct, frozen=True):
    """One broker set as the controller's leader answered for it at one moment."""

    broker_name: str
    master_broker_id: int | None
    master_address: str | None
    master_alive: bool
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    in_sync_alive: tuple[int, ...]  # in the SyncStateSet, alive, and not the master
    alive: tuple[int, ...]  # every replica the controller sees alive

    @classmethod
    def of(cls, info: ReplicasInfo) -> View:
        replicas = info.in_sync + info.not_in_sync
        master = next((r for r in replicas if r.broker_id == info.master_broker_id), None)
        return cls(info.broker_name, info.master_broker_id, info.master_address,
                   master is not None and master.alive, info.master_epoch,
                   tuple(sorted(r.broker_id for r in info.in_sync)), info.sync_state_set_epoch,
                   tuple(sorted(r.broker_id for r in info.in_sync if r.alive and r.broker_id != info.master_broker_id)),
                   tuple(sorted(r.broker_id for r in replicas if r.alive)))


class Status(msgspec.Struct, frozen=True):
    """A broker set after one look: its view, its state, and how long its election has been
    waiting (``held_back_seconds``: since the look that first saw the master gone with an
    in-sync replica alive at this master epoch; None when it is not waiting)."""

    view: View
    state: str
    held_back_seconds: float | None
    new: bool = False  # held back, and not reported before in this episode
    last_election_index: int | None = None  # the controller log's last ElectMasterEvent for it (when read)


class _Episode(msgspec.Struct):
    since: float
    master_epoch: int
    reported: bool = False


class HoldBackTracker:
    """Per broker set, the clock of an election not held (see the module's invariants)."""

    def __init__(self, bound: float) -> None:
        if bound < 0:
            raise ValueError("the bound is a number of seconds, 0 or more")
        self.bound = bound
        self._episodes: dict[str, _Episode] = {}

    def observe(self, now: float, views: list[View], elections: dict[str, int] | None = None) -> list[Status]:
        """The status of every broker set in ``views`` at time ``now`` (seconds, any clock
        that does not go back); sets not in ``views`` are forgotten."""
        out = []
        seen = set()
        for v in views:
            seen.add(v.broker_name)
            gone = v.master_broker_id is None or not v.master_alive
            if not gone:
                state, seconds = OK, None
                self._episodes.pop(v.broker_name, None)
            elif not v.in_sync_alive:
                state, seconds = NO_MASTER, None
                self._episodes.pop(v.broker_name, None)
            else:
                ep = self._episodes.get(v.broker_name)
                if ep is None or ep.master_epoch != v.master_epoch:
                    ep = self._episodes[v.broker_name] = _Episode(now, v.master_epoch)
                seconds = max(0.0, now - ep.since)
                state = HELD_BACK if seconds >= self.bound else WAITING
            new = False
            if state == HELD_BACK:
                ep = self._episodes[v.broker_name]
                new, ep.reported = not ep.reported, True
            out.append(Status(v, state, seconds, new, (elections or {}).get(v.broker_name)))
        for name in set(self._episodes) - seen:
            del self._episodes[name]
        return sorted(out, key=lambda s: s.view.broker_name)


PAGE = 16  # entries asked at once (a Java member answers one per GET, and logs each GET past its end)
NAMES_EVERY = 60.0  # seconds between reads of the controller's log for broker sets it newly names


class LogNames:
    """The broker sets a controller's log names and each one's last ElectMasterEvent index,
    read over the wire (DLedger GETs, as ``dledgerctl get`` reads a Java group) and replayed as
    RocketMQ's ReplicasInfoManager applies it; each :meth:`read` reads only the entries after
    the last one read."""

    def __init__(self) -> None:
        self.state = ControllerState()
        self.next_index = 0
        self.elections: dict[str, int] = {}
        self.stopped: str | None = None  # an entry RocketMQ's apply fails on: the controller applies nothing past it

    async def read(self, md: ControllerMetadata, timeout: float) -> None:
        if self.stopped is not None:
            return
        if not md.group or not md.peers:
            raise ControllerError(f"{md.address}: its metadata names no DLedger group and peers, so its log cannot be "
                                  "read: give the broker sets (--broker)")
        try:
            peers = parse_peers(";".join(f"{i}-{a}" for i, a in md.peers.items()))
        except ConfigError as exc:
            raise ControllerError(f"{md.address}: its peers cannot be read: {exc}") from None
        client = Client(peers, md.group, timeout=timeout)
        try:
            while True:
                try:
                    page = await client.get(self.next_index, PAGE, md.leader_id if md.leader_id in peers else None)
                except OutOfRange:
                    return  # (nothing past what was read: a Java node says so for an index past its end)
                if not page:
                    return
                for e in page:
                    d = entry_event(e.magic, e.body)
                    note, fails = self.state.apply(d)
                    if fails:
                        self.stopped = f"index {e.index}: {note}"
                        return
                    if isinstance(d.event, ElectMaster) and d.event.broker_name is not None:
                        self.elections[d.event.broker_name] = e.index
                    self.next_index = e.index + 1
        finally:
            await client.close()

    @property
    def broker_names(self) -> list[str]:
        return sorted(self.state.sync)


class Look(msgspec.Struct, frozen=True):
    """What one look at the controller found: the member that leads and each broker set."""

    leader: str
    views: list[View]
    metadata: ControllerMetadata


async def find_leader(addresses: list[str], timeout: float) -> ControllerMetadata:
    """The leader's metadata: the first member of ``addresses`` that answers, or the leader it
    names. ControllerError when none answers or none leads."""
    errors = []
    for address in addresses:
        try:
            async with ControllerClient(address, timeout=timeout) as c:
                md = await c.metadata()
        except ControllerError as exc:
            errors.append(str(exc))
            continue
        if md.is_leader:
            return md
        if md.leader_address:
            try:
                async with ControllerClient(md.leader_address, timeout=timeout) as c:
                    leader = await c.metadata()
            except ControllerError as exc:
                errors.append(f"{md.address} names {md.leader_address} leader, which does not answer: {exc}")
                continue
            if leader.is_leader:
                return leader
        errors.append(f"{md.address}: no controller leader known (an election may be under way)")
    raise Unreachable("no controller leader: " + "; ".join(errors))


async def look(addresses: list[str], brokers: list[str] | None, *, timeout: float,
               names: LogNames | None = None) -> Look:
    """One look: the leader, and the sync-state data of ``brokers`` (None: every broker set
    the controller's log names, read through ``names``)."""
    md = await find_leader(addresses, timeout)
    if brokers is None:
        if names is None:
            names = LogNames()
        await names.read(md, timeout)
        brokers = names.broker_names
    if not brokers:
        return Look(md.address, [], md)
    async with ControllerClient(md.address, timeout=timeout) as c:
        infos = await c.sync_state_data(brokers)
    return Look(md.address, [View.of(i) for i in sorted(infos.values(), key=lambda i: i.broker_name)], md)


class Watcher:
    """Looks at a controller and tracks its broker sets: the library behind ``controller
    watch`` (once, in a loop, or as an exporter)."""

    def __init__(self, addresses: list[str], bound: float, *, brokers: list[str] | None = None,
                 timeout: float = 3.0) -> None:
        self.addresses, self.brokers, self.timeout = addresses, brokers or None, timeout
        self.tracker = HoldBackTracker(bound)
        self.names = LogNames() if self.brokers is None else None
        self.metrics = WatchMetrics(bound)
        self._names_read_at: float | None = None

    def step(self, now: float) -> tuple[Look | None, list[Status], str | None]:
        """One look at time ``now`` (the caller's monotonic clock): the look, the statuses,
        and the error when the controller could not be asked (the statuses then empty)."""
        brokers = self.brokers
        if brokers is None and self._names_read_at is not None and now - self._names_read_at < NAMES_EVERY:
            brokers = self.names.broker_names  # (the log is read again every NAMES_EVERY seconds only)
        try:
            lk = asyncio.run(look(self.addresses, brokers, timeout=self.timeout, names=self.names))
            if brokers is None:
                self._names_read_at = now
        except (ControllerError, ClientError) as exc:
            self.metrics.failed(str(exc))
            return None, [], str(exc)
        statuses = self.tracker.observe(now, lk.views, self.names.elections if self.names is not None else None)
        self.metrics.update(lk.leader, statuses)
        return lk, statuses, None

    @property
    def log_stopped(self) -> str | None:
        return self.names.stopped if self.names is not None else None


def status_row(s: Status) -> dict:
    v = s.view
    return {"broker_name": v.broker_name, "state": s.state, "master_broker_id": v.master_broker_id,
            "master_address": v.master_address, "master_alive": v.master_alive, "master_epoch": v.master_epoch,
            "sync_state_set": list(v.sync_state_set), "sync_state_set_epoch": v.sync_state_set_epoch,
            "in_sync_alive": list(v.in_sync_alive), "alive": list(v.alive),
            "held_back_seconds": None if s.held_back_seconds is None else round(s.held_back_seconds, 1),
            "last_election_index": s.last_election_index}


def finding_text(s: Status) -> str:
    v = s.view
    master = "no master" if v.master_broker_id is None else f"master {v.master_broker_id} gone"
    return (f"broker set {v.broker_name}: {master} (masterEpoch {v.master_epoch}), in-sync "
            f"{'replica' if len(v.in_sync_alive) == 1 else 'replicas'} {', '.join(map(str, v.in_sync_alive))} alive, "
            f"no election for {s.held_back_seconds:.0f} s: election held back")


# -- Prometheus series ----------------------------------------------------------------------

# name, type, labels, help (the man page, dledgerctl-controller(1), lists the same)
CATALOGUE: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("dledger_controller_watch_up", "gauge", (), "1 when the last look at the controller got its leader's answer, "
     "else 0."),
    ("dledger_controller_watch_bound_seconds", "gauge", (), "The watch's --bound: how long an election may wait."),
    ("dledger_controller_broker_set_master_alive", "gauge", ("broker_set",),
     "1 when the broker set has a master the controller sees alive, else 0."),
    ("dledger_controller_broker_set_master_epoch", "gauge", ("broker_set",), "The broker set's masterEpoch."),
    ("dledger_controller_broker_set_in_sync_alive", "gauge", ("broker_set",),
     "Replicas in the SyncStateSet, other than the master, that the controller sees alive."),
    ("dledger_controller_broker_set_election_held_back_seconds", "gauge", ("broker_set",),
     "Seconds since the watch first saw the master gone with an in-sync replica alive at this masterEpoch "
     "(0 when not so)."),
    ("dledger_controller_broker_set_election_held_back", "gauge", ("broker_set",),
     "1 when that has lasted --bound seconds or longer: the election the controller did not hold."),
)


class WatchMetrics:
    """The series of the last look, read by Prometheus's scrape in the HTTP server's thread
    (a lock keeps a scrape from seeing half a look)."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._lock = threading.Lock()
        self._up = 0
        self._statuses: list[Status] = []
        self.error: str | None = None

    def update(self, leader: str, statuses: list[Status]) -> None:
        with self._lock:
            self._up, self._statuses, self.error = 1, list(statuses), None

    def failed(self, error: str) -> None:
        with self._lock:
            self._up, self.error = 0, error  # (the broker sets' series keep their last values: stale, not false)

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        with self._lock:
            up, statuses = self._up, list(self._statuses)
        out = [("dledger_controller_watch_up", {}, float(up)), ("dledger_controller_watch_bound_seconds", {},
                                                                 float(self.bound))]
        for s in statuses:
            lab = {"broker_set": s.view.broker_name}
            out += [("dledger_controller_broker_set_master_alive", lab, float(s.view.master_alive)),
                    ("dledger_controller_broker_set_master_epoch", lab, float(s.view.master_epoch)),
                    ("dledger_controller_broker_set_in_sync_alive", lab, float(len(s.view.in_sync_alive))),
                    ("dledger_controller_broker_set_election_held_back_seconds", lab, s.held_back_seconds or 0.0),
                    ("dledger_controller_broker_set_election_held_back", lab, float(s.state == HELD_BACK))]
        return out

    def collect(self):  # (prometheus_client's Collector protocol)
        from prometheus_client.core import GaugeMetricFamily

        families = {name: GaugeMetricFamily(name, text, labels=list(labels)) for name, _t, labels, text in CATALOGUE}
        for name, labels, value in self.samples():
            families[name].add_metric(list(labels.values()), value)
        return list(families.values())

    def serve(self, host: str, port: int):
        """Serve the series on ``host:port`` (``/metrics``) in a thread; the server, whose
        ``shutdown()`` stops it. OSError when the port cannot be bound."""
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        server, _thread = start_http_server(port, host, registry)
        return server
