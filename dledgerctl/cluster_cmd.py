"""``dledgerctl cluster up|down|status|start|stop``: thin wrappers over cluster/node/launcher.py
and the client (``node start`` is in node_cmd.py, ``append`` and ``get`` in log_cmd.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from typing import Annotated, Optional

import typer

from cluster.net.client import Client, ClientError
from cluster.net.tls import ANY_GROUP, Identity
from cluster.raft.config import DEFAULT_GROUP, ConfigError, parse_peers
from cluster.node import launcher, pki
from cluster.node.launcher import DEFAULT_BASE_DIR, DEFAULT_PORT_BASE, LauncherError, down, read_record, up

from .common import (BaseDirOpt, ClientGroupOpt, DataSizeOpt, DeleteWhenOpt, DropBehindOpt, FormatOpt, GroupOpt,
                     IndexSizeOpt, PeersOpt, PushQuotaOpt, RatioCheckOpt, RatioForceOpt, RatioFullOpt, ReservedOpt,
                     SnapshotKeepOpt, TimeoutOpt, client_tls, complete_members, fail, parse_size, parse_size_or_zero,
                     plural, tls_options, use_record_tls)
from .render import Format, render

cluster_app = typer.Typer(help="Start, stop and look at a local cluster of node processes.", no_args_is_help=True)

def _peers(peers: str | None, base_dir: str) -> tuple[dict, str | None]:
    """Parsed peers from --peers, else from the cluster record; and the recorded group, if any."""
    try:
        if peers:
            return parse_peers(peers), None
        rec = read_record(base_dir)
    except (ConfigError, LauncherError) as exc:
        raise fail(str(exc), 2 if isinstance(exc, ConfigError) else 1) from None
    if rec is None:
        raise fail(f"no --peers given and no cluster recorded in {base_dir} (start one with 'dledgerctl cluster up')", 2)
    use_record_tls(rec)
    return parse_peers(rec["peers"]), rec.get("group")


STATUS_COLUMNS = ["id", "address", "state", "impl", "role", "member", "term", "leader", "begin_index", "end_index", "committed_index"]
PROCESS_COLUMNS = ["pid", "uptime"]  # with a cluster record: the member's process


def _with_client(peers: dict, group: str, timeout: float, work):
    """Run ``await work(client)`` with a client that is closed afterwards; a ClientError
    becomes the one-line error and exit 1."""
    tls = client_tls()

    async def go():
        c = Client(peers, group, timeout=timeout, tls=tls)
        try:
            return await work(c)
        finally:
            await c.close()

    try:
        return asyncio.run(go())
    except ClientError as exc:
        raise fail(str(exc)) from None


def _status_rows(peers: dict, group: str, timeout: float, rec: dict | None = None) -> list[dict]:
    """One row per member from its METADATA (state up; down when it does not answer;
    refused when it refuses this client, say its certificate: the error says why); with the
    cluster record, also the pid of its process and its uptime in seconds (both None when it
    is not running)."""
    procs = {n["id"]: n for n in rec["nodes"]} if rec else {}
    rows = []

    async def ask(c: Client):
        return await c.status(), dict(c.refused)
    answers, refused = _with_client(peers, group, timeout, ask)
    for pid, md in answers.items():
        row = {"id": pid, "address": peers[pid].address if pid in peers else None}
        stranger = _stranger(procs.get(pid), md)
        if pid in refused and not isinstance(md, dict):
            row.update({"state": "refused", **{k: None for k in STATUS_COLUMNS[3:]}, "error": refused[pid]})
        elif stranger is not None:
            row.update({"state": "stranger", **{k: None for k in STATUS_COLUMNS[3:]}, "error": stranger})
        elif isinstance(md, dict):
            row.update({"state": "up", **{k: md.get(k) for k in STATUS_COLUMNS[3:]}})
            for k in ("applied_index", "snapshot_index"):  # (with a state machine)
                if k in md:
                    row[k] = md[k]
            if md.get("never_lead"):  # (node start --never-lead)
                row["never_lead"] = True
            if md.get("push_refused"):  # (a follower refusing its leader's entries: why, and the fix)
                row["push_refused"] = md["push_refused"]
            if isinstance(md.get("scrub"), dict):  # (the background scrub: where its pass is, what it found)
                row["scrub"] = md["scrub"]
        else:
            row.update({"state": "down", **{k: None for k in STATUS_COLUMNS[3:]}, "error": md})
        if pid in procs:
            up_s = launcher.uptime(procs[pid])
            row["pid"] = procs[pid].get("pid") if up_s is not None else None
            row["uptime_s"] = None if up_s is None else round(up_s, 1)
        rows.append(row)
    return rows


def _stranger(node: dict | None, md) -> str | None:
    """Why the answer at a recorded member's address is not from that member (another
    process, of another cluster say, listens there), or None."""
    if node is None or not isinstance(md, dict) or not isinstance(md.get("pid"), int):
        return None  # (not recorded, no answer, or a node that does not say its pid: Java)
    mine = node.get("pid") if launcher.alive(node) else None
    if md["pid"] == mine:
        return None
    return (f"pid {md['pid']} answers at {node.get('address')}, not {node['id']}'s recorded process "
            f"({'pid ' + str(mine) if mine else 'not running'})")


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


def _render_status(rows: list[dict], fmt: Format, extra: list[str] = ()) -> None:
    """Status rows: the table shows uptime as a duration; json, jsonl and csv keep uptime_s."""
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


def _record(base_dir: str) -> dict | None:
    try:
        rec = read_record(base_dir)
    except LauncherError as exc:
        raise fail(str(exc)) from None
    use_record_tls(rec)
    return rec


@cluster_app.command("status")
@tls_options
def cluster_status(peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
                   timeout: TimeoutOpt = 2.0, fmt: FormatOpt = Format.table) -> None:
    """Per node: address, state (up, down, or refused: it refuses this client, the error column says why), role,
    term, leader, begin/end/committed index, and for a cluster started by 'cluster up' the pid and uptime of each
    member's process. Exit 1 if any node is not up."""
    parsed, rec_group = _peers(peers, base_dir)
    rec = None if peers else _record(base_dir)
    rows = _status_rows(parsed, group or rec_group or DEFAULT_GROUP, timeout, rec)
    _render_status(rows, fmt)
    if any(r["state"] != "up" for r in rows):
        raise typer.Exit(1)


