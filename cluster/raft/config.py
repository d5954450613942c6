"""Node configuration: the peers string, timeouts, limits. Pure values, no I/O.

Defaults follow ``DLedgerConfig`` where the name says so; timing defaults are shorter than
DLedger's (2 s heartbeats, 6 s to notice a lost leader), which made fail-over slow. Every
value is an option of ``dledgerctl node start``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from store.format import HEADER_SIZE, INDEX_UNIT_SIZE, MIN_BLANK_LEN, parse_decimal

from .retention import parse_delete_when

DEFAULT_GROUP = "default"  # DLedgerConfig.group
PEER_SEPARATOR = ";"  # DLedgerConfig.peers: "n0-host:port;n1-host:port"
_ID_RE = re.compile(r"^[A-Za-z0-9_.]+$")
# a host name or IPv4 address, or an IPv6 address in brackets
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])$")


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which and why."""


DEFAULT_STORE_BASE_DIR = "/tmp/dledgerstore"  # DLedgerConfig.storeBaseDir


@dataclass(frozen=True)
class Setting:
    """A member's setting: its NodeConfig field, its ``node start`` option (whose name without
    the dashes is its key in a --config file and, upper-cased, in DLEDGERCTL_<KEY>), the check
    NodeConfig makes of it (a number from ``lo``, exclusive when ``above``, up to ``hi``),
    and ``up``: whether ``cluster up`` takes it and hands it to every member."""

    field: str
    flag: str
    lo: float | None = None
    hi: float | None = None
    above: bool = False
    why: str = ""
    up: bool = False

    @property
    def key(self) -> str:
        return self.flag[2:]


JAVA_INT_MAX = (1 << 31) - 1
_POSITIVE_INT = {"lo": 0, "above": True, "hi": JAVA_INT_MAX}
_POSITIVE_S = {"lo": 0, "above": True, "hi": JAVA_INT_MAX / 1000}

# Every setting with an option, in node start's order: the one place a setting's option is
# named (node start, cluster up, config files, the launcher and NodeConfig's refusals read it).
SETTINGS = (
    Setting("self_id", "--id"),
    Setting("peers", "--peers"),
    Setting("store_base_dir", "--store-base-dir"),
    Setting("group", "--group"),
    Setting("flush", "--flush", up=True),
    Setting("flush_interval_ms", "--flush-interval", up=True, **_POSITIVE_INT),
    Setting("heartbeat_interval_ms", "--heartbeat-interval", up=True, **_POSITIVE_INT),
    Setting("max_heartbeat_leak", "--max-heartbeat-leak", up=True, **_POSITIVE_INT),
    Setting("min_vote_interval_ms", "--min-vote-interval", **_POSITIVE_INT),
    Setting("max_vote_interval_ms", "--max-vote-interval", **_POSITIVE_INT),
    Setting("preferred_leader", "--preferred-leader"),
    Setting("max_pending_requests", "--max-pending", **_POSITIVE_INT),
    Setting("never_lead", "--never-lead"),
    Setting("read_lease", "--read-lease", up=True),
    Setting("dledger_peers", "--dledger-peers"),
    Setting("data_file_size", "--data-file-size", up=True),
    Setting("index_file_size", "--index-file-size", up=True),
    Setting("drop_behind", "--drop-behind", lo=0, up=True),
    Setting("keep_truncated", "--keep-truncated"),
    Setting("keep_truncated_bytes", "--keep-truncated-bytes", lo=0, above=True, up=True),
    Setting("scrub_rate", "--scrub-rate", lo=0, hi=1 << 40, why="bytes a second, 0 for off", up=True),
    Setting("file_reserved_hours", "--file-reserved-hours", up=True, **_POSITIVE_INT),
    Setting("delete_when", "--delete-when", up=True),
    Setting("disk_ratio_check", "--disk-ratio-check", lo=0, above=True, hi=1, why="a ratio", up=True),
    Setting("disk_ratio_force", "--disk-ratio-force", lo=0, above=True, hi=1, why="a ratio", up=True),
    Setting("disk_full_ratio", "--disk-full-ratio", lo=0, above=True, hi=1, why="a ratio", up=True),
    Setting("force_clean", "--force-clean"),
    Setting("retention_check_ms", "--retention-check-interval", **_POSITIVE_INT),
    Setting("max_connections", "--max-connections", **_POSITIVE_INT),
    Setting("idle_timeout_s", "--idle-timeout", **_POSITIVE_S),
    Setting("frame_timeout_s", "--frame-timeout", **_POSITIVE_S),
    Setting("max_inflight_per_connection", "--max-inflight", **_POSITIVE_INT),
    Setting("state_machine", "--state-machine", up=True),
    Setting("snapshot_threshold", "--snapshot-threshold", up=True, **_POSITIVE_INT),
    Setting("snapshot_keep_entries", "--snapshot-keep-entries", lo=-1, why="-1 keeps the log", up=True),
    Setting("peer_push_quota", "--peer-push-quota", up=True, **_POSITIVE_INT),
    Setting("peer_addresses", "--peer-address"),
    Setting("learner", "--learner"),
    Setting("metrics_address", "--metrics-address"),
    Setting("metrics_tls", "--metrics-tls"),
)
SETTING = {s.field: s for s in SETTINGS}
# fields checked as numbers that no option sets (code and tests do): named as they are
_UNOPTIONED_NUMBERS = ("max_wait_ack_ms", "max_push_timeout_ms", "push_batch_bytes", "push_batch_entries",
                       "push_window", "push_window_bytes", "checkpoint_interval_ms", "max_frame_bytes",
                       "snapshots_kept", "install_chunk_bytes")


