"""dledgerctl and the real Java DLedger 0.2.7 on the wire: each side's client against the other's group.

The Java server and client are built from sources by tests/support/javadledger.py (skipped with the
reason when a mirror, javac or a Debian jar is missing). Every process listens on 127.0.0.1;
every wait polls under a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess

import pytest

from cluster.net.client import Client
from cluster.net.frames import Frame, json_body
from cluster.net.wire import METADATA
from cluster.raft.config import parse_peers
from tests.support.commands import cli
from tests.support.group import wait_for
from tests.support.ports import free_port_base

GROUP = "g"


class JavaGroup:
    """Java DLedger server processes, one per member, each logging to <base>/<id>.log.
    ``java``: a built DLedger (tests/support/javadledger.py; its ``BossCommand server``), or
    a function of (id, peers, base) giving a member's command line
    (tests/java/test_follower_filesize_java.py's ``java_server``: 64 KiB data files)."""

    def __init__(self, java, base: str, ids: list[str], port_base: int, peers: str | None = None) -> None:
        self.command = java if callable(java) else (
            lambda node, peers, base: java.server_command(GROUP, node, peers, base))
        self.base, self.ids = base, ids
        self.peers = peers or ";".join(f"{n}-127.0.0.1:{port_base + k}" for k, n in enumerate(ids))
        self.address = dict(x.split("-", 1) for x in self.peers.split(";"))
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, node: str, peers: str | None = None) -> None:
        """Start ``node`` with the group's peers (or ``peers``: itself alone, say)."""
        os.makedirs(self.base, exist_ok=True)
        with open(os.path.join(self.base, f"{node}.log"), "ab") as log:
            self.procs[node] = subprocess.Popen(self.command(node, peers or self.peers, self.base), stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, node: str, sig=signal.SIGKILL) -> None:
        p = self.procs.pop(node)
        p.send_signal(sig)
        p.wait(timeout=30)

    def stop_all(self) -> None:
        for node in list(self.procs):
            self.kill(node)

    def log(self, node: str) -> str:
        with open(os.path.join(self.base, f"{node}.log"), errors="replace") as fh:
            return fh.read()


def statuses(peers: str) -> list[dict]:
    r = cli("cluster", "status", "--peers", peers, "--group", GROUP, "--format", "json", "--timeout", "1")
    return json.loads(r.stdout) if r.stdout.strip() else []


def leader_of(peers: str) -> str | None:
    rows = statuses(peers)
    leaders = [r["id"] for r in rows if r.get("role") == "leader"]
    return leaders[0] if len(leaders) == 1 else None


@pytest.fixture
def java_group(dledger_java, tmp_path):
    g = JavaGroup(dledger_java, str(tmp_path / "java"), ["n0", "n1", "n2"], free_port_base(3))
    try:
        for n in g.ids:
            g.start(n)
        wait_for(lambda: leader_of(g.peers), 60, "a Java DLedger leader")
        yield g
    finally:
        g.stop_all()


