"""What an operator does from a terminal, with real node processes on 127.0.0.1: read more
entries than a node gives in one answer, follow the log through leader changes, and stop
and start single members of a local cluster.

Every wait polls a condition under a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.support.commands import cli
from tests.support.group import append_lines, leader_of, level, recorded, status, wait_for
from tests.support.paths import ROOT


@pytest.fixture
def cluster(group):
    return group(3)


def test_get_pages_past_a_nodes_answer_limit_and_says_when_the_log_is_shorter(cluster):
    base = cluster
    acked = append_lines(base, [f"e{k}" for k in range(6000)], batch=500)
    assert [a["index"] for a in acked] == list(range(1, 6001))  # index 0: the leader's no-op

    r = cli("get", "--base-dir", base, "-i", "0", "--count", "5000", "--format", "jsonl", "--body", "utf8")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["index"] for x in rows] == list(range(5000))  # a node answers at most 1,024 per GET
    assert [x["body"] for x in rows[1:]] == [f"e{k}" for k in range(4999)] and rows[0]["magic"] == 2
    assert r.stderr == ""

    # more than is committed: what there is, and a note saying so (not an error)
    r = cli("get", "--base-dir", base, "-i", "5990", "--to-index", "7000", "--format", "csv", "--body", "none")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "index,term,pos,size,magic" and [int(x.split(",")[0]) for x in lines[1:]] == \
        list(range(5990, 6001))
    assert r.stderr.strip() == "Note: 11 entries of 1011 asked for: the log is committed up to index 6000"

    # nothing there at all: one error line
    r = cli("get", "--base-dir", base, "-i", "6001")
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and "outside the committed log [0, 6000]" in r.stderr
    for bad in (["-i", "1", "-c", "2", "--to-index", "5"], ["-i", "5", "--to-index", "4"], ["-c", "3"],
                ["--follow", "--format", "json"]):
        r = cli("get", "--base-dir", base, *bad)
        assert r.returncode == 2 and r.stderr.startswith("Error: ") and len(r.stderr.splitlines()) == 1, (bad, r.stderr)


class Follower:
    """``dledgerctl get --follow --format jsonl`` in a process, its lines read as they come."""

    def __init__(self, base: str, *args: str) -> None:
        # (Ctrl-C as a user's terminal delivers it: a test run started in the background,
        # as by nohup, hands its children SIGINT ignored, and Python then keeps it so)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dledgerctl", "get", "--base-dir", base, "--follow", "--format", "jsonl",
             "--interval", "0.05", "--timeout", "2", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT),
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.rows: list[dict] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.rows.append(json.loads(line))

    def last_index(self) -> int:
        return self.rows[-1]["index"] if self.rows else -1

    def stop(self) -> tuple[int, str]:
        """Ctrl-C, as a user ends it; its exit code and standard error."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self.reader.join(10)
        return rc, self.proc.stderr.read()