def flag(name: str) -> str:
    """The option of setting ``name`` (a NodeConfig field)."""
    return SETTING[name].flag


def member_args(values: dict) -> list[str]:
    """``node start`` arguments for settings by field (None: left to the member's default; a
    flag setting: given when true), in the table's order."""
    out: list[str] = []
    for s in SETTINGS:
        value = values.get(s.field)
        if value is None or value is False:
            continue
        out += [s.flag] if value is True else [s.flag, str(value)]
    return out


# DLedgerConfig's sizes, counts and intervals are Java ints (JAVA_INT_MAX): a larger data file
# is one DLedger cannot open (and 2^63 overflowed os.ftruncate at the first leadership, killing
# the node's tick); a larger interval or count means nothing an operator wants, and overflows timers
MIN_DATA_FILE_SIZE = HEADER_SIZE + MIN_BLANK_LEN  # one empty entry and the BLANK that ends a file


def option(name: str) -> str:
    """How a refusal names field ``name``: its option, or the field's own name without one."""
    return SETTING[name].flag if name in SETTING else name


READ_LEASE_DRIFT = 0.1  # how far apart the members' clock rates may be for leases (a generous bound)


@dataclass(frozen=True)
class Peer:
    id: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.id}-{self.address}"


def parse_peers(text: str) -> dict[str, Peer]:
    """Parse DLedger's peers string ``"n0-127.0.0.1:20911;n1-127.0.0.1:20912"``.

    The id is everything before the first ``-`` (ids are letters, digits, ``_`` and ``.``);
    order is kept. Ids and addresses are unique. Raises ConfigError naming the bad part."""
    peers: dict[str, Peer] = {}
    parts = [p.strip() for p in (text or "").split(PEER_SEPARATOR) if p.strip()]
    if not parts:
        raise ConfigError("peers is empty; expected e.g. 'n0-127.0.0.1:20911;n1-127.0.0.1:20912'")
    owners: dict[tuple[str, int], str] = {}
    for part in parts:
        ident, sep, address = part.partition("-")
        host, colon, port_text = address.rpartition(":")
        if not sep or not colon or not host:
            raise ConfigError(f"peer {part!r} is not ID-HOST:PORT")
        if not _ID_RE.match(ident):
            raise ConfigError(f"peer id {ident!r} must be letters, digits, '_' or '.'")
        if not _HOST_RE.match(host):
            hint = "; peers are separated by ';'" if "," in host or " " in host else ""
            raise ConfigError(f"peer {part!r}: {host!r} is not a host name or address{hint}")
        port = parse_decimal(port_text)  # (the one reader of numbers in names: ASCII digits only)
        if port is None or not 0 < port < 65536:
            raise ConfigError(f"peer {part!r}: port {port_text!r} is not 1-65535")
        if ident in peers:
            raise ConfigError(f"peer id {ident!r} appears twice")
        peer = Peer(ident, host.strip("[]"), port)
        other = owners.setdefault((peer.host, peer.port), ident)
        if other != ident:
            raise ConfigError(f"peers {other!r} and {ident!r} have the same address {peer.address}")
        peers[ident] = peer
    return peers


