"""State machines (cluster/raft/statemachine.py): the applier in-process, then real node processes
with the built-in kv machine and a counting one, through snapshots and restarts."""

from __future__ import annotations

import json
import os
import sys

import pytest

from cluster.node.statemachines import load
from cluster.raft.statemachine import Applier, KeyValue, StateMachineError
from store.format import MAGIC_NOOP
from store.memstore import MemoryStore
from store.snapshot import SnapshotStore
from tests.node.test_metrics import scrape, value
from tests.support.commands import cli
from tests.support.group import file_sizes, wait_for
from tests.support.paths import SUPPORT
from tests.support.ports import free_port_base

sys.path.insert(0, os.path.join(SUPPORT, "sm"))

from counting_sm import Counting  # noqa: E402


def _store(bodies, commit=None):
    s = MemoryStore()
    s.append_leader([b""], 1, MAGIC_NOOP)
    s.append_leader(bodies, 1)
    s.set_committed(s.end_index if commit is None else commit)
    return s


def test_kv_applies_key_value_entries_and_round_trips_its_snapshot():
    kv = KeyValue()
    for i, b in enumerate([b"a=1", b"b=2", b"a=3", b"noise", b"=x", "é=ü".encode()]):
        kv.apply(i, 1, b)
    assert kv.values == {"a": "3", "b": "2", "é": "ü"} and (kv.applied, kv.ignored) == (6, 2)
    other = KeyValue()
    other.restore(kv.snapshot()())
    assert (other.values, other.applied, other.ignored) == (kv.values, 6, 2)
    assert json.loads(other.query(b"a")) == {"key": "a", "value": "3"}
    assert json.loads(other.query(b"zz")) == {"key": "zz", "value": None}
    with pytest.raises(StateMachineError):
        other.restore(b"{}")


def test_load_names_what_is_wrong():
    assert isinstance(load("kv"), KeyValue)
    assert isinstance(load("counting_sm:Counting"), Counting)
    for spec, msg in (("nocolon", "not module:Class"), ("no_such_module:X", "cannot load"),
                      ("json:dumps", "not a class"), ("collections:OrderedDict", "has no apply")):
        with pytest.raises(StateMachineError, match=msg):
            load(spec)


def test_the_applier_applies_committed_entries_once_across_restarts(tmp_path):
    store = _store([b"e%d" % i for i in range(250)], commit=200)  # index 0 is a no-op
    snaps = SnapshotStore(str(tmp_path / "dledger-n0"))
    a = Applier(Counting(), store, snaps, threshold=50)
    assert a.recover() == "no snapshot"
    assert a.step(max_entries=120) == 120 and a.applied == 119
    saved = []
    while True:
        a.step()
        due = a.due()
        if due is None:
            break
        a.save(*due)
        a.saved(due[0], due[1])
        saved.append(due[0])
    assert a.applied == 200 and saved == [200]  # one snapshot: everything applied at once is one step
    assert json.loads(a.sm.query(b""))["count"] == 200  # 201 entries, the no-op is not applied
    # a restart: the snapshot, then the entries after it, nothing twice
    store.set_committed(250)
    b = Applier(Counting(), store, SnapshotStore(str(tmp_path / "dledger-n0")), threshold=50)
    assert b.recover().startswith("restored snapshot 200")
    b.step()
    q = json.loads(b.sm.query(b""))
    assert (q["count"], q["twice"], q["first"], q["last"]) == (250, [], 1, 250)
    # a restart without the snapshot would apply from the log's beginning: also once
    c = Applier(Counting(), store, SnapshotStore(str(tmp_path / "other")), threshold=1000)
    c.recover()
    c.step()
    assert json.loads(c.sm.query(b""))["count"] == 250


# -- real processes ----------------------------------------------------------------------

def _up(group, *extra: str, data_file_size: str = "1MiB") -> tuple[str, dict]:
    """A group of three (the ``group`` fixture's) with ``extra``: its base directory and record."""
    return group.recorded(3, *extra, sizes=file_sizes(data_file_size, "64KiB"))


def test_kv_cluster_snapshots_on_every_node_and_a_restarted_follower_recovers(group):
    base, rec = _up(group, "--state-machine", "kv", "--snapshot-threshold", "40")
    put = cli("kv", "put", "--base-dir", base, "first", "1", "--format", "json")
    assert put.returncode == 0 and json.loads(put.stdout)[0]["index"] >= 1, put.stderr
    r = cli("append", "--base-dir", base, *[a for i in range(120) for a in ("-d", f"k{i % 7}=v{i}")])
    assert r.returncode == 0, r.stderr
    got = cli("kv", "get", "--base-dir", base, *[f"k{j}" for j in range(7)], "nokey", "--format", "json")
    assert got.returncode == 0, got.stderr
    values = {x["key"]: x["value"] for x in json.loads(got.stdout)}
    assert values == {**{f"k{j}": f"v{max(i for i in range(120) if i % 7 == j)}" for j in range(7)}, "nokey": None}
    assert cli("kv", "get", "--base-dir", base, "nokey").returncode == 1  # nothing set: exit 1
    # every node saved a snapshot (each after 40 entries applied since its last)
    def snaps(node):
        r = cli("store", "snapshot", os.path.join(base, f"dledger-{node}"), "--format", "json")
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []
    wait_for(lambda: all(snaps(n) and snaps(n)[-1]["index"] >= 40 for n in ("n0", "n1", "n2")), 30,
             "snapshots on every node")
    # a follower stopped, more entries, started again: it restores its snapshot and catches up
    status = json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)
    follower = next(x["id"] for x in status if x["role"] == "follower")
    assert cli("cluster", "stop", "--base-dir", base, follower).returncode == 0
    r = cli("append", "--base-dir", base, *[a for i in range(120, 200) for a in ("-d", f"k{i % 7}=w{i}")])
    assert r.returncode == 0, r.stderr
    assert cli("cluster", "start", "--base-dir", base, follower).returncode == 0
    end = max(x["committed_index"] for x in json.loads(cli("cluster", "status", "--base-dir", base, "--format",
                                                            "json").stdout))
    wait_for(lambda: {x["id"]: x.get("applied_index") for x in json.loads(cli(
        "cluster", "status", "--base-dir", base, "--format", "json").stdout)}.get(follower, -1) >= end, 30,
        f"{follower} to apply up to {end}")
    with open(os.path.join(base, "logs", f"{follower}.log")) as fh:
        assert "restored snapshot" in fh.read()
    mine = cli("kv", "get", "--peers", rec["peers"], "k3", "--format", "json")
    assert json.loads(mine.stdout)[0]["value"] == f"w{max(i for i in range(120, 200) if i % 7 == 3)}"


def test_each_entry_is_applied_once_across_restarts_of_every_node(group):
    base, rec = _up(group, "--state-machine", "counting_sm:Counting", "--snapshot-threshold", "25")
    total = 0
    for round_ in range(3):
        r = cli("append", "--base-dir", base, *[a for k in range(60) for a in ("-d", f"r{round_}e{k}")])
        assert r.returncode == 0, r.stderr
        total += 60
        for node in ("n0", "n1", "n2"):  # every member restarted, one at a time
            assert cli("cluster", "stop", "--base-dir", base, node).returncode == 0
            assert cli("cluster", "start", "--base-dir", base, node).returncode == 0
    status = json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)
    end = max(x["committed_index"] for x in status)
    import asyncio
    from cluster.net.client import Client
    from cluster.raft.config import parse_peers

    async def counts():
        c = Client(parse_peers(rec["peers"]), "default", timeout=5)
        try:
            return {p: json.loads((await c.query(b"", peer=p)).result) for p in c.peers}
        finally:
            await c.close()

    def applied():
        rows = json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)
        return all((x.get("applied_index") or -1) >= end for x in rows)
    wait_for(applied, 30, "every node to apply everything")  # (the last entries may be no-ops)
    got = asyncio.run(counts())
    normal = json.loads(cli("get", "--base-dir", base, "-i", "0", "--count", str(end + 1), "--format",
                            "json").stdout)
    n_normal = sum(1 for e in normal if e["magic"] == 1)
    assert n_normal == total
    for node, q in got.items():
        assert q["twice"] == [] and q["count"] == total, (node, q)


def _status(base: str) -> dict[str, dict]:
    r = cli("cluster", "status", "--base-dir", base, "--format", "json")  # (exit 1 while a member is down)
    return {x["id"]: x for x in json.loads(r.stdout)}


def _append_kv(base: str, pairs: list[tuple[str, str]]) -> None:
    lines = "".join(f"{k}={v}\n" for k, v in pairs)
    r = cli("append", "--base-dir", base, "--file", "-", "--lines", "--batch", "100", "--timeout", "20",
            "--format", "json", input=lines, timeout=120)
    assert r.returncode == 0, r.stderr


def _kv(base: str, keys: list[str], node: str | None = None) -> dict:
    r = cli("kv", "get", "--base-dir", base, *keys, *(["--node", node] if node else []), "--format", "json",
            "--timeout", "20")
    assert r.returncode in (0, 1), r.stderr
    return {x["key"]: x["value"] for x in json.loads(r.stdout)}


def _snapshots(base: str, node: str) -> list[dict]:
    r = cli("store", "snapshot", os.path.join(base, f"dledger-{node}"), "--format", "json")
    return json.loads(r.stdout) if r.stdout.strip() else []


