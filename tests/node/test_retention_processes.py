"""Retention with real node processes on 127.0.0.1: nodes delete old data files under
appends, never past the commit index; a follower stopped meanwhile comes back, is cut back
to the leader's first entry and catches up; the replicas agree over what they all hold.

Files expire after 2 s (--file-reserved-hours 0.00056) and the check ratio is set to a
sliver, so the clean-space check deletes at any hour (as DLedger's does above
diskSpaceRatioToCheckExpired). Every wait polls under a deadline."""

from __future__ import annotations

import json
import os

from tests.support.commands import cli
from tests.support.group import append_lines, down, leader_of, level, status, wait_for

RETAIN = ("--data-file-size", "64KiB", "--index-file-size", "4KiB", "--file-reserved-hours", "0.00056",
          "--disk-ratio-check", "0.0001")


def verify(node) -> dict:
    r = cli("store", "verify", node, "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)["summary"]


def test_old_files_go_on_every_node_and_a_returning_follower_is_cut_back(group):
    base = group(3, *RETAIN, sizes=())  # (RETAIN has the sizes)
    leader = leader_of(base)
    away = next(x["id"] for x in status(base) if x["id"] != leader)
    append_lines(base, [f"early-{k}-".ljust(300, "x") for k in range(200)])
    r = cli("cluster", "stop", "--base-dir", base, away)
    assert r.returncode == 0, r.stderr
    stopped_end = next(x for x in json.loads(cli("cluster", "status", "--base-dir", base, "--format",
                                                 "json").stdout) if x["id"] == leader)["end_index"]

    # appends go on; files older than 2 s are deleted on both running nodes
    for k in range(6):
        append_lines(base, [f"late-{k}-{j}-".ljust(300, "y") for j in range(200)])
    rows = wait_for(lambda: (lambda st: st if all(x["begin_index"] > stopped_end for x in st
                                                  if x["state"] == "up") else None)(status(base)),
                    30, "the running nodes to delete the files the stopped one still needs")
    for x in rows:
        if x["state"] == "up":
            assert 0 < x["begin_index"] <= x["committed_index"] + 1  # never past the commit index
    log = open(os.path.join(base, "logs", f"{leader}.log")).read()
    assert "clean space: deleted" in log

    # the follower comes back: cut back to the leader's first entry, then filled
    r = cli("cluster", "start", "--base-dir", base, away)
    assert r.returncode == 0, r.stderr
    rows = wait_for(lambda: level(base), 60, f"{away} to catch up")
    back = next(x for x in rows if x["id"] == away)
    assert back["begin_index"] > stopped_end
    down(base)  # (the fixture's, after the test, finds nothing left to stop)
    # offline (the running nodes would go on deleting under the readers): every replica is
    # sound, and they agree over the entries they all hold
    for x in rows:
        assert verify(os.path.join(base, f"dledger-{x['id']}"))["verdict"] == "ok"
    for other in (x["id"] for x in rows if x["id"] != away):
        d = cli("store", "diff", os.path.join(base, f"dledger-{other}"), os.path.join(base, f"dledger-{away}"),
                "--format", "json")
        assert d.returncode == 0, d.stdout + d.stderr
        assert json.loads(d.stdout)["compared_to"] == back["end_index"]
