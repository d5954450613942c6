"""A dledgerctl member in a RocketMQ broker group (``node start --never-lead``), with real
processes: two members are RocketMQ message stores in DLedger mode (4.9.4 with DLedger 0.2.6,
and 4.9.8 with DLedger 0.3.1.2),
each in a JVM of its own, built from the mirrors (tests/support/javarocketmq.py BrokerMember: a
broker's store and its DLedger member, putting a message every 20 ms whenever it leads);
the third is ``dledgerctl node start --never-lead``. Under that steady stream of puts:

- the leader broker is killed (SIGKILL): the other broker leads within 10 s and puts go on;
  the killed one restarts and catches up;
- the surviving broker is behind the dledgerctl member (stopped while the other put, which
  is then killed): a broker leads again, holding every acknowledged message;
- the dledgerctl member is killed and restarted: the brokers' leader does not change;
- a broker's disk is lost: it starts again from a copy of the dledgerctl member's log
  (docs/rocketmq.md), rebuilds its consume queues and catches up.

Afterwards every message a broker acknowledged is on all three members exactly once, in
order (``mq messages``), each broker's consume queues pass ``mq check``, ``store diff``
finds the three logs identical, and the dledgerctl member never led longer than a handover.
The same rules in the simulation: tests/raft/test_never_lead_sim.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime

from tests.support import javarocketmq
from tests.support.paths import ROOT
from tests.support.ports import free_ports

PROJECT = ROOT
DATA_FILE = 1 << 20  # the brokers' mappedFileSizeCommitLog, and so the member's data file size
FAILOVER_S = 10.0
HANDOVER_S = 8.0  # the longest the dledgerctl member may lead (catch a broker up, transfer)


class Member:
    """``dledgerctl node start --never-lead`` as n2 of the group, its log (JSON lines) in a file."""

    def __init__(self, base: str, peers: str) -> None:
        self.base, self.peers = base, peers
        self.log_path = os.path.join(base, "n2.log")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        os.makedirs(self.base, exist_ok=True)
        cmd = [sys.executable, "-m", "dledgerctl", "-v", "--log-format", "json", "node", "start", "--group",
               "broker-a", "--id", "n2", "--peers", self.peers, "--store-base-dir", self.base, "--never-lead",
               "--dledger-peers", "n0,n1", "--data-file-size", str(DATA_FILE), "--heartbeat-interval", "2000"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, cwd=self.base,
                                         env=dict(os.environ, PYTHONPATH=PROJECT))

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("the dledgerctl member did not stop on SIGTERM within 30 s") from None

    def states(self) -> list[dict]:
        """Its state changes (role, term, leader), with their times, from its log."""
        out = []
        with open(self.log_path, "rb") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("event") == "state":
                    out.append(rec)
        return out

    def led(self) -> list[float]:
        """How long (s) each of its terms as leader lasted, from its log (one still under way: until now)."""
        spans, since = [], None
        for rec in self.states():
            at = datetime.fromisoformat(rec["time"]).timestamp()
            if rec["role"] == "leader" and since is None:
                since = at
            elif rec["role"] != "leader" and since is not None:
                spans.append(at - since)
                since = None
        if since is not None:
            spans.append(time.time() - since)
        return spans


class Group:
    def __init__(self, rocketmq, tmp_path) -> None:
        ports = free_ports(3)
        self.peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
        self.tmp = tmp_path
        self.brokers = {b: javarocketmq.BrokerMember(rocketmq, str(tmp_path / b / "store"), b, self.peers,
                                                     data_file_size=DATA_FILE)
                        for b in ("n0", "n1")}
        self.member = Member(str(tmp_path / "n2"), self.peers)

    def start(self) -> None:
        self.member.start()
        for b in self.brokers.values():
            b.start()

    def leader(self, timeout: float, among=("n0", "n1")) -> tuple[str, dict]:
        """The broker that leads and has taken a write (its first acknowledged put after ``ready``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name in among:
                b = self.brokers[name]
                if not b.running:
                    continue
                role = b.role()
                if role and role["role"] == "LEADER":
                    put = next((e for e in b.puts() if e["term"] == role["term"] and e["run"] == b.proc.pid), None)
                    if put is not None:
                        return name, put
            time.sleep(0.05)
        raise AssertionError(f"no broker led and took a write within {timeout} s: "
                             f"{ {n: b.role() for n, b in self.brokers.items()} }, n2: {self.member.states()[-3:]}")

    def acked(self) -> list[dict]:
        out = [e for b in self.brokers.values() for e in b.puts()]
        return sorted(out, key=lambda e: e["phy_offset"])

    def close(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.member.kill()


def dledgerctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "dledgerctl", *args], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=PROJECT))
    if check:
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    return r


