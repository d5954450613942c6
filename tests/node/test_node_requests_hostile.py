"""Malformed and misaddressed requests to a running group (issue 45, item 3 and its minor items).

READ_INDEX (52008) with ``"group": 5`` was answered "internal error" and logged an 8-line
traceback at ERROR each time, unbounded (2,000 requests: 16,000 lines); now it is refused
UNEXPECTED_ARGUMENT with the reason before anything is awaited, and what a client or peer can
make a node log is rate-limited. READ_INDEX asked of a follower named the follower as leader;
a HEART_BEAT or VOTE whose ``remoteId`` names another member was taken (DLedger refuses it
UNKNOWN_MEMBER). Real node processes from ``cluster up``, raw frames on sockets."""

from __future__ import annotations

import json
import os
import socket
import struct

from cluster.net.frames import FrameReceiver
from cluster.raft.rpc import Code
from tests.support.group import status
from tests.support.hostile import frame

READ_INDEX, HEART_BEAT, VOTE = 52008, 51002, 51001


def ask(address: str, frames: list[bytes], timeout: float = 10.0) -> list[dict]:
    """Send ``frames`` on one connection; their answers' bodies (a header's remark when the
    answer has no body), in order."""
    host, port = address.rsplit(":", 1)
    out = []
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(b"".join(frames))
        receiver = FrameReceiver()
        while len(out) < len(frames):
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} answers")
            for f in receiver.feed(chunk):
                out.append(json.loads(bytes(f.body)) if f.body else {"remark": f.remark, "header_code": f.code})
    return out


def members(base: str) -> tuple[dict, str, list[str]]:
    rows = status(base)
    leader = next(r["id"] for r in rows if r.get("role") == "leader")
    return {r["id"]: r for r in rows}, leader, [r["id"] for r in rows if r["id"] != leader]


def address_of(base: str, node: str) -> str:
    with open(os.path.join(base, "cluster.json")) as fh:
        return next(p.split("-", 1)[1] for p in json.load(fh)["peers"].split(";") if p.startswith(node + "-"))


def test_a_malformed_read_index_is_refused_with_the_reason_and_logged_at_a_bounded_rate(cluster):
    base = cluster
    _rows, leader, followers = members(base)
    for node in (leader, followers[0]):
        logs = os.path.join(base, "logs", f"{node}.log")
        before = os.path.getsize(logs)
        bad = [frame(READ_INDEX, json.dumps({"group": 5}).encode(), opaque=k + 1) for k in range(2000)]
        answers = ask(address_of(base, node), bad)
        assert len(answers) == 2000
        assert {a.get("code") for a in answers} == {int(Code.UNEXPECTED_ARGUMENT)}, answers[:2]
        assert "group" in answers[0]["remark"] and "internal error" not in json.dumps(answers)
        with open(logs, "rb") as fh:
            fh.seek(before)
            written = fh.read().decode(errors="replace")
        assert "Traceback" not in written, written[:2000]
        assert written.count("52008") <= 3, written[:2000]  # (2,000 refusals; a line per host per 10 s)


def test_read_index_asked_of_a_follower_names_the_leader(cluster):
    base = cluster
    _rows, leader, followers = members(base)
    answer, = ask(address_of(base, followers[0]), [frame(READ_INDEX, json.dumps({"group": "default"}).encode())])
    assert answer["code"] == int(Code.SUCCESS) and answer["leaderId"] == leader, answer


def test_a_heartbeat_or_vote_for_another_member_is_refused_as_dledger_refuses_it(cluster):
    base = cluster
    rows, leader, followers = members(base)
    target, other = followers
    term = rows[target]["term"]
    # the leader's own beat, one term up, but addressed to the other follower: taken, it would
    # move the target to a new term (and a leader it never elected)
    beat = {"group": "default", "remoteId": other, "leaderId": leader, "term": term + 1}
    vote = {"group": "default", "remoteId": other, "leaderId": other, "term": term + 1, "ledgerEndIndex": 1 << 40,
            "ledgerEndTerm": term, "preVote": False}
    answers = ask(address_of(base, target), [frame(HEART_BEAT, json.dumps(beat).encode(), opaque=1),
                                             frame(VOTE, json.dumps(vote).encode(), opaque=2)])
    assert [a["code"] for a in answers] == [int(Code.UNKNOWN_MEMBER)] * 2, answers
    assert answers[0]["leaderId"] == leader and answers[1]["voteResult"] != "ACCEPT", answers
    assert members(base)[0][target]["term"] == term  # (nothing taken)
    # addressed to the target itself, the same beat is a leader's beat as before
    beat["remoteId"], beat["term"] = target, term
    answer, = ask(address_of(base, target), [frame(HEART_BEAT, json.dumps(beat).encode())])
    assert answer["code"] == int(Code.SUCCESS), answer


def test_where_a_bad_request_was_sent_is_answered_before_what_it_asks(cluster):
    """A request that names another group (or member), or an operator request sent to a
    follower, is refused as such even when the rest of it does not decode: UNKNOWN_GROUP,
    UNKNOWN_MEMBER, NOT_LEADER with the leader to ask (as before requests were decoded whole);
    the same request sent where it should go is UNEXPECTED_ARGUMENT, naming what is wrong."""
    base = cluster
    _rows, leader, followers = members(base)
    GET, FORCE_TRUNCATE = 50002, 52003  # (FORCE_TRUNCATE without its fromIndex: it does not decode)
    answers = ask(address_of(base, leader), [
        frame(GET, json.dumps({"group": "other", "index": -5}).encode(), opaque=1),
        frame(GET, json.dumps({"group": "default", "remoteId": followers[0], "index": -5}).encode(), opaque=2),
        frame(GET, json.dumps({"group": "default", "index": -5}).encode(), opaque=3),
        frame(FORCE_TRUNCATE, json.dumps({"group": "other", "peer": followers[0]}).encode(), opaque=4)])
    assert [a["code"] for a in answers] == [int(Code.UNKNOWN_GROUP), int(Code.UNKNOWN_MEMBER),
                                            int(Code.UNEXPECTED_ARGUMENT), int(Code.UNKNOWN_GROUP)], answers
    assert "index" in answers[2]["remark"]
    answer, = ask(address_of(base, followers[0]),
                  [frame(FORCE_TRUNCATE, json.dumps({"group": "default", "peer": followers[1]}).encode())])
    assert answer["code"] == int(Code.NOT_LEADER) and leader in answer["remark"], answer
