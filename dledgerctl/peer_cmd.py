"""``dledgerctl peer watermarks | compare | truncate | transfer-leader | add | remove | replace``:
operator requests to a running cluster's leader (cluster/net/client.py), rendered as rows."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Optional

import typer

from cluster.net.answers import CompareAnswer
from cluster.net.client import ClientError
from cluster.node.launcher import DEFAULT_BASE_DIR

from . import clients
from .common import BaseDirOpt, ClientGroupOpt, FormatOpt, PeersOpt, TimeoutOpt, complete_members, fail, plural, say, \
    tls_options
from .ops import members, peers as ops_peers
from .ops.targets import row
from .render import Format, render, render_object

app = typer.Typer(help="Operator requests to a running cluster: replication watermarks, forced compare and "
                       "truncation of a follower, leadership transfer, membership changes.", no_args_is_help=True)

WATERMARK_COLUMNS = ["peer", "address", "member", "alive", "state", "watermark", "next_index", "lag_entries", "lag_bytes",
                     "lag_ms", "in_flight", "ms_since_ack", "leader_end_index", "committed_index", "note"]
PeerOpt = Annotated[str, typer.Option("--peer", help="The follower's id.", show_default=False,
                                      autocompletion=complete_members)]


@app.command("watermarks")
@tls_options
def watermarks_cmd(
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C (in place on a terminal; "
                                                              "otherwise one rendering per refresh).")] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="Seconds between refreshes with --watch.")] = 1.0,
    count: Annotated[Optional[int], typer.Option("--count", min=1, help="With --watch: stop after this many "
                                                 "refreshes.")] = None,
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 3.0, fmt: FormatOpt = Format.table,
) -> None:
    """Per member, from the leader: alive, dispatcher state, match index (watermark), next index, lag in entries
    and bytes, batches in flight, ms since the last acknowledgement, and the leader's end and committed index.
    With --watch, a lag_trend column draws each member's lag in entries over the last refreshes."""
    found = clients.target(peers, base_dir, group, timeout)
    cols = WATERMARK_COLUMNS if fmt in (Format.table, Format.csv) else None
    if not watch:
        with clients.failures():
            render([r.row() for r in ops_peers.watermarks(found)], fmt, columns=cols)
        return
    n = 0
    trend = LagTrend()
    source = _Watermarks(found)  # (one client, its connection kept, for every refresh)
    try:
        if sys.stdout.isatty() and fmt == Format.table:
            _watch_live(source, interval, count, trend)
            return
        while count is None or n < count:
            if n:
                time.sleep(interval)
            render(trend.add(source.rows()), fmt, columns=cols and [*cols, "lag_trend"])
            sys.stdout.flush()
            n += 1
    except KeyboardInterrupt:
        pass
    finally:
        source.close()


class _Watermarks(ops_peers.Watermarks):
    """ops.peers.Watermarks, its rows as dicts (as the leader sent them), a ClientError as
    the one-line error."""

    def rows(self) -> list[dict]:
        try:
            return [r.row() for r in super().rows()]
        except ClientError as exc:
            raise fail(str(exc)) from None


class LagTrend:
    """Each member's lag in entries over the last ``keep`` refreshes, drawn as a sparkline
    (scaled to the largest lag shown, which follows it)."""

    def __init__(self, keep: int = 30) -> None:
        self.keep = keep
        self.seen: dict[str, list] = {}

    def add(self, rows: list[dict]) -> list[dict]:
        from .plots import sparkline

        here = {r["peer"] for r in rows}
        for peer in list(self.seen):
            if peer not in here:  # (no longer a member, or not reported this time)
                lags = self.seen[peer]
                lags.append(None)
                del lags[:-self.keep]
                if all(v is None for v in lags):
                    del self.seen[peer]
        for r in rows:
            lags = self.seen.setdefault(r["peer"], [])
            lags.append(r.get("lag_entries"))
            del lags[:-self.keep]
        for r in rows:
            lags = self.seen[r["peer"]]
            top = max((v for v in lags if v is not None), default=0)
            r["lag_trend"] = f"{sparkline(lags)} max {top}"
        return rows


