"""The Prometheus endpoint of real node processes: every metric the man page documents is
served, and the numbers move as appends, a follower's restart and a leader's kill happen."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.node.metrics import CATALOGUE
from tests.support.commands import cli
from tests.support.group import leader_of, pid_of, restart, status, wait_for
from tests.support.paths import ROOT
from tests.support.ports import free_port_base


def scrape(url: str) -> dict[str, list]:
    """Samples by name: (labels without group/node, value)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = {k: v for k, v in s.labels.items() if k not in ("group", "node")}
            out.setdefault(s.name, []).append((labels, s.value))
    return out


def value(samples: dict, name: str, **labels) -> float:
    found = [v for lab, v in samples.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def sample_names(name: str, kind: str) -> list[str]:
    """The sample names a family of the catalogue shows up as."""
    if kind == "histogram":
        return [f"{name}_bucket", f"{name}_count", f"{name}_sum"]
    return [name]


def documented() -> list[tuple[str, str, tuple[str, ...]]]:
    """The metrics dledgerctl-node(1) lists in its METRICS section: name, type, labels."""
    with open(os.path.join(ROOT, "man", "dledgerctl-node.1")) as fh:
        page = fh.read()
    section = page.split('.SH METRICS', 1)[1].split("\n.SH ", 1)[0]
    found = re.findall(r"^\.B (dledger_\w+)\n(\w+)(?: \(labels: ([\w, ]+)\))?\.$", section, re.M)
    return [(name, kind, tuple(labels.split(", ")) if labels else ()) for name, kind, labels in found]


DASHBOARD = os.path.join(ROOT, "share", "grafana", "dledgerctl.json")


def dashboard_metrics() -> set[str]:
    """The metric names the Grafana dashboard's queries use; its structure checked on the way."""
    with open(DASHBOARD) as fh:
        dash = json.load(fh)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and dash["uid"] and dash["panels"]
    names = set()
    for p in dash["panels"]:
        assert p["targets"] and p["title"] and {"x", "y", "w", "h"} <= set(p["gridPos"])
        for t in p["targets"]:
            names |= set(re.findall(r"\b((?:dledger|process)_[a-z_]+)\b", t["expr"]))
    return names


def test_the_man_page_documents_exactly_the_catalogue():
    assert documented() == [(name, kind, labels) for name, kind, labels, _doc in CATALOGUE]


@pytest.fixture
def metered(group):
    mbase = free_port_base(3)
    base = group(3, "--metrics-port-base", str(mbase), "--state-machine", "kv")
    return base, {f"n{i}": f"http://127.0.0.1:{mbase + i}/metrics" for i in range(3)}


def append(base: str, n: int, body: str = "x" * 100) -> None:
    r = cli("append", "--base-dir", base, "--file", "-", "--lines", "--batch", "16", "--format", "json",
            "--timeout", "10", input="".join(f"{body}{k}\n" for k in range(n)))
    assert r.returncode == 0, r.stderr


def test_every_documented_metric_is_served_and_moves(metered):
    base, urls = metered
    with open(os.path.join(base, "cluster.json")) as fh:
        assert {n["id"]: n["metrics"] for n in json.load(fh)["nodes"]} == urls
    leader = leader_of(base)
    followers = sorted(set(urls) - {leader})

    def settled():  # (the leader's no-op acknowledged by both followers: they idle in COMMIT)
        m = scrape(urls[leader])
        return m if all(value(m, "dledger_peer_state", peer=f, state="COMMIT") == 1
                        and value(m, "dledger_peer_lag_entries", peer=f) == 0 for f in followers) else None
    m0 = wait_for(settled, 20, "both followers to have the leader's first entry")
    for name, kind, _labels, _doc in CATALOGUE:
        for sample in sample_names(name, kind):
            if name == "dledger_refused_requests_total":
                continue  # (by code: none refused yet)
            if name == "dledger_tls_certificate_expiry_timestamp_seconds":
                continue  # (with TLS only: the TLS test below sees it)
            assert sample in m0, f"{sample} is documented but not served"
    assert value(m0, "dledger_role", role="leader") == 1 and value(m0, "dledger_role", role="follower") == 0
    assert value(m0, "dledger_members", member="voter") == 3
    assert 0 < value(m0, "dledger_disk_usage_ratio") < 1
    assert [value(m0, "dledger_disk_ratio_limit", kind=k) for k in ("check", "force", "full")] == [0.7, 0.85, 0.9]
    assert "dledger_tls_certificate_expiry_timestamp_seconds" not in m0
    assert value(m0, "dledger_store_files", kind="data") >= 1
    assert value(m0, "process_resident_memory_bytes") > 0
    for f in followers:
        assert value(m0, "dledger_peer_alive", peer=f) == 1
        assert value(m0, "dledger_peer_state", peer=f, state="COMMIT") == 1
        assert value(m0, "dledger_peer_lag_entries", peer=f) == 0
        fm = scrape(urls[f])
        assert value(fm, "dledger_role", role="follower") == 1
        assert "dledger_peer_match_index" not in fm  # (a follower pushes to no one)

    # appends: counted with their bytes and latency; every node's indexes move
    append(base, 200)
    m1 = scrape(urls[leader])
    assert value(m1, "dledger_appended_entries_total") - value(m0, "dledger_appended_entries_total") == 200
    assert value(m1, "dledger_appended_bytes_total") - value(m0, "dledger_appended_bytes_total") == sum(len(f"{'x' * 100}{k}") for k in range(200))
    assert value(m1, "dledger_append_requests_total", code="SUCCESS") == 200 // 16 + 1
    assert value(m1, "dledger_append_latency_seconds_count") == 200 // 16 + 1
    assert value(m1, "dledger_append_latency_seconds_bucket", le="+Inf") == 200 // 16 + 1
    assert value(m1, "dledger_flush_latency_seconds_count") > value(m0, "dledger_flush_latency_seconds_count")
    end = value(m1, "dledger_end_index")
    assert end - value(m0, "dledger_end_index") == 200 and value(m1, "dledger_committed_index") == end
    wait_for(lambda: all(value(scrape(u), "dledger_applied_index") == end for u in urls.values()), 20,
             "every node applied the appends")
    assert value(m1, "dledger_entries") == end - value(m1, "dledger_begin_index") + 1
    assert value(m1, "dledger_apply_latency_seconds_count") > value(m0, "dledger_apply_latency_seconds_count")
    for f in followers:
        assert value(m1, "dledger_peer_match_index", peer=f) <= end
        wait_for(lambda: value(scrape(urls[leader]), "dledger_replicated_entries_total", peer=f)
                 - value(m0, "dledger_replicated_entries_total", peer=f) >= 200, 10, f"{f}'s pushes acknowledged")
        assert value(m1, "dledger_replicate_latency_seconds_count", peer=f) > 0
        fm = scrape(urls[f])
        assert value(fm, "dledger_received_entries_total") >= 200 and value(fm, "dledger_received_bytes_total") > 20490
    r = cli("get", "--base-dir", base, "-i", "1", "-c", "5")
    assert r.returncode == 0, r.stderr
    assert value(scrape(urls[leader]), "dledger_read_latency_seconds_count") > value(m1, "dledger_read_latency_seconds_count")

    # a refusal, counted by its code
    r = cli("get", "--base-dir", base, "-i", "999999")
    assert r.returncode == 1
    m1 = scrape(urls[leader])
    assert value(m1, "dledger_refused_requests_total", code="INDEX_OUT_OF_RANGE") >= 1

    # the Grafana dashboard asks only for what a node serves (by now every family has a series)
    used = dashboard_metrics()
    assert {"dledger_peer_lag_entries", "dledger_append_latency_seconds_bucket", "dledger_role"} <= used
    assert used <= set(m1), f"the dashboard uses metrics no node serves: {sorted(used - set(m1))}"

    # a follower stops: the leader sees it lag, in entries, bytes and time; it restarts and catches up
    lagging = followers[0]
    r = cli("cluster", "stop", "--base-dir", base, lagging)
    assert r.returncode == 0, r.stderr
    append(base, 50)
    m2 = wait_for(lambda: (m := scrape(urls[leader])) and value(m, "dledger_peer_alive", peer=lagging) == 0 and m,
                  20, "the leader to see the follower gone")
    assert value(m2, "dledger_peer_lag_entries", peer=lagging) >= 50
    assert value(m2, "dledger_peer_lag_bytes", peer=lagging) >= 50 * 100
    assert value(m2, "dledger_peer_lag_seconds", peer=lagging) > 0
    assert value(m2, "dledger_peer_lag_entries", peer=followers[1]) == 0
    restart(base, lagging)
    m3 = wait_for(lambda: (m := scrape(urls[leader])) and value(m, "dledger_peer_lag_entries", peer=lagging) == 0
                  and value(m, "dledger_peer_alive", peer=lagging) == 1 and m, 30, "the follower to catch up")
    assert value(m3, "dledger_peer_lag_seconds", peer=lagging) == 0
    assert value(m3, "dledger_peer_match_index", peer=lagging) == value(m3, "dledger_end_index")
    assert value(scrape(urls[lagging]), "dledger_end_index") == value(m3, "dledger_end_index")

    # the leader is killed: a survivor leads in a higher term, and both count a leader change
    before = {f: scrape(urls[f]) for f in followers}
    os.kill(pid_of(base, leader), signal.SIGKILL)
    wait_for(lambda: any(x.get("role") == "leader" and x["id"] != leader for x in status(base)), 30, "a new leader")

    def knows_the_new_leader(f):
        m = scrape(urls[f])
        return m if (value(m, "dledger_term") > value(before[f], "dledger_term") and value(m, "dledger_leader_changes_total")
                     > value(before[f], "dledger_leader_changes_total")) else None
    after = {f: wait_for(lambda f=f: knows_the_new_leader(f), 20, f"{f} to count the new leader") for f in followers}
    new = next(f for f in followers if value(after[f], "dledger_role", role="leader") == 1)
    other = next(f for f in followers if f != new)
    wait_for(lambda: (m := scrape(urls[new])) and value(m, "dledger_peer_alive", peer=other) == 1
             and value(m, "dledger_peer_alive", peer=leader) == 0, 20, "the new leader to see who is there")
    append(base, 10)
    m5 = scrape(urls[new])
    assert value(m5, "dledger_peer_lag_entries", peer=leader) >= 10
    assert value(m5, "dledger_appended_entries_total") == 10


def test_metrics_address_in_use_is_a_clear_error(tmp_path):
    import socket
    port = free_port_base(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 1))
        taken.listen()
        r = cli("node", "start", "--id", "n0", "--peers", f"n0-127.0.0.1:{port}", "--store-base-dir", str(tmp_path),
                "--metrics-address", f"127.0.0.1:{port + 1}", timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith(f"Error: cannot serve metrics on 127.0.0.1:{port + 1}")
    r = cli("node", "start", "--id", "n0", "--peers", f"n0-127.0.0.1:{port}", "--metrics-address", "nowhere")
    assert r.returncode == 2 and "--metrics-address: 'nowhere' is not HOST:PORT" in r.stderr


def test_a_tls_group_serves_its_metrics_over_https_to_scrapers_the_ca_signed(group, tmp_path):
    import ssl
    import urllib.error

    mbase = free_port_base(3)
    _base, rec = group.recorded(3, "--tls", "--metrics-port-base", str(mbase))
    assert [n["metrics"] for n in rec["nodes"]] == [f"https://127.0.0.1:{mbase + i}/metrics" for i in range(3)]
    tls = rec["tls"]

    def context(cert: bool) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=tls["ca"])  # (member certificates name 127.0.0.1 too)
        if cert:
            ctx.load_cert_chain(tls["client"]["cert"], tls["client"]["key"])
        return ctx

    texts = []
    for n in rec["nodes"]:
        with urllib.request.urlopen(n["metrics"], timeout=10, context=context(True)) as resp:
            texts.append(resp.read().decode())
    assert all(f'dledger_term{{group="default",node="n{i}"}}' in t for i, t in enumerate(texts))
    from cryptography import x509

    for i, t in enumerate(texts):  # (each node's own certificate's end of validity)
        with open(os.path.join(tls["dir"], f"member-n{i}.pem"), "rb") as fh:
            want = x509.load_pem_x509_certificate(fh.read()).not_valid_after_utc.timestamp()
        line = next(x for x in t.splitlines() if x.startswith("dledger_tls_certificate_expiry_timestamp_seconds{"))
        assert float(line.rsplit(" ", 1)[1]) == want > time.time()
    url = rec["nodes"][0]["metrics"]
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(url, timeout=10, context=context(False)).read()  # no client certificate
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(url.replace("https", "http"), timeout=10).read()  # plain HTTP
    # and a scrape with a certificate from another CA is refused
    other = tmp_path / "other"
    assert cli("certs", "init", str(other), "--members", "n0", "--clients", "app").returncode == 0
    ctx = context(False)
    ctx.load_cert_chain(str(other / "client-app.pem"), str(other / "client-app.key"))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(url, timeout=10, context=ctx).read()
    r = cli("node", "start", "--id", "n0", "--peers", "n0-127.0.0.1:1", "--metrics-address", "127.0.0.1:0",
            "--metrics-tls")
    assert r.returncode == 2 and "--metrics-tls needs" in r.stderr
