"""``spark audit``: ``store verify`` for many nodes, with the walk over the data files done
by Spark, one task per data file.

How it stays the same check as ``store verify``:

1. One Spark stage reads every data file through the ``dledger`` source in its ``runs``
   shape (``records=runs``): a row per stretch of healthy entries of one term, as the
   decoder's run lane summarises them for store verify; a row per problem entry (bad
   status or index record) for the first ``MAX_PER_CODE + 1`` of each code in a file, one
   row counting the rest; a row per file saying where and why its entries end. That is a
   few dozen rows a file however large or damaged, and they come back to the driver as
   they are (no shuffle).
2. The driver then runs :func:`store.verify.verify_store` on each node with a ``walk`` that
   replays those results in log order instead of reading the data again. File names and
   sizes, stale bytes after the end, extra index records, checkpoint and currterm are
   verify's own checks; the report, the per-code limits and the verdict are verify's.
3. Spark's tasks read each file on its own, so the first entry of a file was judged
   against the predecessor the index points to (:func:`~.batches.file_predecessor`).
   verify judges it against whatever its sequential walk ended the previous file with.
   Where the two predecessors differ (only around damage), the replay re-judges that one
   entry with the store's decoder and corrects counts and problems.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from store.format import decode_index, INDEX_UNIT_SIZE
from store.scan import CLEAN_STOPS, HEALTHY, NO_CRC, OK, STOP_END, FileScan
from store.verify import ERROR, MAX_PER_CODE, STATUS_MESSAGES, VerifyReport, verify_store

from .batches import UNKNOWN, file_predecessor
from .inputs import Node
from .jobs import dledger_nodes, read_entries
from .options import (IDX_EMPTY, IDX_MISSING, IDX_OK, INDEX_PROBLEM_CODES, KIND_ENTRY, KIND_PROBLEMS, KIND_STOP,
                      RECORDS_RUNS)

PROBLEM_SCHEMA = StructType([
    StructField("severity", StringType()), StructField("code", StringType()), StructField("file", StringType()),
    StructField("offset", LongType()), StructField("index", LongType()), StructField("message", StringType()),
])
AUDIT_COUNTS = ["data_files", "index_files", "entries", "bytes", "begin_index", "end_index", "first_term", "end_term",
                "terms", "crc_checked", "crc_absent", "crc_failures", "index_gaps", "term_back",
                "index_disagreements", "unreadable", "errors", "warnings"]
AUDIT_SCHEMA = StructType([
    StructField("node", StringType()), StructField("node_dir", StringType()), StructField("verdict", StringType()),
    *[StructField(c, LongType()) for c in AUDIT_COUNTS],
    StructField("problems", ArrayType(PROBLEM_SCHEMA)),
])
INDEX_CODES = INDEX_PROBLEM_CODES


@dataclass
class _FileResult:
    """What Spark found in one data file."""

    entries: int = 0
    bytes: int = 0
    ok: int = 0
    nocrc: int = 0
    first: tuple | None = None  # (pos, index, term) of the first entry
    last: tuple | None = None  # (end pos, index, term, chainCrc) of the last entry
    stop: tuple | None = None  # (reason, logical offset, detail)

    def see_first(self, pos, index, term) -> None:
        if pos is not None and (self.first is None or pos < self.first[0]):
            self.first = (pos, index, term)

    def see_last(self, pos, index, term, chain) -> None:
        if pos is not None and (self.last is None or pos > self.last[0]):
            self.last = (pos, index, term, chain)


@dataclass
class _Mark:
    """An entry with a problem (status or index record), as listed by Spark."""

    pos: int
    index: int
    term: int
    status: str
    index_record: str
    magic: int | None = None
    size: int | None = None


@dataclass
class NodeScan:
    files: dict[str, _FileResult] = field(default_factory=lambda: defaultdict(_FileResult))
    marks: dict[str, list[_Mark]] = field(default_factory=lambda: defaultdict(list))  # by file, any order
    totals: Counter = field(default_factory=Counter)  # problem code -> entries with it
    terms: set = field(default_factory=set)


def scan_nodes(spark: SparkSession, nodes: list[Node], check_crc: bool = True) -> dict[str, NodeScan]:
    """Read every data file once, in the source's ``runs`` shape, and bring back per node
    what the replay needs. A file is a few dozen rows however large or damaged it is (a
    row per healthy stretch, the first ``MAX_PER_CODE + 1`` problem entries of each code
    one by one, the rest of them counted), so the rows are collected as they are: one
    Spark stage, no shuffle."""
    df = read_entries(spark, nodes, records=RECORDS_RUNS, checkCrc=check_crc, problemRows=MAX_PER_CODE + 1)
    scans: dict[str, NodeScan] = defaultdict(NodeScan)
    for r in df.collect():
        ns = scans[r["node"]]
        fr = ns.files[r["file"]]
        kind = r["kind"]
        if kind == KIND_STOP:
            fr.stop = (r["status"], r["pos"], r["detail"] or "")
            continue
        fr.entries += r["entries"]
        fr.bytes += r["bytes"]
        fr.ok += r["crc_checked"]
        fr.nocrc += r["crc_absent"]
        fr.see_first(r["pos"], r["index"], r["term"])
        fr.see_last(r["end_pos"], r["last_index"], r["term"], r["chain_crc"])
        ns.terms.add(r["term"])
        if kind == KIND_ENTRY:
            _count_problem(ns, r["status"], r["index_record"], 1)
            ns.marks[r["file"]].append(_Mark(r["pos"], r["index"], r["term"], r["status"], r["index_record"],
                                             r["magic"], r["bytes"]))
        elif kind == KIND_PROBLEMS:
            _count_problem(ns, r["status"], r["index_record"], r["entries"])
    return scans


def _count_problem(ns: NodeScan, status: str, index_record: str, n: int) -> None:
    if status not in HEALTHY:
        ns.totals[status] += n
    if index_record != IDX_OK:
        ns.totals[INDEX_CODES[index_record]] += n


class Replay:
    """A ``walk`` for :func:`store.verify.verify_store` that replays a :class:`NodeScan`."""

    def __init__(self, scan: NodeScan) -> None:
        self.scan = scan

    def __call__(self, data, index, check_crc, report: VerifyReport, out, progress) -> int | None:
        scan = self.scan
        totals = Counter(scan.totals)
        added: Counter = Counter()
        files = data.files
        prev = UNKNOWN
        end_pos = None
        for fi, f in enumerate(files):
            rel_name = f"data/{f.name}"
            if fi > 0 and f.start != files[fi - 1].start + data.file_size:
                prev = UNKNOWN
            fr = scan.files.get(rel_name) or _FileResult()
            marks = {m.pos: m for m in scan.marks.get(rel_name, [])}
            if fr.entries:
                self._rejudge_first(data, index, f, prev, check_crc, fr, marks, totals, report)
            for pos in sorted(marks):
                m = marks[pos]
                if m.status not in HEALTHY:
                    out.add(ERROR, m.status, rel_name, pos - f.start, m.index,
                            f"entry {m.index} (term {m.term}): {STATUS_MESSAGES[m.status]}")
                    added[m.status] += 1
                if m.index_record != IDX_OK:
                    self._index_problem(index, m, out)
                    added[INDEX_CODES[m.index_record]] += 1
            report.entries += fr.entries
            report.bytes += fr.bytes
            report.crc_checked += fr.ok
            report.crc_absent += fr.nocrc
            if fr.entries:
                if report.begin_index < 0:
                    report.begin_index = fr.first[1]
                report.end_index, report.end_term = fr.last[1], fr.last[2]
                prev = (fr.last[1], fr.last[2], fr.last[3])
            reason, offset, detail = fr.stop or (STOP_END, f.start, "")
            last_file = fi == len(files) - 1
            if reason not in CLEAN_STOPS:
                out.add(ERROR, reason, rel_name, offset - f.start, None, f"unreadable record: {detail or reason}")
                prev = UNKNOWN
            elif reason == STOP_END and not last_file:
                out.add(ERROR, "early-end", rel_name, offset - f.start, None,
                        "entries stop before the file end without BLANK padding, but later files exist")
            if last_file:
                end_pos = offset if reason == STOP_END else None
            if progress:
                progress(f.actual_size)
        # Problems past the listed ones: verify counts them without listing them.
        for code, total in totals.items():
            for _ in range(max(0, total - added[code])):
                out.add(ERROR, code, "", None, None, "")
        return end_pos

    @staticmethod
    def _rejudge_first(data, index, f, prev, check_crc, fr: _FileResult, marks, totals, report) -> None:
        """Judge the file's first entry against verify's predecessor when Spark's differed."""
        spark_prev = file_predecessor(data, index, f)
        if spark_prev == prev:
            return

        def judge(p):
            scan = FileScan(f.view(), f.start, file_size=data.file_size, check_crc=check_crc, prev_index=p[0],
                            prev_term=p[1], prev_chain=p[2], max_entries=1)
            return next(iter(scan), None)

        was, now = judge(spark_prev), judge(prev)
        if was is None or now is None or was.status == now.status:
            return
        for st, sign in ((was.status, -1), (now.status, +1)):
            if st == OK:
                fr.ok += sign
            elif st == NO_CRC:
                fr.nocrc += sign
            else:
                totals[st] += sign
        m = marks.get(was.offset)
        if m is not None:
            m.status = now.status
            if m.status in HEALTHY and m.index_record == IDX_OK:
                del marks[was.offset]
        elif now.status not in HEALTHY:
            marks[was.offset] = _Mark(was.offset, now.index, now.term, now.status, IDX_OK, now.magic, now.size)

    @staticmethod
    def _index_problem(index, m: _Mark, out) -> None:
        """The index-record problem of entry ``m``, worded and placed as verify does."""
        ioff = m.index * INDEX_UNIT_SIZE
        ifile = index.find(ioff) if m.index >= 0 else None
        if m.index_record == IDX_MISSING or ifile is None or ifile.mm is None:
            out.add(ERROR, "index-missing", "index", None, m.index, f"no index record for entry {m.index}")
            return
        r = ioff - ifile.start
        if m.index_record == IDX_EMPTY:
            out.add(ERROR, "index-missing", f"index/{ifile.name}", r, m.index, f"index record of entry {m.index} is zero")
            return
        rec = decode_index(ifile.mm, r)
        out.add(ERROR, "index-mismatch", f"index/{ifile.name}", r, m.index,
                f"index record {tuple(rec)} disagrees with entry (magic {m.magic}, pos {m.pos}, size {m.size}, "
                f"index {m.index}, term {m.term})")


