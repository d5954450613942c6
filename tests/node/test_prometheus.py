"""The shipped Prometheus files against the real Prometheus (Debian's ``prometheus`` package,
which scripts/test-deps.sh installs; skipped, saying why, without it): ``promtool`` checks the
config and the rules and runs the rules' unit tests (tests/support/prometheus/alerts_test.yml, one
or more cases for every rule); a real server with the shipped ``prometheus.yml`` scrapes a
real 3-node cluster, every query of every panel of the Grafana dashboard returns series
through its HTTP API, and losing the leader and a follower fires DLedgerNoLeader on the
server's own rule evaluation."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from tests.support.commands import cli
from tests.support.group import file_sizes, leader_of, wait_for
from tests.support.paths import ROOT, SUPPORT
from tests.support.ports import free_port_base

SHARE = os.path.join(ROOT, "share")
CONFIG = os.path.join(SHARE, "prometheus", "prometheus.yml")
RULES = os.path.join(SHARE, "prometheus", "alerts.yml")
RULE_TESTS = os.path.join(SUPPORT, "prometheus", "alerts_test.yml")
DASHBOARD = os.path.join(SHARE, "grafana", "dledgerctl.json")
METRICS_PORTS = (9300, 9301, 9302)  # (what the shipped prometheus.yml scrapes: cluster up --metrics-port-base 9300)

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool is not installed (Debian's prometheus package: scripts/test-deps.sh)")
needs_prometheus = pytest.mark.skipif(shutil.which("prometheus") is None,
                                      reason="prometheus is not installed (Debian's package: scripts/test-deps.sh)")


def _promtool(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@needs_promtool
def test_promtool_accepts_the_config_and_rules_and_every_rule_passes_its_unit_tests():
    for args in (("check", "config", CONFIG), ("check", "rules", RULES)):
        r = _promtool(*args)
        assert r.returncode == 0, r.stdout + r.stderr
    r = _promtool("test", "rules", os.path.basename(RULE_TESTS), cwd=os.path.dirname(RULE_TESTS))
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    with open(RULES) as fh:
        rules = re.findall(r"^\s*- alert: (\w+)", fh.read(), re.M)
    with open(RULE_TESTS) as fh:
        tests = fh.read()
    firing = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels", tests))
    assert len(rules) >= 10 and set(rules) <= firing, f"rules without a firing test: {sorted(set(rules) - firing)}"
    with open(os.path.join(ROOT, "docs", "observability.md")) as fh:
        runbooks = fh.read()
    for name in rules:  # (each alert's runbook annotation points at a section that is there)
        assert f"### {name}\n" in runbooks, f"docs/observability.md has no runbook section for {name}"


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _api(base: str, path: str, **params) -> dict:
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]


def _dashboard_queries() -> list[tuple[str, str]]:
    with open(DASHBOARD) as fh:
        dash = json.load(fh)
    return [(p["title"], t["expr"].replace("$group", ".+")) for p in dash["panels"] for t in p["targets"]]


@needs_prometheus
def test_a_real_prometheus_scrapes_a_cluster_serves_every_panel_and_fires_no_leader(group, tmp_path):
    if not all(_free(p) for p in METRICS_PORTS):
        pytest.skip(f"ports {METRICS_PORTS} (what the shipped prometheus.yml scrapes) are taken on this machine")
    web = f"127.0.0.1:{free_port_base(1)}"
    base = group(3, "--metrics-port-base", str(METRICS_PORTS[0]), "--state-machine", "kv", "--snapshot-threshold",
                 "50", sizes=file_sizes("1MiB", "64KiB"))
    prom = None
    try:
        prom = subprocess.Popen(["prometheus", f"--config.file={CONFIG}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address={web}"], stdout=subprocess.DEVNULL,
                                stderr=open(tmp_path / "prometheus.log", "wb"))
        api = f"http://{web}"

        def targets_up():
            try:
                active = _api(api, "targets")["activeTargets"]
            except OSError:
                return False
            return len(active) == 3 and all(t["health"] == "up" for t in active)
        wait_for(targets_up, 60, "Prometheus to scrape the three members")
        # something for every panel to show: appends, reads, a refusal, snapshots (every 50 entries)
        for k in range(4):
            assert cli("kv", "put", "--base-dir", base, f"k{k}", "v").returncode == 0
            assert cli("append", "--base-dir", base, *sum((["-d", f"e{k}-{j}"] for j in range(30)), [])).returncode == 0
        assert cli("get", "--base-dir", base, "-i", "1").returncode == 0
        assert cli("get", "--base-dir", base, "-i", "99999").returncode == 1
        time.sleep(11)  # (two more scrapes at the shipped 5 s interval: rate() needs two samples)
        empty = []
        for title, expr in _dashboard_queries():
            if not _api(api, "query", query=expr)["result"]:
                empty.append(f"{title}: {expr}")
        assert not empty, "panels whose queries return no series:\n" + "\n".join(empty)

        # the leader and one follower die: the last member cannot be elected alone
        leader = leader_of(base)
        follower = next(n for n in ("n0", "n1", "n2") if n != leader)
        assert cli("cluster", "stop", "--base-dir", base, leader, follower, "--kill").returncode == 0

        def firing():
            alerts = _api(api, "alerts")["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "DLedgerNoLeader" and a["state"] == "firing"]
        fired = wait_for(firing, 120, "DLedgerNoLeader to fire")
        assert fired[0]["labels"]["group"] == "default" and fired[0]["labels"]["severity"] == "critical"
        assert fired[0]["annotations"]["runbook"] == "docs/observability.md#dledgernoleader"
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait(timeout=10)
