"""Packed bodies (store/packed.py) and the compiled lane that encodes them
(store._lanes.encode_packed), held to encode_entries on the same bodies as a list.

tests/store/test_store_batch.py writes whole stores from packed bodies and from lists and
compares the files; here the pieces are checked directly, damaged run buffers included:
the leader hands the store the bytes a client sent.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import store.appending as filestore_mod
from store.packed import PackedBodies, run_sizes

lanes = filestore_mod._lanes
compiled = pytest.mark.skipif(lanes is None, reason="store._lanes is not built")


def run_of(bodies) -> bytes:
    return struct.pack(f">{len(bodies)}i", *map(len, bodies)) + b"".join(bodies)


def split(bodies, cuts) -> list[list[bytes]]:
    """``bodies`` cut into runs at the given (sorted, distinct) positions."""
    edges = [0, *sorted({c for c in cuts if 0 < c < len(bodies)}), len(bodies)]
    return [bodies[a:b] for a, b in zip(edges, edges[1:]) if b > a]


def test_packed_bodies_read_as_the_list_they_hold():
    bodies = [b"a", b"", b"ccc", b"dd", b"e" * 300]
    p = PackedBodies([(run_of(bodies[:2]), 2), (bytearray(run_of(bodies[2:3])), 1), (memoryview(run_of(bodies[3:])), 2)])
    assert len(p) == 5 and p.largest == 300
    assert [bytes(b) for b in p] == bodies
    assert [bytes(p[i]) for i in range(5)] == bodies
    assert bytes(p[-1]) == bodies[-1] and bytes(p[-5]) == bodies[0]
    assert [bytes(b) for b in p[1:4]] == bodies[1:4] and [bytes(b) for b in p[::-2]] == bodies[::-2]
    with pytest.raises(IndexError):
        p[5]
    with pytest.raises(IndexError):
        p[-6]
    assert [bytes(b) for b in PackedBodies.of(bodies)] == bodies
    assert len(PackedBodies()) == 0 and list(PackedBodies.of([])) == []


@pytest.mark.parametrize("buf, count, why", [
    (struct.pack(">2i", 1, 1) + b"x", 2, "add up to 2"),
    (struct.pack(">2i", 1, 1) + b"xyz", 2, "add up to 2"),
    (struct.pack(">2i", -1, 2) + b"x", 2, "negative"),
    (b"\0\0\0", 1, "too few"),
    (b"", 0, "at least 1"),
])
def test_a_run_whose_sizes_do_not_fit_is_refused(buf, count, why):
    with pytest.raises(ValueError, match=why):
        run_sizes(buf, count)
    with pytest.raises(ValueError, match=why):
        PackedBodies([(buf, count)])


@compiled
@settings(max_examples=400, deadline=None)
@given(bodies=st.lists(st.binary(max_size=300), max_size=30), cuts=st.lists(st.integers(0, 30), max_size=6),
       start=st.integers(0, 31), room=st.integers(1, 6000), with_crc=st.booleans(), chain=st.integers(0, 2**31 - 1))
def test_encode_packed_gives_what_encode_entries_gives(bodies, cuts, start, room, with_crc, chain):
    runs = [(run_of(r), len(r)) for r in split(bodies, cuts)]
    args = (start, 100, 4, 1, 5000, chain, with_crc, room)
    if start > len(bodies):
        with pytest.raises(ValueError):
            lanes.encode_entries(bodies, *args)
        with pytest.raises(ValueError):
            lanes.encode_packed(runs, *args)
        return
    assert lanes.encode_packed(runs, *args) == lanes.encode_entries(bodies, *args)


@compiled
@pytest.mark.parametrize("runs", [
    [(struct.pack(">2i", 1, 5) + b"xyz", 2)],  # a size past the buffer
    [(struct.pack(">2i", -1, 1) + b"x", 2)],  # a negative size
    [(b"\0\0\0\1", 2)],  # a table longer than the buffer
    [(b"\0\0\0\0", 0)],  # no bodies
    [(run_of([b"ok"]), 1), (struct.pack(">i", 99) + b"short", 1)],  # a bad run after a good one
])
def test_encode_packed_refuses_runs_that_do_not_fit_their_buffers(runs):
    with pytest.raises(ValueError):
        lanes.encode_packed(runs, 0, 0, 1, 1, 0, 0, True, 1 << 20)


@compiled
def test_encode_packed_checks_its_arguments():
    good = [(run_of([b"a", b"b"]), 2)]
    with pytest.raises(ValueError):
        lanes.encode_packed(good, 3, 0, 1, 1, 0, 0, True, 1000)
    with pytest.raises(ValueError):
        lanes.encode_packed(good, -1, 0, 1, 1, 0, 0, True, 1000)
    with pytest.raises(TypeError):
        lanes.encode_packed(tuple(good), 0, 0, 1, 1, 0, 0, True, 1000)
    with pytest.raises(TypeError):
        lanes.encode_packed([[run_of([b"a"]), 1]], 0, 0, 1, 1, 0, 0, True, 1000)
    with pytest.raises(TypeError):
        lanes.encode_packed([("text", 1)], 0, 0, 1, 1, 0, 0, True, 1000)
    assert lanes.encode_packed(good, 2, 0, 1, 1, 0, 7, True, 1000) == (b"", b"", [], 2, 7)
    # the runs before start are skipped whole: only their counts are read
    seg, _records, ends, stop, _chain = lanes.encode_packed([(b"junk", 3), *good], 3, 0, 1, 1, 0, 0, True, 1000)
    assert stop == 5 and ends == [49, 98] and seg[48:49] == b"a"
