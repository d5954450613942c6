"""A dledgerctl ``--never-lead --keep-truncated`` member beside two real Java DLedger 0.2.7
servers (tests/support/javadledger.py, 64 KiB data files): its tail of an old term, written while it
was away, is cut by the Java leader's COMPARE/TRUNCATE; the member keeps exactly those
entries, ``store inspect-data`` reads the file and ``mq salvage`` finds the lost messages and
not the one the group holds. Skipped, saying why, when Java or a mirror is missing."""

from __future__ import annotations

import asyncio
import json
import os

from cluster.net.client import Client
from cluster.raft.config import parse_peers
from store.filestore import FileStore
from store.kept import kept_files
from tests.support.commands import cli
from tests.support.group import wait_for
from tests.java.test_follower_filesize_java import GROUP, Group, _identical, java_server  # noqa: F401 (a fixture)
from tests.support.rmq_encode import keyed_message


def _append(g: Group, bodies: list[bytes]) -> list:
    async def go():
        c = Client(parse_peers(g.peers), GROUP, timeout=30)
        try:
            return [tuple(e) for e in (await c.append(bodies)).entries]
        finally:
            await c.close()
    return asyncio.run(go())


def test_a_java_leader_cuts_a_keeping_member_which_keeps_exactly_the_cut_entries(java_server, tmp_path):
    keep = str(tmp_path / "kept")
    g = Group(java_server, str(tmp_path / "group"), "--data-file-size", "64KiB", "--keep-truncated", keep)
    try:
        for n in ("n0", "n1", "n2"):
            g.start(n)
        leader = wait_for(g.java_leader, 90, "a Java leader")
        _append(g, [keyed_message("Orders", k, f"A{k}") for k in range(10)])
        wait_for(lambda: _identical(g.dirs[leader], g.dirs["n2"]), 60, "n2 to hold the leader's log")
        g.stop("n2")
        # a new term without n2: the Java leader restarts, the two Java members elect again
        g.stop(leader)
        g.start(leader)
        wait_for(g.java_leader, 90, "a Java leader in a new term")
        newer = _append(g, [keyed_message("Orders", 10 + k, f"B{k}") for k in range(10)])
        leader = g.java_leader()
        # offline, n2 takes entries of its old term past its end: five lost, one the group holds
        with FileStore.open(g.dirs["n2"]) as s:
            first, old_term = s.end_index + 1, s.end_term
            assert old_term < newer[0][1]
            s.append_leader([keyed_message("Orders", 10 + k, f"LOST{k}") for k in range(5)] + [keyed_message("Orders", 10, "B0")],
                            old_term)
            cut = [s.get_bytes(i) for i in range(first, s.end_index + 1)]
        g.start("n2")
        wait_for(lambda: _identical(g.dirs[leader], g.dirs["n2"]), 90, "n2 cut back and re-filled")
        (path, _), = kept_files(keep)
        assert os.path.basename(path).startswith(f"truncated-{first}-{first + len(cut) - 1}-")
        with open(path, "rb") as fh:
            assert fh.read() == b"".join(cut)
        r = cli("store", "inspect-data", path, "--format", "json")
        assert r.returncode == 0, r.stderr
        assert [x["index"] for x in json.loads(r.stdout)] == list(range(first, first + len(cut)))
        g.stop("n0")
        g.stop("n1")
        r = cli("mq", "salvage", path, "--against", g.dirs[leader], "--format", "json")
        assert r.returncode == 1, r.stderr  # (messages are missing)
        assert sorted(x["uniq_key"] for x in json.loads(r.stdout)) == [f"LOST{k}" for k in range(5)]
    finally:
        g.close()
