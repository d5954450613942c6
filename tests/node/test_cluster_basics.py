"""Pure parts of the node runtime: the peers string, the configuration, member state, quorum."""

from __future__ import annotations

import pytest

from cluster.raft.config import ConfigError, NodeConfig, format_peers, parse_peers
from cluster.node.terms import FileTermStore
from cluster.raft.member import MemberState, MemoryTermStore
from cluster.raft.quorum import Quorum
from store.metafiles import read_currterm

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"


def test_parse_peers_keeps_order_and_round_trips():
    peers = parse_peers(PEERS)
    assert list(peers) == ["n0", "n1", "n2"]
    assert (peers["n1"].host, peers["n1"].port, peers["n1"].address) == ("127.0.0.1", 20912, "127.0.0.1:20912")
    assert format_peers(peers) == PEERS
    assert list(parse_peers(" n0-localhost:1 ; ")) == ["n0"]
    assert parse_peers("a-host-with-dash:5")["a"].host == "host-with-dash"


@pytest.mark.parametrize("text,msg", [
    ("", "empty"),
    ("n0", "not ID-HOST:PORT"),
    ("n0-127.0.0.1", "not ID-HOST:PORT"),
    ("n0-127.0.0.1:0", "port"),
    ("n0-127.0.0.1:70000", "port"),
    ("n0-127.0.0.1:x1", "port"),
    ("n0-h:1;n0-h:2", "twice"),
    ("n 0-h:1", "letters"),
    ("-h:1", "letters"),
])
def test_parse_peers_rejects_bad_strings(text, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_peers(text)


def test_config_checks():
    peers = parse_peers(PEERS)
    cfg = NodeConfig("g", "n1", peers)
    assert cfg.others == ["n0", "n2"] and cfg.quorum == 2 and cfg.leader_lost_ms == 1500
    with pytest.raises(ConfigError, match="not one of --peers"):
        NodeConfig("g", "n9", peers)
    with pytest.raises(ConfigError, match="--preferred-leader"):
        NodeConfig("g", "n0", peers, preferred_leader="x")
    with pytest.raises(ConfigError, match="flush"):
        NodeConfig("g", "n0", peers, flush="never")
    with pytest.raises(ConfigError, match="--heartbeat-interval must be"):
        NodeConfig("g", "n0", peers, heartbeat_interval_ms=0)


def test_member_state_persists_before_changing(tmp_path):
    terms = FileTermStore(str(tmp_path))
    m = MemberState.load("n0", terms)
    assert (m.term, m.voted_for) == (0, None)
    m.leader_id = "n1"
    m.advance_term(terms, 3)
    assert (m.term, m.voted_for, m.leader_id) == (3, None, None)
    m.vote(terms, "n2")
    ts = read_currterm(str(tmp_path))
    assert (ts.term, ts.vote_for) == (3, "n2")
    with pytest.raises(ValueError, match="already voted"):
        m.vote(terms, "n1")
    with pytest.raises(ValueError, match="not above"):
        m.advance_term(terms, 3)
    again = MemberState.load("n0", FileTermStore(str(tmp_path)))  # a restart
    assert (again.term, again.voted_for, again.role, again.leader_id) == (3, "n2", "follower", None)
    mem = MemoryTermStore()
    m2 = MemberState.load("n0", mem)
    m2.advance_term(mem, 1, "n0")
    m2.vote(mem, "n0")  # the same vote again writes nothing
    assert (mem.term, mem.voted_for, mem.saves) == (1, "n0", 1)


def test_quorum_commits_only_current_term_entries():
    q = Quorum(["n0", "n1", "n2"], "n0", term=5, first_index_of_term=10, committed=7)
    q.ack("n0", 5, 12)
    assert q.advance() is None  # only the leader has it
    q.ack("n1", 4, 12)  # an ack from an older term does not count
    assert q.advance() is None
    q.ack("n1", 5, 9)  # a majority holds 9, but 9 is from an earlier term
    assert q.quorum_index() == 9 and q.advance() is None
    q.ack("n1", 5, 11)
    assert q.advance() == 11 and q.committed == 11
    assert not q.ack("n1", 5, 10)  # watermarks never go down by an ack
    q.ack("n2", 5, 12)
    assert q.advance() == 12
    q.lower("n1", 3)
    q.lower("n2", 2)  # followers lost entries: nothing new can commit, nothing goes back
    q.ack("n0", 5, 20)
    assert q.quorum_index() == 3 and q.advance() is None and q.committed == 12
    assert q.lag("n2", 20) == 18


@pytest.mark.parametrize("n,acks,want", [(1, [], 4), (2, [("p1", 4)], 4), (2, [], None), (4, [("p1", 4)], None),
                                         (4, [("p1", 4), ("p2", 3)], 3), (5, [("p1", 4), ("p2", 4)], 4)])
def test_quorum_sizes(n, acks, want):
    peers = [f"p{i}" for i in range(n)]
    q = Quorum(peers, "p0", term=1, first_index_of_term=0)
    q.ack("p0", 1, 4)
    for p, i in acks:
        q.ack(p, 1, i)
    assert q.advance() == want


def test_pushes_in_flight_are_bounded_by_count_and_by_bytes():
    from cluster.raft.dispatcher import Dispatcher
    from cluster.raft.rpc import Code, PushResponse
    from store.memstore import MemoryStore

    store = MemoryStore()
    store.append_leader([b"x" * 952] * 40, 1)  # 1,000-byte entries
    peers = parse_peers("n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3")

    def pushed(**limits) -> list[int]:
        cfg = NodeConfig(group="g", self_id="n0", peers=peers, push_batch_bytes=3000, **limits)
        d = Dispatcher("n1", "g", "n0", 1, store, cfg, Quorum(list(peers), "n0", 1, 0), now=0)
        d._start_append(-1)
        return [r.count for r in d.poll(0, -1)]

    assert pushed(push_window=4) == [3, 3, 3, 3]  # 4 pushes of 3 entries
    assert pushed(push_window=100, push_window_bytes=7000) == [3, 3, 3]  # the third crosses 7,000 bytes and goes
    assert sum(pushed(push_window=100)) == 40  # 40,000 bytes: under the default byte bound
    # an answer makes room for the next push
    cfg = NodeConfig(group="g", self_id="n0", peers=peers, push_batch_bytes=3000, push_window_bytes=5000)
    d = Dispatcher("n1", "g", "n0", 1, store, cfg, Quorum(list(peers), "n0", 1, 0), now=0)
    d._start_append(-1)
    first = d.poll(0, -1)
    assert [r.first_index for r in first] == [0, 3] and d.poll(1, -1) == []
    d.on_response(first[0], PushResponse(1, Code.SUCCESS, 0, 3, 0, 2), 2)
    assert [r.first_index for r in d.poll(3, -1)] == [6]
