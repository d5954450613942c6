"""Jobs over the ``dledger`` source: each a function of a session and PATHS that returns a
DataFrame (``audit`` lives in :mod:`dledgerctl.pipeline.audit`).

- :func:`stats`: entries and bytes per term per node, first/last index of each term (the
  leader history: one term, one leader), no-op entries (a new leader's first entry).
- :func:`diverge`: for each pair of replicas of one group, the last common index and the
  first index where they differ, both sides' term and checksums (``store diff``'s fields).
- :func:`export`: entries with bodies to Parquet, partitioned by node, optionally only up
  to each node's committed index; returns what was written per node.

Row field names are stable and documented in man/dledgerctl-spark.1.
"""

from __future__ import annotations

import itertools
import os
import urllib.parse
from typing import Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from store.metafiles import read_checkpoint

from .errors import PipelineUsageError
from .inputs import Node, resolve_nodes
from .options import KIND_STOP, RECORDS_RUNS
from .source import SOURCE_NAME


def read_entries(spark: SparkSession, nodes: Iterable[Node], **options) -> DataFrame:
    """The ``dledger`` source over these nodes; options as the source takes them
    (``body=True``, ``records="all"``, ``digest=True``, ``checkCrc=False``, ...)."""
    reader = spark.read.format(SOURCE_NAME)
    for key, value in options.items():
        if value is None:
            continue
        reader = reader.option(key, str(value).lower() if isinstance(value, bool) else str(value))
    return reader.load([n.dir for n in nodes])


def _nodes(paths) -> list[Node]:
    return paths if paths and all(isinstance(p, Node) for p in paths) else resolve_nodes(paths)


def dledger_nodes(paths, job: str) -> list[Node]:
    """The nodes of PATHS for a job that reads DLedger entries (terms, chain checksums, the
    index file): PipelineUsageError naming a master-slave store among them."""
    nodes = _nodes(paths)
    for n in nodes:
        if n.commit_log:
            raise PipelineUsageError(f"{n.dir}: a master-slave broker store (commitlog/, no DLedger log): spark {job} "
                                     "reads DLedger logs; spark mq-topics, mq-find and mq-export read both")
    return nodes


# --- stats ----------------------------------------------------------------------------------

STATS_COLUMNS = ["node", "term", "entries", "bytes", "first_index", "last_index", "first_pos", "noops"]


def stats(spark: SparkSession, paths) -> DataFrame:
    """One row per (node, term), ordered by node then term. Reads the source's ``runs``
    shape: a healthy stretch of one term is one row, already counted by the reader."""
    df = read_entries(spark, dledger_nodes(paths, "stats"), records=RECORDS_RUNS, checkCrc=False)
    return (df.filter(F.col("kind") != KIND_STOP).groupBy("node", "term")
            .agg(F.sum("entries").alias("entries"), F.sum("bytes").alias("bytes"),
                 F.min("index").alias("first_index"), F.max("last_index").alias("last_index"),
                 F.min("pos").alias("first_pos"), F.sum("noops").alias("noops"))
            .orderBy("node", "term")
            .select(*STATS_COLUMNS))


# --- diverge --------------------------------------------------------------------------------

# Compared in this order; the first that differs names the difference (as store diff does).
DIFF_FIELDS = [("term", "term"), ("size", "size"), ("pos", "pos"), ("body_crc", "body_crc"),
               ("body_digest", "body"), ("chain_crc", "chain_crc"), ("magic", "magic")]
_FP = ["index"] + [c for c, _ in DIFF_FIELDS]

DIVERGE_SCHEMA = StructType([
    StructField("group", StringType()), StructField("a", StringType()), StructField("b", StringType()),
    *[StructField(f, LongType()) for f in ("a_begin", "a_end", "b_begin", "b_end", "compared_from", "compared_to",
                                           "last_common_index", "first_diff_index")],
    StructField("field", StringType()),
    *[StructField(f, LongType()) for f in ("a_term", "b_term", "a_size", "b_size", "a_body_crc", "b_body_crc",
                                           "a_chain_crc", "b_chain_crc")],
    StructField("identical", BooleanType()),
])


def replica_pairs(nodes: list[Node], all_pairs: bool = False) -> list[tuple[Node, Node]]:
    """Pairs of replicas: nodes under one base directory, or every pair with ``all_pairs``."""
    if all_pairs:
        return list(itertools.combinations(nodes, 2))
    pairs = []
    for _group, members in itertools.groupby(sorted(nodes, key=lambda n: (n.group, n.dir)), key=lambda n: n.group):
        pairs.extend(itertools.combinations(list(members), 2))
    return pairs


