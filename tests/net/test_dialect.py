"""DLedger's own dialect (cluster/net/dialect.py) and what the deciding logic does for Java members:
their pushes as dledgerctl's, votes they are not ready for, no no-op entries, cut backs
instead of empty compares. Pure: no sockets, no processes (tests/java/test_dledger_wire.py runs
the real Java DLedger)."""

from __future__ import annotations

import base64
import json
import random

import pytest

from cluster.net import dialect
from cluster.raft.config import NodeConfig, parse_peers
from cluster.raft.core import RaftCore
from cluster.raft.elections import VOTE_AGAIN_MS
from cluster.raft.dispatcher import DispatchState
from cluster.raft.member import MemoryTermStore, Role
from cluster.raft.rpc import (
    Code,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    PushRequest,
    PushResponse,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
    split_entries,
)
from cluster.net.frames import FLAG_RESPONSE, BadMessage, Frame, json_body
from cluster.net.wire import LEADERSHIP_TRANSFER, PUSH, decode_request, decode_response, request_frame
from store.format import ENTRY_HEADER, MAGIC_NOOP
from store.memstore import MemoryStore

PEERS = parse_peers("n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3")


def _raw(index: int, term: int, pos: int, body: bytes, crc=(0, 0)) -> bytes:
    return ENTRY_HEADER.pack(1, 48 + len(body), index, term, pos, 0, crc[0], crc[1], len(body)) + body


def test_a_java_push_becomes_the_bytes_a_follower_writes_and_back():
    raw = _raw(7, 3, 480, b"hello", (123, 456)) + _raw(8, 3, 533, b"", (0, 0))
    req = PushRequest("g", "n0", 3, PushType.APPEND, 6, 7, 2, raw)
    spans = [(off, size) for off, size, _i, _t in split_entries(raw)]
    body = dialect.push_body(req, "n1", spans)
    o = json.loads(body)
    assert o["remoteId"] == "n1" and o["type"] == "APPEND" and len(o["batchEntry"]) == 2 and "entry" not in o
    assert base64.b64decode(o["batchEntry"][0]["body"]) == b"hello" and o["batchEntry"][0]["chainCrc"] == 123
    assert dialect.decode_push(body) == req
    # one entry goes as "entry", as DLedger's leader sends it without batch push
    one = PushRequest("g", "n0", 3, PushType.APPEND, 6, 7, 1, raw[:53])
    o = json.loads(dialect.push_body(one, "n1", [(0, 53)]))
    assert "batchEntry" not in o and o["entry"]["index"] == 7
    assert dialect.decode_push(dialect.push_body(one, "n1", [(0, 53)])) == one


def test_java_truncate_and_commit_pushes():
    raw = _raw(4, 2, 200, b"x")
    # DLedger's TRUNCATE writes its entry when the follower lacks it: dledgerctl's cut back
    trunc = dialect.decode_push(json.dumps({"group": "g", "leaderId": "n0", "term": 2, "type": "TRUNCATE",
                                            "commitIndex": 3, "entry": dialect.entry_object(raw)}).encode())
    assert (trunc.type, trunc.first_index, trunc.begin_index, trunc.count, trunc.entries) == (
        PushType.TRUNCATE, 4, 4, 1, raw)
    commit = dialect.decode_push(b'{"group":"g","leaderId":"n0","term":2,"type":"COMMIT","commitIndex":9,'
                                 b'"batchEntry":[],"batch":false,"count":0}')
    assert (commit.type, commit.commit_index, commit.first_index, commit.entries) == (PushType.COMMIT, 9, -1, b"")
    for bad in (b"not json", b'{"type":"SHOVE"}', b'{"entry":{"index":"x"}}', b"[1]"):
        with pytest.raises(BadMessage):
            dialect.decode_push(bad)


