"""Real node processes on 127.0.0.1, driven through the real command line.

Every wait polls a condition under a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from cluster.net.client import Client
from cluster.raft.config import parse_peers
from tests.support.commands import cli
from tests.support.group import bodies_of, leader_of, pid_of, recorded, restart, status, wait_for
from tests.support.ports import free_port_base


def test_append_get_failover_and_down(cluster):
    base = cluster
    with open(os.path.join(base, "cluster.json")) as fh:
        peers = parse_peers(json.load(fh)["peers"])

    async def metadata():
        c = Client(peers, "default", timeout=5)
        try:
            return await c.status()
        finally:
            await c.close()
    assert {(md.other["flush"], md.other["flush_interval_ms"]) for md in asyncio.run(metadata()).values()} == {("async", 40)}
    assert cli("node", "start", "--id", "n0", "--peers", "n0-127.0.0.1:1", "--flush-interval", "0").returncode == 2
    r = cli("append", "--base-dir", base, "-d", "hello", "-d", "world", "--format", "json")
    assert r.returncode == 0, r.stderr
    appended = json.loads(r.stdout)
    assert [a["index"] for a in appended] == [1, 2]  # index 0 is the leader's no-op
    r = cli("get", "--base-dir", base, "-i", "1", "-c", "2", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [(e["index"], e["body"]) for e in json.loads(r.stdout)] == [(1, "hello"), (2, "world")]
    lines = "\n".join(f"line {k}" for k in range(100)) + "\n"
    r = cli("append", "--base-dir", base, "--file", "-", "--lines", "--batch", "16", "--format", "json", input=lines)
    assert r.returncode == 0, r.stderr
    assert [a["index"] for a in json.loads(r.stdout)] == list(range(3, 103))
    # the bodies alone, for another tool: newline-, NUL- or length-delimited
    raw = subprocess.run([sys.executable, "-m", "dledgerctl", "get", "--base-dir", base, "-i", "1", "-c", "102",
                          "--format", "raw", "--delimiter", "length"], capture_output=True, timeout=60)
    assert raw.returncode == 0, raw.stderr
    bodies, off = [], 0
    while off < len(raw.stdout):
        n = int.from_bytes(raw.stdout[off:off + 4], "big")
        bodies.append(raw.stdout[off + 4:off + 4 + n])
        off += 4 + n
    assert bodies == [b"hello", b"world"] + [f"line {k}".encode() for k in range(100)]
    r = cli("get", "--base-dir", base, "-i", "1", "-c", "3", "--format", "raw")
    assert r.returncode == 0 and r.stdout == "hello\nworld\nline 0\n", r.stdout

    # kill the leader hard: the other two elect a new one and keep committing
    rows = status(base)
    leader = next(x for x in rows if x["role"] == "leader")
    with open(os.path.join(base, "cluster.json")) as fh:
        pid = next(n["pid"] for n in json.load(fh)["nodes"] if n["id"] == leader["id"])
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: any(x.get("role") == "leader" and x["id"] != leader["id"] for x in status(base)), 30,
             "a new leader")
    r = cli("append", "--base-dir", base, "-d", "after failover", "--format", "json", "--timeout", "10")
    assert r.returncode == 0, r.stderr
    idx = json.loads(r.stdout)[0]["index"]
    r = cli("get", "--base-dir", base, "-i", str(idx), "--format", "json")
    assert json.loads(r.stdout)[0]["body"] == "after failover"
    st = cli("cluster", "status", "--base-dir", base, "--format", "json")
    assert st.returncode == 1  # one node is down
    assert sorted(x["state"] for x in json.loads(st.stdout)) == ["down", "up", "up"]

    # the surviving replicas hold identical files up to the end (offline diff)
    up = [x["id"] for x in json.loads(st.stdout) if x["state"] == "up"]
    d = cli("store", "diff", os.path.join(base, f"dledger-{up[0]}"), os.path.join(base, f"dledger-{up[1]}"),
            "--format", "json")
    assert d.returncode in (0, 1), d.stderr


def test_a_node_survives_garbage_and_oversized_frames(cluster):
    base = cluster
    with open(os.path.join(base, "cluster.json")) as fh:
        node = json.load(fh)["nodes"][0]
    host, port = node["address"].split(":")
    for junk in (b"\x00\x00\x00\x10garbage-garbage!", struct.pack(">i", 1 << 30) + b"x" * 100,
                 struct.pack(">ii", 12, 4) + b"{bad", b"\xff" * 64):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(junk)
            s.settimeout(5)
            try:
                s.recv(100)  # the node answers or closes; it must not die
            except (socket.timeout, ConnectionError):
                pass
    wait_for(lambda: all(x["state"] == "up" for x in status(base)), 10, "all nodes up")
    r = cli("append", "--base-dir", base, "-d", "still fine", "--format", "json")
    assert r.returncode == 0, r.stderr

    # well-formed frames the node must refuse with an answer: an unknown code, a wrong group
    from cluster.raft.rpc import Code, VoteRequest
    from cluster.net.frames import Frame, encode_frame
    from cluster.net.frames import FrameReceiver
    from cluster.net.wire import request_frame

    def ask(frame):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(encode_frame(frame))
            dec, got = FrameReceiver(), []
            while not got:
                chunk = s.recv(65536)
                assert chunk, "connection closed instead of an answer"
                got = dec.feed(chunk)
            return got[0]

    unknown = ask(Frame(59999, opaque=77))
    assert unknown.is_response and unknown.opaque == 77 and unknown.code != 0 and unknown.remark
    wrong = ask(request_frame(VoteRequest("not-our-group", "n1", 99, 10**6, 99), 78))
    assert json.loads(wrong.body)["code"] == Code.UNKNOWN_GROUP
    stranger = ask(request_frame(VoteRequest(json.load(open(os.path.join(base, "cluster.json")))["group"],
                                             "intruder", 99, 10**6, 99), 79))
    assert json.loads(stranger.body)["code"] == Code.UNKNOWN_MEMBER
    st = status(base)
    assert sum(x.get("role") == "leader" for x in st) == 1 and all(x.get("term", 0) < 99 for x in st)


def test_bad_options_and_unreachable_peers(tmp_path):
    r = cli("node", "start", "--id", "n9", "--peers", "n0-127.0.0.1:1")
    assert r.returncode == 2 and r.stderr.startswith("Error: --id 'n9' is not one of --peers")
    r = cli("node", "start", "--id", "n0", "--peers", "n0-127.0.0.1")
    assert r.returncode == 2 and "not ID-HOST:PORT" in r.stderr
    port = free_port_base(1)
    t = time.monotonic()
    r = cli("append", "--peers", f"n0-127.0.0.1:{port}", "-d", "x", "--timeout", "1.5")
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1
    assert time.monotonic() - t < 20
    r = cli("get", "--base-dir", str(tmp_path), "-i", "0")
    assert r.returncode == 2 and "no cluster recorded" in r.stderr
    r = cli("cluster", "down", "--base-dir", str(tmp_path))
    assert r.returncode == 1 and r.stderr.startswith("Error: no cluster record")


def test_second_node_on_the_same_directory_is_refused(cluster):
    base = cluster
    with open(os.path.join(base, "cluster.json")) as fh:
        rec = json.load(fh)
    r = cli("node", "start", "--id", "n0", "--peers", rec["peers"], "--store-base-dir", base, timeout=30)
    assert r.returncode == 1 and "in use by another process" in r.stderr
    r = cli("store", "truncate", os.path.join(base, "dledger-n1"), "--from-index", "0", "--yes", "--force")
    assert r.returncode == 1 and "in use by another process" in r.stderr


@pytest.fixture
def slow_stepdown(group):
    """A cluster whose leader keeps its post for 5 s without a majority (10 heartbeats), so
    a command started after its followers die still finds it leading on a loaded machine.
    Its nodes drop flushed data more than 16 KiB behind their log's end from the page
    cache, so catching up and the GETs below read dropped pages back from disk."""
    return group(3, "--max-heartbeat-leak", "10", "--drop-behind", "16KiB")


def test_thousand_appends_replicas_identical_restarts_and_truncation(slow_stepdown):
    base = slow_stepdown
    lines = "".join(f"entry {k}\n" for k in range(1000))
    r = cli("append", "--base-dir", base, "--file", "-", "--lines", "--batch", "1", "--format", "json", input=lines,
            timeout=120)
    assert r.returncode == 0, r.stderr
    acked = json.loads(r.stdout)
    assert len(acked) == 1000 and [a["index"] for a in acked] == list(range(1, 1001))
    wait_for(lambda: len({(x["end_index"], x["committed_index"]) for x in status(base)}) == 1, 15, "replicas level")
    for a, b in (("n0", "n1"), ("n0", "n2")):
        d = cli("store", "diff", os.path.join(base, f"dledger-{a}"), os.path.join(base, f"dledger-{b}"),
                "--format", "json")
        assert d.returncode == 0, d.stdout + d.stderr

    # a leader left with entries nobody else has: kill the followers (a stopped process would
    # still receive pushes into its socket buffer), append (it cannot commit), kill the leader,
    # bring the followers back to elect a new leader and move on, then restart the old leader
    old = leader_of(base)
    others = [i for i in ("n0", "n1", "n2") if i != old]
    for i in others:
        os.kill(pid_of(base, i), signal.SIGKILL)
    old_addr = next(n["address"] for n in recorded(base)["nodes"] if n["id"] == old)
    try:
        r = cli("append", "--peers", f"{old}-{old_addr}", "-d", "doomed", "--timeout", "1.5")
        assert r.returncode == 1 and r.stderr.startswith("Error: ")
    finally:
        os.kill(pid_of(base, old), signal.SIGKILL)
    for i in others:
        restart(base, i)
    assert any(b == "doomed" for _i, _t, b in bodies_of(base, old))
    new = leader_of(base)
    assert new != old
    r = cli("append", "--base-dir", base, "-d", "after", "--format", "json", "--timeout", "10")
    assert r.returncode == 0, r.stderr
    restart(base, old)
    wait_for(lambda: len({(x.get("end_index"), x.get("committed_index")) for x in status(base)}) == 1
             and all(x["state"] == "up" for x in status(base)), 30, "the old leader caught up")
    old_bodies = [b for _i, _t, b in bodies_of(base, old)]
    assert "doomed" not in old_bodies and "after" in old_bodies
    assert bodies_of(base, old) == bodies_of(base, new)

    # a full restart keeps every committed entry
    before = bodies_of(base, "n0")
    for n in recorded(base)["nodes"]:
        os.kill(n["pid"], signal.SIGTERM)
    for n in recorded(base)["nodes"]:
        wait_for(lambda: not os.path.exists(f"/proc/{n['pid']}") or
                 open(f"/proc/{n['pid']}/stat").read().split()[2] == "Z", 20, f"{n['id']} to stop")
    for i in ("n0", "n1", "n2"):
        restart(base, i)
    leader_of(base)
    r = cli("get", "--base-dir", base, "-i", "1", "-c", "1000", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [e["body"] for e in json.loads(r.stdout)] == [f"entry {k}" for k in range(1000)]
    after = bodies_of(base, "n0")
    assert after[: len(before)] == before


@pytest.mark.parametrize("nodes,ndown,commits", [(5, 2, True), (3, 2, False)])
def test_quorum_with_nodes_down(group, nodes, ndown, commits):
    base = group(nodes)
    victims = recorded(base)["nodes"][:ndown]
    for n in victims:
        os.kill(n["pid"], signal.SIGKILL)
    r = cli("append", "--base-dir", base, "-d", "x", "--timeout", "8", "--format", "json")
    if commits:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode == 1
        assert r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1
        assert "within" in r.stderr or "no leader" in r.stderr
