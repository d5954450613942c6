"""A restart after damage cuts nothing committed (issue 58, item 1): one body byte of a
committed entry flipped on all three members of a group (stopped with ``cluster stop``),
then ``cluster start`` of all three. Every member keeps every entry (recovery holds the damaged
one and says so once, never "recovery cut"), the group serves every intact entry, never the
damaged one, the scrub reports it, and the group commits new appends."""

from __future__ import annotations

import json

from tests.node.test_scrub_processes import BODIES, committed_group, flip_entry, get
from tests.support.commands import cli
from tests.support.group import append_bodies, leader_of, level, recorded, status, wait_for


def test_a_restart_after_damage_on_every_member_keeps_every_intact_committed_entry(group):
    bodies = BODIES[:900]
    base, indexes = committed_group(group, "32MiB", bodies)
    victim = indexes[500]
    r = cli("cluster", "stop", "--base-dir", base, "n0", "n1", "n2", "--format", "json")
    assert r.returncode == 0, r.stderr
    # (flipped once stopped: a running leader would hand its scrub and its followers' the copy
    # it still remembers having written, and the damage would be gone before the restart)
    for n in ("n0", "n1", "n2"):
        flip_entry(base, n, victim, 48 + 3)
    r = cli("cluster", "start", "--base-dir", base, "n0", "n1", "n2", "--wait", "30", "--format", "json")
    assert r.returncode == 0, r.stderr
    leader_of(base)
    rows = wait_for(lambda: level(base), 30, "every member up at one end and commit index")
    assert all(x["end_index"] >= indexes[-1] for x in rows), rows
    for node in recorded(base)["nodes"]:
        with open(node["log"], errors="replace") as fh:
            said = fh.read()
        assert "recovery cut" not in said, said
        assert said.count(f"recovery kept 1 damaged entry in the log: entry {victim} (bad-body-crc") == 1, said
    # every intact entry is served by every member, the damaged one by none
    for n in ("n0", "n1", "n2"):
        for k in (499, 501, 899):
            g = get(base, n, indexes[k])
            assert g.returncode == 0 and json.loads(g.stdout)[0]["body"] == bodies[k].decode(), (n, k, g.stderr)
        g = get(base, n, victim)
        assert g.returncode == 1 and f"entry {victim}" in g.stderr and "damaged" in g.stderr, (n, g.stdout)
    # the scrub reports it on every member (no member has a sound copy to repair it from)
    wait_for(lambda: all(r.get("scrub") and victim in r["scrub"]["damaged"] for r in status(base)), 30,
             "every member's scrub to report the damaged entry")
    # and the group goes on
    answer = append_bodies(base, [b"after the restart"])
    assert answer.code == 200, answer
