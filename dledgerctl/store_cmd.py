"""``dledgerctl store ...``: offline tools over a node's files (no node needs to run)."""

from __future__ import annotations

import os
import time
from enum import Enum
from typing import Annotated, Optional

import typer

from store.errors import StoreUsageError
from store.filestore import FileStore
from store.inspect import checkpoint_report, diff_stores, inspect_data, inspect_index
from store.kept import kept_rows, write_kept
from store.kinds import dledger_node_dir
from store.layout import NodeLayout
from store.lock import lock_node_dir, unlock_node_dir
from store.reading import render_body
from store.retention import head_files, plan_head_deletion
from store.rocketmq.controller import DECODED_COLUMNS, with_events
from store.verify import file_extents, verify_store

from .common import (BodyFormat, DataSizeOpt, FormatOpt, IndexSizeOpt, SelfIdOpt, errors_as_exit,
                     fail, parse_duration, plural, progress_bar)
from .render import Format, render, render_object
from .selection_options import FromOpt, ToOpt, selection

app = typer.Typer(help="Inspect, verify and repair a node's files offline.", no_args_is_help=True)

DirArg = Annotated[str, typer.Argument(help="A node directory (dledger-<id>), or a base directory holding one.",
                                       show_default=False)]
IndexOpt = Annotated[Optional[int], typer.Option("--index", "-i", min=0, help="Only this entry index.")]
PosOpt = Annotated[Optional[int], typer.Option("--pos", min=0, help="Only the record at this logical byte offset.")]
AllOpt = Annotated[bool, typer.Option("--all-records", help="Also show file boundaries, BLANK padding and the end.")]


class StoreDecode(str, Enum):
    """What ``store inspect-data --decode`` reads an entry's body as."""

    rocketmq_controller = "rocketmq-controller"


def _node(path: str, self_id: str | None) -> str:
    return dledger_node_dir(path, self_id)


DATA_COLUMNS = ["kind", "file", "file_offset", "pos", "index", "term", "magic", "size", "crc", "status", "note"]
INDEX_COLUMNS = ["file", "file_offset", "slot", "magic", "pos", "size", "index", "term", "status"]


DataArg = Annotated[str, typer.Argument(help="A node directory (dledger-<id>), a base directory holding one, or a "
                                        "file of kept entries (--keep-truncated, store truncate).", show_default=False)]