class StartFailed(Exception):
    """A member that was started exited (its reason in the message)."""


def _wait_until_serving(rec: dict, started: list, group: str, wait: float, need_leader: bool,
                        ids: list[str] | None = None) -> list[dict]:
    """Status rows once every member (of ``ids``, when given) answers (and, with
    ``need_leader``, one leads), polled under the ``wait`` deadline; a started process that
    exits ends it with its log's tail, a member that refuses this client (its certificate
    revoked, say) with why."""
    peers = parse_peers(rec["peers"])
    deadline = time.monotonic() + wait
    rows = []
    while True:
        dead = [n for n, proc in started if proc.poll() is not None]
        if dead:
            n = dead[0]
            raise StartFailed(f"node {n['id']} exited at start: {launcher.exit_reason(n) or 'see ' + n['log']}")
        rows = _status_rows(peers, group, 1.0, rec)
        refused = [r for r in rows if r["state"] == "refused"]
        if refused:  # (waiting will not change it)
            ids = [r["id"] for r in refused if r["error"] == refused[0]["error"]]
            raise StartFailed(f"{', '.join(ids)} {'refuses' if len(ids) == 1 else 'refuse'} this command's "
                              f"certificate or mode: {refused[0]['error']}")
        if all(r["state"] == "up" for r in rows if ids is None or r["id"] in ids) and \
                (not need_leader or any(r.get("role") == "leader" for r in rows)):
            return rows
        if time.monotonic() >= deadline:
            return rows
        time.sleep(0.1)


