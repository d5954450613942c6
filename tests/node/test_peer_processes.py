"""``dledgerctl peer ...`` against real node processes on 127.0.0.1.

Every wait polls a condition under a deadline; nothing sleeps to synchronise. Data files
are 64 KiB, so a few hundred entries span several files (damage in the first one is
outside what recovery looks at when a node starts)."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

from cluster.net.client import Client, ClientError
from cluster.node.launcher import up as launch
from cluster.raft.config import parse_peers
from store.filestore import FileStore
from tests.support.commands import cli
from tests.support.group import down, pid_of, recorded, restart, status, wait_for
from tests.support.paths import ROOT
from tests.support.ports import free_port_base

# (no background scrub: these members' bodies are changed on purpose for the operator's
# commands to find; the scrub would heal them first, tests/node/test_scrub_processes.py)
TINY = ["--data-file-size", "64KiB", "--index-file-size", "64KiB", "--scrub-rate", "0"]


def start(base: str, nodes: int = 3, extra: list[str] | None = None) -> None:
    launch(base, nodes, free_port_base(nodes), "g", "async", TINY + (extra or []))
    wait_for(lambda: (lambda rows: len(rows) == nodes and sum(r.get("role") == "leader" for r in rows) == 1
                      and all(r["state"] == "up" for r in rows))(status(base)), 40, "a leader")


@pytest.fixture
def tiny(group):
    """What :func:`start` starts, through the ``group`` fixture (``cluster up``)."""
    return group(3, "--group", "g", *TINY, sizes=())


def peer(base, *args, timeout=60):
    return cli("peer", *args, "--base-dir", base, timeout=timeout)


def marks(base) -> dict[str, dict]:
    r = peer(base, "watermarks", "--format", "json", "--timeout", "5")
    assert r.returncode == 0, r.stderr
    return {row["peer"]: row for row in json.loads(r.stdout)}


def leader_id(base) -> str:
    return wait_for(lambda: next((x["id"] for x in status(base) if x.get("role") == "leader"), None), 30, "a leader")


def append_lines(base, n: int, prefix: str, size: int = 200) -> list[dict]:
    lines = "".join(f"{prefix}-{k}-".ljust(size, "x") + "\n" for k in range(n))
    r = cli("append", "--base-dir", base, "--file", "-", "--lines", "--batch", "100", "--format", "json",
            "--timeout", "20", input=lines)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def caught_up(base) -> dict | None:
    m = marks(base)
    end = next(iter(m.values()))["leader_end_index"]
    return m if all(r["alive"] and r["watermark"] == end and r["lag_entries"] == 0 for r in m.values()) else None


def stop(base, node_id):
    pid = pid_of(base, node_id)
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/cmdline", "rb").read() == b"", 20,
             f"{node_id} to exit")


def node_dir(base, node_id):
    return os.path.join(base, f"dledger-{node_id}")


def diff(base, a, b) -> dict:
    r = cli("store", "diff", node_dir(base, a), node_dir(base, b), "--format", "json")
    assert r.returncode in (0, 1) and r.stdout.strip(), r.stderr
    return json.loads(r.stdout)


class Load:
    """One client appending in a background thread, one entry at a time, recording every
    acknowledged (index, body) and every failure."""

    def __init__(self, base: str) -> None:
        rec = recorded(base)
        self.peers, self.group = parse_peers(rec["peers"]), rec["group"]
        self.acked: list[tuple[int, bytes]] = []
        self.failures: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        c = Client(self.peers, self.group, timeout=10)
        k = 0
        try:
            while not self.stopping.is_set():
                body = b"load-%d" % k
                k += 1
                try:
                    resp = await c.append([body])
                    self.acked.append((resp.entries[0][0], body))
                except ClientError as exc:
                    self.failures.append(str(exc))
        finally:
            await c.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def test_watermarks_under_load_with_a_follower_down_and_back(tiny):
    base = tiny
    leader = leader_id(base)
    follower = next(n["id"] for n in recorded(base)["nodes"] if n["id"] != leader)
    with Load(base) as load:
        wait_for(lambda: len(load.acked) >= 50, 30, "appends under load")
        m = marks(base)
        assert set(m) == {n["id"] for n in recorded(base)["nodes"]} and m[leader]["state"] == "LEADER"
        assert all(r["alive"] for r in m.values())
        assert {r["state"] for p, r in m.items() if p != leader} <= {"APPEND", "COMMIT"}
    m = wait_for(lambda: caught_up(base), 20, "watermarks to reach the leader's end")
    assert m[leader]["committed_index"] == m[leader]["leader_end_index"] >= 50

    stop(base, follower)
    append_lines(base, 30, "a")
    first = wait_for(lambda: (lambda r: r if not r["alive"] else None)(marks(base)[follower]), 20,
                     f"{follower} shown down")
    # --watch draws each member's lag as it grows (here as CSV off a terminal: a rendering per refresh)
    watch = subprocess.Popen([sys.executable, "-m", "dledgerctl", "peer", "watermarks", "--base-dir", base, "--watch",
                              "--count", "40", "--interval", "0.25", "--format", "csv"], stdout=subprocess.PIPE,
                             text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        head = []
        while len(head) < 4:  # the first rendering: header and 3 rows
            assert select.select([watch.stdout], [], [], 30)[0], "no rendering from --watch within 30 s"
            head.append(watch.stdout.readline())
        append_lines(base, 30, "b")  # (well within the 10 s the 40 refreshes take)
        rest, _ = watch.communicate(timeout=60)
    finally:
        watch.kill()
    rows = [r for r in csv.DictReader(head + rest.splitlines(keepends=True)) if r["peer"] == follower]
    assert len(rows) == 40 and watch.returncode == 0
    trend, top = rows[-1]["lag_trend"].split(" max ")
    lags = [int(r["lag_entries"]) for r in rows]
    assert int(top) == lags[-1] == max(lags) and lags[0] < lags[-1]
    assert len(trend) == 30 and trend[-1] == "█" and list(trend) == sorted(trend)  # only grows while it is down
    second = marks(base)[follower]
    assert not second["alive"] and second["lag_entries"] > first["lag_entries"] >= 30
    assert second["lag_bytes"] > first["lag_bytes"] > 30 * 200

    restart(base, follower)
    m = wait_for(lambda: caught_up(base), 30, f"{follower} to catch up")
    assert m[follower]["lag_entries"] == 0 and m[follower]["lag_bytes"] == 0

    # --watch off a terminal: one rendering per refresh, here as JSON lines
    r = peer(base, "watermarks", "--watch", "--count", "2", "--interval", "0.2", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == 2 * 3 and [x["peer"] for x in lines[:3]] == [x["peer"] for x in lines[3:]]


def test_a_tail_replaced_by_an_older_term_is_repaired_on_restart(tiny):
    base = tiny
    append_lines(base, 40, "t1")
    old = leader_id(base)
    new = next(n["id"] for n in recorded(base)["nodes"] if n["id"] != old)
    r = peer(base, "transfer-leader", "--to", new, "--format", "json")
    assert r.returncode == 0, r.stderr
    newer = append_lines(base, 40, "t2")
    term2 = newer[0]["term"]
    follower = next(n["id"] for n in recorded(base)["nodes"] if n["id"] not in (new,))
    wait_for(lambda: caught_up(base), 20, "replicas to catch up")
    stop(base, follower)

    # offline: the tail from the first entry of the new term becomes entries of the old term
    with FileStore.open(node_dir(base, follower)) as s:
        first2 = s.first_index_of_term(newer[0]["index"])  # the new leader's no-op
        assert s.term_of(first2) == term2 and s.term_of(first2 - 1) < term2
        old_term = s.term_of(first2 - 1)
        s.truncate(first2, force=True)
        s.append_leader([b"stale-%d" % k for k in range(50)], old_term)
    before = diff(base, follower, new)
    assert before["first_diff_index"] == first2

    restart(base, follower)
    # The leader learns of the changed log from the restarted follower's answer to its next
    # COMMIT push; until then the watermarks can still show it caught up (from before the
    # stop), so wait for the replicas themselves to agree.
    after = wait_for(lambda: (lambda d: d if d["identical"] else None)(diff(base, follower, new)), 30,
                     f"{follower} repaired")
    assert after["first_diff_index"] is None, after
    wait_for(lambda: caught_up(base), 30, f"{follower} caught up")
    with FileStore.open(node_dir(base, follower), read_only=True) as s:
        assert all(not e.body.startswith(b"stale") for e in s.entries())


def test_deep_compare_finds_and_repairs_bodies_changed_under_the_same_terms(tiny):
    base = tiny
    append_lines(base, 900, "d", size=300)  # ~280 KB: five data files of 64 KiB
    leader = leader_id(base)
    follower = next(n["id"] for n in recorded(base)["nodes"] if n["id"] != leader)
    wait_for(lambda: caught_up(base), 20, "replicas to catch up")
    stop(base, follower)
    victims = [7, 8, 20]
    with FileStore.open(node_dir(base, follower), read_only=True) as s:
        spots = [(s.get(i).pos + 48, s.get(i).size - 48) for i in victims]
        assert len(s.data.files) >= 5 and all(pos < s.data.file_size for pos, _n in spots)  # first file only
    data0 = os.path.join(node_dir(base, follower), "data", f"{0:020d}")
    with open(data0, "r+b") as fh:  # same length, same terms, other bytes: a store restored from elsewhere
        for pos, n in spots:
            fh.seek(pos)
            fh.write(b"Z" * n)
    restart(base, follower)
    wait_for(lambda: caught_up(base), 30, f"{follower} back")

    shallow = peer(base, "compare", "--peer", follower, "--dry-run", "--format", "json")
    assert shallow.returncode == 0, shallow.stderr
    assert json.loads(shallow.stdout)["truncate_from"] is None  # term comparison sees nothing wrong

    dry = peer(base, "compare", "--peer", follower, "--deep", "--dry-run", "--format", "json")
    assert dry.returncode == 1, dry.stderr  # it found a difference
    found = json.loads(dry.stdout)
    assert (found["first_diff"], found["truncate_from"], found["match_index"]) == (7, 7, 6)
    assert found["leader_term"] == found["follower_term"] and found["leader_digest"] != found["follower_digest"]
    assert diff(base, follower, leader)["first_diff_index"] == 7  # the dry run changed nothing

    fix = peer(base, "compare", "--peer", follower, "--deep", "--format", "json")
    assert fix.returncode == 0, fix.stderr
    fixed = json.loads(fix.stdout)
    assert fixed["repaired"] and fixed["dropped"] == fixed["follower_end"] - 7 + 1
    wait_for(lambda: caught_up(base), 30, f"{follower} re-filled")
    assert diff(base, follower, leader)["identical"]
    v = cli("store", "verify", node_dir(base, follower), "--format", "json")
    assert v.returncode == 0, v.stdout + v.stderr


def test_truncate_refused_below_commit_and_refills_above(tmp_path):
    base = str(tmp_path / "c")
    # five members whose leader keeps its post for 15 s without a majority: with two killed
    # and a third paused, it stays leader (long enough on a loaded machine) but cannot commit
    try:
        start(base, 5, ["--max-heartbeat-leak", "30"])
        append_lines(base, 20, "c")
        leader = leader_id(base)
        others = [n["id"] for n in recorded(base)["nodes"] if n["id"] != leader]
        follower, paused, dead = others[0], others[1], others[2:]
        wait_for(lambda: caught_up(base), 20, "replicas to catch up")
        committed = marks(base)[leader]["committed_index"]

        r = peer(base, "truncate", "--peer", follower, "--from-index", str(committed), "--yes")
        assert r.returncode == 1 and r.stderr.startswith("Error: ") and "committed" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        assert marks(base)[follower]["watermark"] == committed  # nothing was cut

        for d in dead:
            stop(base, d)
        os.kill(pid_of(base, paused), signal.SIGSTOP)
        try:
            lines = "".join(f"u-{k}\n" for k in range(10))
            r = cli("append", "--base-dir", base, "--file", "-", "--lines", "--timeout", "1.5", input=lines)
            assert r.returncode == 1  # no quorum: not committed (yet)
            m = wait_for(lambda: (lambda m: m if m[follower]["watermark"] >= committed + 10 else None)(marks(base)),
                         10, f"{follower} to hold the uncommitted entries")
            assert m[leader]["committed_index"] == committed
            r = peer(base, "truncate", "--peer", follower, "--from-index", str(committed + 1), "--yes",
                     "--format", "json")
            assert r.returncode == 0, r.stderr
            cut = json.loads(r.stdout)
            assert cut["dropped"] == 10 and cut["follower_end"] == committed
            wait_for(lambda: marks(base)[follower]["watermark"] == committed + 10, 10, "the re-fill")
        finally:
            os.kill(pid_of(base, paused), signal.SIGCONT)
        wait_for(lambda: marks(base)[leader]["committed_index"] >= committed + 10, 20, "the commit")
        assert diff(base, follower, leader)["identical"]
    finally:
        down(base)


def test_transfer_leader_moves_leadership_while_a_client_keeps_appending(tiny):
    base = tiny
    old = leader_id(base)
    target = next(n["id"] for n in recorded(base)["nodes"] if n["id"] != old)
    with Load(base) as load:
        wait_for(lambda: len(load.acked) >= 20, 30, "appends before the transfer")
        t = time.monotonic()
        r = peer(base, "transfer-leader", "--to", target, "--format", "json")
        assert r.returncode == 0, r.stderr
        moved = json.loads(r.stdout)
        assert moved["from"] == old and moved["to"] == moved["leader"] == target
        assert time.monotonic() - t < 15
        after = len(load.acked)
        wait_for(lambda: len(load.acked) >= after + 20, 30, "appends after the transfer")
    assert leader_id(base) == target
    assert load.failures == []
    indexes = [i for i, _b in load.acked]
    assert indexes == sorted(indexes) and len(set(indexes)) == len(indexes)
    stored = {}
    for first in range(indexes[0], indexes[-1] + 1, 1000):
        r = cli("get", "--base-dir", base, "-i", str(first), "-c", "1000", "--format", "json", "--timeout", "10")
        assert r.returncode == 0, r.stderr
        stored.update((e["index"], e["body"].encode()) for e in json.loads(r.stdout))
    assert all(stored.get(i) == body for i, body in load.acked)  # none lost, none moved


def test_peer_commands_fail_with_one_line(tiny, tmp_path):
    base = tiny
    rows = {r["id"]: r for r in status(base)}
    # an id that is not a member: refused before anything is sent
    for args in (("compare", "--peer", "n7"), ("truncate", "--peer", "n7", "--from-index", "5", "--yes"),
                 ("transfer-leader", "--to", "n7")):
        r = peer(base, *args)
        assert r.returncode == 2 and r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1
    # a peers string naming a member the cluster does not know: the leader refuses
    peers = ";".join(f"{i}-{r['address']}" for i, r in rows.items()) + ";n7-127.0.0.1:1"
    r = cli("peer", "compare", "--peers", peers, "--group", "g", "--peer", "n7", "--timeout", "5")
    assert r.returncode == 1 and "UNKNOWN_MEMBER" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # the leader itself is no follower
    leader = leader_id(base)
    r = peer(base, "compare", "--peer", leader)
    assert r.returncode == 1 and "leader itself" in r.stderr
    # unreachable addresses
    port = free_port_base(2)
    for args in (("watermarks",), ("compare", "--peer", "n0"), ("transfer-leader", "--to", "n1")):
        t = time.monotonic()
        r = cli("peer", *args, "--peers", f"n0-127.0.0.1:{port};n1-127.0.0.1:{port + 1}", "--timeout", "1.5")
        assert r.returncode == 1 and r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1
        assert time.monotonic() - t < 20
    # no leader: two of three members down
    for n in [n["id"] for n in recorded(base)["nodes"]][:2]:
        stop(base, n)
    wait_for(lambda: not any(x.get("role") == "leader" for x in status(base)), 20, "the last leader to step down")
    r = peer(base, "watermarks", "--timeout", "3")
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1
    r = peer(base, "transfer-leader", "--to", "n2", "--timeout", "3")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