def _away_while_the_log_moves(base: str, keys: list[str], rounds: int, value_size: int) -> tuple[str, str]:
    """Stop a follower, then append until the leader has deleted (after its snapshots) the
    entries the follower needs; returns (leader, the follower)."""
    st = _status(base)
    leader = next(i for i, x in st.items() if x.get("role") == "leader")
    away = next(i for i, x in st.items() if x.get("role") == "follower")
    assert cli("cluster", "stop", "--base-dir", base, away).returncode == 0
    away_end = st[away]["end_index"]
    for r in range(rounds):
        _append_kv(base, [(k, f"{r}-{k}-".ljust(value_size, "v")) for k in keys])
    wait_for(lambda: _status(base)[leader]["begin_index"] > away_end + 1, 30, f"{leader} to delete what {away} needs")
    return leader, away


def test_a_follower_away_while_snapshots_deleted_the_log_installs_one(group):
    keys = [f"k{i}" for i in range(50)]
    mbase = free_port_base(3)
    base, _rec = _up(group, "--state-machine", "kv", "--snapshot-threshold", "300", "--metrics-port-base",
                     str(mbase), data_file_size="64KiB")
    _append_kv(base, [(k, "first") for k in keys])
    leader, away = _away_while_the_log_moves(base, keys, 40, 100)  # 2,000 entries, ~250 KB
    # every running node snapshotted and deleted the log its snapshots cover
    st = _status(base)
    for node in st:
        if node != away:
            assert st[node]["snapshot_index"] >= 1500 and st[node]["begin_index"] > 0, st[node]
            assert st[node]["begin_index"] <= st[node]["snapshot_index"] + 1
            assert all(s["ok"] for s in _snapshots(base, node))
    assert cli("cluster", "start", "--base-dir", base, away).returncode == 0
    end = _status(base)[leader]["committed_index"]
    wait_for(lambda: (_status(base)[away].get("applied_index") or -1) >= end, 30, f"{away} to catch up")
    with open(os.path.join(base, "logs", f"{away}.log")) as fh:
        said = fh.read()
    assert "installed snapshot" in said
    # the metrics say so too: the install took its time on the follower, the leader's snapshots were saved
    at = scrape(f"http://127.0.0.1:{mbase + int(away[1:])}/metrics")
    assert value(at, "dledger_snapshot_install_seconds_count") == 1
    assert value(at, "dledger_snapshot_load_seconds") >= 0 and value(at, "dledger_snapshots") >= 1
    lead = scrape(f"http://127.0.0.1:{mbase + int(leader[1:])}/metrics")
    assert value(lead, "dledger_snapshot_save_seconds_count") >= 5 and value(lead, "dledger_snapshots") >= 1
    assert value(lead, "dledger_begin_index") > 0
    assert _kv(base, keys, away) == _kv(base, keys) == {k: "39-{}-".format(k).ljust(100, "v") for k in keys}
    marks = json.loads(cli("peer", "watermarks", "--base-dir", base, "--format", "json").stdout)
    row = next(m for m in marks if m["peer"] == away)
    assert row["state"] in ("APPEND", "COMMIT") and "installed snapshot" in row["note"]
    assert _status(base)[away]["begin_index"] > 0


def test_a_follower_killed_mid_install_finishes_or_starts_over_never_half_installed(group):
    keys = [f"big{i}" for i in range(40)]
    # a snapshot of about 1.6 MB, sent at 256 KiB a second: the install takes seconds
    base, _rec = _up(group, "--state-machine", "kv", "--snapshot-threshold", "100", "--peer-push-quota",
                     "256KiB", data_file_size="256KiB")
    leader, away = _away_while_the_log_moves(base, keys, 6, 40_000)
    assert cli("cluster", "start", "--base-dir", base, away).returncode == 0
    arriving = os.path.join(base, f"dledger-{away}", "snapshot", "install_tmp", "data")
    wait_for(lambda: os.path.exists(arriving) and os.path.getsize(arriving) > 0, 30, "the install to begin")
    assert cli("cluster", "stop", "--base-dir", base, away, "--kill").returncode == 0
    held = os.path.getsize(arriving)
    snaps = _snapshots(base, away)
    assert all(s["ok"] for s in snaps)  # what arrived is no snapshot
    newest = _snapshots(base, leader)[-1]
    assert held < newest["size"] and newest["index"] not in [s["index"] for s in snaps]
    assert cli("cluster", "start", "--base-dir", base, away).returncode == 0
    end = _status(base)[leader]["committed_index"]
    wait_for(lambda: (_status(base)[away].get("applied_index") or -1) >= end, 60, f"{away} to catch up")
    assert _kv(base, keys, away) == _kv(base, keys) == {k: "5-{}-".format(k).ljust(40_000, "v") for k in keys}
    assert all(s["ok"] for s in _snapshots(base, away))
    assert not os.path.exists(arriving)