def test_a_never_lead_member_keeps_a_broker_group_led_by_brokers(rocketmq, tmp_path):
    g = Group(rocketmq, tmp_path)
    try:
        g.start()
        first, _ = g.leader(60)
        other = "n1" if first == "n0" else "n0"
        time.sleep(2)  # a stream of puts

        # 1. the leader broker dies: the other leads within FAILOVER_S, and puts go on
        g.brokers[first].kill()
        killed_at = time.time()
        name, put = g.leader(30, among=(other,))
        took = put["at"] / 1000 - killed_at
        assert took < FAILOVER_S, f"{other} took its first write {took:.1f} s after {first} was killed"
        g.brokers[first].start()  # it restarts and follows (a loaded machine may take it a while)
        deadline, st = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            st = g.brokers[first].state()
            if st["role"] == "FOLLOWER" and st["leader"] == other:
                break
            time.sleep(0.2)
        assert st["role"] == "FOLLOWER" and st["leader"] == other, st

        # 2. the surviving broker is behind the dledgerctl member: stop it, put on the other,
        # kill that one, start the first: a broker leads again and holds every acknowledged message
        g.brokers[first].quit()
        time.sleep(2)  # other puts, with n2 acknowledging
        g.brokers[other].kill()
        g.brokers[first].start()
        name, put = g.leader(60, among=(first,))
        assert name == first
        g.brokers[other].start()
        time.sleep(3)

        # 3. the dledgerctl member dies and restarts: nothing changes for the brokers
        before = g.brokers[first].role()
        g.member.kill()
        time.sleep(2)
        g.member.start()
        deadline, me = time.monotonic() + 60, {}  # (a loaded machine may take it a while to start)
        while time.monotonic() < deadline:
            rows = json.loads(dledgerctl("cluster", "status", "--peers", g.peers, "--group", "broker-a", "--format",
                                         "json", check=False).stdout)
            me = next(r for r in rows if r["id"] == "n2")
            if me.get("leader") == first:
                break
            time.sleep(0.5)
        assert g.brokers[first].role() == before and g.brokers[first].running and g.brokers[other].running
        assert me["never_lead"] is True and me["role"] == "follower" and me["leader"] == first, me
        table = dledgerctl("cluster", "status", "--peers", g.peers, "--group", "broker-a").stdout
        assert "voter, never leads" in table, table
        n_before = len(g.brokers[first].puts())
        deadline = time.monotonic() + 15  # (a loaded machine may hold the broker's producer back a while)
        while len(g.brokers[first].puts()) <= n_before and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(g.brokers[first].puts()) > n_before, "puts stopped"

        # 4. a broker's disk is lost: it starts again from the dledgerctl member's log
        # (docs/rocketmq.md: its data, index and checkpoint, copied while the member runs)
        g.brokers[other].kill()
        root = tmp_path / other / "store"
        shutil.rmtree(root)
        mine = root / f"dledger-{other}"
        mine.mkdir(parents=True)
        for part in ("data", "index"):
            shutil.copytree(tmp_path / "n2" / "dledger-n2" / part, mine / part)
        shutil.copy(tmp_path / "n2" / "dledger-n2" / "checkpoint", mine / "checkpoint")
        r = dledgerctl("store", "verify", str(mine), check=False)
        assert r.returncode in (0, 1), r.stderr  # (a torn last entry is what recovery cuts: said, not fatal)
        g.brokers[other].start()
        deadline = time.monotonic() + 60
        while True:
            lead, mine_now = g.brokers[first].state(), g.brokers[other].state()
            if (mine_now["leader"] == first and mine_now["ledger_end"] >= lead["committed"] >= 0
                    and mine_now["dispatch_behind"] == 0):
                break
            assert time.monotonic() < deadline, f"{other} did not catch up: {mine_now} vs {lead}"
            time.sleep(0.5)

        # the end: stop the puts, let every member catch up, stop them all
        for b in g.brokers.values():
            b.pause()
        time.sleep(3)
        for b in g.brokers.values():
            b.quit()
        g.member.stop()
        led = g.member.led()
        assert all(s < HANDOVER_S for s in led), f"n2 led for {led} s"
        acked = g.acked()
        assert acked, "no put was acknowledged"

        dirs = {"n0": str(tmp_path / "n0" / "store"), "n1": str(tmp_path / "n1" / "store"),
                "n2": str(tmp_path / "n2" / "dledger-n2")}
        want = [(e["key"], e["msg_id"], e["queue_offset"]) for e in acked]
        for name, d in dirs.items():
            rows = [json.loads(line) for line in dledgerctl("mq", "messages", d, "--format", "jsonl").stdout.splitlines()]
            kinds = {r["kind"] for r in rows}
            assert kinds == {"message"}, f"{name}: entries that are not messages: {kinds}"
            got = [(r["keys"], r["msg_id"], r["queue_offset"]) for r in rows]
            keys = [k for k, _m, _q in got]
            assert len(keys) == len(set(keys)), f"{name}: a message twice"
            held = {k: (m, q) for k, m, q in got}
            missing = [k for k, m, q in want if held.get(k) != (m, q)]
            assert not missing, f"{name} lacks {len(missing)} acknowledged messages, e.g. {missing[:3]}"
            order = [keys.index(k) for k, _m, _q in want]
            assert order == sorted(order), f"{name}: acknowledged messages out of order"
        for name in ("n0", "n1"):
            r = dledgerctl("mq", "check", dirs[name], "--format", "jsonl", check=False)
            assert r.returncode == 0, f"{name}: mq check found {r.stdout[-3000:]} {r.stderr[-1000:]}"
        for a, b in (("n0", "n1"), ("n0", "n2")):
            da = os.path.join(dirs[a], f"dledger-{a}") if a != "n2" else dirs[a]
            db = os.path.join(dirs[b], f"dledger-{b}") if b != "n2" else dirs[b]
            r = dledgerctl("store", "diff", da, db, "--format", "json", check=False)
            assert r.returncode == 0, f"store diff {a} {b}: {r.stdout[-2000:]} {r.stderr[-1000:]}"
    finally:
        g.close()
