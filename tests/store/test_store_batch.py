"""The run lanes of the write and replication paths (store/batch.py) must agree with the
per-entry lanes of store/filestore.py, compiled (store/_lanes.c) and in Python.

Each test does the same work three times: with the run lanes forced on for every stretch of
four or more entries (and the Python per-entry lanes for the rest), with the compiled
per-entry lanes, and with the Python ones alone; it compares everything observable: the
bytes of every data and index file, what the calls return, and the errors they raise
(type and message) on damaged input. Data files are small, so batches cross file ends and
BLANK padding falls inside them.
"""

from __future__ import annotations

import random
import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import store.batch as batch_mod
import store.appending as filestore_mod
import store.logreads as logreads_mod
from tests.support.stores import all_digests, sample_bodies
from store.base import Appended, AppendedBatch, appended_rows
from store.errors import StoreError
from store.filestore import FileStore
from store.format import ENTRY_HEADER, HEADER_SIZE, MAGIC_NOOP, encode_entry
from store.packed import PackedBodies

DSIZE, ISIZE = 8192, 1024
# name: (RUN_MIN, compiled per-entry lanes)
# (the run lanes serve only stores without the compiled lanes, which are faster at any length)
LANES = {"run": (4, False), "compiled": (1 << 30, True), "python": (1 << 30, False)}
COMPILED = filestore_mod._lanes  # None when store._lanes is not built (test_store_lanes says so)


def set_lane(monkeypatch, name: str) -> None:
    run_min, compiled = LANES[name]
    monkeypatch.setattr(batch_mod, "RUN_MIN", run_min)
    monkeypatch.setattr(filestore_mod, "RUN_MIN", run_min)
    monkeypatch.setattr(logreads_mod, "RUN_MIN", run_min)
    monkeypatch.setattr(filestore_mod, "_lanes", COMPILED if compiled else None)


def all_same(results: dict) -> bool:
    first = next(iter(results.values()))
    return len(results) == len(LANES) and all(r == first for r in results.values())


def open_store(path, **kw) -> FileStore:
    return FileStore.open(str(path), data_file_size=DSIZE, index_file_size=ISIZE, **kw)


def fill(store: FileStore, sizes_per_batch, term=1, seed=0) -> list:
    rng = random.Random(seed)
    out = []
    for n in sizes_per_batch:
        bodies = [rng.randbytes(rng.choice((0, 1, 7, 100, 333, 900))) for _ in range(n)]
        out.append(store.append_leader(bodies, term))
        term += rng.choice((0, 0, 1))
    return out


def test_run_lane_is_used_and_returns_columns(tmp_path, monkeypatch):
    set_lane(monkeypatch, "run")
    with open_store(tmp_path / "a") as s:
        got = s.append_leader([b"x" * 10] * 6, 3)
        assert isinstance(got, AppendedBatch)
        assert got == [Appended(i, 3, i * 58, 58) for i in range(6)]
        assert got[1:3] == [Appended(1, 3, 58, 58), Appended(2, 3, 116, 58)]
        assert appended_rows(got[4:]) == [(4, 3, 232, 58), (5, 3, 290, 58)]
        raw, count = s.read_entries(0, 100, 1 << 20)
        assert count == 6 and raw == b"".join(s.get_bytes(i) for i in range(6))


@pytest.mark.parametrize("with_crc", [True, False])
def test_leader_lanes_write_identical_files(tmp_path, monkeypatch, with_crc):
    plan = [1, 5, 37, 2, 64, 4, 4, 120]  # about 20 KiB per 37 entries: several files, BLANKs mid-batch
    results = {}
    for name in LANES:
        set_lane(monkeypatch, name)
        node = tmp_path / name / "dledger-n0"
        with open_store(node, with_crc=with_crc) as s:
            results[name] = ([list(a) for a in fill(s, plan)], s.end_index, s.write_pos, s.last_chain)
            s.append_leader([b""], s.end_term + 1, MAGIC_NOOP)
        results[name] += (all_digests(node),)
    assert all_same(results)
    assert len([k for k in results["run"][-1] if k.startswith("data/")]) >= 5