def test_a_java_take_leadership_request_is_read_as_one():
    theirs = Frame(LEADERSHIP_TRANSFER, body=json.dumps({
        "group": "g", "leaderId": "n0", "localId": "n0", "remoteId": "n2", "transferId": "n0",
        "transfereeId": "n2", "term": 5, "takeLeadershipLedgerIndex": 41, "code": 200}).encode())
    req = decode_request(theirs)
    assert (req.take, req.transferee, req.term, req.end_index) == (True, "n2", 5, 41)
    # the operator's request to the leader (DLedger's client sends the same fields, to the leader)
    to_leader = Frame(LEADERSHIP_TRANSFER, body=json.dumps({
        "group": "g", "leaderId": "n0", "remoteId": "n0", "transferId": "n0", "transfereeId": "n2",
        "term": 5}).encode())
    assert decode_request(to_leader).take is False
    # and ours reads back as DLedger's leader would send it
    ours = request_frame(LeadershipTransferRequest("g", "n0", "n2", 5, take=True, end_index=9), 1, "n2")
    o = json.loads(ours.body)
    assert (o["remoteId"], o["transferId"], o["takeLeadershipLedgerIndex"]) == ("n2", "n0", 9)


def _core(self_id="n0", java=("n1", "n2"), entries=0):
    store = MemoryStore()
    if entries:
        store.append_leader([b"e%d" % k for k in range(entries)], 1)
    cfg = NodeConfig("g", self_id, PEERS, dledger_peers=tuple(java))
    return RaftCore(cfg, store, MemoryTermStore(1), random.Random(1), 0), store


def _sent(core, kind):
    return [s for s in core.take().sends if isinstance(s.request, kind)]


def test_java_voters_not_ready_for_the_term_are_asked_again_and_elect():
    core, store = _core(entries=3)
    core.tick(10_000)  # no leader heard: a pre-vote
    pre = _sent(core, VoteRequest)
    assert pre and all(s.request.pre_vote for s in pre)
    # Java has no pre-vote: it takes ours for a vote in a term above its own, and says so
    core.on_response("n1", pre[0].request, VoteResponse(1, VoteResult.REJECT_TERM_NOT_READY), 10_001)
    votes = _sent(core, VoteRequest)
    assert votes and not votes[0].request.pre_vote and core.member.term == 2  # the pre-vote passed
    core.on_response("n1", votes[0].request, VoteResponse(1, VoteResult.REJECT_TERM_NOT_READY), 10_002)
    core.tick(10_002 + VOTE_AGAIN_MS - 1)
    assert not [s for s in _sent(core, VoteRequest) if s.to == "n1"]
    core.tick(10_002 + VOTE_AGAIN_MS)
    again = [s for s in _sent(core, VoteRequest) if s.to == "n1"]
    assert len(again) == 1 and again[0].request.term == 2
    core.on_response("n1", again[0].request, VoteResponse(2, VoteResult.ACCEPT), 10_030)
    assert core.member.role == Role.LEADER
    # no no-op entry: DLedger 0.2.7 cannot read magic 2 back
    assert store.end_index == 2 and all(store.get(i).magic != MAGIC_NOOP for i in range(3))
    # a Java follower still moving to the term is beaten again soon, not after a whole interval
    beats = _sent(core, HeartBeatRequest)
    to_n1 = [s for s in beats if s.to == "n1"][0]
    core.on_response("n1", to_n1.request, HeartBeatResponse(-1, Code.TERM_NOT_READY), 10_031)
    core.tick(10_031 + VOTE_AGAIN_MS)
    assert [s for s in _sent(core, HeartBeatRequest) if s.to == "n1"]


def test_without_java_members_a_new_leader_appends_its_no_op():
    core, store = _core(java=(), entries=2)
    core.tick(10_000)
    pre = _sent(core, VoteRequest)[0].request
    core.on_response("n1", pre, VoteResponse(1, VoteResult.ACCEPT), 10_001)
    vote = _sent(core, VoteRequest)[0].request
    core.on_response("n1", vote, VoteResponse(2, VoteResult.ACCEPT), 10_002)
    assert core.member.role == Role.LEADER and store.get(store.end_index).magic == MAGIC_NOOP


