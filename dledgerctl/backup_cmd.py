"""``dledgerctl store backup|backup-verify|restore|force-new-group``: a stopped member's
store backed up, a backup checked, a new group's member made from one (store/backup.py,
store/restore.py, dledgerctl/ops/recovery.py), and a survivor made a group of its own when a
majority is lost for good. ``cluster backup`` (a live group) is cluster_backup_cmd.py."""

from __future__ import annotations

import os
from typing import Annotated, List, Optional

import typer

from cluster.raft.config import flag
from store.backup import BackupReader, backup_store
from store.kinds import dledger_node_dir

from .common import DataSizeOpt, FormatOpt, IndexSizeOpt, errors_as_exit, fail, progress_bar
from .ops import recovery
from .ops.targets import OpsError, row
from .render import Format, render, render_object

BackupFileArg = Annotated[str, typer.Argument(help="A backup file (store backup, cluster backup).",
                                              show_default=False, metavar="FILE")]
OutOpt = Annotated[str, typer.Option("--out", "-o", help="The backup file to write (a new file; a failed backup "
                                     "leaves none).", show_default=False)]

SUMMARY = ("file", "group", "entries", "first_index", "last_index", "last_term", "entry_bytes", "chunks",
           "data_file_size", "snapshot_index", "members")


def summary(path: str, m) -> dict:
    """A backup's manifest in one row."""
    members = m.members or {}
    return {"file": path, "group": m.group, "entries": m.entries, "first_index": m.first_index,
            "last_index": m.last_index, "last_term": m.last_term, "entry_bytes": m.entry_bytes,
            "chunks": len(m.chunks), "data_file_size": m.data_file_size,
            "snapshot_index": m.snapshot["index"] if m.snapshot else None,
            "members": members.get("voters") or None, "source": m.source, "created": m.created}


def _ops_errors(exc: OpsError) -> typer.Exit:
    return fail(str(exc), 2 if exc.usage else 1)


