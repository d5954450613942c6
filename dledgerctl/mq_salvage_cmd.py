"""``dledgerctl mq salvage``: the messages a truncation cut that the group's log no longer
holds (store/rocketmq/salvage.py), as rows and as a file a producer can send again.
Registered on the ``mq`` sub-app by app.py."""

from __future__ import annotations

import json
import os
from typing import Annotated, Optional

import typer

from store.errors import NotAStoreError
from store.layout import find_node_dirs, looks_like_node_dir
from store.rocketmq.salvage import salvage

from .common import FormatOpt, MaxBodyOpt, errors_as_exit, fail, plural
from .render import Format, render

COLUMNS = ["index", "term", "topic", "queue_id", "queue_offset", "tags", "keys", "uniq_key", "body_size", "status",
           "held_by", "note"]


def _logs(path: str) -> list[str]:
    """A node directory, or every node directory of a base directory (or a broker's store root)."""
    if not os.path.isdir(path):
        raise NotAStoreError(f"{path}: no such directory" if not os.path.exists(path) else f"{path}: not a directory")
    if looks_like_node_dir(path):
        return [path]
    nodes = find_node_dirs(path)
    if not nodes:
        raise NotAStoreError(f"{path}: not a node directory (no data/ or index/) and holds no dledger-<id> directory")
    return nodes


def salvage_cmd(
    kept: Annotated[str, typer.Argument(help="A file of kept entries (node start --keep-truncated, store "
                                             "truncate), or a directory of them.", show_default=False)],
    against: Annotated[str, typer.Option("--against", metavar="DIR", help="The group's log: a node directory, or a "
                                         "base directory whose every dledger-<id> is read (a message any of them "
                                         "holds counts as held: give the leader's to be strict).",
                                         show_default=False)],
    out: Annotated[Optional[str], typer.Option("--out", metavar="FILE", help="Also write the missing messages "
                                               "to FILE, one JSON object a line (topic, tags, keys, flag, "
                                               "properties, body in base64), for a producer to send again. FILE "
                                               "must not exist.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="List the kept messages the log holds too (status held).")] = False,
    max_body: MaxBodyOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """The RocketMQ messages in kept entries that the group's log no longer holds: matched by UNIQ_KEY, else by
    topic, queue, queue offset and body CRC. Only reads; run it on stopped members or copies of their files."""
    limits = {} if max_body is None else {"max_body": max_body}
    with errors_as_exit():
        logs = _logs(against)
        if out is not None and os.path.lexists(out):
            raise fail(f"--out {out}: already exists")
        result = salvage(kept, logs, **limits)
        missing = result.missing
        unsendable = [k for k in missing if k.body is None]
        if out is not None:
            _write(out, [k.resend() for k in missing if k.body is not None])
    shown = result.kept if all_ else missing
    render([k.row() for k in shown], fmt, columns=COLUMNS if fmt in (Format.table, Format.csv) else None)
    others = f"; {plural(result.not_messages, 'entry', 'entries')} not messages" if result.not_messages else ""
    typer.echo(f"{plural(len(result.kept), 'message')} in {plural(result.entries, 'kept entry', 'kept entries')}"
               f"{others}: {len(missing)} not in {', '.join(result.logs)}, {len(result.kept) - len(missing)} held"
               + (f"; {len(missing) - len(unsendable)} written to {out}" if out is not None else "")
               + (f"; {len(unsendable)} missing with a body past the limit, not written (--max-body raises it)"
                  if unsendable else ""), err=True)


def _write(path: str, records: list[dict]) -> None:
    """Whole or not at all: a producer never re-sends half of a file."""
    part = path + ".part"
    try:
        with open(part, "x", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.rename(part, path)
    except BaseException:
        if os.path.exists(part):
            os.unlink(part)
        raise
