"""The one decoder of data-file bytes.

Recovery, ``store inspect-data``, ``store verify``, ``store diff`` and the Spark source all
read entries through :class:`FileScan`; nothing else parses data-file bytes.

A scan walks one data file from a start offset. It yields one :class:`Scanned` per record
(entries, and the BLANK padding record if asked) and stops at the first place where the
bytes cannot be parsed any further; ``scan.stop`` then says why and where. Problems that
leave the framing intact (a bad checksum, an index gap, a term going back) do not stop the
scan: they are reported in ``Scanned.status`` and each consumer decides (recovery ends the
log there, verify reports and goes on).

Invariants: the scan never reads outside ``buf``; it never raises on any byte content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

from .format import (
    BLANK_HEADER,
    BLANK_MAGIC,
    CHAIN_INPUT,
    CRC_MASK,
    ENTRY_HEADER,
    ENTRY_MAGICS,
    HEADER_SIZE,
    crc32,
)

# Scanned.status values. OK and NO_CRC are healthy entries.
OK = "ok"  # checksums recorded and correct
NO_CRC = "no-crc"  # written without checksums (DLedger 0.2.7), nothing to check
BAD_BODY_CRC = "bad-body-crc"
BAD_CHAIN_CRC = "bad-chain-crc"
INDEX_GAP = "index-gap"  # index is not previous index + 1
TERM_BACK = "term-back"  # term lower than the previous entry's
BLANK = "blank"  # the BLANK padding record at the end of a file (kind == "blank")
HEALTHY = frozenset((OK, NO_CRC))

# ScanStop.reason values.
STOP_BLANK = "blank"  # a valid BLANK record: the rest of the file is padding
STOP_END = "end"  # zeros where the next header would be: nothing written past here
STOP_EOF = "eof"  # the file ends exactly at a record boundary
STOP_LIMIT = "limit"  # the caller's end offset or count was reached
STOP_TORN = "torn"  # the file ends inside a header or a body
STOP_BAD_MAGIC = "bad-magic"
STOP_BAD_SIZE = "bad-size"
STOP_BAD_POS = "bad-pos"
STOP_BAD_BLANK = "bad-blank"
CLEAN_STOPS = frozenset((STOP_BLANK, STOP_END, STOP_EOF, STOP_LIMIT))


class Scanned(NamedTuple):
    """One record as found on disk. ``offset`` is the logical (store-wide) byte offset."""

    offset: int
    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int
    status: str

    @property
    def kind(self) -> str:
        return "blank" if self.status == BLANK else "entry"

    @property
    def healthy(self) -> bool:
        return self.status in HEALTHY


@dataclass
class ScanStop:
    reason: str
    offset: int  # logical offset where the scan stopped
    detail: str = ""

    @property
    def clean(self) -> bool:
        return self.reason in CLEAN_STOPS


class FileScan:
    """Iterate the records of one data file.

    ``buf`` holds the file's bytes (an mmap or bytes; may be shorter than the configured
    file size when the file was truncated); ``file_start`` is the file's logical start
    offset. ``prev_index``/``prev_term``/``prev_chain`` describe the entry before the first
    one scanned, when known (None: unknown, the corresponding check is skipped for the
    first entry). ``file_size`` is the configured size (a BLANK record must reach it);
