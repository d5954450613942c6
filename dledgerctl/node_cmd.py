"""``dledgerctl node start``: one node in the foreground, from options, DLEDGERCTL_<OPTION>
variables and a --config file (nodeconf.py)."""

from __future__ import annotations

import os
import shutil
from typing import Annotated, Optional

import typer

from cluster.net.tls import TlsError, TlsFiles
from cluster.node import runtime, service
from cluster.raft.config import DEFAULT_GROUP, SETTINGS, ConfigError, NodeConfig, flag, parse_address, parse_peers

from . import nodeconf
from .common import (DataSizeOpt, DeleteWhenOpt, DropBehindOpt, GroupOpt, IndexSizeOpt, PushQuotaOpt,
                     RatioCheckOpt, RatioForceOpt, RatioFullOpt, ReservedOpt, SnapshotKeepOpt, TlsCaOpt, TlsCertOpt,
                     TlsCrlOpt, TlsKeyOpt, check_peers, errors_as_exit, fail, log, parse_size, parse_size_or_zero)
from .loglines import LogLabels

node_app = typer.Typer(help="Run a node.", no_args_is_help=True)


@node_app.command("start")
def node_start(
    ctx: typer.Context,
    node_id: Annotated[str, typer.Option("--id", help="This node's id; must be one of --peers.")],
    peers: Annotated[str, typer.Option("--peers", "-p", callback=check_peers,
                                       help="All members, each ID-HOST:PORT, with ';' between them.")],
    store_base_dir: Annotated[str, typer.Option(flag("store_base_dir"), default_factory=service.default_store_base_dir,
                              show_default="$STATE_DIRECTORY when systemd gives one, else /tmp/dledgerstore",
                              help="Where dledger-<id>/ lives. Started by systemd, a node refuses a private or "
                                   "tmpfs /tmp (PrivateTmp=), which would lose its store.")],
    group: GroupOpt = DEFAULT_GROUP,
    flush: Annotated[str, typer.Option(flag("flush"), help="async: acknowledge once a majority has the entry in the page "
                                                       "cache (DLedger's way); sync: fsync before acknowledging.")] = "async",
    flush_interval_ms: Annotated[int, typer.Option(flag("flush_interval_ms"), min=1, help="flush=async: how often the page cache is "
                                          "flushed to disk, ms (DLedger's flushFileInterval).")] = 10,
    heartbeat_interval_ms: Annotated[int, typer.Option(flag("heartbeat_interval_ms"), min=1, help="Heartbeat interval, ms.")] = 500,
    max_heartbeat_leak: Annotated[int, typer.Option(flag("max_heartbeat_leak"), min=1, help="Missed heartbeats before a "
                                                "follower starts an election.")] = 3,
    min_vote_interval_ms: Annotated[int, typer.Option(flag("min_vote_interval_ms"), min=1, help="Least random election wait, ms.")] = 300,
    max_vote_interval_ms: Annotated[int, typer.Option(flag("max_vote_interval_ms"), min=1, help="Most random election wait, ms.")] = 1000,
    preferred_leader: Annotated[Optional[str], typer.Option(flag("preferred_leader"), help="Hand leadership to this "
                                                            "member whenever it is caught up.")] = None,
    max_pending_requests: Annotated[int, typer.Option(flag("max_pending_requests"), min=1, help="Appends waiting for the quorum before "
                                             "new ones get LEADER_PENDING_FULL.")] = 10000,
    never_lead: Annotated[bool, typer.Option(flag("never_lead"), help="Vote, replicate and count for the quorum, but "
                          "never stay leader (a member of a RocketMQ broker group, whose leader must be a broker): "
                          "lead only when a voter behind this log cannot be elected otherwise, write nothing, and "
                          "hand leadership to it once it has caught up.")] = False,
    read_lease: Annotated[bool, typer.Option(flag("read_lease"), help="Answer linearizable reads as leader with no "
                          "heartbeat round while a majority answered one within 0.9x the leader-lost interval, and "
                          "as a voter grant no vote within leader-lost of hearing from the leader or of starting. "
                          "Give it to every member; safe while clock rates differ by under 10%.")] = False,
    dledger_peers: Annotated[Optional[str], typer.Option(flag("dledger_peers"), help="Members that are Java DLedger "
                             "nodes, comma-separated ids: spoken to in DLedger's own push from the start, and no "
                             "no-op entries (DLedger 0.2.7 cannot read them). Name them on every dledgerctl member of "
                             "such a group.")] = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    drop_behind: DropBehindOpt = None,
    keep_truncated: Annotated[Optional[str], typer.Option(flag("keep_truncated"), metavar="DIR", help="Before a "
                              "leader's TRUNCATE (or any other cut, recovery's at start too) removes entries from "
                              "this member's log, write them to a file in DIR (named truncated-*.entries for the range and the "
                              "time, in DLedger's entry format: 'store inspect-data FILE' and 'mq salvage' read it) "
                              "and log one line.")] = None,
    keep_truncated_bytes: Annotated[Optional[int], typer.Option(flag("keep_truncated_bytes"), parser=parse_size,
                                    metavar="SIZE", help="With --keep-truncated: the kept files together stay "
                                    "within SIZE, the oldest dropped first (default 1GiB).")] = None,
    scrub_rate: Annotated[Optional[int], typer.Option(flag("scrub_rate"), parser=parse_size_or_zero, metavar="SIZE",
                          help="Re-read the committed log in the background at SIZE bytes a second, checking "
                          "every entry's CRCs and index record, and repair a damaged one from the leader's copy "
                          "(default 4MiB; 0 turns the scrub off).")] = None,
    event_loop: Annotated[str, typer.Option("--event-loop", help="auto: uvloop when installed, else asyncio's own "
                                            "loop; uvloop; asyncio.")] = "auto",
    file_reserved_hours: ReservedOpt = 72.0,
    delete_when: DeleteWhenOpt = "04",
    disk_ratio_check: RatioCheckOpt = 0.70,
    disk_ratio_force: RatioForceOpt = 0.85,
    disk_full_ratio: RatioFullOpt = 0.90,
    force_clean: Annotated[bool, typer.Option(f"{flag('force_clean')}/--no-force-clean", help="Above --disk-ratio-force, "
                                              "delete the oldest files whatever their age (DLedger's "
                                              "enableDiskForceClean).")] = True,
    retention_check_ms: Annotated[int, typer.Option(flag("retention_check_ms"), min=1, help="How often the "
                                                    "clean-space check runs, ms.")] = 1000,
    max_connections: Annotated[int, typer.Option(flag("max_connections"), min=1, help="Connections this node keeps "
                                                 "open; one more takes the place of the one idle longest.")] = 1024,
    idle_timeout_s: Annotated[float, typer.Option(flag("idle_timeout_s"), min=0.1, help="Seconds a connection may send "
                                                "nothing before it is closed.")] = 300.0,
    frame_timeout_s: Annotated[float, typer.Option(flag("frame_timeout_s"), min=0.1, help="Seconds a frame (and a TLS "
                                                 "handshake) may take to arrive whole.")] = 30.0,
    max_inflight_per_connection: Annotated[int, typer.Option(flag("max_inflight_per_connection"), min=1, help="Requests one connection may have "
                                              "waiting for answers; beyond, it is not read until half are "
                                              "answered.")] = 4096,
    state_machine: Annotated[Optional[str], typer.Option(flag("state_machine"), help="Feed committed entries to a "
                             "state machine: module:Class, or kv (the built-in table of key=value entries, for "
                             "'dledgerctl kv').")] = None,
    snapshot_threshold: Annotated[int, typer.Option(flag("snapshot_threshold"), min=1, help="With --state-machine: "
                                  "entries applied between snapshots (DLedger's snapshotThreshold).")] = 1000,
    snapshot_keep_entries: SnapshotKeepOpt = None,
    peer_push_quota: PushQuotaOpt = None,
    peer_address: Annotated[Optional[list[str]], typer.Option(flag("peer_addresses"), metavar="ID=HOST:PORT",
                            help="Reach member ID at this address, whatever --peers or the member list says (a "
                            "member behind NAT or a proxy); repeatable.")] = None,
    learner: Annotated[bool, typer.Option(flag("learner"), help="Join a running group as a learner: receive entries, "
                                          "vote only once the leader promotes it (after 'peer add'). Its log's "
                                          "member list wins over --peers once it has one.")] = False,
    metrics_address: Annotated[Optional[str], typer.Option(flag("metrics_address"), metavar="HOST:PORT",
                               help="Serve Prometheus metrics on HOST:PORT, at the path /metrics (off by default; "
                               "port 0 picks a free one). The names are listed in dledgerctl-node(1).")] = None,
    metrics_tls: Annotated[bool, typer.Option(flag("metrics_tls"), help="Serve the metrics over HTTPS with this node's "
                           "--tls-cert and --tls-key, to scrapers showing a certificate --tls-ca signed.")] = False,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    tls_ca: TlsCaOpt = None,
    tls_crl: TlsCrlOpt = None,
    config: Annotated[Optional[str], typer.Option("--config", metavar="FILE", is_eager=True,
                      callback=nodeconf.config_callback, help="Read the settings from this TOML file, one key per "
                      "option (heartbeat-interval = 500); the command line and DLEDGERCTL_<OPTION> variables "
                      "win over it.")] = None,
    print_config: Annotated[bool, typer.Option("--print-config", help="Print the settings this node would run with "
                            "(from the file, the environment, the command line and the defaults), as a --config "
                            "file, and exit.")] = False,
) -> None:
    """Run one node in the foreground until SIGTERM or Ctrl-C (logs go to stderr; use -v). SIGHUP reloads its TLS
    certificate, key, CA and CRL. Every option can come from a --config file or a DLEDGERCTL_<OPTION> variable."""
    # Every check below runs for --print-config too: it approves only what a start would take.
    from cluster.node.process import Node
    from cluster.node.supervisor import NodeFailure
    from cluster.raft.membership import MembershipError
    from cluster.raft.statemachine import StateMachineError

    try:
        tls = TlsFiles.resolve(tls_cert, tls_key, tls_ca, tls_crl)
    except TlsError as exc:
        raise fail(str(exc), 2) from None
    overrides = {}
    for spec in peer_address or []:
        pid, sep, address = spec.partition("=")
        try:
            overrides.update(parse_peers(f"{pid}-{address}") if sep else {})
        except ConfigError as exc:
            raise fail(f"--peer-address {spec!r}: {exc}", 2) from None
        if not sep:
            raise fail(f"--peer-address {spec!r}: give ID=HOST:PORT", 2)
    metrics = None
    if metrics_tls and (tls is None or metrics_address is None):
        raise fail("--metrics-tls needs --metrics-address and the node's --tls-cert, --tls-key and --tls-ca", 2)
    if metrics_address is not None:
        try:
            metrics = parse_address(metrics_address)
        except ConfigError as exc:
            raise fail(f"--metrics-address: {exc}", 2) from None
    given = {s.field: ctx.params.get(s.field) for s in SETTINGS if s.field in ctx.params}
    given.update(self_id=node_id, peers=parse_peers(peers), tls=tls, peer_addresses=overrides, metrics_address=metrics,
                 dledger_peers=tuple(p.strip() for p in (dledger_peers or "").split(",") if p.strip()))
    try:
        cfg = NodeConfig(**{k: v for k, v in given.items() if v is not None})  # (None: the default)
    except ConfigError as exc:
        raise fail(str(exc), 2) from None
    if keep_truncated_bytes is not None and keep_truncated is None:
        raise fail("--keep-truncated-bytes needs --keep-truncated DIR", 2)
    if keep_truncated is not None and os.path.exists(keep_truncated) and not os.path.isdir(keep_truncated):
        raise fail(f"--keep-truncated {keep_truncated}: not a directory", 2)
    lost = service.lost_store_problem(cfg.store_base_dir)
    if lost is not None:  # (exit 2: the unit's RestartPreventExitStatus=2 does not restart it every 2 s)
        raise fail(lost, 2)
    stray = [p for p in overrides if p not in cfg.peers]
    if stray:  # (allowed: members that join later are reached there; said, in case it is a typo)
        log.warning("--peer-address names %s, not in --peers (%s): used if %s joins the group", ", ".join(stray),
                    ", ".join(cfg.peers), "it" if len(stray) == 1 else "they")
    try:
        runtime.loop_factory(event_loop)
    except runtime.RuntimeChoiceError as exc:
        raise fail(f"--event-loop: {exc}", 2) from None
    if print_config:
        typer.echo(nodeconf.render(nodeconf.effective(ctx), nodeconf.sources_of(ctx)), nl=False)
        return
    from cluster.node.process import node_dir

    made = _first_missing(node_dir(cfg))  # (a store this start creates: removed again if it never serves)
    node = None
    try:
        with errors_as_exit():
            try:
                LogLabels.labels = {"group": group, "node": node_id}
                node = Node(cfg)
            except (TlsError, StateMachineError, MembershipError) as exc:
                raise fail(str(exc)) from None
            try:
                runtime.run(node.run, event_loop)
            except NodeFailure as exc:  # (a task of the node failed: it stopped cleanly; exit 1, restarted)
                raise fail(f"node {node_id} stopped: {exc}") from None
    except BaseException:
        if made is not None and not (node is not None and node.served):
            shutil.rmtree(made, ignore_errors=True)
        raise


def _first_missing(path: str) -> str | None:
    """The outermost directory of ``path`` that does not exist yet (None when it does)."""
    path = os.path.abspath(path)
    missing = None
    while not os.path.exists(path):
        missing, parent = path, os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing
