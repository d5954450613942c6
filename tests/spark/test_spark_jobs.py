"""The Spark jobs (audit, diverge, stats, export) on a real local Spark session over real
files, each checked against the store's own answer: ``store verify`` for audit, ``store
diff`` for diverge, the store's entries for stats and export.

The damage cases are those of tests/store/test_store_recovery.py and tests/cli/test_cli_store.py,
applied to copies of a project-written store (with checksums) and of the DLedger 0.2.7
reference store (without); one audit job reads all of them at once.
"""

from __future__ import annotations

import os
import random
import shutil

import pyarrow.parquet as pq
import pytest

from dledgerctl.pipeline import jobs
from dledgerctl.pipeline import audit as audit_job
from dledgerctl.pipeline.inputs import resolve_nodes
from store.filestore import FileStore
from store.format import encode_entry, file_name
from store.inspect import diff_stores
from store.metafiles import write_checkpoint
from store.verify import MAX_PER_CODE, verify_store
from tests.support.stores import (Base, copy_fixture, fixture_path, make_base, parse_header, patch, read_logical,
                                  store_files, write_project_store)


# --- damage ---------------------------------------------------------------------------------------

def _mid_file_entry(b, nth_file=1, offset=1):
    start = [s for s, _ in store_files(b.node, "data")][nth_file]
    return b.first_in_file(start) + offset


def _flip_body(b, k):
    while len(b.raw[k]) == 48:
        k += 1
    p = b.pos(k) + 48
    patch(b.data_file(p), p % b.dsize, bytes([b.raw[k][48] ^ 0x10]))


def _field(b, k, off, value, width):
    p = b.pos(k)
    patch(b.data_file(p), p % b.dsize + off, value.to_bytes(width, "big", signed=True))


def _zero_tail_from(b, k):
    p = b.pos(k)
    patch(b.data_file(p), p % b.dsize, bytes(b.dsize - p % b.dsize))
    for s, path in store_files(b.node, "data"):
        if s > p:
            patch(path, 0, bytes(b.dsize))


def _stale_data_file(b):
    starts = [s for s, _ in store_files(b.node, "data")]
    with open(b.node / "data" / file_name(starts[-2]), "rb") as fh:
        (b.node / "data" / file_name(starts[-1] + b.dsize)).write_bytes(fh.read())


def _index_rec(b, j, rec_off, data):
    patch(b.index_file(j), j * 32 % b.isize + rec_off, data)


def _extra_index_record(b):
    patch(b.index_file(b.n), b.n * 32 % b.isize, read_logical(b.node, "index", 0, 32, b.isize))


def _stale_index_file(b):
    starts = [s for s, _ in store_files(b.node, "index")]
    (b.node / "index" / file_name(starts[-1] + b.isize)).write_bytes(
        read_logical(b.node, "index", starts[0], b.isize, b.isize))


def _bad_blank(b):
    starts = [s for s, _ in store_files(b.node, "data")]
    last_in = b.first_in_file(starts[2]) - 1
    at = b.pos(last_in) + len(b.raw[last_in])
    patch(b.data_file(at), at % b.dsize + 4, (1).to_bytes(4, "big"))


def _all_index_zeroed(b):
    for _s, path in store_files(b.node, "index"):
        patch(path, 0, bytes(os.path.getsize(path)))


def _many_bodies(b):
    for k in range(3, b.n - 1, 3):  # more than MAX_PER_CODE bad bodies
        if len(b.raw[k]) > 48:
            _flip_body(b, k)


def _remove_middle_data_file(b):
    os.unlink(store_files(b.node, "data")[2][1])


