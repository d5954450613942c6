"""The scrub does not stall on what it cannot repair (issue 59, item 10): entries damaged on
every member are held (never served, asked about again only when the leader, the term or the
connected members change, or after a while), so passes go on at the scrub's rate and damage
elsewhere is repaired at once. Before, every pass held 20 x 0.5 s on each such entry: three
of them kept a pass over a small log, and the repair of a follower's damage past them, waiting
30 s each pass. The log says where the damage is (data/ or index/) and what each member asked
answered (issue 58, item 12)."""

from __future__ import annotations

from tests.node.test_scrub_processes import BODIES, committed_group, flip_entry, same_files, scrub_rows
from tests.support.commands import cli
from tests.support.group import leader_of, recorded, wait_for


def test_entries_damaged_on_every_member_do_not_hold_the_pass(group):
    base, indexes = committed_group(group, "32MiB", BODIES[:600])
    everywhere = [indexes[100], indexes[200], indexes[300]]
    # (flipped while stopped: a running leader still remembers its writes and would hand them out)
    r = cli("cluster", "stop", "--base-dir", base, "n0", "n1", "n2", "--format", "json")
    assert r.returncode == 0, r.stderr
    for i in everywhere:
        for n in ("n0", "n1", "n2"):
            flip_entry(base, n, i, 48 + 5)
    flip_entry(base, "n1", indexes[400], 48 + 5)  # (on one member only: repairable)
    r = cli("cluster", "start", "--base-dir", base, "n0", "n1", "n2", "--wait", "30", "--format", "json")
    assert r.returncode == 0, r.stderr
    leader_of(base)
    before = {n: 0 for n in ("n0", "n1", "n2")}

    def settled():
        rows = scrub_rows(base)
        return all(r["passes"] >= before[n] + 3 and r["damaged"] == everywhere for n, r in rows.items())
    # the old scrub needed 30 s a pass here (20 x 0.5 s on each of the three)
    wait_for(settled, 20, "three passes on every member, holding exactly the entries damaged everywhere")
    assert same_files(base, ["n0", "n1", "n2"])  # (the follower's copy of indexes[400] is repaired)
    for node in recorded(base)["nodes"]:
        with open(node["log"], errors="replace") as fh:
            said = fh.read()
        for i in everywhere:
            # (asked again only when something changed, e.g. a connection to a member came up)
            assert 1 <= said.count(f"scrub: entry {i} left damaged for now (body-crc in data/") <= 3, said
            line = next(x for x in said.splitlines() if f"scrub: entry {i} left damaged" in x)
            # each member asked says why it has no sound copy: it holds the entry damaged
            assert line.count(f"answered: entry {i} ") == 2 and "is damaged" in line and "no entry" not in line, line


def test_the_metrics_help_names_every_kind_of_damage():
    from cluster.node import metrics
    from store.scrub import KINDS
    said, = [m[3] for m in metrics.CATALOGUE if m[0] == "dledger_scrub_damage_found_total"]
    assert all(k in said for k in KINDS), said