def group_problem(group: str) -> str | None:
    """Why ``group`` cannot name a Raft group (empty, spaces, control characters), or None."""
    if not group:
        return "a group name must not be empty"
    if not group.isprintable() or any(c.isspace() for c in group):
        return "a group name must not hold spaces or control characters"
    return None


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as (host, port); port 0 lets the system pick one."""
    host, colon, port_text = (text or "").strip().rpartition(":")
    if not colon or not host:
        raise ConfigError(f"{text!r} is not HOST:PORT")
    port = parse_decimal(port_text)
    if port is None or not 0 <= port < 65536:
        raise ConfigError(f"port {port_text!r} is not 0-65535")
    return host.strip("[]"), port


def id_problem(ident: str) -> str | None:
    """Why ``ident`` cannot be a member id (one ``--peers`` can hold), or None: a predicate,
    "'x' ..." reads as a sentence."""
    if not ident:
        return "is empty"
    if not _ID_RE.match(ident):
        why = " ('-' would end it in a peers list 'ID-HOST:PORT')" if "-" in ident else ""
        return f"is not a member id: letters, digits, '_' or '.'{why}"
    return None


def address_problem(text: str) -> str | None:
    """Why ``text`` cannot be a member's address (HOST:PORT as a peers list holds it), or None."""
    host, colon, port_text = (text or "").strip().rpartition(":")
    if not colon or not host:
        return "is not HOST:PORT"
    if not _HOST_RE.match(host):
        return f"names {host!r}, which is not a host name or address"
    port = parse_decimal(port_text)
    if port is None or not 0 < port < 65536:
        return f"has port {port_text!r}, not 1-65535"
    return None


def format_peers(peers: dict[str, Peer]) -> str:
    return PEER_SEPARATOR.join(str(p) for p in peers.values())


