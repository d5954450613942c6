"""``dledgerctl mq salvage``: the messages a truncation cut that the group's log no longer
holds (store/rocketmq/salvage.py), as rows and as a file a producer can send again.
Registered on the ``mq`` sub-app by app.py."""

from __future__ import annotations

import json
import os
from typing import Annotated, Optional

import typer

from cluster.node.launcher import DEFAULT_BASE_DIR
from store.errors import NotAStoreError
from store.kinds import BASE, BROKER_KINDS, EVENTS, log_content, require
from store.rocketmq.message import MAX_MESSAGE_SIZE
from store.rocketmq.salvage import salvage, start

from . import clients
from .common import (BaseDirOpt, ClientGroupOpt, FormatOpt, MaxBodyOpt, PeersOpt, TimeoutOpt, errors_as_exit, fail,
                     plural, tls_options)
from .ops.salvage import match_live
from .render import Format, render

COLUMNS = ["index", "term", "topic", "queue_id", "queue_offset", "tags", "keys", "uniq_key", "body_size", "status",
           "held_by", "note"]


_AGAINST = ("mq salvage --against takes a node directory, a base directory of them, or a broker's store root "
            "(DLedger-mode or master-slave)")


def _logs(path: str) -> list[str]:
    """The logs to match against: a node directory; every node directory of a base
    directory or of a DLedger-mode broker's store root; a master-slave (or controller-mode)
    store root's commitlog/. A controller's log, or a directory that is no store, is refused."""
    k = require(path, BROKER_KINDS | {BASE}, _AGAINST)
    if k.commit_log is not None:
        return [k.commit_log]
    for node in k.nodes:
        if log_content(node) == EVENTS:
            raise NotAStoreError(f"{node}: a RocketMQ 5 controller's DLedger log (its entries are controller "
                                 f"events), not a broker's; {_AGAINST}")
    return list(k.nodes)


@tls_options
def salvage_cmd(
    kept: Annotated[str, typer.Argument(help="A file of kept entries (node start --keep-truncated, store "
                                             "truncate), or a directory of them.", show_default=False)],
    against: Annotated[Optional[str], typer.Option(
        "--against", metavar="DIR", help="The group's log on disk: a node directory, or a base directory or broker "
                                         "store root whose every dledger-<id> is read (a message any of them holds "
                                         "counts as held: give the leader's to be strict), or a master-slave store "
                                         "root (mq migrate's output: its commitlog/). Without it, the running group "
                                         "(--peers, or the cluster recorded in --base-dir) is read from its leader, "
                                         "up to its commit index.", show_default=False)] = None,
    out: Annotated[Optional[str], typer.Option("--out", metavar="FILE", help="Also write the missing messages "
                                               "to FILE, one JSON object a line (topic, tags, keys, flag, "
                                               "properties, body in base64), for a producer to send again. FILE "
                                               "must not exist.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="List the kept messages the log holds too (status held).")] = False,
    max_body: MaxBodyOpt = None,
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 5.0,
    fmt: FormatOpt = Format.table,
) -> None:
    """The RocketMQ messages in kept entries that the group's log no longer holds: matched by UNIQ_KEY, else by
    topic, queue, queue offset and body CRC. Only reads: files given with --against (stopped members, or copies of
    their files), else the running group's committed log, read from its leader. Exits 1 when a kept message is
    missing (listed, and written to --out when given)."""
    limit = MAX_MESSAGE_SIZE if max_body is None else max_body
    if against is not None and peers is not None:
        raise fail("give --against (a log on disk) or --peers (a running group), not both", 2)
    with errors_as_exit():
        logs = _logs(against) if against is not None else None
        if out is not None and os.path.lexists(out):
            raise fail(f"--out {out}: already exists")
        if out is not None:
            _part(out)  # (refused before any reading)
        if logs is not None:
            result = salvage(kept, logs, limit)
        else:
            result = start(kept, limit)
            found = clients.target(peers, base_dir, group, timeout)
            with clients.failures():
                match_live(result, found)
        missing = result.missing
        unsendable = [k for k in missing if k.body is None]
        if out is not None:
            _write(out, [k.resend() for k in missing if k.body is not None])
    for what in result.skipped:
        typer.echo(f"Note: {what}: no regular file, not read", err=True)
    shown = result.kept if all_ else missing
    render([k.row() for k in shown], fmt, columns=COLUMNS if fmt in (Format.table, Format.csv) else None)
    others = f"; {plural(result.not_messages, 'entry', 'entries')} not messages" if result.not_messages else ""
    typer.echo(f"{plural(len(result.kept), 'message')} in {plural(result.entries, 'kept entry', 'kept entries')}"
               f"{others}: {len(missing)} not in {', '.join(result.logs)}, {len(result.kept) - len(missing)} held"
               + (f"; {len(missing) - len(unsendable)} written to {out}" if out is not None else "")
               + (f"; {len(unsendable)} missing with a body past the limit, not written (--max-body raises it)"
                  if unsendable else ""), err=True)
    if missing:  # (as a check does: something to act on)
        raise typer.Exit(1)


def _part(path: str) -> str:
    """Where --out is written before it is renamed to ``path``; refused when a file is there
    already (another salvage writing it, or one interrupted): never ours to remove."""
    part = path + ".part"
    if os.path.lexists(part):
        raise fail(f"--out {path}: {part} exists (another salvage writing it, or one interrupted: remove it if "
                   "neither)")
    return part


def _write(path: str, records: list[dict]) -> None:
    """Whole or not at all: a producer never re-sends half of a file. Removes only the
    ``.part`` it created."""
    part = _part(path)
    try:
        fh = open(part, "x", encoding="utf-8")
    except FileExistsError:
        raise fail(f"--out {path}: {part} exists (another salvage writing it)") from None
    try:
        with fh:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.rename(part, path)
    except BaseException:
        if os.path.lexists(part):  # (created above by this process)
            os.unlink(part)
        raise
