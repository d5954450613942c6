"""``dledgerctl peer watermarks | compare | truncate | transfer-leader``: operator requests
to a running cluster's leader (cluster/client.py), rendered as rows."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Optional

import typer

from cluster.client import Client
from cluster.config import DEFAULT_GROUP
from cluster.launcher import DEFAULT_BASE_DIR
from cluster.wire import FORCE_COMPARE, FORCE_TRUNCATE, WATERMARKS

from .cluster_cmd import BaseDirOpt, GroupOpt, PeersOpt, TimeoutOpt, _peers, _with_client
from .common import FormatOpt, fail, plural, tls_options
from .render import Format, render, render_object

app = typer.Typer(help="Operator requests to a running cluster: replication watermarks, forced compare and "
                       "truncation of a follower, leadership transfer.", no_args_is_help=True)

WATERMARK_COLUMNS = ["peer", "address", "alive", "state", "watermark", "next_index", "lag_entries", "lag_bytes",
                     "in_flight", "ms_since_ack", "leader_end_index", "committed_index", "note"]
PeerOpt = Annotated[str, typer.Option("--peer", help="The follower's id.", show_default=False)]


def _cluster(peers: str | None, group: str, base_dir: str) -> tuple[dict, str]:
    parsed, rec_group = _peers(peers, base_dir)
    return parsed, rec_group or group


def _member(parsed: dict, peer: str, what: str = "--peer") -> None:
    if peer not in parsed:
        raise fail(f"{what} {peer!r} is not a member ({', '.join(parsed)})", 2)


def _watermark_rows(parsed: dict, group: str, timeout: float) -> list[dict]:
    resp = _with_client(parsed, group, timeout, lambda c: c.operator(WATERMARKS, {}))
    return resp["peers"]


@app.command("watermarks")
@tls_options
def watermarks_cmd(
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C (in place on a terminal; "
                                                              "otherwise one rendering per refresh).")] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="Seconds between refreshes with --watch.")] = 1.0,
    count: Annotated[Optional[int], typer.Option("--count", min=1, help="With --watch: stop after this many "
                                                 "refreshes.")] = None,
    peers: PeersOpt = None, group: GroupOpt = DEFAULT_GROUP, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 3.0, fmt: FormatOpt = Format.table,
) -> None:
    """Per member, from the leader: alive, dispatcher state, match index (watermark), next index, lag in entries
    and bytes, batches in flight, ms since the last acknowledgement, and the leader's end and committed index."""
    parsed, grp = _cluster(peers, group, base_dir)
    cols = WATERMARK_COLUMNS if fmt in (Format.table, Format.csv) else None
    if not watch:
        render(_watermark_rows(parsed, grp, timeout), fmt, columns=cols)
        return
    n = 0
    try:
        if sys.stdout.isatty() and fmt == Format.table:
            _watch_live(parsed, grp, timeout, interval, count)
            return
        while count is None or n < count:
            if n:
                time.sleep(interval)
            render(_watermark_rows(parsed, grp, timeout), fmt, columns=cols)
            sys.stdout.flush()
            n += 1
    except KeyboardInterrupt:
        pass


def _watch_live(parsed: dict, group: str, timeout: float, interval: float, count: int | None) -> None:
    from rich.live import Live
    from rich.table import Table

    def table() -> Table:
        rows = _watermark_rows(parsed, group, timeout)
        t = Table(title=f"watermarks at {time.strftime('%H:%M:%S')} (Ctrl-C to stop)")
        for c in WATERMARK_COLUMNS:
            t.add_column(c, justify="left" if c in ("peer", "address", "state") else "right")
        for r in rows:
            t.add_row(*("" if r.get(c) is None else str(r.get(c)) for c in WATERMARK_COLUMNS),
                      style=None if r.get("alive") else "red")
        return t

    n = 0
    with Live(table(), auto_refresh=False) as live:
        n = 1
        while count is None or n < count:
            time.sleep(interval)
            live.update(table(), refresh=True)
            n += 1


@app.command("compare")
@tls_options
def compare_cmd(
    peer: PeerOpt,
    deep: Annotated[bool, typer.Option("--deep", help="Compare every entry byte for byte (finds bodies changed under "
                                                      "the same terms), not only terms as DLedger does.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report where the logs differ; change nothing "
                                                            "(exit 1 when they do).")] = False,
    peers: PeersOpt = None, group: GroupOpt = DEFAULT_GROUP, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 30.0, fmt: FormatOpt = Format.table,
) -> None:
    """Find where a follower's log stops being the leader's; unless --dry-run, cut it there and send the leader's
    dispatcher for that follower back to COMPARE, which re-fills it."""
    parsed, grp = _cluster(peers, group, base_dir)
    _member(parsed, peer)
    result = _with_client(parsed, grp, timeout,
                          lambda c: c.operator(FORCE_COMPARE, {"peer": peer, "deep": deep, "dryRun": dry_run}))
    result.pop("code", None)
    result.pop("remark", None)
    render_object(result, fmt)
    if fmt == Format.table:
        typer.echo(_compare_summary(result), err=True)
    if dry_run and result.get("truncate_from") is not None:
        raise typer.Exit(1)


