"""``dledgerctl controller events | state``: the log of a RocketMQ 5 DLedger controller, its
events and the state replaying them gives, offline (store/rocketmq/controller.py)."""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from store.filestore import FileStore
from store.kinds import refuse_for_controller
from store.layout import find_node_dirs, looks_like_node_dir, resolve_node_dir
from store.metafiles import read_checkpoint
from store.rocketmq.controller import (EVENT_COLUMNS, EventFilter, event_rows, fields_text, parse_type,
                                       require_controller_log)
from store.rocketmq.controller_state import HISTORY_COLUMNS, STATE_COLUMNS, replay

from store.rocketmq.controller_check import FINDING_COLUMNS, check

from .common import DataSizeOpt, FormatOpt, IndexSizeOpt, SelfIdOpt, errors_as_exit, plural
from .render import Format, render
from .selection_options import FromOpt, ToOpt, selection

app = typer.Typer(help="A RocketMQ 5 DLedger controller's log: its events and the broker sets' state (offline); a "
                       "live controller group watched for elections it holds back.",
                  no_args_is_help=True)

DirArg = Annotated[str, typer.Argument(help="A controller's node directory (dledger-<selfId> under its "
                                            "controllerStorePath), or a base directory holding one or several.",
                                       show_default=False)]


MAX_NOTES = 10  # notes on single entries shown; more are counted in one line


def _node_dir(path: str, self_id: str | None, sizes: dict) -> str:
    """The controller's node directory to read: the one given, or of several under a base
    directory (no --self-id) the one whose log reaches furthest, said on stderr. A broker's
    store or log (store.kinds) and a log whose first entries are no events (garbage, what
    no RocketMQ writes: controller.require_controller_log) are refused in one line."""
    refuse_for_controller(path)
    node = _find_node_dir(path, self_id, sizes)
    require_controller_log(node, **sizes)
    return node


def _find_node_dir(path: str, self_id: str | None, sizes: dict) -> str:
    if self_id is not None or not os.path.isdir(path) or looks_like_node_dir(path):
        return resolve_node_dir(path, self_id).node_dir
    nodes = find_node_dirs(path)
    if len(nodes) <= 1:
        return resolve_node_dir(path).node_dir
    ends = []
    for n in nodes:
        with FileStore.open(n, read_only=True, **sizes) as s:
            ends.append((s.end_index, n))
    best = max(ends, key=lambda t: t[0])  # (the first of equals: they are sorted by name)
    others = ", ".join(f"{os.path.basename(n)} to {e}" for e, n in ends if n != best[1])
    typer.echo(f"Note: reading {os.path.basename(best[1])} (log to index {best[0]}; {others}); --self-id picks "
               "another", err=True)
    return best[1]


def _sizes(data_file_size, index_file_size) -> dict:
    return dict(data_file_size=data_file_size, index_file_size=index_file_size)


def _fields_text(rows):
    """table and csv: an event's fields as one JSON object."""
    for row in rows:
        row["fields"] = fields_text(row["fields"])
        yield row


