"""``dledgerctl peer watermarks | compare | truncate | transfer-leader | add | remove | replace``:
operator requests to a running cluster's leader (cluster/net/client.py), rendered as rows."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Annotated, Optional

import typer

from cluster.net.client import Client, ClientError, Refused
from cluster.raft.config import DEFAULT_GROUP
from cluster.raft.rpc import Code
from cluster.node.launcher import DEFAULT_BASE_DIR

from . import peer_members
from .cluster_cmd import _peers, _with_client
from .common import (BaseDirOpt, ClientGroupOpt, FormatOpt, PeersOpt, TimeoutOpt, client_tls, complete_members, fail,
                     plural, tls_options)
from .render import Format, render, render_object

app = typer.Typer(help="Operator requests to a running cluster: replication watermarks, forced compare and "
                       "truncation of a follower, leadership transfer, membership changes.", no_args_is_help=True)

WATERMARK_COLUMNS = ["peer", "address", "member", "alive", "state", "watermark", "next_index", "lag_entries", "lag_bytes",
                     "lag_ms", "in_flight", "ms_since_ack", "leader_end_index", "committed_index", "note"]
PeerOpt = Annotated[str, typer.Option("--peer", help="The follower's id.", show_default=False,
                                      autocompletion=complete_members)]


def _cluster(peers: str | None, group: str, base_dir: str) -> tuple[dict, str]:
    parsed, rec_group = _peers(peers, base_dir)
    return parsed, group or rec_group or DEFAULT_GROUP


def _member(parsed: dict, peer: str, what: str = "--peer") -> None:
    if peer not in parsed:
        raise fail(f"{what} {peer!r} is not a member ({', '.join(parsed)})", 2)


def _watermark_rows(parsed: dict, group: str, timeout: float) -> list[dict]:
    return _with_client(parsed, group, timeout, lambda c: c.watermarks())


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
    parsed, grp = _cluster(peers, group, base_dir)
    cols = WATERMARK_COLUMNS if fmt in (Format.table, Format.csv) else None
    if not watch:
        render(_watermark_rows(parsed, grp, timeout), fmt, columns=cols)
        return
    n = 0
    trend = LagTrend()
    source = _Watermarks(parsed, grp, timeout)  # (one client, its connection kept, for every refresh)
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


class _Watermarks:
    """WATERMARKS from the leader, refresh after refresh, through one client on a loop of
    its own (its connection stays open between refreshes); a ClientError is the one-line
    error."""

    def __init__(self, parsed: dict, group: str, timeout: float) -> None:
        tls = client_tls()
        self.loop = asyncio.new_event_loop()

        async def make():
            return Client(parsed, group, timeout=timeout, tls=tls)
        self.client = self.loop.run_until_complete(make())

    def rows(self) -> list[dict]:
        try:
            return self.loop.run_until_complete(self.client.watermarks())
        except ClientError as exc:
            raise fail(str(exc)) from None

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


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
    parsed, grp = _cluster(peers, group, base_dir)
    _member(parsed, peer)
    result = _with_client(parsed, grp, timeout,
                          lambda c: c.force_compare(peer, deep=deep, dry_run=dry_run))
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
        terms = (" (compared terms only, as DLedger does: --deep compares every entry's bytes)"
                 if r.get("mode") == "terms" else "")
        return f"{peer} holds the leader's log up to {r['match_index']}{terms}{tail}."
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
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
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
                          lambda c: c.force_truncate(peer, from_index))
    result.pop("code", None)
    result.pop("remark", None)
    if not result.get("dropped"):  # (as store truncate: past the end there is nothing to cut)
        raise fail(f"nothing to cut: {peer}'s log ends at index {result.get('follower_end')}")
    render_object(result, fmt)


TAKE_WAIT_S = 4.0  # a transfer asked: the leader waits up to max_wait_ack_ms (2.5 s) for the target to catch up


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
    parsed, grp = _cluster(peers, group, base_dir)
    _member(parsed, to, "--to")

    async def work(c: Client) -> dict:
        loop = asyncio.get_running_loop()
        start = loop.time()
        end = start + c.timeout
        said, seen = None, {}

        def waiting(text: str) -> None:
            nonlocal said
            if said != text:
                said = text
                peer_members.say(f"waiting: {text}")

        while True:
            if await c.find_leader(end) == to:
                md = await c.metadata(to)
                return {"from": to, "to": to, "leader": to, "term": md.get("term"), "elapsed_ms": 0}
            try:
                old, old_term = await c.transfer_leadership(to)
            except Refused as exc:  # (not yet: the target is not answering the leader, or a transfer is on)
                if exc.code not in (Code.TAKE_LEADERSHIP_FAILED, Code.LEADER_TRANSFERRING) or loop.time() + 0.2 >= end:
                    raise
                waiting(f"{exc.peer} cannot hand leadership to {to} yet ({exc.remark})")
                c.leader = None  # (it may have moved meanwhile)
                await asyncio.sleep(0.2)
                continue
            # the leader waits for the target to catch up, then asks it to take over (a while: TAKE_WAIT_S)
            asked_until = min(end, loop.time() + TAKE_WAIT_S)
            while loop.time() < asked_until:
                seen = await c.status()
                md = seen.get(to)
                if isinstance(md, dict) and md.get("role") == "leader" and md.get("term", 0) > old_term:
                    return {"from": old, "to": to, "leader": to, "term": md["term"],
                            "elapsed_ms": round((loop.time() - start) * 1000)}
                await asyncio.sleep(0.05)
            if loop.time() >= end:
                break
            waiting(f"{to} did not take over within {TAKE_WAIT_S:g} s (catching up?); asking again")
            c.leader = None
        leaders = [f"{p} (term {md.get('term')})" for p, md in seen.items()
                   if isinstance(md, dict) and md.get("role") == "leader"]
        raise ClientError(f"{to} did not take leadership within {c.timeout:g} s; leader now: "
                          f"{', '.join(leaders) or 'none'}")

    render_object(_with_client(parsed, grp, timeout, work), fmt)


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
    node, address = peer_members.check_new(node, address, "--id", "--address")
    parsed, grp = _cluster(peers, group, base_dir)
    rec_dir = peer_members.record_dir(peers, base_dir, start_it)
    adding = peer_members.Adding(node)
    try:
        row = _with_client(parsed, grp, timeout,
                           lambda c: peer_members.add(c, node, address, wait, rec_dir, rec_dir is not None, adding))
    except KeyboardInterrupt:
        if not adding.done:
            peer_members.undo_add(parsed, grp, timeout, adding)
        raise typer.Exit(130) from None
    render([row], fmt, columns=MEMBER_COLUMNS if fmt in (Format.table, Format.csv) else None)


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
    parsed, grp = _cluster(peers, group, base_dir)
    rec_dir = peer_members.record_dir(peers, base_dir, stop_it)
    render([_with_client(parsed, grp, timeout, lambda c: peer_members.remove(c, node, rec_dir, rec_dir is not None))],
           fmt, columns=MEMBER_COLUMNS if fmt in (Format.table, Format.csv) else None)


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
    new_id, address = peer_members.parse_new(new)
    if new_id == node:
        raise fail("--with must name another id than --id", 2)
    parsed, grp = _cluster(peers, group, base_dir)
    start_dir = peer_members.record_dir(peers, base_dir, start_it)
    stop_dir = peer_members.record_dir(peers, base_dir, stop_it)

    async def work(c: Client) -> list[dict]:
        leader = await c.find_leader(asyncio.get_running_loop().time() + c.timeout)
        md = await c.metadata(leader)
        if node not in md.get("peers", {}):
            raise ClientError(f"{node} is not a member ({', '.join(md.get('peers', {}))})")
        added = await peer_members.add(c, new_id, address, wait, start_dir, start_dir is not None, adding)
        return [added, await peer_members.remove(c, node, stop_dir, stop_dir is not None)]

    adding = peer_members.Adding(new_id)
    try:
        rows = _with_client(parsed, grp, timeout, work)
    except KeyboardInterrupt:
        if not adding.done:
            peer_members.undo_add(parsed, grp, timeout, adding)
        else:
            peer_members.say(f"interrupted: {new_id} was added; the removal of {node} may not be made ('cluster status' shows; "
                 f"'peer remove --id {node}' makes it)")
        raise typer.Exit(130) from None
    render(rows, fmt, columns=MEMBER_COLUMNS if fmt in (Format.table, Format.csv) else None)