def test_a_java_follower_is_cut_back_where_dledgerctl_would_compare_nothing():
    core, store = _core(java=("n1",), entries=0)
    core.tick(10_000)
    for kind in (True, False):
        req = _sent(core, VoteRequest)[0].request
        core.on_response("n1", req, VoteResponse(req.term, VoteResult.ACCEPT), 10_001)
    assert core.member.role == Role.LEADER
    d1, d2 = core.role.dispatchers["n1"], core.role.dispatchers["n2"]
    assert d1.java and not d2.java
    # an empty leader has nothing to compare with a Java follower (it needs an entry); a
    # dledgerctl follower is asked "is yours empty?"
    pushes = _sent(core, PushRequest)
    assert [(s.to, s.request.type, s.request.first_index) for s in pushes] == [("n2", PushType.COMPARE, -1)]
    assert d1.poll(10_010, -1) == []
    store.append_leader([b"a", b"b"], core.member.term)
    d1.compare_index = -1
    (req,) = d1.poll(10_020, -1)
    assert (req.type, req.first_index, d1.state) == (PushType.TRUNCATE, 0, DispatchState.TRUNCATE)
    # a peer learnt to be Java later gets the same treatment
    core.mark_java("n2")
    assert d2.java and "n2" in core.java_peers
    core.mark_java("n0")  # (itself: ignored)
    assert "n0" not in core.java_peers


def _leader(java=("n1",), entries=0, noop=False):
    """A leader of term 2 (elected by n1 and n2), with ``entries`` normal entries of term 1
    and, with ``noop``, a no-op of term 1 after them."""
    core, store = _core(java=java, entries=entries)
    if noop:
        store.append_leader([b""], 1, MAGIC_NOOP)
        store.append_leader([b"after"], 1)
    core.tick(10_000)
    for _ in range(4):
        for s in _sent(core, VoteRequest):
            core.on_response(s.to, s.request, VoteResponse(s.request.term, VoteResult.ACCEPT), 10_001)
        core.tick(10_000 + 200)
    assert core.member.role == Role.LEADER
    core.take()
    return core, store


def test_a_no_op_is_never_pushed_to_a_java_follower():
    core, store = _leader(java=("n1",), entries=3, noop=True)  # entries 0-2, a no-op at 3, entry 4
    d = core.role.dispatchers["n1"]
    d._start_append(-1)
    pushes = d.poll(20_000, -1)
    sent = b"".join(bytes(p.entries) for p in pushes)
    assert [p.first_index for p in pushes] == [0] and pushes[0].count == 3
    assert [e[2] for e in split_entries(sent)] == [0, 1, 2]
    d.on_response(pushes[0], PushResponse(2, Code.SUCCESS, 0, 3, 0, 2), 20_001)
    later = d.poll(20_002, -1) + d.poll(20_600, 2)
    assert all(p.type == PushType.COMMIT for p in later) and d.watermark == 2
    assert "entry 3 is a no-op" in d.note and "--dledger-peers" in d.note
    # a dledgerctl follower gets everything
    d2 = core.role.dispatchers["n2"]
    d2._start_append(-1)
    assert sum(p.count for p in d2.poll(20_000, -1)) == 5


def test_a_java_follower_holding_more_after_the_match_is_cut_there_first():
    core, store = _leader(java=("n1",), entries=4)
    d = core.role.dispatchers["n1"]
    d.state, d.compare_index, d.outstanding = DispatchState.COMPARE, 3, None
    (cmp,) = d.poll(20_000, 3)
    assert cmp.type == PushType.COMPARE and cmp.first_index == 3
    d.on_response(cmp, PushResponse(2, Code.SUCCESS, 3, 1, 0, 7), 20_001)  # it holds 4..7 of an old leader
    (trunc,) = d.poll(20_002, 3)
    assert (trunc.type, trunc.first_index) == (PushType.TRUNCATE, 3)
    d.on_response(trunc, PushResponse(2, Code.SUCCESS, 3, 1, 0, 3), 20_003)
    assert d.state == DispatchState.APPEND and d.next_index == 4


