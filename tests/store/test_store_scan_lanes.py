"""The two lanes of the data-file decoder (store/scan.py) must agree.

The run lane checks whole stretches at once with numpy, guided by the index records; the
per-entry lane decodes one record at a time and alone decides statuses and stops. These
tests check that the run lane is really used on healthy stores, that its chain checksum
table equals crc32, and that verify and recovery give identical results with and without
it on randomly damaged stores (with tiny runs too, so run boundaries fall everywhere).
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import store.scan as scan_mod
from tests.support.stores import store_files, write_project_store
from store.files import FileList
from store.filestore import FileStore
from store.format import CHAIN_INPUT, CRC_MASK, crc32, file_name
from store.recovery import plan_recovery
from store.scan import FileScan, Run, chain_crcs
from store.verify import verify_store

DSIZE, ISIZE = 4096, 256


@pytest.fixture(scope="module", params=[True, False], ids=["with-crc", "no-crc"])
def pristine(request, tmp_path_factory):
    node = tmp_path_factory.mktemp("lanes") / "dledger-n0"
    raw = write_project_store(node, count=40, terms=(1, 2, 2, 5), max_size=500, noop_at=21,
                              data_file_size=DSIZE, index_file_size=ISIZE, with_crc=request.param)
    assert len(store_files(node, "data")) >= 3
    return node, raw


def walk_items(node, run_max=None, monkeypatch=None):
    """Every item walk() yields over all data files, in order, as plain tuples."""
    data, index = FileList(str(node / "data"), DSIZE), FileList(str(node / "index"), ISIZE)
    data.load()
    index.load()
    items = []
    try:
        prev = (None, None, None)
        for f in data.files:
            scan = FileScan(f.view(), f.start, file_size=DSIZE, prev_index=prev[0], prev_term=prev[1],
                            prev_chain=prev[2])
            for item in scan.walk(index):
                items.append(item)
            prev = (scan.prev_index, scan.prev_term, scan.prev_chain)
    finally:
        data.close()
        index.close()
    return items


@pytest.mark.parametrize("framing", ["compiled", "numpy"])
def test_healthy_store_goes_through_the_run_lane(pristine, monkeypatch, framing):
    node, raw = pristine
    if framing == "numpy":
        monkeypatch.setattr(scan_mod, "_lanes", None)
    else:
        assert scan_mod._lanes is not None, "store._lanes was not built: see the output of pip install -e ."
    items = walk_items(node)
    assert all(type(i) is Run for i in items)
    assert sum(i.count for i in items) == len(raw)
    assert [i.first_index for i in items][0] == 0 and items[-1].last_index == len(raw) - 1
    # runs are bounded by index files (8 records each here) and data files
    assert all(i.count <= ISIZE // 32 for i in items)
    monkeypatch.setattr(scan_mod, "RUN_MAX", 3)
    small = walk_items(node)
    assert all(type(i) is Run and i.count <= 3 for i in small)
    assert sum(i.count for i in small) == len(raw)
    assert small[-1].last_chain == items[-1].last_chain


def test_run_lane_refuses_a_bad_body_and_the_entry_lane_reports_it(tmp_path):
    node = tmp_path / "dledger-n0"
    raw = write_project_store(node, count=12, max_size=200, data_file_size=1 << 16, index_file_size=4096)
    pos = struct.unpack_from(">q", raw[7], 24)[0]
    with open(node / "data" / file_name(0), "r+b") as fh:
        fh.seek(pos + 48 + len(raw[7]) - 49)  # the body's last byte (bodies are non-empty here)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0x40]))
    data, index = FileList(str(node / "data"), 1 << 16), FileList(str(node / "index"), 4096)
    data.load()
    index.load()
    try:
        items = list(FileScan(data.files[0].view(), 0, prev_index=-1, prev_chain=0).walk(index))
    finally:
        data.close()
        index.close()
    assert type(items[0]) is Run and (items[0].first_index, items[0].count) == (0, 7)
    assert items[1].index == 7 and items[1].status == "bad-body-crc"
    # after the bad entry the per-entry lane takes a stride, then runs resume (or the data ends)
    assert sum(i.count if type(i) is Run else 1 for i in items) == 12


@settings(max_examples=50, deadline=None, derandomize=True, database=None)
@given(rows=st.lists(st.binary(min_size=CHAIN_INPUT.size, max_size=CHAIN_INPUT.size), min_size=1, max_size=40))
def test_chain_table_equals_crc32(rows):
    arr = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), CHAIN_INPUT.size)
    assert chain_crcs(arr).tolist() == [crc32(r) & CRC_MASK for r in rows]


def outcome(node):
    """What verify and recovery conclude, as comparable plain data."""
    rep = verify_store(str(node), data_file_size=DSIZE, index_file_size=ISIZE)
    problems = [(p.severity, p.code, p.file, p.offset, p.index, p.message) for p in rep.problems]
    data, index = FileList(str(node / "data"), DSIZE), FileList(str(node / "index"), ISIZE)
    data.load()
    index.load()
    try:
        plan = plan_recovery(data, index)
    finally:
        data.close()
        index.close()
    plan_view = {k: v for k, v in vars(plan).items() if k != "stop"}
    plan_view["stop"] = None if plan.stop is None else (plan.stop.reason, plan.stop.offset, plan.stop.detail)
    return rep.summary(), problems, rep.suppressed, plan_view


def both_lanes(monkeypatch, node, run_max):
    """outcome() with runs of at most ``run_max`` entries, checked equal to the outcome with
    the per-entry lane alone; the run lane's framing both compiled (when built) and with
    numpy. Returns it."""
    with monkeypatch.context() as m:
        m.setattr(scan_mod, "RUN_MAX", run_max)
        fast = outcome(node)
        m.setattr(scan_mod, "_lanes", None)
        with_numpy = outcome(node)
    with monkeypatch.context() as m:
        m.setattr(scan_mod, "_fast_run", lambda scan, index_files: None)
        slow = outcome(node)
    assert fast == slow
    assert with_numpy == slow
    return fast


damage = st.tuples(
    st.sampled_from(["data", "data", "index"]),
    st.integers(0, 1 << 30),
    st.sampled_from(["xor", "write", "zero-run"]),
    st.binary(min_size=1, max_size=8),
)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damages=st.lists(damage, min_size=1, max_size=4), run_max=st.sampled_from([1, 2, 5, 1 << 16]))
def test_lanes_agree_on_damaged_stores(pristine, monkeypatch, damages, run_max):
    src, raw = pristine
    end = sum(len(r) for r in raw) + 4 * 64  # roughly where the data ends, BLANKs included
    with tempfile.TemporaryDirectory() as tmp:
        node = Path(shutil.copytree(src, os.path.join(tmp, "dledger-n0")))
        for sub, where, how, payload in damages:
            fsize, span = (DSIZE, end) if sub == "data" else (ISIZE, len(raw) * 32 + 32)
            logical = where % span
            path = node / sub / file_name(logical - logical % fsize)
            if not path.exists():
                continue
            rel = logical % fsize
            with open(path, "r+b") as fh:
                fh.seek(rel)
                old = fh.read(min(len(payload) * (16 if how == "zero-run" else 1), fsize - rel))
                if how == "xor":
                    new = bytes(a ^ b for a, b in zip(old, payload))
                elif how == "write":
                    new = payload[: len(old)]
                else:
                    new = bytes(len(old))
                fh.seek(rel)
                fh.write(new)
        both_lanes(monkeypatch, node, run_max)


def test_verify_and_open_release_their_maps(pristine):
    # numpy views of an mmap block its close(); every open/close cycle must still work
    node, raw = pristine
    for _ in range(3):
        assert verify_store(str(node), data_file_size=DSIZE, index_file_size=ISIZE).ok
        with FileStore.open(str(node), data_file_size=DSIZE, index_file_size=ISIZE, read_only=True) as s:
            assert s.end_index == len(raw) - 1


def _patch(path, off, data):
    with open(path, "r+b") as fh:
        fh.seek(off)
        fh.write(data)


@pytest.mark.parametrize("run_max", [2, 1 << 16])
@pytest.mark.parametrize("what", ["chain", "term-back", "body-crc-field", "index-term", "magic"])
def test_lanes_agree_on_targeted_damage(pristine, monkeypatch, tmp_path, what, run_max):
    """Damage random flips rarely hit: fields only one check covers. The index record is
    patched along with the header where needed, so that only the targeted check can see it."""
    src, raw = pristine
    node = Path(shutil.copytree(src, tmp_path / "dledger-n0"))
    k = 13
    hdr = raw[k]
    pos, term = struct.unpack_from(">q", hdr, 24)[0], struct.unpack_from(">q", hdr, 16)[0]
    data_path = node / "data" / file_name(pos - pos % DSIZE)
    rel = pos % DSIZE
    islot = k * 32
    index_path, irel = node / "index" / file_name(islot - islot % ISIZE), islot % ISIZE
    recorded = hdr[36:44] != bytes(8)
    if what == "chain":
        _patch(data_path, rel + 36, struct.pack(">i", (struct.unpack_from(">i", hdr, 36)[0] ^ 0x10) & CRC_MASK))
        expect = "bad-chain-crc"
    elif what == "body-crc-field":
        _patch(data_path, rel + 40, struct.pack(">i", (struct.unpack_from(">i", hdr, 40)[0] ^ 0x10) & CRC_MASK))
        expect = "bad-body-crc"
    elif what == "term-back":
        assert term > 0 and k > 0
        _patch(data_path, rel + 16, struct.pack(">q", 0))
        _patch(index_path, irel + 24, struct.pack(">q", 0))
        expect = "term-back"
    elif what == "index-term":
        _patch(index_path, irel + 24, struct.pack(">q", term + 7))
        expect = "index-mismatch"
    else:
        _patch(data_path, rel, struct.pack(">i", 3))  # still a valid magic; the index says 1
        expect = "index-mismatch"
    fast = both_lanes(monkeypatch, node, run_max)
    codes = {p[1] for p in fast[1]}
    if what in ("chain", "body-crc-field") and not recorded:
        # a no-crc entry whose checksum field now reads non-zero: its checks now run and fail
        assert codes & {"bad-body-crc", "bad-chain-crc"}
    else:
        assert expect in codes, codes


def test_a_walk_starting_mid_log_uses_runs(pristine):
    # recovery starts three files from the end with nothing known about the entry before
    node, raw = pristine
    data, index = FileList(str(node / "data"), DSIZE), FileList(str(node / "index"), ISIZE)
    data.load()
    index.load()
    try:
        f = data.files[1]
        items = list(FileScan(f.view(), f.start, file_size=DSIZE).walk(index))
    finally:
        data.close()
        index.close()
    assert items and all(type(i) is Run for i in items)
    assert items[0].offset == f.start and items[0].first_index > 0
