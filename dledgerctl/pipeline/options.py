"""What the ``dledger`` Spark data source reads and gives: its options and its columns.

:class:`ReadOptions` (the source's options, as Spark hands them over), the columns each
shape of rows has (entries, all records, runs), the values of the coded columns, and
:class:`FilePart` (one data file of one node, a task's unit of work). No Spark and no file
access here (pyarrow only): the driver (source.py, jobs.py, audit.py) and the reader
(batches.py) import it alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

import pyarrow as pa

from store.rocketmq.commitlog import COMMIT_LOG_DIR
from store.rocketmq.message import MAX_MESSAGE_SIZE
from store.scan import BAD_BODY_CRC, BAD_CHAIN_CRC, INDEX_GAP, NO_CRC, OK, TERM_BACK

from .mqcolumns import MQ_COLUMNS, MSG_BODY_COLUMN

# --- columns -----------------------------------------------------------------------------

# (name, Arrow type, Spark SQL type). Documented in man/dledgerctl-spark.1 (DATA SOURCE).
ENTRY_COLUMNS = [
    ("node", pa.string(), "string"),
    ("file", pa.string(), "string"),
    ("pos", pa.int64(), "bigint"),
    ("index", pa.int64(), "bigint"),
    ("term", pa.int64(), "bigint"),
    ("magic", pa.int32(), "int"),
    ("size", pa.int32(), "int"),
    ("body_crc", pa.int32(), "int"),
    ("chain_crc", pa.int32(), "int"),
    ("crc_ok", pa.bool_(), "boolean"),
    ("status", pa.string(), "string"),
    ("index_record", pa.string(), "string"),
]
RECORD_COLUMNS = [("kind", pa.string(), "string"), ("detail", pa.string(), "string")]
# records=runs: the decoder's run lane as it summarises a file (store verify's view).
RUN_COLUMNS = [
    ("node", pa.string(), "string"),
    ("file", pa.string(), "string"),
    ("kind", pa.string(), "string"),  # run, entry, problems or stop
    ("pos", pa.int64(), "bigint"),  # first entry's pos (stop: where the entries end)
    ("end_pos", pa.int64(), "bigint"),  # just past the last entry
    ("index", pa.int64(), "bigint"),  # first entry's index
    ("last_index", pa.int64(), "bigint"),
    ("term", pa.int64(), "bigint"),  # one term per row
    ("entries", pa.int64(), "bigint"),
    ("bytes", pa.int64(), "bigint"),
    ("crc_checked", pa.int64(), "bigint"),  # entries with checksums recorded (status ok)
    ("crc_absent", pa.int64(), "bigint"),  # entries without (status no-crc)
    ("noops", pa.int64(), "bigint"),  # entries with magic 2
    ("chain_crc", pa.int32(), "int"),  # last entry's chainCrc
    ("magic", pa.int32(), "int"),  # entry rows
    ("status", pa.string(), "string"),  # entry rows: the decoder's status; stop rows: the reason
    ("index_record", pa.string(), "string"),  # entry rows
    ("detail", pa.string(), "string"),  # stop rows
]
DIGEST_COLUMN = ("body_digest", pa.int64(), "bigint")
BODY_COLUMN = ("body", pa.binary(), "binary")

# status values: the decoder's (store/scan.py), in a fixed order so they can be coded
STATUSES = [OK, NO_CRC, BAD_BODY_CRC, BAD_CHAIN_CRC, INDEX_GAP, TERM_BACK]
# index_record values: does the entry's index record say what its header says?
IDX_OK, IDX_MISSING, IDX_EMPTY, IDX_MISMATCH = "ok", "missing", "empty", "mismatch"
INDEX_RECORD_STATES = [IDX_OK, IDX_MISSING, IDX_EMPTY, IDX_MISMATCH]
KIND_ENTRY, KIND_STOP = "entry", "stop"

RECORDS_ENTRIES, RECORDS_ALL, RECORDS_RUNS = "entries", "all", "runs"
KIND_RUN, KIND_PROBLEMS = "run", "problems"
# verify's code for an entry's index-record state
INDEX_PROBLEM_CODES = {"missing": "index-missing", "empty": "index-missing", "mismatch": "index-mismatch"}
DEFAULT_PROBLEM_ROWS = 100
DEFAULT_BATCH_ROWS = 1 << 16
DEFAULT_BATCH_BYTES = 64 << 20
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off", "")


def _bool_option(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key.lower())
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"option {key}={value!r}: expected true or false")


def _int_option(options: Mapping[str, str], key: str, default: int | None) -> int | None:
    value = options.get(key.lower())
    if value is None or str(value).strip() == "":
        return default
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ValueError(f"option {key}={value!r}: expected a whole number of bytes or rows") from None
    if n <= 0:
        raise ValueError(f"option {key}={value!r}: must be positive")
    return n


def _first_indexes(value) -> dict | None:
    if value is None or str(value).strip() == "":
        return None
    try:
        got = json.loads(str(value))
        return {str(root): [(int(start), int(first)) for start, first in files] for root, files in got.items()}
    except (ValueError, TypeError, AttributeError):
        raise ValueError("option firstIndexes: expected JSON {store root: [[file start, first index], ...]}") from None


@dataclass(frozen=True)
class ReadOptions:
    """The data source's options (``spark.read.format("dledger").option(key, value)``)."""

    body: bool = False  # body: add the entry body (binary)
    records: str = RECORDS_ENTRIES  # records: "entries", or "all" (also one stop row per file)
    digest: bool = False  # digest: add body_digest, crc32 of the body as read
    check_crc: bool = True  # checkCrc: verify checksums where recorded
    data_file_size: int | None = None  # dataFileSize: default detected per node
    index_file_size: int | None = None  # indexFileSize
    batch_rows: int = DEFAULT_BATCH_ROWS  # batchRows: rows per Arrow batch at most
    batch_bytes: int = DEFAULT_BATCH_BYTES  # batchBytes: body bytes per batch, about
    problem_rows: int = DEFAULT_PROBLEM_ROWS  # problemRows: records=runs, entries listed per code and file
    rocketmq: bool = False  # rocketmq: add each entry's RocketMQ message columns (pipeline/messages.py)
    max_body: int = MAX_MESSAGE_SIZE  # maxBody: with rocketmq and body, inflate a body to at most this (else a note)
    # firstIndexes: master-slave stores' commit logs as a job counted them (commitlogs.py),
    # {store root: [[file start, ordinal of its first message], ...]}; a store it does not
    # name is counted on the driver while planning
    first_indexes: dict | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "ReadOptions":
        # Spark hands options over case-insensitively; look keys up in lower case.
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        records = str(opts.get("records", RECORDS_ENTRIES)).strip().lower()
        if records not in (RECORDS_ENTRIES, RECORDS_ALL, RECORDS_RUNS):
            raise ValueError(f"option records={opts.get('records')!r}: expected entries, all or runs")
        if records == RECORDS_RUNS and (_bool_option(opts, "body", False) or _bool_option(opts, "digest", False)
                                        or _bool_option(opts, "rocketmq", False)):
            raise ValueError("option records=runs has no bodies (body, digest, rocketmq): a row stands for many "
                             "entries")
        return cls(
            body=_bool_option(opts, "body", False),
            records=records,
            digest=_bool_option(opts, "digest", False),
            check_crc=_bool_option(opts, "checkCrc", True),
            data_file_size=_int_option(opts, "dataFileSize", None),
            index_file_size=_int_option(opts, "indexFileSize", None),
            batch_rows=_int_option(opts, "batchRows", DEFAULT_BATCH_ROWS),
            batch_bytes=_int_option(opts, "batchBytes", DEFAULT_BATCH_BYTES),
            problem_rows=_int_option(opts, "problemRows", DEFAULT_PROBLEM_ROWS),
            rocketmq=_bool_option(opts, "rocketmq", False),
            max_body=_int_option(opts, "maxBody", MAX_MESSAGE_SIZE),
            first_indexes=_first_indexes(opts.get("firstindexes")),
        )

    def columns(self) -> list[tuple]:
        if self.records == RECORDS_RUNS:
            return list(RUN_COLUMNS)
        cols = list(ENTRY_COLUMNS)
        if self.records == RECORDS_ALL:
            cols += RECORD_COLUMNS
        if self.digest:
            cols.append(DIGEST_COLUMN)
        if self.rocketmq:
            cols += MQ_COLUMNS + ([MSG_BODY_COLUMN] if self.body else [])
        if self.body:
            cols.append(BODY_COLUMN)  # (last: the batcher counts its bytes)
        return cols

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(n, t, nullable=True) for n, t, _ in self.columns()])

    def ddl(self) -> str:
        """The Spark schema as DDL text."""
        return ", ".join(f"`{n}` {s}" for n, _, s in self.columns())


@dataclass(frozen=True)
class FilePart:
    """One data file of one node (or one commit-log file of a master-slave store): the unit
    of work of a Spark task."""

    node: str  # the node's name among the job's inputs (inputs.Node.name)
    node_dir: str  # (a master-slave store's root)
    file_start: int  # logical start offset (the file's name)
    data_file_size: int
    index_file_size: int
    commit_log: bool = False  # a commit-log file: commitlogs.py reads it
    first_index: int | None = None  # a commit-log file: the ordinal of its first message in the log

    @property
    def file(self) -> str:
        return f"{COMMIT_LOG_DIR if self.commit_log else 'data'}/{self.file_start:020d}"
