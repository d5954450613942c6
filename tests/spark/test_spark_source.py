"""The ``dledger`` PySpark data source on a real local Spark session (the ``spark`` fixture)
over real files: the DLedger 0.2.7 reference stores, stores written by the project, and
damaged copies."""

from __future__ import annotations

import hashlib
import os
import shutil

import pyarrow as pa
import pytest

from tests.support.stores import (FIXTURE_NAMES, all_digests, copy_fixture, fixture_path, parse_header, patch, read_manifest,
                      store_files, write_project_store)
from dledgerctl.pipeline.batches import read_file
from dledgerctl.pipeline.inputs import resolve_nodes, unique_names
from dledgerctl.pipeline.options import FilePart, ReadOptions
from store.filestore import FileStore
from store.format import file_name
from store.reading import open_lists
from store.scan import FileScan


def entries(df):
    return sorted((r.asDict() for r in df.collect()), key=lambda r: (r["node"], r["pos"]))


def manifest_rows(rows):
    return [f"{r['index']} {r['term']} {r['pos']} {r['size']} {hashlib.sha256(r['body']).hexdigest()}" for r in rows]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_reference_stores_read_exactly_as_their_manifest(spark, name):
    df = spark.read.format("dledger").option("body", "true").load(fixture_path(name))
    rows = entries(df)
    assert manifest_rows(rows) == read_manifest(name)[1:]
    assert df.rdd.getNumPartitions() == len(store_files(fixture_path(name), "data"))
    assert {r["node"] for r in rows} == {os.path.basename(fixture_path(name))}
    assert {(r["status"], r["crc_ok"], r["index_record"], r["magic"]) for r in rows} == {("no-crc", None, "ok", 1)}
    assert [r["file"] for r in rows] == [f"data/{file_name(r['pos'] - r['pos'] % os.path.getsize(os.path.join(fixture_path(name), 'data', file_name(0))))}" for r in rows]


def test_both_reference_stores_at_once_one_partition_per_data_file(spark):
    paths = [fixture_path(n) for n in FIXTURE_NAMES]
    df = spark.read.format("dledger").load(paths)
    assert df.rdd.getNumPartitions() == sum(len(store_files(p, "data")) for p in paths)
    assert "body" not in df.columns
    counts = {r["node"]: r["count"] for r in df.groupBy("node").count().collect()}
    assert counts == {os.path.basename(fixture_path(n)): len(read_manifest(n)) - 1 for n in FIXTURE_NAMES}


def test_paths_base_directories_and_globs(tmp_path):
    for group in ("g1", "g2"):
        for n in ("n0", "n1"):
            os.makedirs(tmp_path / group / f"dledger-{n}" / "data")
    nodes = resolve_nodes([str(tmp_path / "g1"), str(tmp_path / "g*" / "dledger-n1")])
    assert [n.name for n in nodes] == ["dledger-n0", "g1/dledger-n1", "g2/dledger-n1"]
    assert [n.group for n in nodes] == [str(tmp_path / "g1")] * 2 + [str(tmp_path / "g2")]
    assert [n.name for n in resolve_nodes([str(tmp_path / "g1" / "dledger-n0")])] == ["dledger-n0"]
    assert unique_names(["/a/x/n", "/b/x/n", "/c/m"]) == ["a/x/n", "b/x/n", "m"]
    from store.errors import NotAStoreError

    for bad, why in ((tmp_path / "nope", "no such directory"), (tmp_path / "zz*", "matches nothing"),
                     (tmp_path, "holds no dledger-<id>")):
        with pytest.raises(NotAStoreError, match=why):
            resolve_nodes([str(bad)])


@pytest.fixture
def project(tmp_path):
    node = tmp_path / "base" / "dledger-n0"
    raw = write_project_store(node, count=120, data_file_size=4096, index_file_size=512, committed=100)
    return node, raw


