"""BackupWriter.add's run lane (numpy over many headers at once) against its per-entry lane:
for any log and any way of handing it over, the same chunks, counters, member list and learnt
data file size, and the same error at the same entry for a log that does not follow."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from store.backup import BackupWriter
from store.errors import StoreCorruptError
from store.format import CHAIN_CRC_OFFSET, MAGIC_CONFIG, MAGIC_NOOP, MAGIC_NORMAL, encode_entry

FILE = 1 << 16  # a data file's size in these logs


@st.composite
def logs(draw):
    """Encoded entries from a random first index and position: sizes, terms going up now and
    then, a no-op or a config entry here and there, and rolls to the next data file."""
    n = draw(st.integers(1, 700))
    index, term, pos, chain = draw(st.integers(0, 10**6)), draw(st.integers(0, 5)), 0, 0
    pos = draw(st.integers(0, 3)) * FILE
    out = []
    for _ in range(n):
        kind = draw(st.sampled_from([MAGIC_NORMAL] * 400 + [MAGIC_NOOP] * 4 + [MAGIC_CONFIG, "roll", "term"]))
        if kind == "roll":
            pos = (pos // FILE + 1) * FILE
            kind = MAGIC_NORMAL
        if kind == "term":
            term += 1
            kind = MAGIC_NORMAL
        body = (json.dumps({"voters": f"n0-127.0.0.1:{index % 9 + 1}", "learners": ""}).encode()
                if kind == MAGIC_CONFIG else b"x" * draw(st.sampled_from([0, 1, 7, 100, 1000])))
        raw = encode_entry(body, index=index, term=term, pos=pos, magic=kind, prev_chain=chain)
        chain = int.from_bytes(raw[CHAIN_CRC_OFFSET:CHAIN_CRC_OFFSET + 4], "big")
        out.append(raw)
        index, pos = index + 1, pos + len(raw)
    return out


def _written(tmp_path, name: str, parts: list[bytes], chunk_bytes: int):
    w = BackupWriter(str(tmp_path / name), chunk_bytes=chunk_bytes)
    try:
        for p in parts:
            w.add(p)
        w._cut()
        return ([(c.offset, c.length, c.first_index, c.last_index, c.first_pos, c.sha256) for c in w.chunks],
                (w.first_index, w.first_term, w.first_pos, w.last_index, w.last_term, w.last_chain, w.next_pos,
                 w.entries, w.entry_bytes, w.members, w.data_file_size))
    finally:
        w.abort()


@settings(max_examples=60, deadline=None)
@given(log=logs(), cuts=st.lists(st.integers(0, 700), max_size=6), chunk_kib=st.sampled_from([8, 64, 4096]))
def test_the_run_lane_takes_what_the_per_entry_lane_takes(tmp_path_factory, log, cuts, chunk_kib):
    tmp = tmp_path_factory.mktemp("runs")
    one_by_one = _written(tmp, "one.dlbk", log, chunk_kib << 10)  # (one entry per add: never a run)
    bounds = sorted({0, len(log), *[c for c in cuts if c < len(log)]})
    parts = [b"".join(log[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert _written(tmp, "runs.dlbk", parts, chunk_kib << 10) == one_by_one


def test_a_plain_stretch_goes_through_the_run_lane(tmp_path, monkeypatch):
    """(the lane the tests above compare is used: 1,000 plain entries in one add are runs)"""
    log = []
    for i in range(1000):
        log.append(encode_entry(b"y" * 50, index=i, term=1, pos=sum(map(len, log))))
    taken = []
    real = BackupWriter._add_run

    def spy(self, buf, off, n):
        got = real(self, buf, off, n)
        taken.append(got[0])  # (the bytes taken as a run)
        return got
    monkeypatch.setattr(BackupWriter, "_add_run", spy)
    w = BackupWriter(str(tmp_path / "plain.dlbk"))
    try:
        w.add(b"".join(log))
        assert sum(taken) == len(b"".join(log)) and w.entries == 1000 and w.last_index == 999
    finally:
        w.abort()


@settings(max_examples=40, deadline=None)
@given(log=logs().filter(lambda lg: len(lg) > 300), at=st.integers(150, 299), how=st.sampled_from(["gap", "term"]))
def test_a_log_that_does_not_follow_fails_at_the_same_entry(tmp_path_factory, log, at, how):
    tmp = tmp_path_factory.mktemp("bad")
    bad = bytearray(log[at])
    field = 8 if how == "gap" else 16  # (index, or term: set far off either way)
    bad[field:field + 8] = ((1 << 40) if how == "gap" else 0).to_bytes(8, "big")
    if how == "term" and int.from_bytes(log[at - 1][16:24], "big") == 0:
        return  # (a term 0 after term 0 is no step back)
    broken = log[:at] + [bytes(bad)] + log[at + 1:]
    errors = []
    for name, parts in (("one", broken), ("runs", [b"".join(broken)])):
        w = BackupWriter(str(tmp / f"{name}.dlbk"))
        try:
            for p in parts:
                w.add(p)
            errors.append(None)
        except StoreCorruptError as exc:
            errors.append((str(exc), w.last_index))
        finally:
            w.abort()
    assert errors[0] == errors[1] and errors[0] is not None
