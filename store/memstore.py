"""A memory store with the file store's interface and semantics, for tests and simulation.

It encodes entries exactly as the file store does (same positions, BLANK padding rule and
checksums), so raw batches move between the two and the conformance suite can compare them.
"""

from __future__ import annotations

from typing import Sequence

from .base import Appended, Entry, Keep, LogStore
from .errors import InconsistentAppend, IndexOutOfRange, PositionMismatch, StoreUsageError
from .format import (
    CRC_MASK,
    DEFAULT_DATA_FILE_SIZE,
    ENTRY_HEADER,
    ENTRY_MAGICS,
    HEADER_SIZE,
    MAGIC_NORMAL,
    MIN_BLANK_LEN,
    body_crc,
    chain_crc,
    crc32,
)
from .retention import HeadFile


class MemoryStore(LogStore):
    def __init__(self, *, data_file_size: int = DEFAULT_DATA_FILE_SIZE, with_crc: bool = True, clock=None) -> None:
        """``clock()``: seconds, the "modification time" of the data file an entry goes to
        (for retention by age: :meth:`head_files`); the wall clock when None."""
        self.data_file_size = data_file_size
        self.with_crc = with_crc
        self.clock = clock
        self._written_at: dict[int, float] = {}  # data file start -> when it was last written
        self._entries: list[Entry] = []  # entries begin_index..end_index
        self.begin_index = -1
        self.end_index = -1
        self.end_term = 0
        self.write_pos = 0
        self._committed = -1

    @property
    def committed_index(self) -> int:
        return self._committed

    def set_committed(self, index: int) -> int:
        index = min(index, self.end_index)
        if index > self._committed:
            self._committed = index
        return self._committed

    def persist_checkpoint(self) -> None:
        """Nothing to write: the indexes live as long as the store does (FileStore writes
        its checkpoint file here)."""

    @property
    def last_chain(self) -> int:
        return self._entries[-1].chain_crc if self._entries else 0

    def _next_pos(self, size: int) -> int:
        fsize = self.data_file_size
        if size + MIN_BLANK_LEN > fsize:
            raise StoreUsageError(f"entry of {size} bytes does not fit a {fsize}-byte data file")
        rel = self.write_pos % fsize
        return self.write_pos + (fsize - rel if size + MIN_BLANK_LEN > fsize - rel else 0)

    def _add(self, entry: Entry) -> Appended:
        self._entries.append(entry)
        self._written_at[entry.pos - entry.pos % self.data_file_size] = self._now()
        self.write_pos = entry.pos + entry.size
        self.end_index, self.end_term = entry.index, entry.term
        if self.begin_index < 0:
            self.begin_index = entry.index
        return Appended(entry.index, entry.term, entry.pos, entry.size)

    def append_leader(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL) -> list[Appended]:
        if term < self.end_term:
            raise StoreUsageError(f"term {term} is lower than the log's last term {self.end_term}")
        if magic not in ENTRY_MAGICS:
            raise StoreUsageError(f"magic {magic} is not an entry magic")
        # Refuse the whole batch before adding any of it, as the file store does.
        largest = max(map(len, bodies), default=0)
        if HEADER_SIZE + largest + MIN_BLANK_LEN > self.data_file_size:
            raise StoreUsageError(f"entry of {HEADER_SIZE + largest} bytes does not fit a {self.data_file_size}-byte data file")
        out = []
        for body in bodies:
            body = bytes(body)
            pos = self._next_pos(HEADER_SIZE + len(body))
            index = self.end_index + 1
            if self.with_crc:
                bcrc = body_crc(body)
                chain = chain_crc(self.last_chain, index, term, bcrc)
            else:
                bcrc = chain = 0
            out.append(self._add(Entry(index, term, pos, magic, body, bcrc, chain)))
        return out

    def append_follower(self, raw, *, max_term: int | None = None) -> list[Appended]:
        buf = bytes(raw)
        off, out = 0, []
        while off < len(buf):
            if len(buf) - off < HEADER_SIZE:
                raise InconsistentAppend(f"{len(buf) - off} trailing bytes are not an entry header")
            magic, size, idx, term, pos, ch, chain, bcrc, bsize = ENTRY_HEADER.unpack_from(buf, off)
            if magic not in ENTRY_MAGICS or bsize < 0 or size != HEADER_SIZE + bsize or off + size > len(buf):
                raise InconsistentAppend(f"malformed entry at byte {off} of the batch (magic {magic}, size {size})")
            if idx != self.end_index + 1:
                raise InconsistentAppend(f"entry index {idx} does not follow the local end {self.end_index}")
            if term < self.end_term:
                raise InconsistentAppend(f"entry {idx} has term {term} below the local last term {self.end_term}")
            if max_term is not None and term > max_term:
                raise InconsistentAppend(f"entry {idx} has term {term} above the leader's term {max_term}")
            body = buf[off + HEADER_SIZE : off + size]
            if (bcrc or chain) and crc32(body) & CRC_MASK != bcrc:
                raise InconsistentAppend(f"entry {idx}: body checksum does not match")
            if (bcrc or chain) and self._entries and chain_crc(self.last_chain, idx, term, bcrc) != chain:
                raise InconsistentAppend(f"entry {idx}: chain checksum does not follow the entry before it")
            expected = self._next_pos(size)
            if pos != expected:
                raise PositionMismatch(f"entry {idx} is at pos {pos}, the local log continues at {expected}",
                                       index=idx, pos=pos, expected=expected)
            out.append(self._add(Entry(idx, term, pos, magic, body, bcrc, chain, ch)))
            off += size
        return out

    def _now(self) -> float:
        if self.clock is not None:
            return self.clock()
        import time

        return time.time()

    # -- the log's beginning moves (FileStore.delete_head / reset_to, on "files" of entries) --
    def head_files(self):
        """The data files the file store would have, oldest first (store.retention)."""
        fsize, out = self.data_file_size, []
        for e in self._entries:
            start = e.pos - e.pos % fsize
            if out and out[-1][0] == start:
                out[-1][2] = e.index
            else:
                out.append([start, e.index, e.index])
        return [HeadFile(f"{start:020d}", start, first, last, self._written_at.get(start, 0.0))
                for start, first, last in out]

    def delete_head(self, count: int) -> tuple[list[str], list[str]]:
        """As FileStore.delete_head: drop the entries of the first ``count`` files."""
        files = self.head_files()
        if count <= 0:
            return [], []
        if count >= len(files):
            raise StoreUsageError(f"cannot delete {count} data files of {len(files)}: the last one is being written")
        new_begin = files[count].first_index
        if new_begin - 1 > self._committed:
            raise StoreUsageError(f"cannot delete entries up to {new_begin - 1}: the commit index is {self._committed}")
        del self._entries[:new_begin - self.begin_index]
        self.begin_index = new_begin
        for f in files[:count]:
            self._written_at.pop(f.start, None)
        return [f.name for f in files[:count]], []

    def reset_to(self, raw) -> list[Appended]:
        """As FileStore.reset_to: the log begins again with the one entry ``raw``."""
        magic, size, idx, _term, pos = ENTRY_HEADER.unpack_from(raw)[:5]
        if size != len(raw) or idx < 0 or pos < 0:
            raise StoreUsageError(f"reset needs exactly one encoded entry (got {len(raw)} bytes, size {size})")
        if pos % self.data_file_size:
            raise PositionMismatch(f"entry {idx} at pos {pos} does not start a data file of {self.data_file_size} "
                                   "bytes: a log cannot begin there", index=idx, pos=pos, expected=None)
        if self.end_index >= self.begin_index >= 0:  # (committed entries are the group's: only the rest is kept)
            first = max(self.begin_index, self._committed + 1)
            if first <= self.end_index:
                self._keep(first, self.end_index)
        self._entries, self._written_at = [], {}
        self.begin_index, self.end_index, self.end_term, self.write_pos = -1, idx - 1, 0, pos
        self._committed = idx - 1
        return self.append_follower(raw)

    def adopt_data_file_size(self, size: int) -> None:
        """As FileStore.adopt_data_file_size: smaller "files" from now on, if no entry moves."""
        old = self.data_file_size
        if size == old:
            return
        if not HEADER_SIZE + MIN_BLANK_LEN <= size < old:
            raise StoreUsageError(f"the data file size can only go down from {old} bytes (to {size})")
        files = self.head_files()
        if len(files) > 1:
            raise StoreUsageError(f"the log spans {len(files)} data files of {old} bytes already")
        if files:
            start = files[0].start
            if start % size or self._entries[0].pos != start or self.write_pos + MIN_BLANK_LEN > start + size:
                raise StoreUsageError(f"the log's data file {files[0].name} (entries at {self._entries[0].pos}.."
                                      f"{self.write_pos}) does not fit one data file of {size} bytes")
        self.data_file_size = size

    def indexes_with_magic(self, magic: int) -> list[int]:
        return [e.index for e in self._entries if e.magic == magic]

    def get(self, index: int) -> Entry:
        self.check_range(index)
        return self._entries[index - self.begin_index]

    def get_bytes(self, index: int) -> bytes:
        e = self.get(index)
        return ENTRY_HEADER.pack(e.magic, e.size, e.index, e.term, e.pos, e.channel, e.chain_crc, e.body_crc,
                                 len(e.body)) + e.body

    def read_entries(self, first: int, max_count: int, max_bytes: int, *, as_stored: bool = False) -> tuple[bytes, int]:
        self.check_range(first)
        parts, total = [], 0
        for i in range(first, min(self.end_index, first + max(1, max_count) - 1) + 1):
            raw = self.get_bytes(i)
            if parts and total + len(raw) > max_bytes:
                break
            parts.append(raw)
            total += len(raw)
        return b"".join(parts), len(parts)

    def term_of(self, index: int) -> int:
        return self.get(index).term

    def truncate(self, from_index: int, *, force: bool = False, keep: Keep | None = None) -> int:
        if from_index > self.end_index:
            return 0
        if from_index < 0 or from_index < self.begin_index:
            raise IndexOutOfRange(f"cannot truncate from {from_index}: the log begins at {self.begin_index}")
        if from_index <= self._committed and not force:
            raise StoreUsageError(f"cannot truncate from {from_index}: entries up to {self._committed} are committed")
        (self._keep if keep is None else keep)(from_index, self.end_index)
        cut = from_index - self.begin_index
        dropped = len(self._entries) - cut
        self.write_pos = self._entries[cut].pos
        del self._entries[cut:]
        if self._entries:
            last = self._entries[-1]
            self.end_index, self.end_term = last.index, last.term
        else:
            self.end_index, self.end_term = from_index - 1, 0
        self._committed = min(self._committed, self.end_index)
        return dropped