def test_project_store_columns_and_bodies(spark, project):
    node, raw = project
    rows = entries(spark.read.format("dledger").option("body", True).option("digest", True).load(str(node)))
    assert len(rows) == len(raw)
    for r, b in zip(rows, raw):
        h = parse_header(b)
        assert (r["index"], r["term"], r["pos"], r["size"], r["magic"], r["body_crc"], r["chain_crc"]) == (
            h["index"], h["term"], h["pos"], h["size"], h["magic"], h["body_crc"], h["chain_crc"])
        assert r["body"] == b[48:]
        assert r["crc_ok"] is True and r["status"] == "ok" and r["index_record"] == "ok"
        assert r["body_digest"] & 0x7FFFFFFF == r["body_crc"]


def test_the_reader_yields_arrow_batches_matching_sparks_schema(spark, project):
    node, raw = project
    from pyspark.sql.pandas.types import to_arrow_schema

    for opts in (ReadOptions(), ReadOptions(body=True, records="all", digest=True, check_crc=False)):
        df = spark.read.format("dledger").options(body=opts.body, records=opts.records, digest=opts.digest).load(str(node))
        assert to_arrow_schema(df.schema).equals(opts.arrow_schema())
        data, index = open_lists(str(node))
        batches = [b for f in data.files
                   for b in read_file(FilePart("n0", str(node), f.start, data.file_size, index.file_size), opts)]
        assert batches and all(isinstance(b, pa.RecordBatch) for b in batches)
        assert sum(b.num_rows for b in batches) == len(raw) + (len(data.files) if opts.records == "all" else 0)


def test_batches_are_bounded_by_rows_and_body_bytes(project):
    node, raw = project
    data, index = open_lists(str(node))
    f = data.files[0]
    part = FilePart("n0", str(node), f.start, data.file_size, index.file_size)
    per_file = sum(1 for b in raw if parse_header(b)["pos"] < f.start + data.file_size)
    small = list(read_file(part, ReadOptions(batch_rows=2)))
    assert all(b.num_rows <= 2 for b in small) and sum(b.num_rows for b in small) == per_file
    tiny = list(read_file(part, ReadOptions(body=True, batch_bytes=600)))
    assert all(b.num_rows == 1 or b.column("body").nbytes <= 600 for b in tiny)
    assert sum(b.num_rows for b in tiny) == per_file and len(tiny) > 2


