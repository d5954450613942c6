"""Options and helpers shared by the command groups: --format, sizes, errors, progress."""

from __future__ import annotations

import functools
import inspect
import re
import sys
import typing
from contextlib import contextmanager
from enum import Enum
from typing import Annotated, Iterator, Optional

import typer

from cluster.net.tls import Tls, TlsError, TlsFiles
from cluster.node.launcher import DEFAULT_BASE_DIR, LauncherError, read_record
from cluster.raft.config import ConfigError, flag, group_problem, parse_peers
from store.errors import StoreError

from .basics import fail
from .loglines import log
from .render import Format


def check_group(value: str | None) -> str | None:
    """--group: a usage error when it cannot name a group (empty, spaces, control characters)."""
    problem = None if value is None else group_problem(value)
    if problem is not None:
        raise typer.BadParameter(f"{value!r}: {problem}")
    return value


def check_peers(value: str | None) -> str | None:
    """--peers: a usage error unless it parses (unique ids and addresses, well-formed hosts)."""
    if value is not None:
        try:
            parse_peers(value)
        except ConfigError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


# options many commands share
GroupOpt = Annotated[str, typer.Option("--group", "-g", callback=check_group, help="Raft group name (DLedger's "
                                                                                     "group).")]
# a command talking to a group: the recorded cluster's group unless given
ClientGroupOpt = Annotated[Optional[str], typer.Option(
    "--group", "-g", callback=check_group, show_default=False,
    help="Raft group name (DLedger's group); default: the group of the cluster recorded in --base-dir, else "
         "'default'.")]
PeersOpt = Annotated[Optional[str], typer.Option(
    "--peers", "-p", callback=check_peers, help="Peers, each ID-HOST:PORT, with ';' between them (default: the cluster "
                                                 "recorded in --base-dir by 'cluster up').")]
BaseDirOpt = Annotated[str, typer.Option("--base-dir", envvar="DLEDGER_STORE", help="Base directory of a local "
                                         "cluster (its stores, logs and cluster.json).")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for an answer.")]
# retention (cluster/raft/retention.py), with DLedger's defaults and names
ReservedOpt = Annotated[float, typer.Option(flag("file_reserved_hours"), min=0.0001, help="Delete data files "
                                            "last written longer ago than this, hours (DLedger's "
                                            "fileReservedHours).")]
DeleteWhenOpt = Annotated[str, typer.Option(flag("delete_when"), help="Hours of the day when expired files are deleted, "
                                            "'04' or '03;04' (DLedger's deleteWhen).")]
RatioCheckOpt = Annotated[float, typer.Option(flag("disk_ratio_check"), min=0, max=1, metavar="RATIO", help="Disk usage above which expired "
                                              "files are deleted at any hour (the check ratio of DLedger's "
                                              "clean-space service).")]
RatioForceOpt = Annotated[float, typer.Option(flag("disk_ratio_force"), min=0, max=1, metavar="RATIO", help="Disk usage above which the "
                                              "oldest files are deleted whatever their age, even ones a live "
                                              "follower still needs (the force ratio of DLedger's clean-space "
                                              "service).")]
RatioFullOpt = Annotated[float, typer.Option(flag("disk_full_ratio"), min=0, max=1, metavar="RATIO", help="Disk usage above which appends "
                                             "are refused with DISK_FULL (diskFullRatio).")]

FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format: table, json, jsonl or csv.",
                                           case_sensitive=False)]