def _watch_live(source: "_Watermarks", interval: float, count: int | None, trend: LagTrend) -> None:
    from rich.live import Live
    from rich.table import Table

    def table() -> Table:
        rows = trend.add(source.rows())
        t = Table(title=f"watermarks at {time.strftime('%H:%M:%S')} (Ctrl-C to stop)")
        for c in [*WATERMARK_COLUMNS, "lag_trend"]:
            t.add_column(c, justify="left" if c in ("peer", "address", "state", "lag_trend") else "right")
        for r in rows:
            t.add_row(*("" if r.get(c) is None else str(r.get(c)) for c in [*WATERMARK_COLUMNS, "lag_trend"]),
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
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 30.0, fmt: FormatOpt = Format.table,
) -> None:
    """Find where a follower's log stops being the leader's; unless --dry-run, cut it there and send the leader's
    dispatcher for that follower back to COMPARE, which re-fills it."""
    found = clients.target(peers, base_dir, group, timeout)
    with clients.failures():
        result = ops_peers.compare(found, peer, deep=deep, dry_run=dry_run)
    render_object(result.row(), fmt)
    if fmt == Format.table:
        typer.echo(_compare_summary(result), err=True)
    if dry_run and result.truncate_from is not None:
        raise typer.Exit(1)


def _compare_summary(r: CompareAnswer) -> str:
    if r.truncate_from is None:
        lag = r.leader_end - r.follower_end
        tail = f"; it lacks {plural(lag, 'entry', 'entries')}, which replication sends" if lag > 0 else ""
        terms = (" (compared terms only, as DLedger does: --deep compares every entry's bytes)"
                 if r.mode == "terms" else "")
        return f"{r.peer} holds the leader's log up to {r.match_index}{terms}{tail}."
    where = (f"differs from index {r.first_diff} (term {r.follower_term} there, the leader has "
             f"{r.leader_term})" if r.first_diff is not None
             else f"holds entries past the leader's end {r.leader_end}")
    if r.dry_run:
        return f"{r.peer} {where}; a repair would cut {plural(r.to_cut, 'entry', 'entries')} from {r.truncate_from}."
    return (f"{r.peer} {where}: cut {plural(r.dropped, 'entry', 'entries')} from {r.truncate_from}; the leader "
            f"re-fills it from {r.match_index + 1}.")


