"""``dledgerctl cluster up|down|status|start|stop``: thin wrappers over cluster/node/launcher.py
and the client (``node start`` is in node_cmd.py, ``append`` and ``get`` in log_cmd.py)."""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from cluster.net.tls import TlsError
from cluster.raft.config import DEFAULT_GROUP, SETTINGS, flag, member_args
from cluster.node.launcher import DEFAULT_BASE_DIR, DEFAULT_PORT_BASE, LauncherError, down
from cluster.node import launcher

from . import clients
from .common import (BaseDirOpt, ClientGroupOpt, DataSizeOpt, DeleteWhenOpt, DropBehindOpt, FormatOpt, GroupOpt,
                     IndexSizeOpt, PeersOpt, PushQuotaOpt, RatioCheckOpt, RatioForceOpt, RatioFullOpt, ReservedOpt,
                     SnapshotKeepOpt, TimeoutOpt, complete_members, fail, parse_size, parse_size_or_zero,
                     plural, say, tls_options)
from .ops import localgroup
from .ops.status import ANSWERED, MemberStatus, status
from .ops.targets import OpsError, row
from .render import Format, render

cluster_app = typer.Typer(help="Start, stop and look at a local cluster of node processes.", no_args_is_help=True)

STATUS_COLUMNS = ["id", "address", "state", *ANSWERED]
PROCESS_COLUMNS = ["pid", "uptime"]  # with a cluster record: the member's process


def _duration(seconds: float | None) -> str | None:
    """45s, 3m12s, 2h05m, 3d04h."""
    if seconds is None:
        return None
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _scrub_text(scrub: dict | None, committed: int | None = None) -> str | None:
    """A member's scrub in a table cell: passes done, the entry it is at (none between two
    passes; "caught up" once it waits past the member's commit index ``committed``, for it
    checks committed entries only: its next index is then one no log holds yet), what it
    holds damaged."""
    if not isinstance(scrub, dict):
        return None
    if scrub.get("stopped"):
        return f"stopped: {scrub['stopped']}"
    position = scrub.get("position")
    passes = scrub.get("passes", 0)
    text = plural(passes if isinstance(passes, int) else 0, "pass", "passes")
    if isinstance(position, int) and position >= 0:
        text += ", caught up" if isinstance(committed, int) and position > committed else f", at {position}"
    damaged = scrub.get("damaged") or []
    if damaged:
        text += f", damaged: {', '.join(map(str, damaged[:5]))}{' ...' if len(damaged) > 5 else ''}"
    return text


def _render_status(statuses: list[MemberStatus], fmt: Format, extra: dict[str, dict] | None = None) -> None:
    """Status rows: the table shows uptime as a duration; json, jsonl and csv keep uptime_s.
    ``extra``: more fields (the table shows them first), by name, each a value per member id."""
    rows = [{**row(s), **{k: v.get(s.id) for k, v in (extra or {}).items()}} for s in statuses]
    extra = list(extra or {})
    with_proc = any("uptime_s" in r for r in rows)
    errors = ["error"] if any(r.get("error") for r in rows) else []  # (why a member is down: shown, not hidden)
    errors += ["push_refused"] if any(r.get("push_refused") for r in rows) else []
    scrub = ["scrub"] if any(r.get("scrub") for r in rows) else []
    if fmt == Format.table:
        rows = [{**r, "uptime": _duration(r.get("uptime_s")),
                 "scrub": _scrub_text(r.get("scrub"), r.get("committed_index")),
                 **({"member": f"{r.get('member')}, never leads"} if r.get("never_lead") else {})} for r in rows]
        render(rows, fmt, columns=[*extra, *STATUS_COLUMNS, *scrub, *(PROCESS_COLUMNS if with_proc else []),
                                   *errors])
    elif fmt == Format.csv:
        rows = [{**r, "scrub": _scrub_text(r.get("scrub"), r.get("committed_index"))} for r in rows]
        render(rows, fmt, columns=[*extra, *STATUS_COLUMNS, *scrub, *(["pid", "uptime_s"] if with_proc else []),
                                   *errors])
    else:
        render(rows, fmt)


@cluster_app.command("status")
@tls_options
def cluster_status(peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
                   timeout: TimeoutOpt = 2.0, fmt: FormatOpt = Format.table) -> None:
    """Per node: address, state (up, down, or refused: it refuses this client, the error column says why), role,
    term, leader, begin/end/committed index, and for a cluster started by 'cluster up' the pid and uptime of each
    member's process. Exit 1 if any node is not up."""
    found = clients.target(peers, base_dir, group, timeout)
    with clients.failures():
        rows = status(found)
    _render_status(rows, fmt)
    if any(r.state != "up" for r in rows):
        raise typer.Exit(1)


