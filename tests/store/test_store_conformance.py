"""One conformance suite for both stores (store/base.py's rules): the file store with small
files (data 4096, index 256, so entries cross files and BLANK padding happens) under both
flush policies, and the memory store configured with the same data file size.

Positions are checked against a model of DLedger's BLANK rule written here: an entry goes
at the write position if it plus an 8-byte BLANK header fits in the rest of the file,
otherwise at the start of the next file.
"""

from __future__ import annotations

import random
import struct
import zlib

import pytest

from tests.support.stores import describe, parse_header
from store.base import Appended
from store.errors import InconsistentAppend, IndexOutOfRange, StoreError, StoreUsageError
from store.filestore import FileStore
from store.format import MAGIC_CONFIG, MAGIC_NOOP, MAGIC_NORMAL, encode_entry
from store.memstore import MemoryStore

DATA = 4096
INDEX = 256
KINDS = ["file-async", "file-sync", "memory"]


def open_store(kind, path, **kw):
    if kind == "memory":
        return MemoryStore(data_file_size=DATA, **kw)
    return FileStore.open(str(path), data_file_size=DATA, index_file_size=INDEX, flush=kind.split("-")[1], **kw)


@pytest.fixture
def make(request, tmp_path):
    """``make(kind, name)``: a new empty store of that kind; all are closed at teardown."""
    opened = []

    def factory(kind, name="n0", **kw):
        s = open_store(kind, tmp_path / name / "dledger-n0", **kw)
        opened.append(s)
        return s

    yield factory
    for s in opened:
        s.close()


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture
def store(make, kind):
    return make(kind)


def other_kind(kind):
    return "memory" if kind.startswith("file") else "file-async"


def model_positions(sizes, start=0, fsize=DATA):
    out, pos = [], start
    for size in sizes:
        if size + 8 > fsize - pos % fsize:
            pos += fsize - pos % fsize
        out.append(pos)
        pos += size
    return out


def body_crc_ref(body):
    return zlib.crc32(body) & 0x7FFFFFFF


def chain_ref(prev, index, term, bcrc):
    return zlib.crc32(struct.pack(">iqqi", prev, index, term, bcrc)) & 0x7FFFFFFF


def state(s):
    return (s.begin_index, s.end_index, s.end_term, s.committed_index, s.write_pos)


BODIES = [bytes([i % 251]) * ((i * 379) % 1500) for i in range(40)]


# --- appending ----------------------------------------------------------------------------

def test_empty_store(store):
    assert state(store) == (-1, -1, 0, -1, 0)
    for call in (lambda: store.get(0), lambda: store.term_of(0), lambda: store.get_range(0, 1),
                 lambda: store.get_raw(0, 1, 100), lambda: store.get_bytes(0)):
        with pytest.raises(IndexOutOfRange):
            call()
    assert store.truncate(0) == 0
    assert store.set_committed(5) == -1
    assert list(store.entries()) == []