@app.command("events")
def events_cmd(
    dir: DirArg,
    broker: Annotated[Optional[str], typer.Option("--broker", help="Only events of this broker set (brokerName).")]
    = None,
    type_: Annotated[Optional[list[str]], typer.Option("--type", help="Only events of this type: its name "
                                                                      "(ElectMasterEvent, ELECT_MASTER_EVENT, "
                                                                      "elect-master) or id 1-6 (repeat: any "
                                                                      "of them).")] = None,
    from_index: FromOpt = None,
    to_index: ToOpt = None,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """One row per entry: index, term, event type, broker set and the event's fields as RocketMQ's EventSerializer
    wrote them. Empty entries are the proposal each new leader appends; an entry that is no event (garbage, an
    unknown type id, bad JSON) is a row that says so. With --broker or --type, the events that match only."""
    sel = selection(None, from_index, to_index, None)
    try:
        types = frozenset(parse_type(t) for t in type_ or ())
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--type") from None
    sizes = _sizes(data_file_size, index_file_size)
    with errors_as_exit():
        node = _node_dir(dir, self_id, sizes)
        rows = event_rows(node, sel, EventFilter(broker, types), **sizes)
        if fmt in (Format.table, Format.csv):
            rows = _fields_text(rows)
        render(rows, fmt, columns=EVENT_COLUMNS if fmt == Format.table else None)


def _brokers_text(rows):
    """table and csv: the syncStateSet as ids and commas, brokers as id=address/code."""
    for row in rows:
        if row.get("sync_state_set") is not None:
            row["sync_state_set"] = ",".join(map(str, row["sync_state_set"]))
        if "brokers" in row:
            row["brokers"] = " ".join(f"{b['broker_id']}={b['address']}"
                                      + (f"/{b['register_check_code']}" if b["register_check_code"] else "")
                                      for b in row["brokers"])
        yield row


@app.command("state")
def state_cmd(
    dir: DirArg,
    at_index: Annotated[Optional[int], typer.Option("--at-index", min=0, help="The state after applying the log "
                                                                              "through this index (default: all "
                                                                              "of it).")] = None,
    history: Annotated[bool, typer.Option("--history", help="With --broker: a row per event of that broker set, "
                                                             "with the master and syncStateSet after it and what "
                                                             "changed (index and term of each change).")] = False,
    broker: Annotated[Optional[str], typer.Option("--broker", help="Only this broker set (brokerName).")] = None,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Replay the log from its first entry as RocketMQ's ReplicasInfoManager applies it (the controller keeps no
    snapshot): per broker set, the master broker id and address, masterEpoch, syncStateSet and its epoch, and every
    broker id with its address and register check code (table: id=address/code).

    The replay stops at the first entry RocketMQ's apply fails on, as the controller does (DLedger applies nothing
    past it): the state is the one before it, and one note says which entry and how many lie past it. Events
    RocketMQ ignores, and a log that does not start at index 0 (its head files were deleted: this state is then not
    the controller's), are said on stderr. A log that is no controller's is refused (exit 1)."""
    if history and broker is None:
        raise typer.BadParameter("it shows one broker set's timeline: give --broker NAME too", param_hint="--history")
    sizes = _sizes(data_file_size, index_file_size)
    timeline: list[dict] = []
    with errors_as_exit():
        node = _node_dir(dir, self_id, sizes)
        r = replay(node, at_index, history_of=broker if history else None, history=timeline, **sizes)
    if history and not timeline:
        typer.echo(f"Note: no event of the log names broker set {broker}", err=True)
    if history:
        render(_brokers_text(timeline) if fmt in (Format.table, Format.csv) else timeline, fmt,
               columns=HISTORY_COLUMNS if fmt in (Format.table, Format.csv) else None)
    else:
        rows = [row for row in r.state.broker_rows() if broker is None or row["broker_name"] == broker]
        if broker is not None and not rows:
            typer.echo(f"Note: no broker set {broker} in the state", err=True)
        if fmt in (Format.table, Format.csv):
            rows = list(_brokers_text(rows))
        render(rows, fmt, columns=STATE_COLUMNS if fmt == Format.table else None)
    for index, note in r.notes[:MAX_NOTES]:
        typer.echo(f"Note: index {index}: {note}" if index >= 0 else f"Note: {note}", err=True)
    if len(r.notes) > MAX_NOTES:
        more = r.notes[MAX_NOTES:]
        typer.echo(f"Note: {plural(len(more), 'more entry', 'more entries')} RocketMQ ignored or could not read "
                   f"(index {more[0][0]}..{more[-1][0]}): 'controller events' shows each", err=True)
    if r.stop is not None:
        typer.echo(f"Note: {r.stop_text}", err=True)
    if r.first_index is None:
        typer.echo(f"Note: {node}: no entries{' up to that index' if at_index is not None else ''}", err=True)
    elif r.first_index != 0:
        typer.echo(f"Note: {node}: the log starts at index {r.first_index}, not 0 (its head files are gone): the "
                   "controller cannot rebuild its state from it, and this one lacks what those entries did", err=True)
    committed = read_checkpoint(node).committed_index
    if committed is not None and r.last_index is not None and r.last_index > committed:
        typer.echo(f"Note: entries after index {committed} (the checkpoint's committed index, which DLedger writes "
                   "now and then) may not be committed: the controller applies committed entries only", err=True)
    if at_index is not None and r.stop is None and r.last_index is not None and r.last_index < at_index:
        typer.echo(f"Note: the log ends at index {r.last_index}, before {at_index}", err=True)
    if r.last_index is not None:
        typer.echo(f"{node}: {plural(len(r.state.broker_rows()), 'broker set')} after index {r.last_index}"
                   + (", where the controller stops" if r.stop is not None else ""), err=True)
    if broker is not None and not (timeline if history else rows):
        raise typer.Exit(1)  # (nothing matched --broker: exit 1, as grep does)


@app.command("check")
def check_cmd(
    dir: DirArg,
    broker_store: Annotated[list[str], typer.Option("--broker-store", metavar="NAME=DIR", help="A broker set's name "
                                                    "and one of its brokers' store root (storePathRootDir, holding "
                                                    "epochFileCheckpoint), or that file itself (storePathEpochFile). "
                                                    "Repeat for every broker to check.",
                                                    show_default=False)],
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Check each broker's epochFileCheckpoint (the master epochs whose data it holds) against the master epochs
    the controller's log gave that broker set: an epoch the controller never reached (its state was lost or
    replaced), one in which it elected no master, epochs out of order, an unreadable file. A log that does not start
    at index 0 (its head files were deleted), and an entry the controller's apply stops at, are findings of their
    own. One row per finding; exit 1 when there is any."""
    pairs = []
    for spec in broker_store:
        name, sep, root = spec.partition("=")
        if not sep or not name or not root:
            raise typer.BadParameter(f"{spec!r} is not NAME=DIR", param_hint="--broker-store")
        if not os.path.exists(root):
            raise typer.BadParameter(f"{root}: no such file or directory", param_hint="--broker-store")
        pairs.append((name, root))
    sizes = _sizes(data_file_size, index_file_size)
    with errors_as_exit():
        node = _node_dir(dir, self_id, sizes)
        findings = check(node, pairs, **sizes)
    if findings or fmt != Format.table:
        render(findings, fmt, columns=FINDING_COLUMNS if fmt in (Format.table, Format.csv) else None)
    typer.echo(f"{node}: {plural(len(pairs), 'broker store')} checked: {plural(len(findings), 'finding')}", err=True)
    if findings:
        raise typer.Exit(1)