def diverge(spark: SparkSession, paths, *, all_pairs: bool = False) -> DataFrame:
    """One row per pair of replicas (see the module docstring)."""
    nodes = dledger_nodes(paths, "diverge")
    pairs = replica_pairs(nodes, all_pairs)
    if not pairs:
        raise PipelineUsageError("nothing to compare: give two or more node directories of one group (one base "
                                 "directory), or use --all-pairs")
    involved = [n for n in nodes if any(n in p for p in pairs)]
    fp = read_entries(spark, involved, digest=True, checkCrc=False).select("node", *_FP).persist()
    try:
        return spark.createDataFrame(_diverge_rows(spark, fp, pairs), DIVERGE_SCHEMA)
    finally:
        fp.unpersist()


def _diverge_rows(spark, fp: DataFrame, pairs) -> list[dict]:
    ranges = {r["node"]: (r["begin"], r["end"]) for r in
              fp.groupBy("node").agg(F.min("index").alias("begin"), F.max("index").alias("end")).collect()}
    results, compare = [], []
    for pid, (a, b) in enumerate(pairs):
        ab, ae = ranges.get(a.name, (-1, -1))
        bb, be = ranges.get(b.name, (-1, -1))
        row = {"group": a.group if a.group == b.group else None, "a": a.name, "b": b.name,
               "a_begin": ab, "a_end": ae, "b_begin": bb, "b_end": be, "last_common_index": None,
               "first_diff_index": None, "field": None, "identical": False,
               **{f"{s}_{c}": None for s in ("a", "b") for c in ("term", "size", "body_crc", "chain_crc")}}
        results.append(row)
        lo, hi = max(ab, bb), min(ae, be)
        # what both hold is what is compared (store diff's compared_from/compared_to)
        row["compared_from"], row["compared_to"] = (lo, hi) if 0 <= lo <= hi else (None, None)
        if ae < 0 and be < 0:
            row["identical"] = True  # two empty logs
        elif ae < 0 or be < 0 or lo > hi:
            row["first_diff_index"] = lo if ae >= 0 and be >= 0 else max(ab, bb, 0)
        else:
            compare.append((pid, a.name, b.name, lo, hi))
    firsts = _first_differences(spark, fp, compare)
    for pid, a, b, lo, hi in compare:
        row = results[pid]
        d = firsts.get(pid)
        if d is not None:
            row["first_diff_index"] = d["index"]
            row["field"] = _field(d)
            _fill(row, d)
        elif row["a_end"] == row["b_end"]:
            row.update(last_common_index=hi, identical=True)
            continue
        else:
            row["first_diff_index"] = hi + 1
            row["field"] = "missing-on-" + ("a" if row["a_end"] < row["b_end"] else "b")
        row["last_common_index"] = row["first_diff_index"] - 1 if row["first_diff_index"] > lo else None
    # sides not filled from the comparison: look the entries up
    wanted = [(pid, r) for pid, r in enumerate(results) if r["first_diff_index"] is not None and r["a_term"] is None
              and r["b_term"] is None]
    if wanted:
        keys = {(r[s], r["first_diff_index"]) for _pid, r in wanted for s in ("a", "b")}
        cond = None
        for node, index in keys:
            c = (F.col("node") == node) & (F.col("index") == index)
            cond = c if cond is None else cond | c
        found = {(x["node"], x["index"]): x for x in fp.filter(cond).collect()}
        for _pid, r in wanted:
            for s in ("a", "b"):
                e = found.get((r[s], r["first_diff_index"]))
                if e is not None:
                    r.update({f"{s}_term": e["term"], f"{s}_size": e["size"], f"{s}_body_crc": e["body_crc"],
                              f"{s}_chain_crc": e["chain_crc"]})
            if r["field"] is None:
                r["field"] = "missing-on-" + ("a" if r["a_term"] is None else "b")
    return results


def _first_differences(spark, fp: DataFrame, compare) -> dict[int, dict]:
    """pair id -> both sides at the first index in [lo, hi] where they differ (a side is
    None where that replica has no entry with the index)."""
    if not compare:
        return {}
    pairs = spark.createDataFrame([(pid, a, b, lo, hi) for pid, a, b, lo, hi in compare],
                                  "pid int, a string, b string, lo long, hi long")

    def side(name: str) -> DataFrame:
        p = F.broadcast(pairs.select("pid", F.col(name).alias("node"), "lo", "hi"))
        return (fp.join(p, "node").filter(F.col("index").between(F.col("lo"), F.col("hi")))
                .select("pid", "index", *[F.col(c).alias(f"{name}_{c}") for c in _FP[1:]], F.lit(True).alias(f"{name}_has")))

    joined = side("a").join(side("b"), ["pid", "index"], "full_outer")
    differs = F.col("a_has").isNull() | F.col("b_has").isNull()
    for c, _ in DIFF_FIELDS:
        differs = differs | ~F.col(f"a_{c}").eqNullSafe(F.col(f"b_{c}"))
    cols = [c for c in joined.columns if c != "pid"]
    firsts = (joined.filter(differs).groupBy("pid")
              .agg(F.min_by(F.struct(*cols), "index").alias("d")).collect())
    return {r["pid"]: r["d"].asDict() for r in firsts}