def backup_cmd(
    dir: Annotated[str, typer.Argument(help="A stopped member's node directory (dledger-<id>), or a base directory "
                                       "holding one.", show_default=False)],
    out: OutOpt,
    group: Annotated[Optional[str], typer.Option(flag("group"), "-g", help="The group the store belongs to, "
                     "recorded in the manifest (a store does not know its group's name).")] = None,
    upto: Annotated[Optional[int], typer.Option("--to-index", min=0, help="Back up to this index (default: the "
                    "checkpoint's committed index); up to the log's end takes uncommitted entries too.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Back up a stopped member's store to FILE: its log from its first entry to its committed index, its latest
    state-machine snapshot, and a manifest (group, members, first and last index and term, a sha256 per chunk).
    The same format as 'cluster backup'; 'store backup-verify' checks it, 'store restore' builds a new group from
    it."""
    with errors_as_exit():
        node_dir = dledger_node_dir(dir)
        if not os.path.isdir(node_dir):
            raise fail(f"{node_dir}: no such directory")
        total = sum(os.path.getsize(os.path.join(node_dir, "data", f)) for f in os.listdir(os.path.join(
            node_dir, "data"))) if os.path.isdir(os.path.join(node_dir, "data")) else 0
        with progress_bar("backing up", total) as advance:
            m = backup_store(node_dir, out, group=group, upto=upto, progress=advance)
    render_object({k: v for k, v in summary(out, m).items() if k in SUMMARY}, fmt)


def backup_verify_cmd(file: BackupFileArg, fmt: FormatOpt = Format.table) -> None:
    """Check a backup file: its manifest, every chunk's sha256 and every entry (framing, positions, indexes, terms,
    CRCs), and the snapshot's digest. Exits 1 naming the first bad chunk or entry."""
    with errors_as_exit():
        with BackupReader(file) as reader:
            with progress_bar("verifying", reader.size) as advance:
                problem = reader.verify(progress=advance)
            if problem is not None:
                raise fail(f"{file}: {problem.text}")
            render_object({**summary(file, reader.manifest), "ok": True}, fmt)


def restore_cmd(
    file: BackupFileArg,
    node_id: Annotated[str, typer.Option(flag("self_id"), help="The member whose store is made; one of --peers.",
                                         show_default=False)],
    peers: Annotated[str, typer.Option(flag("peers"), "-p", help="The new group's members, each ID-HOST:PORT, "
                                       "with ';' between them: the same for every member restored.",
                                       show_default=False)],
    store_base_dir: Annotated[str, typer.Option(flag("store_base_dir"), help="Where dledger-<id>/ is made; it must "
                                                "not exist, or be empty.", show_default=False)],
    group: Annotated[Optional[str], typer.Option(flag("group"), "-g", help="The new group's name (default: the "
                     "backup's group with '-restored' after it); never the backup's own.")] = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Make member --id's store of a new group from a backup: the backup's entries as a follower holds them, its
    snapshot, and a config entry naming --peers, all committed, in a term above the backup's. The new group has a
    name of its own, so members of the old group are refused. Restore every member from the same FILE with the same
    --peers and --group, then start them with that --group. A damaged backup is refused before anything is
    written."""
    with errors_as_exit():
        try:
            size = os.path.getsize(file) if os.path.isfile(file) else 0
            with progress_bar("restoring", size) as advance:
                r = recovery.restore(file, node_id, peers, store_base_dir, group=group,
                                     data_file_size=data_file_size, index_file_size=index_file_size,
                                     progress=advance)
        except OpsError as exc:
            raise _ops_errors(exc) from None
    render_object(row(r), fmt)
    typer.echo(f"restored {r.id}: entries {r.first_index}-{r.last_index} of group {r.old_group or '?'}, members "
               f"{', '.join(p.split('-', 1)[0] for p in r.members.split(';'))} at config entry {r.config_index}; "
               f"start it with: dledgerctl node start {flag('self_id')} {r.id} {flag('group')} {r.group} "
               f"{flag('store_base_dir')} {store_base_dir} {flag('peers')} '{r.members}'", err=True)


FORCE_COLUMNS = ["index", "term", "magic", "size", "pos"]


def force_new_group_cmd(
    dirs: Annotated[List[str], typer.Argument(help="The survivor's node directory (dledger-<id>), stopped: one.",
                                              show_default=False)],
    peers: Annotated[str, typer.Option(flag("peers"), "-p", help="The survivor alone, SELF-HOST:PORT.",
                                       show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", help="Apply the plan (without it, nothing is changed).")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """When a majority of a group is lost for good: make the one survivor (stopped) a group of its own, so it can
    lead. Without --yes, list what it holds past its commit index (uncommitted, and committed by the force) and
    change nothing; with --yes, keep its log whole, commit it, and append a config entry naming it alone in a new
    term (none when its log was written with Java DLedger members: start it alone by its configuration). Then start
    it and bring members back with 'peer add'. Several survivors: choose one with 'store elect'."""
    with errors_as_exit():
        try:
            p = recovery.apply_force(dirs, peers) if yes else recovery.plan_force(dirs, peers)
        except OpsError as exc:
            raise _ops_errors(exc) from None
    render([row(u) for u in p.uncommitted], fmt, columns=FORCE_COLUMNS if fmt in (Format.table, Format.csv) else None)
    n = len(p.uncommitted)
    what = (f"{n} entr{'y' if n == 1 else 'ies'} past its commit index {p.committed_index} "
            f"({p.uncommitted[0].index}-{p.uncommitted[-1].index})" if n else
            f"nothing past its commit index {p.committed_index}")
    if p.java_only:
        alone = f"{p.id}-{p.address}"
        java = (f"Its log holds DLedger 0.2.7's entries only (written with Java members, which take their members "
                f"from their configuration and read no config entry): no entry is written. Start it alone: a Java "
                f"DLedger server with --peers '{alone}', a DLedger-mode broker with dLegerSelfId={p.id} and "
                f"dLegerPeers={alone} in its broker.conf, dledgerctl with {flag('peers')} '{alone}'")
        if p.applied:
            typer.echo(f"forced {p.id}: its log committed, term {p.new_term}; {what} now committed. {java}. To grow "
                       f"it, give every member (it and the new ones) the new member list and restart them: DLedger "
                       f"0.2.7 changes members only so.", err=True)
        else:
            typer.echo(f"plan for {p.id} (log {p.begin_index}-{p.end_index}, term {p.end_term}): {what} would become "
                       f"committed, and its term {p.new_term}. {java}. Nothing changed: run again with --yes to "
                       f"apply.", err=True)
    elif p.applied:
        typer.echo(f"forced {p.id}: a group of its own at config entry {p.config_index}, term {p.new_term}; "
                   f"{what} now committed. Start it with {flag('peers')} '{p.id}-{p.address}', then "
                   f"'peer add' the new members.", err=True)
    else:
        typer.echo(f"plan for {p.id} (log {p.begin_index}-{p.end_index}, term {p.end_term}): {what} would become "
                   f"committed, and a config entry naming {p.id} alone appended in term {p.new_term}. Nothing "
                   f"changed: run again with --yes to apply.", err=True)
