"""``dledgerctl node start``, ``dledgerctl cluster up|down|status`` and the client commands
``append`` and ``get``: thin wrappers over cluster/."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Annotated, Optional

import typer

from cluster import runtime
from cluster.client import Client, ClientError
from cluster.config import DEFAULT_GROUP, ConfigError, NodeConfig, parse_peers
from cluster.launcher import DEFAULT_BASE_DIR, DEFAULT_PORT_BASE, LauncherError, down, log_tail, read_record, up
from cluster.wire import ProtocolError

from .common import BodyFormat, DataSizeOpt, DropBehindOpt, FormatOpt, IndexSizeOpt, errors_as_exit, fail
from .render import Format, render

node_app = typer.Typer(help="Run a node.", no_args_is_help=True)
cluster_app = typer.Typer(help="Start, stop and look at a local cluster of node processes.", no_args_is_help=True)

GroupOpt = Annotated[str, typer.Option("--group", "-g", help="Raft group name (DLedger's group).")]
PeersOpt = Annotated[Optional[str], typer.Option(
    "--peers", "-p", help="Peers as 'n0-HOST:PORT;n1-HOST:PORT;...' (default: the cluster recorded in --base-dir "
                          "by 'cluster up').")]
BaseDirOpt = Annotated[str, typer.Option("--base-dir", help="Base directory of a local cluster (its stores, logs "
                                                            "and cluster.json).")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for an answer.")]


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
    return parse_peers(rec["peers"]), rec.get("group")


@node_app.command("start")
def node_start(
    node_id: Annotated[str, typer.Option("--id", help="This node's id; must be one of --peers.")],
    peers: Annotated[str, typer.Option("--peers", "-p", help="All members: 'n0-HOST:PORT;n1-HOST:PORT;...'.")],
    group: GroupOpt = DEFAULT_GROUP,
    store_base_dir: Annotated[str, typer.Option("--store-base-dir", help="Where dledger-<id>/ lives.")] = DEFAULT_BASE_DIR,
    flush: Annotated[str, typer.Option("--flush", help="async: acknowledge once a majority has the entry in the page "
                                                       "cache (DLedger's way); sync: fsync before acknowledging.")] = "async",
    flush_ms: Annotated[int, typer.Option("--flush-interval", min=1, help="flush=async: how often the page cache is "
                                          "flushed to disk, ms (DLedger's flushFileInterval).")] = 10,
    heartbeat_ms: Annotated[int, typer.Option("--heartbeat-interval", min=1, help="Heartbeat interval, ms.")] = 500,
    heartbeat_leak: Annotated[int, typer.Option("--max-heartbeat-leak", min=1, help="Missed heartbeats before a "
                                                "follower starts an election.")] = 3,
    min_vote_ms: Annotated[int, typer.Option("--min-vote-interval", min=1, help="Least random election wait, ms.")] = 300,
    max_vote_ms: Annotated[int, typer.Option("--max-vote-interval", min=1, help="Most random election wait, ms.")] = 1000,
    preferred_leader: Annotated[Optional[str], typer.Option("--preferred-leader", help="Hand leadership to this "
                                                            "member whenever it is caught up.")] = None,
    max_pending: Annotated[int, typer.Option("--max-pending", min=1, help="Appends waiting for the quorum before "
                                             "new ones get LEADER_PENDING_FULL.")] = 10000,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    drop_behind: DropBehindOpt = None,
    event_loop: Annotated[str, typer.Option("--event-loop", help="auto: uvloop when installed, else asyncio's own "
                                            "loop; uvloop; asyncio.")] = "auto",
) -> None:
    """Run one node in the foreground until SIGTERM or Ctrl-C (logs go to stderr; use -v)."""
    from cluster.node import Node

    try:
        cfg = NodeConfig(group, node_id, parse_peers(peers), store_base_dir=store_base_dir, flush=flush,
                         flush_interval_ms=flush_ms, heartbeat_interval_ms=heartbeat_ms, max_heartbeat_leak=heartbeat_leak,
                         min_vote_interval_ms=min_vote_ms, max_vote_interval_ms=max_vote_ms,
                         preferred_leader=preferred_leader, max_pending_requests=max_pending,
                         data_file_size=data_file_size, index_file_size=index_file_size,
                         **({} if drop_behind is None else {"drop_behind": drop_behind}))
    except ConfigError as exc:
        raise fail(str(exc), 2) from None
    try:
        runtime.loop_factory(event_loop)
    except runtime.RuntimeChoiceError as exc:
        raise fail(str(exc), 2) from None
    with errors_as_exit():
        node = Node(cfg)
        runtime.run(node.run, event_loop)


STATUS_COLUMNS = ["id", "address", "state", "role", "term", "leader", "begin_index", "end_index", "committed_index"]


def _with_client(peers: dict, group: str, timeout: float, work):
    """Run ``await work(client)`` with a client that is closed afterwards; a ClientError
    becomes the one-line error and exit 1."""
    async def go():
        c = Client(peers, group, timeout=timeout)
        try:
            return await work(c)
        finally:
            await c.close()

    try:
        return asyncio.run(go())
    except ClientError as exc:
        raise fail(str(exc)) from None


def _status_rows(peers: dict, group: str, timeout: float) -> list[dict]:
    rows = []
    for pid, md in _with_client(peers, group, timeout, lambda c: c.status()).items():
        row = {"id": pid, "address": peers[pid].address}
        if isinstance(md, dict):
            row.update({"state": "up", **{k: md.get(k) for k in STATUS_COLUMNS[3:]}})
        else:
            row.update({"state": "down", "error": md})
        rows.append(row)
    return rows


@cluster_app.command("status")
def cluster_status(peers: PeersOpt = None, group: GroupOpt = DEFAULT_GROUP, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
                   timeout: TimeoutOpt = 2.0, fmt: FormatOpt = Format.table) -> None:
    """Per node: address, up/down, role, term, leader, begin/end/committed index. Exit 1 if any node is down."""
    parsed, rec_group = _peers(peers, base_dir)
    rows = _status_rows(parsed, rec_group or group, timeout)
    render(rows, fmt, columns=STATUS_COLUMNS if fmt in (Format.table, Format.csv) else None)
    if any(r["state"] != "up" for r in rows):
        raise typer.Exit(1)


@cluster_app.command("up")
def cluster_up(
    nodes: Annotated[int, typer.Option("--nodes", "-n", min=1, max=9, help="How many node processes.")] = 3,
    base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    port_base: Annotated[int, typer.Option("--port-base", help="Port of n0; n1 gets the next one, and so on.")] = DEFAULT_PORT_BASE,
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
    fmt: FormatOpt = Format.table,
) -> None:
    """Start N nodes in the background, wait for a leader, print the peers and a status table."""
    if flush not in ("async", "sync"):
        raise fail(f"--flush must be async or sync, not {flush!r}", 2)
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
    try:
        rec, procs = up(base_dir, nodes, port_base, group, flush, extra)
    except (LauncherError, OSError) as exc:
        raise fail(str(exc)) from None
    peers = parse_peers(rec["peers"])
    deadline = time.monotonic() + wait
    rows = []
    while time.monotonic() < deadline:
        dead = [n for n, proc in zip(rec["nodes"], procs) if proc.poll() is not None]
        if dead:
            n = dead[0]
            raise fail(f"node {n['id']} exited at start: {log_tail(n) or 'see ' + n['log']}")
        rows = _status_rows(peers, group, 1.0)
        if any(r.get("role") == "leader" for r in rows) and all(r["state"] == "up" for r in rows):
            break
        time.sleep(0.2)
    else:
        render(rows, fmt, columns=STATUS_COLUMNS if fmt in (Format.table, Format.csv) else None)
        raise fail(f"no leader elected within {wait:g} s; logs are in {os.path.join(base_dir, 'logs')}")
    if fmt == Format.table:
        typer.echo(f"peers: {rec['peers']}")
    render(rows, fmt, columns=STATUS_COLUMNS if fmt in (Format.table, Format.csv) else None)
    if fmt == Format.table:
        at = "" if base_dir == DEFAULT_BASE_DIR else f" --base-dir {base_dir}"
        typer.echo(f"\nlogs in {os.path.join(base_dir, 'logs')}; try next:\n"
                   f"  dledgerctl append{at} -d hello -d world      # commit two entries\n"
                   f"  dledgerctl get{at} -i 1 -c 2                 # read them back\n"
                   f"  dledgerctl cluster status{at}               # roles, terms, indexes\n"
                   f"  dledgerctl peer watermarks{at}              # how far each follower lags\n"
                   f"  dledgerctl store verify {os.path.join(base_dir, 'dledger-n0')}   # check a replica's files\n"
                   f"  dledgerctl cluster down{at}                 # stop the nodes")


@cluster_app.command("down")
def cluster_down(base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
                 timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait after SIGTERM "
                                                        "before SIGKILL.")] = 10.0,
                 fmt: FormatOpt = Format.table) -> None:
    """Stop exactly the processes 'cluster up' started from --base-dir (SIGTERM, then SIGKILL)."""
    try:
        rows = down(base_dir, timeout)
    except LauncherError as exc:
        raise fail(str(exc)) from None
    render(rows, fmt)


def _read_bodies(data: list[str] | None, file: str | None, lines: bool) -> list[bytes]:
    sources = sum(x is not None and x != [] for x in (data, file))
    if sources != 1:
        raise fail("give exactly one of --data/-d or --file (use --file - for standard input)", 2)
    if data:
        return [d.encode() for d in data]
    try:
        raw = sys.stdin.buffer.read() if file == "-" else open(file, "rb").read()
    except OSError as exc:
        raise fail(f"{file}: {exc.strerror}") from None
    return raw.splitlines() if lines else [raw]


def append_cmd(
    data: Annotated[Optional[list[str]], typer.Option("--data", "-d", help="An entry body (repeat for several).")] = None,
    file: Annotated[Optional[str], typer.Option("--file", help="Read the body from a file ('-': standard input).")] = None,
    lines: Annotated[bool, typer.Option("--lines", help="With --file: each line is one entry.")] = False,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Entries per APPEND request.")] = 64,
    peers: PeersOpt = None, group: GroupOpt = DEFAULT_GROUP, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 5.0, fmt: FormatOpt = Format.table,
) -> None:
    """Append entries on the leader (following NOT_LEADER); prints index, term and pos of each committed entry."""
    bodies = _read_bodies(data, file, lines)
    parsed, rec_group = _peers(peers, base_dir)

    async def work(c: Client) -> list[dict]:
        out = []
        for k in range(0, len(bodies), batch):
            resp = await c.append(bodies[k:k + batch])
            try:
                rows = list(resp["entries"])
            except KeyError:
                raise ClientError(f"{c.leader}: the answer to APPEND lists no entries") from None
            except ProtocolError as exc:  # (read only now: cluster.wire.AnswerRows)
                raise ClientError(f"{c.leader}: {exc}") from None
            out += [{"index": i, "term": t, "pos": p, "size": s, "leader": c.leader} for i, t, p, s in rows]
        return out

    render(_with_client(parsed, rec_group or group, timeout, work), fmt)


def get_cmd(
    index: Annotated[int, typer.Option("--index", "-i", min=0, help="First entry index.")],
    count: Annotated[int, typer.Option("--count", "-c", min=1, help="How many entries.")] = 1,
    body: Annotated[BodyFormat, typer.Option("--body", help="Show bodies as utf8, hex, base64 or none.",
                                             case_sensitive=False)] = BodyFormat.utf8,
    peers: PeersOpt = None, group: GroupOpt = DEFAULT_GROUP, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 5.0, fmt: FormatOpt = Format.table,
) -> None:
    """Read committed entries from the leader."""
    import base64

    shows = {"utf8": lambda b: b.decode("utf-8", "replace"), "hex": bytes.hex,
             "base64": lambda b: base64.b64encode(b).decode(), "none": None}
    body = body.value
    parsed, rec_group = _peers(peers, base_dir)

    entries = _with_client(parsed, rec_group or group, timeout, lambda c: c.get(index, count))
    rows = []
    for e in entries:
        row = {k: e[k] for k in ("index", "term", "pos", "size", "magic")}
        if shows[body] is not None:
            row["body"] = shows[body](e["body"])
        rows.append(row)
    render(rows, fmt)