DAMAGE = {
    "clean": lambda b: None,
    "body-crc-middle": lambda b: _flip_body(b, _mid_file_entry(b, 1, 2)),
    "many-body-crcs": _many_bodies,
    "chain-of-a-files-first-entry": lambda b: _field(b, _mid_file_entry(b, 2, 0), 36, 0x1234, 4),
    "index-field-middle": lambda b: _field(b, _mid_file_entry(b, 1), 8, 12345, 8),
    "index-field-of-a-files-first-entry": lambda b: _field(b, _mid_file_entry(b, 2, 0), 8, 99999, 8),
    "term-back-middle": lambda b: _field(b, _mid_file_entry(b, 1), 16, 0, 8),
    "term-back-at-a-file-start": lambda b: _field(b, _mid_file_entry(b, 2, 0), 16, 0, 8),
    "pos-field": lambda b: _field(b, _mid_file_entry(b, 1), 24, 7, 8),
    "size-field": lambda b: _field(b, _mid_file_entry(b, 1), 4, 49, 4),
    "body-size-field": lambda b: _field(b, _mid_file_entry(b, 1), 44, 1, 4),
    "magic": lambda b: _field(b, _mid_file_entry(b, 2), 0, 77, 4),
    "torn-last-entry": lambda b: _zero_tail_from(b, b.n - 1) or patch(
        b.data_file(b.pos(b.n - 1)), b.pos(b.n - 1) % b.dsize, b.raw[-1][:20]),
    "last-file-truncated": lambda b: os.truncate(b.data_file(b.end_pos), b.pos(b.n - 2) % b.dsize + 30),
    "zeroed-tail": lambda b: _zero_tail_from(b, b.n - 5),
    "stale-entry-after-end": lambda b: patch(b.data_file(b.end_pos), b.end_pos % b.dsize, b.raw[3]),
    "junk-after-end": lambda b: patch(b.data_file(b.end_pos), b.end_pos % b.dsize + 16,
                                      random.Random(1).randbytes(99) + b"\x7f"),
    "plausible-next-header": lambda b: patch(b.data_file(b.end_pos), b.end_pos % b.dsize, encode_entry(
        b"q" * 10, index=b.n, term=parse_header(b.raw[-1])["term"], pos=b.end_pos)[:44] + (10 ** 6).to_bytes(4, "big")),
    "stale-data-file": _stale_data_file,
    "missing-data-file": _remove_middle_data_file,
    "index-record-zeroed": lambda b: _index_rec(b, b.n - 4, 0, bytes(32)),
    "index-record-wrong": lambda b: _index_rec(b, b.n - 3, 11, b"\x40"),
    "index-record-wrong-at-a-file-start": lambda b: _index_rec(b, _mid_file_entry(b, 2, 0), 11, b"\x40"),
    "all-index-zeroed": _all_index_zeroed,
    "extra-index-record": _extra_index_record,
    "stale-index-file": _stale_index_file,
    "bad-blank": _bad_blank,
    "checkpoint-past-end": lambda b: write_checkpoint(str(b.node), b.n + 10, b.n + 5),
    "stray-file": lambda b: (b.node / "data" / "notes.txt").write_text("operator notes"),
}
# Without checksums (the 0.2.7 store, 13 data files a copy) the cases where the store's
# own checks, not a CRC, find the damage; every case on the project store.
LEADER_CASES = ["clean", "index-field-of-a-files-first-entry", "term-back-at-a-file-start", "torn-last-entry",
                "missing-data-file"]
CASES = [("project", name) for name in DAMAGE] + [("leader", name) for name in LEADER_CASES]


def project_base(path) -> Base:
    """A store written by the project (checksums, 4-6 data files: Spark runs one task per
    file, so fewer files keep the test quick)."""
    node = path / "p" / "dledger-n0"
    raw = write_project_store(node, count=83, data_file_size=8192, index_file_size=512, committed=70)
    with FileStore.open(str(node), read_only=True) as s:
        end_pos = s.write_pos
    return Base(node, 8192, 512, raw, end_pos, 70, True)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """Every damage case on its own copy: {case id: node dir}."""
    root = tmp_path_factory.mktemp("damaged")
    out = {}
    for kind, name in CASES:
        b = project_base(root / f"{kind}-{name}") if kind == "project" else make_base(root / f"{kind}-{name}", kind)
        assert len(store_files(b.node, "data")) >= 4
        DAMAGE[name](b)
        out[f"{kind}-{name}"] = str(b.node)
    return out


def _verify_view(report):
    return report.summary(), [p.as_row() for p in report.problems], dict(report.suppressed)


def test_audit_reports_the_same_problems_as_store_verify(spark, damaged):
    nodes = resolve_nodes(list(damaged.values()))
    by_dir = {n.dir: n for n in nodes}
    reports = {node.dir: (report, scan) for node, report, scan in audit_job.audit_reports(spark, nodes)}
    assert len(reports) == len(damaged)
    damaged_verdicts = set()
    for case, node_dir in damaged.items():
        report, scan = reports[os.path.abspath(node_dir)]
        want = verify_store(node_dir)
        assert _verify_view(report) == _verify_view(want), case
        row = audit_job.audit_row(by_dir[os.path.abspath(node_dir)], report, scan)
        assert (row["verdict"], row["entries"], row["end_index"]) == (
            want.summary()["verdict"], want.entries, want.end_index), case
        if not want.ok:
            damaged_verdicts.add(case)
    # the cases do damage what they say: all but the clean ones (and a body flip without checksums)
    assert {c for c in damaged if c.endswith("-clean")} | damaged_verdicts == set(damaged)
    many = reports[os.path.abspath(damaged["project-many-body-crcs"])][0]
    assert many.suppressed.get("bad-body-crc", 0) > 0
    assert sum(p.code == "bad-body-crc" for p in many.problems) == MAX_PER_CODE


