"""store._lanes, the compiled per-entry lanes, against their Python references.

tests/store/test_store_batch.py runs whole stores through the compiled and the Python lanes and
compares files, answers and errors. Here the compiled functions are held to the Python
ones directly, on arbitrary bytes as well as on damaged pushes: a peer's push must never
crash a node, whatever it holds.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import sysconfig
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import store.appending as filestore_mod
from store.base import Appended, AppendedRun, appended_rows
from store.appending import check_entries
from store.format import ENTRY_HEADER, encode_entry
from tests.support.garble import entry_starts

lanes = filestore_mod._lanes
compiled = pytest.mark.skipif(lanes is None, reason="store._lanes is not built")


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


def test_the_compiled_lanes_are_built_where_there_is_a_compiler():
    if _compiler() is None:
        pytest.skip("no C compiler: the store runs its Python lanes")
    assert lanes is not None, "store._lanes was not built: see the output of pip install -e ."


@compiled
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=3000), value=st.integers(0, 0xFFFFFFFF))
def test_crc32_is_zlibs(data, value):
    assert lanes.crc32(data, value) == zlib.crc32(data, value)


@compiled
def test_crc32_at_every_length_and_alignment():
    # tables below 64 bytes; 128-bit folding from 64; 512-bit folding (where the CPU has
    # AVX-512 VPCLMULQDQ: lanes.VCLMUL) from 256, its 256-byte turns, 64-byte and 16-byte rests
    blob = os.urandom(70000)
    for n in list(range(0, 700)) + [1024, 2047, 2048, 2049, 4095, 4096, 4097, 65536 + 48 + 5]:
        for shift in (0, 1, 7, 13):
            view = memoryview(blob)[shift:shift + n]
            assert lanes.crc32(view) == zlib.crc32(view), (n, shift)


def _entries(count: int, seed: int, fsize: int, term: int = 3, pos: int = 0, first: int = 0) -> bytes:
    """A push: entries laid out as a leader with ``fsize``-byte data files lays them out
    (one that does not fit the rest of a file starts the next one)."""
    rng = random.Random(seed)
    out, chain = [], 0
    for i in range(count):
        body = rng.randbytes(rng.choice((0, 1, 5, 64, 200)))
        rel = pos % fsize
        if 48 + len(body) + 8 > fsize - rel:
            pos += fsize - rel
        e = encode_entry(body, index=first + i, term=term + (i > count // 2), pos=pos, prev_chain=chain)
        chain = ENTRY_HEADER.unpack_from(e)[6]
        pos += len(e)
        out.append(e)
    return b"".join(out)


def _both(buf, off, limit, end_index, end_term, max_term, write_pos, fsize, prev_chain=None):
    args = (buf, off, limit, end_index, end_term, max_term, write_pos, fsize, prev_chain)
    return lanes.check_entries(*args), check_entries(*args)


@compiled
@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 50), count=st.integers(0, 12), flips=st.lists(st.tuples(st.integers(0, 5000),
       st.integers(1, 255)), max_size=3), cut=st.integers(0, 6000), off_entries=st.integers(0, 3),
       limit=st.sampled_from([1, 2, 5, 1 << 30]), max_term=st.sampled_from([None, 3, 4, 100]),
       fsize=st.sampled_from([300, 600, 1 << 20]), end_shift=st.integers(-1, 1), end_term=st.integers(2, 5),
       prev=st.sampled_from(["before", None, 0, 12345]))
def test_check_entries_agrees_with_the_python_lane(seed, count, flips, cut, off_entries, limit, max_term, fsize,
                                                    end_shift, end_term, prev):
    buf = bytearray(_entries(count, seed, fsize)[:cut])
    for at, x in flips:
        if at < len(buf):
            buf[at] ^= x
    off, before = 0, 0
    for _ in range(off_entries):  # start inside the batch, as a follower does after a file end
        if off + 48 > len(buf):
            break
        size = struct.unpack_from(">i", buf, off + 4)[0]
        if size < 48 or off + size > len(buf):
            break
        before = ENTRY_HEADER.unpack_from(buf, off)[6]  # (the chain the next entry follows)
        off += size
    header = ENTRY_HEADER.unpack_from(buf, off) if off + 48 <= len(buf) else None
    end_index = (header[2] - 1 if header else -1) + end_shift
    write_pos = header[4] if header else 0
    got, want = _both(bytes(buf), off, limit, end_index, end_term, max_term, write_pos, fsize,
                      before if prev == "before" else prev)
    assert got == want


@compiled
@pytest.mark.parametrize("field", ["chain", "index", "term"])
def test_a_chain_that_does_not_follow_is_refused_by_both_lanes(field):
    """A header whose chain CRC does not follow the entry before it (a flipped byte of the
    chain, or of the index or term it covers, with the body intact) is refused where it
    is, by the compiled and the Python lane alike; the entries before it are accepted."""
    fsize = 1 << 20
    good = _entries(6, 1, fsize)
    starts = entry_starts(good)
    buf = bytearray(good)
    at = starts[3] + {"chain": 36, "index": 8, "term": 16}[field] + 3
    buf[at] ^= 0x10
    got, want = _both(bytes(buf), 0, 1 << 30, -1, 3, None, 0, fsize, 0)
    assert got == want
    stop, ends, _terms, _records, _chain, _first, failed = got
    assert len(ends) == 3 and stop == starts[3]
    if field == "chain":
        assert failed == ("chain", 3)
    else:  # the index and term checks speak first, for these fields
        assert failed[0] in ("index", "term_high", "term_low", "chain")
    # the first entry is held to the log's last chain: a log that ends elsewhere refuses it
    got, want = _both(good, 0, 1 << 30, -1, 3, None, 0, fsize, 777)
    assert got == want and got[6] == ("chain", 0) and not got[1]
    # and unchecked when the caller does not know it
    got, want = _both(good, 0, 1 << 30, -1, 3, None, 0, fsize, None)
    assert got == want and got[6] is None and len(got[1]) == 6


@compiled
def test_check_entries_ends_a_run_where_the_next_data_file_starts():
    fsize = 300
    def chain(e):
        return ENTRY_HEADER.unpack_from(e)[6]

    a = encode_entry(b"a" * 52, index=5, term=2, pos=150)  # 100 bytes: 150..250
    b = encode_entry(b"b" * 52, index=6, term=2, pos=300, prev_chain=chain(a))  # 250 + 100 + 8 > 300: the next file
    c = encode_entry(b"c" * 52, index=7, term=2, pos=400, prev_chain=chain(b))
    push = a + b + c
    got, want = _both(push, 0, 100, 4, 2, None, 150, fsize)
    assert got == want and got[:3] == (100, [100], [2]) and got[6] is None
    got, want = _both(push, 100, 100, 5, 2, None, 250, fsize)  # the next call: a run of two
    assert got == want and got[:3] == (300, [100, 200], [2, 2]) and got[5] == 300
    d = encode_entry(b"dd", index=6, term=2, pos=300, prev_chain=chain(a))  # 50 bytes would fit 250..300, but not with 8 to spare
    got, want = _both(a + d, 0, 100, 4, 2, None, 150, fsize)
    assert got == want and got[:3] == (100, [100], [2]) and got[6] is None
    # a log position below 0 counts from the file end, as Python's modulo does
    lone = encode_entry(b"e" * 52, index=0, term=1, pos=0)
    got, want = _both(lone, 0, 10, -1, 0, None, -5, fsize)
    assert got == want and got[6] is None
    got, want = _both(push, 0, 100, 4, 3, None, 150, fsize)  # a term below the log's last term
    assert got == want and got[1] == [] and got[6] == ("term_low", 5, 2, 3)


@compiled
@settings(max_examples=300, deadline=None)
@given(buf=st.binary(max_size=400), off=st.integers(0, 400), end_index=st.integers(-2, 3),
       write_pos=st.integers(-(1 << 40), 1 << 40), fsize=st.integers(1, 1 << 62))
def test_check_entries_takes_any_bytes(buf, off, end_index, write_pos, fsize):
    off = min(off, len(buf))
    got, want = _both(buf, off, 1 << 30, end_index, 0, None, write_pos, fsize)
    assert got == want


@compiled
def test_check_entries_refuses_what_cannot_be_a_log():
    with pytest.raises(ValueError):
        lanes.check_entries(b"", 0, 1, -1, 0, None, 0, 0)  # a data file of no bytes
    with pytest.raises(ValueError):
        lanes.check_entries(b"abc", 4, 1, -1, 0, None, 0, 100)
    with pytest.raises(TypeError):
        lanes.check_entries("text", 0, 1, -1, 0, None, 0, 100)


@compiled
@pytest.mark.parametrize("with_crc", [True, False])
def test_encode_entries_writes_what_encode_entry_writes(with_crc):
    rng = random.Random(5)
    bodies = [rng.randbytes(rng.choice((0, 1, 100, 1000))) for _ in range(40)]
    kinds = [bytes, bytearray, memoryview]
    mixed = [kinds[i % 3](b) for i, b in enumerate(bodies)]
    seg, records, ends, stop, chain = lanes.encode_entries(mixed, 3, 17, 9, 2, 5000, 77, with_crc, 1 << 20)
    expect, prev, pos = [], 77, 5000
    for k, body in enumerate(bodies[3:]):
        e = encode_entry(body, index=17 + k, term=9, pos=pos, magic=2, prev_chain=prev, with_crc=with_crc)
        prev = ENTRY_HEADER.unpack_from(e)[6]
        pos += len(e)
        expect.append(e)
    assert seg == b"".join(expect) and stop == 40 and chain == prev
    assert ends == [sum(map(len, expect[:k + 1])) for k in range(len(expect))]
    assert records == b"".join(struct.pack(">iqiqq", 2, 5000 + (ends[k - 1] if k else 0), len(e), 17 + k, 9)
                               for k, e in enumerate(expect))


@compiled
def test_encode_entries_stops_where_the_file_ends():
    bodies = [b"x" * 52] * 10  # 100-byte entries
    seg, records, ends, stop, _chain = lanes.encode_entries(bodies, 0, 0, 1, 1, 0, 0, True, 307)
    assert stop == 2 and ends == [100, 200]  # a third would leave less than 8 bytes
    _seg, _rec, ends, stop, _chain = lanes.encode_entries(bodies, 0, 0, 1, 1, 0, 0, True, 308)
    assert stop == 3 and ends == [100, 200, 300]
    _seg, _rec, ends, stop, _chain = lanes.encode_entries(bodies, 9, 0, 1, 1, 0, 0, True, 10)
    assert stop == 10 and ends == [100]  # the first is always taken: the caller made room
    assert lanes.encode_entries(bodies, 10, 0, 1, 1, 0, 5, True, 10) == (b"", b"", [], 10, 5)
    with pytest.raises(ValueError):
        lanes.encode_entries(bodies, 11, 0, 1, 1, 0, 0, True, 10)
    with pytest.raises(TypeError):
        lanes.encode_entries(["text"], 0, 0, 1, 1, 0, 0, True, 1000)


def test_appended_run_is_a_sequence_of_appended():
    run = AppendedRun(10, 500, [60, 160, 170], [4, 4, 5])
    want = [Appended(10, 4, 500, 60), Appended(11, 4, 560, 100), Appended(12, 5, 660, 10)]
    assert run == want and list(run) == want and len(run) == 3
    assert run[-1] == want[-1] and run[1:] == want[1:]
    assert appended_rows(run) == [tuple(a) for a in want]
    one_term = AppendedRun(0, 0, [50, 100], 7)
    assert one_term.rows() == [(0, 7, 0, 50), (1, 7, 50, 50)]
    with pytest.raises(IndexError):
        run[3]
