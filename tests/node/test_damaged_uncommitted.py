"""A damaged entry nobody committed does not hold the log (issue 59, item 1). Followers
stopped, one entry appended (uncommitted), one body byte of it flipped in the leader's data
file, one follower started (so the old leader, whose log is longer, must lead again): the
leader that comes back with it cannot send it to anyone (it
never serves damage), and nothing repairs it (the scrub mends committed entries). Before,
every append then answered WAIT_QUORUM_ACK_TIMEOUT for good while every member was up. Now the
leader that meets it cuts it (it was never acknowledged), says so once, steps down, and the
group commits again within an election or two."""

from __future__ import annotations

import json
import os

from store.filestore import FileStore
from tests.node.test_scrub_processes import flip_entry
from tests.support.commands import cli
from tests.support.group import append_bodies, leader_of, level, recorded, status, wait_for


def test_a_leaders_damaged_uncommitted_entry_is_cut_and_the_group_commits_again(group):
    # (a slow heartbeat: the leader keeps leading long enough, alone, to take the append)
    base = group(3, "--heartbeat-interval", "1000", "--scrub-rate", "32MiB")
    first = append_bodies(base, [b"committed %d" % i for i in range(50)])
    assert first.code == 200, first
    leader = leader_of(base)
    followers = [n for n in ("n0", "n1", "n2") if n != leader]
    r = cli("cluster", "stop", "--base-dir", base, *followers, "--kill", "--format", "json")
    assert r.returncode == 0, r.stderr
    r = cli("append", "--base-dir", base, "-d", "never committed " * 8, "--timeout", "2",
            "--format", "json")
    assert r.returncode != 0, r.stdout  # (no quorum: it waits, then times out)
    lonely = first.entries[-1][0] + 1
    with FileStore.open(os.path.join(base, f"dledger-{leader}"), read_only=True) as s:
        assert s.end_index >= lonely and s.get(lonely).body.startswith(b"never committed")
    flip_entry(base, leader, lonely, 48 + 9)
    # One follower back first: it cannot win without the old leader's vote (its log is shorter),
    # so the old leader, with the damaged entry, leads again and must get past it.
    r = cli("cluster", "start", "--base-dir", base, followers[0], "--wait", "30", "--format", "json")
    assert r.returncode == 0, r.stderr

    def commits():
        a = cli("append", "--base-dir", base, "-d", "after", "--timeout", "3", "--format", "json")
        return a.returncode == 0 and json.loads(a.stdout)
    got = wait_for(commits, 40, "an append to commit again")
    assert got[0]["index"] >= lonely, got
    r = cli("cluster", "start", "--base-dir", base, followers[1], "--wait", "30", "--format", "json")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: level(base), 30, "every member at one end and commit index")
    # the damaged entry is gone from every member, as said once by the leader that cut it
    for n in ("n0", "n1", "n2"):
        with FileStore.open(os.path.join(base, f"dledger-{n}"), read_only=True) as s:
            bodies = [s.get(i, checked=True).body for i in range(s.begin_index, s.end_index + 1)]
        assert not any(b.startswith(b"never committed") for b in bodies), n
    said = []
    for node in recorded(base)["nodes"]:
        with open(node["log"], errors="replace") as fh:
            said += [x for x in fh.read().splitlines() if f"entry {lonely} is damaged here and not committed" in x]
    assert len(said) == 1, said
    assert f"cut entries {lonely}.." in said[0] and "stepping down" in said[0]
    assert all(r["state"] == "up" for r in status(base))