def _code_count(report: VerifyReport, codes) -> int:
    return sum(1 for p in report.problems if p.code in codes) + sum(report.suppressed.get(c, 0) for c in codes)


UNREADABLE = ("torn", "bad-magic", "bad-size", "bad-pos", "bad-blank", "early-end")


def audit_row(node: Node, report: VerifyReport, scan: NodeScan | None) -> dict:
    summary = report.summary()
    first_term = None
    if scan is not None:
        firsts = [fr.first for fr in scan.files.values() if fr.first is not None]
        if firsts:
            first_term = min(firsts)[2]
    row = {
        "node": node.name, "node_dir": node.dir, "verdict": summary["verdict"],
        "data_files": report.data_files, "index_files": report.index_files, "entries": report.entries,
        "bytes": report.bytes, "begin_index": report.begin_index, "end_index": report.end_index,
        "first_term": first_term, "end_term": report.end_term, "terms": len(scan.terms) if scan else 0,
        "crc_checked": report.crc_checked, "crc_absent": report.crc_absent,
        "crc_failures": _code_count(report, ("bad-body-crc", "bad-chain-crc")),
        "index_gaps": _code_count(report, ("index-gap",)), "term_back": _code_count(report, ("term-back",)),
        "index_disagreements": _code_count(report, ("index-missing", "index-mismatch")),
        "unreadable": _code_count(report, UNREADABLE),
        "errors": summary["errors"], "warnings": summary["warnings"],
        "problems": [p.as_row() for p in report.problems],
    }
    return row


