"""The scrub of a store's committed entries (store/scrub.py) and the read path's refusal of
damaged bodies (store/logreads.py): real files, bytes flipped in them."""

from __future__ import annotations

import os
import shutil

import pytest

from store.errors import StoreCorruptError
from store.filestore import FileStore
from store.format import ENTRY_HEADER, HEADER_SIZE, INDEX_UNIT_SIZE
from store.scrub import BODY_CRC, CHAIN_CRC, HEADER, INDEX_RECORD_KIND, Mender, Scrub
from store.verify import verify_store

DATA = 64 << 10  # small data files: the log spans several, with BLANK records at their ends
INDEX = INDEX_UNIT_SIZE * 1024


def _bodies(n: int) -> list[bytes]:
    return [f"entry {i} ".encode() * (1 + i % 40) for i in range(n)]


def make(tmp_path, name="n0", n=600, with_crc=True) -> str:
    d = str(tmp_path / name)
    with FileStore.open(d, data_file_size=DATA, index_file_size=INDEX, with_crc=with_crc) as s:
        bodies = _bodies(n)
        for k in range(0, n, 50):
            s.append_leader(bodies[k:k + 50], term=1 + k // 200)
        s.set_committed(n - 1)
        s.flush()
        s.persist_checkpoint()
    return d


def flip(path: str, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0x20]))


def where(s: FileStore, index: int) -> tuple[str, int, int]:
    """(data file path, offset of the entry in it, size) of entry ``index``."""
    pos, size = s.locate(index)
    f = s.data.find(pos)
    return f.path, pos - f.start, size


def damages(s: FileStore, step_bytes=1 << 20, max_steps=10_000):
    """Every damage one full pass finds, and the entries and bytes it checked."""
    scrub, found, entries, nbytes = Scrub(), [], 0, 0
    for _ in range(max_steps):
        st = scrub.step(s, step_bytes)
        entries += st.entries
        nbytes += st.bytes
        if st.damage is not None:
            found.append(st.damage)
        if st.pass_done:
            return found, entries, nbytes
    raise AssertionError("the pass did not end")


@pytest.mark.parametrize("step_bytes", [1, 3000, 1 << 20])
def test_a_sound_store_scrubs_clean_whatever_the_step(tmp_path, step_bytes):
    d = make(tmp_path)
    with FileStore.open(d, read_only=True) as s:
        found, entries, nbytes = damages(s, step_bytes)
        assert found == []
        assert entries == 600
        assert nbytes == sum(s.locate(i)[1] for i in range(600))
        # a second pass starts again at the first entry
        found2, entries2, _ = damages(s, step_bytes)
        assert (found2, entries2) == ([], 600)


@pytest.mark.parametrize("what,kind", [("body", BODY_CRC), ("chain", CHAIN_CRC), ("index", HEADER),
                                       ("magic", HEADER), ("term", CHAIN_CRC)])
def test_each_flip_is_found_as_its_kind_at_its_entry(tmp_path, what, kind):
    # (a flipped term breaks the chain, which covers it, before its order with its neighbours)
    d = make(tmp_path)
    victim = 333
    field = {"body": HEADER_SIZE + 3, "chain": 36 + 2, "index": 8 + 7, "magic": 3, "term": 16 + 7}[what]
    with FileStore.open(d, read_only=True) as s:  # (flipped while open, as in a running member)
        path, off, size = where(s, victim)
        flip(path, off + field)
        found, entries, _ = damages(s, 4096)
        assert [(x.kind, x.index) for x in found][:1] == [(kind, victim)]
        assert (found[0].file, found[0].offset) == (os.path.basename(path), off)
        assert entries == 600
        # one damage, one finding: the entry after a damaged one is not judged by its link
        # to it (a flipped chain field would otherwise blame the next, sound, entry too)
        assert len(found) == 1


def test_a_damaged_first_index_record_is_found_from_where_the_log_begins(tmp_path):
    d = make(tmp_path)
    with FileStore.open(d) as s:
        flip(os.path.join(d, "index", "0" * 20), 0 * INDEX_UNIT_SIZE + 4 + 7)  # entry 0's pos
        found, entries, _ = damages(s)
        assert [(x.kind, x.index, x.pos) for x in found] == [(INDEX_RECORD_KIND, 0, 0)] and entries == 600
        Mender(s).index_record(found[0])
        assert damages(s)[0] == []


def test_a_damaged_index_record_is_found_and_rebuilt_from_the_entry(tmp_path):
    d = make(tmp_path)
    victim = 140
    with FileStore.open(d) as s:
        flip(os.path.join(d, "index", "0" * 20), victim * INDEX_UNIT_SIZE + 4 + 7)  # its pos
        with pytest.raises(StoreCorruptError):
            s.get(victim)
        found, _, _ = damages(s)
        assert [(x.kind, x.index) for x in found] == [(INDEX_RECORD_KIND, victim)]
        Mender(s).index_record(found[0])
        s.flush()
        assert damages(s)[0] == []
        assert s.get(victim).body == _bodies(600)[victim]
    assert verify_store(d).ok


