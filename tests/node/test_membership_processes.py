"""Membership changes on real node processes under load: replace a killed member, grow a
group from 3 to 5 and shrink it back, remove the leader. Clients append all the while
(tests/support/faults.py Appender); afterwards every acknowledged append must be in every member's
committed log once, and nothing a client did not send (tests/support/faults.py check)."""

from __future__ import annotations

import asyncio
import json
import os
import threading

from cluster.raft.config import parse_peers
from tests.support import faults
from tests.support.commands import cli
from tests.support.group import down, file_sizes, wait_for
from tests.support.ports import free_port_base

GROUP = faults.GROUP


class Load:
    """Clients appending in a thread of their own until :meth:`stop`."""

    def __init__(self, peers: str, seed: int, clients: int = 4) -> None:
        self.appender = faults.Appender(parse_peers(peers), clients, seed, f"m{seed}", timeout=5.0)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.loop.run_until_complete(self.appender.run())

    def ok(self) -> int:
        return sum(1 for r in list(self.appender.requests) if r.outcome == "ok")

    def stop(self) -> list:
        self.loop.call_soon_threadsafe(self.appender.stopping.set)
        self.thread.join(60)
        assert not self.thread.is_alive(), "the clients did not stop"
        return self.appender.requests


def started(group, port: int) -> tuple[str, dict]:
    """Three members of GROUP from ``port`` on (the ``group`` fixture's): the base directory and record."""
    return group.recorded(3, "--group", GROUP, port_base=port, sizes=file_sizes("1MiB", "64KiB"))


def status(base: str) -> dict[str, dict]:
    r = cli("cluster", "status", "--base-dir", base, "--format", "json", "--timeout", "3")
    return {x["id"]: x for x in json.loads(r.stdout)} if r.stdout.strip() else {}


def peer(base: str, *args: str) -> dict | list:
    r = cli("peer", *args, "--base-dir", base, "--format", "json", "--timeout", "20", timeout=180)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def voters(base: str) -> set[str]:
    st = status(base)
    leader = next((x for x in st.values() if x.get("role") == "leader"), None)
    return {i for i, x in st.items() if x.get("member") == "voter"} if leader else set()


def settle_and_check(base: str, load: Load, members: set[str]) -> None:
    """Stop the clients, wait until the members agree, stop them, and check their stores."""
    ok_before = load.ok()
    requests = load.stop()
    assert ok_before > 0 and any(r.outcome == "ok" for r in requests)

    def agreed():
        st = status(base)
        rows = [st.get(i) or {} for i in members]
        return (all(x.get("state") == "up" for x in rows) and len({x.get("committed_index") for x in rows}) == 1
                and len({x.get("end_index") for x in rows}) == 1)
    wait_for(agreed, 30, f"{sorted(members)} to agree")
    assert voters(base) == members
    down(base)
    problems, _unknown = faults.check({i: os.path.join(base, f"dledger-{i}") for i in sorted(members)}, requests)
    assert not problems, "\n".join(problems[:20])


def test_replace_a_killed_member_under_load(group):
    port = free_port_base(4)
    base, rec = started(group, port)
    load = Load(rec["peers"], 1)
    wait_for(lambda: load.ok() >= 20, 30, "appends to flow")
    victim = next(i for i, x in status(base).items() if x.get("role") == "follower")
    assert cli("cluster", "stop", "--base-dir", base, victim, "--kill").returncode == 0
    rows = peer(base, "replace", "--id", victim, "--with", f"n3=127.0.0.1:{port + 3}")
    assert [(r["step"], r["id"], r["member"]) for r in rows] == [("add", "n3", "voter"), ("remove", victim,
                                                                                      "removed")]
    before = load.ok()
    wait_for(lambda: load.ok() >= before + 20, 30, "appends to flow after the replace")
    settle_and_check(base, load, {"n0", "n1", "n2", "n3"} - {victim})


def test_grow_from_three_to_five_and_shrink_back_under_load(group):
    port = free_port_base(5)
    base, rec = started(group, port)
    load = Load(rec["peers"], 2)
    wait_for(lambda: load.ok() >= 20, 30, "appends to flow")
    for k in (3, 4):
        row, = peer(base, "add", "--id", f"n{k}", "--address", f"127.0.0.1:{port + k}")
        assert row["member"] == "voter" and f"n{k}" in row["voters"].split(",")
    assert voters(base) == {"n0", "n1", "n2", "n3", "n4"}
    before = load.ok()
    wait_for(lambda: load.ok() >= before + 20, 30, "appends to flow with five")
    for k in (0, 1):  # shrink back to three: two of the original members go
        row, = peer(base, "remove", "--id", f"n{k}")
        assert row["member"] == "removed"
    before = load.ok()
    wait_for(lambda: load.ok() >= before + 20, 30, "appends to flow with three")
    settle_and_check(base, load, {"n2", "n3", "n4"})


def test_remove_the_leader_under_load(group):
    port = free_port_base(3)
    base, rec = started(group, port)
    load = Load(rec["peers"], 3)
    wait_for(lambda: load.ok() >= 20, 30, "appends to flow")
    leader = next(i for i, x in status(base).items() if x.get("role") == "leader")
    row, = peer(base, "remove", "--id", leader)
    assert row["member"] == "removed" and leader not in row["voters"].split(",")
    rest = {"n0", "n1", "n2"} - {leader}
    wait_for(lambda: any(status(base).get(i, {}).get("role") == "leader" for i in rest), 30, "a new leader")
    before = load.ok()
    wait_for(lambda: load.ok() >= before + 20, 30, "appends to flow without the old leader")
    with open(os.path.join(base, "logs", f"{leader}.log")) as fh:
        assert "stepping down" in fh.read()
    settle_and_check(base, load, rest)
