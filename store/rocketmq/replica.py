"""One controller-mode replica's files, read offline: its commit log's extent, its epoch file
and ``.bak`` (store/rocketmq/epochs.py reads them as RocketMQ does), its identity, and what is
wrong among them (``mq epochs``; ``mq align`` compares several).

The commit log's max offset is where its last message ends (``CommitLog.recoverNormally``
walks the last files the same way: a message, a blank record closing the file, or the end);
its min offset is the first file's start (``CommitLog.getMinOffset`` once the head files
are deleted).

Findings (``Finding.code``), each with what RocketMQ then does:

- ``epoch-file-unloadable`` (error): a number Java cannot parse in the file RocketMQ reads
  last: its store does not start;
- ``epoch-file-fallback`` (warning): the main file is missing, empty or fails its count or
  CRC, and the ``.bak`` is read instead;
- ``epoch-file-broken`` (warning): a file that fails (the other one is read);
- ``no-epochs`` (note): neither file holds an epoch: at its first handshake as a slave it is a
  new replica and truncates nothing;
- ``epoch-order`` (error): an epoch or a start offset not above the one before;
- ``epoch-past-log`` (error): an epoch starting past the log's max offset (a master hands
  out data it does not have; a slave's consistent point lands past its own log);
- ``epoch-before-log`` (note): an epoch that ends before the log's min offset (its data was
  deleted; ``truncatePrefixByOffset`` drops such epochs);
- ``identity`` (warning): an identity file its decoder cannot read; ``registering`` (note):
  the ``-temp`` file is there (a registration did not finish).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field

import numpy as np

from .columns import SLOW, message_columns
from .message import NotAMessage, body_crc, decode
from .commitlog import COMMIT_LOG_DIR, log_files, walk_file
from .epochs import (BACKUP_SUFFIX, EPOCH_FILE, FILE_LIMIT, EpochEntry, EpochFileError, Identity, Span,
                     parse_epoch_file, read_epochs, read_identity, spans)
from ..errors import NotAStoreError
from ..kinds import CONTROLLER_MODE, MASTER_SLAVE, require
from ..regular import UnreadableFile, read_regular

TAKES = ("it reads a controller-mode (or master-slave) broker's store root: commitlog/, with epochFileCheckpoint "
         "beside it in controller mode")

ERROR, WARNING, NOTE = "error", "warning", "note"


@dataclass(frozen=True)
class Finding:
    severity: str
    code: str
    detail: str
    epoch: int | None = None
    offset: int | None = None


@dataclass(frozen=True)
class FileState:
    """One of the two epoch files as found: entries (None when it fails) and why it fails."""

    path: str
    exists: bool
    entries: tuple[EpochEntry, ...] | None
    problem: str = ""


@dataclass
class Replica:
    root: str
    min_offset: int  # the log's first byte (-1: no commit-log file)
    max_offset: int  # where its last message ends
    files: list[FileState]
    used: str | None  # the epoch file RocketMQ reads (None: neither gives an epoch)
    entries: list[EpochEntry]
    identity: list[Identity]
    findings: list[Finding] = field(default_factory=list)

    @property
    def spans(self) -> list[Span]:
        return spans(self.entries, self.max_offset)


def log_extent(root: str) -> tuple[int, int]:
    """(min offset, max offset) of the commit log under ``root`` (``root/commitlog`` or the
    directory itself); (-1, 0) when it holds no file. The max offset: where RocketMQ's
    recovery ends the log: the end of the last message of the last file holding one (a file
    that starts with nothing is not written yet), but before the first message of that file
    whose body fails its BODYCRC (CommitLog.checkMessageAndReturnSize with checkCRCOnRecover,
    RocketMQ's default: a message torn by a crash mid-write, or by a transfer cut mid-message,
    is not the replica's; RocketMQ 5.3.3 shown so in tests/java/test_torn_tail_java.py). Bodies
    in earlier files are not checked here (``mq check`` reports each one that fails)."""
    d = os.path.join(root, COMMIT_LOG_DIR) if os.path.isdir(os.path.join(root, COMMIT_LOG_DIR)) else root
    try:
        files = log_files(d)
    except NotAStoreError:
        return -1, 0
    later = False  # a file after this one exists (written or not)
    for start, path in reversed(files):
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if not size:
                later = True
                continue
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            at, sizes, p, end = walk_file(buf, size)
            torn = first_torn(buf, at, sizes)
        finally:
            buf.close()
        if torn is not None:
            p, end = torn, None
        blank = end is not None and end.blank
        if p == 0 and not blank:
            later = True
            continue  # (nothing written in this file yet)
        # (CommitLog.recoverNormally: a blank record moves the walk to the next file, whose start
        # is then where the log ends; with no next file the walk stops where the blank starts)
        return files[0][0], start + (size if blank and later else p)
    return files[0][0], files[0][0]


def first_torn(buf, at: list[int], sizes: list[int]) -> int | None:
    """The offset in ``buf`` of the first of the messages at ``at`` (with TOTALSIZEs
    ``sizes``) whose body fails its BODYCRC, or None when every one passes."""
    if not at:
        return None
    offsets, lengths = np.array(at, np.int64), np.array(sizes, np.int64)
    cols = message_columns(buf, offsets, lengths, True)
    for k in np.flatnonzero(~cols.crc_ok | (cols.status == SLOW)).tolist():
        if cols.status[k] != SLOW:
            return at[k]
        try:  # (one the columns leave to message.decode)
            m = decode(buf, at[k], sizes[k])
        except NotAMessage:
            return at[k]
        if body_crc(buf[m.body_at:m.body_at + m.body_size]) != m.body_crc:
            return at[k]
    return None


def _file_state(path: str) -> FileState:
    try:
        text = read_regular(path, FILE_LIMIT).decode("utf-8")
    except FileNotFoundError:
        return FileState(path, False, None)
    except (UnreadableFile, UnicodeDecodeError, OSError) as exc:
        return FileState(path, True, None, str(exc))
    try:
        return FileState(path, True, tuple(parse_epoch_file(text)))
    except EpochFileError as exc:
        return FileState(path, True, None, str(exc))


def read_replica(root: str) -> Replica:
    """A replica's store root read offline, with its findings. NotAStoreError in one line when
    ``root`` is no master-slave or controller-mode store root."""
    require(root, frozenset({MASTER_SLAVE, CONTROLLER_MODE}), TAKES)
    lo, hi = log_extent(root)
    path = os.path.join(root, EPOCH_FILE)
    files = [_file_state(path), _file_state(path + BACKUP_SUFFIX)]
    out = Replica(os.path.abspath(root), lo, hi, files, None, [], read_identity(root))
    say = out.findings.append
    try:
        got = read_epochs(root)
    except EpochFileError as exc:
        say(Finding(ERROR, "epoch-file-unloadable", str(exc)))
        got = None
    if got is not None:
        out.used, out.entries = got.source, got.entries
        for f in files:
            if f.exists and f.problem:
                say(Finding(WARNING, "epoch-file-broken", f"{f.path}: {f.problem}"))
        if got.source is not None and got.source.endswith(BACKUP_SUFFIX):
            say(Finding(WARNING, "epoch-file-fallback", f"RocketMQ reads {got.source}: the main file is "
                        + ("missing" if not files[0].exists else "broken" if files[0].problem else "empty")))
        if got.source is None:
            say(Finding(NOTE, "no-epochs", "no epoch file gives an epoch: as a slave, its first handshake takes it "
                        "for a new replica and truncates nothing"))
    prev = None
    for e in out.entries:
        if prev is not None and (e.epoch <= prev.epoch or e.start_offset <= prev.start_offset):
            say(Finding(ERROR, "epoch-order", f"epoch {e.epoch} from offset {e.start_offset} follows epoch "
                        f"{prev.epoch} from offset {prev.start_offset}", e.epoch, e.start_offset))
        if e.start_offset > hi:
            say(Finding(ERROR, "epoch-past-log", f"epoch {e.epoch} starts at offset {e.start_offset}, past the "
                        f"log's end {hi}", e.epoch, e.start_offset))
        prev = e
    for s in out.spans:
        if lo >= 0 and s.end <= lo and s.end != s.start:
            say(Finding(NOTE, "epoch-before-log", f"epoch {s.epoch} ends at offset {s.end}, before the log's first "
                        f"byte {lo} (its data was deleted)", s.epoch, s.start))
    for ident in out.identity:
        if ident.problem:
            say(Finding(WARNING, "identity", f"{ident.path}: {ident.problem}"))
        elif ident.register_check_code is not None:
            say(Finding(NOTE, "registering", f"{ident.path}: a registration as broker id {ident.broker_id} of "
                        f"{ident.broker} did not finish (the broker goes on with it at its next start)"))
    return out
