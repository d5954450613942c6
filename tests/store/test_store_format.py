"""The byte format (DESIGN.md section 2): checksums, entry and index record layout field by
field, file names, preallocated files and BLANK padding; that the project writes exactly
the bytes DLedger 0.2.7 wrote for the same log; and that a small re-implementation of
DLedger 0.2.7's own recovery (below, from DLedgerMmapFileStore.recover() at tag
dledger-0.2.7) walks stores written by the project to their end, or to the first no-op."""

from __future__ import annotations

import os
import random
import struct
import zlib

import pytest

from tests.support.stores import (
    FIXTURE_NAMES,
    FIXTURE_STORES,
    file_digests,
    fixture_path,
    parse_header,
    parse_index_record,
    read_manifest,
    store_files,
    write_project_store,
)
from store.filestore import FileStore
from store.format import (
    CHAIN_INPUT,
    ENTRY_HEADER,
    INDEX_RECORD,
    EntryHeader,
    IndexRecord,
    body_crc,
    chain_crc,
    crc32,
    decode_header,
    decode_index,
    encode_entry,
    encode_index,
    file_name,
    parse_file_name,
)
from store.memstore import MemoryStore

MASK = 0x7FFFFFFF


# --- checksums ------------------------------------------------------------------------------

def test_body_crc_is_crc32_masked_to_31_bits():
    assert body_crc(b"") == 0
    assert zlib.crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value
    assert body_crc(b"123456789") == 0x4BF43926  # high bit cleared
    assert body_crc(b"a") == 0xE8B7BE43 & MASK == 0x68B7BE43
    rng = random.Random(3)
    for n in (1, 7, 64, 4096, 100_000):
        data = rng.randbytes(n)
        assert crc32(data) == zlib.crc32(data)  # the fast crc32 is zlib's polynomial
        assert body_crc(data) == zlib.crc32(data) & MASK


def test_chain_crc_input_packing():
    # store/format.py documents: crc32(pack(">iqqi", prevChainCrc, index, term, bodyCrc)) & 0x7fffffff
    assert CHAIN_INPUT.size == 24
    prev, index, term, bcrc = 0x1234567, 0x0102030405060708, 0x1112131415161718, 0x4BF43926
    packed = (prev.to_bytes(4, "big") + index.to_bytes(8, "big") + term.to_bytes(8, "big") + bcrc.to_bytes(4, "big"))
    assert chain_crc(prev, index, term, bcrc) == zlib.crc32(packed) & MASK
    assert chain_crc(0, 0, 0, 0) == zlib.crc32(bytes(24)) & MASK
    assert chain_crc(1, 0, 0, 0) != chain_crc(0, 0, 0, 0)


def test_encode_entry_checksums_and_without_crc():
    body = b"hello"
    raw = encode_entry(body, index=4, term=2, pos=96, prev_chain=777)
    bcrc = zlib.crc32(body) & MASK
    assert int.from_bytes(raw[40:44], "big") == bcrc
    assert int.from_bytes(raw[36:40], "big") == zlib.crc32(struct.pack(">iqqi", 777, 4, 2, bcrc)) & MASK
    bare = encode_entry(body, index=4, term=2, pos=96, prev_chain=777, with_crc=False)
    assert bare[36:44] == bytes(8)
    assert bare[:36] == raw[:36] and bare[44:] == raw[44:]


def test_entry_layout_field_by_field():
    body = b"xyz\x00\xff"
    raw = encode_entry(body, index=0x0102030405060708, term=0x1112131415161718, pos=0x2122232425262728,
                       magic=3, channel=0x31323334, with_crc=False)
    assert len(raw) == 48 + 5
    assert raw[0:4] == b"\x00\x00\x00\x03"  # magic
    assert raw[4:8] == (53).to_bytes(4, "big")  # size = 48 + body
    assert raw[8:16] == bytes.fromhex("0102030405060708")  # index
    assert raw[16:24] == bytes.fromhex("1112131415161718")  # term
    assert raw[24:32] == bytes.fromhex("2122232425262728")  # pos
    assert raw[32:36] == bytes.fromhex("31323334")  # channel
    assert raw[36:40] == bytes(4)  # chainCrc
    assert raw[40:44] == bytes(4)  # bodyCrc
    assert raw[44:48] == (5).to_bytes(4, "big")  # bodySize
    assert raw[48:] == body
    assert ENTRY_HEADER.size == 48
    assert decode_header(raw) == EntryHeader(3, 53, 0x0102030405060708, 0x1112131415161718, 0x2122232425262728,
                                             0x31323334, 0, 0, 5)