def test_a_transferee_behind_the_java_leader_catches_up_before_taking_over():
    core, store = _core(self_id="n2", java=("n0", "n1"), entries=2)
    assert core.handle(HeartBeatRequest("g", "n0", 3), 100).code == Code.SUCCESS
    take = LeadershipTransferRequest("g", "n0", "n2", 3, take=True, end_index=3)
    assert core.handle(take, 110).code == Code.SUCCESS
    core.tick(120)
    assert not _sent(core, VoteRequest)  # entries 2 and 3 are still missing
    store.append_leader([b"x", b"y"], 3)
    core.tick(130)
    votes = _sent(core, VoteRequest)
    assert votes and all(v.request.take_leadership and v.request.term == 4 for v in votes)
    # behind for too long: it gives up and stays a follower
    core2, _ = _core(self_id="n2", java=("n0", "n1"), entries=2)
    core2.handle(HeartBeatRequest("g", "n0", 3), 100)
    core2.handle(take, 110)
    core2.take()
    core2.tick(110 + 1000)
    ready = core2.take()
    assert core2.member.role == Role.FOLLOWER and core2.elections.pending_take is None
    assert not [s for s in ready.sends if isinstance(s.request, VoteRequest)]
    assert any("not caught up to 3" in n for n in ready.notes)


def test_a_pre_vote_asks_java_members_only_when_no_dledgerctl_member_knows_a_leader():
    core, _ = _core(java=("n2",), entries=1)
    core.tick(10_000)
    first = _sent(core, VoteRequest)
    assert [s.to for s in first] == ["n1"]  # the dledgerctl member first
    core.on_response("n1", first[0].request, VoteResponse(1, VoteResult.REJECT_ALREADY_HAS_LEADER), 10_001)
    core.tick(10_500)
    assert not [s for s in _sent(core, VoteRequest) if s.to == "n2"]  # a live leader: the Java member is left alone
    # without that answer, the Java member is asked once n1 has answered (or after a moment)
    core, _ = _core(java=("n2",), entries=1)
    core.tick(10_000)
    first = _sent(core, VoteRequest)
    core.on_response("n1", first[0].request, VoteResponse(1, VoteResult.REJECT_SMALL_LEDGER_END_INDEX), 10_001)
    assert [s.to for s in _sent(core, VoteRequest)] == ["n2"]
    core, _ = _core(java=("n2",), entries=1)
    core.tick(10_000)
    core.take()
    core.tick(10_099)
    assert not _sent(core, VoteRequest)
    core.tick(10_100)
    assert [s.to for s in _sent(core, VoteRequest)] == ["n2"]


def test_a_java_push_with_fields_out_of_range_is_a_bad_message():
    body = json.dumps({"type": "APPEND", "term": 1, "entry": {"index": 1 << 70, "body": ""}}).encode()
    with pytest.raises(BadMessage, match="on-disk format"):
        dialect.decode_push(body)


def test_a_java_0312_follower_refusing_a_full_push_queue_is_named():
    # DLedger 0.3.1.2 (the RocketMQ 5 controller's) answers a COMMIT/COMPARE/TRUNCATE push it has
    # no room for with PUSH_REQUEST_IS_FULL (421), a code 0.2.x does not have
    body = {"code": 421, "group": "DefaultControllerGroup", "term": 3, "index": 7, "localId": "n1",
            "remoteId": "n0", "leaderId": "n0"}
    resp = decode_response(Frame(dialect.DLEDGER_RESPONSE_HEADER, 1, FLAG_RESPONSE, body=json_body(body)), PUSH)
    assert resp.code == 421 and resp.code.name == "PUSH_REQUEST_IS_FULL"
    assert resp.term == 3
