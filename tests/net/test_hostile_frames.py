"""Hostile frames against real node processes (issue "0"): no frame a peer or a client
sends can stop the group, change its state when refused, or flood its log.

Each case here was found by fuzzing a plaintext cluster; on the main before this test, one
HEART_BEAT of term 2^63-1 left the group without a leader for good, a refused Java header
marked a member as Java, JSON nested 1,000 deep logged a traceback per request, a forged
push made the leader loop COMPARE <-> TRUNCATE, and METADATA or a Java GET of another
group was answered with this group's data. Every wait polls under a deadline.
"""

from __future__ import annotations

import json
import os
import random
import socket

import pytest

from cluster.net.frames import FrameReceiver, encode_frame
from cluster.net.wire import GET, HEART_BEAT, METADATA, PUSH, request_frame
from cluster.raft.rpc import Code, HeartBeatRequest
from store.filestore import FileStore
from store.format import encode_entry
from tests.support.commands import cli
from tests.support.group import status, wait_for
from tests.support.hostile import DEEP, I64, frame, hostile_frames, nested, send_all
from tests.support.ports import free_port_base


def host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def ask(address: str, data: bytes, timeout: float = 5.0):
    """Send one frame; the node's answer (a Frame), or None when it closed the connection."""
    with socket.create_connection(host_port(address), timeout=timeout) as s:
        s.sendall(data)
        receiver, got = FrameReceiver(), []
        while not got:
            chunk = s.recv(1 << 16)
            if not chunk:
                return None
            got = receiver.feed(chunk)
        return got[0]


def body_of(f) -> dict:
    return json.loads(bytes(f.body))


def log_text(base: str, node: str) -> str:
    with open(os.path.join(base, "logs", f"{node}.log"), errors="replace") as fh:
        return fh.read()


def roles(base: str) -> tuple[str, str, list[str], dict]:
    st = status(base)
    leader = [r for r in st if r.get("role") == "leader"]
    assert len(leader) == 1, st
    rows = {r["id"]: r for r in st}
    return leader[0]["id"], leader[0]["term"], [r["id"] for r in st if r["role"] == "follower"], rows


def group_of(base: str) -> str:
    with open(os.path.join(base, "cluster.json")) as fh:
        return json.load(fh)["group"]


def settled(base: str, end: int | None = None):
    """Every member up, one leader, and every member's log ending and committed where the
    leader's does (at ``end`` when given)."""
    st = status(base)
    if len(st) != 3 or sum(r.get("role") == "leader" for r in st) != 1:
        return None
    ends = {(r.get("end_index"), r.get("committed_index")) for r in st}
    if len(ends) != 1 or (end is not None and ends != {(end, end)}):
        return None
    return st


def identical(base: str) -> bool:
    nodes = sorted(n for n in os.listdir(base) if n.startswith("dledger-"))
    return all(cli("store", "diff", os.path.join(base, nodes[0]), os.path.join(base, n)).returncode == 0
               for n in nodes[1:])


def append(base: str, *data: str) -> list:
    args = [a for d in data for a in ("-d", d)]
    r = cli("append", "--base-dir", base, *args, "--format", "json", "--timeout", "10")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def cluster(module_group):
    """One cluster for the cases below, in order: each refused frame must leave it as it was."""
    return module_group(3, "--flush-interval", "40")


@pytest.fixture(scope="module")
def before(cluster):
    """Who led in which term, and how long each member's log was, before any hostile frame."""
    leader, term, followers, rows = roles(cluster)
    return {"leader": leader, "term": term, "followers": followers, "addr": {n: r["address"] for n, r in rows.items()},
            "lines": {n: log_text(cluster, n).count("\n") for n in rows}, "group": group_of(cluster)}


def test_a_term_that_could_not_be_incremented_is_refused(cluster, before):
    group, leader, term, follower = before["group"], before["leader"], before["term"], before["followers"][0]
    # naming the leader, to a follower: refused at decoding
    f = ask(before["addr"][follower], encode_frame(request_frame(HeartBeatRequest(group, leader, I64), 5)))
    assert body_of(f)["code"] == Code.UNEXPECTED_ARGUMENT and "term" in body_of(f)["remark"]
    # one that could be, but lies further above this node's term than decades of elections
    f = ask(before["addr"][follower], encode_frame(request_frame(HeartBeatRequest(group, leader,
                                                                                  term + (1 << 31) + 1), 6)))
    assert body_of(f)["code"] == Code.UNEXPECTED_ARGUMENT
    with open(os.path.join(cluster, f"dledger-{follower}", "currterm")) as fh:
        assert f"currTerm={term}" in fh.read()
    assert roles(cluster)[:2] == (leader, term)
    append(cluster, "after a term out of reach")


def test_a_refused_java_header_marks_no_one_as_java(cluster, before):
    group, leader, follower = before["group"], before["leader"], before["followers"][0]
    f = ask(before["addr"][leader], frame(HEART_BEAT, json.dumps({"group": group + "x", "leaderId": follower,
                                                                   "term": before["term"]}).encode(), language="JAVA"))
    assert body_of(f)["code"] == Code.UNKNOWN_GROUP
    append(cluster, "after a refused Java header")  # (the leader has gone round its loop since)
    assert "is a Java DLedger node" not in log_text(cluster, leader)


def test_metadata_and_dledger_get_of_another_group_are_refused(cluster, before):
    group, leader = before["group"], before["leader"]
    f = ask(before["addr"][leader], frame(METADATA, json.dumps({"group": group + "x", "remoteId": leader}).encode()))
    assert body_of(f)["code"] == Code.UNKNOWN_GROUP and "peers" not in body_of(f)
    f = ask(before["addr"][leader], frame(GET, json.dumps({"group": group + "x", "remoteId": leader, "beginIndex": 0,
                                                           "maxSize": 0}).encode(), language="JAVA"))
    assert body_of(f)["code"] == Code.UNKNOWN_GROUP and not body_of(f).get("entries")


