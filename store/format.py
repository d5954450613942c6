"""Byte formats of a DLedger 0.2.x file store: entries, BLANK padding, index records.

Everything here is pure (bytes in, values out). All integers are big-endian, as Java's
ByteBuffer writes them. Constant names in comments are DLedger's, so a reader can check
them against ``DLedgerEntry``, ``DLedgerMmapFileStore`` and ``MmapFileList``.

Checksums. DLedger 0.2.7 writes 0 in both CRC fields. We write

    bodyCrc  = crc32(body) & 0x7fffffff
    chainCrc = crc32(pack(">iqqi", prevChainCrc, index, term, bodyCrc)) & 0x7fffffff

where ``prevChainCrc`` is the chainCrc stored in entry ``index - 1`` (0 for the first
entry of a log, and 0 when that entry was written without checksums). Each chain value
therefore fingerprints the whole prefix up to its entry, yet every link can be checked
from two neighbouring headers alone, without re-walking the log. ``bodyCrc == chainCrc
== 0`` means "not recorded" (an upstream-written entry), never an error.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

# zlib's CRC-32, from the fastest place: the store's compiled lanes (carry-less
# multiplication, store/_crc32.h: 78 ns for 1 KiB through Python on the 2-core machine), else
# ISA-L (167 ns: a fixed cost per call dominates short bodies), else zlib (355 ns).
try:
    from ._lanes import crc32 as _crc32
except ImportError:  # pragma: no cover - an install without a C compiler
    try:
        from isal.isal_zlib import crc32 as _crc32
    except ImportError:  # pragma: no cover - isal is a declared dependency
        _crc32 = zlib.crc32

crc32 = _crc32

# --- entry -------------------------------------------------------------------------------
MAGIC_NORMAL = 1  # DLedgerMmapFileStore.MAGIC_1 / CURRENT_MAGIC
MAGIC_NOOP = 2  # DLedger >= 0.3 no-op entry written by a new leader
MAGIC_CONFIG = 3  # configuration change
ENTRY_MAGICS = (MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG)
BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE
MIN_BLANK_LEN = 8  # MmapFileList.MIN_BLANK_LEN: an entry must leave room for a BLANK header

POS_OFFSET = 24  # DLedgerEntry.POS_OFFSET
CHAIN_CRC_OFFSET = 36
BODY_OFFSET = 48  # DLedgerEntry.BODY_OFFSET (DLedgerEntry.HEADER_SIZE + 4)
HEADER_SIZE = 48  # bytes before the body (DLedger's HEADER_SIZE constant is 44: it excludes bodySize)

# magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize
ENTRY_HEADER = struct.Struct(">iiqqqiiii")
BLANK_HEADER = struct.Struct(">ii")  # magic, size
CHAIN_INPUT = struct.Struct(">iqqi")  # prevChainCrc, index, term, bodyCrc

# --- index -------------------------------------------------------------------------------
INDEX_UNIT_SIZE = 32  # DLedgerMmapFileStore.INDEX_UNIT_SIZE
INDEX_RECORD = struct.Struct(">iqiqq")  # magic, pos, size, index, term (DLedgerEntryCoder.encodeIndex)

# --- files -------------------------------------------------------------------------------
DEFAULT_DATA_FILE_SIZE = 1024 * 1024 * 1024  # DLedgerConfig.mappedFileSizeForEntryData
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024  # DLedgerConfig.mappedFileSizeForEntryIndex
FILE_NAME_DIGITS = 20  # DLedgerUtils.offset2FileName
CRC_MASK = 0x7FFFFFFF
INT64_MAX = (1 << 63) - 1  # Long.MAX_VALUE: the largest index, term or position the format stores
# The largest term a node takes: one that can still be incremented (the next election's term
# must fit the entry header's i64 too)
TERM_MAX = INT64_MAX - 1


class EntryHeader(NamedTuple):
    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int


class IndexRecord(NamedTuple):
    magic: int
    pos: int
    size: int
    index: int
    term: int


def body_crc(body) -> int:
    return crc32(body) & CRC_MASK


def chain_crc(prev_chain: int, index: int, term: int, bcrc: int) -> int:
    return crc32(CHAIN_INPUT.pack(prev_chain, index, term, bcrc)) & CRC_MASK


def crc_recorded(header: EntryHeader) -> bool:
    return header.body_crc != 0 or header.chain_crc != 0


def encode_entry(
    body: bytes, *, index: int, term: int, pos: int, magic: int = MAGIC_NORMAL, prev_chain: int = 0,
    with_crc: bool = True, channel: int = 0,
) -> bytes:
    """One encoded entry. ``with_crc=False`` writes 0/0 like DLedger 0.2.7."""
    size = HEADER_SIZE + len(body)
    if with_crc:
        bcrc = body_crc(body)
        chain = chain_crc(prev_chain, index, term, bcrc)
    else:
        bcrc = chain = 0
    return ENTRY_HEADER.pack(magic, size, index, term, pos, channel, chain, bcrc, len(body)) + bytes(body)


def decode_header(buf, offset: int = 0) -> EntryHeader:
    return EntryHeader._make(ENTRY_HEADER.unpack_from(buf, offset))


def encode_index(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    return INDEX_RECORD.pack(magic, pos, size, index, term)


def decode_index(buf, offset: int = 0) -> IndexRecord:
    return IndexRecord._make(INDEX_RECORD.unpack_from(buf, offset))


def file_name(offset: int) -> str:
    """``DLedgerUtils.offset2FileName``: the start offset zero-padded to 20 digits."""
    return f"{offset:0{FILE_NAME_DIGITS}d}"


def parse_decimal(text: str, *, signed: bool = False, limit: int | None = None) -> int | None:
    """The number a name (a file's, a directory's) spells in ASCII decimal digits, with one
    leading '-' when ``signed``; None for anything else, or past ``limit`` either way.

    Every number read from a name goes through here: ``str.isdigit()`` alone accepts digits
    ``int()`` refuses (superscripts, "²"), and ``int()`` alone accepts what no name of ours
    holds (other scripts' digits, "+5", " 5", "1_0")."""
    digits = text[1:] if signed and text[:1] == "-" else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(text)
    return None if limit is not None and abs(value) > limit else value


def shown(name: str) -> str:
    """A name read from the file system as text any output can carry: bytes that are not
    UTF-8 (which ``os.listdir`` hands back as lone surrogates) as ``\\xNN`` escapes."""
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # (a surrogate no file name decodes to)
        return name.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def parse_file_name(name: str) -> int | None:
    """The start offset a file name encodes, or None if it is not a store file name."""
    return parse_decimal(name) if len(name) == FILE_NAME_DIGITS else None
