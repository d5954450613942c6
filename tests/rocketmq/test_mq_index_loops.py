"""A broker's ``index/`` hash chains that loop (issue 59 item 2): entry 1 -> 2 -> 1 with the
header's index count 2^31-1 made ``mq messages --topic T --key K`` walk the loop index-count
times, appending the same offsets (MemoryError, or no end). A walk now follows each entry at
most once and never past the entries the file holds; ``mq check`` reports the loop as an
``index-loop`` finding. A hypothesis fuzzer crafts index files (chains, counts, slots) and
holds the look-up and the loop search to a plain walk."""

from __future__ import annotations

import json
import mmap
import os
import struct
import subprocess
import sys
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.paths import ROOT
from tests.support.rmq_store import write_broker_store
import store.rocketmq.lookup as lookup
from store.rocketmq.lookup import (
    HASH_SLOT_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SIZE,
    IndexFile,
    chain_loops,
    index_findings,
    index_key_hash,
    open_index,
)

runner = CliRunner()
SLOTS = 101  # (4 x as many entries: the broker's ratio, so the files' length tells their shape)


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "broker"
    write_broker_store(str(root), [{"topic": "T", "queue_id": 0, "body": b"m%d" % i,
                                    "properties": {"KEYS": f"k{i}", "UNIQ_KEY": f"U{i:04d}"}} for i in range(40)])
    r = runner.invoke(app, ["mq", "rebuild", str(root), "--max-hash-slot-num", str(SLOTS), "--max-index-num",
                            str(4 * SLOTS)])
    assert r.exit_code == 0, r.output
    (name,) = os.listdir(root / "index")
    return root, root / "index" / name


def make_loop(path, key: str) -> None:
    """Chain entry 1 -> 2 -> 1, lead ``key``'s chain into it (its oldest entry's previous is
    entry 1), and say 2^31-1 entries in the header: what the issue's file held."""
    with open(path, "r+b") as fh:
        data = bytearray(fh.read())
    base = INDEX_HEADER_SIZE + SLOTS * HASH_SLOT_SIZE

    def entry(n):
        return list(struct.unpack_from(">iqii", data, base + n * INDEX_SIZE))

    def put(n, e):
        struct.pack_into(">iqii", data, base + n * INDEX_SIZE, *e)

    (n,) = struct.unpack_from(">i", data, INDEX_HEADER_SIZE + (index_key_hash(key) % SLOTS) * HASH_SLOT_SIZE)
    while entry(n)[3] > 0:
        n = entry(n)[3]
    put(n, entry(n)[:3] + [1])
    put(1, entry(1)[:3] + [2])
    put(2, entry(2)[:3] + [1])
    struct.pack_into(">i", data, 36, (1 << 31) - 1)
    with open(path, "r+b") as fh:
        fh.write(data)


def test_a_looping_chain_ends_where_it_comes_back_and_mq_check_reports_it(store):
    root, path = store
    make_loop(path, "T#k3")
    # a real process with a deadline: before, the look-up walked the loop 2^31-1 times
    r = subprocess.run([sys.executable, "-m", "dledgerctl", "mq", "messages", str(root), "--topic", "T", "--key",
                        "k3", "--format", "jsonl"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [json.loads(line)["keys"] for line in r.stdout.splitlines()] == ["k3"]
    c = runner.invoke(app, ["mq", "check", str(root), "--format", "json"])
    assert c.exit_code == 1, c.output
    found = [x for x in json.loads(c.stdout) if x["finding"] == "index-loop"]
    assert len(found) == 1, c.stdout
    assert found[0]["file"] == f"index/{path.name}", found
    assert "loops: entries 1 -> 2 -> 1" in found[0]["detail"] or "loops: entries 2 -> 1 -> 2" in found[0]["detail"]
    assert "index count 2147483647 is past the 403 entries the file holds" in found[0]["detail"]
    slot = (found[0]["offset"] - INDEX_HEADER_SIZE) // HASH_SLOT_SIZE
    assert f"slot {slot} " in found[0]["detail"]


def test_a_sound_index_has_no_loop_finding(store):
    root, _path = store
    assert index_findings(str(root)) == []
    c = runner.invoke(app, ["mq", "check", str(root)])
    assert c.exit_code == 0, c.output


# --- hypothesis: crafted index files --------------------------------------------------------------

HASHES = range(12)  # (the entries' key hashes; every slot of a file of at most 6 is some hash's)


def reference(f: IndexFile, h: int) -> tuple[list[int], bool]:
    """A plain walk of the chain of hash ``h``'s slot with a seen set: the offsets of entries
    of hash ``h``, and whether the chain came back to an entry it had passed."""
    raw = bytes(f.data)
    last = min(f.index_count, f.capacity - 1)
    (v,) = struct.unpack_from(">i", raw, INDEX_HEADER_SIZE + (h % f.slots) * 4)
    if v <= 0 or v > last or f.index_count <= 1:
        return [], False
    base = INDEX_HEADER_SIZE + f.slots * 4
    out, seen, n = [], set(), v
    while True:
        if n in seen:
            return out, True
        seen.add(n)
        kh, phy, diff, prev = struct.unpack_from(">iqii", raw, base + n * INDEX_SIZE)
        if diff < 0:
            return out, False
        if kh == h:
            out.append(phy)
        if prev <= 0 or prev > last or prev == n:
            return out, False
        n = prev


@st.composite
def index_files(draw):
    slots = draw(st.integers(1, 6))
    cap = 4 * slots
    link = st.one_of(st.integers(-2, cap + 2), st.sampled_from([(1 << 31) - 1, -(1 << 31)]))
    count = draw(st.one_of(st.integers(-1, cap + 3), st.sampled_from([(1 << 31) - 1, -(1 << 31)])))
    header = struct.pack(">qqqqii", 0, 0, 0, 0, 0, count)
    table = b"".join(struct.pack(">i", draw(link)) for _ in range(slots))
    entries = b"".join(struct.pack(">iqii", draw(st.sampled_from(HASHES)), 1000 + n,
                                   draw(st.sampled_from([0, 1, -1])), draw(link)) for n in range(cap))
    return slots, header + table + entries


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(made=index_files())
def test_crafted_index_files_are_walked_once_per_entry_and_their_loops_found(tmp_path, made):
    slots, raw = made
    path = tmp_path / "20240101000000000"
    path.write_bytes(raw)
    with open(path, "rb") as fh:
        data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    f = IndexFile(path.name, data, slots, 0, 0, struct.unpack_from(">i", raw, 36)[0])
    try:
        looped = False
        for h in HASHES:
            want, loops = reference(f, h)
            looped |= loops
            got = f.offsets_of_hash(h)
            assert got == want and len(got) <= f.capacity
        found = chain_loops(f)
        assert (found is not None) == looped
        with mock.patch.object(lookup, "_CHAIN_CHUNK", 3):  # (entries read a few at a time: the same answer)
            assert chain_loops(f) == found
        if found is not None:
            cyc, nxt = found.cycle, f.next_entries()
            assert cyc and len(set(cyc)) == len(cyc)
            assert all(int(nxt[a]) == b for a, b in zip(cyc, cyc[1:] + cyc[:1]))  # (a loop, as followed)
            assert found.first_slot < slots
    finally:
        data.close()