def test_entry_round_trip():
    rng = random.Random(5)
    prev = 0
    for i in range(50):
        body = rng.randbytes(rng.randrange(0, 300))
        raw = encode_entry(body, index=i, term=i // 10, pos=i * 1000, magic=1 + i % 3, prev_chain=prev)
        h = decode_header(raw)
        assert h == EntryHeader(1 + i % 3, 48 + len(body), i, i // 10, i * 1000, 0, h.chain_crc, body_crc(body), len(body))
        assert h.chain_crc == chain_crc(prev, i, i // 10, body_crc(body))
        assert parse_header(raw) == h._asdict()
        assert raw[48:] == body
        prev = h.chain_crc
    # negative values survive (BLANK magic, a hand-made chain value with the high bit set)
    raw = encode_entry(b"", index=1, term=1, pos=0, magic=-1, with_crc=False)
    assert decode_header(raw).magic == -1 and raw[:4] == b"\xff\xff\xff\xff"


def test_index_record_layout():
    rec = encode_index(2, 0x0102030405060708, 0x11121314, 0x2122232425262728, 0x3132333435363738)
    assert len(rec) == 32 and INDEX_RECORD.size == 32
    assert rec[0:4] == (2).to_bytes(4, "big")  # magic i32
    assert rec[4:12] == bytes.fromhex("0102030405060708")  # pos i64
    assert rec[12:16] == bytes.fromhex("11121314")  # size i32
    assert rec[16:24] == bytes.fromhex("2122232425262728")  # index i64
    assert rec[24:32] == bytes.fromhex("3132333435363738")  # term i64
    assert decode_index(rec) == IndexRecord(2, 0x0102030405060708, 0x11121314, 0x2122232425262728, 0x3132333435363738)
    assert parse_index_record(rec) == tuple(decode_index(rec))


def test_file_names():
    assert file_name(0) == "00000000000000000000"
    assert file_name(65536) == "00000000000000065536"
    assert file_name(1 << 30) == "00000000001073741824"
    assert len(file_name(10**19)) == 20
    assert parse_file_name("00000000000000065536") == 65536
    for bad in ("0000000000000006553", "000000000000000065536", "0000000000000006553a", "notes.txt", "",
                "+0000000000000000001", "00000000000000065536.tmp", "\u00b2" * 20, "\u0660" * 20):
        assert parse_file_name(bad) is None, bad


# --- files written by the project --------------------------------------------------------------

def walk_data_files(node, fsize):
    """An independent walk of every data file: [(file start, [(rel, header)...], blank rel or None, file bytes)]."""
    out = []
    for start, path in store_files(node, "data"):
        with open(path, "rb") as fh:
            buf = fh.read()
        rel, entries, blank = 0, [], None
        while rel + 8 <= len(buf):
            magic = int.from_bytes(buf[rel:rel + 4], "big", signed=True)
            if magic == -1:
                blank = rel
                break
            if magic == 0:
                break
            h = parse_header(buf, rel)
            entries.append((rel, h))
            rel += h["size"]
        out.append((start, entries, blank, buf))
    return out


def test_project_store_files_names_sizes_blank_and_index(tmp_path):
    node = tmp_path / "dledger-n0"
    raw = write_project_store(node, count=80, data_file_size=4096, index_file_size=256)
    data = store_files(node, "data")
    index = store_files(node, "index")
    assert [os.path.basename(p) for _, p in data] == [f"{i * 4096:020d}" for i in range(len(data))]
    assert [os.path.basename(p) for _, p in index] == [f"{i * 256:020d}" for i in range(len(index))]
    assert len(data) >= 6 and len(index) == 10  # 80 records of 32 bytes, 8 per file
    assert all(os.path.getsize(p) == 4096 for _, p in data)  # preallocated, the last one too
    assert all(os.path.getsize(p) == 256 for _, p in index)
    walked = walk_data_files(node, 4096)
    seen = []
    for k, (start, entries, blank, buf) in enumerate(walked):
        for rel, h in entries:
            assert h["pos"] == start + rel
            seen.append(buf[rel:rel + h["size"]])
        end = entries[-1][0] + entries[-1][1]["size"]
        if k < len(walked) - 1:
            # a filled file: a BLANK record right after the last entry, reaching the file end
            assert blank == end
            assert int.from_bytes(buf[end + 4:end + 8], "big", signed=True) == 4096 - end
            assert buf[end + 8:] == bytes(4096 - end - 8)
            # and it was needed: the next file's first entry plus 8 bytes did not fit here
            assert walked[k + 1][1][0][1]["size"] + 8 > 4096 - end
        else:
            assert blank is None and buf[end:] == bytes(4096 - end)
    assert seen == raw
    # one index record per entry, agreeing with the entry; zeros after the last one
    idx = b"".join(open(p, "rb").read() for _, p in index)
    for i, r in enumerate(raw):
        h = parse_header(r)
        assert parse_index_record(idx, i * 32) == (h["magic"], h["pos"], h["size"], i, h["term"])
    assert idx[80 * 32:] == bytes(len(idx) - 80 * 32)


def test_new_files_are_full_size_from_the_first_entry(tmp_path):
    node = tmp_path / "dledger-n0"
    with FileStore.open(str(node), data_file_size=1 << 20, index_file_size=1024) as s:
        s.append(b"x", term=1)
        assert os.path.getsize(node / "data" / file_name(0)) == 1 << 20
        assert os.path.getsize(node / "index" / file_name(0)) == 1024
    assert sorted(os.listdir(node / "data")) == [file_name(0)]


def test_file_and_memory_stores_encode_identically(tmp_path):
    m = MemoryStore(data_file_size=4096)
    raw = write_project_store(tmp_path / "dledger-n0", count=60, noop_at=33)
    for i, r in enumerate(raw):
        h = parse_header(r)
        m.append_leader([r[48:]], h["term"], magic=h["magic"])
        assert m.get_bytes(i) == r


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("how", ["leader", "follower"])
def test_project_writes_the_bytes_dledger_027_wrote(tmp_path, name, how):
    """Replaying a reference log (as a leader without checksums, or as a follower of the raw
    bytes) produces data and index files identical to DLedger's, byte for byte."""
    _n, dsize, isize = FIXTURE_STORES[name]
    with FileStore.open(fixture_path(name), read_only=True) as ref:
        entries = list(ref.entries())
        raw = ref.get_raw(0, 10**6, 1 << 40)
    node = tmp_path / "dledger-n9"
    with FileStore.open(str(node), data_file_size=dsize, index_file_size=isize, with_crc=(how == "follower")) as s:
        if how == "leader":
            for e in entries:
                s.append_leader([e.body], e.term)
        else:
            s.append_follower(raw)
    assert file_digests(node) == file_digests(fixture_path(name))


# --- DLedger 0.2.7's recovery, re-implemented -----------------------------------------------

MAGIC_1 = CURRENT_MAGIC = 1  # DLedgerMmapFileStore
DLEDGER_HEADER_SIZE = 44  # DLedgerEntry.HEADER_SIZE
BODY_OFFSET = 48  # DLedgerEntry.BODY_OFFSET


class _Stop(Exception):
    """Any PreConditions failure or buffer underflow in the Java loop."""


def dledger_027_recover(node, data_file_size, index_file_size):
    """What DLedgerMmapFileStore.recover() of dledger-0.2.7 finds: (list of (index, term,
    pos, size) walked, processOffset, needWriteIndex). Reads the files, changes nothing."""
    files = store_files(node, "data")
    bufs = []
    for _start, path in files:
        with open(path, "rb") as fh:
            bufs.append(fh.read())
    index_bufs = {}
    for start, path in store_files(node, "index"):
        with open(path, "rb") as fh:
            index_bufs[start] = fh.read()
    if not files:
        return [], 0, False

    def get_int(buf, at, width):
        if at + width > len(buf):
            raise _Stop("underflow")
        return int.from_bytes(buf[at:at + width], "big", signed=True)

    def index_of(entry_index):
        off = entry_index * 32
        buf = index_bufs.get(off - off % index_file_size)
        if buf is None or off % index_file_size + 32 > len(buf):
            raise _Stop("no index record")
        return parse_index_record(buf, off % index_file_size)

    def check(cond):
        if not cond:
            raise _Stop("precondition")

    def header(buf, rel):
        return [get_int(buf, rel + o, w) for o, w in ((0, 4), (4, 4), (8, 8), (16, 8), (24, 8), (44, 4))]

    idx = max(0, len(files) - 3)
    for i in range(idx, -1, -1):
        idx = i
        try:
            magic, size, entry_index, term, pos, body_size = header(bufs[i], 0)
            check(magic != -1 and magic >= MAGIC_1 and MAGIC_1 <= CURRENT_MAGIC)  # sic: only magic >= 1
            check(size > DLEDGER_HEADER_SIZE)
            check(pos == files[i][0])
            check(body_size + BODY_OFFSET == size)
            check(index_of(entry_index) == (magic, pos, size, entry_index, term))
            break
        except _Stop:
            continue
    buf, start = bufs[idx], files[idx][0]
    rel = 0
    last_index, last_term = -1, -1
    process = start
    need_write_index = False
    walked = []
    while True:
        try:
            magic = get_int(buf, rel, 4)
            if magic == -1:
                process = start + data_file_size
                idx += 1
                if idx >= len(files):
                    break
                buf, start, rel = bufs[idx], files[idx][0], 0
                process = start
                continue
            _m, size, entry_index, term, pos, body_size = header(buf, rel)
            absolute = start + rel
            check(pos == absolute)
            check(body_size + BODY_OFFSET == size)
            check(0 <= rel + size <= len(buf))  # byteBuffer.position(relativePos + size)
            check(MAGIC_1 <= magic <= CURRENT_MAGIC)
            if last_index != -1:
                check(entry_index == last_index + 1)
            check(term >= last_term)
            check(size > DLEDGER_HEADER_SIZE)
            if not need_write_index:
                try:
                    check(index_of(entry_index) == (magic, absolute, size, entry_index, term))
                except _Stop:
                    need_write_index = True
            walked.append((entry_index, term, absolute, size))
            last_index, last_term = entry_index, term
            process += size
            rel += size
        except _Stop:
            break
    assert not files[-1][0] - process > data_file_size, "DLedger 0.2.7 would exit: processOffset too small"
    return walked, process, need_write_index


def window_start_index(node, raw, data_file_size):
    """Index of the first entry in data file n-3 (where DLedger's walk starts)."""
    starts = [s for s, _ in store_files(node, "data")]
    first = starts[max(0, len(starts) - 3)]
    return next(i for i, r in enumerate(raw) if parse_header(r)["pos"] >= first)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_reimplementation_reproduces_the_fixture_manifests(name):
    """Sanity check of the re-implementation: on DLedger's own stores it finds DLedger's end."""
    _n, dsize, isize = FIXTURE_STORES[name]
    walked, process, rebuild = dledger_027_recover(fixture_path(name), dsize, isize)
    rows = [tuple(int(x) for x in line.split()[:4]) for line in read_manifest(name)[1:]]
    assert walked == rows[-len(walked):] and len(walked) > 40
    assert process == rows[-1][2] + rows[-1][3]
    assert rebuild is False


@pytest.mark.parametrize("count,noop_at", [(90, None), (90, 80), (90, 89), (150, None)])
def test_dledger_027_recovers_project_stores_up_to_the_first_noop(tmp_path, count, noop_at):
    node = tmp_path / "dledger-n0"
    raw = write_project_store(node, count=count, terms=(1, 2, 2, 5), noop_at=noop_at)
    assert len(store_files(node, "data")) > 3  # the walk starts after file 0
    walked, process, rebuild = dledger_027_recover(node, 4096, 256)
    first = window_start_index(node, raw, 4096)
    stop = count if noop_at is None else noop_at
    assert first < stop
    want = [(i, parse_header(r)["term"], parse_header(r)["pos"], len(r)) for i, r in enumerate(raw)][first:stop]
    assert walked == want
    if noop_at is None:
        with FileStore.open(str(node), read_only=True) as s:
            assert process == s.write_pos
    else:
        assert process == parse_header(raw[noop_at])["pos"]
    assert rebuild is False  # every index record agrees with its entry


def test_dledger_027_recovers_project_stores_after_truncate_and_follower_appends(tmp_path):
    leader_dir, follower_dir = tmp_path / "dledger-n0", tmp_path / "dledger-n1"
    raw = write_project_store(leader_dir, count=120, terms=(1, 2, 3))
    with FileStore.open(str(follower_dir), data_file_size=4096, index_file_size=256) as f:
        f.append_follower(b"".join(raw[:100]))
        f.truncate(70)
        f.append_follower(b"".join(raw[70:110]))
        f.truncate(105)
        f.append_leader([b"own entry", b""], term=4)
        end, end_pos = f.end_index, f.write_pos
    walked, process, rebuild = dledger_027_recover(follower_dir, 4096, 256)
    assert (walked[-1][0], process, rebuild) == (end, end_pos, False)
    assert walked[-3][:3] == (104, parse_header(raw[104])["term"], parse_header(raw[104])["pos"])
