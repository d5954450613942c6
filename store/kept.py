"""Entries a truncation cut, kept in files of their own (``node start --keep-truncated DIR``,
``store truncate``): nothing a cut removes is thrown away unseen.

Layout: one file per truncation, ``truncated-<first>-<last>-<UTC time>.entries``, holding
the cut entries back to back in DLedger's entry format (format.py: header and body, exactly
the bytes the log held, recorded pos included; no BLANK padding, no index). ``store
inspect-data FILE`` lists such a file and ``mq salvage`` reads the messages in it.

Contracts:
- A file appears whole or not at all: written as ``.part``, fsynced, then renamed; older
  files are dropped for the bound only after that write succeeded.
- :class:`Keeper` writes before the store cuts (the store calls it from truncate/reset_to);
  a keep that fails raises StoreIOError and the cut does not happen.
- Bounded: the files in DIR together stay within ``max_bytes``; the oldest go first (and
  each removal is said). A cut larger than the bound keeps its first entries up to it, and
  says how many it could not keep; so does one whose entries stop being readable (damage:
  the cut that removes it must not be refused for it).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from typing import Callable, Iterable, Iterator

from .errors import StoreCorruptError, StoreError, StoreIOError
from .format import ENTRY_MAGICS, HEADER_SIZE, body_crc, chain_crc, crc_recorded, decode_header
from .regular import UnreadableFile, file_kind

KEPT_RE = re.compile(r"^truncated-(\d+)-(\d+)-(\d{8}T\d{6}(?:\.\d+)?Z?|\d{14})(?:-\d+)?\.entries$")
DEFAULT_KEEP_BYTES = 1 << 30
KEEP_ALL = 1 << 62  # a bound never reached: no kept file is ever dropped for room
KEPT_IN = "kept in "  # how a follower's answer to a repair names the file it kept (cluster/node)


def kept_name(first: int, last: int, when: float) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(when)) + f".{int(when * 1000) % 1000:03d}Z"
    return f"truncated-{first}-{last}-{stamp}.entries"


def write_kept(path: str, chunks) -> int:
    """Write ``chunks`` (encoded entries) to ``path`` whole or not at all (through
    ``path.part``, which must not exist: one that does is left alone and StoreIOError says
    so); returns the bytes."""
    part = path + ".part"
    total = 0
    try:
        fh = open(part, "xb")
    except FileExistsError:
        # (not ours: another writer's, or one a crash left; removing it is its owner's call)
        raise StoreIOError(f"cannot keep the cut entries in {path}: {part} exists (another command writing it, or "
                           "one interrupted: remove it if neither)") from None
    except OSError as exc:
        raise StoreIOError(f"cannot keep the cut entries in {path}: {exc.strerror or exc}") from exc
    try:
        with fh:
            for raw in chunks:
                fh.write(raw)
                total += len(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(part, path)
        _sync_dir(os.path.dirname(path) or ".")
    except BaseException as exc:
        if os.path.lexists(part):  # (ours: created above)
            try:
                os.unlink(part)
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise StoreIOError(f"cannot keep the cut entries in {path}: {exc.strerror or exc}") from exc
        raise
    return total


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def kept_files(directory: str) -> list[tuple[str, int]]:
    """(path, bytes) of the kept files in ``directory``, oldest first (by time written)."""
    out = []
    for name in os.listdir(directory):
        if KEPT_RE.match(name):
            p = os.path.join(directory, name)
            try:
                st = os.stat(p)
            except OSError:
                continue
            out.append((st.st_mtime_ns, name, p, st.st_size))
    return [(p, size) for _t, _n, p, size in sorted(out)]


class Keeper:
    """Keeps what a store is about to cut in ``directory`` (see the module's docstring).
    ``say(text, fields)`` gets one line per kept file and per file dropped for the bound."""

    def __init__(self, directory: str, max_bytes: int = DEFAULT_KEEP_BYTES,
                 say: Callable[[str, dict], None] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.say = say or (lambda text, fields: None)
        self.clock = clock

    def __call__(self, store, first: int, last: int) -> str | None:
        """Write entries ``first..last`` of ``store`` to a new file; its path (None when the
        bound leaves room for none of them)."""
        return self.keep(first, last, ((i, store.get_bytes(i)) for i in range(first, last + 1)))

    def keep(self, first: int, last: int | None, entries: Iterable[tuple[int, bytes]],
             what: str = "truncation") -> str | None:
        """Write ``entries`` ((index, encoded entry), consecutive from ``first``, up to
        ``last``; None: as many as they are) to a new file; its path (None when none of them
        is kept: the bound, or the first unreadable). An entry that cannot be read (StoreError
        but StoreIOError, raised by the iterator) ends the file there, said; so does the
        bound. ``what`` names the cut in what is said."""
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise StoreIOError(f"--keep-truncated {self.directory}: {exc.strerror or exc}") from exc
        # Streamed to a hidden .part (a cut may be large): the entries are read and written one
        # at a time, and older kept files are dropped for the bound only once this one is
        # safely on disk, so a keep that fails (ENOSPC, EIO) has removed nothing.
        part = os.path.join(self.directory, f".keeping-{first}-{os.getpid()}.part")
        size, upto, why = 0, first - 1, None  # why: what ended the file before the entries did
        it = iter(entries)
        try:
            with open(part, "wb") as fh:
                while True:
                    try:
                        _i, raw = next(it)
                    except StopIteration:
                        break
                    except StoreIOError:
                        raise
                    except StoreError as exc:  # (damage: a cut must still be able to remove it)
                        why = f"unreadable from entry {upto + 1}: {exc}"
                        break
                    if size + len(raw) > self.max_bytes:
                        why = "over --keep-truncated-bytes"
                        break
                    fh.write(raw)
                    size, upto = size + len(raw), upto + 1
                fh.flush()
                os.fsync(fh.fileno())
            if upto < first:
                os.unlink(part)
                self.say(f"{what} of entries {first}..{'' if last is None else last}: nothing kept ({why})",
                         {"event": "keep_truncated", "from_index": first, "to_index": last, "kept": 0})
                return None
            self._make_room(size)
            when = self.clock()
            path = os.path.join(self.directory, kept_name(first, upto, when))
            n = 0
            while os.path.exists(path):  # (the same range again within a millisecond)
                n += 1
                path = os.path.join(self.directory,
                                    kept_name(first, upto, when)[:-len(".entries")] + f"-{n}.entries")
            os.rename(part, path)
            _sync_dir(self.directory)
        except BaseException as exc:
            try:
                os.unlink(part)
            except OSError:
                pass
            if isinstance(exc, OSError):
                raise StoreIOError(f"cannot keep the cut entries in {self.directory}: {exc.strerror or exc}") from exc
            raise
        short = f"; entries {upto + 1}..{'' if last is None else last} not kept ({why})" if why else ""
        about = "the entries about to be cut" if what == "truncation" else f"the entries {what} is about to cut"
        self.say(f"kept {about}, {first}..{upto} ({size} bytes), in {path}{short}",
                 {"event": "keep_truncated", "from_index": first, "to_index": upto, "file": path, "bytes": size})
        return path

    def _make_room(self, size: int) -> None:
        files = kept_files(self.directory)
        total = sum(s for _p, s in files)
        for p, s in files:
            if total + size <= self.max_bytes:
                break
            try:
                os.unlink(p)
            except OSError as exc:
                self.say(f"cannot drop kept file {p} for --keep-truncated-bytes: {exc.strerror or exc}",
                         {"event": "keep_truncated_drop", "file": p})
                continue
            total -= s
            self.say(f"dropped the oldest kept file {p} ({s} bytes): --keep-truncated-bytes {self.max_bytes}",
                     {"event": "keep_truncated_drop", "file": p, "bytes": s})


def iter_kept(path: str) -> Iterator[tuple[int, "object", bytes]]:
    """(offset in the file, EntryHeader, body) of each entry of a kept file, in order, read
    an entry at a time. StoreCorruptError naming the offset when a record is not a whole
    entry; UnreadableFile (one) when ``path`` is no regular file (a FIFO is never waited on,
    a device never read: a file named like a kept one may be anything)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # (a socket)
            raise UnreadableFile(f"{path}: not a regular file (a socket or FIFO)") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile(f"{path}: not a regular file ({file_kind(st.st_mode)}): no kept entries")
        end, off = st.st_size, 0  # (what the file held when opened: a record past it is not read)
        while off < end:
            head = fh.read(min(HEADER_SIZE, end - off))
            if len(head) < HEADER_SIZE:
                raise StoreCorruptError(f"{path}: {len(head)} trailing bytes at offset {off} are not an entry")
            h = decode_header(head, 0)
            if h.magic not in ENTRY_MAGICS or h.size < HEADER_SIZE or off + h.size > end \
                    or h.body_size != h.size - HEADER_SIZE:
                raise StoreCorruptError(f"{path}: no whole entry at offset {off} (magic {h.magic}, size {h.size})")
            body = fh.read(h.body_size)
            if len(body) != h.body_size:  # (cut shorter while read)
                raise StoreCorruptError(f"{path}: no whole entry at offset {off} (the file ends inside it)")
            yield off, h, body
            off += h.size


def kept_rows(path: str, *, lo: int | None = None, hi: int | None = None, pos: int | None = None,
              render=None) -> Iterator[dict]:
    """inspect-data's rows for a kept file (``file`` is its name, ``file_offset`` the offset
    in it, ``pos`` the entry's recorded position in its log). CRCs are checked as in a data
    file: the body's, and the chain from each entry to the next one of the file."""
    name = os.path.basename(path)
    prev = None
    try:
        for off, h, body in iter_kept(path):
            status = "ok"
            if crc_recorded(h):
                if body_crc(body) != h.body_crc:
                    status = "bad-body"
                elif prev is not None and prev.index + 1 == h.index and \
                        chain_crc(prev.chain_crc, h.index, h.term, h.body_crc) != h.chain_crc:
                    status = "bad-chain"
            else:
                status = "none"
            prev = h
            if (lo is not None and h.index < lo) or (hi is not None and h.index > hi) or \
                    (pos is not None and h.pos != pos):
                continue
            row = {"kind": "entry", "file": name, "file_offset": off, "pos": h.pos, "index": h.index, "term": h.term,
                   "magic": h.magic, "size": h.size, "body_size": h.body_size, "body_crc": h.body_crc,
                   "chain_crc": h.chain_crc, "crc": status, "status": status, "note": "kept"}
            if render is not None:
                text = render(body)
                if text is not None:
                    row["body"] = text
            yield row
    except StoreCorruptError as exc:
        yield {"kind": "damage", "file": name, "file_offset": None, "pos": None, "index": None, "term": None,
               "magic": None, "size": None, "crc": None, "status": "damage", "note": str(exc)}


__all__ = ["Keeper", "KEEP_ALL", "KEPT_IN", "kept_name", "kept_files", "write_kept", "iter_kept", "kept_rows", "KEPT_RE"]
