"""``controller watch`` against RocketMQ 5.3.3's own controller (its ControllerStartup: the
ControllerManager with its remoting server, request processor and DefaultBrokerHeartbeatManager;
tests/support/javarocketmq5procs.py), with brokers simulated at the protocol level through
dledgerctl's remoting client (SimulatedBrokers: the requests a controller-mode broker sends).

(a) A healthy failover: the master's heartbeats stop, the controller's scan of inactive brokers
finds it expired and elects the in-sync replica; the watch never reports a held-back election.
(b) An election held back, provoked with what RocketMQ's code allows: a controller whose two
scans (``scanNotActiveBrokerInterval``: DefaultBrokerHeartbeatManager; ``scanInactiveMasterInterval``:
DLedgerController) run once an hour, and a master that hangs, its heartbeats stopped and its
connection kept open (closing it would trigger the election through the channel-close path). The
controller answers the master not alive and the slave alive, and elects no one: ``controller
watch --once`` exits 1 naming the broker set, the exporter's series say so, and ``promtool test
rules`` fires DLedgerControllerElectionHeldBack on the series scraped. Closing the master's
connection then makes the controller elect, and the watch goes quiet.

Every wait polls with a deadline; every JVM is killed at the end (the cluster is a context
manager), on failure too.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from cluster.net.remoting import ControllerClient
from dledgerctl.ops.controller_watch import HELD_BACK, OK, Watcher
from tests.support.javarocketmq5procs import ControllerCluster, SimulatedBrokers, Unavailable, build
from tests.support.paths import ROOT
from tests.support.ports import HOST, free_ports

BROKER = "broker-w"
HEARTBEAT_TIMEOUT_MS = 3000
NEVER = 3_600_000  # ms: a scan that runs once an hour does not run in a test


@pytest.fixture(scope="module")
def java():
    try:
        return build()
    except Unavailable as exc:
        pytest.skip(str(exc))


def _sync_state(address: str) -> dict:
    async def go():
        async with ControllerClient(address, timeout=5.0) as c:
            return await c.sync_state_data([BROKER])
    return asyncio.run(go())[BROKER]


def _wait(predicate, what: str, timeout: float, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:.0f} s")
        time.sleep(interval)


def _leader(cluster: ControllerCluster) -> str:
    async def is_leader(node):
        try:
            async with ControllerClient(cluster.address(node), timeout=2.0) as c:
                return (await c.metadata()).is_leader
        except Exception:
            return False
    return _wait(lambda: next((n for n in cluster.ids if asyncio.run(is_leader(n))), None), "controller leader", 60)


def _master_and_slave(brokers: SimulatedBrokers) -> None:
    """Broker 1 master, broker 2 its slave, both in the SyncStateSet (epoch 2), as a master asks
    once its slave has caught up."""
    p1, p2 = free_ports(2)
    bid, answer = brokers.join(BROKER, p1)
    assert (bid, answer.master_broker_id, answer.master_epoch) == (1, 1, 1)
    bid, answer = brokers.join(BROKER, p2)
    assert (bid, answer.master_broker_id) == (2, 1)
    assert brokers.alter_sync_state_set(BROKER, 1, 1, [1, 2], 1) == 2


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dledgerctl", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_a_healthy_failover_stays_quiet(java, tmp_path):
    with ControllerCluster(java, str(tmp_path), ids=("n0",),
                           options={"scanNotActiveBrokerInterval": 1000}) as cluster:
        cluster.start_all()
        address = cluster.address(_leader(cluster))
        brokers = SimulatedBrokers(address, timeout_millis=HEARTBEAT_TIMEOUT_MS)
        try:
            _master_and_slave(brokers)
            r = _cli("controller", "watch", "-a", cluster.addresses, "--once", "--bound", "20s", "--format", "json")
            assert r.returncode == 0, r.stderr
            assert '"state":"ok"' in r.stdout and '"broker_name":"broker-w"' in r.stdout
            w = Watcher([address], bound=20.0, timeout=5.0)
            _lk, statuses, error = w.step(time.monotonic())
            assert error is None and [s.state for s in statuses] == [OK]
            brokers.hang(BROKER, 1)
            seen = []

            def elected():
                _lk, st, err = w.step(time.monotonic())
                assert err is None, err
                seen.append(st[0])
                return st[0].view.master_broker_id == 2 and st[0].view.master_alive

            _wait(elected, "election of broker 2", 60, interval=0.5)
            assert all(s.state != HELD_BACK for s in seen), [(s.state, s.held_back_seconds) for s in seen]
            waited = [s.held_back_seconds for s in seen if s.held_back_seconds is not None]
            assert max(waited, default=0) < 20  # (RocketMQ's own failover well inside the bound)
            assert seen[-1].view.master_epoch == 2 and seen[-1].view.sync_state_set == (2,)
            # (the controller logs its election after answering with it, from another thread)
            _wait(lambda: "Elect a new master in broker-set: broker-w done" in cluster.log_text("n0"),
                  "line of the election in the controller's log", 15)
            r = _cli("controller", "watch", "-a", address, "--once", "--bound", "20s")
            assert r.returncode == 0, r.stderr
            assert "0 elections held back" in r.stderr
        finally:
            brokers.close()


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(dledger_controller_[a-z_]+)(\{[^}]*\})? (\S+)$', line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def test_an_election_held_back_is_found_exported_and_alerted(java, tmp_path):
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian's prometheus package: scripts/test-deps.sh)")
    options = {"scanNotActiveBrokerInterval": NEVER, "scanInactiveMasterInterval": NEVER}
    with ControllerCluster(java, str(tmp_path / "ctl"), ids=("n0", "n1", "n2"), options=options) as cluster:
        cluster.start_all()
        leader = _leader(cluster)
        address = cluster.address(leader)
        brokers = SimulatedBrokers(address, timeout_millis=HEARTBEAT_TIMEOUT_MS)
        exporter = None
        (port,) = free_ports(1)
        try:
            _master_and_slave(brokers)
            # the exporter: the real command, the broker sets from the controller's log over the wire
            exporter = subprocess.Popen([sys.executable, "-m", "dledgerctl", "controller", "watch", "-a",
                                         cluster.addresses, "--bound", "4s", "--interval", "1s", "--metrics-port",
                                         str(port), "--for", "120s", "--format", "jsonl"],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
            held = f'dledger_controller_broker_set_election_held_back{{broker_set="{BROKER}"}}'
            alive = f'dledger_controller_broker_set_master_alive{{broker_set="{BROKER}"}}'

            def scraped():
                try:
                    return _scrape(port)
                except OSError:
                    return None
            first = _wait(lambda: (s := scraped()) and alive in s and s, "the exporter's first look", 60)
            assert first[alive] == 1 and first[held] == 0
            brokers.hang(BROKER, 1)
            _wait(lambda: not next(r for r in _sync_state(address).in_sync if r.broker_id == 1).alive,
                  "the controller to see the master gone", 30)
            r = _cli("controller", "watch", "-a", cluster.addresses, "--once", "--bound", "4s", "--interval", "1s")
            assert r.returncode == 1, (r.stdout, r.stderr)
            assert "Error: broker set broker-w: master 1 gone (masterEpoch 1), in-sync replica 2 alive" in r.stderr
            assert re.search(r"broker-w\s+held-back\s+1\s+False\s+1\s+1,2\s+2", r.stdout), r.stdout
            samples = [first]  # (the series before the master hung, then as the exporter reports it held back)

            def held_back():
                s = scraped()
                if s:
                    samples.append(s)
                return s and s.get(held) == 1
            _wait(held_back, "the exporter to report the election held back", 30, interval=1.0)
            last = samples[-1]
            assert last[alive] == 0
            assert last[f'dledger_controller_broker_set_in_sync_alive{{broker_set="{BROKER}"}}'] == 1
            assert last[f'dledger_controller_broker_set_election_held_back_seconds{{broker_set="{BROKER}"}}'] >= 4
            assert last[f'dledger_controller_broker_set_master_epoch{{broker_set="{BROKER}"}}'] == 1
            info = _sync_state(address)  # (the controller itself: still master 1, no election)
            assert (info.master_broker_id, info.master_epoch) == (1, 1)
            _promtool_fires(tmp_path, samples)
            # the master's connection closes (a broker process that died): the controller's channel-close
            # path elects, the only path left it here, and the watch goes quiet
            brokers.close_connection(BROKER, 1)
            _wait(lambda: _sync_state(address).master_broker_id == 2, "the election on the channel's close", 30)
            _wait(lambda: (s := scraped()) and s.get(held) == 0 and s.get(alive) == 1, "the exporter to go quiet", 30)
            exporter.terminate()
            out, err = exporter.communicate(timeout=30)
            lines = [x for x in out.splitlines() if x.strip()]
            assert len(lines) == 1 and '"broker_name":"broker-w"' in lines[0] and "held back" in lines[0], out
        finally:
            if exporter is not None and exporter.poll() is None:
                exporter.kill()
                exporter.wait(timeout=30)
            brokers.close()


def _promtool_fires(tmp_path, samples: list[dict]) -> None:
    """promtool test rules over the series the exporter served, as scraped (one sample a
    second here: the rule has no ``for``, so only their order matters): quiet at the first
    (before the master hung), DLedgerControllerElectionHeldBack for the broker set at the last."""
    assert len(samples) >= 2
    names = sorted({k for s in samples for k in s if "broker_set=" in k})
    series = []
    for name in names:
        values = " ".join(f"{s[name]:g}" if name in s else "_" for s in samples)
        metric, labels = name.split("{", 1)
        series.append(f"      - series: '{metric}{{job=\"dledgerctl-controller-watch\",{labels}'\n"
                      f"        values: '{values}'\n")
    rules = os.path.join(ROOT, "share", "prometheus", "alerts.yml")
    with open(rules) as fh:  # (promtool compares the annotations too: the rule's own, its template filled in)
        block = fh.read().split("alert: DLedgerControllerElectionHeldBack", 1)[1].split("- alert:", 1)[0]
    notes = {k: v.replace("{{ $labels.broker_set }}", BROKER)
             for k, v in re.findall(r'^\s+(summary|description|runbook): "(.*)"$', block, re.M)}
    assert set(notes) == {"summary", "description", "runbook"}
    test = (f"rule_files:\n  - {rules}\nevaluation_interval: 1s\ntests:\n  - interval: 1s\n    input_series:\n"
            + "".join(series)
            + f"    alert_rule_test:\n      - eval_time: {len(samples) - 1}s\n"
              "        alertname: DLedgerControllerElectionHeldBack\n        exp_alerts:\n"
              f"          - exp_labels: {{severity: critical, broker_set: {BROKER}}}\n"
              "            exp_annotations:\n" + "".join(f'              {k}: "{v}"\n' for k, v in notes.items()) +
              "      - eval_time: 0s\n        alertname: DLedgerControllerElectionHeldBack\n        exp_alerts: []\n")
    path = tmp_path / "watch_alert_test.yml"
    path.write_text(test)
    r = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr + test
