"""Recovery speaks up: a node that drops entries when it opens its store says how many, from
which index, why, and whether any were committed here (those must come back from the
leader), at the default log level. The case an operator tried: one body byte changed in
entry 100 of a stopped follower whose checkpoint says committed 301. Since issue 58 that
entry is held (kept, never served, said once) and nothing is cut; a byte that breaks an
entry's framing (its magic) still ends the log there, and that is what is said."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from store.filestore import FileStore
from tests.node.test_metrics import scrape, value
from tests.support.commands import cli
from tests.support.paths import ROOT
from tests.support.ports import free_port_base
from tests.support.stores import damaged_store

FILE = 1 << 16


def test_the_store_says_what_recovery_dropped_and_that_it_was_committed(tmp_path):
    node = str(tmp_path / "dledger-n0")
    damaged_store(node, where="magic")
    with FileStore.open(node, read_only=True) as s:
        said = s.recovery_warning()
        assert s.end_index == 99
    assert said.startswith("recovery would cut (opened read-only: nothing changed) entries 100..301")
    with FileStore.open(node) as s:
        said = s.recovery_warning()
    assert "recovery cut entries 100..301" in said
    assert "offset 5600 in 00000000000000000000" in said and "bad-magic" in said
    assert "entries 100..301 were committed here and must come back from the leader" in said
    with FileStore.open(node) as s:  # cut once: nothing more to say
        assert s.recovery_warning() is None and s.end_index == 99


def test_a_damaged_body_is_held_and_said_not_cut(tmp_path):
    node = str(tmp_path / "dledger-n0")
    damaged_store(node)
    for _ in range(2):  # (held until repaired: said at every open, nothing cut at any)
        with FileStore.open(node) as s:
            assert s.recovery_warning() is None and s.end_index == 301
            said = s.recovery_held_warning()
    assert said.startswith("recovery kept 1 damaged entry in the log: entry 100 (bad-body-crc at pos 5600); "
                           "the 201 entries after it are kept")


def test_a_torn_uncommitted_tail_is_said_without_the_warning_about_committed_entries(tmp_path):
    node = str(tmp_path / "dledger-n0")
    damaged_store(node, entries=302, committed=50, at=301)
    with FileStore.open(node) as s:
        said = s.recovery_warning()
    assert "entries 301..301" in said and "must come back from the leader" not in said
    assert "bad-body-crc" in said and s.recovery_held() == []


def test_a_node_that_drops_entries_at_start_says_so_at_the_default_level(tmp_path):
    base = str(tmp_path)
    damaged_store(os.path.join(base, "dledger-n0"), where="magic")
    port = free_port_base(2)
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "dledgerctl", "node", "start", "--id", "n0", "--peers",
                             f"n0-127.0.0.1:{port}", "--store-base-dir", base, "--data-file-size", "64KiB",
                             "--index-file-size", "16KiB", "--metrics-address", f"127.0.0.1:{port + 1}"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline, m = time.monotonic() + 30, None
        while time.monotonic() < deadline and proc.poll() is None:  # until it serves metrics (it has opened its store)
            try:
                m = scrape(f"http://127.0.0.1:{port + 1}/metrics")
                break
            except OSError:
                time.sleep(0.05)
        # the metrics say the same: 202 entries dropped, all of them recorded as committed
        assert m is not None, "the node served no metrics within 30 s"
        assert value(m, "dledger_recovery_dropped_entries") == 202
        assert value(m, "dledger_recovery_dropped_committed_entries") == 202
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _out, said = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, said = proc.communicate()
    assert "recovery cut entries 100..301" in said, said
    assert "must come back from the leader" in said and "bad-magic" in said


def test_store_verify_says_what_a_start_would_drop(tmp_path):
    node = str(tmp_path / "dledger-n0")
    damaged_store(node, where="magic")
    r = cli("store", "verify", node, "--format", "json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["summary"]["start_drops"] == 202 and out["summary"]["start_drops_committed"] == 202
    said = next(p for p in out["problems"] if p["code"] == "start-drops-committed")
    assert said["severity"] == "error" and said["index"] == 100
    assert said["message"].startswith("a node's start would cut entries 100..301")
    assert "must come back from the leader" in said["message"]
    with FileStore.open(node):  # (a start cuts it; then verify has nothing more to say)
        pass
    r = cli("store", "verify", node, "--format", "json")
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["summary"]["start_drops"] == 0


def test_store_verify_says_a_start_would_hold_a_damaged_body(tmp_path):
    node = str(tmp_path / "dledger-n0")
    damaged_store(node)
    r = cli("store", "verify", node, "--format", "json")
    assert r.returncode == 1  # (the damage itself is an error)
    out = json.loads(r.stdout)
    assert out["summary"]["start_drops"] == 0
    codes = {p["code"]: p for p in out["problems"]}
    assert codes["bad-body-crc"]["index"] == 100
    assert codes["start-holds"]["message"].startswith("a node's start would keep 1 damaged entry in the log: "
                                                      "entry 100")
