"""A reader that stops early (``dledgerctl ... | head -1``) is no error: every command that
prints rows ends quietly, exit 0, as ``get`` does, in every format. Real processes on a
real pipe whose reading end is closed after the first line; the output is far larger than
a pipe holds, so the writer does meet the closed pipe.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT
from tests.support.rmq_store import write_broker_store

ENV = dict(os.environ, PYTHONPATH=ROOT, COLUMNS="200")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipe") / "store"
    specs = [dict(topic=f"Topic{i % 3}", queue_id=i % 4, body=b"body-%06d" % i + b"." * 200,
                  store_timestamp=1_700_000_000_000 + i,
                  properties={"TAGS": f"tag{i % 4}", "KEYS": f"order-{i}", "UNIQ_KEY": f"U{i:06d}"})
             for i in range(4000)]
    write_broker_store(str(root), specs, cq_units_per_file=1000)
    return str(root)


def _cmd(broker: str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "dledgerctl", *[a.replace("STORE", broker) for a in args]]


CASES = [["mq", "messages", "STORE", "-f", fmt] for fmt in ("jsonl", "csv", "json", "table")] + \
        [["store", "inspect-data", "STORE/dledger-n0", "-f", fmt] for fmt in ("csv", "jsonl", "table")]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(a[:2] + a[-1:]) for a in CASES])
def test_a_reader_that_stops_early_ends_it_quietly(broker, args, tmp_path):
    full = subprocess.run(_cmd(broker, args), capture_output=True, env=ENV, timeout=120)
    assert full.returncode == 0, full.stderr
    assert len(full.stdout) > 1 << 18  # (four times what a pipe holds)
    proc = subprocess.Popen(_cmd(broker, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read().decode(errors="replace")
    code = proc.wait(timeout=120)
    assert first
    assert err == "", err
    assert code == 0


def test_only_stdouts_own_broken_pipe_counts(monkeypatch):
    """A BrokenPipeError from a connection (stdout still read) stays an error: app.py asks
    common.stdout_gone whether the pipe that broke was stdout."""
    from dledgerctl.basics import stdout_gone

    r, w = os.pipe()
    with os.fdopen(w, "w") as out:
        monkeypatch.setattr(sys, "stdout", out)
        assert not stdout_gone()  # someone reads it
        os.close(r)
        assert stdout_gone()  # nobody does
