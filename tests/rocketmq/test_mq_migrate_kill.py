"""``mq migrate`` killed with SIGKILL in the middle of writing: SRC is as it was, no DEST
exists (only the temporary sibling, which looks like no store's name), and the next run for
the same DEST removes that leftover and completes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.support.paths import ROOT
from tests.support.rmq_store import write_broker_store
from tests.support.stores import file_crcs

PROJECT = ROOT


def migrate_cmd(src, dest):
    return [sys.executable, "-m", "dledgerctl", "mq", "migrate", str(src), str(dest), "--commitlog-file-size", "64KiB"]


def test_a_killed_migrate_leaves_src_alone_and_no_dest(tmp_path):
    src = tmp_path / "src"
    write_broker_store(str(src), [{"topic": f"T{i % 4}", "queue_id": i % 4, "body": bytes([i % 256]) * 2000}
                                  for i in range(6000)], data_file_size=4 << 20)
    before = file_crcs(src)
    dest = tmp_path / "dest"
    proc = subprocess.Popen(migrate_cmd(src, dest), cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tmp_log = tmp_path / f".dest.migrating-{proc.pid}" / "commitlog"
    deadline = time.monotonic() + 60
    try:
        # kill it once it has begun writing commit-log files (of ~190 it writes)
        while not (tmp_log.is_dir() and len(os.listdir(tmp_log)) >= 2):
            assert proc.poll() is None, f"migrate ended before it could be killed: {proc.stderr.read()!r}"
            assert time.monotonic() < deadline, "migrate wrote no commit-log file within 60 s"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not dest.exists()
    assert file_crcs(src) == before
    assert sorted(os.listdir(tmp_path)) == sorted(["src", f".dest.migrating-{proc.pid}"])

    done = subprocess.run(migrate_cmd(src, dest) + ["--format", "json"], cwd=PROJECT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"removed .dest.migrating-{proc.pid}, left by an interrupted run" in done.stdout
    assert sorted(os.listdir(tmp_path)) == ["dest", "src"]
    assert file_crcs(src) == before
