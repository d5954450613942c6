"""``store force-new-group`` on the survivor of a group of three real Java DLedger 0.2.7
servers (tests/support/javadledger.py, 64 KiB data files), two of whose machines are lost
for good: DLedger's own server, started alone on the forced store, leads, serves every entry
the survivor held (those it wrote while its followers were gone too, never acknowledged) and
takes new appends.

Java DLedger takes its members from ``--peers`` and cannot read a config entry (its recovery
checks every entry's magic), so the force writes none to such a log: the survivor's own
copy with one appended shows what that would do to DLedger 0.2.7. Skipped, saying why, when
Java or a mirror is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from store.filestore import FileStore
from store.format import MAGIC_CONFIG, MAGIC_NORMAL
from tests.java.test_dledger_wire import GROUP, JavaGroup, leader_of, statuses
from tests.java.test_follower_filesize_java import java_server  # noqa: F401 (a fixture)
from tests.support.commands import cli
from tests.support.group import wait_for
from tests.support.ports import free_port_base


def _append(peers: str, bodies: list[str], timeout: str = "20") -> subprocess.CompletedProcess:
    return cli("append", "--peers", peers, "--group", GROUP, *sum((["-d", b] for b in bodies), []), "--format", "json",
               "--timeout", timeout, timeout=180)


def _held(node_dir: str) -> list[tuple[int, int, int, bytes]]:
    with FileStore.open(node_dir, read_only=True) as s:
        return [(e.index, e.term, e.magic, bytes(e.body)) for e in (s.get(i) for i in range(s.begin_index,
                                                                                          s.end_index + 1))]


def test_a_java_survivor_forced_alone_leads_and_serves_every_entry(java_server, tmp_path):  # noqa: F811
    g = JavaGroup(java_server, str(tmp_path / "g"), ["n0", "n1", "n2"], free_port_base(3))
    dirs = {n: os.path.join(g.base, f"dledger-{n}") for n in g.ids}
    try:
        for n in g.ids:
            g.start(n)
        leader = wait_for(lambda: leader_of(g.peers), 90, "a Java leader")
        # every member up and following it (two elect a leader; a third slow to start would hold no store)
        def following() -> bool:
            rows = statuses(g.peers)
            return len(rows) == 3 and all(r.get("state") == "up" and r.get("leader") == leader for r in rows)
        wait_for(following, 60, "every Java member to follow the leader")
        r = _append(g.peers, [f"acked-{k:03d}-" + "m" * 2000 for k in range(60)])  # (several 64 KiB files)
        assert r.returncode == 0, r.stderr
        # its followers gone, the leader writes what it can no longer have acknowledged
        others = [n for n in g.ids if n != leader]
        for n in others:
            g.kill(n)
        alone = f"{leader}-{g.address[leader]}"
        # (Java's own wait for acknowledgements, 2.5 s, answers: the client waits longer, as a loaded machine may need)
        r = _append(alone, ["unacked"])
        assert r.returncode != 0 and "WAIT_QUORUM_ACK_TIMEOUT" in r.stderr, r.stderr
        g.kill(leader)
        for n in others:  # (their machines are gone for good)
            shutil.rmtree(dirs[n])
        survivor = dirs[leader]
        held = _held(survivor)
        assert {m for _, _, m, _ in held} == {MAGIC_NORMAL}  # (DLedger 0.2.7's own entries only)
        bodies = [b for _, _, _, b in held]
        assert bodies == [f"acked-{k:03d}-".encode() + b"m" * 2000 for k in range(60)] + [b"unacked"]

        # the plan lists what is past the commit index, says how to start it, changes nothing
        r = cli("store", "force-new-group", survivor, "--peers", alone, "--format", "json")
        assert r.returncode == 0, r.stderr
        past = json.loads(r.stdout)
        assert len(past) >= 1 and [x["index"] for x in past] == list(range(held[-1][0] - len(past) + 1,
                                                                             held[-1][0] + 1))
        assert "DLedger 0.2.7's entries only" in r.stderr and f"--peers '{alone}'" in r.stderr
        assert f"dLegerPeers={alone}" in r.stderr and "Nothing changed" in r.stderr
        assert _held(survivor) == held

        # what a config entry would do to DLedger 0.2.7: on a copy, it does not get past it
        copy = str(tmp_path / "copy")
        shutil.copytree(g.base, copy, ignore=shutil.ignore_patterns("*.log"))
        with FileStore.open(os.path.join(copy, f"dledger-{leader}")) as s:
            s.append_leader([b'{"n0": "x"}'], s.end_term + 1, MAGIC_CONFIG)
            s.set_committed(s.end_index)
            s.flush()
            s.persist_checkpoint()
        spoiled = JavaGroup(java_server, copy, [leader], 0, peers=alone)
        spoiled.start(leader)
        try:
            wait_for(lambda: "magic" in spoiled.log(leader) or spoiled.procs[leader].poll() is not None, 60,
                     "DLedger 0.2.7 to meet the config entry")
            assert "unknown magic=3" in spoiled.log(leader) or "magic=3" in spoiled.log(leader), \
                spoiled.log(leader)[-3000:]
        finally:
            spoiled.stop_all()

        # applied: no entry written, the log committed, the term raised
        r = cli("store", "force-new-group", survivor, "--peers", alone, "--yes")
        assert r.returncode == 0, r.stderr
        assert "no entry is written" in r.stderr and "now committed" in r.stderr
        assert _held(survivor) == held
        r = cli("store", "checkpoint", survivor, "--format", "json")
        assert r.returncode == 0, r.stderr
        cp = {(x["source"], x["key"]): x["value"] for x in json.loads(r.stdout)}
        assert cp[("checkpoint", "committedIndex")] == held[-1][0], cp
        assert cp[("currterm", "currTerm")] > held[-1][1], cp

        # DLedger's own server, alone: it leads, serves every entry, takes new ones
        g.start(leader, alone)
        assert wait_for(lambda: leader_of(alone), 90, "the survivor to lead alone") == leader
        r = cli("get", "--peers", alone, "--group", GROUP, "-i", "0", "-c", str(len(held)), "--format", "json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert [(x["index"], x["body"].encode()) for x in got] == [(i, b) for i, _, _, b in held]
        r = _append(alone, ["after-force"])
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)[0]["index"] == held[-1][0] + 1
    finally:
        g.stop_all()
