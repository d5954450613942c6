"""The search behind ``peer compare`` (cluster/raft/divergence.py) and the follower's side of it
(probe, repair), without sockets: a leader store, a follower store, and the follower's
answers fed straight back to the search."""

from __future__ import annotations

import random

import pytest

from cluster.raft.divergence import PROBE_MAX, DivergenceSearch, fingerprints
from cluster.raft.follower import FollowerLog
from cluster.raft.rpc import Code, ProbeRequest, RepairRequest
from store.format import MAGIC_NOOP
from store.memstore import MemoryStore


def build(terms_bodies) -> MemoryStore:
    s = MemoryStore(data_file_size=1 << 16)
    for term, body in terms_bodies:
        s.append_leader([body], term)
    return s


def log_of(n: int, switches=(0, 40, 90)) -> list[tuple[int, bytes]]:
    """n entries whose term steps up at the given indexes."""
    out, term = [], 0
    for i in range(n):
        if i in switches:
            term += 1
        out.append((term, b"entry-%d" % i))
    return out


def search(leader, follower, deep: bool):
    s = DivergenceSearch(leader, "f", deep=deep)
    fl = FollowerLog(follower)
    while (probe := s.next_probe()) is not None:
        s.feed(fl.probe(ProbeRequest("g", "l", 5, *probe), 5))
    return s.result


@pytest.mark.parametrize("deep", [False, True])
def test_identical_logs_match_at_the_end(deep):
    r = search(build(log_of(150)), build(log_of(150)), deep)
    assert (r.match_index, r.first_diff, r.truncate_from, r.to_cut) == (149, None, None, 0)


@pytest.mark.parametrize("deep", [False, True])
def test_a_shorter_follower_needs_no_cut(deep):
    r = search(build(log_of(150)), build(log_of(120)), deep)
    assert (r.match_index, r.first_diff, r.truncate_from) == (119, None, None)


@pytest.mark.parametrize("deep", [False, True])
def test_a_longer_follower_is_cut_after_the_leaders_end(deep):
    r = search(build(log_of(100)), build(log_of(130)), deep)
    assert (r.match_index, r.first_diff, r.truncate_from, r.to_cut) == (99, None, 100, 30)


@pytest.mark.parametrize("deep", [False, True])
def test_a_tail_of_an_older_term_is_found_by_both_modes(deep):
    leader = log_of(150)
    stale = leader[:90] + [(2, b"stale-%d" % i) for i in range(90, 160)]  # term 2 where the leader has 3
    r = search(build(leader), build(stale), deep)
    assert (r.match_index, r.first_diff, r.truncate_from, r.to_cut) == (89, 90, 90, 70)
    assert (r.leader_term, r.follower_term) == (3, 2)
    if not deep:
        assert r.probes <= 10  # a binary search, not a walk


def test_bodies_changed_under_the_same_terms_need_a_deep_compare():
    leader = log_of(5000, switches=(0, 1000))
    changed = list(leader)
    for i in (4321, 4322, 4400):
        changed[i] = (changed[i][0], b"changed!")
    shallow = search(build(leader), build(changed), False)
    assert shallow.truncate_from is None and shallow.match_index == 4999  # terms alone see nothing
    deep = search(build(leader), build(changed), True)
    assert (deep.match_index, deep.first_diff, deep.truncate_from, deep.to_cut) == (4320, 4321, 4321, 679)
    assert deep.leader_term == deep.follower_term == 2 and deep.leader_digest != deep.follower_digest
    assert deep.probes == 1 + -(-4322 // PROBE_MAX)


@pytest.mark.parametrize("deep", [False, True])
def test_empty_logs(deep):
    r = search(build([]), build(log_of(10)), deep)
    assert (r.match_index, r.truncate_from, r.to_cut) == (-1, 0, 10)
    r = search(build(log_of(10)), build([]), deep)
    assert (r.match_index, r.truncate_from) == (-1, None)


@pytest.mark.parametrize("seed", range(30))
def test_random_divergences_agree_with_a_direct_comparison(seed):
    rng = random.Random(seed)
    base = log_of(rng.randrange(1, 300), switches=sorted(rng.sample(range(300), 4)) + [0])
    other = list(base[: rng.randrange(0, len(base) + 1)])
    if rng.random() < 0.5 and other:  # a stale tail of a lower term
        cut = rng.randrange(0, len(other))
        floor = other[cut - 1][0] if cut else 0
        other = other[:cut] + [(max(floor, other[cut][0] - 1), b"x%d" % k) for k in range(rng.randrange(1, 50))]
    if rng.random() < 0.3 and other:  # a body changed in place
        k = rng.randrange(0, len(other))
        other[k] = (other[k][0], other[k][1] + b"!")
    for deep in (False, True):
        r = search(build(base), build(other), deep)
        same = [a == b for a, b in zip(base, other)]
        first = same.index(False) if False in same else None
        if deep:
            assert r.first_diff == first
        elif first is not None and base[first][0] != other[first][0]:
            assert r.first_diff == first  # a term difference is found, wherever it is
        expect_cut = r.first_diff if r.first_diff is not None else (len(base) if len(other) > len(base) else None)
        assert r.truncate_from == expect_cut
        assert r.match_index == (r.first_diff - 1 if r.first_diff is not None else min(len(base), len(other)) - 1)


def test_fingerprints_cover_whole_entries():
    s = build(log_of(20))
    first, terms, chains, digests = fingerprints(s, 5, 3)
    assert first == 5 and terms == [1, 1, 1] and len(set(digests)) == 3 and all(chains)
    assert fingerprints(s, 18, 10)[1] == [1, 1]
    assert fingerprints(build([]), 0, 5) == (0, [], [], [])


def test_repair_cuts_committed_entries_and_forgets_the_match():
    s = build(log_of(50))
    s.set_committed(45)
    fl = FollowerLog(s)
    fl.term, fl.matched = 5, 49
    resp = fl.repair(RepairRequest("g", "l", 5, 30), 5)
    assert resp.code == Code.SUCCESS and resp.dropped == 20 and s.end_index == 29 and s.committed_index == 29
    assert fl.matched == 29
    assert fl.repair(RepairRequest("g", "l", 5, 100), 5).dropped == 0  # past the end: nothing to cut
    s.append_leader([b""], 9, MAGIC_NOOP)
    assert fl.probe(ProbeRequest("g", "l", 5, 29, 5), 5).terms == (1, 9)
