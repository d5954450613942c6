"""One writer per node directory: a writable FileStore holds an flock on ``<node>/lock``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from store.errors import StoreInUseError
from store.filestore import FileStore
from store.sample import write_sample_store
from store.verify import verify_store

from tests.support.paths import ROOT

HOLDER = """
import sys
from store.filestore import FileStore
s = FileStore.open(sys.argv[1], data_file_size=65536, index_file_size=4096)
print("open", flush=True)
sys.stdin.read()  # hold the store until the test closes our stdin or kills us
s.close()
"""


def test_second_writer_in_the_same_process_is_refused(tmp_path):
    node = str(tmp_path / "dledger-n0")
    write_sample_store(node, entries=20)
    with FileStore.open(node, data_file_size=65536, index_file_size=4096) as s:
        with pytest.raises(StoreInUseError, match=f"pid {os.getpid()}"):
            FileStore.open(node, data_file_size=65536, index_file_size=4096)
        # readers never lock: inspecting a live node is allowed
        with FileStore.open(node, read_only=True) as ro:
            assert ro.end_index == s.end_index == 19
        assert verify_store(node).entries == 20
    with FileStore.open(node, data_file_size=65536, index_file_size=4096) as s:  # released on close
        assert s.end_index == 19


def test_lock_held_by_another_process_and_gone_when_it_dies(tmp_path):
    node = str(tmp_path / "dledger-n0")
    write_sample_store(node, entries=20)
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, node], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "open"
        with pytest.raises(StoreInUseError, match=f"pid {proc.pid}"):
            FileStore.open(node)
        proc.send_signal(signal.SIGKILL)  # no clean close: the kernel drops the lock
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while True:
        try:
            with FileStore.open(node, data_file_size=65536, index_file_size=4096) as s:
                assert s.end_index == 19
            break
        except StoreInUseError:
            assert time.monotonic() < deadline, "lock still held after its process died"
            time.sleep(0.05)


def test_failed_open_leaves_no_lock_behind(tmp_path):
    node = tmp_path / "dledger-n0"
    write_sample_store(str(node), entries=20)
    with pytest.raises(ValueError):
        FileStore.open(str(node), data_file_size=4096)  # wrong size for these files
    with FileStore.open(str(node), data_file_size=65536, index_file_size=4096) as s:
        assert s.end_index == 19