@app.command("inspect-data")
def inspect_data_cmd(
    dir: DataArg,
    index: IndexOpt = None,
    from_index: FromOpt = None,
    to_index: ToOpt = None,
    pos: PosOpt = None,
    body: Annotated[BodyFormat, typer.Option("--body", help="Show bodies as none, hex, utf8 or base64.",
                                             case_sensitive=False)] = BodyFormat.none,
    all_records: AllOpt = False,
    decode: Annotated[Optional[StoreDecode], typer.Option("--decode", help="Read each entry's body as: "
                                                          "rocketmq-controller (a RocketMQ 5 controller's event: its "
                                                          "type, broker set and fields).", case_sensitive=False,
                                                          show_default=False)] = None,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """List the entries of the data files with index, term, pos, size, magic and CRC status."""
    body = body.value
    sel = selection(index, from_index, to_index, pos)
    with errors_as_exit():
        if os.path.isfile(dir):  # a file of kept entries: its entries back to back (store/kept.py)
            shown = "base64" if decode else body
            rows = kept_rows(dir, lo=sel.lower(), hi=sel.upper(), pos=sel.pos,
                             render=None if shown == "none" else (lambda b: render_body(b, shown)))
            cols = DATA_COLUMNS + (["body"] if body != "none" else [])
            if decode:
                rows = with_events(rows, body, text=fmt in (Format.table, Format.csv))
                cols = cols[:cols.index("note")] + DECODED_COLUMNS + ["event_note"] + cols[cols.index("note"):]
            if not render(rows, fmt, columns=cols if fmt in (Format.table, Format.csv) else None):
                typer.echo(f"Note: nothing in that range of {dir}", err=True)
            return
        node = _node(dir, self_id)
        rows = inspect_data(node, sel, body="base64" if decode else body, all_records=all_records,
                            data_file_size=data_file_size, index_file_size=index_file_size)
        cols = DATA_COLUMNS + (["body"] if body != "none" else [])
        if decode:
            rows = with_events(rows, body, text=fmt in (Format.table, Format.csv))
            cols = cols[:cols.index("note")] + DECODED_COLUMNS + ["event_note"] + cols[cols.index("note"):]
        if not render(rows, fmt, columns=cols if fmt in (Format.table, Format.csv) else None):
            _range_note(node, data_file_size, index_file_size)
        _snapshot_note(node)


def _range_note(node: str, data_file_size, index_file_size) -> None:
    """On stderr, when a selection found nothing: which entries the log holds."""
    with FileStore.open(node, read_only=True, data_file_size=data_file_size, index_file_size=index_file_size) as s:
        begin, end = s.begin_index, s.end_index
    held = "no entries" if end < begin else f"entries {begin} to {end}"
    typer.echo(f"Note: nothing in that range: this log holds {held}", err=True)


def _snapshot_note(node: str) -> None:
    """On stderr: the latest state-machine snapshot (a log whose head was deleted after a
    snapshot begins after index 0 on purpose: the snapshot holds what it had)."""
    from store.snapshot import SnapshotStore

    latest = SnapshotStore(node, writable=False).latest()
    if latest is not None:
        typer.echo(f"Note: snapshot {latest.index} (term {latest.term}) holds the state machine's state up to "
                   f"entry {latest.index}; the log may begin after it ('store snapshot' lists them)", err=True)


@app.command("inspect-index")
def inspect_index_cmd(
    dir: DirArg,
    index: IndexOpt = None,
    from_index: FromOpt = None,
    to_index: ToOpt = None,
    pos: PosOpt = None,
    all_records: Annotated[bool, typer.Option("--all-records", help="Also show empty slots after the end.")] = False,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """List the 32-byte index records (magic, pos, size, index, term) by slot."""
    sel = selection(index, from_index, to_index, pos)
    with errors_as_exit():
        node = _node(dir, self_id)
        if not render(inspect_index(node, sel, all_records=all_records, data_file_size=data_file_size,
                                    index_file_size=index_file_size), fmt,
                      columns=INDEX_COLUMNS if fmt in (Format.table, Format.csv) else None):
            _range_note(node, data_file_size, index_file_size)


@app.command("verify")
def verify_cmd(
    dir: DirArg,
    no_crc: Annotated[bool, typer.Option("--no-crc", help="Skip checksum verification (faster).")] = False,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Also draw the files with each "
                                                "problem marked where it lies, as a PNG.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Check every file of a node; exit 0 when clean, 1 when a problem is found."""
    with errors_as_exit():
        node = _node(dir, self_id)
        total = _data_bytes(node)
        with progress_bar("verify", total) as advance:
            report = verify_store(node, data_file_size=data_file_size,
                                  index_file_size=index_file_size, check_crc=not no_crc,
                                  progress=advance)
    problems = [p.as_row() for p in report.problems]
    summary = report.summary()
    if report.suppressed:
        summary["not_listed"] = sum(report.suppressed.values())
    if plot is not None:
        from .plots import PlotError, damage_map
        try:
            damage_map(summary, problems, file_extents(node), plot)
        except PlotError as exc:
            raise fail(str(exc)) from None
    if fmt == Format.json:
        render_object({"summary": summary, "problems": problems}, fmt)
    elif fmt == Format.jsonl:
        render(problems + [{"summary": summary}], fmt)
    elif fmt == Format.csv:  # (the verdict as a last row of the same columns)
        verdict = {"severity": "summary", "code": "ok" if report.ok else "problems",
                   "message": "; ".join(f"{k}={v}" for k, v in summary.items())}
        render([*problems, verdict], fmt, columns=["severity", "code", "file", "offset", "index", "message"])
    else:
        if problems:
            render(problems, fmt)
            typer.echo("")
        render_object(summary, fmt)
    if not report.ok:
        raise typer.Exit(1)


def _data_bytes(node: str) -> int:
    total = 0
    data_dir = os.path.join(node, "data")
    try:
        for name in os.listdir(data_dir):
            total += os.path.getsize(os.path.join(data_dir, name))
    except OSError:
        return 0
    return total


@app.command("checkpoint")
def checkpoint_cmd(
    dir: DirArg,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Show checkpoint and currterm beside what the data says.

    Each row is ok, warning (stale or absent: normal after a crash or before the first
    write; exit 0) or mismatch (the files contradict the data: exit 1)."""
    with errors_as_exit():
        node = _node(dir, self_id)
        rows = checkpoint_report(node, data_file_size=data_file_size,
                                 index_file_size=index_file_size)
    render(rows, fmt)
    if any(r["status"] == "mismatch" for r in rows):
        raise typer.Exit(1)


@app.command("snapshot")
def snapshot_cmd(
    dir: DirArg,
    self_id: SelfIdOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """List and check a node's state-machine snapshots (DIR/snapshot/snapshot_<index>, DLedger HEAD's layout).

    One row per snapshot: index, term, size, crc32 of its data, ok, and the problem when
    it is damaged (meta unreadable or naming another index, data missing, or of another
    size or crc32 than its meta records). Exit 1 when any is damaged; the latest good one
    is what a node would load. Read-only."""
    from store.snapshot import SnapshotStore

    with errors_as_exit():
        node = _node(dir, self_id)
        rows = [s.as_row() for s in SnapshotStore(node, writable=False).list()]
    render(rows, fmt, columns=["index", "term", "size", "crc", "ok", "problem"]
           if fmt in (Format.table, Format.csv) else None)
    if any(not r["ok"] for r in rows):
        raise typer.Exit(1)


@app.command("diff")
def diff_cmd(
    dir_a: Annotated[str, typer.Argument(help="First replica's node directory.", show_default=False)],
    dir_b: Annotated[str, typer.Argument(help="Second replica's node directory.", show_default=False)],
    self_id_a: Annotated[Optional[str], typer.Option("--self-id-a", help="Node id in DIR_A when it is a base "
                                                     "directory holding several nodes.")] = None,
    self_id_b: Annotated[Optional[str], typer.Option("--self-id-b", help="Node id in DIR_B, likewise.")] = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Find the last common index and the first index where two replicas differ, over the entries both hold.

    Exit 0 when the logs are identical, 1 when they differ.
    """
    with errors_as_exit():
        result = diff_stores(_node(dir_a, self_id_a), _node(dir_b, self_id_b), data_file_size=data_file_size,
                             index_file_size=index_file_size)
    render_object(result, fmt)
    if result["a_begin"] != result["b_begin"] and result["compared_from"] is not None:
        typer.echo(f"Note: the logs begin at {result['a_begin']} and {result['b_begin']}; compared the entries both "
                   f"hold, {result['compared_from']}..{result['compared_to']}", err=True)
    if not result["identical"]:
        raise typer.Exit(1)


@app.command("truncate")
def truncate_cmd(
    dir: DirArg,
    from_index: Annotated[int, typer.Option("--from-index", min=0, help="Cut this entry and every later one.",
                                            show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Allow cutting at or below the committed index.")] = False,
    backup: Annotated[Optional[str], typer.Option("--backup", help="Where to keep the cut entries (default: a file in "
                                                  "the node directory named for the range cut and the time, "
                                                  "truncated-*.entries).")] = None,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Cut a stopped node's log from an index on, keeping the cut entries in a backup file."""
    dsize, isize = data_file_size, index_file_size
    with errors_as_exit():
        node = _node(dir, self_id)
        # Hold the node's lock from the first look to the cut: a running node (or another
        # repair) is refused before anything is written, the backup included.
        lock = lock_node_dir(NodeLayout(node))
        try:
            return _truncate(node, lock, from_index, yes, force, backup, dsize, isize, fmt)
        finally:
            if lock >= 0:
                unlock_node_dir(NodeLayout(node), lock)


def _truncate(node, lock, from_index, yes, force, backup, dsize, isize, fmt) -> None:
    """store truncate, with the node's lock held by the caller."""
    with FileStore.open(node, read_only=True, data_file_size=dsize, index_file_size=isize) as ro:
        end, committed, begin = ro.end_index, ro.committed_index, ro.begin_index
        plan = ro.plan
        if end < 0 or from_index > end:
            damage = f" (damage after it is cut on the next writable open: {plan.end_reason})" if plan.cuts_data else ""
            raise fail(f"nothing to cut: the log ends at index {end}{damage}")
        if from_index < begin:
            raise fail(f"--from-index {from_index} is before the log's first index {begin}")
        if from_index <= committed and not force:
            raise fail(f"refusing to cut at {from_index}: entries up to {committed} are committed "
                       f"(use --force to cut committed entries)")
        first_pos, _ = ro.locate(from_index)
        last_pos, last_size = ro.locate(end)
        cut_bytes = last_pos + last_size - first_pos
        typer.echo(f"{node}: log {begin}..{end}, committed {committed}", err=True)
        typer.echo(f"will cut entries {from_index}..{end} ({plural(end - from_index + 1, 'entry', 'entries')}, "
                   f"{plural(cut_bytes, 'byte')})"
                   + (f"; recovery will also clear damage: {plan.end_reason}" if plan.cuts_data else ""),
                   err=True)
        if from_index <= committed:
            typer.echo(f"WARNING: this cuts committed entries {from_index}..{committed}", err=True)
        if not yes:
            try:
                confirmed = typer.confirm("Proceed?", default=False, err=True)
            except typer.Abort:  # end of input: nobody said yes
                typer.echo("", err=True)  # end the prompt's line
                confirmed = False
            if not confirmed:
                raise fail("not confirmed; nothing was cut (use --yes to skip the question)")
        backup_path = backup or os.path.join(node, f"truncated-{from_index}-{end}-{time.strftime('%Y%m%d%H%M%S')}.entries")
        if os.path.exists(backup_path):
            raise fail(f"backup file {backup_path} already exists")
        # the cut entries back to back, whole or not at all (store/kept.py: inspect-data FILE, mq salvage)
        write_kept(backup_path, (ro.get_bytes(i) for i in range(from_index, end + 1)))
    with FileStore.open(node, data_file_size=dsize, index_file_size=isize, flush="sync", lock_fd=lock) as rw:
        if rw.end_index != end:
            raise StoreUsageError(f"the log changed while truncating (end {rw.end_index}, expected {end})")
        dropped = rw.truncate(from_index, force=force)
        new_end, new_committed = rw.end_index, rw.committed_index
    render_object({"node_dir": node, "from_index": from_index, "entries_cut": dropped, "bytes_cut": cut_bytes,
                   "end_index": new_end, "committed_index": new_committed, "backup": backup_path}, fmt)


@app.command("purge")
def purge_cmd(
    dir: DirArg,
    before_index: Annotated[Optional[int], typer.Option("--before-index", min=0, help="Delete the data files whose "
                                                        "entries all lie before this index.")] = None,
    older_than: Annotated[Optional[float], typer.Option("--older-than", parser=parse_duration, metavar="DURATION",
                                                        help="Delete the data files last written longer ago than "
                                                             "this (90m, 72h, 3d), as DLedger's fileReservedHours "
                                                             "does.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be deleted.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Delete whole data files from the head of a stopped node's log (and the index files below them), as a node's
    retention does: never the last file, never past the commit index; the log then begins later."""
    if (before_index is None) == (older_than is None):
        raise fail("give one of --before-index or --older-than", 2)
    with errors_as_exit():
        node = _node(dir, self_id)
        lock = lock_node_dir(NodeLayout(node))  # a running node is refused before anything is read
        try:
            _purge(node, lock, before_index, older_than, dry_run, yes, data_file_size, index_file_size, fmt)
        finally:
            unlock_node_dir(NodeLayout(node), lock)


def _purge(node, lock, before_index, older_than, dry_run, yes, dsize, isize, fmt) -> None:
    """store purge, with the node's lock held by the caller."""
    with FileStore.open(node, read_only=True, data_file_size=dsize, index_file_size=isize) as ro:
        begin, end, committed = ro.begin_index, ro.end_index, ro.committed_index
        if end < 0:
            raise fail(f"{node}: the log is empty; nothing to delete")
        if before_index is not None and before_index - 1 > committed:
            raise fail(f"refusing to delete entries up to {before_index - 1}: the log is committed up to {committed}")
        now = time.time()
        plan = plan_head_deletion(head_files(ro), committed=committed, now=now, reserved_s=older_than,
                                  before_index=before_index)
        sizes = {f.name: f.actual_size for f in ro.data.files}
    rows = [{"file": f"data/{f.name}", "first_index": f.first_index, "last_index": f.last_index,
             "age_s": round(now - f.mtime), "bytes": sizes.get(f.name, 0),
             "result": "would delete" if dry_run else "deleted"} for f in plan.files]
    typer.echo(f"{node}: log {begin}..{end}, committed {committed}", err=True)
    if not plan.files:
        typer.echo(f"nothing to delete: {plan.kept_because}", err=True)
        render(rows, fmt)
        return
    total = sum(r["bytes"] for r in rows)
    typer.echo(f"{'would delete' if dry_run else 'will delete'} {plural(len(rows), 'data file')} "
               f"({plural(total, 'byte')}): entries {begin}..{plan.new_begin - 1}; the log will begin at "
               f"{plan.new_begin}; kept from there: {plan.kept_because}", err=True)
    if dry_run:
        render(rows, fmt)
        return
    if not yes:
        try:
            confirmed = typer.confirm("Proceed?", default=False, err=True)
        except typer.Abort:
            typer.echo("", err=True)
            confirmed = False
        if not confirmed:
            raise fail("not confirmed; nothing was deleted (use --yes to skip the question)")
    with FileStore.open(node, data_file_size=dsize, index_file_size=isize, lock_fd=lock) as rw:
        if rw.begin_index != begin or rw.end_index != end:
            raise StoreUsageError(f"the log changed while purging (now {rw.begin_index}..{rw.end_index})")
        data_removed, index_removed = rw.delete_head(len(plan.files))
        new_begin = rw.begin_index
    rows += [{"file": f"index/{n}", "first_index": None, "last_index": None, "age_s": None, "bytes": None,
              "result": "deleted"} for n in index_removed]
    render(rows, fmt)
    typer.echo(f"deleted {plural(len(data_removed), 'data file')} and {plural(len(index_removed), 'index file')}; "
               f"the log begins at {new_begin}", err=True)