@dataclass(frozen=True)
class NodeConfig:
    group: str
    self_id: str
    peers: dict[str, Peer]
    store_base_dir: str = DEFAULT_STORE_BASE_DIR
    # election (milliseconds)
    heartbeat_interval_ms: int = 500  # DLedgerConfig.heartBeatTimeIntervalMs is 2000
    max_heartbeat_leak: int = 3  # DLedgerConfig.maxHeartBeatLeak: missed beats before a new election
    min_vote_interval_ms: int = 300  # DLedgerConfig.minVoteIntervalMs
    max_vote_interval_ms: int = 1000  # DLedgerConfig.maxVoteIntervalMs
    preferred_leader: str | None = None  # DLedgerConfig.preferredLeaderIds (one id)
    # a voter that never stays leader (a member of a RocketMQ broker group, whose leader must be
    # a broker): it stands for election only when a voter behind its log asks for votes it
    # cannot get, writes nothing as leader, and hands leadership to a caught-up voter
    never_lead: bool = False
    # linearizable reads on a leader's lease (cluster/raft/reads.py): a leader answers them at once
    # while a majority that keeps the lease promise answered a heartbeat it sent within
    # read_lease_ms; as a voter, this member keeps the promise: no vote (not even for itself)
    # within leader-lost of hearing from its leader, or of starting. Safe while clocks run at
    # rates within READ_LEASE_DRIFT of each other.
    read_lease: bool = False
    # members that are Java DLedger nodes (more are recognised from their messages)
    dledger_peers: tuple = ()
    # mutual TLS on every connection (cluster/net/tls.py TlsFiles), None for plain TCP
    tls: object = None
    # a state machine fed the committed entries (cluster/raft/statemachine.py): module:Class or kv
    state_machine: str | None = None
    snapshot_threshold: int = 1000  # DLedgerConfig.snapshotThreshold: entries between snapshots
    snapshots_kept: int = 3  # DLedgerConfig.maxSnapshotReservedNum
    # after a snapshot, the log it covers goes but for this many entries before it (DLedger HEAD:
    # resetSnapshotEntriesButKeepLastEntriesNum; its default strategy keeps none); -1 keeps the
    # log for the retention rules alone
    snapshot_keep_entries: int = 0
    install_chunk_bytes: int = 1 << 20  # INSTALL_SNAPSHOT sends a snapshot in chunks of this size
    # membership (cluster/raft/membership.py): this node joins as a learner (it votes once the
    # leader promotes it); a learner is promoted once it lags at most this many entries
    learner: bool = False
    learner_catch_up_entries: int = 1000
    # where this node reaches a member, whatever the member list says (id -> Peer): members
    # behind NAT or a proxy, and the fault harness's per-link proxies
    peer_addresses: dict = field(default_factory=dict)
    # where Prometheus scrapes this node's metrics (host, port), None for no endpoint; with
    # metrics_tls, over HTTPS with the node's certificate, from scrapers the CA signed
    metrics_address: tuple | None = None
    metrics_tls: bool = False
    # replication
    max_pending_requests: int = 10000  # DLedgerConfig.maxPendingRequestsNum: then LEADER_PENDING_FULL
    max_wait_ack_ms: int = 2500  # DLedgerConfig.maxWaitAckTimeMs: a client append times out after this
    max_push_timeout_ms: int = 1000  # DLedgerConfig.maxPushTimeOutMs: a push unanswered this long is resent
    push_batch_bytes: int = 4 << 20  # one PUSH carries at most this many bytes of entries
    push_batch_entries: int = 4096
    push_window: int = 16  # pushes in flight per follower ...
    # ... and at most this many bytes of them: with 4 MiB pushes, 16 in flight would be
    # 64 MiB queued on a link, longer than max_push_timeout_ms at 1 Gb/s
    push_window_bytes: int = 16 << 20
    peer_push_throttle_point: int = 300 << 20  # DLedgerConfig.peerPushThrottlePoint: lag (bytes) ...
    peer_push_quota: int = 20 << 20  # DLedgerConfig.peerPushQuota: ... above which a follower gets this many bytes/s
    # durability
    flush: str = "async"  # async: DLedger's page-cache ack; sync: fsync before acknowledging
    flush_interval_ms: int = 10  # DLedgerConfig.flushFileInterval
    checkpoint_interval_ms: int = 3000  # DLedgerConfig.checkPointInterval
    data_file_size: int | None = None  # None: detect from the files, else DLedger's 1 GiB
    index_file_size: int | None = None
    # flushed data more than this many bytes behind the log's end leaves the page cache
    # (store.files.FileList.take_dirty); 0 leaves it to the kernel, as DLedger does
    drop_behind: int = 256 << 20
    # entries a truncation is about to cut are first written to a file in this directory
    # (store/kept.py), the files together at most keep_truncated_bytes (oldest dropped first)
    keep_truncated: str | None = None
    keep_truncated_bytes: int = 1 << 30
    # the background scrub re-reads the committed log at this many bytes a second (0: off;
    # cluster/node/scrub.py): a pass over a 1 TiB log at the default takes about three days
    scrub_rate: int = 4 << 20
    max_frame_bytes: int = 64 << 20
    # what one client may hold of a node (cluster/net/server.py FrameServer)
    max_connections: int = 1024
    idle_timeout_s: float = 300.0
    frame_timeout_s: float = 30.0  # a frame (and a TLS handshake) must complete within this
    max_inflight_per_connection: int = 4096
    # retention: deleting data files from the head of the log (cluster/raft/retention.py)
    file_reserved_hours: float = 72  # DLedgerConfig.fileReservedHours (DLedger uses at least 1)
    delete_when: str = "04"  # DLedgerConfig.deleteWhen: hours of the day, "04" or "03;04"
    disk_ratio_check: float = 0.70  # DLedgerConfig.diskSpaceRatioToCheckExpired
    disk_ratio_force: float = 0.85  # DLedgerConfig.diskSpaceRatioToForceClean
    disk_full_ratio: float = 0.90  # DLedgerConfig.diskFullRatio: appends are refused above it
    force_clean: bool = True  # DLedgerConfig.enableDiskForceClean
    retention_check_ms: int = 1000  # how often the clean-space check runs (DLedger: every 100 ms)
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Every refusal names the node start option (OPTIONS) and the value given: the one
        check of a member's settings, for ``node start`` and ``--print-config`` alike."""
        if self.self_id not in self.peers:
            raise ConfigError(f"--id {self.self_id!r} is not one of --peers ({', '.join(self.peers)})")
        if self.preferred_leader is not None and self.preferred_leader not in self.peers:
            raise ConfigError(f"--preferred-leader {self.preferred_leader!r} is not one of --peers "
                              f"({', '.join(self.peers)})")
        if self.never_lead and self.preferred_leader == self.self_id:
            raise ConfigError(f"--never-lead: {self.self_id} cannot also be the --preferred-leader")
        for p in self.dledger_peers:
            if p not in self.peers or p == self.self_id:
                raise ConfigError(f"--dledger-peers: {p!r} is not one of the other members of --peers")
        if self.flush not in ("async", "sync"):
            raise ConfigError(f"--flush must be 'async' or 'sync', not {self.flush!r}")
        for st in SETTINGS:  # (the table's numbers)
            if st.lo is not None:
                self._number(st.field, lo=st.lo, hi=st.hi, above=st.above, why=st.why)
        for name in _UNOPTIONED_NUMBERS:
            self._number(name, **_POSITIVE_INT)
        if self.keep_truncated is not None and not self.keep_truncated.strip():
            raise ConfigError("--keep-truncated needs a directory, not an empty name")
        for name in ("data_file_size", "index_file_size"):
            if getattr(self, name) is not None:
                self._number(name, lo=MIN_DATA_FILE_SIZE if name == "data_file_size" else INDEX_UNIT_SIZE,
                             hi=JAVA_INT_MAX, why="DLedger's file sizes are Java ints")
        if self.index_file_size is not None and self.index_file_size % INDEX_UNIT_SIZE:
            raise ConfigError(f"--index-file-size {self.index_file_size} is not a multiple of {INDEX_UNIT_SIZE} "
                              "(the size of an index record)")
        for name in ("disk_ratio_check", "disk_ratio_force", "disk_full_ratio"):
            self._number(name, lo=0, above=True, hi=1, why="a ratio")
        if not self.disk_ratio_check <= self.disk_ratio_force <= self.disk_full_ratio:
            raise ConfigError(f"the disk ratios must rise: --disk-ratio-check {self.disk_ratio_check:g} <= "
                              f"--disk-ratio-force {self.disk_ratio_force:g} <= --disk-full-ratio "
                              f"{self.disk_full_ratio:g}")
        problem = group_problem(self.group)
        if problem is not None:
            raise ConfigError(f"--group {self.group!r}: {problem}")
        try:
            parse_delete_when(self.delete_when)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.max_vote_interval_ms < self.min_vote_interval_ms:
            raise ConfigError(f"--max-vote-interval {self.max_vote_interval_ms} is below --min-vote-interval "
                              f"{self.min_vote_interval_ms}")

    def _number(self, name: str, lo, hi=None, above: bool = False, why: str = "") -> None:
        """ConfigError unless field ``name`` is a number (not a bool; finite) from ``lo``
        (exclusive when ``above``) up to ``hi``."""
        value = getattr(self, name)
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
              and (value > lo if above else value >= lo) and (hi is None or value <= hi))
        if not ok:
            bounds = ("positive" if above and lo == 0 and hi is None else
                      f"{'above' if above else 'at least'} {lo}" + (f" and at most {hi}" if hi is not None else ""))
            raise ConfigError(f"{option(name)} must be {bounds}{f' ({why})' if why else ''}, not {value!r}")

    @property
    def others(self) -> list[str]:
        return [p for p in self.peers if p != self.self_id]

    @property
    def quorum(self) -> int:
        return len(self.peers) // 2 + 1

    @property
    def read_lease_ms(self) -> int:
        """How long after a heartbeat left that a majority answered the leader serves reads on
        its lease: the leader-lost interval (which the promise keeps a new leader from being
        elected within), less the clock drift bound."""
        return int(self.leader_lost_ms * (1 - READ_LEASE_DRIFT))

    @property
    def leader_lost_ms(self) -> int:
        """How long a follower waits without a heartbeat before it starts an election."""
        return self.heartbeat_interval_ms * self.max_heartbeat_leak
