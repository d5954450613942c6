"""Linearizable reads through real node processes (cluster/node/reads.py over
cluster/raft/reads.py): a leader cut off from its majority answers no linearizable read,
though it still answers a serializable one from its own state; a follower asked for a
linearizable read sees a put acknowledged just before. The same rules under partitions,
with every history checked for linearizability: tests/raft/test_linearizable_sim.py."""

from __future__ import annotations

import json
import os
import signal

from tests.support.commands import cli
from tests.support.group import file_sizes, leader_of, wait_for


def _up(group, *extra: str) -> tuple[str, dict]:
    """A group of three with the kv state machine (the ``group`` fixture's): its base directory and record."""
    return group.recorded(3, "--state-machine", "kv", *extra, sizes=file_sizes("1MiB", "64KiB"))


def _kv(base: str, key: str, *extra: str, timeout: str = "5"):
    r = cli("kv", "get", "--base-dir", base, key, "--format", "json", "--timeout", timeout, *extra)
    return r, (json.loads(r.stdout)[0]["value"] if r.returncode in (0, 1) and r.stdout.strip() else None)


def test_a_leader_cut_off_from_its_majority_answers_no_linearizable_read(group):
    base, rec = _up(group)
    assert cli("kv", "put", "--base-dir", base, "k", "v1").returncode == 0
    leader = leader_of(base)
    pids = {n["id"]: n["pid"] for n in rec["nodes"]}
    others = [n for n in pids if n != leader]
    for n in others:  # the leader's majority stops answering
        os.kill(pids[n], signal.SIGSTOP)
    try:
        r, _ = _kv(base, "k", timeout="3")
        assert r.returncode == 1 and r.stderr.startswith("Error: "), (r.returncode, r.stdout, r.stderr)
        # serializable: the asked member's own state, at once (what every read was before)
        r, value = _kv(base, "k", "--node", leader, "--consistency", "serializable")
        assert r.returncode == 0 and value == "v1", r.stderr
        r = cli("get", "--base-dir", base, "-i", "0", "--format", "json", "--timeout", "3")
        assert r.returncode == 1, r.stdout
    finally:
        for n in others:
            os.kill(pids[n], signal.SIGCONT)
    wait_for(lambda: leader_of(base) is not None, 30, "a leader again")
    r, value = _kv(base, "k")
    assert r.returncode == 0 and value == "v1", r.stderr


def test_a_follower_serves_a_linearizable_read_through_the_leaders_read_index(group):
    base, _rec = _up(group)
    leader = leader_of(base)
    follower = next(n for n in ("n0", "n1", "n2") if n != leader)
    for k in range(20):
        put = cli("kv", "put", "--base-dir", base, "k", f"v{k}", "--format", "json")
        assert put.returncode == 0, put.stderr
        index = json.loads(put.stdout)[0]["index"]
        # at once, on a follower that may not have heard of the commit yet
        r, value = _kv(base, "k", "--node", follower, "--consistency", "linearizable")
        assert r.returncode == 0 and value == f"v{k}", (k, r.stderr)
        g = cli("get", "--base-dir", base, "-i", str(index), "--node", follower, "--consistency",
                "linearizable", "--format", "json")
        assert g.returncode == 0 and json.loads(g.stdout)[0]["body"] == f"k=v{k}", g.stderr


def test_a_leader_on_its_lease_answers_only_within_it_once_its_majority_stops(group):
    """``--read-lease``: with its majority SIGSTOPped, the leader still answers linearizable
    reads at once for a while (with no round, which it could not complete), but none sent
    later than the lease after the last answer it could have had."""
    import asyncio
    import time

    from cluster.net.client import Client, ClientError
    from cluster.node import runtime
    from cluster.raft.config import NodeConfig, parse_peers

    base, rec = _up(group, "--read-lease")
    assert cli("kv", "put", "--base-dir", base, "k", "v1").returncode == 0
    leader = leader_of(base)
    pids = {n["id"]: n["pid"] for n in rec["nodes"]}
    others = [n for n in pids if n != leader]
    peers = parse_peers(rec["peers"])
    lease_s = NodeConfig(rec["group"], leader, peers).read_lease_ms / 1000  # (cluster up's defaults)
    V1 = json.dumps({"key": "k", "value": "v1"}).encode()  # (the kv state machine's answer)

    async def reads():
        c = Client(peers, rec["group"], timeout=0.3)
        try:
            assert (await c.query(b"k", peer=leader, consistency="linearizable")).result == V1
            for n in others:
                os.kill(pids[n], signal.SIGSTOP)
            stopped = time.monotonic()
            out = []
            while time.monotonic() < stopped + lease_s + 1.5:
                sent = time.monotonic()
                try:
                    ok = (await c.query(b"k", peer=leader, consistency="linearizable")).result == V1
                except ClientError:
                    ok = False
                out.append((sent - stopped, ok))
                await asyncio.sleep(0.02)
            return out
        finally:
            await c.close()

    try:
        out = runtime.run(reads)
    finally:
        for n in others:
            os.kill(pids[n], signal.SIGCONT)
    served = [t for t, ok in out if ok]
    assert served and served[0] < 0.2, out[:5]  # (at once: no round could have been answered)
    assert max(served) < lease_s + 0.05, (max(served), lease_s)  # (+: the stop signals' delivery)
    assert not out[-1][1], out[-3:]