def test_dledgerctl_commands_against_a_java_group(java_group, tmp_path):
    g = java_group
    # (a Java follower names the leader once its first heartbeat arrives: until every one does)
    rows = wait_for(lambda: (lambda rows: rows if len({r["leader"] for r in rows}) == 1 and rows[0]["leader"]
                             else None)(statuses(g.peers)), 30, "every Java member to name the leader")
    assert [r["state"] for r in rows] == ["up"] * 3
    assert {r["impl"] for r in rows} == {"dledger"}
    leader = [r for r in rows if r["role"] == "leader"]
    assert len(leader) == 1 and leader[0]["term"] >= 0
    assert all(r["leader"] == leader[0]["id"] for r in rows)

    r = cli("append", "--peers", g.peers, "--group", GROUP, "-d", "alpha", "-d", "beta", "-d", "gamma",
            "--format", "json")
    assert r.returncode == 0, r.stderr
    appended = json.loads(r.stdout)
    assert [a["index"] for a in appended] == [0, 1, 2]
    assert [a["size"] for a in appended] == [48 + 5, 48 + 4, 48 + 5]
    assert [a["pos"] for a in appended] == [0, 53, 105]

    got = cli("get", "--peers", g.peers, "--group", GROUP, "-i", "0", "--count", "3", "--format", "json")
    assert got.returncode == 0, got.stderr
    assert [(e["index"], e["body"]) for e in json.loads(got.stdout)] == [(0, "alpha"), (1, "beta"), (2, "gamma")]
    # more than one page of DLedger's one-entry GETs, and past the end: what there is, and a note
    bodies = [f"e{k}" for k in range(3, 140)]
    r = cli("append", "--peers", g.peers, "--group", GROUP, *sum((["-d", b] for b in bodies), []), "--format", "json",
            timeout=120)
    assert r.returncode == 0, r.stderr
    got = cli("get", "--peers", g.peers, "--group", GROUP, "-i", "2", "--count", "200", "--format", "jsonl")
    assert got.returncode == 0, got.stderr
    assert [json.loads(x)["body"] for x in got.stdout.split("\n") if x] == ["gamma"] + bodies
    assert "of 200" in got.stderr
    # the Java leader refuses what it does not have, in DLedger's code
    far = cli("get", "--peers", g.peers, "--group", GROUP, "-i", "5000")
    assert far.returncode == 1 and "out of range" in far.stderr.lower()
    # a wrong group is DLedger's UNKNOWN_GROUP, shown as such rather than as a member without a leader
    wrong = cli("cluster", "status", "--peers", g.peers, "--group", "other", "--format", "json", "--timeout", "2")
    assert wrong.returncode == 1
    rows = json.loads(wrong.stdout)
    assert {r["state"] for r in rows} == {"refused"}  # (a member of another group refuses us: issue 44.7)
    assert all("group" in (r.get("error") or "").lower() for r in rows), rows
    assert all("UNKNOWN_GROUP" in r["error"] for r in json.loads(wrong.stdout))
    # dledgerctl's own requests are refused with a clear error, not a hang
    wm = cli("peer", "watermarks", "--peers", g.peers, "--group", GROUP, "--timeout", "5")
    assert wm.returncode == 1 and "Java DLedger" in wm.stderr
    # a live backup needs the leader's first and commit index, which a Java node does not say: one line, no file
    out = str(tmp_path / "java.dlbk")
    bk = cli("cluster", "backup", "--peers", g.peers, "--group", GROUP, "--out", out, "--timeout", "5")
    assert bk.returncode == 1 and bk.stderr.count("\n") == 1 and "commit index" in bk.stderr, bk.stderr
    assert not os.path.exists(out) and not os.path.exists(out + ".partial")