def packed(bodies, rng: random.Random) -> PackedBodies:
    """``bodies`` as a PackedBodies of runs of random lengths (as APPENDs of many clients make)."""
    out, i = PackedBodies(), 0
    while i < len(bodies):
        k = rng.randint(1, len(bodies) - i)
        run = bodies[i:i + k]
        out.add(struct.pack(f">{k}i", *map(len, run)) + b"".join(run), k)
        i += k
    return out


@pytest.mark.parametrize("with_crc", [True, False])
def test_packed_bodies_are_written_as_a_list_of_them_is(tmp_path, monkeypatch, with_crc):
    plan = [1, 5, 37, 2, 64, 4, 4, 120]
    results = {}
    for name in LANES:
        set_lane(monkeypatch, name)
        for form in ("list", "packed"):
            node = tmp_path / f"{name}-{form}" / "dledger-n0"
            rng, shape = random.Random(1), random.Random(2)
            got = []
            with open_store(node, with_crc=with_crc) as s:
                term = 1
                for n in plan:
                    bodies = [rng.randbytes(rng.choice((0, 1, 7, 100, 333, 900))) for _ in range(n)]
                    got.append(list(s.append_leader(packed(bodies, shape) if form == "packed" else bodies, term)))
                    term += rng.choice((0, 0, 1))
                results[name, form] = (got, s.end_index, s.write_pos, s.last_chain)
            results[name, form] += (all_digests(node),)
    first = next(iter(results.values()))
    assert len(results) == 2 * len(LANES) and all(r == first for r in results.values())
    assert len([k for k in first[-1] if k.startswith("data/")]) >= 5


def test_packed_bodies_too_big_for_a_data_file_are_refused_whole(tmp_path, monkeypatch):
    for name in LANES:
        set_lane(monkeypatch, name)
        with open_store(tmp_path / name) as s:
            s.append_leader([b"a"], 1)
            bodies = packed([b"x" * 10, b"y" * DSIZE, b"z"], random.Random(0))
            with pytest.raises(StoreError, match="does not fit"):
                s.append_leader(bodies, 1)
            assert s.end_index == 0


def test_leader_run_lane_bytes_equal_encode_entry(tmp_path, monkeypatch):
    set_lane(monkeypatch, "run")
    bodies = sample_bodies(50, seed=3, max_size=300)
    with open_store(tmp_path / "a") as s:
        s.append_leader(bodies, 7)
        chain, expect = 0, []
        for i, body in enumerate(bodies):
            pos = s.get(i).pos
            expect.append(encode_entry(body, index=i, term=7, pos=pos, prev_chain=chain))
            chain = ENTRY_HEADER.unpack_from(expect[-1])[6]
        assert [s.get_bytes(i) for i in range(50)] == expect


def test_read_entries_lanes_agree(tmp_path, monkeypatch):
    node = tmp_path / "dledger-n0"
    with open_store(node) as s:
        fill(s, [30, 1, 50, 9, 77], seed=5)
    rng = random.Random(11)
    queries = [(rng.randrange(0, 167), rng.choice((1, 3, 4, 5, 16, 200)), rng.choice((1, 100, 2000, 9000, 1 << 20)))
               for _ in range(300)]
    got = {}
    for name in LANES:
        set_lane(monkeypatch, name)
        with open_store(node, read_only=True) as s:
            got[name] = [s.read_entries(*q) for q in queries]
    assert all_same(got)
    assert any(count >= 4 for _raw, count in got["run"])


@pytest.mark.parametrize("lane", LANES)
def test_read_entries_serves_a_leaders_latest_appends_as_written(tmp_path, monkeypatch, lane):
    """Right after leader appends, read_entries answers from the bytes just written, not
    from the files, and exactly as a read from the files would. A cut or a follower's
    write makes it read the files again."""
    set_lane(monkeypatch, lane)
    rng = random.Random(21)
    served = 0
    with open_store(tmp_path / "dledger-n0") as s:
        fill(s, [3, 40, 1, 25, 9, 60], seed=8)
        for _ in range(300):
            assert s.reads._tail
            first = rng.randrange(max(0, s.end_index - 150), s.end_index + 1)
            q = first, rng.choice((1, 2, 5, 16, 200)), rng.choice((1, 100, 2000, 9000, 1 << 20))
            s.reads._last_read = None
            served += s.reads.from_tail(*q) is not None
            got = s.read_entries(*q)
            remembered = s.reads._tail, s.reads._tail_head, s.reads._tail_bytes
            s.reads.forget()
            assert s.read_entries(*q) == got, q
            s.reads._tail, s.reads._tail_head, s.reads._tail_bytes = remembered
            fill(s, [rng.choice((1, 4, 30))], term=s.end_term, seed=rng.randrange(1 << 30))
        assert served > 100
        # a cut forgets; reads after it come from the files and stop at the new end
        end = s.end_index
        s.truncate(end - 3)
        assert s.reads._tail == [] and s.reads._last_read is None
        raw, n = s.read_entries(end - 10, 100, 1 << 20)
        assert n == 7 and raw == b"".join(s.get_bytes(i) for i in range(end - 10, end - 3))
        fill(s, [5], term=s.end_term)
        s.append_follower(b"")  # a follower's write, even of nothing, forgets
        assert s.reads._tail == []