def test_audit_of_files_with_many_problems(spark, tmp_path):
    """More problems of one code in a file than verify lists: the reader sends the first
    few of each code one by one and counts the rest; the report is verify's."""
    made = []
    for name in ("bodies", "index", "both"):
        node = tmp_path / name / "dledger-n0"
        raw = write_project_store(node, count=200, data_file_size=65536, index_file_size=2048)
        if name in ("bodies", "both"):
            for k in range(1, 200, 2):
                p = parse_header(raw[k])["pos"]
                if len(raw[k]) > 48:
                    patch(node / "data" / file_name(p - p % 65536), p % 65536 + 48, bytes([raw[k][48] ^ 1]))
        if name in ("index", "both"):
            for _s, path in store_files(node, "index"):
                patch(path, 0, bytes(os.path.getsize(path)))
        made.append(str(node))
    for node, report, _scan in audit_job.audit_reports(spark, resolve_nodes(made)):
        want = verify_store(node.dir)
        assert sum(want.suppressed.values()) > 0
        assert _verify_view(report) == _verify_view(want), node.name
    rows = spark.read.format("dledger").option("records", "runs").load(made[2]).collect()
    assert {r["kind"] for r in rows} >= {"entry", "problems", "stop"} and len(rows) < 150


def test_audit_rows_of_clean_stores(spark, tmp_path):
    node = tmp_path / "g" / "dledger-n0"
    write_project_store(node, count=90, data_file_size=4096, index_file_size=512)
    df = audit_job.audit(spark, [str(node), fixture_path("leader")])
    rows = {r["node"]: r.asDict(recursive=True) for r in df.collect()}
    assert set(rows) == {"g/dledger-n0", "leader/dledger-n0"}
    p, f = rows["g/dledger-n0"], rows["leader/dledger-n0"]
    assert (p["verdict"], p["entries"], p["begin_index"], p["end_index"], p["crc_checked"], p["crc_absent"]) == (
        "ok", 90, 0, 89, 90, 0)
    assert (p["first_term"], p["end_term"], p["terms"], p["crc_failures"], p["problems"]) == (1, 3, 3, 0, [])
    assert (f["verdict"], f["entries"], f["bytes"], f["end_term"], f["crc_absent"]) == ("ok", 600, 811129, 6, 600)
    assert f["data_files"] == 13 and f["errors"] == 0


