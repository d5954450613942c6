"""Recovery from damage, on copies of the DLedger 0.2.7 reference stores and on stores
written by the project (with checksums).

For every case: a read-only open reports the end the damage implies and changes no byte;
a writable open keeps every entry before the damage byte for byte, cuts the rest, says so
in its RecoveryReport, leaves no non-zero byte after the end in data or index files,
rebuilds missing index records; a second open finds nothing to do; appending afterwards
works; and DLedger 0.2.7's own recovery (re-implemented in test_store_format.py) walks the
repaired store to the same end. Only store.errors types may be raised.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import pytest

from store.errors import StoreCorruptError
from store.filestore import FileStore
from store.format import file_name
from tests.store.test_store_format import dledger_027_recover
from tests.support.stores import (Base, all_digests, make_base, nonzero_after, parse_header, parse_index_record, patch,
                                  read_logical, store_files, write_project_store)

BASES = ["project", "leader", "follower-truncated"]


@pytest.fixture(params=BASES)
def base(request, tmp_path):
    return make_base(tmp_path, request.param)


@pytest.fixture
def project(tmp_path):
    return make_base(tmp_path, "project")


@dataclass
class Expect:
    keep: int  # entries 0..keep-1 survive
    end_pos: int
    cut_bytes: int = 0
    index_cut_bytes: int = 0
    removed_data_files: list = field(default_factory=list)
    removed_index_files: list = field(default_factory=list)
    index_records_rebuilt: int = 0
    restored_file_size: list = field(default_factory=list)
    ro_unreadable: tuple = ()  # entries a read-only open cannot serve (their index record is gone)


def cleared(b: Base, sub, offset):
    """(bytes recovery zeroes, files it removes) in data/ or index/ when the log's bytes end at
    logical ``offset``. Recovery clears the file holding ``offset`` from there up to its last
    non-zero byte, or up to the file end when a later file holds anything (the report counts
    the range cleared), and removes the files after it. Read from disk here."""
    fsize = b.dsize if sub == "data" else b.isize
    holder = offset - offset % fsize
    files = store_files(b.node, sub)
    later = [(s, p) for s, p in files if s > holder]
    dirty_later = any(open(p, "rb").read().strip(b"\0") for _s, p in later)
    zeroed = 0
    path = b.node / sub / file_name(holder)
    if os.path.exists(path):
        with open(path, "rb") as fh:
            buf = fh.read()
        rel = offset - holder
        tail = len(buf[rel:].rstrip(b"\0"))
        zeroed = len(buf) - rel if (dirty_later and rel < len(buf)) else tail
    if sub == "index" and offset % fsize == 0:
        later = [(s, p) for s, p in files if s >= holder]  # the file starting at the end goes too
    return zeroed, [os.path.basename(p) for _s, p in later]


def data_cut(b: Base, end_pos):
    return cleared(b, "data", end_pos)[0]


def check(b: Base, exp: Expect):
    node = b.node
    before = all_digests(node)
    # read-only: sees the end, changes nothing
    with FileStore.open(str(node), read_only=True) as ro:
        assert (ro.end_index, ro.write_pos) == (exp.keep - 1, exp.end_pos)
        for i in range(exp.keep):
            if i in exp.ro_unreadable:
                with pytest.raises(StoreCorruptError):
                    ro.get_bytes(i)
            else:
                assert ro.get_bytes(i) == b.raw[i]
    assert all_digests(node) == before
    # writable: keeps the prefix, cuts the rest, reports it
    with FileStore.open(str(node)) as s:
        rep = s.recovery
        got = {k: getattr(rep, k) for k in ("cut_bytes", "index_cut_bytes", "removed_data_files",
                                            "removed_index_files", "index_records_rebuilt", "restored_file_size")}
        want = {k: getattr(exp, k) for k in got}
        assert got == want
        assert (rep.end_index, rep.end_pos, s.end_index, s.write_pos) == (exp.keep - 1, exp.end_pos, exp.keep - 1,
                                                                          exp.end_pos)
        assert rep.changed == any(want.values())
        assert [s.get_bytes(i) for i in range(exp.keep)] == b.raw[:exp.keep]
        assert s.end_term == (parse_header(b.raw[exp.keep - 1])["term"] if exp.keep else 0)
        assert s.committed_index == min(b.committed, exp.keep - 1)
    # the files say exactly that much, nothing stale after it
    assert nonzero_after(node, "data", exp.end_pos) == []
    assert nonzero_after(node, "index", exp.keep * 32) == []
    assert all(os.path.getsize(p) == b.dsize for _, p in store_files(node, "data"))
    assert all(os.path.getsize(p) == b.isize for _, p in store_files(node, "index"))
    assert all(s <= exp.end_pos for s, _ in store_files(node, "data"))
    for i in range(exp.keep):
        h = parse_header(b.raw[i])
        rec = parse_index_record(read_logical(node, "index", i * 32, 32, b.isize))
        assert rec == (h["magic"], h["pos"], h["size"], i, h["term"])
    walked, process, rebuild = dledger_027_recover(node, b.dsize, b.isize)
    assert (walked[-1][0] if walked else -1, process, rebuild) == (exp.keep - 1, exp.end_pos, False)
    # nothing more to do on a second open; appending works and reads back
    term = max(parse_header(b.raw[-1])["term"], 1)
    with FileStore.open(str(node)) as s:
        assert not s.recovery.changed and s.end_index == exp.keep - 1
        a = s.append(b"after recovery", term=term)
        room = b.dsize - exp.end_pos % b.dsize
        assert a.index == exp.keep
        assert a.pos == (exp.end_pos if a.size + 8 <= room else exp.end_pos + room)  # the BLANK rule
    with FileStore.open(str(node), read_only=True) as s:
        assert s.end_index == exp.keep and s.get(exp.keep).body == b"after recovery"
        assert [s.get_bytes(i) for i in range(exp.keep)] == b.raw[:exp.keep]
    with FileStore.open(str(node)) as s:
        assert not s.recovery.changed


def cut_from(b: Base, k, **extra):
    """The expectation when entries k.. are cut by damage at entry k (call after the damage)."""
    end_pos = b.pos(k)
    cut, removed = cleared(b, "data", end_pos)
    icut, iremoved = cleared(b, "index", k * 32)
    return Expect(keep=k, end_pos=end_pos, cut_bytes=cut, index_cut_bytes=icut, removed_data_files=removed,
                  removed_index_files=iremoved, **extra)


# --- torn last entry --------------------------------------------------------------------------

def test_torn_last_entry_body_partly_zeroed(base):
    k = base.n - 1
    while len(base.raw[k]) < 60:  # an entry with a body to tear (the last with one)
        k -= 1
    if base.with_crc:
        # zero the last 10 body bytes of entry k, and make it the last entry by zeroing what follows
        end = base.pos(k) + len(base.raw[k])
        patch(base.data_file(end), end % base.dsize - 10, bytes(10))
        if k < base.n - 1:
            patch(base.data_file(end), end % base.dsize, bytes(base.end_pos - end))
        check(base, cut_from(base, k))
    else:
        # DLedger 0.2.7 wrote no checksums: a body with zeros is indistinguishable from a body
        # that holds zeros, and no entry may be dropped on a guess.
        end = base.pos(k) + len(base.raw[k])
        patch(base.data_file(end), end % base.dsize - 10, bytes(10))
        torn = base.raw[k][:-10] + bytes(10)
        base.raw[k] = torn
        check(base, Expect(keep=base.n, end_pos=base.end_pos))


@pytest.mark.parametrize("cut_at", [20, 44, 47])
def test_torn_last_entry_header_cut(base, cut_at):
    """The write stopped inside the header of the last entry (nothing after it was written)."""
    k = base.n - 1
    while len(base.raw[k]) < 60 or base.raw[k][cut_at:48] == bytes(48 - cut_at):
        k -= 1  # the zeroed header bytes must have held something
    p = base.pos(k)
    patch(base.data_file(p), p % base.dsize + cut_at, bytes(base.end_pos - p - cut_at))
    check(base, cut_from(base, k))


def test_last_data_file_truncated_mid_entry(base):
    k = base.n - 2
    p = base.pos(k)
    last = base.data_file(base.end_pos)
    assert base.data_file(p) == last, "entries n-2 and n-1 share the last file"
    os.truncate(last, p % base.dsize + 30)  # inside entry k's header
    exp = cut_from(base, k, restored_file_size=[last.name])
    exp.cut_bytes = data_cut(base, p)  # the header bytes still there
    assert exp.cut_bytes > 0
    check(base, exp)
    assert os.path.getsize(last) == base.dsize


def test_last_data_file_truncated_at_an_entry_boundary(base):
    k = base.n - 1
    p = base.pos(k)
    last = base.data_file(base.end_pos)
    os.truncate(last, p % base.dsize)
    check(base, cut_from(base, k, restored_file_size=[last.name]))


def test_zeroed_tail(base):
    k = base.n - 5
    if k * 32 % base.isize == 0:
        k -= 1
    p = base.pos(k)
    patch(base.data_file(p), p % base.dsize, bytes(base.dsize - p % base.dsize))
    for s, path in store_files(base.node, "data"):
        if s > p:
            patch(path, 0, bytes(base.dsize))
    exp = cut_from(base, k)
    assert exp.cut_bytes == 0 and exp.index_cut_bytes > 0
    check(base, exp)


# --- stale bytes after the end --------------------------------------------------------------------

def test_stale_copy_of_an_earlier_entry_after_the_end(base):
    old = base.raw[3]
    room = base.dsize - base.end_pos % base.dsize
    assert len(old) + 8 < room
    patch(base.data_file(base.end_pos), base.end_pos % base.dsize, old)
    exp = Expect(keep=base.n, end_pos=base.end_pos)
    exp.cut_bytes = data_cut(base, base.end_pos)
    assert exp.cut_bytes == len(old.rstrip(b"\0"))
    check(base, exp)


@pytest.mark.parametrize("gap", [0, 16, 333])
def test_random_junk_after_the_end(base, gap):
    junk = random.Random(gap).randbytes(100)[:-1] + b"\x7f"
    patch(base.data_file(base.end_pos), base.end_pos % base.dsize + gap, junk)
    exp = Expect(keep=base.n, end_pos=base.end_pos, cut_bytes=gap + 100)
    check(base, exp)


def test_a_plausible_next_entry_header_with_junk_body_after_the_end(base):
    """A header that claims to be the next entry (right index, term and pos) whose body is
    cut short by the file end: torn, so not part of the log."""
    from store.format import encode_entry

    p = base.end_pos
    room = base.dsize - p % base.dsize
    fake = encode_entry(b"q" * 10, index=base.n, term=parse_header(base.raw[-1])["term"], pos=p,
                        with_crc=base.with_crc)
    fake = fake[:4] + (room + 100).to_bytes(4, "big") + fake[8:44] + (room + 52).to_bytes(4, "big") + fake[48:]
    patch(base.data_file(p), p % base.dsize, fake)
    check(base, Expect(keep=base.n, end_pos=p, cut_bytes=len(fake)))


def test_stale_data_file_after_the_end(base):
    starts = [s for s, _ in store_files(base.node, "data")]
    stale = base.node / "data" / file_name(starts[-1] + base.dsize)
    with open(base.node / "data" / file_name(starts[-2]), "rb") as fh:
        stale.write_bytes(fh.read())  # an older file's bytes under the next name
    # cut_bytes counts the range cleared, which runs to the file end when a later file holds data
    exp = Expect(keep=base.n, end_pos=base.end_pos, removed_data_files=[stale.name],
                 cut_bytes=base.dsize - base.end_pos % base.dsize)
    assert data_cut(base, base.end_pos) == exp.cut_bytes
    check(base, exp)


# --- index records ---------------------------------------------------------------------------------

def test_missing_index_record_is_rebuilt(base):
    j = base.first_in_file(base.window_files()[0]) + 2  # inside the part recovery walks
    patch(base.index_file(j), j * 32 % base.isize, bytes(32))
    check(base, Expect(keep=base.n, end_pos=base.end_pos, index_records_rebuilt=base.n - j, ro_unreadable=(j,)))


def test_wrong_index_record_is_rebuilt(base):
    j = base.n - 3
    rec = bytearray(read_logical(base.node, "index", j * 32, 32, base.isize))
    rec[11] ^= 0x40  # pos field
    patch(base.index_file(j), j * 32 % base.isize, bytes(rec))
    check(base, Expect(keep=base.n, end_pos=base.end_pos, index_records_rebuilt=3, ro_unreadable=(j,)))


def test_extra_index_record_past_the_end(base):
    n = base.n
    assert n * 32 % base.isize, "the next record slot is inside the last index file"
    patch(base.index_file(n), n * 32 % base.isize, read_logical(base.node, "index", 0, 32, base.isize))
    check(base, Expect(keep=n, end_pos=base.end_pos, index_cut_bytes=32))


def test_stale_index_file_past_the_end(base):
    starts = [s for s, _ in store_files(base.node, "index")]
    stale = base.node / "index" / file_name(starts[-1] + base.isize)
    stale.write_bytes(read_logical(base.node, "index", starts[0], base.isize, base.isize))
    icut, iremoved = cleared(base, "index", base.n * 32)
    assert iremoved == [stale.name]
    assert icut == base.isize - base.n * 32 % base.isize  # the range up to the stale file
    check(base, Expect(keep=base.n, end_pos=base.end_pos, removed_index_files=[stale.name], index_cut_bytes=icut))


# --- damage in the middle of the walked part ----------------------------------------------------------

def test_bad_body_crc_in_the_middle(project):
    b = project
    middle = b.window_files()[1]  # a file before the last one
    k = b.first_in_file(middle) + 1
    while len(b.raw[k]) == 48:
        k += 1
    assert b.pos(k) < b.window_files()[2]
    p = b.pos(k) + 48 + (len(b.raw[k]) - 48) // 2
    patch(b.data_file(p), p % b.dsize, bytes([b.raw[k][p - b.pos(k)] ^ 0x10]))
    # Bit rot in a body does not end the log (issue 58, item 1): the entry is held, never
    # served, and every entry after it is kept, committed or not (they check on their own).
    assert k < b.committed
    check_held(b, [k])


def test_bad_body_crc_past_the_committed_index_with_sound_entries_after_it_is_held(project):
    b = project
    k = b.committed + 3
    assert k < b.n - 1 and len(b.raw[k]) > 48
    p = b.pos(k) + 48
    patch(b.data_file(p), p % b.dsize, bytes([b.raw[k][48] ^ 0x01]))
    check_held(b, [k])


@pytest.mark.parametrize("committed", [False, True], ids=["uncommitted", "committed"])
def test_damaged_entries_at_the_end_are_cut_only_past_the_committed_index(tmp_path, committed):
    """Damaged entries after the last sound one: those the checkpoint says are committed are
    held; from the first one past it the log ends (nothing proves they were acknowledged)."""
    node = tmp_path / "dledger-n0"
    raw = write_project_store(node, count=30, committed=28 if committed else 26)
    for k in (27, 28, 29):
        pos = parse_header(raw[k])["pos"]
        patch(node / "data" / file_name(pos - pos % 8192), pos % 8192 + 40, b"\x7f")  # its bodyCrc field
    with FileStore.open(str(node)) as s:
        if committed:
            assert [h.index for h in s.recovery_held()] == [27, 28] and s.end_index == 28
        else:
            assert s.recovery_held() == [] and s.end_index == 26
        assert s.recovery.end_reason.startswith("bad-body-crc at offset ")
        assert "past the committed index" in s.recovery.end_reason


def check_held(b: Base, held: list[int]) -> None:
    """Recovery keeps the whole log and holds ``held``: changes nothing, serves every other
    entry as written, refuses the held ones, says so once; a second open is the same."""
    before = all_digests(b.node)
    with FileStore.open(str(b.node), read_only=True) as ro:
        assert (ro.end_index, ro.write_pos) == (b.n - 1, b.end_pos)
        assert [h.index for h in ro.plan.held] == held
    assert all_digests(b.node) == before
    for _ in range(2):
        with FileStore.open(str(b.node)) as s:
            assert (s.end_index, s.write_pos, s.end_term) == (b.n - 1, b.end_pos, parse_header(b.raw[-1])["term"])
            assert [h.index for h in s.recovery_held()] == held and not s.recovery.changed
            assert s.recovery_warning() is None
            said = s.recovery_held_warning()
            assert said.startswith(f"recovery kept {len(held)} damaged entr") and f"entry {held[0]} " in said
            for i in range(b.n):
                if i in held:
                    with pytest.raises(StoreCorruptError):
                        s.get_bytes(i, checked=True)
                else:
                    assert s.get_bytes(i, checked=True) == b.raw[i]
            assert s.committed_index == b.committed


@pytest.mark.parametrize("field_off,value", [(8, 12345), (16, 0), (24, 7), (4, 49), (44, 1)],
                         ids=["index", "term-back", "pos", "size", "body-size"])
def test_bad_header_field_in_the_middle(base, field_off, value):
    """Header damage is found with or without checksums (DLedger's own checks)."""
    middle = base.window_files()[1]
    k = base.first_in_file(middle) + 1
    p = base.pos(k)
    width = 8 if field_off in (8, 16, 24) else 4
    assert base.raw[k][field_off:field_off + width] != value.to_bytes(width, "big"), "the damage changes the field"
    assert parse_header(base.raw[k - 1])["term"] > 0  # so term 0 goes back
    patch(base.data_file(p), p % base.dsize + field_off, value.to_bytes(width, "big"))
    check(base, cut_from(base, k))


def test_chain_crc_of_the_first_entry_is_checked(tmp_path):
    node = tmp_path / "dledger-n0"
    write_project_store(node, count=30)
    patch(node / "data" / file_name(0), 36, b"\x55")  # chainCrc of entry 0
    with FileStore.open(str(node), read_only=True) as ro:
        assert ro.plan.entries_walked == 30
    with FileStore.open(str(node)) as s:
        # held, not cut: its place is certain, and entry 1 links to its recomputed chain
        assert s.end_index == 29 and [(h.index, h.status) for h in s.recovery_held()] == [(0, "bad-chain-crc")]
        assert s.get(1, checked=True).index == 1


def test_bad_blank_record_ends_the_log_at_the_file_end(project):
    b = project
    middle = b.window_files()[1]
    last_in_middle = b.first_in_file(b.window_files()[2]) - 1
    blank_at = b.pos(last_in_middle) + len(b.raw[last_in_middle])
    patch(b.data_file(blank_at), blank_at % b.dsize + 4, (1).to_bytes(4, "big"))  # BLANK size wrong
    k = last_in_middle + 1
    exp = cut_from(b, k)
    exp.end_pos = blank_at
    exp.cut_bytes, exp.removed_data_files = cleared(b, "data", blank_at)
    assert exp.cut_bytes == b.dsize - blank_at % b.dsize  # the BLANK record, to the file end
    assert exp.removed_data_files == [file_name(b.window_files()[2])]
    assert middle == blank_at - blank_at % b.dsize
    check(b, exp)


# --- files that are not the store's ----------------------------------------------------------------

def test_garbage_files_are_ignored_and_kept(base):
    extra = {
        "data/notes.txt": b"operator notes\n",
        "data/abc": b"\x00\x01",
        "data/" + "\u00b2" * 20: b"superscript digits",
        "data/00000000000000000000.bak": b"x" * 100,
        "index/README": b"hello",
    }
    for rel, content in extra.items():
        (base.node / rel).write_bytes(content)
    os.mkdir(base.node / "data" / ("1" * 20))  # a directory with a store-like name
    check(base, Expect(keep=base.n, end_pos=base.end_pos))
    for rel, content in extra.items():
        assert (base.node / rel).read_bytes() == content
    assert os.path.isdir(base.node / "data" / ("1" * 20))


def test_empty_node_dir_and_empty_files(tmp_path):
    node = tmp_path / "dledger-n0"
    os.makedirs(node / "data")
    os.makedirs(node / "index")
    with FileStore.open(str(node), read_only=True) as s:
        assert (s.begin_index, s.end_index, s.write_pos) == (-1, -1, 0)
    open(node / "data" / file_name(0), "wb").close()  # created, never written
    with FileStore.open(str(node), read_only=True, data_file_size=4096) as s:
        assert (s.end_index, s.write_pos) == (-1, 0)
    with FileStore.open(str(node), data_file_size=4096, index_file_size=256) as s:
        assert (s.end_index, s.write_pos) == (-1, 0)
        assert s.recovery.restored_file_size == [file_name(0)]
        assert s.append(b"first", 1).pos == 0
    with FileStore.open(str(node)) as s:
        assert s.get(0).body == b"first" and not s.recovery.changed


# --- the start of the walk -------------------------------------------------------------------------

def test_damaged_index_field_of_the_walks_first_entry(base):
    """The first entry of the first walked file has no predecessor to compare with: a bad
    index field there must still end the log there (DLedger checks it against its index
    record and starts earlier), not at the good entry after it."""
    ws_file = base.window_files()[0]
    k = base.first_in_file(ws_file)
    assert base.pos(k) == ws_file
    patch(base.data_file(ws_file), 8, (k + 1000).to_bytes(8, "big"))
    check(base, cut_from(base, k))


def test_missing_index_record_of_the_walks_first_entry(base):
    k = base.first_in_file(base.window_files()[0])
    patch(base.index_file(k), k * 32 % base.isize, bytes(32))
    check(base, Expect(keep=base.n, end_pos=base.end_pos, index_records_rebuilt=base.n - k, ro_unreadable=(k,)))
    with FileStore.open(str(base.node), read_only=True) as s:
        assert s.plan.problems == []


def _flip_chain(b: Base, i):
    pos = b.pos(i)
    old = parse_header(b.raw[i])["chain_crc"]
    patch(b.data_file(pos), pos % b.dsize + 36, (old ^ 0x1000).to_bytes(4, "big"))
    raw = bytearray(b.raw[i])
    raw[36:40] = (old ^ 0x1000).to_bytes(4, "big")
    return bytes(raw)


def test_damaged_chain_of_the_walks_first_entry_is_held(project):
    """The walk's first entry is linked to the entry before the window: a damaged chainCrc
    there is found (the walk starts earlier) and held, and the good entry after it links to
    its recomputed chain, so nothing is cut."""
    ws_file = project.window_files()[0]
    assert ws_file > 0
    k = project.first_in_file(ws_file)
    project.raw[k] = _flip_chain(project, k)
    with FileStore.open(str(project.node)) as s:
        assert [(h.index, h.status) for h in s.recovery_held()] == [(k, "bad-chain-crc")]
        assert (s.end_index, s.write_pos) == (project.n - 1, project.end_pos) and not s.recovery.changed


def test_damaged_chain_just_before_the_window_cuts_nothing(project):
    """A damaged chainCrc in the last entry before the window breaks its link to the first
    walked entry; that entry still links to its successor, so the window is kept whole."""
    k = project.first_in_file(project.window_files()[0])
    project.raw[k - 1] = _flip_chain(project, k - 1)
    check(project, Expect(keep=project.n, end_pos=project.end_pos))


@pytest.mark.parametrize("field_off,value", [(8, 1 << 56), (8, 5)], ids=["index-high", "index"])
def test_damaged_first_entry_of_the_log(tmp_path, field_off, value):
    """Offset 0 holds entry 0, chained from 0: damage there empties the log rather than
    keeping a bad entry 0 (with an index like 2**56) and dropping every good one after it."""
    node = tmp_path / "dledger-n0"
    raw = write_project_store(node, count=20)
    assert len(store_files(node, "data")) <= 3
    width = 8 if field_off == 8 else 4
    old = int.from_bytes(raw[0][field_off:field_off + width], "big")
    patch(node / "data" / file_name(0), field_off, (old ^ value).to_bytes(width, "big"))
    with FileStore.open(str(node), read_only=True) as s:
        assert (s.begin_index, s.end_index, s.write_pos) == (-1, -1, 0)
    with FileStore.open(str(node)) as s:
        assert (s.end_index, s.write_pos) == (-1, 0)
        assert s.recovery.end_reason.split()[:4] == ["index-gap" if field_off == 8 else "bad-chain-crc", "at", "offset", "0"]
        assert s.append(b"new first", 1) == (0, 1, 0, 57)
    assert nonzero_after(node, "data", 57) == []
    assert nonzero_after(node, "index", 32) == []


@pytest.mark.parametrize("field,value", [("size", 10), ("size", -5), ("size", "minus1"), ("size", "plus1"),
                                         ("pos", "plus1"), ("pos", "other"), ("pos", -4096)])
def test_read_only_store_never_serves_other_bytes_for_a_damaged_index_record(project, field, value):
    """A read-only store does not rebuild index records: reading an entry whose record is
    damaged raises StoreCorruptError, never a struct error or the wrong bytes."""
    b = project
    j = b.n - 4
    rec = bytearray(read_logical(b.node, "index", j * 32, 32, b.isize))
    lo, width = (12, 4) if field == "size" else (4, 8)
    cur = int.from_bytes(rec[lo:lo + width], "big", signed=True)
    new = {"minus1": cur - 1, "plus1": cur + 1, "other": b.pos(j - 1)}.get(value, value)
    rec[lo:lo + width] = new.to_bytes(width, "big", signed=True)
    patch(b.index_file(j), j * 32 % b.isize, bytes(rec))
    with FileStore.open(str(b.node), read_only=True) as s:
        assert s.end_index == b.n - 1
        for call in (lambda: s.get_bytes(j), lambda: s.get(j)):
            with pytest.raises(StoreCorruptError):
                call()
        # a batch read across it uses only the records at its ends and checks every header:
        # it either refuses or returns exactly the entries on disk
        for first, count in ((j - 1, 3), (j - 1, 2), (j, 2)):
            try:
                got = s.get_raw(first, count, 1 << 20)
            except StoreCorruptError:
                continue
            assert got == b"".join(b.raw[first:first + count])
        assert s.get_raw(j + 1, 3, 1 << 20) == b"".join(b.raw[j + 1:j + 4])
    check(b, Expect(keep=b.n, end_pos=b.end_pos, index_records_rebuilt=4, ro_unreadable=(j,)))