def test_a_leader_keeps_no_more_of_its_writes_than_it_says(tmp_path, monkeypatch):
    """TAIL_BYTES bounds the bytes kept for read_entries, however many writes went by
    (the kept writes had once been dropped from the lookup but not from memory)."""
    monkeypatch.setattr(logreads_mod, "TAIL_BYTES", 20_000)
    with FileStore.open(str(tmp_path / "dledger-n0"), data_file_size=1 << 20, index_file_size=ISIZE * 64) as s:
        for k in range(3000):
            s.append_leader([bytes([k % 256]) * 3000] * (1 + k % 3), 1)
            kept = [w for w in s.reads._tail if w is not None]
            assert sum(len(w[2]) for w in kept) <= 20_000 + 3 * 3048
            assert len(s.reads._tail) <= 2 * len(kept) + 1025
        last = s.end_index
        assert s.reads.from_tail(last, 1, 1 << 20) == (s.get_bytes(last), 1)
        assert s.reads.from_tail(last - 200, 1, 1 << 20) is None  # long dropped: the files answer


@pytest.mark.parametrize("field,offset", [("pos", 4), ("size", 12), ("index", 16), ("term", 24)])
def test_read_entries_with_a_damaged_index_record_fails_alike(tmp_path, monkeypatch, field, offset):
    node = tmp_path / "dledger-n0"
    with open_store(node) as s:
        fill(s, [40], seed=2)
    victim = 9
    path = node / "index" / f"{0:020d}"
    with open(path, "r+b") as fh:  # 40 records fit the first index file
        fh.seek(victim * 32 + offset)
        old = fh.read(4)
        fh.seek(victim * 32 + offset)
        fh.write(bytes(b ^ 0x55 for b in old))
    outcomes = {}
    for name in LANES:
        set_lane(monkeypatch, name)
        with open_store(node, read_only=True) as s:
            out = []
            for first in (0, 5, 9, 10):
                try:
                    out.append(s.read_entries(first, 30, 1 << 20))
                except StoreError as exc:
                    out.append((type(exc).__name__, str(exc)))
            outcomes[name] = out
    assert all_same(outcomes)