_SIZE = re.compile(r"^\s*([0-9]+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE | re.ASCII)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text, *, zero: bool = False) -> int | None:
    """'65536', '64k', '64KiB', '1g', '1GiB' -> bytes (binary units); 0 only with ``zero``.
    A whole number (a config file's ``data-file-size = 1048576``) is taken as bytes; any
    other value (true, 1.5, a date) is refused, as is a negative one."""
    if text is None:
        return text
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif isinstance(text, str) and _SIZE.match(text):
        m = _SIZE.match(text)
        value = int(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise typer.BadParameter(f"{text!r} is not a size (examples: 65536, 64KiB, 1GiB)")
    if value < 0 or (value == 0 and not zero):
        raise typer.BadParameter(f"size must be {'0 or more' if zero else 'positive'}, not {value}")
    return value


_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(s|m|h|d|w)?\s*$", re.IGNORECASE | re.ASCII)
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text) -> float | None:
    """'90s', '30m', '72h', '3d', '1w', or plain seconds -> seconds."""
    if text is None or isinstance(text, (int, float)):
        return text
    m = _DURATION.match(text)
    if not m:
        raise typer.BadParameter(f"{text!r} is not a duration (examples: 90s, 30m, 72h, 3d)")
    return float(m.group(1)) * _DURATION_UNITS[(m.group(2) or "s").lower()]


def parse_size_or_zero(text) -> int | None:
    return parse_size(text, zero=True)


DataSizeOpt = Annotated[int | None, typer.Option(flag("data_file_size"), parser=parse_size, metavar="SIZE", help="Data file size (default: detected from "
                                                 "the files, else 1GiB). Accepts 65536, 64KiB, 1GiB.")]
IndexSizeOpt = Annotated[int | None, typer.Option(flag("index_file_size"), parser=parse_size, metavar="SIZE", help="Index file size (default: detected, "
                                                  "else 160MiB = 32 x 5Mi).")]
SnapshotKeepOpt = Annotated[int | None, typer.Option(flag("snapshot_keep_entries"), min=-1, help="With --state-machine: after each snapshot, delete the log it covers "
    "but for this many entries before it (default 0, as DLedger keeps none: the man page names its setting); a leader "
    "keeps what live followers still need; -1 leaves the log to the retention rules.")]
PushQuotaOpt = Annotated[int | None, typer.Option(flag("peer_push_quota"), parser=parse_size, metavar="SIZE", help="Bytes per second a leader pushes to a follower "
    "more than 300MiB behind, and the rate at which it sends any follower a snapshot (DLedger's peerPushQuota; "
    "default 20MiB).")]
DropBehindOpt = Annotated[int | None, typer.Option(flag("drop_behind"), parser=parse_size_or_zero, metavar="SIZE",
    help="Flushed data further than SIZE behind the log's end leaves the page cache (default 256MiB; 0 leaves it to "
         "the kernel, as DLedger does).")]
SelfIdOpt = Annotated[str | None, typer.Option("--self-id", help="Node id when DIR is a base directory holding "
                                               "several dledger-<id> directories.")]


TlsCertOpt = Annotated[str | None, typer.Option("--tls-cert", envvar="DLEDGERCTL_TLS_CERT", metavar="PEM",
                                                help="Certificate for mutual TLS (with --tls-key and --tls-ca; "
                                                     "env DLEDGERCTL_TLS_CERT). Plain TCP without.")]
TlsKeyOpt = Annotated[str | None, typer.Option("--tls-key", envvar="DLEDGERCTL_TLS_KEY", metavar="PEM",
                                               help="Its private key (env DLEDGERCTL_TLS_KEY).")]
TlsCaOpt = Annotated[str | None, typer.Option("--tls-ca", envvar="DLEDGERCTL_TLS_CA", metavar="PEM",
                                              help="CA certificate(s) the other side's certificate must be signed by "
                                                   "(env DLEDGERCTL_TLS_CA).")]
TlsCrlOpt = Annotated[str | None, typer.Option("--tls-crl", envvar="DLEDGERCTL_TLS_CRL", metavar="PEM",
                                               help="Revoked certificates: a CRL signed by the CA (as 'certs init' "
                                                    "and 'certs revoke' keep it); connections presenting one are "
                                                    "refused. Read again on SIGHUP (env DLEDGERCTL_TLS_CRL).")]

# The TLS a client command was given (tls_options), for the client it makes (clients.target:
# a cluster found through its record uses the record's operator certificate when none is given).
_client_tls: dict = {"files": None}


def tls_options(fn):
    """Add --tls-cert/--tls-key/--tls-ca (and their DLEDGERCTL_TLS_* variables) to a client
    command; the files are checked here and used by every client the command makes."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)  # (the module's annotations may be strings)
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()]
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ann)
             for name, ann in (("tls_cert", TlsCertOpt), ("tls_key", TlsKeyOpt), ("tls_ca", TlsCaOpt))]

    @functools.wraps(fn)
    def wrapper(*args, tls_cert=None, tls_key=None, tls_ca=None, **kwargs):
        try:
            files = TlsFiles.resolve(tls_cert, tls_key, tls_ca)
        except TlsError as exc:
            raise fail(str(exc), 2) from None
        _client_tls.update(files=files)
        return fn(*args, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=[*params, *extra])
    wrapper.__annotations__ = {**hints, **{p.name: p.annotation for p in extra}}
    return wrapper


def client_tls():
    """The Tls (cluster/net/tls.py) for this command's clients, or None for plain TCP; a
    TlsError becomes the one-line error."""
    files = _client_tls["files"]
    if files is None:
        return None
    try:
        return Tls(files)
    except TlsError as exc:
        raise fail(str(exc)) from None


class Consistency(str, Enum):
    linearizable = "linearizable"
    serializable = "serializable"


ConsistencyOpt = Annotated[Consistency | None, typer.Option(
    "--consistency", case_sensitive=False, show_default=False,
    help="linearizable (the default): answered once the leader has confirmed with a majority that it still leads, "
         "so the read sees every write acknowledged before it began; serializable: the asked node's own state at "
         "once, which a deposed leader or a lagging follower may have behind (the default with --node).")]


def read_consistency(given: Consistency | None, node: str | None) -> str:
    """What a read asks for: as given, else linearizable from the leader, serializable from --node."""
    if given is not None:
        return given.value
    return Consistency.serializable.value if node is not None else Consistency.linearizable.value


class BodyFormat(str, Enum):
    none = "none"
    hex = "hex"
    utf8 = "utf8"
    base64 = "base64"


MAX_BODY_BOUND = 1 << 31  # 2GiB: past any maxMessageSize (a Java int) and what one bytes object should hold


def parse_max_body(text) -> int | None:
    """--max-body: a size of at most 2GiB, refused at parse time (a larger one reached the
    inflaters as a length C cannot take)."""
    value = parse_size(text)
    if value is not None and value > MAX_BODY_BOUND:
        raise typer.BadParameter(f"{text!r} is more than 2GiB, past any body RocketMQ stores (maxMessageSize is a "
                                 "Java int)")
    return value


MaxBodyOpt = Annotated[Optional[int], typer.Option(
    "--max-body", parser=parse_max_body, metavar="SIZE", help="Inflate a compressed RocketMQ body to at most this "
    "many bytes (default 4MiB, RocketMQ's maxMessageSize; at most 2GiB); past it the body is a note ('inflates past "
    "N bytes'), never memory. Accepts 65536, 64KiB, 1GiB.")]


def say(text: str) -> None:
    """A line for the operator while a command works (waiting, a step done), on stderr at once."""
    typer.echo(text, err=True)


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 entry', '2 entries'."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


@contextmanager
def errors_as_exit() -> Iterator[None]:
    """Turn the library's errors into one error line and exit code 1."""
    try:
        yield
    except (typer.Exit, BrokenPipeError):  # (a reader that went away is no error: see quiet_closed_stdout)
        raise
    except StoreError as exc:
        log.debug("store error", exc_info=True)
        raise fail(str(exc)) from None
    except OSError as exc:
        log.debug("os error", exc_info=True)
        raise fail(f"{exc.filename + ': ' if getattr(exc, 'filename', None) else ''}{exc.strerror or exc}") from None


class _Advance:
    """What a long job calls as it goes: ``advance(n)`` for n more bytes done, and
    ``advance.step(text)`` when it moves on to a step the bytes do not measure (the bar then
    says so instead of standing still at its last figure). Without a terminal, both do nothing."""

    def __init__(self, prog=None, task=None) -> None:
        self._prog, self._task = prog, task

    def __call__(self, n: int) -> None:
        if self._prog is not None:
            self._prog.advance(self._task, n)

    def step(self, text: str) -> None:
        if self._prog is not None:
            self._prog.update(self._task, description=text)


@contextmanager
def progress_bar(description: str, total: int) -> Iterator[_Advance]:
    """A rich progress bar on a terminal; a no-op callback when stderr is not one."""
    if not sys.stderr.isatty() or total <= 0:
        yield _Advance()
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn
    from rich.console import Console

    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as prog:
        yield _Advance(prog, prog.add_task(description, total=total))


def complete_members(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a member id: the members of ``--peers`` when given, else of the
    cluster recorded in ``--base-dir`` (or the default one); none when neither says."""
    params = ctx.params if ctx is not None else {}
    try:
        if params.get("peers"):
            ids = list(parse_peers(params["peers"]))
        else:
            rec = read_record(params.get("base_dir") or DEFAULT_BASE_DIR)
            ids = [n["id"] for n in rec["nodes"]] if rec else []
    except (ConfigError, LauncherError, OSError, KeyError, TypeError):
        return []
    return [i for i in ids if i.startswith(incomplete)]