def test_append_single_and_batch(store):
    a = store.append(b"first", term=1)
    assert a == Appended(0, 1, 0, 53)
    batch = store.append_leader(BODIES, term=2)
    assert [x.index for x in batch] == list(range(1, 41))
    assert [x.term for x in batch] == [2] * 40
    assert [x.size for x in batch] == [48 + len(b) for b in BODIES]
    assert [x.pos for x in batch] == model_positions([48 + len(b) for b in BODIES], start=53)
    assert len({x.pos // DATA for x in batch}) > 5  # the batch really crossed files
    c = store.append(b"", term=2)
    assert c.index == 41 and c.size == 48
    assert state(store) == (0, 41, 2, -1, c.pos + 48)
    assert store.append_leader([], term=2) == []
    assert store.end_index == 41


def test_blank_rule_at_the_boundary(store):
    got = [store.append(b"a" * 3992, 1),  # 4040 bytes: 56 left
           store.append(b"", 1),  # 48 + 8 == 56: fits exactly
           store.append(b"", 1),  # 8 left: next file
           store.append(b"b" * 4000, 1),  # at 4144: 4048 + 8 > 4048 left
           store.append(b"c" * 4040, 1)]  # 4088 + 8 == 4096: a whole file
    assert [(a.pos, a.size) for a in got] == [(0, 4040), (4040, 48), (4096, 48), (8192, 4048), (12288, 4088)]
    nxt = store.append(b"", 1)
    assert nxt.pos == 16384
    assert [store.get(i).pos for i in range(6)] == [0, 4040, 4096, 8192, 12288, 16384]


def test_entry_too_large_for_a_file_is_rejected(store):
    store.append(b"x", 1)
    before = state(store)
    with pytest.raises(StoreUsageError):
        store.append(b"y" * (DATA - 48 - 8 + 1), 1)
    assert state(store) == before
    # A batch holding one oversized body appends nothing at all.
    with pytest.raises(StoreUsageError):
        store.append_leader([b"ok", b"z" * DATA, b"ok"], 1)
    assert state(store) == before
    assert store.append(b"next", 1).index == 1
    biggest = store.append(b"w" * (DATA - 48 - 8), 1)
    assert (biggest.pos, biggest.size) == (DATA, DATA - 8)


def test_magic_values(store):
    store.append(b"n", 1)
    store.append(b"", 2, magic=MAGIC_NOOP)
    store.append_leader([b"cfg"], 2, magic=MAGIC_CONFIG)
    assert [store.get(i).magic for i in range(3)] == [MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG]
    assert [parse_header(store.get_bytes(i))["magic"] for i in range(3)] == [1, 2, 3]
    for bad in (0, -1, 4):
        with pytest.raises(StoreUsageError):
            store.append(b"x", 2, magic=bad)
    assert store.end_index == 2


def test_term_below_end_term_rejected(store):
    store.append_leader([b"a", b"b"], term=3)
    before = state(store)
    with pytest.raises(StoreUsageError):
        store.append(b"c", term=2)
    with pytest.raises(StoreUsageError):
        store.append_leader([b"c", b"d"], term=1)
    assert state(store) == before
    assert store.append(b"c", term=3).index == 2  # the same term is fine
    assert store.append(b"d", term=9).term == 9  # and terms may jump


# --- reading ------------------------------------------------------------------------------

def test_get_get_range_get_raw(store):
    store.append_leader(BODIES[:20], term=1)
    store.append_leader(BODIES[20:], term=4)
    sizes = [48 + len(b) for b in BODIES]
    positions = model_positions(sizes)
    for i, body in enumerate(BODIES):
        e = store.get(i)
        assert (e.index, e.term, e.pos, e.magic, e.body, e.channel) == (i, 1 if i < 20 else 4, positions[i], 1, body, 0)
        assert e.size == sizes[i]
        raw = store.get_bytes(i)
        assert parse_header(raw) == {"magic": 1, "size": sizes[i], "index": i, "term": e.term, "pos": positions[i],
                                     "channel": 0, "chain_crc": e.chain_crc, "body_crc": e.body_crc,
                                     "body_size": len(body)}
        assert raw[48:] == body
    assert [e.index for e in store.get_range(10, 5)] == [10, 11, 12, 13, 14]
    assert [e.index for e in store.get_range(37, 10)] == [37, 38, 39]  # clipped at the end
    assert store.get_range(5, 0) == []
    with pytest.raises(IndexOutOfRange):
        store.get_range(40, 1)
    with pytest.raises(IndexOutOfRange):
        store.get(-1)
    whole = store.get_raw(0, 1000, 1 << 30)
    assert whole == b"".join(store.get_bytes(i) for i in range(40))
    assert store.get_raw(3, 2, 1 << 30) == store.get_bytes(3) + store.get_bytes(4)
    # max_bytes: as many whole entries as fit, but always at least one
    limit = sizes[5] + sizes[6] + sizes[7] - 1
    assert store.get_raw(5, 100, limit) == store.get_bytes(5) + store.get_bytes(6)
    assert store.get_raw(5, 100, 1) == store.get_bytes(5)


def test_term_of_and_first_index_of_term(store):
    store.append_leader([b"a"] * 3, term=1)  # 0..2
    store.append_leader([b"b"] * 4, term=3)  # 3..6
    store.append(b"c", term=4)  # 7
    store.append_leader([b"d"] * 2, term=7)  # 8..9
    assert [store.term_of(i) for i in range(10)] == [1, 1, 1, 3, 3, 3, 3, 4, 7, 7]
    assert [store.first_index_of_term(i) for i in range(10)] == [0, 0, 0, 3, 3, 3, 3, 7, 8, 8]
    with pytest.raises(IndexOutOfRange):
        store.term_of(10)
    with pytest.raises(IndexOutOfRange):
        store.first_index_of_term(10)


def test_checksums_chain_through_the_log(store):
    store.append_leader(BODIES[:10], term=1)
    store.append_leader(BODIES[10:15], term=2)
    prev = 0
    for i in range(15):
        e = store.get(i)
        assert e.body_crc == body_crc_ref(e.body)
        assert e.chain_crc == chain_ref(prev, i, e.term, e.body_crc)
        prev = e.chain_crc


def test_without_crc_both_fields_are_zero(make, kind):
    s = make(kind, with_crc=False)
    s.append_leader([b"abc", b""], term=1)
    assert [(s.get(i).body_crc, s.get(i).chain_crc) for i in range(2)] == [(0, 0), (0, 0)]


# --- truncation and the committed index -----------------------------------------------------

def test_truncate(store):
    store.append_leader(BODIES[:25], term=1)
    store.append_leader(BODIES[25:], term=2)
    positions = [store.get(i).pos for i in range(40)]
    assert store.truncate(40) == 0 and store.truncate(100) == 0
    assert store.truncate(30) == 10
    # The next write goes where the first dropped entry was (as DLedger's truncateOffset(pos)).
    assert (store.end_index, store.end_term, store.write_pos) == (29, 2, positions[30])
    with pytest.raises(IndexOutOfRange):
        store.get(30)
    assert store.truncate(25) == 5
    assert (store.end_index, store.end_term) == (24, 1)  # the last term goes back with the log
    a = store.append(b"again", term=1)  # so a lower term than before is accepted again
    assert (a.index, a.pos) == (25, positions[25])
    assert store.get(25).body == b"again"
    assert store.get(25).chain_crc == chain_ref(store.get(24).chain_crc, 25, 1, body_crc_ref(b"again"))
    # Truncate everything: the log keeps its begin index, the next entry takes index 0 again.
    assert store.truncate(0) == 26
    assert (store.begin_index, store.end_index, store.end_term, store.write_pos) == (0, -1, 0, 0)
    assert store.append(b"new", term=5) == Appended(0, 5, 0, 51)
    assert store.get(0).chain_crc == chain_ref(0, 0, 5, body_crc_ref(b"new"))
    with pytest.raises(IndexOutOfRange):
        store.truncate(-1)


def test_truncate_refuses_committed_entries_without_force(store):
    store.append_leader(BODIES[:20], term=1)
    assert store.set_committed(9) == 9
    before = state(store)
    for i in (0, 5, 9):
        with pytest.raises(StoreUsageError):
            store.truncate(i)
    assert state(store) == before
    assert store.truncate(10) == 10 and store.committed_index == 9
    assert store.truncate(8, force=True) == 2
    assert (store.end_index, store.committed_index) == (7, 7)
    assert store.truncate(0, force=True) == 8
    assert (store.end_index, store.committed_index) == (-1, -1)


def test_committed_index_never_above_end_never_backwards(store):
    assert store.set_committed(0) == -1
    store.append_leader([b"x"] * 5, term=1)
    assert store.set_committed(2) == 2
    assert store.set_committed(1) == 2 and store.committed_index == 2
    assert store.set_committed(100) == 4 and store.committed_index == 4
    assert store.set_committed(-1) == 4
    store.append(b"y", term=1)
    assert store.committed_index == 4
    assert store.set_committed(10**12) == 5


# --- follower appends -----------------------------------------------------------------------

def fill(s):
    s.append_leader(BODIES[:15], term=1)
    s.append(b"", term=2, magic=MAGIC_NOOP)
    s.append_leader(BODIES[15:], term=2)
    return s


def test_follower_append_copies_bytes_exactly(make, kind):
    leader = fill(make(kind, "leader"))
    follower = make(other_kind(kind), "follower")
    got = []
    i = 0
    while i <= leader.end_index:  # batches bounded by count and bytes, as a leader pushes them
        raw = leader.get_raw(i, 7, 3000)
        got += follower.append_follower(raw)
        i = follower.end_index + 1
    assert [a.index for a in got] == list(range(41))
    assert got == [Appended(e.index, e.term, e.pos, e.size) for e in leader.entries()]
    assert [follower.get_bytes(i) for i in range(41)] == [leader.get_bytes(i) for i in range(41)]
    assert describe(follower) == describe(leader)
    assert (follower.end_term, follower.write_pos) == (leader.end_term, leader.write_pos)
    # Both continue identically as leaders afterwards (same positions, same chain).
    assert follower.append(b"tail", 3) == leader.append(b"tail", 3)
    assert follower.get_bytes(41) == leader.get_bytes(41)
    assert follower.append_follower(b"") == []


def test_follower_rejects_what_does_not_continue_the_log(make, kind):
    leader = fill(make(other_kind(kind), "leader"))
    f = make(kind, "follower")
    f.append_follower(leader.get_raw(0, 20, 1 << 30))
    assert f.end_index == 19
    before = state(f)
    nxt = bytearray(leader.get_bytes(20))

    def rejected(raw):
        with pytest.raises(InconsistentAppend):
            f.append_follower(bytes(raw))
        assert state(f) == before

    rejected(leader.get_bytes(21))  # index gap
    rejected(leader.get_bytes(19))  # index already present
    moved = bytearray(nxt)
    struct.pack_into(">q", moved, 24, parse_header(nxt)["pos"] + 8)
    rejected(moved)  # wrong pos
    moved = bytearray(nxt)
    struct.pack_into(">q", moved, 24, f.write_pos)  # where it would go without the BLANK rule
    if f.write_pos != parse_header(nxt)["pos"]:
        rejected(moved)
    crc = bytearray(nxt)
    crc[-1] ^= 0x01
    rejected(crc)  # body does not match bodyCrc
    if len(nxt) > 48:
        flipped = bytearray(nxt)
        flipped[48] ^= 0x80
        rejected(flipped)
    lower = encode_entry(b"old", index=20, term=1, pos=parse_header(nxt)["pos"], prev_chain=f.get(19).chain_crc)
    rejected(lower)  # term below the local last term (2)
    rejected(nxt[:47])  # not even a header
    rejected(nxt[:-1])  # body cut short
    bad_magic = bytearray(nxt)
    struct.pack_into(">i", bad_magic, 0, 7)
    rejected(bad_magic)
    bad_size = bytearray(nxt)
    struct.pack_into(">i", bad_size, 4, len(nxt) + 1)
    rejected(bad_size)
    # and the right bytes are still accepted
    assert f.append_follower(bytes(nxt)) == [Appended(20, 2, parse_header(nxt)["pos"], len(nxt))]


def test_follower_accepts_entries_without_checksums(make, kind):
    leader = make(other_kind(kind), "leader", with_crc=False)
    leader.append_leader(BODIES[:12], term=1)
    f = make(kind, "follower")
    f.append_follower(leader.get_raw(0, 100, 1 << 30))
    assert [f.get_bytes(i) for i in range(12)] == [leader.get_bytes(i) for i in range(12)]
    assert [(f.get(i).body_crc, f.get(i).chain_crc) for i in range(12)] == [(0, 0)] * 12


# --- both stores agree on any sequence of operations ------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_random_operations_agree_with_the_memory_store(make, seed):
    rng = random.Random(seed)
    f = make("file-async", "file")
    m = make("memory")
    term = 1

    def both(op):
        results = []
        for s in (f, m):
            try:
                results.append(("ok", op(s)))
            except StoreError as exc:
                results.append((type(exc).__name__,))
        assert results[0] == results[1], op
        return results[0]

    for step in range(120):
        r = rng.random()
        if r < 0.45:
            bodies = [rng.randbytes(rng.choice((0, 1, 10, 300, 1200, 3000, 4040, 4041))) for _ in range(rng.randrange(1, 5))]
            both(lambda s: s.append_leader(bodies, term))
        elif r < 0.55:
            term += rng.randrange(0, 3)
            both(lambda s: s.append(b"", term, magic=MAGIC_NOOP))
        elif r < 0.7 and m.end_index >= 0:
            cut = rng.randrange(m.begin_index, m.end_index + 2)
            force = rng.random() < 0.3
            both(lambda s: s.truncate(cut, force=force))
            term = max(term, m.end_term)
        elif r < 0.8:
            target = rng.randrange(-1, m.end_index + 3)
            both(lambda s: s.set_committed(target))
        elif r < 0.85:
            late = rng.randrange(0, term + 1)
            both(lambda s: s.append(b"late", late))
        elif m.end_index >= 0:
            i = rng.randrange(m.begin_index, m.end_index + 1)
            both(lambda s: (s.get(i), s.get_bytes(i), s.term_of(i), s.first_index_of_term(i)))
            n, lim = rng.randrange(1, 6), rng.randrange(1, 9000)
            both(lambda s: s.get_raw(i, n, lim))
        assert state(f) == state(m)
        assert f.committed_index <= f.end_index
    assert describe(f) == describe(m)
    assert [f.get_bytes(i) for i in range(f.end_index + 1)] == [m.get_bytes(i) for i in range(m.end_index + 1)]


# --- the file store on disk -----------------------------------------------------------------

@pytest.mark.parametrize("flush", ["async", "sync"])
def test_file_store_reopens_identically(tmp_path, flush):
    node = tmp_path / "dledger-n0"
    s = FileStore.open(str(node), data_file_size=DATA, index_file_size=INDEX, flush=flush)
    fill(s)
    s.set_committed(30)
    before = describe(s)
    raw = [s.get_bytes(i) for i in range(41)]
    end_pos = s.write_pos
    s.close()
    with pytest.raises(StoreUsageError):
        s.append(b"closed", 2)
    for read_only in (True, False):
        with FileStore.open(str(node), read_only=read_only, flush=flush) as again:
            assert describe(again) == before
            assert before[0] == "END 40 2 BEGIN 0 COMMITTED 30"
            assert [again.get_bytes(i) for i in range(41)] == raw
            assert (again.write_pos, again.last_chain) == (end_pos, again.get(40).chain_crc)
            assert (again.data.file_size, again.index.file_size) == (DATA, INDEX)
            if not read_only:
                assert not again.recovery.changed
    # appending after a reopen continues the log, positions and chain where they were
    with FileStore.open(str(node), flush=flush) as again:
        a = again.append(b"after reopen", term=2)
        assert (a.index, a.pos) == (41, model_positions([a.size], start=end_pos)[0])
        assert again.get(41).chain_crc == chain_ref(raw_chain(raw[40]), 41, 2, body_crc_ref(b"after reopen"))
        again.truncate(35)
    with FileStore.open(str(node), flush=flush) as again:
        assert describe(again) == ["END 34 2 BEGIN 0 COMMITTED 30"] + before[1:36]
        assert [again.get_bytes(i) for i in range(35)] == raw[:35]
        assert not again.recovery.changed


def raw_chain(raw):
    return parse_header(raw)["chain_crc"]


def test_file_store_committed_index_comes_from_the_last_checkpoint(tmp_path):
    node = tmp_path / "dledger-n0"
    s = FileStore.open(str(node), data_file_size=DATA, index_file_size=INDEX)
    s.append_leader(BODIES[:20], term=1)
    s.set_committed(5)
    s.persist_checkpoint()
    s.set_committed(15)
    s.flush()
    # A second open while the first is still running sees what a crash would leave.
    with FileStore.open(str(node), read_only=True) as seen:
        assert (seen.end_index, seen.committed_index) == (19, 5)
    s.close()
    with FileStore.open(str(node), read_only=True) as seen:
        assert (seen.end_index, seen.committed_index) == (19, 15)
    # A checkpoint above the recovered end is capped at the end.
    with open(node / "checkpoint", "w") as fh:
        fh.write("committedIndex=500\nendIndex=500\n")
    with FileStore.open(str(node)) as again:
        assert again.committed_index == 19


def test_read_only_store_refuses_writes(tmp_path):
    node = tmp_path / "dledger-n0"
    with FileStore.open(str(node), data_file_size=DATA, index_file_size=INDEX) as s:
        s.append_leader([b"a", b"b"], 1)
    with FileStore.open(str(node), read_only=True) as ro:
        for call in (lambda: ro.append(b"c", 1), lambda: ro.append_leader([b"c"], 1),
                     lambda: ro.append_follower(b""), lambda: ro.truncate(0, force=True),
                     lambda: ro.persist_checkpoint()):
            with pytest.raises(StoreUsageError):
                call()
        assert ro.end_index == 1
    with pytest.raises(StoreUsageError):
        FileStore.open(str(tmp_path / "missing"), read_only=True)
    with pytest.raises(StoreUsageError):
        FileStore.open(str(node), flush="sometimes")
    with pytest.raises(StoreUsageError):
        FileStore.open(str(tmp_path / "other"), index_file_size=100)