def _field(d: dict) -> str:
    if d.get("a_has") is None:
        return "missing-on-a"
    if d.get("b_has") is None:
        return "missing-on-b"
    for c, name in DIFF_FIELDS:
        if d[f"a_{c}"] != d[f"b_{c}"]:
            return name
    return "unknown"


def _fill(row: dict, d: dict) -> None:
    for s in ("a", "b"):
        if d.get(f"{s}_has"):
            row.update({f"{s}_term": d[f"{s}_term"], f"{s}_size": d[f"{s}_size"],
                        f"{s}_body_crc": d[f"{s}_body_crc"], f"{s}_chain_crc": d[f"{s}_chain_crc"]})


# --- export ---------------------------------------------------------------------------------

EXPORT_COLUMNS = ["node", "index", "term", "pos", "magic", "size", "body_crc", "chain_crc", "crc_ok", "status",
                  "file", "body"]
EXPORT_SUMMARY_SCHEMA = StructType([
    StructField("node", StringType()), StructField("node_dir", StringType()),
    StructField("entries", LongType()), StructField("bytes", LongType()),
    StructField("first_index", LongType()), StructField("last_index", LongType()),
    StructField("committed_index", LongType()), StructField("path", StringType()),
])


def committed_index(node_dir: str) -> int:
    """The committed index the node's checkpoint records (-1 when there is none)."""
    cp = read_checkpoint(node_dir)
    return cp.committed_index if cp.committed_index is not None else -1


def export(spark: SparkSession, paths, to: str, *, committed_only: bool = False) -> DataFrame:
    """Write the entries of every node to Parquet under ``to``/node=NAME/; one summary row
    per node (entries, bytes, index range written, committed index used)."""
    nodes = dledger_nodes(paths, "export")
    check_output(to)
    return write_by_node(spark, nodes, read_entries(spark, nodes, body=True), to, EXPORT_COLUMNS, "size",
                         committed_only=committed_only)


def check_output(to: str) -> None:
    if "://" not in to and os.path.exists(to) and (not os.path.isdir(to) or os.listdir(to)):
        raise PipelineUsageError(f"{to} already exists and is not an empty directory")


def write_by_node(spark: SparkSession, nodes: list[Node], df: DataFrame, to: str, columns: list[str], bytes_col: str,
                  *, committed_only: bool = False) -> DataFrame:
    """Write ``columns`` of ``df`` (rows of ``nodes``) to Parquet under ``to``/node=NAME/,
    only up to each node's committed index with ``committed_only`` (a master-slave store has
    none: every message of its log is written); one summary row per node (rows and the sum
    of ``bytes_col`` written, index range, committed index used)."""
    committed = {n.name: committed_index(n.dir) for n in nodes if not n.commit_log} if committed_only else {}
    if committed:
        limits = spark.createDataFrame(list(committed.items()), "node string, committed_index long")
        df = (df.join(F.broadcast(limits), "node", "left")
              .filter(F.col("committed_index").isNull() | (F.col("index") <= F.col("committed_index"))))
    writer = df.select(*columns).write.partitionBy("node")
    writer.mode("overwrite" if "://" not in to and os.path.isdir(to) else "errorifexists").parquet(to)
    written = {r["node"]: r for r in spark.read.parquet(to).groupBy("node").agg(
        F.count(F.lit(1)).alias("entries"), F.sum(bytes_col).alias("bytes"), F.min("index").alias("first_index"),
        F.max("index").alias("last_index"), F.min("_metadata.file_path").alias("file")).collect()}
    rows = []
    for n in nodes:
        w = written.get(n.name)
        rows.append({"node": n.name, "node_dir": n.dir, "entries": w["entries"] if w else 0,
                     "bytes": w["bytes"] if w else 0, "first_index": w["first_index"] if w else None,
                     "last_index": w["last_index"] if w else None,
                     "committed_index": committed.get(n.name) if committed_only else None,
                     "path": written_dir(w["file"], to) if w else None})
    return spark.createDataFrame(rows, EXPORT_SUMMARY_SCHEMA)


def written_dir(file_uri: str, to: str) -> str:
    """The directory that holds a file Spark wrote, from the file's URI as Spark reports it.

    It is ``to``/node=NAME only when NAME needs no escaping: Spark escapes characters of a
    partition value ('/', ':', '=', '%', ...) in its directory name
    (``node=a%2Fstore%2Fdledger-n0`` for node ``a/store/dledger-n0``), and the URI escapes
    that name once more (``%252F``).
    A local path for a local ``to``; a URI (hdfs://, s3a://) for a URI."""
    parts = urllib.parse.urlsplit(file_uri)
    directory = os.path.dirname(urllib.parse.unquote(parts.path))
    if "://" in to:
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, directory, "", ""))
    return directory
