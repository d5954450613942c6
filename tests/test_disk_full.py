"""A full disk: the store puts back a write that fails half-way, so a batch is appended
whole or not at all, and everything resumes when space returns."""

from __future__ import annotations

import errno
import hashlib
import os

import pytest

import store.filestore as filestore
from store.errors import StoreIOError
from store.filestore import FileStore


class Disk:
    """Makes the creation of new store files fail with ENOSPC while ``full``."""

    def __init__(self, monkeypatch) -> None:
        self.full = False
        self.refused = 0
        real = filestore._preallocate

        def preallocate(fd, size):
            if self.full:
                self.refused += 1
                raise StoreIOError(errno.ENOSPC, "disk full: cannot allocate a new store file")
            real(fd, size)

        monkeypatch.setattr(filestore, "_preallocate", preallocate)


def snapshot(node) -> dict[str, str]:
    out = {}
    for sub in ("data", "index"):
        for name in sorted(os.listdir(os.path.join(node, sub))):
            with open(os.path.join(node, sub, name), "rb") as fh:
                out[f"{sub}/{name}"] = hashlib.sha256(fh.read()).hexdigest()
    return out


SIZES = {"data_file_size": 4096, "index_file_size": 512}  # 16 index records per index file


@pytest.mark.parametrize("what", ["data", "index"])
def test_a_leader_batch_that_needs_a_new_file_on_a_full_disk_is_not_appended_at_all(tmp_path, monkeypatch, what):
    disk = Disk(monkeypatch)
    node = str(tmp_path / "dledger-n0")
    with FileStore.open(node, **SIZES) as s:
        if what == "data":
            s.append_leader([b"a" * 1000] * 3, 1)  # ~3.1 KiB of the first 4 KiB data file
            batch = [b"b" * 500] * 4  # the second of these needs the next data file
        else:
            s.append_leader([b"a" * 10] * 14, 1)  # 14 of the 16 records of the first index file
            batch = [b"b" * 10] * 4
        before = (s.end_index, s.end_term, s.write_pos, s.last_chain)
        s.flush()
        files = snapshot(node)
        disk.full = True
        with pytest.raises(StoreIOError) as info:
            s.append_leader(batch, 2)
        assert info.value.errno == errno.ENOSPC and disk.refused == 1
        assert (s.end_index, s.end_term, s.write_pos, s.last_chain) == before
        s.flush()
        assert snapshot(node) == files  # the part that fitted was zeroed, the new file is gone
        assert s.get(before[0]).body[:1] == b"a"
        disk.full = False  # space returns: the same batch goes in whole
        got = s.append_leader(batch, 2)
        assert [a.index for a in got] == list(range(before[0] + 1, before[0] + 5))
    with FileStore.open(node, **SIZES) as s:
        assert not s.recovery.changed
        assert [e.body[:1] for e in s.entries()][-5:] == [b"a", b"b", b"b", b"b", b"b"]


def test_a_follower_push_that_needs_a_new_file_on_a_full_disk_leaves_the_log_as_it_was(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    leader, follower = str(tmp_path / "dledger-n0"), str(tmp_path / "dledger-n1")
    with FileStore.open(leader, **SIZES) as L, FileStore.open(follower, **SIZES) as F:
        L.append_leader([b"x" * 900] * 8, 1)
        F.append_follower(L.read_entries(0, 3, 1 << 20)[0])
        before = (F.end_index, F.write_pos)
        F.flush()
        files = snapshot(follower)
        disk.full = True
        with pytest.raises(StoreIOError):
            F.append_follower(L.read_entries(3, 5, 1 << 20)[0])  # entries 3.. reach the second data file
        F.flush()
        assert (F.end_index, F.write_pos) == before and snapshot(follower) == files
        disk.full = False
        F.append_follower(L.read_entries(3, 5, 1 << 20)[0])
        assert [F.get_bytes(i) for i in range(8)] == [L.get_bytes(i) for i in range(8)]
