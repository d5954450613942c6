"""store._flusher (a flush thread that never takes the interpreter lock) against
store.files.sync_fds, and cluster.node.background.BackgroundSync, which runs either for a node.

Both ways must keep sync_fds's rules: every fd of a batch is closed whatever fails, the
first failure is what is reported (StoreIOError "flush failed: ..."), and what was written
is on disk when a batch says it is done.
"""

from __future__ import annotations

import asyncio
import errno
import os
import select
import shutil
import sys
import sysconfig
import time

import pytest

from cluster.node.background import BackgroundSync
from store import files as files_mod
from store.errors import StoreIOError
from store.files import SyncJob, sync_fds

Flusher = files_mod.Flusher


def test_the_flusher_is_built_on_linux_where_there_is_a_compiler():
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None or not sys.platform.startswith("linux"):
        pytest.skip("no C compiler, or not Linux: nodes flush through sync_fds in a pool thread")
    assert Flusher is not None, "store._flusher was not built: see the output of pip install -e ."


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        assert exc.errno == errno.EBADF
        return False
    return True


def _wait_done(fl, deadline_s: float = 10.0) -> int:
    """collect() once the flusher's eventfd says its batch is done."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        ready, _, _ = select.select([fl.fileno()], [], [], max(0.0, end - time.monotonic()))
        if ready:
            code = fl.collect()
            if code >= 0:
                return code
    raise AssertionError("the flusher did not finish within the deadline")


def _jobs(tmp_path, n: int = 2):
    """n files with data written, and a job per file (dup'd fd, as take_dirty gives)."""
    jobs, fds = [], []
    for k in range(n):
        fd = os.open(tmp_path / f"f{k}", os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, b"x" * 8192, 0)
        fds.append(fd)
        jobs.append(SyncJob(os.dup(fd), True, 0, 4096 * (k % 2)))
    return jobs, fds


@pytest.fixture
def flusher():
    if Flusher is None:
        pytest.skip("store._flusher is not built")
    fl = Flusher()
    yield fl
    fl.close()


@pytest.fixture
def files(tmp_path):
    """make(n): n files with data written and a job per file, as _jobs; the files' own
    fds are closed after the test."""
    opened: list[int] = []

    def make(n: int):
        jobs, fds = _jobs(tmp_path, n)
        opened.extend(fds)
        return jobs, fds

    yield make
    for fd in opened:
        os.close(fd)


def _bad_job():
    """A job whose fdatasync fails: a pipe cannot be synced (EINVAL)."""
    r, w = os.pipe()
    os.close(w)
    return SyncJob(r, True, 0, 4096)


def test_a_batch_is_synced_and_its_fds_closed(flusher, files):
    fl = flusher
    jobs, fds = files(3)
    assert not fl.busy
    fl.submit(jobs)
    assert fl.busy
    assert _wait_done(fl) == 0
    assert not fl.busy
    assert not any(_is_open(j.fd) for j in jobs)
    assert all(_is_open(fd) for fd in fds)  # only the duplicates are the flusher's
    assert fl.collect() == -1  # nothing more to report
    fl.submit([])  # an empty batch is done at once
    assert _wait_done(fl) == 0


def test_a_failure_is_reported_by_errno_and_every_fd_is_still_closed(flusher, files):
    good, _fds = files(2)
    bad = _bad_job()
    flusher.submit([good[0], bad, good[1]])
    assert _wait_done(flusher) == errno.EINVAL
    assert not any(_is_open(j.fd) for j in (*good, bad))


def test_sync_fds_reports_the_same_failure(files):
    good, _fds = files(2)
    bad = _bad_job()
    with pytest.raises(StoreIOError, match=f"^flush failed: {os.strerror(errno.EINVAL)}$"):
        sync_fds([good[0], bad, good[1]])
    assert not any(_is_open(j.fd) for j in (*good, bad))


def test_one_batch_at_a_time_and_bad_jobs_are_refused_with_their_fds_closed(flusher, files):
    fl = flusher
    jobs, fds = files(2)
    fl.submit(jobs[:1])
    with pytest.raises(RuntimeError, match="in progress"):
        fl.submit(jobs[1:])
    assert _is_open(jobs[1].fd)  # refused before it took anything
    assert _wait_done(fl) == 0
    extra = os.dup(fds[0])
    with pytest.raises(TypeError):
        fl.submit([SyncJob(extra, True, 0, 0), (jobs[1].fd, True, "lo", 0)])
    assert not _is_open(extra)  # taken before the bad job: closed, as submit promises
    assert not fl.busy
    with pytest.raises(TypeError):
        fl.submit(None)
    fl.submit(jobs[1:])
    assert _wait_done(fl) == 0


def test_close_finishes_the_batch_under_way_and_refuses_more(flusher, files):
    fl = flusher
    jobs, _fds = files(4)
    fl.submit(jobs)
    fl.close()  # joins the thread: the batch ran to its end
    assert not any(_is_open(j.fd) for j in jobs)
    with pytest.raises(RuntimeError, match="closed"):
        fl.submit([])
    with pytest.raises(ValueError, match="closed"):
        fl.fileno()
    fl.close()  # twice is harmless


@pytest.mark.parametrize("use_compiled", [True, False], ids=["compiled", "pool-thread"])
def test_background_sync_gives_a_future_per_batch(files, use_compiled):
    if use_compiled and Flusher is None:
        pytest.skip("store._flusher is not built")

    async def main():
        bs = BackgroundSync(asyncio.get_running_loop(), compiled=use_compiled)
        assert bs.compiled is use_compiled
        try:
            jobs, fds = files(2)
            await asyncio.wait_for(bs.run(jobs), 10)
            assert not any(_is_open(j.fd) for j in jobs)
            bad = _bad_job()
            with pytest.raises(StoreIOError, match=f"^flush failed: {os.strerror(errno.EINVAL)}$"):
                await asyncio.wait_for(bs.run([bad]), 10)
            assert not _is_open(bad.fd)
            for _ in range(50):  # batch after batch, each reported once
                again = [SyncJob(os.dup(fd), True, 0, 0) for fd in fds]
                await asyncio.wait_for(bs.run(again), 10)
        finally:
            bs.close()

    asyncio.run(main())