def test_reads_never_return_a_damaged_body(tmp_path):
    d = make(tmp_path)
    victim = 250
    with FileStore.open(d, read_only=True) as s:
        path, off, _ = where(s, victim)
        flip(path, off + HEADER_SIZE)
        with pytest.raises(StoreCorruptError, match=f"entry {victim} .*damaged"):
            s.get(victim, checked=True)
        assert s.get(victim).body != _bodies(600)[victim]  # (unchecked: as it lies, for comparing and keeping)
        with pytest.raises(StoreCorruptError, match=f"entry {victim} "):
            s.read_entries(victim, 100, 1 << 20)
        # (fingerprints read as it lies)
        assert s.read_entries(victim, 1, 0, as_stored=True)[1] == 1
        # a run that reaches it stops just before it, with the sound entries
        raw, n = s.read_entries(victim - 120, 1000, 1 << 20)
        assert n == 120
        assert len(raw) == sum(s.locate(i)[1] for i in range(victim - 120, victim))
        raw, n = s.read_entries(victim + 1, 1000, 1 << 20)  # and reading goes on past it
        assert ENTRY_HEADER.unpack_from(raw)[2] == victim + 1


def test_a_damaged_entry_is_mended_from_a_replicas_copy_checked_first(tmp_path):
    a, b = make(tmp_path, "a"), make(tmp_path, "b")
    victim = 401
    with FileStore.open(b, read_only=True) as replica:
        good = replica.get_bytes(victim)
        other = replica.get_bytes(victim + 1)
    with FileStore.open(a) as s:
        path, off, size = where(s, victim)
        flip(path, off + HEADER_SIZE + 5)
        found, _, _ = damages(s)
        assert [(x.kind, x.index) for x in found] == [(BODY_CRC, victim)]
        m = Mender(s)
        bad = bytearray(good)
        bad[HEADER_SIZE] ^= 1
        with pytest.raises(StoreCorruptError, match="its own CRC"):
            m.entry(found[0], bytes(bad))
        with pytest.raises(StoreCorruptError):
            m.entry(found[0], other)  # another entry's bytes
        with pytest.raises(StoreCorruptError, match="slot"):
            m.entry(found[0], good + b"x")
        assert damages(s)[0] == found  # the refused copies wrote nothing
        with FileStore.open(b, read_only=True) as replica:
            copy = replica.read_entries(victim, 1, 0)[0]
        m.entry(found[0], bytes(copy))
        s.flush()
        assert damages(s)[0] == []
    assert verify_store(a).ok
    with open(path, "rb") as fh, open(path.replace(os.sep + "a" + os.sep, os.sep + "b" + os.sep), "rb") as gh:
        assert fh.read() == gh.read()


@pytest.mark.parametrize("field,xor", [(3, 0x02), (16 + 7, 0x01)], ids=["magic 1 to 3", "term"])
def test_a_header_field_no_crc_covers_is_taken_from_a_replica_not_written_into_the_record(tmp_path, field, xor):
    """A flipped magic (1 -> 3: a config entry) or term whose chain is not checked (the
    first entry a pass checks, in a log without CRCs) disagrees with the index record; which
    is right only a replica knows: not served, and never copied into the record."""
    a, b = make(tmp_path, "a", with_crc=False), make(tmp_path, "b", with_crc=False)
    victim = 0 if field != 3 else 233
    with FileStore.open(b, read_only=True) as replica:
        copy = bytes(replica.get_bytes(victim))
    with FileStore.open(a) as s:
        path, off, _ = where(s, victim)
        with open(path, "r+b") as fh:
            fh.seek(off + field)
            byte = fh.read(1)[0]
            fh.seek(off + field)
            fh.write(bytes([byte ^ xor]))
        with pytest.raises(StoreCorruptError, match=f"entry {victim} .*damaged"):
            s.get(victim, checked=True)
        with pytest.raises(StoreCorruptError, match=f"entry {victim} "):
            s.read_entries(victim, 10, 1 << 20)
        found, _, _ = damages(s)
        assert [(x.kind, x.index) for x in found] == [(HEADER, victim)]
        with pytest.raises(StoreCorruptError, match="magic or term"):
            Mender(s).index_record(found[0])  # (refused even if asked)
        Mender(s).entry(found[0], copy)
        s.flush()
        assert damages(s)[0] == []
        assert s.get_bytes(victim, checked=True) == copy


def test_a_damaged_header_is_mended_too(tmp_path):
    a, b = make(tmp_path, "a"), make(tmp_path, "b")
    victim = 77
    with FileStore.open(b, read_only=True) as replica:
        copy = bytes(replica.get_bytes(victim))
    with FileStore.open(a) as s:
        path, off, _ = where(s, victim)
        flip(path, off + 4 + 2)  # its size field
        found, entries, _ = damages(s)
        assert [(x.kind, x.index) for x in found] == [(HEADER, victim)]
        assert entries == 600
        Mender(s).entry(found[0], copy)
        s.flush()
        assert damages(s)[0] == []
    assert verify_store(a).ok


def test_a_log_without_crcs_shows_only_framing_damage(tmp_path):
    d = make(tmp_path, with_crc=False)
    with FileStore.open(d, read_only=True) as s:
        path, off, _ = where(s, 90)
        flip(path, off + HEADER_SIZE + 1)  # a body byte: nothing records what it was
        assert damages(s)[0] == []
        s.get(90)  # served: nothing tells it is wrong (the replicas' digests do)
        flip(path, off + 8 + 7)
        assert [(x.kind, x.index) for x in damages(s)[0]] == [(HEADER, 90)]


def test_the_cursor_follows_a_log_that_moves(tmp_path):
    d = make(tmp_path)
    with FileStore.open(d) as s:
        scrub = Scrub()
        scrub.step(s, 20_000)
        assert scrub.next_index > 0
        s.truncate(50, force=True)
        assert (s.end_index, s.committed_index) == (49, 49)
        seen = 0
        for _ in range(100):
            st = scrub.step(s, 20_000)
            seen += st.entries
            assert st.damage is None
            if st.pass_done:
                break
        assert scrub.passes == 1
        assert seen == 50  # (the cursor was past the cut end: the pass started again at 0)
    shutil.rmtree(d)
