"""Master-slave broker stores for the ``dledger`` source: one commit-log file as Arrow record
batches, and where each file's messages stand in the log (no Spark here: pyarrow, numpy and
the store).

A master-slave store's messages are read as ``mq messages`` reads them (store/rocketmq/
scan.py over commitlog.py): each stands as an entry whose body is the message, so ``pos``
is its commit-log offset - 48, ``size`` its TOTALSIZE + 48, and ``index`` its ordinal in the
log (0 for the first message of the first file); what a commit log has no field for
(``term``, ``magic``, ``body_crc``, ``chain_crc``, ``crc_ok``, ``status``, ``index_record``)
is null. ``body`` is the message's bytes; the RocketMQ columns are those of its message.

Contracts:

- One task reads one commit-log file: a message never spans two (a blank record ends a
  file whose space left is too small), so a file is read on its own once the ordinal of
  its first message is known. That ordinal needs the counts of every file before it:
  :func:`file_summary` counts one file (a header walk, no decoding: a job runs one per
  file in parallel, messages.py) and :func:`log_plan` turns the counts into each file's
  first ordinal, or :func:`plan_store` does both on the driver.
- The log ends, as ``mq messages`` and commitlog.batches say, at the first file that holds
  a record which is neither a message nor a blank (damage) or that ends without a blank
  while later files follow: those later files are not read.
- Read-only; the pages of a file behind the read are released, so a task holds about one
  batch (``batchRows`` rows, with bodies about ``batchBytes``).
"""

from __future__ import annotations

import mmap
import os
from contextlib import contextmanager
from typing import Iterator, NamedTuple

import numpy as np
import pyarrow as pa

from store.errors import StoreIOError
from store.files import release_pages
from store.format import HEADER_SIZE, MAGIC_NORMAL
from store.rocketmq.commitlog import COMMIT_LOG_DIR, file_name, log_files, walk_file

from .batches import bodies_array, const_strings, digests
from .mqcolumns import message_arrays
from .options import RECORDS_ENTRIES, FilePart, ReadOptions

_COUNT_STEP = 1 << 16  # messages walked at a time while counting (bounds the offsets held)


class FileSummary(NamedTuple):
    """One commit-log file as a header walk sees it."""

    messages: int
    blank: bool  # a blank record ends its messages (the log goes on in the next file)
    damage: str  # what stops the walk where there is neither a message nor a blank nor zeros ("" if none)


@contextmanager
def _mapped(path: str):
    """The file's bytes (read-only map) and length; StoreIOError naming it when it cannot be read."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise StoreIOError(f"{path}: {exc.strerror or exc} (removed after the job was planned?)") from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    try:
        yield buf, size
    finally:
        if size:
            buf.close()


def file_path(root: str, start: int) -> str:
    return os.path.join(root, COMMIT_LOG_DIR, file_name(start))


def file_summary(root: str, start: int) -> FileSummary:
    """Count the messages of the commit-log file of store ``root`` starting at ``start``."""
    with _mapped(file_path(root, start)) as (buf, size):
        count, p, end = 0, 0, None
        while end is None:
            at, _sizes, q, end = walk_file(buf, size, p, limit=_COUNT_STEP)
            count += len(at)
            release_pages(buf, p, q)
            p = q
    return FileSummary(count, end.blank, end.damage)


def log_plan(summaries: list[tuple[int, FileSummary]]) -> list[tuple[int, int]]:
    """(file start, ordinal of its first message) of each file that is part of the log, from
    every file's (start, summary) in order (see the module's contracts)."""
    out, ordinal = [], 0
    for n, (start, s) in enumerate(summaries):
        out.append((start, ordinal))
        ordinal += s.messages
        if s.damage or (not s.blank and n + 1 < len(summaries)):
            break
    return out


def store_files(root: str) -> list[int]:
    """The starts of the commit-log files of store ``root``, in order."""
    return [start for start, _path in log_files(os.path.join(root, COMMIT_LOG_DIR))]


def plan_store(root: str) -> list[tuple[int, int]]:
    """:func:`log_plan` of store ``root``, every file counted here, one after the other."""
    return log_plan([(start, file_summary(root, start)) for start in store_files(root)])


def check_records(node_dir: str, opts: ReadOptions) -> None:
    """ValueError when the options ask a master-slave store for what only a DLedger log has."""
    if opts.records != RECORDS_ENTRIES:
        raise ValueError(f"{node_dir}: a master-slave store's commit log holds messages, no DLedger entries: option "
                         f"records={opts.records} reads DLedger logs only (records=entries reads both)")


def read_commit_log_file(part: FilePart, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The record batches of one commit-log file (see the module's contracts)."""
    check_records(part.node_dir, opts)
    schema = opts.arrow_schema()
    with _mapped(file_path(part.node_dir, part.file_start)) as (buf, size):
        p, end, done = 0, None, 0
        while end is None:
            at, sizes, q, end = walk_file(buf, size, p, limit=opts.batch_rows)
            if at:
                at, sizes = np.array(at, np.int64), np.array(sizes, np.int64)
                for lo, hi in _cuts(sizes, opts):
                    yield _batch(part, opts, schema, buf, at[lo:hi], sizes[lo:hi], done + lo)
                done += len(at)
            release_pages(buf, p, q)
            p = q


def _cuts(sizes: np.ndarray, opts: ReadOptions) -> list[tuple[int, int]]:
    """Ranges of at most batch_rows messages, and with bodies about batch_bytes bytes."""
    n = len(sizes)
    if not opts.body or n == 0:
        return [(0, n)]
    ends = np.cumsum(sizes)
    bounds = np.searchsorted(ends, np.arange(opts.batch_bytes, int(ends[-1]), opts.batch_bytes), side="right")
    edges = [0, *sorted({int(b) for b in bounds if 0 < b < n}), n]
    return list(zip(edges, edges[1:]))


def _batch(part: FilePart, opts: ReadOptions, schema: pa.Schema, buf, at: np.ndarray, sizes: np.ndarray,
           ordinal: int) -> pa.RecordBatch:
    n = len(at)
    i64, i32 = pa.int64(), pa.int32()
    cols = {
        "node": const_strings(part.node, n), "file": const_strings(part.file, n),
        "pos": pa.array(at + (part.file_start - HEADER_SIZE)),
        "index": (pa.array(np.arange(n, dtype=np.int64) + (part.first_index + ordinal))
                  if part.first_index is not None else pa.nulls(n, i64)),
        "term": pa.nulls(n, i64), "magic": pa.nulls(n, i32), "size": pa.array((sizes + HEADER_SIZE).astype(np.int32)),
        "body_crc": pa.nulls(n, i32), "chain_crc": pa.nulls(n, i32), "crc_ok": pa.nulls(n, pa.bool_()),
        "status": pa.nulls(n, pa.string()), "index_record": pa.nulls(n, pa.string()),
    }
    if opts.digest:
        cols["body_digest"] = pa.array(digests(buf, at, sizes, header=0), i64)
    if opts.body:
        cols["body"] = bodies_array(buf, at, sizes, header=0)
    if opts.rocketmq:
        cols.update(message_arrays(buf, at - HEADER_SIZE, sizes + HEADER_SIZE, np.full(n, MAGIC_NORMAL), n,
                                   opts.body, opts.max_body))
    return pa.RecordBatch.from_arrays([cols[name] for name in schema.names], schema=schema)
