"""Drop-behind: a node's background flush drops flushed data further than ``drop_behind``
bytes behind the log's end from the page cache (store.files.FileList.take_dirty and
sync_fds), and nothing else: the jobs' ranges, the marks across files, rewrites below the
mark, and what the kernel then holds (mincore) for pages behind and inside the window."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

import pytest
import typer
from typer.testing import CliRunner

from cluster.raft.config import ConfigError, NodeConfig, parse_peers
from dledgerctl.app import app
from dledgerctl.common import parse_size, parse_size_or_zero
from store.errors import StoreUsageError
from store.filestore import FileStore
from store.files import DROP_ALIGN, PAGE, FileList, sync_fds

DATA_FILE = 64 << 10
BODY = bytes(range(256)) * 4  # 1 KiB; entries are 1,072 bytes on disk
ENTRY = 1072


def open_store(path, drop_behind):
    return FileStore.open(str(path), data_file_size=DATA_FILE, index_file_size=4096 * 32, drop_behind=drop_behind)


def fill(store, n):
    store.append_leader([BODY] * n, 1)


def data_jobs(store):
    """take_dirty's data-file jobs, each as (file start, sync, lo, hi); the fds are closed."""
    jobs = store.take_dirty(index=False)
    starts = {}
    for f in store.data.files:
        st = os.fstat(f.fd)
        starts[(st.st_dev, st.st_ino)] = f.start
    out = []
    for j in jobs:
        st = os.fstat(j.fd)
        out.append((starts[(st.st_dev, st.st_ino)], j.sync, j.drop_lo, j.drop_hi))
        os.close(j.fd)
    return sorted(out)


def test_jobs_drop_whole_pages_behind_the_window_once(tmp_path):
    window = 40 << 10
    with open_store(tmp_path / "n", window) as store:
        fill(store, 150)  # ~157 KiB: files at 0, 64 Ki and 128 Ki
        front = store.write_pos
        jobs = data_jobs(store)
        assert [s for s, *_ in jobs] == [0, DATA_FILE, 2 * DATA_FILE]
        assert all(sync for _s, sync, _lo, _hi in jobs)
        limit = front - window
        for start, _sync, lo, hi in jobs:
            expect = max(0, min(DATA_FILE, limit - start))
            expect -= expect % PAGE
            assert (lo, hi) == ((0, expect) if expect else (0, 0)), start
        # nothing written since: nothing to sync, nothing more to drop
        assert data_jobs(store) == []
        # a few more entries: the newly passed pages (from the last mark rounded down to
        # DROP_ALIGN, for a large folio that straddled it), and the older file gets a
        # drop-only job (it was synced by the flush before)
        fill(store, 20)
        jobs = data_jobs(store)
        new_limit = store.write_pos - window
        by_start = {s: (sync, lo, hi) for s, sync, lo, hi in jobs}
        for start, (sync, lo, hi) in by_start.items():
            old = max(0, min(DATA_FILE, limit - start))
            old -= old % PAGE
            new = max(0, min(DATA_FILE, new_limit - start))
            new -= new % PAGE
            assert (lo, hi) == ((old - old % DROP_ALIGN, new) if new > old else (0, 0)), start
        assert by_start[2 * DATA_FILE][0] is True  # the file written to is synced
        assert 0 not in by_start  # all of it was dropped the first time
        assert by_start[DATA_FILE] == (False, 0, DATA_FILE)  # synced before: only dropped from


def test_no_window_no_drops_and_a_negative_one_is_refused(tmp_path):
    with open_store(tmp_path / "n", 0) as store:
        fill(store, 150)
        assert all((lo, hi) == (0, 0) for _s, _sync, lo, hi in data_jobs(store))
    with pytest.raises(StoreUsageError, match="drop-behind"):
        open_store(tmp_path / "m", -1)
    with pytest.raises(ConfigError, match="--drop-behind must be at least 0, not -1"):
        NodeConfig("g", "n0", parse_peers("n0-127.0.0.1:1"), drop_behind=-1)


def test_a_rewrite_below_the_mark_is_dropped_again(tmp_path):
    window = 8 << 10
    with open_store(tmp_path / "n", window) as store:
        fill(store, 40)  # 42 KiB in the first file
        jobs = data_jobs(store)
        assert jobs[0][3] > 16 << 10
        mark = store.data.files[0].dropped_to
        store.truncate(5, force=True)  # the log goes back below the mark ...
        fill(store, 40)  # ... and is written again over the dropped range
        jobs = data_jobs(store)
        lo, hi = jobs[0][2], jobs[0][3]
        rewrite_at = 5 * ENTRY - 5 * ENTRY % PAGE
        assert lo <= rewrite_at < mark <= hi, (lo, rewrite_at, mark, hi)


