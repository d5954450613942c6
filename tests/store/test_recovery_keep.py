"""What recovery cuts at open is kept too (issue 48, ``--keep-truncated``): a store opened
with a keeper writes the whole entries past the damage that ends its log into kept files
(a file per run of consecutive ones) before recovery zeroes them; a keep that fails
opens nothing and cuts nothing."""

from __future__ import annotations

import os

import pytest

from store.errors import StoreIOError
from store.filestore import FileStore
from store.format import HEADER_SIZE, decode_header
from store.kept import Keeper, iter_kept, kept_files
from tests.support.stores import file_crcs


def written(node: str, n: int = 120) -> list[bytes]:
    with FileStore.open(node, data_file_size=1 << 13, index_file_size=1 << 12) as s:
        s.append_leader([b"entry-%03d-" % i * (1 + i % 7) for i in range(n)], 1)
        s.set_committed(n - 1)
        return [s.get_bytes(i) for i in range(n)]


def break_magic(node: str, raw: bytes, pos: int, dsize: int = 1 << 13) -> None:
    """Damage entry ``raw`` where recovery must end the log: its magic (a flipped body byte
    no longer does: such an entry is held, issue 58)."""
    path = os.path.join(node, "data", sorted(os.listdir(os.path.join(node, "data")))[pos // dsize])
    with open(path, "r+b") as fh:
        fh.seek(pos % dsize + 3)
        fh.write(bytes([raw[3] ^ 0xFF]))


def pos_of(raw: bytes) -> int:
    return decode_header(raw).pos


def test_the_whole_entries_past_the_damage_are_kept_before_the_cut(tmp_path):
    node, keep = str(tmp_path / "n"), str(tmp_path / "kept")
    raw = written(node)
    break_magic(node, raw[110], pos_of(raw[110]))  # (within the files recovery walks)
    said = []
    with FileStore.open(node, data_file_size=1 << 13, index_file_size=1 << 12,
                        keeper=Keeper(keep, say=lambda text, fields: said.append(text))) as s:
        assert s.end_index == 109
        (path, _size), = kept_files(keep)
        assert os.path.basename(path).startswith("truncated-111-119-")
        assert [(h.index, off) for off, h, _b in iter_kept(path)] == \
            [(i, sum(map(len, raw[111:i]))) for i in range(111, 120)]
        with open(path, "rb") as fh:
            assert fh.read() == b"".join(raw[111:])
        assert any("recovery at open is about to cut, 111..119" in t for t in said)
        assert any("1 of them are not whole" in t for t in said)
        assert s.keeper is not None  # (and it keeps what later cuts remove)


def test_damage_in_two_places_keeps_each_run_apart(tmp_path):
    node, keep = str(tmp_path / "n"), str(tmp_path / "kept")
    raw = written(node)
    break_magic(node, raw[112], pos_of(raw[112]))
    break_magic(node, raw[105], pos_of(raw[105]))
    with FileStore.open(node, data_file_size=1 << 13, index_file_size=1 << 12, keeper=Keeper(keep)) as s:
        assert s.end_index == 104
    got = sorted((os.path.basename(p).split("-")[1:3], [h.index for _o, h, _b in iter_kept(p)])
                 for p, _s in kept_files(keep))
    assert got == sorted([(["106", "111"], list(range(106, 112))), (["113", "119"], list(range(113, 120)))])


def test_without_a_keeper_or_read_only_nothing_is_kept(tmp_path):
    node, keep = str(tmp_path / "n"), str(tmp_path / "kept")
    raw = written(node)
    break_magic(node, raw[110], pos_of(raw[110]))
    before = file_crcs(node)
    with FileStore.open(node, data_file_size=1 << 13, index_file_size=1 << 12, read_only=True,
                        keeper=Keeper(keep)) as s:
        assert s.end_index == 109
    assert not os.path.exists(keep) and file_crcs(node) == before


def test_a_keep_that_fails_opens_nothing_and_cuts_nothing(tmp_path):
    node = str(tmp_path / "n")
    raw = written(node)
    break_magic(node, raw[110], pos_of(raw[110]))
    before = file_crcs(node)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(StoreIOError, match="not-a-dir"):
        FileStore.open(node, data_file_size=1 << 13, index_file_size=1 << 12, keeper=Keeper(str(blocker)))
    assert file_crcs(node) == before  # (the lock file aside: nothing was cut)
    with FileStore.open(node, data_file_size=1 << 13, index_file_size=1 << 12) as s:  # (and it opens again)
        assert s.end_index == 109


def index_unit_path(node: str, unit: int, isize: int = 1 << 12) -> tuple[str, int]:
    off = unit * 32
    return os.path.join(node, "index", f"{off - off % isize:020d}"), off % isize


def test_a_stray_index_record_past_the_end_is_not_taken_for_entries(tmp_path):
    """A record past the last entry's holds whatever a stray byte makes of it: its index is
    never trusted (a number like 2**40 had recovery walk that many units), and a record of
    index 0 there no longer hides the whole entries before it from the keep."""
    node, keep = str(tmp_path / "n"), str(tmp_path / "kept")
    raw = written(node)
    break_magic(node, raw[110], pos_of(raw[110]))
    path, at = index_unit_path(node, 125)  # (past entry 119's record: the index files' tail is zeros)
    with open(path, "r+b") as fh:
        fh.seek(at + 20)  # (the index field of the record: i64 at byte 16)
        fh.write(b"\x01")
    said = []
    with FileStore.open(node, data_file_size=1 << 13, index_file_size=1 << 12,
                        keeper=Keeper(keep, say=lambda text, fields: said.append(text))) as s:
        assert s.end_index == 109
        assert "entries 110..119" in s.recovery_warning()  # (not 110..<the stray number>)
    (kept, _), = kept_files(keep)
    assert [h.index for _o, h, _b in iter_kept(kept)] == list(range(111, 120))
    assert any("units 110..125" in t and "7 of them" in t for t in said), said


def test_the_keep_reads_no_further_than_its_bound(tmp_path, monkeypatch):
    """A cut may be gigabytes: entries are read one at a time as the keeper writes them, and
    no more once its bound is reached."""
    import store.recovery as recovery

    node, keep = str(tmp_path / "n"), str(tmp_path / "kept")
    raw = written(node)
    break_magic(node, raw[100], pos_of(raw[100]))
    reads = []
    whole = recovery._whole_entry
    monkeypatch.setattr(recovery, "_whole_entry", lambda d, x, i: reads.append(i) or whole(d, x, i))
    with FileStore.open(node, data_file_size=1 << 13, index_file_size=1 << 12,
                        keeper=Keeper(keep, max_bytes=len(raw[101]) + len(raw[102]))) as s:
        assert s.end_index == 99
    (kept, _), = kept_files(keep)
    assert [h.index for _o, h, _b in iter_kept(kept)] == [101, 102]
    assert reads == [100, 101, 102, 103]  # (the damaged one, two kept, one that found no room)


def test_a_failed_keep_takes_back_the_files_this_open_kept(tmp_path, monkeypatch):
    node, keep = str(tmp_path / "n"), str(tmp_path / "kept")
    raw = written(node)
    break_magic(node, raw[112], pos_of(raw[112]))
    break_magic(node, raw[105], pos_of(raw[105]))
    before = file_crcs(node)
    keeper = Keeper(keep)
    real, calls = keeper.keep, []

    def second_fails(*args, **kw):
        calls.append(args[0])
        if len(calls) == 2:
            raise StoreIOError("No space left on device")
        return real(*args, **kw)

    monkeypatch.setattr(keeper, "keep", second_fails)
    with pytest.raises(StoreIOError):
        FileStore.open(node, data_file_size=1 << 13, index_file_size=1 << 12, keeper=keeper)
    assert calls == [106, 113] and kept_files(keep) == [] and file_crcs(node) == before