# --- diverge ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    """A group of five replicas of one log: n0 (reference), n1 identical, n2 diverging at a
    known index, n3 a shorter copy, n4 a copy whose head files were deleted; and two 0.2.7
    copies whose bodies differ at one entry."""
    root = tmp_path_factory.mktemp("replicas")
    group = root / "group"
    n0 = group / "dledger-n0"
    write_project_store(n0, count=150, data_file_size=16384, index_file_size=1024)
    shutil.copytree(n0, group / "dledger-n1")
    shutil.copytree(n0, group / "dledger-n2")
    shutil.copytree(n0, group / "dledger-n3")
    with FileStore.open(str(group / "dledger-n2")) as s:
        s.truncate(97, force=True)
        s.append_leader([b"other-%d" % i for i in range(20)], term=3)
    with FileStore.open(str(group / "dledger-n3")) as s:
        s.truncate(140, force=True)
    shutil.copytree(n0, group / "dledger-n4")
    with FileStore.open(str(group / "dledger-n4")) as s:  # its head files deleted: it begins past 0
        s.delete_head(3)
        assert s.begin_index > 0
    old = root / "old"
    a = copy_fixture(old / "a", "leader")
    b = copy_fixture(old / "b", "leader")
    with FileStore.open(str(a), read_only=True) as s:
        e = next(s.get(i) for i in range(300, 600) if len(s.get(i).body) > 4)
    p = e.pos + 48
    patch(b / "data" / file_name(p - p % 65536), p % 65536, bytes([e.body[0] ^ 0xFF]))  # same size, other body
    return group, a, b, e.index


def test_diverge_finds_the_index_store_diff_finds(spark, replicas):
    group, a, b, body_index = replicas
    rows = jobs.diverge(spark, [str(group)]).collect()
    got = {(r["a"], r["b"]): r.asDict() for r in rows}
    assert len(got) == 10  # every pair of the five replicas
    fields = ["compared_from", "compared_to", "last_common_index", "first_diff_index", "field", "a_term", "b_term", "a_size", "b_size",
              "a_body_crc", "b_body_crc", "a_chain_crc", "b_chain_crc", "identical"]
    for (x, y), row in got.items():
        want = diff_stores(str(group / x), str(group / y))
        assert {f: row[f] for f in fields} == {f: want[f] for f in fields}, (x, y)
        assert (row["a_begin"], row["a_end"], row["b_begin"], row["b_end"]) == (
            want["a_begin"], want["a_end"], want["b_begin"], want["b_end"])
    assert got[("dledger-n0", "dledger-n1")]["identical"] is True
    assert (got[("dledger-n0", "dledger-n2")]["first_diff_index"], got[("dledger-n0", "dledger-n2")]["last_common_index"]) == (97, 96)
    assert got[("dledger-n0", "dledger-n3")]["field"] == "missing-on-b"
    late = got[("dledger-n0", "dledger-n4")]  # the overlap is compared, and it is equal
    assert late["identical"] is True and late["compared_from"] == late["b_begin"] > 0 == late["a_begin"]
    # audit and stats read a log that begins past 0 as verify and the store do
    n4 = str(group / "dledger-n4")
    (row,) = audit_job.audit(spark, [n4]).collect()
    want = verify_store(n4)
    assert (row["verdict"], row["entries"], row["begin_index"], row["end_index"]) == (
        "ok", want.entries, late["b_begin"], 149) and want.ok
    per_term = jobs.stats(spark, [n4]).collect()
    assert min(r["first_index"] for r in per_term) == late["b_begin"]
    assert sum(r["entries"] for r in per_term) == 150 - late["b_begin"]
    # without checksums (DLedger 0.2.7), a body that differs at equal size is found too
    (row,) = jobs.diverge(spark, [str(a), str(b)], all_pairs=True).collect()
    want = diff_stores(str(a), str(b))
    assert (row["first_diff_index"], row["field"]) == (want["first_diff_index"], want["field"]) == (body_index, "body")


def test_diverge_needs_replicas(spark, replicas):
    from dledgerctl.pipeline.errors import PipelineUsageError

    _group, a, b, _ = replicas
    with pytest.raises(PipelineUsageError, match="nothing to compare"):
        jobs.diverge(spark, [str(a), str(b)])  # two groups of one


# --- stats and export ---------------------------------------------------------------------------------

def test_stats_per_term_equal_the_store(spark, tmp_path):
    node = tmp_path / "dledger-s"
    write_project_store(node, count=100, terms=(1, 2, 2, 5), noop_at=50, data_file_size=4096, index_file_size=512)
    rows = [r.asDict() for r in jobs.stats(spark, [str(node), fixture_path("follower-truncated")]).collect()]
    with FileStore.open(str(node), read_only=True) as s:
        ents = list(s.entries())
    want = {}
    for e in ents:
        w = want.setdefault(e.term, {"entries": 0, "bytes": 0, "first_index": e.index, "last_index": e.index,
                                     "first_pos": e.pos, "noops": 0})
        w["entries"] += 1
        w["bytes"] += e.size
        w["last_index"] = e.index
        w["noops"] += e.magic == 2
    assert {r["term"]: {k: r[k] for k in want[1]} for r in rows if r["node"] == "dledger-s"} == want
    assert [r["node"] for r in rows] == sorted(r["node"] for r in rows)
    follower = [(r["term"], r["first_index"], r["last_index"]) for r in rows if r["node"] == "dledger-n1"]
    assert follower[-1][0] == 3 and follower[-1][2] == 290


@pytest.mark.parametrize("committed_only", [False, True])
def test_export_reads_back_as_the_store(spark, tmp_path, committed_only):
    node = tmp_path / "base" / "dledger-x"
    write_project_store(node, count=70, data_file_size=4096, index_file_size=512, committed=60)
    ref = copy_fixture(tmp_path, "follower-truncated")
    out = tmp_path / "export"
    summary = {r["node"]: r.asDict() for r in
               jobs.export(spark, [str(node), str(ref)], str(out), committed_only=committed_only).collect()}
    table = pq.read_table(out)
    got = {}
    for r in table.to_pylist():
        got.setdefault(r["node"], []).append(r)
    for name, path, committed in (("dledger-x", node, 60), ("dledger-n1", ref, 287)):
        with FileStore.open(str(path), read_only=True) as s:
            want = [(e.index, e.term, e.pos, e.size, e.body) for e in s.entries()
                    if not committed_only or e.index <= committed]
            assert s.committed_index == committed
        rows = sorted(got[name], key=lambda r: r["index"])
        assert [(r["index"], r["term"], r["pos"], r["size"], r["body"]) for r in rows] == want
        assert (summary[name]["entries"], summary[name]["last_index"]) == (len(want), want[-1][0])
        assert summary[name]["committed_index"] == (committed if committed_only else None)
    assert sorted(n for n in os.listdir(out) if n.startswith("node=")) == ["node=dledger-n1", "node=dledger-x"]
    from dledgerctl.pipeline.errors import PipelineUsageError

    with pytest.raises(PipelineUsageError, match="already exists"):
        jobs.export(spark, [str(node)], str(out))