def _resident(path: str) -> list[bool]:
    """Which pages of ``path`` are in the page cache (mincore on a fresh mapping, which
    faults nothing in)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    size = os.path.getsize(path)
    pages = (size + PAGE - 1) // PAGE
    fd = os.open(path, os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
        buf = ctypes.c_char.from_buffer(mm)
        vec = (ctypes.c_ubyte * pages)()
        try:
            if libc.mincore(ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_size_t(size), vec) != 0:
                pytest.skip(f"mincore failed: {os.strerror(ctypes.get_errno())}")
            return [bool(v & 1) for v in vec]
        finally:
            del buf
            mm.close()
    finally:
        os.close(fd)


def _drops_pages(tmp_path) -> bool:
    """Whether this filesystem drops clean pages on POSIX_FADV_DONTNEED (tmpfs does not)."""
    probe = tmp_path / "probe"
    probe.write_bytes(b"x" * (4 * PAGE))
    fd = os.open(probe, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return not any(_resident(str(probe)))


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise")
def test_pages_behind_the_window_leave_the_cache_and_the_rest_stay(tmp_path):
    """With 1 MiB files written 8 entries at a time, then one at a time: every page further
    behind than the window, but for the folio (at most the 16 KiB a write can make) at its
    edge, leaves the cache; every page inside it stays."""
    if not _drops_pages(tmp_path):
        pytest.skip("this filesystem keeps clean pages on POSIX_FADV_DONTNEED")
    window, slack = 512 << 10, 16 << 10
    with FileStore.open(str(tmp_path / "n"), data_file_size=1 << 20, index_file_size=4096 * 32,
                        drop_behind=window) as store:
        # 8 at a time (pwrite), then one at a time (through the mapping: pages mapped in
        # this process, which the kernel does not drop until the store unmaps them)
        for n, per in ((2000, 8), (1504, 8), (800, 1)):
            for _ in range(n // per):
                fill(store, per)
            front = store.write_pos
            sync_fds(store.take_dirty())
            for f in store.data.files:
                resident = _resident(f.path)
                behind = max(0, min(f.size, front - window - slack - f.start)) // PAGE
                inside = -(-max(0, min(f.size, front - window - f.start)) // PAGE)
                written = -(-max(0, min(f.size, front - f.start)) // PAGE)
                assert not any(resident[:behind]), (n, f.name, resident.index(True))
                assert all(resident[inside:written]), (n, f.name)
        # everything is still there, read back from disk where it was dropped
        assert [e.body for e in store.get_range(0, 4304)] == [BODY] * 4304


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise")
def test_a_large_folio_across_the_last_mark_leaves_with_the_next_flush(tmp_path):
    """Written 64 KiB at a time at 64 KiB boundaries, the page cache holds 64 KiB folios
    (where the kernel makes large folios at all), and the kernel drops a folio only when
    the range covers all of it. The first flush's mark is put 5 pages into one; the next
    flush must take that folio too, not start at the mark."""
    if not _drops_pages(tmp_path):
        pytest.skip("this filesystem keeps clean pages on POSIX_FADV_DONTNEED")
    chunk = 64 << 10
    fl = FileList(str(tmp_path / "data"), 4 << 20, writable=True)
    fl.load()
    try:
        for k in range(16):
            fl.write(k * chunk, bytes([k + 1]) * chunk)
        fl.drop_behind = 16 * chunk - (4 * chunk + 5 * PAGE)  # the mark: 5 pages into the 5th chunk
        sync_fds(fl.take_dirty())
        assert fl.files[0].dropped_to == 4 * chunk + 5 * PAGE
        first = _resident(fl.files[0].path)
        assert not any(first[: 4 * chunk // PAGE])
        for k in range(16, 32):
            fl.write(k * chunk, bytes([k + 1]) * chunk)
        fl.drop_behind = 16 * chunk
        sync_fds(fl.take_dirty())
        resident = _resident(fl.files[0].path)
        assert not any(resident[: 16 * chunk // PAGE]), resident.index(True)
        assert all(resident[16 * chunk // PAGE : 32 * chunk // PAGE])
        assert fl.read(4 * chunk, 8) == bytes([5]) * 8
    finally:
        fl.close()


def test_node_start_takes_drop_behind_and_refuses_a_bad_size():
    runner = CliRunner()
    res = runner.invoke(app, ["node", "start", "--id", "n0", "--peers", "n0-127.0.0.1:1", "--drop-behind", "lots"])
    assert res.exit_code == 2
    assert "is not a size" in res.output
    help_text = runner.invoke(app, ["node", "start", "--help"], terminal_width=200).output
    assert "--drop-behind" in help_text
    assert parse_size_or_zero("0") == 0 and parse_size_or_zero("256MiB") == 256 << 20
    with pytest.raises(typer.BadParameter):
        parse_size("0")  # (file sizes stay positive)