def test_reading_changes_nothing_on_a_damaged_store(spark, project):
    node, raw = project
    k = 60
    p = parse_header(raw[k])["pos"]
    patch(node / "data" / file_name(p - p % 4096), p % 4096 + 48, bytes([raw[k][48] ^ 1]))  # a body byte
    before = all_digests(node)
    stamps = {f: os.stat(os.path.join(node, f)).st_mtime_ns for f in before}
    rows = entries(spark.read.format("dledger").option("records", "all").load(str(node)))
    assert all_digests(node) == before
    assert {f: os.stat(os.path.join(node, f)).st_mtime_ns for f in before} == stamps
    bad = [r for r in rows if r["kind"] == "entry" and r["status"] != "ok"]
    assert [(r["index"], r["status"], r["crc_ok"]) for r in bad] == [(k, "bad-body-crc", False)]
    # entries after the damage are still read (as recovery keeps them too, holding the damaged one)
    assert len([r for r in rows if r["kind"] == "entry"]) == len(raw)
    stops = [r for r in rows if r["kind"] == "stop"]
    assert len(stops) == len(store_files(node, "data"))
    assert {r["status"] for r in stops[:-1]} == {"blank"} and stops[-1]["status"] == "end"
    assert all(r["pos"] + r["size"] == (r["pos"] // 4096 + 1) * 4096 for r in stops[:-1])


def test_statuses_equal_a_sequential_walk_of_the_decoder(spark, project):
    """Damage at a file boundary: the first entry of a file is judged against the previous
    file's last entry, as one sequential walk of the per-entry lane judges it."""
    node, raw = project
    starts = [s for s, _ in store_files(node, "data")]
    first_of = [next(i for i, b in enumerate(raw) if parse_header(b)["pos"] >= s) for s in starts[1:4]]
    # chainCrc of a file's first entry; term going back at the next boundary; a bad index record
    patch(node / "data" / file_name(starts[1]), 36, b"\x12\x34\x56\x78")
    patch(node / "data" / file_name(starts[2]), 16, (0).to_bytes(8, "big"))
    patch(node / "index" / file_name(first_of[2] * 32 - first_of[2] * 32 % 512), first_of[2] * 32 % 512 + 4, b"\x7f")
    rows = [r for r in entries(spark.read.format("dledger").load(str(node)))]
    with FileStore.open(str(node), read_only=True) as s:
        data, fsize = s.data, s.data.file_size
        walk, prev = [], (None, None, None)
        for f in data.files:
            scan = FileScan(f.view(), f.start, file_size=fsize, prev_index=prev[0], prev_term=prev[1], prev_chain=prev[2])
            walk += [(e.index, e.status) for e in scan]
            prev = (scan.prev_index, scan.prev_term, scan.prev_chain)
    assert [(r["index"], r["status"]) for r in rows] == walk
    got = {r["index"]: (r["status"], r["crc_ok"], r["index_record"]) for r in rows}
    assert got[first_of[0]] == ("bad-chain-crc", False, "ok")
    assert got[first_of[1]][0] == "term-back"
    assert got[first_of[2]][2] == "mismatch"


def test_empty_node_and_bad_options(spark, tmp_path):
    os.makedirs(tmp_path / "dledger-e" / "data")
    assert spark.read.format("dledger").load(str(tmp_path / "dledger-e")).count() == 0
    with pytest.raises(Exception, match="records"):
        spark.read.format("dledger").option("records", "some").load(str(tmp_path / "dledger-e")).count()
    with pytest.raises(Exception, match="no such directory"):
        spark.read.format("dledger").load(str(tmp_path / "missing")).count()


def test_copy_of_a_reference_store_with_a_glob(spark, tmp_path):
    a = copy_fixture(tmp_path / "x", "leader")
    b = copy_fixture(tmp_path / "y", "leader")
    df = spark.read.format("dledger").load(str(tmp_path / "*" / "leader" / "dledger-*"))
    counts = {r["node"]: r["count"] for r in df.groupBy("node").count().collect()}
    assert counts == {"x/leader/dledger-n0": 600, "y/leader/dledger-n0": 600}
    assert os.path.isdir(a) and os.path.isdir(b)
    shutil.rmtree(tmp_path / "x")


def test_the_runs_shape_sums_to_the_entries(spark, project):
    """records=runs: healthy stretches of one term as one row each, every other entry as
    its own row; per (file, term) it adds up to the entries, and it is a handful of rows."""
    node, raw = project
    k = 70
    p = parse_header(raw[k])["pos"]
    patch(node / "data" / file_name(p - p % 4096), p % 4096 + 48, bytes([raw[k][48] ^ 1]))
    from pyspark.sql import functions as F

    ents = (spark.read.format("dledger").load(str(node)).groupBy("file", "term")
            .agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("b"), F.min("index").alias("lo"),
                 F.max("index").alias("hi"), F.sum((F.col("status") == "ok").cast("long")).alias("ok")))
    runs_df = spark.read.format("dledger").option("records", "runs").load(str(node))
    rows = [r.asDict() for r in runs_df.collect()]
    runs = (runs_df.filter("kind != 'stop'").groupBy("file", "term")
            .agg(F.sum("entries").alias("n"), F.sum("bytes").alias("b"), F.min("index").alias("lo"),
                 F.max("last_index").alias("hi"), F.sum("crc_checked").alias("ok")))
    assert sorted(map(tuple, ents.collect())) == sorted(map(tuple, runs.collect()))
    bad = [r for r in rows if r["kind"] == "entry" and r["status"] != "ok"]
    assert [(r["index"], r["status"], r["index_record"], r["entries"]) for r in bad] == [(k, "bad-body-crc", "ok", 1)]
    assert sum(r["kind"] == "stop" for r in rows) == len(store_files(node, "data"))
    assert len(rows) < len(raw) / 2
    with pytest.raises(Exception, match="no bodies"):
        spark.read.format("dledger").option("records", "runs").option("body", "true").load(str(node)).count()
