"""`append --file - --lines` stopped half-way (the followers stopped, or Ctrl-C) prints the rows
of what committed, as it commits, and says on stderr how many committed, at which indexes, and
where to resume, so a rerun sends the rest instead of all of it again (issue 44, item 6).
Real node processes on 127.0.0.1; the input is a pipe the test writes, so what is sent before
and after the fault is the test's to choose.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.support.commands import cli
from tests.support.group import wait_for
from tests.support.paths import ROOT

BATCH = 64


@pytest.fixture(scope="module")
def shared_group(module_group):
    return module_group(3)


def _append(base: str, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dledgerctl", "append", "--base-dir", base, "--file", "-",
                             "--lines", "--batch", str(BATCH), "--format", "jsonl", *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))


def _rows(proc: subprocess.Popen, n: int, seconds: float = 30) -> list[dict]:
    """The next ``n`` rows ``proc`` prints, within ``seconds``."""
    got: list[dict] = []

    def read():
        while len(got) < n:
            line = proc.stdout.readline()
            if not line:
                return
            got.append(json.loads(line))
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)
    assert len(got) == n, f"{len(got)} of {n} rows within {seconds} s"
    return got


def _send(proc: subprocess.Popen, first: int, count: int) -> None:
    proc.stdin.write("".join(f"line {k}\n" for k in range(first, first + count)))
    proc.stdin.flush()


def _bodies(base: str, first: int, last: int) -> list[str]:
    r = cli("get", "--base-dir", base, "-i", str(first), "--to-index", str(last), "--format", "json")
    assert r.returncode == 0, r.stderr
    return [e["body"] for e in json.loads(r.stdout)]


def test_ctrl_c_says_what_committed_and_where_to_resume(shared_group):
    proc = _append(shared_group)
    try:
        _send(proc, 1, BATCH)
        rows = _rows(proc, BATCH)  # (printed as they commit, before the input ends)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and out == "" and "Traceback" not in err, err
    first, last = rows[0]["index"], rows[-1]["index"]
    assert f"Note: {BATCH} entries committed, indexes {first}-{last}; the rest not sent (resume from line " \
           f"{BATCH + 1})" in err, err
    assert _bodies(shared_group, first, last) == [f"line {k}" for k in range(1, BATCH + 1)]


def test_a_failure_half_way_leaves_the_rows_of_what_committed(shared_group):
    proc = _append(shared_group, "--timeout", "3")
    stopped: list[str] = []
    try:
        _send(proc, 1, BATCH)
        rows = _rows(proc, BATCH)
        leader = rows[0]["leader"]
        stopped = [n for n in ("n0", "n1", "n2") if n != leader]
        assert cli("cluster", "stop", "--base-dir", shared_group, *stopped).returncode == 0
        rest = "".join(f"line {k}\n" for k in range(BATCH + 1, 4 * BATCH + 1))  # (no majority left for these)
        out, err = proc.communicate(rest, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if stopped:
            assert cli("cluster", "start", "--base-dir", shared_group, *stopped).returncode == 0
    assert proc.returncode == 1 and out == "" and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, err
    first, last = rows[0]["index"], rows[-1]["index"]
    note = f"Note: {BATCH} entries committed, indexes {first}-{last}; "
    failed = note + f"the rest not sent (resume from line {BATCH + 1})"
    unknown = note + (f"lines {BATCH + 1}-{2 * BATCH} were sent without an answer and may commit yet (check with "
                      f"'get' before sending again); the rest not sent (resume from line {2 * BATCH + 1})")
    assert failed in err or unknown in err, err
    wait_for(lambda: _bodies(shared_group, first, last) == [f"line {k}" for k in range(1, BATCH + 1)], 30,
             "the committed rows to read back")