def test_json_nested_a_thousand_deep_is_refused_without_a_traceback(cluster, before):
    group = before["group"]
    deep_body = frame(HEART_BEAT, ('{"group":"%s","x":%s}' % (group, nested(DEEP))).encode())
    deep_header = frame(HEART_BEAT, header=('{"code":%d,"x":%s}' % (HEART_BEAT, nested(DEEP))).encode())
    for n, address in before["addr"].items():
        assert send_all(*host_port(address), [deep_body] * 300) == {"answered": 300, "closed": 0}
        assert send_all(*host_port(address), [deep_header] * 30) == {"answered": 0, "closed": 30}
    for n in before["addr"]:
        text = log_text(cluster, n)
        assert "Traceback" not in text and "Fatal error" not in text, text[-3000:]
        assert text.count("\n") - before["lines"][n] < 40, text[-5000:]  # a line per host now and then, not per frame


def test_a_seeded_mix_of_refused_frames_changes_nothing(cluster, before):
    rng = random.Random(20261125)
    for n, address in before["addr"].items():
        counts = send_all(*host_port(address), hostile_frames(rng, before["group"], list(before["addr"]), 400))
        assert sum(counts.values()) == 400
    # the same leader in the same term, appends and reads work, logs identical
    assert roles(cluster)[:2] == (before["leader"], before["term"])
    got = append(cluster, "after the frames")
    r = cli("get", "--base-dir", cluster, "-i", str(got[0]["index"]), "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout)[0]["body"] == "after the frames", r.stderr
    wait_for(lambda: settled(cluster, got[0]["index"]), 20, "every member to hold the new entry")
    assert roles(cluster)[:2] == (before["leader"], before["term"])
    assert identical(cluster)
    for n in before["addr"]:
        text = log_text(cluster, n)
        assert "Traceback" not in text and "Fatal error" not in text, text[-3000:]
        assert "is a Java DLedger node" not in text
        assert text.count("\n") - before["lines"][n] < 80, text[-5000:]


def test_a_forged_push_is_found_by_the_leader_and_cut_back(cluster):
    """A push forged as the leader at its term, committing an entry of its own past the
    leader's end on a follower (plaintext has no identities): the leader finds that the
    follower does not converge, compares it byte for byte, cuts it back and fills it
    again, saying so in its log, instead of looping COMPARE <-> TRUNCATE."""
    base = cluster
    group = group_of(base)
    got = append(base, "one", "two")
    end = got[-1]["index"]
    wait_for(lambda: settled(base, end), 20, "every member to hold the entries")
    leader, term, followers, rows = roles(base)
    victim = followers[0]
    pos = got[-1]["pos"] + got[-1]["size"]
    # chained to the entry before it, as the leader's would be (a follower refuses a chain CRC
    # that does not follow its last entry's)
    with FileStore.open(os.path.join(base, f"dledger-{leader}"), read_only=True) as s:
        prev_chain = s.get(end).chain_crc
    forged = encode_entry(b"forged", index=end + 1, term=term, pos=pos, prev_chain=prev_chain)
    ext = {"group": group, "leaderId": leader, "term": str(term), "type": "APPEND", "commitIndex": str(end + 1),
           "firstEntryIndex": str(end + 1), "count": "1"}
    f = ask(rows[victim]["address"], frame(PUSH, forged, ext))
    assert body_of(f)["code"] == Code.SUCCESS  # (nothing tells it from the leader's own)

    # the leader repairs it by itself: every log the same again, with the forged entry gone
    wait_for(lambda: settled(base, end), 20, "the forged entry to be cut back")
    text = log_text(base, leader)
    wait_for(lambda: "does not converge" in log_text(base, leader) and f"cut {victim} back" in log_text(base, leader),
             10, "the leader to say it cut the follower back")
    assert identical(base)
    # one more entry goes everywhere, with the leader's bytes at the index the forged one held
    got = append(base, "three")
    assert got[0]["index"] == end + 1
    wait_for(lambda: settled(base, end + 1), 20, "every member to hold the new entry")
    assert identical(base)
    text = log_text(base, leader)
    assert text.count("does not converge") <= 2 and len(text.splitlines()) < 200, text[-4000:]

    # a compare by terms says that is all it compared
    r = cli("peer", "compare", "--base-dir", base, "--peer", victim, "--dry-run")
    assert r.returncode == 0 and "compared terms only" in r.stderr, r.stderr


def test_a_term_out_of_range_in_currterm_is_refused_at_start(tmp_path):
    node = tmp_path / "dledger-n0"
    (node / "data").mkdir(parents=True)
    (node / "index").mkdir()
    (node / "currterm").write_text(f"voteLeader=\ncurrTerm={I64 + 1}\n")
    port = free_port_base(1)
    r = cli("node", "start", "--id", "n0", "--peers", f"n0-127.0.0.1:{port}", "--store-base-dir", str(tmp_path),
            timeout=30)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("Error: ") and "currterm" in r.stderr and "outside" in r.stderr
    assert [sorted(os.listdir(p)) for p in (node, node / "data")] == [["currterm", "data", "index"], []]
    r = cli("store", "checkpoint", str(node), "--format", "json")
    assert r.returncode == 1
    row = [x for x in json.loads(r.stdout) if x["key"] == "currTerm"][0]
    assert row["status"] == "mismatch" and "outside" in row["note"]
