"""Every state change is one log line with its numbers: role, term and leader; a follower's
dispatcher state; a truncation; a deletion. The deciding logic says them (as notes with
fields, tests/support/sim.py keeps them); a node writes them as JSON objects with
``--log-format json``."""

from __future__ import annotations

import json
import os
import signal

from tests.raft.test_retention_sim import RETAIN, full_disks
from tests.support.commands import cli
from tests.support.group import down, leader_of, pid_of, restart, status, wait_for
from tests.support.sim import Sim
from tests.support.simsteps import commit, elect, fill


def events(sim: Sim, node: str, kind: str) -> list:
    return [t for _at, n, t in sim.notes if n == node and getattr(t, "fields", {}).get("event") == kind]


def test_role_term_and_replication_changes_are_one_line_each_with_their_numbers():
    sim = Sim(3, seed=3)
    old = elect(sim)
    states = events(sim, old, "state")
    assert [(s.fields["role"], s.fields["was_role"]) for s in states][-1] == ("leader", "candidate")
    term = states[-1].fields["term"]
    assert states[-1] == f"leader in term {term}, no-op at {states[-1].fields['end_index']} (was candidate in term {term})"
    for f in (i for i in sim.ids if i != old):
        sim.run_until(lambda: any(s.fields["leader"] == old for s in events(sim, f, "state")), 5000)
    rep = events(sim, old, "replication")
    assert {(r.fields["peer"], r.fields["was_state"], r.fields["state"]) for r in rep} >= {
        (p, None, "COMPARE") for p in sim.ids if p != old}
    assert commit(sim, [b"x"] * 20).code.name == "SUCCESS"
    sim.run(2000)
    # APPEND <-> COMMIT alternate with every push answered: not state changes worth a line
    assert not any({r.fields["was_state"], r.fields["state"]} == {"APPEND", "COMMIT"}
                   for r in events(sim, old, "replication"))
    assert len(events(sim, old, "state")) == len(states)  # nothing changed for the leader itself


def test_a_truncation_says_which_entries_went():
    sim = Sim(3, seed=3)
    old = elect(sim)
    assert commit(sim, [b"before"]).code.name == "SUCCESS"
    sim.isolate(old)
    lost = sim.propose(old, [b"never committed", b"nor this"])
    sim.run_until(lambda: sim.leader() not in (None, old), 10_000)
    assert commit(sim, [b"after"]).code.name == "SUCCESS"
    sim.heal()
    sim.run_until(lambda: sim.logs_equal(), 10_000)
    cut = events(sim, old, "truncation")
    assert len(cut) == 1, cut
    f = cut[0].fields
    assert (f["from_index"], f["to_index"]) == (lost.first_index, lost.last_index)
    assert f["leader"] == sim.leader() and cut[0].startswith(f"truncated entries {lost.first_index}..{lost.last_index}")
    down_line = [s for s in events(sim, old, "state") if s.fields["was_role"] == "leader"]
    assert down_line and down_line[0].fields["role"] == "follower"


def test_a_deletion_says_which_entries_and_files_went():
    sim = Sim(3, seed=2, **RETAIN)
    leader = elect(sim)
    fill(sim, 0, 300)
    full_disks(sim, 0.75)
    sim.run(3000)
    gone = events(sim, leader, "deletion")
    assert gone
    begin = sim.stores[leader].begin_index
    assert gone[-1].fields["begin_index"] == begin and gone[-1].fields["to_index"] == begin - 1
    assert all(g.fields["from_index"] <= g.fields["to_index"] and g.fields["data_files"] >= 1 for g in gone)
    assert gone[0].fields["from_index"] == 0


def test_a_node_logs_json_lines(group, monkeypatch):
    monkeypatch.setenv("DLEDGERCTL_LOG_FORMAT", "json")  # (the nodes 'cluster up' starts inherit it)
    base = group(3)
    leader = leader_of(base)
    follower = next(f"n{i}" for i in range(3) if f"n{i}" != leader)
    r = cli("cluster", "stop", "--base-dir", base, follower)
    assert r.returncode == 0, r.stderr
    restart(base, follower)
    r = cli("append", "--base-dir", base, "-d", "after the restart")  # (the leader pushes: it compares first)
    assert r.returncode == 0, r.stderr
    os.kill(pid_of(base, leader), signal.SIGKILL)
    wait_for(lambda: any(x.get("role") == "leader" and x["id"] != leader for x in status(base)), 30, "a new leader")
    down(base)  # (the logs are read whole once the nodes stopped; the fixture's, after the test, finds nothing left)
    lines = {}
    for n in ("n0", "n1", "n2"):
        with open(os.path.join(base, "logs", f"{n}.log")) as fh:
            lines[n] = [json.loads(line) for line in fh if line.strip()]  # every line is one JSON object
        assert all({"time", "level", "logger", "msg"} <= set(o) for o in lines[n])
        assert all(o["node"] == n and o["group"] == "default" for o in lines[n] if o["logger"] == "dledgerctl.node")
    became = [o for o in lines[leader] if o.get("event") == "state" and o["role"] == "leader"]
    assert became and became[0]["leader"] == leader and became[0]["term"] >= 1
    back = [o for o in lines[leader] if o.get("event") == "replication" and o["peer"] == follower
            and o["state"] in ("APPEND", "COMMIT") and o["was_state"] == "COMPARE"]
    assert len(back) >= 2, "the follower's first compare and the one after its restart"
    survivors = [n for n in lines if n != leader]
    for n in survivors:
        terms = [o["term"] for o in lines[n] if o.get("event") == "state"]
        assert terms == sorted(terms) and terms[-1] > became[0]["term"]