@app.command("truncate")
@tls_options
def truncate_cmd(
    peer: PeerOpt,
    from_index: Annotated[int, typer.Option("--from-index", min=0, help="Cut this entry and every later one; must be "
                                            "above the committed index.", show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 10.0, fmt: FormatOpt = Format.table,
) -> None:
    """Cut a follower's log from --from-index on through the leader, which then re-fills it. Refused at or below
    the committed index."""
    found = clients.target(peers, base_dir, group, timeout)
    with clients.failures():
        ops_peers.check_member(found, peer)
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
    with clients.failures():
        result = ops_peers.truncate(found, peer, from_index)
    render_object(result.row(), fmt)


@app.command("transfer-leader")
@tls_options
def transfer_leader_cmd(
    to: Annotated[str, typer.Option("--to", help="The member to hand leadership to.", show_default=False,
                                    autocompletion=complete_members)],
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 10.0, fmt: FormatOpt = Format.table,
) -> None:
    """Hand leadership to a member (DLedger's LEADERSHIP_TRANSFER): the leader stops taking appends until the
    target has caught up, then the target takes over. A target the leader has not heard from lately (one just
    started) or a transfer already under way is waited for, within --timeout, saying so on stderr. Waits until the
    target leads, or says why it does not."""
    found = clients.target(peers, base_dir, group, timeout)
    with clients.failures():
        render_object(row(ops_peers.transfer_leader(found, to, say)), fmt)


# -- membership: add | remove | replace ------------------------------------------------------
MEMBER_COLUMNS = ["step", "id", "address", "member", "config_index", "voters", "learners", "elapsed_ms"]
WaitOpt = Annotated[float, typer.Option("--wait", min=1, help="Seconds to wait for the change to be in effect "
                                        "(a new member caught up and promoted).")]
StartOpt = Annotated[bool, typer.Option("--start/--no-start", help="With a cluster record (cluster up): start the "
                                        "new member's process too, with the recorded members' settings.")]
StopOpt = Annotated[bool, typer.Option("--stop/--no-stop", help="With a cluster record (cluster up): stop the "
                                       "removed member's process once its removal commits, and forget it.")]


@app.command("add")
@tls_options
def add_cmd(
    node: Annotated[str, typer.Option("--id", help="The new member's id.", show_default=False)],
    address: Annotated[str, typer.Option("--address", help="Where it listens: HOST:PORT.", show_default=False)],
    start_it: StartOpt = True, wait: WaitOpt = 120.0,
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 10.0, fmt: FormatOpt = Format.table,
) -> None:
    """Add a member: it joins as a learner (entries, no vote), and the leader promotes it to voter with a second
    config entry once it has caught up. Progress goes to stderr. Refused while another change is pending. Start
    the new node first with 'node start --learner' (its --peers: the members and itself), or let --start do it for
    a cluster from 'cluster up'."""
    with clients.failures():
        node, address = members.check_new(node, address, "--id", "--address")
    found = clients.target(peers, base_dir, group, timeout)
    rec_dir = members.record_dir(peers, base_dir, start_it)
    adding = members.Adding(node)
    try:
        with clients.failures():
            step = ops_peers.add(found, node, address, wait, rec_dir, adding, say)
    except KeyboardInterrupt:
        _undo(found, adding)
        raise typer.Exit(130) from None
    render([row(step)], fmt, columns=MEMBER_COLUMNS if fmt in (Format.table, Format.csv) else None)


@app.command("remove")
@tls_options
def remove_cmd(
    node: Annotated[str, typer.Option("--id", help="The member to remove.", show_default=False,
                                      autocompletion=complete_members)],
    stop_it: StopOpt = True,
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 10.0, fmt: FormatOpt = Format.table,
) -> None:
    """Remove a member (the leader too: it steps down once the entry that removes it commits). Refused while
    another change is pending, or when the voters left would not have a live majority."""
    found = clients.target(peers, base_dir, group, timeout)
    rec_dir = members.record_dir(peers, base_dir, stop_it)
    with clients.failures():
        step = ops_peers.remove(found, node, rec_dir, say)
    render([row(step)], fmt, columns=MEMBER_COLUMNS if fmt in (Format.table, Format.csv) else None)


@app.command("replace")
@tls_options
def replace_cmd(
    node: Annotated[str, typer.Option("--id", help="The member to replace.", show_default=False,
                                      autocompletion=complete_members)],
    new: Annotated[str, typer.Option("--with", help="The new member: ID=HOST:PORT.", show_default=False)],
    start_it: StartOpt = True, stop_it: StopOpt = True, wait: WaitOpt = 120.0,
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 10.0, fmt: FormatOpt = Format.table,
) -> None:
    """Replace a member (one that died for good, say) without stopping the group: add the new one as a learner,
    wait until it has caught up and is a voter, then remove the old one. One row per step; progress on stderr."""
    with clients.failures():
        new_id, address = members.parse_new(new)
    found = clients.target(peers, base_dir, group, timeout)
    start_dir = members.record_dir(peers, base_dir, start_it)
    stop_dir = members.record_dir(peers, base_dir, stop_it)
    adding = members.Adding(new_id)
    try:
        with clients.failures():
            steps = ops_peers.replace(found, node, new_id, address, wait, start_dir, stop_dir, adding, say)
    except KeyboardInterrupt:
        if not adding.done:
            _undo(found, adding)
        else:
            say(f"interrupted: {new_id} was added; the removal of {node} may not be made ('cluster status' shows; "
                 f"'peer remove --id {node}' makes it)")
        raise typer.Exit(130) from None
    render([row(s) for s in steps], fmt, columns=MEMBER_COLUMNS if fmt in (Format.table, Format.csv) else None)


def _undo(found, adding: members.Adding) -> None:
    """Ctrl-C during an add: take it back (members.undo_add), exit 130 when that is left half done."""
    if adding.done:
        return
    try:
        members.undo_add(found, adding, say)
    except members.UndoLeft as exc:
        raise fail(str(exc), 130) from None