# cluster up's options that shape the nodes: given explicitly on a base directory that already
# has a cluster record, they must match it (cluster up there only starts members that are down).
_SHAPING = ("nodes", "port_base", "group", "flush", "flush_ms", "heartbeat_ms", "heartbeat_leak", "data_file_size",
            "index_file_size", "drop_behind", "file_reserved_hours", "delete_when", "disk_ratio_check",
            "disk_ratio_force", "disk_full_ratio", "state_machine", "snapshot_threshold", "snapshot_keep", "push_quota",
            "read_lease", "tls", "metrics_port_base", "scrub_rate", "keep_truncated", "keep_truncated_bytes")


@cluster_app.command("up")
def cluster_up(
    ctx: typer.Context,
    nodes: Annotated[int, typer.Option("--nodes", "-n", min=1, max=9, help="How many node processes.")] = 3,
    base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    port_base: Annotated[int, typer.Option("--port-base", envvar="DLEDGERCTL_PORT_BASE",
                                           help="Port of n0; n1 gets the next one, and so on.")] = DEFAULT_PORT_BASE,
    group: GroupOpt = DEFAULT_GROUP,
    flush: Annotated[str, typer.Option("--flush", help="Flush policy of every node: async or sync.")] = "async",
    flush_ms: Annotated[Optional[int], typer.Option("--flush-interval", min=1, help="flush=async: how often every "
                                                    "node flushes its files, ms (default 10).")] = None,
    wait: Annotated[float, typer.Option("--wait", min=1, help="Seconds to wait for a leader.")] = 30.0,
    heartbeat_ms: Annotated[Optional[int], typer.Option("--heartbeat-interval", min=1, help="Every node's heartbeat "
                                                         "interval, ms (default 500).")] = None,
    heartbeat_leak: Annotated[Optional[int], typer.Option("--max-heartbeat-leak", min=1, help="Missed heartbeats "
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
    state_machine: Annotated[Optional[str], typer.Option("--state-machine", help="Every node feeds committed "
                             "entries to this state machine: module:Class, or kv (see node start).")] = None,
    snapshot_threshold: Annotated[Optional[int], typer.Option("--snapshot-threshold", min=1, help="With "
                                  "--state-machine: entries applied between snapshots (default 1000).")] = None,
    snapshot_keep: SnapshotKeepOpt = None,
    push_quota: PushQuotaOpt = None,
    scrub_rate: Annotated[Optional[int], typer.Option("--scrub-rate", parser=parse_size_or_zero, metavar="SIZE",
                          help="Every node's background scrub reads this many bytes a second (default 4MiB; 0: "
                          "off; see node start).")] = None,
    read_lease: Annotated[bool, typer.Option("--read-lease", help="Every node serves linearizable reads on a "
                          "leader's lease (see node start).")] = False,
    tls: Annotated[bool, typer.Option("--tls", help="Mutual TLS between every member and client: certificates "
                                      "made in BASE_DIR/tls (as 'certs init' makes them: one per member, an "
                                      "operator 'admin' and a client 'app'); commands finding the cluster through "
                                      "its record use the operator's.")] = False,
    metrics_port_base: Annotated[Optional[int], typer.Option("--metrics-port-base", help="Serve each node's "
                                 "Prometheus metrics (the path /metrics, over http, or https with --tls): n0 on "
                                 "127.0.0.1:PORT, n1 on the next port, and so on (node start --metrics-address).")] = None,
    keep_truncated: Annotated[Optional[str], typer.Option("--keep-truncated", metavar="DIR", help="Every member "
                              "keeps what it cuts in DIR/<id> (node start --keep-truncated; mq salvage DIR/<id> "
                              "reads it).")] = None,
    keep_truncated_bytes: Annotated[Optional[int], typer.Option("--keep-truncated-bytes", parser=parse_size,
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
    extra = []
    if flush_ms:
        extra += ["--flush-interval", str(flush_ms)]
    if heartbeat_ms:
        extra += ["--heartbeat-interval", str(heartbeat_ms)]
    if heartbeat_leak:
        extra += ["--max-heartbeat-leak", str(heartbeat_leak)]
    if data_file_size:
        extra += ["--data-file-size", str(data_file_size)]
    if index_file_size:
        extra += ["--index-file-size", str(index_file_size)]
    if drop_behind is not None:
        extra += ["--drop-behind", str(drop_behind)]
    if read_lease:
        extra += ["--read-lease"]
    for opt, value in (("--file-reserved-hours", file_reserved_hours), ("--delete-when", delete_when),
                       ("--disk-ratio-check", disk_ratio_check), ("--disk-ratio-force", disk_ratio_force),
                       ("--disk-full-ratio", disk_full_ratio), ("--state-machine", state_machine),
                       ("--snapshot-threshold", snapshot_threshold), ("--snapshot-keep-entries", snapshot_keep),
                       ("--peer-push-quota", push_quota), ("--scrub-rate", scrub_rate),
                       ("--keep-truncated-bytes", keep_truncated_bytes)):
        if value is not None:
            extra += [opt, str(value)]
    rec = _record(base_dir)
    tls_dir = os.path.join(base_dir, "tls") if tls else None
    made: list[str] = []  # what a fresh start made, removed again if it fails
    started: list = []
    try:
        if rec is None:
            made = launcher.new_paths(base_dir, [f"n{i}" for i in range(nodes)])
            _note_old_logs(base_dir, nodes)
            if tls_dir is not None:
                _make_certs(tls_dir, group, [f"n{i}" for i in range(nodes)], ["admin"], ["app"])
            rec, procs = up(base_dir, nodes, port_base, group, flush, extra, tls_dir=tls_dir,
                            metrics_port_base=metrics_port_base, keep_truncated=keep)
            use_record_tls(rec)
            started, actions = list(zip(rec["nodes"], procs)), {n["id"]: "started" for n in rec["nodes"]}
        else:
            given = [p for p in _SHAPING if ctx.get_parameter_source(p).name not in ("DEFAULT", "DEFAULT_MAP")]
            if given:
                want = launcher.planned_settings(base_dir, nodes, port_base, group, flush, extra, tls_dir=tls_dir,
                                                 metrics_port_base=metrics_port_base, keep_truncated=keep)
                differ = _differences(ctx, [launcher.settings_of(n) for n in rec["nodes"]], want, given)
                if differ is not None:
                    raise fail(f"the cluster recorded in {base_dir} was started with other settings: {differ}; "
                               "'cluster up' there only starts its members that are down (run 'cluster down' first "
                               "to start another)", 2)
            done, started = launcher.start(base_dir, None)
            rec = _record(base_dir)  # with the new pids
            actions = {r["id"]: r["result"] for r in done}
        rows = _wait_until_serving(rec, started, rec.get("group", group), wait, need_leader=True)
        rows = [{**r, "action": actions.get(r["id"])} for r in rows]
        if not (any(r.get("role") == "leader" for r in rows) and all(r["state"] == "up" for r in rows)):
            if not made:
                _render_status(rows, fmt, ["action"])
            odd = [f"{r['id']}: {r['error']}" for r in rows if r["state"] != "up" and r.get("error")]
            raise StartFailed(f"no leader elected within {wait:g} s" + (f" ({'; '.join(odd)})" if odd else "") +
                              ("" if made else f"; logs are in {os.path.join(base_dir, 'logs')}"))
    except (LauncherError, OSError, StartFailed, KeyboardInterrupt) as exc:
        if made:  # a fresh start: leave nothing of it behind (Ctrl-C while it waits too)
            _end([proc for _n, proc in started])
            launcher.discard(made)
        if isinstance(exc, KeyboardInterrupt):
            raise typer.Exit(130) from None
        raise fail(str(exc)) from None
    if fmt == Format.table:
        typer.echo(f"peers: {rec['peers']}")
    _render_status(rows, fmt, ["action"])
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


def _note_old_logs(base_dir: str, nodes: int) -> None:
    """Say so when more than one member's store holds a log already (a group stopped with
    'cluster down'): started together, whichever wins first cuts the others to its log."""
    held = [f"n{i}" for i in range(nodes) if _has_data(os.path.join(base_dir, f"dledger-n{i}", "data"))]
    if len(held) > 1:
        at = "" if base_dir == DEFAULT_BASE_DIR else f" --base-dir {base_dir}"
        typer.echo(f"Note: {', '.join(held)} hold logs from before; started together, the first elected cuts the "
                   f"others back to its own: 'dledgerctl store elect {base_dir}' names who must lead, and "
                   f"'dledgerctl cluster start{at} ID ...' starts members one by one after 'cluster down' "
                   "(docs/operations.md)", err=True)


def _has_data(path: str) -> bool:
    try:
        return any(True for _ in os.scandir(path))
    except OSError:
        return False


def _end(procs: list, timeout: float = 5.0) -> None:
    """Stop processes this command started (SIGTERM, SIGKILL after ``timeout``) and reap them."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# a member's config key (node start's option) -> the cluster up parameter that sets it
_KEY_PARAMS = {"peers": "port_base", "flush-interval": "flush_ms", "heartbeat-interval": "heartbeat_ms",
               "max-heartbeat-leak": "heartbeat_leak", "snapshot-keep-entries": "snapshot_keep",
               "peer-push-quota": "push_quota", "tls-ca": "tls", "tls-cert": "tls", "tls-key": "tls",
               "metrics-address": "metrics_port_base", "metrics-tls": "metrics_port_base"}


def _differences(ctx, have: list[dict], want: list[dict], given: list[str]) -> str | None:
    """The ``given`` options whose settings differ from the recorded ones (``have``, one dict
    per member; ``want``: what they would be): ``--heartbeat-interval (recorded 500, given
    300)``; None when every given option matches the record."""
    names = {p.name: p.opts[0] for p in ctx.command.params}
    if len(have) != len(want) and "nodes" in given:
        return f"--nodes (recorded {len(have)}, given {len(want)})"
    out: dict[str, str] = {}
    for h, w in zip(have, want):
        for key in sorted(set(h) | set(w)):
            param = _KEY_PARAMS.get(key, key.replace("-", "_"))
            if h.get(key) != w.get(key) and param in given:
                was, now = (h.get(key, "default"), w.get(key, "default")) if param != "tls" else (
                    "on" if h.get(key) else "off", "on" if w.get(key) else "off")
                out.setdefault(param, f"{names[param]} (recorded {was}, given {now})")
    return ", ".join(out.values()) or None


def _make_certs(directory: str, group: str, members: list[str], operators: list[str], clients: list[str],
                any_group: bool = False) -> list[dict]:
    """Certificates (cluster/node/pki.py) for these identities in ``directory``: one row each."""
    rows = []
    for role, names in (("member", members), ("operator", operators), ("client", clients)):
        for name in names:
            ident = Identity(ANY_GROUP if any_group and role != "member" else group, role, name)
            cert, key = pki.issue(directory, ident)
            rows.append({"identity": ident.uri, "role": role, "name": name, "cert": cert, "key": key})
    return rows  # (and pki's empty crl.pem beside the CA)


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
    try:
        if launcher.ensure_record(base_dir):  # (after 'cluster down': the members from their config files)
            typer.echo(f"Note: no cluster record in {base_dir} ('cluster down' removes it): the members are read "
                       f"from their config files in {os.path.join(base_dir, 'config')}", err=True)
        rows, started = launcher.start(base_dir, node_ids)
    except LauncherError as exc:
        raise fail(str(exc)) from None
    rec = _record(base_dir)
    try:
        status = {r["id"]: r for r in _wait_until_serving(rec, started, rec.get("group", DEFAULT_GROUP), wait,
                                                          need_leader=False, ids=[r["id"] for r in rows])}
    except StartFailed as exc:
        raise fail(str(exc)) from None
    for r in rows:
        st = status.get(r["id"], {})
        r.update(state=st.get("state"), role=st.get("role"), term=st.get("term"))
    render(rows, fmt)
    late = [r["id"] for r in rows if r["state"] != "up"]
    if late:
        raise fail(f"{', '.join(late)} started but did not answer within {wait:g} s; logs are in "
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
