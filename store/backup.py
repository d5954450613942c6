"""Backup files: a committed prefix of a group's log (and its latest state-machine snapshot)
in one file with a manifest, written offline from a stopped member's store or streamed from
a live group (dledgerctl/ops/backup.py), checked on read. Pure file work: no sockets.

Format, version 1 (all integers big-endian)::

    head      b"DLBACKUP" + u32 version                                     (12 bytes)
    chunks    entry chunks, back to back: each one a run of DLedger entries
              exactly as store/format.py encodes them (48-byte header + body),
              at the positions (``pos``) they hold in the group's log; a chunk
              holds entries whose positions follow each other (a chunk ends where
              the log rolled to its next data file, or at CHUNK_BYTES)
    snapshot  the state machine's snapshot data, when there is one (raw bytes)
    manifest  JSON (below)
    tail      u64 manifest length + u32 crc32(manifest) + b"DLBKEND\\n"      (20 bytes)

The manifest (JSON object): ``format`` ("dledgerctl-backup"), ``version`` (1), ``group``,
``members`` (the member list in force at the last entry: ``voters`` and ``learners`` in
``--peers`` form, or null when unknown), ``source`` (what it was taken from), ``created``
(UTC, ISO 8601), ``first_index``/``first_term``/``first_pos``, ``last_index``/``last_term``/
``last_chain`` (the last entry's chainCrc), ``entries``, ``entry_bytes``,
``data_file_size`` (the source's data file size, null when a live backup saw no file roll
to learn it from), ``chunks`` (each ``offset``, ``length``, ``first_index``, ``last_index``,
``first_pos``, ``sha256``) and ``snapshot`` (null, or ``index``, ``term``, ``offset``,
``length``, ``crc`` (crc32, as store/snapshot.py keeps it), ``sha256``).

The manifest is written last, so a backup streams with bounded memory (one chunk); it is
written to ``FILE.partial`` and renamed into place only once whole, and a failed backup
leaves nothing. A reader (:class:`BackupReader`) checks the head, the tail and the
manifest's fields when it opens a file, and :meth:`BackupReader.verify` checks every
chunk's digest and every entry (the one decoder, store/scan.py: framing, positions, index
continuity, term order, CRCs), naming the first bad chunk or entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator

import numpy as np

from .batch import HEADER_DTYPE, RUN_MIN, gather_headers, prefix_true, walk_sizes
from .errors import StoreCorruptError, StoreUsageError
from .filestore import FileStore
from .format import HEADER_SIZE, MAGIC_CONFIG, MIN_BLANK_LEN, decode_header
from .scan import FileScan
from .snapshot import SnapshotStore

FORMAT = "dledgerctl-backup"
VERSION = 1
HEAD_MAGIC = b"DLBACKUP"
HEAD = struct.Struct(">8sI")
TAIL_MAGIC = b"DLBKEND\n"
TAIL = struct.Struct(">QI8s")
CHUNK_BYTES = 4 << 20  # a chunk's size (one entry larger than this is a chunk of its own)
READ_BYTES = 1 << 20  # what a snapshot or a digest is read in
RUN_LIMIT = 1 << 16  # entries a run of BackupWriter.add looks at once
PARTIAL = ".partial"
MAX_MANIFEST = 256 << 20


class BackupError(StoreCorruptError):
    """A backup file that is not one, or is damaged; the message names what and where."""


@dataclass
class Chunk:
    offset: int
    length: int
    first_index: int
    last_index: int
    first_pos: int
    sha256: str

    def as_dict(self) -> dict:
        return {"offset": self.offset, "length": self.length, "first_index": self.first_index,
                "last_index": self.last_index, "first_pos": self.first_pos, "sha256": self.sha256}


@dataclass
class Manifest:
    group: str | None
    members: dict | None
    source: str
    created: str
    first_index: int
    first_term: int
    first_pos: int
    last_index: int
    last_term: int
    last_chain: int
    entries: int
    entry_bytes: int
    data_file_size: int | None
    chunks: list[Chunk] = field(default_factory=list)
    snapshot: dict | None = None

    def as_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "group": self.group, "members": self.members,
                "source": self.source, "created": self.created, "first_index": self.first_index,
                "first_term": self.first_term, "first_pos": self.first_pos, "last_index": self.last_index,
                "last_term": self.last_term, "last_chain": self.last_chain, "entries": self.entries,
                "entry_bytes": self.entry_bytes, "data_file_size": self.data_file_size,
                "chunks": [c.as_dict() for c in self.chunks], "snapshot": self.snapshot}


def members_from_config(body) -> dict | None:
    """The member list a config entry's body states ({"voters": ..., "learners": ...}, the
    peers in ``--peers`` form: cluster/raft/membership.py writes it); None when it is not one."""
    try:
        o = json.loads(bytes(body))
    except (ValueError, RecursionError):
        return None
    if not isinstance(o, dict) or not isinstance(o.get("voters"), str):
        return None
    learners = o.get("learners", "")
    return {"voters": o["voters"], "learners": learners if isinstance(learners, str) else ""}


class BackupWriter:
    """Writes one backup file: :meth:`add` encoded entries in log order, then
    :meth:`add_snapshot` (optional) and :meth:`finish`; :meth:`abort` (or an exception out
    of a ``with`` block) removes what was written. The output must not exist yet."""

    def __init__(self, path: str, *, data_file_size: int | None = None, chunk_bytes: int = CHUNK_BYTES) -> None:
        if os.path.lexists(path):
            raise StoreUsageError(f"{path} exists already: a backup is written to a new file")
        self.path = path
        self.partial = path + PARTIAL
        self.fh = open(self.partial, "xb")
        self.fh.write(HEAD.pack(HEAD_MAGIC, VERSION))
        self.offset = HEAD.size
        self.chunk_bytes = chunk_bytes
        self.data_file_size = data_file_size
        self._learn_size = data_file_size is None
        self._learned: int | None = None
        self.chunks: list[Chunk] = []
        self._buf = bytearray()
        self._chunk_first = self._chunk_pos = -1
        self.first_index = self.first_term = self.first_pos = -1
        self.last_index = self.last_term = -1
        self.last_chain = 0
        self.next_pos = -1
        self.entries = self.entry_bytes = 0
        self.members: dict | None = None  # the last config entry's member list, as added
        self.snapshot: dict | None = None
        self.done = False

    def __enter__(self) -> "BackupWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None or not self.done:
            self.abort()

    def add(self, raw) -> None:
        """Encoded entries (one or more, back to back), continuing the log added so far.
        StoreCorruptError when they do not: an index gap, a term going back, a position
        before the previous entry's end, a header that does not frame.

        Long stretches of ordinary entries (no config entry, no roll to the next data file,
        within the chunk) are checked and taken at once (:meth:`_add_run`, numpy over their
        headers); any other entry, and the first that does not pass, one at a time
        (:meth:`_add_one`), which alone says what is wrong."""
        buf = memoryview(raw)
        off, n = 0, len(buf)
        while off < n:
            took, singles = self._add_run(buf, off, n) if n - off >= RUN_MIN * HEADER_SIZE else (0, 1)
            off += took
            for _ in range(singles):  # (walked once: not walked again before each of them)
                if off >= n:
                    break
                off = self._add_one(buf, off, n)

    def _add_run(self, buf, off: int, n: int) -> tuple[int, int]:
        """(bytes, 0): the longest stretch from ``off`` that :meth:`_add_one` would take entry
        by entry with nothing to do but append them, taken at once; (0, k) when it is shorter
        than RUN_MIN entries: the k entries from ``off`` (the stretch and the one that ends
        it) go one by one."""
        offsets = walk_sizes(buf, off, n, RUN_LIMIT)
        if len(offsets) < RUN_MIN:
            return 0, len(offsets) + 1
        h = gather_headers(buf, np.asarray(offsets)).view(HEADER_DTYPE)[:, 0]
        size = h["size"].astype(np.int64)
        pos, index, term = h["pos"], h["index"], h["term"]
        first = self.last_index + 1 if self.last_index >= 0 else int(index[0])
        ok = ((h["magic"] >= 1) & (h["magic"] < MAGIC_CONFIG) & (h["bsize"] >= 0) & (size == HEADER_SIZE + h["bsize"])
              & (index == first + np.arange(len(h))))
        ok[1:] &= (term[1:] >= term[:-1]) & (pos[1:] == pos[:-1] + size[:-1])
        if self.last_index >= 0:
            ok[0] &= bool(term[0] >= self.last_term and pos[0] == self.next_pos)
        m = prefix_true(ok)
        if m < RUN_MIN:
            return 0, m + 1
        ends = np.cumsum(size[:m])
        if self._buf and len(self._buf) + int(ends[0]) > self.chunk_bytes:
            self._cut()
        m = int(np.searchsorted(ends, self.chunk_bytes - len(self._buf), side="right"))
        if m < RUN_MIN:  # (entries so large that few fill a chunk)
            return 0, max(1, m)
        took = int(ends[m - 1])
        if not self._buf:
            self._chunk_first, self._chunk_pos = int(index[0]), int(pos[0])
        if self.first_index < 0:
            self.first_index, self.first_term, self.first_pos = int(index[0]), int(term[0]), int(pos[0])
        self._buf += buf[off:off + took]
        self.last_index, self.last_term, self.last_chain = int(index[m - 1]), int(term[m - 1]), int(h["chain"][m - 1])
        self.next_pos = int(pos[m - 1]) + int(size[m - 1])
        self.entries += m
        self.entry_bytes += took
        return took, 0

    def _add_one(self, buf, off: int, n: int) -> int:
        """Take the entry at ``off`` (StoreCorruptError naming what does not follow); the
        offset after it."""
        if n - off < HEADER_SIZE:
            raise StoreCorruptError(f"entries end {n - off} bytes into a header")
        h = decode_header(buf, off)
        if h.size != HEADER_SIZE + h.body_size or h.body_size < 0 or off + h.size > n:
            raise StoreCorruptError(f"entry at byte {off} of a read: size {h.size} does not frame")
        if self.last_index >= 0:
            if h.index != self.last_index + 1:
                raise StoreCorruptError(f"entry {h.index} follows entry {self.last_index}")
            if h.term < self.last_term:
                raise StoreCorruptError(f"entry {h.index}: term {h.term} below the previous {self.last_term}")
            if h.pos < self.next_pos:
                raise StoreCorruptError(f"entry {h.index}: position {h.pos} before the previous entry's end")
        else:
            self.first_index, self.first_term, self.first_pos = h.index, h.term, h.pos
        rolled = self.last_index >= 0 and h.pos != self.next_pos
        if rolled:
            self._saw_roll(h.pos)
        if rolled or (self._buf and len(self._buf) + h.size > self.chunk_bytes):
            self._cut()
        if not self._buf:
            self._chunk_first, self._chunk_pos = h.index, h.pos
        self._buf += buf[off:off + h.size]
        if h.magic == MAGIC_CONFIG:
            self.members = members_from_config(buf[off + HEADER_SIZE:off + h.size]) or self.members
        self.last_index, self.last_term, self.last_chain = h.index, h.term, h.chain_crc
        self.next_pos = h.pos + h.size
        self.entries += 1
        self.entry_bytes += h.size
        return off + h.size

    def _saw_roll(self, pos: int) -> None:
        """Learn the data file size from where the log rolled to its next file: the log's
        first entry begins a data file, so the first roll is one file size after it (as
        cluster/raft/filesize.py reasons); every later roll begins a file too."""
        if not self._learn_size:
            return
        if self._learned is None and self.data_file_size is None:
            size = pos - self.first_pos
            ok = size > MIN_BLANK_LEN and self.first_pos % size == 0
            self._learned = self.data_file_size = size if ok else None
            self._learn_size = ok
        elif self.data_file_size is not None and pos % self.data_file_size:
            self.data_file_size, self._learn_size = None, False

    def _cut(self) -> None:
        if not self._buf:
            return
        data = bytes(self._buf)
        self.fh.write(data)
        self.chunks.append(Chunk(self.offset, len(data), self._chunk_first, self.last_index, self._chunk_pos,
                                 hashlib.sha256(data).hexdigest()))
        self.offset += len(data)
        self._buf.clear()

    def add_snapshot(self, index: int, term: int, size: int, crc: int, parts: Iterator[bytes]) -> None:
        """The state machine's snapshot as of entry ``index`` (``size`` bytes, crc32 ``crc``),
        its data given in ``parts``."""
        self._cut()
        digest, n = hashlib.sha256(), 0
        start = self.offset
        for part in parts:
            self.fh.write(part)
            digest.update(part)
            n += len(part)
        if n != size:
            raise StoreCorruptError(f"snapshot {index}: {n} bytes read, its meta says {size}")
        self.offset += n
        self.snapshot = {"index": index, "term": term, "offset": start, "length": n, "crc": crc,
                         "sha256": digest.hexdigest()}

    def finish(self, *, group: str | None, source: str, members: dict | None = None) -> Manifest:
        """Write the manifest and the tail, sync, and rename the file into place. ``members``:
        the member list when known otherwise (else the last config entry's, if any)."""
        if self.entries == 0:
            raise StoreUsageError("nothing to back up: no committed entries")
        self._cut()
        m = Manifest(group, self.members or members, source,
                     datetime.now(timezone.utc).isoformat(timespec="seconds"), self.first_index, self.first_term,
                     self.first_pos, self.last_index, self.last_term, self.last_chain, self.entries,
                     self.entry_bytes, self.data_file_size, self.chunks, self.snapshot)
        text = json.dumps(m.as_dict(), separators=(",", ":")).encode()
        self.fh.write(text)
        self.fh.write(TAIL.pack(len(text), zlib.crc32(text), TAIL_MAGIC))
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        os.rename(self.partial, self.path)
        self.done = True
        return m

    def abort(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            self.fh.close()
        finally:
            try:
                os.unlink(self.partial)
            except FileNotFoundError:
                pass


# -- reading -----------------------------------------------------------------------------
@dataclass
class Problem:
    """The first thing wrong found: in chunk ``chunk`` (0-based, None for the file's own
    parts), at entry ``index`` when one is named."""

    text: str
    chunk: int | None = None
    index: int | None = None


def _need(o: dict, key: str, kind, *, none: bool = False):
    v = o.get(key)
    if v is None and none:
        return None
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise BackupError(f"manifest: {key} is {v!r}")
    return v


class BackupReader:
    """An open backup file, its manifest read and checked (BackupError when the file is no
    backup of this format, or its head, tail or manifest is damaged)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.fh = open(path, "rb")
        except IsADirectoryError:
            raise StoreUsageError(f"{path} is a directory, not a backup file") from None
        try:
            self.size = os.fstat(self.fh.fileno()).st_size
            self.manifest = self._read_manifest()
        except BaseException:
            self.fh.close()
            raise

    def close(self) -> None:
        self.fh.close()

    def __enter__(self) -> "BackupReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read_manifest(self) -> Manifest:
        head = self.fh.read(HEAD.size)
        if len(head) < HEAD.size or head[:8] != HEAD_MAGIC:
            raise BackupError(f"{self.path} is not a dledgerctl backup (it does not begin with {HEAD_MAGIC.decode()})")
        version = HEAD.unpack(head)[1]
        if version != VERSION:
            raise BackupError(f"{self.path} is a backup of format version {version}; this dledgerctl reads "
                              f"version {VERSION}")
        if self.size < HEAD.size + TAIL.size:
            raise BackupError(f"{self.path}: the file ends before its manifest (truncated)")
        self.fh.seek(self.size - TAIL.size)
        length, crc, magic = TAIL.unpack(self.fh.read(TAIL.size))
        if magic != TAIL_MAGIC:
            raise BackupError(f"{self.path}: no manifest at the end of the file (truncated, or its tail damaged)")
        start = self.size - TAIL.size - length
        if length > MAX_MANIFEST or start < HEAD.size:
            raise BackupError(f"{self.path}: the manifest's length {length} does not fit the file")
        self.fh.seek(start)
        text = self.fh.read(length)
        if zlib.crc32(text) != crc:
            raise BackupError(f"{self.path}: the manifest is damaged (crc32 differs from the one recorded)")
        try:
            o = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise BackupError(f"{self.path}: the manifest is not JSON: {exc}") from None
        if not isinstance(o, dict) or o.get("format") != FORMAT:
            raise BackupError(f"{self.path}: the manifest is not a {FORMAT} manifest")
        self.manifest_offset = start
        return self._manifest(o)

    def _manifest(self, o: dict) -> Manifest:
        ints = {k: _need(o, k, int) for k in ("first_index", "first_term", "first_pos", "last_index", "last_term",
                                              "last_chain", "entries", "entry_bytes")}
        chunks = []
        for i, c in enumerate(_need(o, "chunks", list)):
            if not isinstance(c, dict):
                raise BackupError(f"manifest: chunk {i} is {c!r}")
            chunks.append(Chunk(*(_need(c, k, int) for k in ("offset", "length", "first_index", "last_index",
                                                              "first_pos")), _need(c, "sha256", str)))
        snap = _need(o, "snapshot", dict, none=True)
        if snap is not None:
            for k in ("index", "term", "offset", "length", "crc"):
                _need(snap, k, int)
            _need(snap, "sha256", str)
        members = _need(o, "members", dict, none=True)
        m = Manifest(_need(o, "group", str, none=True), members, str(o.get("source")), str(o.get("created")),
                     **ints, data_file_size=_need(o, "data_file_size", int, none=True), chunks=chunks,
                     snapshot=snap)
        # the chunks (and the snapshot) must tile the file between its head and the manifest
        at, nxt = HEAD.size, m.first_index
        for i, c in enumerate(chunks):
            if c.offset != at or c.length < HEADER_SIZE or c.first_index != nxt or c.last_index < c.first_index:
                raise BackupError(f"manifest: chunk {i} (entries {c.first_index}-{c.last_index} at byte {c.offset}) "
                                  f"does not follow the one before it")
            at, nxt = at + c.length, c.last_index + 1
        if not chunks or nxt != m.last_index + 1 or m.entries != m.last_index - m.first_index + 1:
            raise BackupError(f"manifest: its chunks do not hold entries {m.first_index}-{m.last_index}")
        if snap is not None:
            if snap["offset"] != at:
                raise BackupError("manifest: the snapshot does not follow the last chunk")
            at += snap["length"]
        if at != self.manifest_offset:
            raise BackupError(f"manifest: its parts end at byte {at}, the manifest begins at {self.manifest_offset}")
        return m

    def read_chunk(self, c: Chunk) -> bytes:
        self.fh.seek(c.offset)
        return self.fh.read(c.length)

    def chunks(self) -> Iterator[tuple[int, Chunk, bytes]]:
        """Each chunk (number, manifest row, bytes) whose digest matches; BackupError naming
        the first that does not."""
        for i, c in enumerate(self.manifest.chunks):
            data = self.read_chunk(c)
            if hashlib.sha256(data).hexdigest() != c.sha256:
                raise BackupError(f"chunk {i} (entries {c.first_index}-{c.last_index}, bytes {c.offset}-"
                                  f"{c.offset + c.length - 1}): its sha256 differs from the manifest's")
            yield i, c, data

    def snapshot_parts(self) -> Iterator[bytes]:
        snap = self.manifest.snapshot
        self.fh.seek(snap["offset"])
        left = snap["length"]
        while left:
            part = self.fh.read(min(READ_BYTES, left))
            if not part:
                raise BackupError("the snapshot ends early (truncated)")
            left -= len(part)
            yield part

    def verify(self, progress=None) -> Problem | None:
        """Check every chunk's digest and every entry; the first problem, or None."""
        m = self.manifest
        prev = (None, None, None)
        nxt = m.first_index
        for i, c in enumerate(m.chunks):
            data = self.read_chunk(c)
            if hashlib.sha256(data).hexdigest() != c.sha256:
                bad = _scan_chunk(data, c, prev)
                where = f"; entry {bad.index}: {bad.text}" if bad is not None and bad.index is not None else ""
                return Problem(f"chunk {i} (entries {c.first_index}-{c.last_index}, bytes {c.offset}-"
                               f"{c.offset + c.length - 1}): sha256 differs from the manifest's{where}",
                               i, bad.index if bad is not None else None)
            bad = _scan_chunk(data, c, prev)
            if bad is not None:
                bad.chunk = i
                bad.text = f"chunk {i}: {bad.text}"
                return bad
            last = decode_header(data, _last_entry_offset(data))
            prev = (last.index, last.term, last.chain_crc)
            nxt = last.index + 1
            if progress is not None:
                progress(c.length)
        if prev[0] != m.last_index or prev[1] != m.last_term or prev[2] != m.last_chain or nxt != m.last_index + 1:
            return Problem(f"the last entry is not the manifest's ({m.last_index}, term {m.last_term})")
        snap = m.snapshot
        if snap is not None:
            digest, crc = hashlib.sha256(), 0
            try:
                for part in self.snapshot_parts():
                    digest.update(part)
                    crc = zlib.crc32(part, crc)
            except BackupError as exc:
                return Problem(str(exc))
            if digest.hexdigest() != snap["sha256"] or crc != snap["crc"]:
                return Problem(f"the snapshot (as of entry {snap['index']}): its digest differs from the manifest's")
            if progress is not None:
                progress(snap["length"])
        return None


def _last_entry_offset(data: bytes) -> int:
    off = last = 0
    while off < len(data):
        last = off
        off += decode_header(data, off).size
    return last


def _scan_chunk(data: bytes, c: Chunk, prev: tuple) -> Problem | None:
    """The first bad entry of a chunk, through the one decoder (store/scan.py)."""
    scan = FileScan(data, c.first_pos, prev_index=prev[0], prev_term=prev[1], prev_chain=prev[2],
                    check_crc=True)
    expect = c.first_index
    for rec in scan:
        if rec.index != expect:
            return Problem(f"entry {rec.index} where entry {expect} belongs", index=rec.index)
        if not rec.healthy:
            return Problem(f"{rec.status.replace('-', ' ')}", index=rec.index)
        expect += 1
    if scan.stop is not None and scan.stop.reason != "eof":
        return Problem(f"{scan.stop.reason.replace('-', ' ')} at position {scan.stop.offset} (entry {expect}) "
                       f"{scan.stop.detail}".strip(), index=expect)
    if expect != c.last_index + 1:
        return Problem(f"holds entries {c.first_index}-{expect - 1}, the manifest says up to {c.last_index}",
                       index=expect)
    return None


# -- offline backup of a stopped member's store ------------------------------------------
def backup_store(node_dir: str, out: str, *, group: str | None = None, upto: int | None = None,
                 progress=None) -> Manifest:
    """Back up a stopped member's store: its log from its first entry to its committed index
    (the checkpoint's; ``upto`` to stop earlier, or later up to its end), and its latest
    snapshot. ``progress(n)`` hears the bytes copied. Members: the last config entry's, else
    what members.json kept (cluster/node/memberfile.py), else unknown."""
    store = FileStore.open(node_dir, read_only=True)
    try:
        committed = store.checkpoint_committed
        last = upto if upto is not None else committed if committed is not None else -1
        if last > store.end_index:
            raise StoreUsageError(f"{node_dir}: the log ends at {store.end_index}, before {last}")
        if last < store.begin_index or store.end_index < 0:
            raise StoreUsageError(f"{node_dir}: no committed entries to back up (committed index "
                                  f"{committed}, log {store.begin_index}-{store.end_index})")
        with BackupWriter(out, data_file_size=store.data_file_size) as w:
            i = store.begin_index
            while i <= last:
                raw, n = store.read_entries(i, min(4096, last - i + 1), CHUNK_BYTES)
                w.add(raw)
                i += n
                if progress is not None:
                    progress(len(raw))
            snaps = SnapshotStore(node_dir, writable=False)
            snap = snaps.latest()
            if snap is not None and snap.index <= last:
                w.add_snapshot(snap.index, snap.term, snap.size, snap.crc, _parts(snaps, snap))
            return w.finish(group=group, source=f"offline {os.path.abspath(node_dir)}",
                            members=_kept_members(node_dir))
    finally:
        store.close()


def _parts(snaps: SnapshotStore, info) -> Iterator[bytes]:
    off = 0
    while off < info.size:
        n = min(READ_BYTES, info.size - off)
        yield snaps.read_chunk(info, off, n)
        off += n


def _kept_members(node_dir: str) -> dict | None:
    try:
        with open(os.path.join(node_dir, "members.json"), "rb") as fh:
            return members_from_config(json.dumps(json.loads(fh.read())["members"]).encode())
    except (OSError, ValueError, KeyError, TypeError):
        return None