def _leader_raw(tmp_path, count=60, seed=4):
    node = tmp_path / "leader" / "dledger-n0"
    with open_store(node) as s:
        fill(s, [count // 3, count - count // 3], seed=seed)
        return s.get_raw(0, 1 << 20, 1 << 30)


def _follow(tmp_path, monkeypatch, name, prefix: bytes, batch: bytes, max_term=None):
    set_lane(monkeypatch, name)
    node = tmp_path / name / "dledger-n0"
    if node.exists():
        shutil.rmtree(node)
    with open_store(node) as s:
        if prefix:
            s.append_follower(prefix)
        try:
            got = [list(a) for a in s.append_follower(batch, max_term=max_term)]
        except StoreError as exc:
            got = (type(exc).__name__, str(exc))
        state = (s.begin_index, s.end_index, s.end_term, s.write_pos, s.last_chain)
    return got, state, all_digests(node)


def test_follower_lanes_agree_on_a_clean_batch(tmp_path, monkeypatch):
    raw = _leader_raw(tmp_path)
    first = _split_point(raw, 7)
    got = {name: _follow(tmp_path, monkeypatch, name, raw[:first], raw[first:]) for name in LANES}
    assert all_same(got) and len(got["run"][0]) == 53


def _split_point(raw: bytes, k: int) -> int:
    off = 0
    for _ in range(k):
        off += ENTRY_HEADER.unpack_from(raw, off)[1]
    return off


_FIELDS = {"magic": (0, ">i"), "size": (4, ">i"), "index": (8, ">q"), "term": (16, ">q"), "pos": (24, ">q"),
           "chain": (36, ">i"), "bcrc": (40, ">i"), "bsize": (44, ">i")}


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_follower_lanes_agree_on_damaged_batches(tmp_path_factory, monkeypatch, data):
    tmp = tmp_path_factory.mktemp("follow")
    raw = _leader_raw(tmp, count=45, seed=data.draw(st.integers(0, 3)))
    start = _split_point(raw, data.draw(st.integers(0, 5)))
    prefix, batch = raw[:start], bytearray(raw[start:])
    kind = data.draw(st.sampled_from(["field", "byte", "cut", "none"]))
    nth = data.draw(st.integers(0, 38))
    at = _split_point(bytes(batch), nth) if nth < 40 else 0
    if kind == "field" and at < len(batch):
        name = data.draw(st.sampled_from(sorted(_FIELDS)))
        off, fmt = _FIELDS[name]
        value = struct.unpack_from(fmt, batch, at + off)[0]
        delta = data.draw(st.sampled_from([-1, 1, 2, -1000, 1 << 20]))
        lo, hi = (-(1 << 31), (1 << 31) - 1) if fmt == ">i" else (-(1 << 63), (1 << 63) - 1)
        struct.pack_into(fmt, batch, at + off, min(hi, max(lo, value + delta)))
    elif kind == "byte" and len(batch):
        i = data.draw(st.integers(0, len(batch) - 1))
        batch[i] ^= data.draw(st.integers(1, 255))
    elif kind == "cut":
        batch = batch[: data.draw(st.integers(0, len(batch)))]
    max_term = data.draw(st.sampled_from([None, 1, 2, 100]))
    assert all_same({name: _follow(tmp, monkeypatch, name, prefix, bytes(batch), max_term) for name in LANES})


def test_follower_run_lane_crosses_file_ends(tmp_path, monkeypatch):
    raw = _leader_raw(tmp_path, count=90, seed=1)
    got = {name: _follow(tmp_path, monkeypatch, name, b"", raw) for name in LANES}
    assert all_same(got)
    assert len(got["run"][0]) == 90
    assert sum(1 for k in got["run"][2] if k.startswith("data/")) >= 3


def test_pushed_run_refuses_bad_first_entry():
    assert batch_mod.accept_pushed(b"\0" * 100, 0, 100, end_index=-1, end_term=0, write_pos=0, file_size=DSIZE,
                                   max_term=None) is None
    entry = encode_entry(b"abc", index=0, term=1, pos=0)
    chained, chain = [], 0
    for i in range(200):
        chained.append(encode_entry(b"abc", index=i, term=1, pos=i * len(entry), prev_chain=chain))
        chain = ENTRY_HEADER.unpack_from(chained[-1])[6]
    many = b"".join(chained)
    run = batch_mod.accept_pushed(many, 0, len(many), end_index=-1, end_term=0, write_pos=0, file_size=1 << 20,
                                  max_term=None)
    assert run is not None and run.count == 200 and run.nbytes == len(many) and run.last_chain == \
        ENTRY_HEADER.unpack_from(many, len(many) - len(entry))[6]
    # the same entries where the log does not continue: refused at once
    assert batch_mod.accept_pushed(many, 0, len(many), end_index=5, end_term=0, write_pos=0, file_size=1 << 20,
                                   max_term=None) is None
    # a chain CRC that does not follow the entry before it ends the run there (here the
    # 100th entry's), as does a first entry that does not follow the log's last chain
    bad = bytearray(many)
    bad[100 * len(entry) + 36 + 2] ^= 0x04
    run = batch_mod.accept_pushed(bytes(bad), 0, len(bad), end_index=-1, end_term=0, write_pos=0, file_size=1 << 20,
                                  max_term=None, prev_chain=0)
    assert run is not None and run.count == 100
    assert batch_mod.accept_pushed(many, 0, len(many), end_index=-1, end_term=0, write_pos=0, file_size=1 << 20,
                                   max_term=None, prev_chain=99) is None
    assert HEADER_SIZE == 48
