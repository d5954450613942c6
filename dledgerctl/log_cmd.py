"""The top-level client commands ``append`` and ``get``: thin wrappers over
cluster/net/client.py (``cluster ...`` is in cluster_cmd.py)."""

from __future__ import annotations

import os
import sys
from enum import Enum
from typing import Annotated, Iterator, Optional

import typer

from cluster.net.answers import EntryRow
from cluster.net.client import ClientError
from cluster.node.launcher import DEFAULT_BASE_DIR

from . import clients
from .common import (BaseDirOpt, BodyFormat, ClientGroupOpt, ConsistencyOpt, FormatOpt, MaxBodyOpt, PeersOpt,
                     TimeoutOpt, complete_members, fail, plural, read_consistency, tls_options)
from .ops import logio
from .ops.logio import AppendRun
from .ops.targets import row
from .render import Format, RowStream


def _read_bodies(data: list[str] | None, file: str | None, lines: bool) -> Iterator[bytes]:
    """The entries to append, read as they are used: with ``--lines`` a line at a time (a
    producer piping lines in sees them committed as it goes). A file that cannot be opened
    is the usage-time error; one that fails later ends the append like any failure."""
    sources = sum(x is not None and x != [] for x in (data, file))
    if sources != 1:
        raise fail("give exactly one of --data/-d or --file (use --file - for standard input)", 2)
    if data:
        if lines:
            raise fail("--lines splits a --file into entries; with --data/-d every -d is one entry already", 2)
        return iter([d.encode() for d in data])
    try:
        fh = sys.stdin.buffer if file == "-" else open(file, "rb")
    except OSError as exc:
        raise fail(f"{file}: {exc.strerror}") from None
    if not lines:
        try:
            with fh:
                return iter([fh.read()])
        except OSError as exc:
            raise fail(f"{file}: {exc.strerror}") from None

    def each_line() -> Iterator[bytes]:
        with fh:
            for line in fh:  # (bytes.splitlines' line ends: \n, \r\n and \r)
                yield from line.splitlines() or [b""]
    return each_line()


APPEND_COLUMNS = ["index", "term", "pos", "size", "leader"]


@tls_options
def append_cmd(
    data: Annotated[Optional[list[str]], typer.Option("--data", "-d", help="An entry body (repeat for several).")] = None,
    file: Annotated[Optional[str], typer.Option("--file", help="Read the body from a file ('-': standard input).")] = None,
    lines: Annotated[bool, typer.Option("--lines", help="With --file: each line is one entry, read as it comes "
                                                        "and sent once --batch lines arrived or the input ended "
                                                        "(--batch 1: each line as it arrives).")] = False,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Entries per APPEND request.")] = 64,
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 5.0, fmt: FormatOpt = Format.table,
) -> None:
    """Append entries on the leader (following NOT_LEADER), a batch at a time; prints index, term and pos of each
    entry as its batch commits. Stopped early (a failure, Ctrl-C), it says on stderr how many committed, at which
    indexes, and where to resume."""
    bodies = _read_bodies(data, file, lines)
    found = clients.target(peers, base_dir, group, timeout)
    out = RowStream(Format(fmt.value), APPEND_COLUMNS, live=True)
    run = AppendRun("line" if lines else "entry")
    error, code = None, 1
    batches = logio.append(found, bodies, batch, run)
    try:
        for rows in batches:
            out.write([row(r) for r in rows])
    except ClientError as exc:  # (an AppendError too)
        error = str(exc)
    except OSError as exc:  # (the input failed half-way; or standard output went away)
        error = f"{file}: {exc.strerror}" if not isinstance(exc, BrokenPipeError) else "standard output closed"
        run.unknown = 0 if not isinstance(exc, BrokenPipeError) else run.unknown
    except KeyboardInterrupt:
        error, code = None, 130
    finally:
        batches.close()
    try:
        out.close()
    except BrokenPipeError:
        _quiet_stdout()
    if code == 130 or error is not None:
        done = fail(error) if error is not None else typer.Exit(code)  # (the Error line first)
        if run.committed or code == 130:  # (where a rerun resumes; nothing committed: the error says it all)
            typer.echo(f"Note: {run.summary()}", err=True)
        raise done


