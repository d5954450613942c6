"""A dledgerctl ``--never-lead`` member started without the group's data file size, beside two
real Java DLedger 0.2.7 servers that lead and write 64 KiB data files (issue 44, item 21).

The Java servers are DLedger's own (tests/support/javadledger.py builds them from the mirrors), started
by tests/support/java/DLedgerFileSize.java, which is ``BossCommand server`` with DLedgerConfig's
``mappedFileSizeForEntryData`` set (a RocketMQ broker sets it from ``mappedFileSizeCommitLog``;
DLedger's command line does not offer it). The member runs on DLedger's 1 GiB default:

- without ``--data-file-size`` it takes the leader's 64 KiB at the Java leader's first roll and
  keeps replicating: its log ends byte-identical to the leader's, in 64 KiB files, it says so
  once, and with the Java follower stopped the group still commits;
- with a wrong ``--data-file-size`` (configured: kept) it refuses the leader's entries and says
  so: one WARNING line naming ``--data-file-size 65536``, ``cluster status`` showing why, and
  ``dledger_push_refused_total{reason="position"}`` counting.

The first case again as the issue met it: the leaders are RocketMQ brokers in DLedger mode
(4.9.4 with DLedger 0.2.6, 4.9.8 with DLedger 0.3.1.2; tests/support/javarocketmq.py BrokerMember,
putting a message every 20 ms while it leads) with 64 KiB commit-log files.

Every wait polls under a deadline. Skipped, saying why, when Java or a mirror is missing.
The rule and the follower alone: tests/raft/test_follower_filesize.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest

from tests.support import javadledger, javarocketmq
from tests.support.commands import cli
from tests.support.group import wait_for
from tests.support.javabuild import JAVA_FLAGS, javac
from tests.support.paths import ROOT, SUPPORT
from tests.support.ports import free_port_base, free_ports

GROUP = "g"
SMALL = 64 * 1024  # the Java members' data files
JAVA_SOURCE = os.path.join(SUPPORT, "java", "DLedgerFileSize.java")


@pytest.fixture(scope="module")
def java_server(tmp_path_factory):
    """The command line of a Java DLedger member with 64 KiB data files."""
    try:
        java = javadledger.build()
    except javadledger.Unavailable as exc:
        pytest.skip(f"Java DLedger 0.2.7 cannot be built here: {exc}")
    src = tmp_path_factory.mktemp("launcher-src")
    out = str(tmp_path_factory.mktemp("launcher"))
    with open(JAVA_SOURCE) as fh, open(src / "DLedgerFileSize.java", "w") as dst:
        dst.write(fh.read())
    javac([str(src)], out, java.classpath.split(os.pathsep), what="DLedgerFileSize")
    classpath = os.pathsep.join([out, java.classpath])

    def command(node: str, peers: str, base: str) -> list[str]:
        return ["java", *JAVA_FLAGS, f"-Ddledger.dataFileSize={SMALL}", "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
                "-Xms128m", "-Xmx256m", "-cp", classpath, "DLedgerFileSize", "--group", GROUP, "--id", node, "--peers",
                peers, "--store-base-dir", base]
    return command


class Group:
    """n0, n1: Java DLedger (64 KiB files); n2: ``dledgerctl node start --never-lead``."""

    def __init__(self, command, base: str, *n2_extra: str) -> None:
        self.command, self.base, self.n2_extra = command, base, n2_extra
        port = free_port_base(4)
        self.peers = ";".join(f"n{k}-127.0.0.1:{port + k}" for k in range(3))
        self.metrics = f"127.0.0.1:{port + 3}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.dirs = {n: os.path.join(base, f"dledger-{n}") for n in ("n0", "n1", "n2")}
        os.makedirs(base, exist_ok=True)

    def start(self, node: str) -> None:
        log = open(os.path.join(self.base, f"{node}.log"), "ab")
        if node == "n2":
            cmd = [sys.executable, "-m", "dledgerctl", "-v", "--log-format", "json", "node", "start", "--group", GROUP,
                   "--id", "n2", "--peers", self.peers, "--store-base-dir", self.base, "--never-lead",
                   "--dledger-peers", "n0,n1", "--heartbeat-interval", "2000", "--metrics-address", self.metrics,
                   *self.n2_extra]
        else:
            cmd = self.command(node, self.peers, self.base)
        with log:
            self.procs[node] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                                env=dict(os.environ, PYTHONPATH=ROOT))

    def stop(self, node: str) -> None:
        p = self.procs.pop(node, None)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(timeout=30)

    def close(self) -> None:
        for node in list(self.procs):
            self.stop(node)

    def statuses(self) -> dict[str, dict]:
        r = cli("cluster", "status", "--peers", self.peers, "--group", GROUP, "--format", "json", "--timeout", "2")
        return {row["id"]: row for row in json.loads(r.stdout)} if r.stdout.strip() else {}

    def java_leader(self) -> str | None:
        rows = self.statuses()
        leaders = [n for n, r in rows.items() if r.get("role") == "leader"]
        return leaders[0] if len(leaders) == 1 and leaders[0] in ("n0", "n1") else None

    def append(self, tag: str, n: int, size: int = 3000, timeout: str = "20") -> subprocess.CompletedProcess:
        bodies = sum((["-d", f"{tag}-{k:03d}-" + "m" * size] for k in range(n)), [])
        return cli("append", "--peers", self.peers, "--group", GROUP, *bodies, "--format", "json", "--timeout", timeout,
                   timeout=180)

    def n2_log(self) -> list[dict]:
        out = []
        with open(os.path.join(self.base, "n2.log"), "rb") as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10) as resp:
            return resp.read().decode()


def _identical(a: str, b: str) -> bool:
    r = cli("store", "diff", a, b, "--format", "json")
    return r.returncode == 0 and json.loads(r.stdout)["identical"]


def _refused(metrics: str) -> float:
    m = re.search(r'^dledger_push_refused_total\{[^}]*reason="position"[^}]*\} (\S+)$', metrics, re.M)
    assert m is not None, "dledger_push_refused_total{reason=\"position\"} is not served"
    return float(m.group(1))


def test_a_member_without_the_size_takes_the_java_leaders_and_keeps_the_third_replica(java_server, tmp_path):
    g = Group(java_server, str(tmp_path / "group"))
    try:
        for n in ("n0", "n1", "n2"):
            g.start(n)
        leader = wait_for(g.java_leader, 90, "a Java leader")
        r = g.append("a", 70)  # 70 entries of 3,058 bytes: past the Java leader's third 64 KiB file
        assert r.returncode == 0, r.stderr
        wait_for(lambda: _identical(g.dirs[leader], g.dirs["n2"]), 60, "n2 to hold the leader's log")
        data = os.path.join(g.dirs["n2"], "data")
        names = sorted(os.listdir(data))
        assert names == sorted(os.listdir(os.path.join(g.dirs[leader], "data"))) and len(names) >= 3
        assert {os.path.getsize(os.path.join(data, n)) for n in names} == {SMALL}
        took = [rec for rec in g.n2_log() if rec.get("event") == "data_file_size"]
        assert len(took) == 1 and took[0]["data_file_size"] == SMALL, took
        assert not [rec for rec in g.n2_log() if rec.get("event") == "push_refused"]
        assert _refused(g.scrape()) == 0
        assert "push_refused" not in g.statuses()["n2"]
        # the Java follower stops: the leader and n2 are the majority, and commit
        g.stop("n1" if leader == "n0" else "n0")
        r = g.append("b", 25, timeout="30")
        assert r.returncode == 0, r.stderr
        assert [row["index"] for row in json.loads(r.stdout)] == list(range(70, 95))
        wait_for(lambda: _identical(g.dirs[leader], g.dirs["n2"]), 60, "n2 to hold what was committed with it")
        # restarted without the size, n2 reads its files' size from them
        g.stop("n2")
        g.start("n2")
        r = g.append("c", 25, timeout="60")
        assert r.returncode == 0, r.stderr
        wait_for(lambda: _identical(g.dirs[leader], g.dirs["n2"]), 60, "n2 to hold the log after its restart")
    finally:
        g.close()


def test_a_member_with_a_wrong_configured_size_refuses_and_says_why_once(java_server, tmp_path):
    g = Group(java_server, str(tmp_path / "group"), "--data-file-size", str(1 << 20))
    try:
        for n in ("n0", "n1", "n2"):
            g.start(n)
        wait_for(g.java_leader, 90, "a Java leader")
        r = g.append("a", 40)  # past the first 64 KiB file
        assert r.returncode == 0, r.stderr
        wait_for(lambda: _refused(g.scrape()) >= 3, 60, "n2 to refuse the Java leader's pushes a few times")
        row = wait_for(lambda: g.statuses().get("n2", {}).get("push_refused"), 30, "cluster status to say why")
        assert "start this member with --data-file-size 65536, the leader's" in row
        table = cli("cluster", "status", "--peers", g.peers, "--group", GROUP, "--timeout", "2")
        assert "--data-file-size 65536" in table.stdout
        said = [rec for rec in g.n2_log() if rec.get("event") == "push_refused"]
        assert len(said) == 1 and said[0]["level"] == "WARNING", said
        assert "is at pos 65536, the local log continues at" in said[0]["msg"]
        assert "--data-file-size 65536" in said[0]["msg"]
    finally:
        g.close()


def test_a_member_without_the_size_keeps_a_broker_groups_third_replica_past_its_rolls(rocketmq, tmp_path):
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(free_ports(3)))
    brokers = {b: javarocketmq.BrokerMember(rocketmq, str(tmp_path / b / "store"), b, peers, data_file_size=SMALL,
                                            body_bytes=400) for b in ("n0", "n1")}
    base = str(tmp_path / "n2")
    os.makedirs(base)
    log_path = os.path.join(base, "n2.log")
    member = None

    def leader() -> str | None:
        return next((b for b, m in brokers.items() if m.running and (m.role() or {}).get("role") == "LEADER"), None)

    def data_files(node_dir: str) -> list[str]:
        d = os.path.join(node_dir, "data")
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    try:
        with open(log_path, "ab") as log:
            member = subprocess.Popen(
                [sys.executable, "-m", "dledgerctl", "-v", "--log-format", "json", "node", "start", "--group",
                 "broker-a", "--id", "n2", "--peers", peers, "--store-base-dir", base, "--never-lead",
                 "--dledger-peers", "n0,n1", "--heartbeat-interval", "2000"], stdout=subprocess.DEVNULL, stderr=log,
                env=dict(os.environ, PYTHONPATH=ROOT))
        for b in brokers.values():
            b.start()
        first = wait_for(leader, 60, "a broker to lead")
        dirs = {first: str(tmp_path / first / "store" / f"dledger-{first}"), "n2": os.path.join(base, "dledger-n2")}
        wait_for(lambda: len(data_files(dirs[first])) >= 3, 90, "the leader broker to roll its 64 KiB files twice")
        for b in brokers.values():
            b.pause()
        wait_for(lambda: _identical(dirs[first], dirs["n2"]), 60, "n2 to hold the leader broker's log")
        names = data_files(dirs["n2"])
        assert len(names) >= 3 and {os.path.getsize(os.path.join(dirs["n2"], "data", n)) for n in names} == {SMALL}
        with open(log_path, "rb") as fh:
            recs = [json.loads(line) for line in fh if line.startswith(b"{")]
        took = [r for r in recs if r.get("event") == "data_file_size"]
        assert len(took) == 1 and took[0]["data_file_size"] == SMALL, took
        assert not [r for r in recs if r.get("event") == "push_refused"]
        # the other broker stops: the leader and n2 are the majority, and puts are acknowledged
        brokers["n1" if first == "n0" else "n0"].kill()
        before = len(brokers[first].puts())
        brokers[first].resume()
        wait_for(lambda: len(brokers[first].puts()) >= before + 20, 60, "puts acknowledged with a broker down")
    finally:
        for b in brokers.values():
            b.kill()
        if member is not None:
            member.kill()
            member.wait(timeout=30)