it defaults to ``len(buf)``. ``check_crc=False`` skips checksum work (status is then OK or NO_CRC
    from the recorded fields alone).
    """

    def __init__(
        self,
        buf,
        file_start: int,
        *,
        start: int = 0,
        end: int | None = None,
        prev_index: int | None = None,
        prev_term: int | None = None,
        prev_chain: int | None = None,
        check_crc: bool = True,
        include_blank: bool = False,
        max_entries: int | None = None,
        file_size: int | None = None,
    ) -> None:
        self.buf = buf
        self.file_size = len(buf) if file_size is None else file_size
        self.file_start = file_start
        self.start = start
        self.end = len(buf) if end is None else min(end, len(buf))
        self.prev_index = prev_index
        self.prev_term = prev_term
        self.prev_chain = prev_chain
        self.check_crc = check_crc
        self.include_blank = include_blank
        self.max_entries = max_entries
        self.stop: ScanStop | None = None
        self.next_offset = file_start + start  # logical offset just past the last record

    def __iter__(self) -> Iterator[Scanned]:
        buf = self.buf
        base = self.file_start
        end = self.end
        buflen = len(buf)
        off = self.start
        unpack = ENTRY_HEADER.unpack_from
        prev_index = self.prev_index
        prev_term = self.prev_term
        prev_chain = self.prev_chain
        check_crc = self.check_crc
        crc = crc32
        chain_pack = CHAIN_INPUT.pack
        remaining_entries = self.max_entries
        try:
            while True:
                if off >= end:
                    self._stop(STOP_EOF if end == buflen else STOP_LIMIT, base + off)
                    return
                if remaining_entries is not None and remaining_entries <= 0:
                    self._stop(STOP_LIMIT, base + off)
                    return
                room = buflen - off
                if room < 8:
                    tail = bytes(buf[off:buflen])
                    if tail.count(0) == len(tail):
                        self._stop(STOP_END, base + off)
                    else:
                        self._stop(STOP_TORN, base + off, f"{room} bytes left, too few for a header")
                    return
                magic, size = BLANK_HEADER.unpack_from(buf, off)
                if magic == BLANK_MAGIC:
                    if size != self.file_size - off:
                        self._stop(STOP_BAD_BLANK, base + off, f"BLANK size {size} but {self.file_size - off} bytes left in file")
                        return
                    if self.include_blank:
                        yield Scanned(base + off, magic, size, -1, -1, -1, 0, 0, 0, 0, BLANK)
                    self.next_offset = base + off + size
                    self._stop(STOP_BLANK, base + off)
                    return
                if magic == 0 and size == 0:
                    self._stop(STOP_END, base + off)
                    return
                if magic not in ENTRY_MAGICS:
                    self._stop(STOP_BAD_MAGIC, base + off, f"magic {magic}")
                    return
                if room < HEADER_SIZE:
                    self._stop(STOP_TORN, base + off, f"file ends {room} bytes into a {HEADER_SIZE}-byte header")
                    return
                _, _, index, term, pos, channel, chain, bcrc, bsize = unpack(buf, off)
                if bsize < 0 or size != HEADER_SIZE + bsize:
                    self._stop(STOP_BAD_SIZE, base + off, f"size {size} != {HEADER_SIZE} + bodySize {bsize}")
                    return
                if pos != base + off:
                    self._stop(STOP_BAD_POS, base + off, f"pos field {pos} != offset {base + off}")
                    return
                if size > room:
                    self._stop(STOP_TORN, base + off, f"entry of {size} bytes runs past the file end ({room} left)")
                    return
                if prev_index is not None and index != prev_index + 1:
                    status = INDEX_GAP
                elif prev_term is not None and term < prev_term:
                    status = TERM_BACK
                elif bcrc == 0 and chain == 0:
                    status = NO_CRC
                elif not check_crc:
                    status = OK
                elif crc(buf[off + HEADER_SIZE : off + size]) & CRC_MASK != bcrc:
                    status = BAD_BODY_CRC
                elif (prev_chain is not None or index == 0) and crc(
                        chain_pack(prev_chain or 0, index, term, bcrc)) & CRC_MASK != chain:
                    # Entry 0 has no predecessor: its chain input is 0 (store/format.py), so it is
                    # checkable even when the scan does not know what came before.
                    status = BAD_CHAIN_CRC
                else:
                    status = OK
                yield Scanned(base + off, magic, size, index, term, pos, channel, chain, bcrc, bsize, status)
                if remaining_entries is not None:
                    remaining_entries -= 1
                prev_index, prev_term, prev_chain = index, term, chain
                off += size
        finally:
            self.next_offset = base + off if self.stop is None or self.stop.reason != STOP_BLANK else self.next_offset
            self.prev_index, self.prev_term, self.prev_chain = prev_index, prev_term, prev_chain

    def _stop(self, reason: str, offset: int, detail: str = "") -> None:
        self.stop = ScanStop(reason, offset, detail)