class Decode(str, Enum):
    """What ``get --decode`` reads an entry's body as."""

    none = "none"
    rocketmq = "rocketmq"
    rocketmq_controller = "rocketmq-controller"


class GetFormat(str, Enum):
    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"
    raw = "raw"


class Delimiter(str, Enum):
    newline = "newline"
    nul = "nul"
    length = "length"


class RawBodies:
    """``get --format raw``: each body's bytes to standard output, delimited, written a page
    at a time (the count of what was written, as RowStream keeps it)."""

    def __init__(self, delimiter: Delimiter) -> None:
        self.delimiter, self.count = delimiter, 0
        self.out = sys.stdout.buffer

    def write(self, bodies: list[bytes]) -> None:
        if self.delimiter == Delimiter.length:
            chunk = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
        else:
            sep = b"\n" if self.delimiter == Delimiter.newline else b"\0"
            chunk = sep.join(bodies) + sep if bodies else b""
        self.out.write(chunk)
        self.out.flush()
        self.count += len(bodies)

    def close(self) -> None:
        self.out.flush()


@tls_options
def get_cmd(
    index: Annotated[Optional[int], typer.Option("--index", "-i", min=0, help="First entry index (with --follow, "
                                                 "default: the next entry to commit).")] = None,
    count: Annotated[Optional[int], typer.Option("--count", "-c", min=1, help="How many entries (default 1; with "
                                                 "--follow, no limit).")] = None,
    to_index: Annotated[Optional[int], typer.Option("--to-index", min=0, help="Last entry index, instead of "
                                                    "--count.")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep printing entries as they commit, like tail -f, "
                                                          "through leader changes, until Ctrl-C or --count/--to-index "
                                                          "is reached.")] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.01, help="With --follow: seconds between polls "
                                            "while no new entry commits.")] = 0.2,
    body: Annotated[Optional[BodyFormat], typer.Option("--body", help="Show bodies as utf8, hex, base64 or none "
                                                       "(default utf8; in a table of --decode rocketmq, a body "
                                                       "that is not text as <binary, N bytes>).",
                                                       case_sensitive=False, show_default=False)] = None,
    decode: Annotated[Decode, typer.Option("--decode", help="Read each body as: none (bytes), or rocketmq (a "
                                                            "RocketMQ message: topic, queue, msg id, tags, keys, "
                                                            "properties; its body uncompressed), or "
                                                            "rocketmq-controller (a RocketMQ 5 controller's event: "
                                                            "its type, broker set and fields).",
                                           case_sensitive=False)] = Decode.none,
    max_body: MaxBodyOpt = None,
    consistency: ConsistencyOpt = None,
    node: Annotated[Optional[str], typer.Option("--node", help="Read from this member instead of the leader "
                                                "(serializable unless --consistency linearizable).",
                                                autocompletion=complete_members)] = None,
    delimiter: Annotated[Optional[Delimiter], typer.Option("--delimiter", help="With --format raw (only): after each "
                                                           "body a newline (the default), a NUL byte, or none but a "
                                                           "4-byte big-endian length before it.",
                                                           case_sensitive=False, show_default=False)] = None,
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 5.0,
    fmt: Annotated[GetFormat, typer.Option("--format", "-f", help="Output format: table, json, jsonl, csv, or raw (the "
                                           "bodies only, as bytes, for piping into other tools: see --delimiter).",
                                           case_sensitive=False)] = GetFormat.table,
) -> None:
    """Read committed entries from the leader: exactly --count (or up to --to-index), paging through a node's
    per-answer limit; fewer only when the log is not committed that far, which is said on stderr. Linearizable by
    default: an entry committed before the command began is there."""
    import base64

    if count is not None and to_index is not None:
        raise fail("give --count or --to-index, not both", 2)
    if index is None and not follow:
        raise fail("give --index/-i, the first entry to read (or --follow for entries as they commit)", 2)
    if to_index is not None and index is not None and to_index < index:
        raise fail(f"--to-index {to_index} is before --index {index}", 2)
    if fmt == GetFormat.raw and decode != Decode.none:
        raise fail("--format raw writes the bodies as they are: no --decode", 2)
    if max_body is not None and decode != Decode.rocketmq:
        raise fail("--max-body bounds the RocketMQ bodies --decode rocketmq inflates: add --decode rocketmq, or drop "
                   "--max-body", 2)
    if delimiter is not None and fmt != GetFormat.raw:
        raise fail(f"--delimiter {delimiter.value} separates the bodies of --format raw only: add -f raw, or drop "
                   "--delimiter", 2)
    if follow and fmt == GetFormat.json and count is None and to_index is None:
        raise fail("--follow without --count or --to-index never ends: use --format jsonl (one line per entry)", 2)
    shows = {"utf8": lambda b: b.decode("utf-8", "replace"), "hex": bytes.hex,
             "base64": lambda b: base64.b64encode(b).decode(), "none": None}
    show = shows[(body or BodyFormat.utf8).value]
    if body is None and fmt == GetFormat.table and decode == Decode.rocketmq:
        show = _text_or_size  # (not asked for: a table of messages shows text, and the size of what is not)
    columns = ["index", "term", "pos", "size", "magic"] + ([] if show is None else ["body"])
    if decode != Decode.none:  # (the decoders load only when asked for: log_decode.py)
        from . import log_decode
    if decode == Decode.rocketmq:
        columns = ["index", "term", "pos", *log_decode.MESSAGE_COLUMNS] + ([] if show is None else ["body"]) + ["note"]
    if decode == Decode.rocketmq_controller:
        columns = ["index", "term", "pos", *log_decode.CONTROLLER_COLUMNS, "event_note"] + (
            [] if body is None else ["body"])
    found = clients.target(peers, base_dir, group, timeout)
    if node is not None and node not in found.peers:
        raise fail(f"--node {node!r} is not a member ({', '.join(found.peers)})", 2)
    out = RawBodies(delimiter or Delimiter.newline) if fmt == GetFormat.raw else RowStream(Format(fmt.value), columns, live=follow)
    reading = logio.Reading(found, index, to_index, count, follow=follow, interval=interval,
                            consistency=read_consistency(consistency, node), node=node,
                            on_wait=lambda why: typer.echo(f"Note: {why}", err=True))

    def rows(page: list[EntryRow]) -> list:
        if fmt == GetFormat.raw:
            return [e.body for e in page]
        if decode == Decode.rocketmq:
            return [log_decode.message_row(e, show, fmt, max_body or log_decode.MAX_MESSAGE_SIZE) for e in page]
        if decode == Decode.rocketmq_controller:
            return [{**log_decode.controller_row(e, fmt),
                     **({} if body is None or show is None else {"body": show(e.body)})} for e in page]
        if show is None:
            return [{k: getattr(e, k) for k in columns} for e in page]
        return [{"index": e.index, "term": e.term, "pos": e.pos, "size": e.size, "magic": e.magic,
                 "body": show(e.body)} for e in page]

    try:
        with clients.failures():
            for page in reading.pages():
                out.write(rows(page))
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        _quiet_stdout()
        return
    out.close()
    first, last = reading.first, reading.last
    if last is not None and out.count < last - first + 1:
        asked = last - first + 1
        typer.echo(f"Note: {plural(out.count, 'entry', 'entries')} of {asked} asked for: the log is committed up "
                   f"to index {first + out.count - 1}", err=True)


def _text_or_size(body: bytes) -> str:
    """A message body for a table when no --body was asked for: as text when it is UTF-8
    without NUL bytes, else ``<binary, N bytes>`` (not a line of escapes)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"<binary, {len(body)} bytes>"
    return f"<binary, {len(body)} bytes>" if "\x00" in text else text


def _quiet_stdout() -> None:
    """After a closed pipe (``get --follow | head``): send what is left of stdout nowhere, so
    the interpreter's final flush does not complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