def test_dledger_java_client_against_a_dledgerctl_group(dledger_java, group):
    base = group(3, "--group", GROUP)
    with open(os.path.join(base, "cluster.json")) as fh:
        peers_text = json.load(fh)["peers"]
    # DLedger's own client: metadata, then APPEND to the leader it names, then GET
    res = dledger_java.client("append", GROUP, peers_text, "--data", "hello-from-java", "--count", "3")
    assert res["code"] == 200 and res["group"] == GROUP
    last = res["index"]
    leader = res["leaderId"]
    got = dledger_java.client("get", GROUP, peers_text, "--index", str(last))
    assert got["code"] == 200
    (entry,) = got["entries"]
    assert entry["index"] == last and entry["pos"] == res["pos"] and entry["magic"] == 1
    assert entry["size"] == 48 + len(b"hello-from-java")
    import base64
    assert base64.b64decode(entry["body"]) == b"hello-from-java"
    # INDEX_OUT_OF_RANGE; 500 (INTERNAL_ERROR) is the Java client's own failure, a request that
    # timed out in it on a loaded machine (the node answers at once): asked again then
    codes = []
    while len(codes) < 3 and (not codes or codes[-1] == 500):
        codes.append(dledger_java.client("get", GROUP, peers_text, "--index", "100000")["code"])
    assert codes[-1] == 410, codes
    # what the Java client appended, read back by dledgerctl
    r = cli("get", "--base-dir", base, "-i", str(last - 2), "--count", "3", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [e["body"] for e in json.loads(r.stdout)] == ["hello-from-java"] * 3

    # a request naming another member is refused as DLedger refuses it (UNKNOWN_MEMBER)
    peers = parse_peers(peers_text)
    other = next(p for p in peers if p != leader)

    async def misaddressed():
        c = Client(peers, GROUP, timeout=5)
        try:
            return await c._call(leader, Frame(METADATA, body=json_body({"group": GROUP, "remoteId": other})),
                                 METADATA, 5)
        finally:
            await c.close()
    answer = asyncio.run(misaddressed())
    assert answer["code"] == 401 and other in answer["remark"]


# -- a mixed group: two Java DLedger members and one dledgerctl member ---------------------

def _appended(peers: str, bodies: list[str]) -> list[dict]:
    r = cli("append", "--peers", peers, "--group", GROUP, *sum((["-d", b] for b in bodies), []), "--format", "json",
            "--timeout", "20", timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _transfer(peers: str, to: str) -> dict:
    r = cli("peer", "transfer-leader", "--peers", peers, "--group", GROUP, "--to", to, "--format", "json",
            "--timeout", "30", timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _identical(a: str, b: str) -> bool:
    r = cli("store", "diff", a, b, "--format", "json")
    return r.returncode == 0 and json.loads(r.stdout)["identical"]


class DledgerctlMember:
    def __init__(self, node: str, peers: str, base: str, *extra: str) -> None:
        self.node, self.peers, self.base, self.extra = node, peers, base, extra
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        from tests.support.paths import ROOT
        import sys
        env = dict(os.environ, PYTHONPATH=ROOT)
        log = open(os.path.join(self.base, f"{self.node}.log"), "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "dledgerctl", "-v", "node", "start", "--id", self.node,
                                      "--peers", self.peers, "--group", GROUP, "--store-base-dir", self.base,
                                      *self.extra], stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None


def test_mixed_group_elects_replicates_both_ways_and_ends_identical(dledger_java, tmp_path):
    """n0 and n1 are Java DLedger 0.2.7, n2 is dledgerctl. Leadership moves Java -> dledgerctl ->
    (leader killed) Java -> dledgerctl -> Java, with appends in between; every member ends with
    the same bytes, and every entry is there once, in order."""
    base = str(tmp_path / "mixed")
    g = JavaGroup(dledger_java, base, ["n0", "n1"], free_port_base(3))
    port_n2 = int(g.peers.rsplit(":", 1)[1]) + 1
    g.peers += f";n2-127.0.0.1:{port_n2}"
    ours = DledgerctlMember("n2", g.peers, base, "--heartbeat-interval", "2000", "--dledger-peers", "n0,n1")
    dirs = {n: os.path.join(base, f"dledger-{n}") for n in ("n0", "n1", "n2")}
    written: list[str] = []

    def append(tag: str, n: int = 15) -> None:
        bodies = [f"{tag}-{k}" for k in range(n)]
        rows = _appended(g.peers, bodies)
        assert len(rows) == n
        written.extend(bodies)

    try:
        os.makedirs(base)
        for n in ("n0", "n1"):
            g.start(n)
        ours.start()
        wait_for(lambda: leader_of(g.peers), 60, "a leader in the mixed group")
        append("first")
        # to dledgerctl: it leads two Java followers with DLedger's own push
        assert _transfer(g.peers, "n2")["leader"] == "n2"
        append("under-n2")
        rows = wait_for(lambda: (lambda r: r if r["n0"]["leader"] == r["n1"]["leader"] == "n2" else None)(
            {r["id"]: r for r in statuses(g.peers)}), 30, "the Java members to follow n2")
        assert rows["n2"]["impl"] == "dledgerctl" and rows["n0"]["impl"] == rows["n1"]["impl"] == "dledger"
        # the dledgerctl leader's watermarks show its Java followers
        wm = cli("peer", "watermarks", "--peers", g.peers, "--group", GROUP, "--format", "json")
        assert wm.returncode == 0, wm.stderr
        followers = {r["peer"]: r for r in json.loads(wm.stdout) if r["peer"] != "n2"}
        assert set(followers) == {"n0", "n1"} and all(r["alive"] for r in followers.values())
        # the dledgerctl leader kills: the Java members elect one of theirs
        ours.kill()
        wait_for(lambda: leader_of(g.peers) in ("n0", "n1"), 60, "a Java leader after n2 was killed")
        append("under-java")
        # n2 comes back as a follower of the Java leader and catches up
        ours.start()
        wait_for(lambda: _identical(dirs[leader_of(g.peers) or "n0"], dirs["n2"]), 60, "n2 to catch up")
        assert _transfer(g.peers, "n2")["leader"] == "n2"
        append("n2-again")
        java_next = "n1" if leader_of(g.peers) != "n1" else "n0"
        assert _transfer(g.peers, java_next)["leader"] == java_next
        append("last")
        wait_for(lambda: _identical(dirs["n0"], dirs["n2"]) and _identical(dirs["n1"], dirs["n2"]), 60,
                 "every member to hold the same log")
        got = cli("get", "--peers", g.peers, "--group", GROUP, "-i", "0", "--count", "1000", "--format", "json")
        assert got.returncode == 0, got.stderr
        assert [e["body"] for e in json.loads(got.stdout)] == written
        # the Java members read what dledgerctl wrote, also after a restart (recovery)
        g.kill("n0")
        g.start("n0")
        wait_for(lambda: {r["id"]: r for r in statuses(g.peers)}["n0"].get("leader") == java_next, 60,
                 "n0 back as a follower")
        append("after-restart", 3)
        wait_for(lambda: _identical(dirs["n0"], dirs["n2"]), 60, "n0 caught up after its restart")
    finally:
        ours.kill()
        g.stop_all()