def test_follow_prints_every_entry_once_in_order_through_a_transfer_and_a_leader_kill(cluster):
    base = cluster
    append_lines(base, [f"before-{k}" for k in range(50)])
    f = Follower(base, "-i", "1")
    try:
        append_lines(base, [f"a-{k}" for k in range(300)], batch=7)
        wait_for(lambda: f.last_index() >= 350, 30, "the follower to print the first batch")

        old = leader_of(base)
        to = next(n["id"] for n in recorded(base)["nodes"] if n["id"] != old)
        r = cli("peer", "transfer-leader", "--base-dir", base, "--to", to, "--timeout", "20")
        assert r.returncode == 0, r.stderr
        append_lines(base, [f"b-{k}" for k in range(300)], batch=7)

        r = cli("cluster", "stop", "--base-dir", base, "--kill", leader_of(base), "--format", "json")
        assert r.returncode == 0 and json.loads(r.stdout)[0]["result"] == "killed", r.stderr
        append_lines(base, [f"c-{k}" for k in range(300)], batch=7)
        end = max(x["committed_index"] for x in status(base) if x["state"] == "up")
        wait_for(lambda: f.last_index() >= end, 60, f"the follower to reach index {end}")
    finally:
        rc, err = f.stop()
    assert rc == 0, err
    got = f.rows
    assert [x["index"] for x in got] == list(range(1, got[-1]["index"] + 1))  # once each, in order
    r = cli("get", "--base-dir", base, "-i", "1", "--to-index", str(got[-1]["index"]), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert got == json.loads(r.stdout)  # exactly what the log holds
    bodies = [x["body"] for x in got if x["magic"] == 1]
    for prefix in ("before", "a", "b", "c"):
        assert [b for b in bodies if b.startswith(prefix + "-")][:1] == [f"{prefix}-0"]
        assert {b for b in bodies if b.startswith(prefix + "-")} == {f"{prefix}-{k}" for k in range(
            50 if prefix == "before" else 300)}
    assert sum(x["magic"] == 2 for x in got) >= 2  # the no-ops of the two new leaders' terms


def test_follow_ends_by_itself_after_count(cluster):
    base = cluster
    f = Follower(base, "--count", "5")  # from the next entry to commit, whenever it starts
    try:
        deadline = time.monotonic() + 60
        while f.proc.poll() is None and time.monotonic() < deadline:
            append_lines(base, ["x"])
        assert f.proc.wait(30) == 0
    finally:
        f.stop()
    assert len(f.rows) == 5 and [x["index"] for x in f.rows] == list(range(f.rows[0]["index"], f.rows[0]["index"] + 5))


def test_stop_and_start_one_member_then_the_replicas_are_identical(cluster):
    base = cluster
    append_lines(base, [f"first-{k}" for k in range(200)])
    r = cli("cluster", "stop", "--base-dir", base, "n1", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [(x["id"], x["result"]) for x in json.loads(r.stdout)] == [("n1", "stopped")]
    st = {x["id"]: x for x in status(base)}
    assert st["n1"]["state"] == "down" and st["n1"]["pid"] is None and st["n1"]["uptime_s"] is None
    assert all(st[i]["pid"] == n["pid"] and st[i]["uptime_s"] >= 0 for i, n in
               ((n["id"], n) for n in recorded(base)["nodes"] if n["id"] != "n1"))

    append_lines(base, [f"second-{k}" for k in range(200)])  # appends continue with two of three
    r = cli("cluster", "start", "--base-dir", base, "n1", "--format", "json")
    assert r.returncode == 0, r.stderr
    row, = json.loads(r.stdout)
    assert row["id"] == "n1" and row["result"] == "started" and row["state"] == "up"
    assert row["pid"] == next(n["pid"] for n in recorded(base)["nodes"] if n["id"] == "n1")
    rows = wait_for(lambda: level(base), 30, "n1 to catch up")
    assert rows[0]["end_index"] >= 400  # the no-op, then 400 entries
    for a, b in (("n0", "n1"), ("n1", "n2")):
        d = cli("store", "diff", os.path.join(base, f"dledger-{a}"), os.path.join(base, f"dledger-{b}"),
                "--format", "json")
        assert d.returncode == 0, d.stdout + d.stderr

    r = cli("cluster", "start", "--base-dir", base, "n1", "n2", "--format", "json")
    assert r.returncode == 0 and {x["result"] for x in json.loads(r.stdout)} == {"already running"}
    for bad in (["stop", "n7"], ["start", "n1", "n7"]):
        r = cli("cluster", *bad, "--base-dir", base)
        assert r.returncode == 1 and r.stderr.startswith("Error: no member n7 in the cluster"), r.stderr
    assert all(x["state"] == "up" for x in status(base))  # a refused command touched nothing


def test_up_on_a_cluster_with_a_killed_member_starts_exactly_that_one(cluster):
    base = cluster
    before = {n["id"]: n["pid"] for n in recorded(base)["nodes"]}
    os.kill(before["n2"], signal.SIGKILL)
    wait_for(lambda: next(x for x in status(base) if x["id"] == "n2")["state"] == "down", 20, "n2 to be down")

    r = cli("cluster", "up", "--base-dir", base, "--nodes", "5")
    assert r.returncode == 2 and "other settings" in r.stderr  # not what is recorded: refused, nothing started
    r = cli("cluster", "up", "--base-dir", base, "--format", "json", "--wait", "40")
    assert r.returncode == 0, r.stderr
    rows = {x["id"]: x for x in json.loads(r.stdout)}
    assert {i: x["action"] for i, x in rows.items()} == {"n0": "already running", "n1": "already running",
                                                          "n2": "started"}
    after = {n["id"]: n["pid"] for n in recorded(base)["nodes"]}
    assert after["n0"] == before["n0"] and after["n1"] == before["n1"] and after["n2"] != before["n2"]
    assert all(x["state"] == "up" and x["pid"] == after[i] for i, x in rows.items())

    r = cli("cluster", "status", "--base-dir", base)  # the table: pid and uptime columns
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0].split()
    assert head[-2:] == ["pid", "uptime"]