def audit_reports(spark: SparkSession, paths, *, data_file_size: int | None = None, index_file_size: int | None = None,
                  check_crc: bool = True) -> list[tuple[Node, VerifyReport, NodeScan]]:
    """verify's report for every node, the data walk done by Spark."""
    nodes = dledger_nodes(paths, "audit")
    scans = scan_nodes(spark, nodes, check_crc)
    out = []
    for node in nodes:
        scan = scans.get(node.name) or NodeScan()
        report = verify_store(node.dir, data_file_size=data_file_size, index_file_size=index_file_size,
                              check_crc=check_crc, walk=Replay(scan))
        out.append((node, report, scan))
    return out


def audit_rows(spark: SparkSession, paths, *, data_file_size: int | None = None,
               index_file_size: int | None = None, check_crc: bool = True) -> list[dict]:
    """The rows of :func:`audit` as plain dicts (what the command prints)."""
    reports = audit_reports(spark, paths, data_file_size=data_file_size, index_file_size=index_file_size,
                            check_crc=check_crc)
    return [audit_row(n, r, s) for n, r, s in reports]


def audit(spark: SparkSession, paths, *, data_file_size: int | None = None, index_file_size: int | None = None,
          check_crc: bool = True) -> DataFrame:
    """One row per node: counts, index range, terms, problems found and a verdict."""
    return as_dataframe(spark, audit_rows(spark, paths, data_file_size=data_file_size,
                                          index_file_size=index_file_size, check_crc=check_crc))


def as_dataframe(spark: SparkSession, rows: list[dict]) -> DataFrame:
    return spark.createDataFrame(rows, AUDIT_SCHEMA)
