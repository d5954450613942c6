"""A master-slave broker's commit log, written: ``<root>/commitlog/<20-digit first byte>``.

What RocketMQ's ``CommitLog`` keeps (4.9.4 and 4.9.8 agree; ``DefaultAppendMessageCallback``,
``MappedFileQueue.load``):

- messages back to back in files of exactly ``mappedFileSizeCommitLog`` bytes (1 GiB by
  default; ``MappedFileQueue.load`` refuses a file of any other length, so the last file is
  full length too: a sparse tail of zeros, where recovery stops at the first zero magic);
- a file is named by the commit-log offset of its first byte (20 digits);
- a message whose bytes and 8 more do not fit in what is left of a file
  (``msgLen + END_FILE_MIN_BLANK_LENGTH > maxBlank``) goes to the next file, and what is
  left of the old one starts with a blank record: TOTALSIZE = the bytes left, MAGICCODE =
  ``BLANK_MAGIC_CODE``; recovery moves to the next file there;
- a message's PHYSICALOFFSET is its byte position in the log (``MessageDecoder.PHY_POS_POSITION``);
  nothing else of a message depends on where it is (BODYCRC covers the body only; the
  store host and the queue offset are the broker's), so the writer changes those 8 bytes only.

Rules kept here: the writer only appends, owns its directory, and leaves every file full
length when closed; a message that cannot fit in an empty file is an error
(:class:`MessageTooLarge`), never a file of another size. The reader (:func:`batches`)
walks a commit log as ``CommitLog.recoverNormally`` does (message after message, a blank
ends a file, the first record that is neither ends the log) and yields scan.py's batches,
so ``mq check`` and ``mq topics`` read both kinds of store with one set of checks.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Iterator, NamedTuple

import numpy as np

from ..errors import NotAStoreError
from ..writing import pwrite_all
from ..format import FILE_NAME_DIGITS, HEADER_SIZE, MAGIC_NORMAL, parse_file_name
from .message import MAGICS, MIN_SIZE, PHY_POS_POSITION
from .entries import Batch

try:  # the compiled copy (store/rocketmq/_placing.c), when built
    from . import _placing
except ImportError:  # pragma: no cover - a build without a C compiler
    _placing = None

COMMIT_LOG_DIR = "commitlog"  # StorePathConfigHelper / MessageStoreConfig.storePathCommitLog
MAPPED_FILE_SIZE_COMMIT_LOG = 1024 * 1024 * 1024  # MessageStoreConfig.mappedFileSizeCommitLog
BLANK_MAGIC_CODE = -875286124  # CommitLog.BLANK_MAGIC_CODE
END_FILE_MIN_BLANK_LENGTH = 4 + 4  # CommitLog.DefaultAppendMessageCallback.END_FILE_MIN_BLANK_LENGTH

BATCH = 1 << 16  # messages a batch of :func:`batches` holds at most (as a DLedger log's runs)
_BLANK = struct.Struct(">ii")
_I64 = struct.Struct(">q")


class MessageTooLarge(ValueError):
    """A message does not fit in one commit-log file (with the 8 bytes a blank may need)."""


def too_large(n: int, file_size: int) -> MessageTooLarge:
    """The error for a message of ``n`` bytes that no file of ``file_size`` bytes holds."""
    return MessageTooLarge(f"a message of {n} bytes does not fit in a commit-log file of {file_size} bytes (it "
                           f"needs {n + END_FILE_MIN_BLANK_LENGTH})")


def file_name(start: int) -> str:
    return f"{start:0{FILE_NAME_DIGITS}d}"


class CommitLogWriter:
    """Appends messages to a new commit log in ``dir`` (created; must hold no file yet), a
    batch at a time.

    ``append_many(buf, at, sizes)`` writes the messages ``buf[at[k]:at[k] + sizes[k]]`` at
    the log's end, each with its PHYSICALOFFSET set to its new position, and returns those
    positions: they follow from the sizes' running sum, broken only where a file rolls (a
    message that does not fit in what is left, with the 8 bytes a blank needs, starts the
    next file, and the blank record fills the rest of the old one); the bytes go out a
    chunk of messages at a time (one copy each, _placing.c, and one write). ``append(message)``
    is a batch of one. ``close()`` leaves every file ``file_size`` bytes long and synced.
    ``files`` counts the files begun, ``blanks`` the blank records written."""

    CHUNK = 8 << 20  # bytes copied and written at once (more when one message is larger)

    def __init__(self, dir: str, file_size: int = MAPPED_FILE_SIZE_COMMIT_LOG, start: int = 0) -> None:
        if file_size <= END_FILE_MIN_BLANK_LENGTH:
            raise ValueError(f"a commit-log file of {file_size} bytes holds no message")
        if start % file_size:
            raise ValueError(f"the log's start {start} is not a multiple of the file size {file_size}")
        self.dir = dir
        self.file_size = file_size
        os.makedirs(dir, exist_ok=True)
        if os.listdir(dir):
            raise FileExistsError(f"{dir} is not empty")
        self.offset = start  # where the next message goes
        self.files = 0
        self.blanks = 0
        self._fd = -1
        self._path = ""  # the current file's (errors name it)
        self._file_start = start
        self._out = bytearray()

    @property
    def left(self) -> int:
        """Bytes left in the current file (0 before the first file is begun)."""
        return 0 if self._fd < 0 else self._file_start + self.file_size - self.offset

    def append(self, message) -> int:
        """Write ``message`` (one message's bytes, TOTALSIZE long) and return its offset."""
        return int(self.append_many(message, np.zeros(1, np.int64), np.array([len(message)], np.int64))[0])

    def append_many(self, buf, at: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Write the messages ``buf[at[k]:at[k] + sizes[k]]`` in order; their offsets (int64).
        MessageTooLarge (nothing written) when one cannot fit in an empty file."""
        at = np.ascontiguousarray(at, np.int64)
        sizes = np.ascontiguousarray(sizes, np.int64)
        n = len(sizes)
        new = np.empty(n, np.int64)
        if not n:
            return new
        big = np.flatnonzero(sizes + END_FILE_MIN_BLANK_LENGTH > self.file_size)
        if len(big):
            raise too_large(int(sizes[big[0]]), self.file_size)
        ends = np.cumsum(sizes)  # (each message's end, counted from the batch's start)
        i = 0
        while i < n:
            if self._fd < 0 or int(sizes[i]) + END_FILE_MIN_BLANK_LENGTH > self.left:
                self._next_file()
            base = int(ends[i - 1]) if i else 0
            # the messages from i on that fit in this file: end + 8 within what is left
            j = int(np.searchsorted(ends, base + self.left - END_FILE_MIN_BLANK_LENGTH, "right"))
            new[i:j] = ends[i:j] - sizes[i:j] - base + self.offset
            self._write(buf, at[i:j], sizes[i:j], new[i:j])
            self.offset += int(ends[j - 1]) - base
            i = j
        return new

    def close(self) -> None:
        if self._fd >= 0:
            self._finish()
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- internals ---------------------------------------------------------------------------

    def _write(self, buf, at: np.ndarray, sizes: np.ndarray, new: np.ndarray) -> None:
        """Messages that lie back to back in the current file from ``new[0]`` on."""
        ends = np.cumsum(sizes)
        i = 0
        while i < len(sizes):
            base = int(ends[i - 1]) if i else 0
            j = max(i + 1, int(np.searchsorted(ends, base + self.CHUNK, "right")))
            n = int(ends[j - 1]) - base
            if len(self._out) < n:
                self._out = bytearray(max(n, self.CHUNK))
            place(buf, at[i:j], sizes[i:j], self._out, new[i:j] - new[i], new[i:j])
            pwrite_all(self._fd, memoryview(self._out)[:n], int(new[i]) - self._file_start, self._path)
            i = j

    def _next_file(self) -> None:
        if self._fd >= 0:
            left = self.left
            if left >= END_FILE_MIN_BLANK_LENGTH:
                pwrite_all(self._fd, _BLANK.pack(left, BLANK_MAGIC_CODE), self.offset - self._file_start, self._path)
                self.blanks += 1
            self.offset += left
            self._finish()
        self._file_start = self.offset
        self._path = os.path.join(self.dir, file_name(self.offset))
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.files += 1

    def _finish(self) -> None:
        fd, self._fd = self._fd, -1
        try:
            os.ftruncate(fd, self.file_size)  # full length, as MappedFileQueue.load wants
            os.fsync(fd)
        finally:
            os.close(fd)


def _place_py(buf, at: np.ndarray, sizes: np.ndarray, out, dst: np.ndarray, phy: np.ndarray) -> None:
    """_placing.place, a message at a time (without the compiled module; the tests' reference)."""
    for a, n, d, p in zip(at.tolist(), sizes.tolist(), dst.tolist(), phy.tolist()):
        if a < 0 or d < 0 or n < PHY_POS_POSITION + 8 or a + n > len(buf) or d + n > len(out):
            raise ValueError(f"a message of {n} bytes from {a} to {d} does not fit its buffers")
        out[d:d + n] = buf[a:a + n]
        _I64.pack_into(out, d + PHY_POS_POSITION, p)


place = _placing.place if _placing is not None else _place_py


def log_files(dir: str) -> list[tuple[int, str]]:
    """The commit log's files (first byte, path), in order; NotAStoreError when there is none."""
    try:
        names = os.listdir(dir)
    except OSError as exc:
        raise NotAStoreError(f"{dir}: {exc.strerror or exc}") from None
    files = sorted((start, os.path.join(dir, n)) for n in names if (start := parse_file_name(n)) is not None)
    if not files:
        raise NotAStoreError(f"{dir}: no commit-log file")
    return files


def is_empty_log(dir: str) -> bool:
    """A commit-log directory that holds no file (what a master-slave store with no message
    yet has, ``mq migrate`` of an empty log among them)."""
    try:
        return not any(parse_file_name(n) is not None for n in os.listdir(dir))
    except OSError:
        return False


class FileEnd(NamedTuple):
    """Where and why the messages of one commit-log file end (:func:`walk_file`)."""

    at: int  # the byte of the file after its last message
    blank: bool  # a blank record is there: the file was closed and the log goes on in the next one
    damage: str  # why what is there is neither a message, nor a blank, nor an unwritten tail ("" if it is)


def walk_file(buf, size: int, p: int = 0, limit: int | None = None) -> tuple[list, list, int, FileEnd | None]:
    """The messages of one commit-log file's bytes ``buf`` (``size`` long) from byte ``p``
    on, as ``CommitLog.recoverNormally`` walks them: (their offsets in the file, their
    TOTALSIZEs, the byte after the last, and how the file ends there; None when ``limit``
    messages were read first and the walk can go on from that byte)."""
    at, sizes = [], []
    while p + 8 <= size:
        if limit is not None and len(at) >= limit:
            return at, sizes, p, None
        total, magic = _BLANK.unpack_from(buf, p)
        if magic == BLANK_MAGIC_CODE:
            return at, sizes, p, FileEnd(p, True, "")
        if magic not in MAGICS or total < MIN_SIZE or p + total > size:
            why = ""
            if total or magic or any(buf[p:min(size, p + 64)]):
                why = f"TOTALSIZE {total}, MAGICCODE {magic}: not a message, nor a blank ending the file"
            return at, sizes, p, FileEnd(p, False, why)
        at.append(p)
        sizes.append(total)
        p += total
    return at, sizes, p, FileEnd(p, False, "")


def batches(dir: str, at: int | None = None) -> Iterator[Batch]:
    """Every message of the commit log in ``dir``, at most BATCH of one file at a time, as
    scan.py's batches of DLedger entries are: ``pos`` is the message's offset - 48 and ``size`` its TOTALSIZE + 48
    (as if each were an entry whose body is the message, so that the checks' pos + 48 is
    the commit-log offset), ``bsize`` its TOTALSIZE, ``index`` its ordinal in the log, and
    ``shift`` 48 (what a finding adds to ``pos - start`` for the message's byte in its
    file). A place where the log cannot be read on while later files hold data is a
    damage batch.

    With ``at``, the walk starts at that commit-log offset, in the file that holds it (as
    ``CommitLog.getMessage`` reads a message by offset, without the files before): only
    when a message starts there, which its PHYSICALOFFSET (written as its position) says;
    else nothing is yielded. The files before are not read, so ``index`` is -1 (not known)."""
    files = log_files(dir)
    ordinal, skip = 0, 0
    if at is not None:
        k = next((k for k, (start, _p) in enumerate(files) if start <= at < start + os.path.getsize(_p)), None)
        if k is None or not _message_starts(files[k][1], at - files[k][0], at):
            return
        files, ordinal, skip = files[k:], -1, at - files[k][0]
    for n, (start, path) in enumerate(files):
        name = f"{COMMIT_LOG_DIR}/{os.path.basename(path)}"
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        p, end = skip if n == 0 else 0, None
        while end is None:  # (BATCH messages at a time: a 1 GiB file may hold millions)
            offs, sizes, p, end = walk_file(buf, size, p, BATCH)
            if offs:
                pos = np.array(offs, np.int64) + start - HEADER_SIZE
                bsize = np.array(sizes, np.int64)
                k = len(offs)
                index = np.full(k, -1, np.int64) if ordinal < 0 else np.arange(ordinal, ordinal + k, dtype=np.int64)
                yield Batch(name, start, buf, np.full(k, MAGIC_NORMAL, np.int64), bsize + HEADER_SIZE, index,
                            np.zeros(k, np.int64), pos, bsize, shift=HEADER_SIZE)
                if ordinal >= 0:
                    ordinal += k
        if end.damage:
            yield Batch(name, start, buf, damage=f"commit-log damage: {end.damage}", at=start + p - HEADER_SIZE,
                        shift=HEADER_SIZE)
            return
        if not end.blank and n + 1 < len(files):
            yield Batch(name, start, buf, damage=f"the log ends at offset {p} of {os.path.basename(path)} but "
                                                 f"later files follow", at=start + p - HEADER_SIZE, shift=HEADER_SIZE)
            return


def _message_starts(path: str, p: int, offset: int) -> bool:
    """Whether a message whose PHYSICALOFFSET is ``offset`` starts at byte ``p`` of ``path``."""
    with open(path, "rb") as fh:
        fh.seek(p)
        head = fh.read(PHY_POS_POSITION + 8)
    if len(head) < PHY_POS_POSITION + 8:
        return False
    total, magic = _BLANK.unpack_from(head)
    return magic in MAGICS and total >= MIN_SIZE and _I64.unpack_from(head, PHY_POS_POSITION)[0] == offset