def _compare_summary(r: dict) -> str:
    peer = r["peer"]
    if r.get("truncate_from") is None:
        lag = r["leader_end"] - r["follower_end"]
        tail = f"; it lacks {plural(lag, 'entry', 'entries')}, which replication sends" if lag > 0 else ""
        return f"{peer} holds the leader's log up to {r['match_index']}{tail}."
    where = (f"differs from index {r['first_diff']} (term {r['follower_term']} there, the leader has "
             f"{r['leader_term']})" if r.get("first_diff") is not None
             else f"holds entries past the leader's end {r['leader_end']}")
    if r.get("dry_run"):
        return f"{peer} {where}; a repair would cut {plural(r['to_cut'], 'entry', 'entries')} from {r['truncate_from']}."
    return (f"{peer} {where}: cut {plural(r['dropped'], 'entry', 'entries')} from {r['truncate_from']}; the leader "
            f"re-fills it from {r['match_index'] + 1}.")


@app.command("truncate")
@tls_options
def truncate_cmd(
    peer: PeerOpt,
    from_index: Annotated[int, typer.Option("--from-index", min=0, help="Cut this entry and every later one; must be "
                                            "above the committed index.", show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    peers: PeersOpt = None, group: GroupOpt = DEFAULT_GROUP, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 10.0, fmt: FormatOpt = Format.table,
) -> None:
    """Cut a follower's log from --from-index on through the leader, which then re-fills it. Refused at or below
    the committed index."""
    parsed, grp = _cluster(peers, group, base_dir)
    _member(parsed, peer)
    if not yes:
        typer.echo(f"This cuts {peer}'s log from index {from_index} on; the leader then sends those entries again.",
                   err=True)
        try:
            confirmed = typer.confirm("Proceed?", default=False, err=True)
        except typer.Abort:  # end of input: nobody said yes
            typer.echo("", err=True)
            confirmed = False
        if not confirmed:
            raise fail("not confirmed; nothing was cut (use --yes to skip the question)")
    result = _with_client(parsed, grp, timeout,
                          lambda c: c.operator(FORCE_TRUNCATE, {"peer": peer, "fromIndex": from_index}))
    result.pop("code", None)
    result.pop("remark", None)
    render_object(result, fmt)


@app.command("transfer-leader")
@tls_options
def transfer_leader_cmd(
    to: Annotated[str, typer.Option("--to", help="The member to hand leadership to.", show_default=False)],
    peers: PeersOpt = None, group: GroupOpt = DEFAULT_GROUP, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 10.0, fmt: FormatOpt = Format.table,
) -> None:
    """Hand leadership to a member (DLedger's LEADERSHIP_TRANSFER): the leader stops taking appends until the
    target has caught up, then the target takes over. Waits until it leads, or says why it does not."""
    parsed, grp = _cluster(peers, group, base_dir)
    _member(parsed, to, "--to")

    async def work(c: Client) -> dict:
        import asyncio

        loop = asyncio.get_running_loop()
        start = loop.time()
        if await c.find_leader(start + c.timeout) == to:
            md = await c.metadata(to)
            return {"from": to, "to": to, "leader": to, "term": md.get("term"), "elapsed_ms": 0}
        old, old_term = await c.transfer_leadership(to)
        seen = {}
        while loop.time() - start < c.timeout:
            seen = await c.status()
            md = seen.get(to)
            if isinstance(md, dict) and md.get("role") == "leader" and md.get("term", 0) > old_term:
                return {"from": old, "to": to, "leader": to, "term": md["term"],
                        "elapsed_ms": round((loop.time() - start) * 1000)}
            await asyncio.sleep(0.05)
        leaders = [f"{p} (term {md.get('term')})" for p, md in seen.items()
                   if isinstance(md, dict) and md.get("role") == "leader"]
        from cluster.client import ClientError

        raise ClientError(f"{to} did not take leadership within {c.timeout:g} s; leader now: "
                          f"{', '.join(leaders) or 'none'}")

    render_object(_with_client(parsed, grp, timeout, work), fmt)