# cluster up's options that shape the nodes: given explicitly on a base directory that already
# has a cluster record, they must match it (cluster up there only starts members that are down).
_SHAPING = ("nodes", "port_base", "group", "tls", "metrics_port_base", "keep_truncated",
            *(s.field for s in SETTINGS if s.up))


@cluster_app.command("up")
def cluster_up(
    ctx: typer.Context,
    nodes: Annotated[int, typer.Option("--nodes", "-n", min=1, max=9, help="How many node processes.")] = 3,
    base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    port_base: Annotated[int, typer.Option("--port-base", envvar="DLEDGERCTL_PORT_BASE",
                                           help="Port of n0; n1 gets the next one, and so on.")] = DEFAULT_PORT_BASE,
    group: GroupOpt = DEFAULT_GROUP,
    flush: Annotated[str, typer.Option(flag("flush"), help="Flush policy of every node: async or sync.")] = "async",
    flush_interval_ms: Annotated[Optional[int], typer.Option(flag("flush_interval_ms"), min=1, help="flush=async: how often every "
                                                    "node flushes its files, ms (default 10).")] = None,
    wait: Annotated[float, typer.Option("--wait", min=1, help="Seconds to wait for a leader.")] = 30.0,
    heartbeat_interval_ms: Annotated[Optional[int], typer.Option(flag("heartbeat_interval_ms"), min=1, help="Every node's heartbeat "
                                                         "interval, ms (default 500).")] = None,
    max_heartbeat_leak: Annotated[Optional[int], typer.Option(flag("max_heartbeat_leak"), min=1, help="Missed heartbeats "
                                                           "before a follower elects, and a leader steps down "
                                                           "(default 3).")] = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    drop_behind: DropBehindOpt = None,
    file_reserved_hours: Annotated[Optional[float], ReservedOpt.__metadata__[0]] = None,
    delete_when: Annotated[Optional[str], DeleteWhenOpt.__metadata__[0]] = None,
    disk_ratio_check: Annotated[Optional[float], RatioCheckOpt.__metadata__[0]] = None,
    disk_ratio_force: Annotated[Optional[float], RatioForceOpt.__metadata__[0]] = None,
    disk_full_ratio: Annotated[Optional[float], RatioFullOpt.__metadata__[0]] = None,
    state_machine: Annotated[Optional[str], typer.Option(flag("state_machine"), help="Every node feeds committed "
                             "entries to this state machine: module:Class, or kv (see node start).")] = None,
    snapshot_threshold: Annotated[Optional[int], typer.Option(flag("snapshot_threshold"), min=1, help="With "
                                  "--state-machine: entries applied between snapshots (default 1000).")] = None,
    snapshot_keep_entries: SnapshotKeepOpt = None,
    peer_push_quota: PushQuotaOpt = None,
    scrub_rate: Annotated[Optional[int], typer.Option(flag("scrub_rate"), parser=parse_size_or_zero, metavar="SIZE",
                          help="Every node's background scrub reads this many bytes a second (default 4MiB; 0: "
                          "off; see node start).")] = None,
    read_lease: Annotated[bool, typer.Option(flag("read_lease"), help="Every node serves linearizable reads on a "
                          "leader's lease (see node start).")] = False,
    tls: Annotated[bool, typer.Option("--tls", help="Mutual TLS between every member and client: certificates "
                                      "made in BASE_DIR/tls (as 'certs init' makes them: one per member, an "
                                      "operator 'admin' and a client 'app'); commands finding the cluster through "
                                      "its record use the operator's.")] = False,
    metrics_port_base: Annotated[Optional[int], typer.Option("--metrics-port-base", help="Serve each node's "
                                 "Prometheus metrics (the path /metrics, over http, or https with --tls): n0 on "
                                 "127.0.0.1:PORT, n1 on the next port, and so on (node start --metrics-address).")] = None,
    keep_truncated: Annotated[Optional[str], typer.Option(flag("keep_truncated"), metavar="DIR", help="Every member "
                              "keeps what it cuts in DIR/<id> (node start --keep-truncated; mq salvage DIR/<id> "
                              "reads it).")] = None,
    keep_truncated_bytes: Annotated[Optional[int], typer.Option(flag("keep_truncated_bytes"), parser=parse_size,
                                    metavar="SIZE", help="With --keep-truncated: each member's kept files stay "
                                    "within SIZE (default 1GiB; node start --keep-truncated-bytes).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Start N nodes in the background, wait for a leader, print the peers and a status table. On a base directory
    whose cluster is recorded already, start exactly its members that are down (with their recorded settings)."""
    if flush not in ("async", "sync"):
        raise fail(f"--flush must be async or sync, not {flush!r}", 2)
    if keep_truncated_bytes is not None and keep_truncated is None:
        raise fail("--keep-truncated-bytes needs --keep-truncated DIR", 2)
    if keep_truncated is not None and os.path.exists(keep_truncated) and not os.path.isdir(keep_truncated):
        raise fail(f"--keep-truncated {keep_truncated}: not a directory", 2)
    keep = None if keep_truncated is None else os.path.abspath(keep_truncated)  # (members run in BASE_DIR)
    extra = member_args({s.field: ctx.params.get(s.field) for s in SETTINGS if s.up and s.field != "flush"})
    given = {p.name: p.opts[0] for p in ctx.command.params
             if p.name in _SHAPING and ctx.get_parameter_source(p.name).name not in ("DEFAULT", "DEFAULT_MAP")}
    try:
        result = localgroup.up(base_dir, nodes, port_base, group, flush, extra, tls=tls,
                               metrics_port_base=metrics_port_base, keep_truncated=keep, wait=wait, given=given,
                               say=say)
    except localgroup.NoLeader as exc:
        if exc.result is not None:
            _render_status(exc.result.rows, fmt, {"action": exc.result.actions})
        raise fail(str(exc)) from None
    except OpsError as exc:
        raise clients.ops_error(exc) from None
    except (LauncherError, OSError, TlsError) as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:  # (a fresh start left nothing behind)
        raise typer.Exit(130) from None
    rec, rows = result.record, result.rows
    if fmt == Format.table:
        typer.echo(f"peers: {rec['peers']}")
    _render_status(rows, fmt, {"action": result.actions})
    if fmt == Format.table:
        at = "" if base_dir == DEFAULT_BASE_DIR else f" --base-dir {base_dir}"
        tips = [(f"append{at} -d hello -d world", "commit two entries"),
                (f"get{at} -i 1 -c 2", "read them back"),
                (f"cluster status{at}", "roles, terms, indexes, pids"),
                (f"peer watermarks{at}", "how far each follower lags"),
                (f"cluster stop{at} n0", "stop one member (then: cluster start n0)"),
                (f"store verify {os.path.join(base_dir, 'dledger-n0')}", "check a replica's files"),
                (f"cluster down{at}", "stop every member")]
        width = max(len(t) for t, _ in tips)
        typer.echo(f"\nlogs in {os.path.join(base_dir, 'logs')}; try next:\n" +
                   "\n".join(f"  dledgerctl {t.ljust(width)}  # {why}" for t, why in tips))


NodeIdsArg = Annotated[list[str], typer.Argument(help="Member ids as recorded by 'cluster up' (n0, n1, ...).",
                                                 show_default=False, autocompletion=complete_members)]


@cluster_app.command("start")
def cluster_start(
    node_ids: NodeIdsArg,
    base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    wait: Annotated[float, typer.Option("--wait", min=0.1, help="Seconds to wait for the started members to "
                                        "answer.")] = 15.0,
    fmt: FormatOpt = Format.table,
) -> None:
    """Start members of the cluster 'cluster up' recorded in --base-dir again, each with its recorded command line
    and store; waits until they answer. Members already running are left alone. After 'cluster down' (no record),
    the members are those whose config files 'cluster up' wrote in BASE_DIR/config: start a few of them (the member
    'store elect' names, with a bare majority) and the rest once it leads."""
    with clients.failures():
        started = localgroup.start(base_dir, node_ids, wait, say=say)
    render(started.rows, fmt)
    if started.late:
        raise fail(f"{', '.join(started.late)} started but did not answer within {wait:g} s; logs are in "
                   f"{os.path.join(base_dir, 'logs')}")


@cluster_app.command("stop")
def cluster_stop(
    node_ids: NodeIdsArg,
    base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    kill: Annotated[bool, typer.Option("--kill", help="SIGKILL at once (a crash) instead of SIGTERM (a clean "
                                                      "shutdown).")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait after SIGTERM before "
                                           "SIGKILL.")] = 10.0,
    fmt: FormatOpt = Format.table,
) -> None:
    """Stop members of the cluster 'cluster up' recorded in --base-dir; the record stays, so 'cluster start' or
    'cluster up' starts them again."""
    try:
        rows = launcher.stop(base_dir, node_ids, kill=kill, timeout=timeout)
    except LauncherError as exc:
        raise fail(str(exc)) from None
    render(rows, fmt)


@cluster_app.command("down")
def cluster_down(base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
                 timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait after SIGTERM "
                                                        "before SIGKILL.")] = 10.0,
                 fmt: FormatOpt = Format.table) -> None:
    """Stop every member 'cluster up' started from --base-dir (SIGTERM, then SIGKILL) and forget the cluster (its
    stores and logs stay)."""
    try:
        rows = down(base_dir, timeout)
    except LauncherError as exc:
        raise fail(str(exc)) from None
    render(rows, fmt)
