"""The linearizability checker of the tests (tests/support/linearizability.py) on histories whose
answer is known, including the stale read of a deposed leader, and against a brute-force
search over every order on random small histories."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.linearizability import Op, check


def put(key, value, start, end, client=None):
    return Op(key, "put", value, start, end, client)


def get(key, value, start, end, client=None):
    return Op(key, "get", value, start, end, client)


def test_an_empty_history_and_a_sequential_one_are_linearizable():
    assert check([])
    assert check([put("x", 1, 0, 1), get("x", 1, 2, 3), put("x", 2, 4, 5), get("x", 2, 6, 7), get("y", None, 0, 9)])


def test_the_stale_read_of_a_deposed_leader_is_not():
    # a put acknowledged (by the new leader) before the get began; the old leader answers
    # the get from its own state, without the put
    h = [put("x", 1, 0, 10, "a"), get("x", None, 20, 25, "b")]
    r = check(h)
    assert not r and r.bad_key == "x"


def test_a_read_overlapping_a_write_may_see_either_value():
    assert check([put("x", 1, 0, 10), get("x", None, 5, 6)])
    assert check([put("x", 1, 0, 10), get("x", 1, 5, 6)])


def test_reads_must_not_go_back_in_time():
    # both reads overlap the write, but the first saw it and the second (which began after
    # the first ended) did not
    assert not check([put("x", 1, 0, 100), get("x", 1, 10, 20), get("x", None, 30, 40)])


def test_a_write_of_unknown_outcome_may_happen_late_or_never():
    assert check([put("x", 1, 0, None), get("x", None, 50, 60)])
    assert check([put("x", 1, 0, None), get("x", 1, 50, 60)])
    assert check([put("x", 1, 0, None), get("x", 1, 50, 60), get("x", 1, 70, 80)])
    assert not check([put("x", 1, 0, None), get("x", 1, 50, 60), get("x", None, 70, 80)])
    assert not check([get("x", 1, 0, 5), put("x", 1, 10, None)])  # not before it was invoked


def test_a_read_of_a_value_never_written_is_not():
    assert not check([put("x", 1, 0, 1), get("x", 2, 2, 3)])


def test_keys_are_checked_apart_and_the_bad_one_is_named():
    h = [put("a", 1, 0, 1), get("a", 1, 2, 3), put("b", 1, 0, 1), get("b", None, 2, 3)]
    r = check(h)
    assert not r and r.bad_key == "b" and r.keys == 2 and r.ops == 4


def test_a_long_history_with_many_concurrent_operations_is_checked_quickly():
    h = []
    for k in range(300):  # three clients, each writing then reading its own value, all overlapping
        t = 10 * k
        h += [put("x", k, t, t + 25, "w"), get("x", k, t + 1, t + 24, "r")]
    assert check(h)
    h.append(get("x", -1, 10_000, 10_001, "late"))  # a value that was never there, after everything
    assert not check(h)


def brute_force(ops: list[Op]) -> bool:
    """Some order of all operations (unknown-outcome puts may also be left out) respects
    real time and the register's semantics, key by key."""
    for key in {o.key for o in ops}:
        mine = [o for o in ops if o.key == key]
        maybe = [o for o in mine if o.end is None]
        sure = [o for o in mine if o.end is not None]
        found = False
        for n in range(len(maybe) + 1):
            for chosen in itertools.combinations(maybe, n):
                for order in itertools.permutations(sure + list(chosen)):
                    # real time: an op that completed before another was invoked comes first
                    if any(b.end is not None and b.end < a.start for i, a in enumerate(order) for b in order[i + 1:]):
                        continue
                    state, good = None, True
                    for o in order:
                        if o.kind == "put":
                            state = o.value
                        elif o.value != state:
                            good = False
                            break
                    if good:
                        found = True
                        break
                if found:
                    break
            if found:
                break
        if not found:
            return False
    return True


op_strategy = st.builds(
    lambda key, kind, value, start, length, unknown: Op(key, kind, value, start,
                                                        None if unknown and kind == "put" else start + length),
    st.sampled_from(["x", "y"]), st.sampled_from(["put", "get"]), st.sampled_from([None, 1, 2]),
    st.integers(0, 20), st.integers(0, 8), st.booleans())


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(ops=st.lists(op_strategy, max_size=6))
def test_the_checker_agrees_with_a_search_over_every_order(ops):
    ops = [o for o in ops if not (o.kind == "put" and o.value is None)]
    assert bool(check(ops)) == brute_force(ops)
