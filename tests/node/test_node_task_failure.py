"""A node never runs on with a dead task (issue 45, item 2).

``--data-file-size`` of 2^63 made os.ftruncate raise OverflowError at the node's first
leadership; the tick task died, and the node kept its port open but never elected,
heartbeated, flushed or checkpointed, logging nothing. The option is range-checked now
(tests/node/test_node_config_checks.py), and any exception escaping the tick loop, the server's
upkeep, the flusher or a task of the node stops it cleanly with one ``Error:`` line naming
the task, exit 1 (which systemd's Restart=on-failure restarts). Each failure is planted in
a real ``node start`` process by tests/support/inject_failure.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.commands import cli
from tests.support.paths import ROOT, SUPPORT
from tests.support.ports import free_port_base

INJECT = os.path.join(SUPPORT, "inject_failure.py")


@pytest.mark.parametrize("task,says", [
    ("tick", "the tick loop failed: OverflowError: injected: Python int too large to convert to C long"),
    ("server", "the server (its connection upkeep) failed: RuntimeError: injected into the server's upkeep"),
    ("flusher", "the flusher failed: ValueError: injected into the flusher"),
    ("task", "the request to n1 failed: KeyError: 'injected into a request task'"),
])
def test_a_failed_task_stops_the_node_with_one_line_naming_it(tmp_path, task, says):
    port = free_port_base(2)
    # n1 is never started: n0 alone is no majority and keeps asking n1 (the request tasks)
    peers = f"n0-127.0.0.1:{port}" + (f";n1-127.0.0.1:{port + 1}" if task == "task" else "")
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, INJECT, task, "node", "start", "--id", "n0", "--peers", peers,
                        "--store-base-dir", str(store), "--heartbeat-interval", "50", "--data-file-size", "1MiB",
                        "--index-file-size", "64KiB"], capture_output=True, text=True, timeout=60, env=env,
                       stdin=subprocess.DEVNULL)
    errors = [x for x in r.stderr.splitlines() if x.startswith("Error:")]
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert errors == [errors[0]] and errors[0].startswith(f"Error: node n0 stopped: {says} (at "), r.stderr
    assert "Traceback" not in r.stderr
    # stopped cleanly: the store is kept and its checkpoint written
    assert (store / "dledger-n0" / "checkpoint").exists()


def test_a_data_file_size_dledger_cannot_hold_is_refused_before_start(tmp_path):
    r = cli("node", "start", "--id", "n0", "--peers", f"n0-127.0.0.1:{free_port_base(1)}", "--store-base-dir",
            str(tmp_path / "s"), "--data-file-size", str(1 << 63), timeout=60)
    assert r.returncode == 2 and "--data-file-size must be at least 56 and at most 2147483647" in r.stderr, r.stderr
    assert not (tmp_path / "s").exists()
