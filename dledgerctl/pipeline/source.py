"""The ``dledger`` PySpark data source: ``spark.read.format("dledger").load(paths)``.

Planning (on the driver) resolves the paths into node directories and makes one input
partition per data file, so a job's tasks spread with the files. Each task reads its file
with :mod:`dledgerctl.pipeline.batches` (the store's decoder) and hands Spark Arrow record
batches. A master-slave broker store (a store root with ``commitlog/``) is a node whose
files are its commit-log files, read by :mod:`dledgerctl.pipeline.commitlogs`: one
partition per file too, with the ordinal of its first message from the option
``firstIndexes`` (the mq jobs count the files in a job of their own) or counted here. Options and columns: see :class:`~dledgerctl.pipeline.batches.ReadOptions` and
man/dledgerctl-spark.1 (DATA SOURCE).

Register it once per session with :func:`register` (the jobs' session does this).
"""

from __future__ import annotations

import json
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from store.reading import open_lists

from .batches import read_file
from .commitlogs import check_records, plan_store, read_commit_log_file
from .inputs import Node, resolve_nodes
from .options import FilePart, ReadOptions

SOURCE_NAME = "dledger"


def input_paths(options) -> list[str]:
    """The paths given to ``load()``: one (option ``path``) or several (``paths``, JSON)."""
    opts = {str(k).lower(): v for k, v in dict(options).items()}
    if opts.get("paths"):
        paths = json.loads(opts["paths"])
    elif opts.get("path"):
        paths = [opts["path"]]
    else:
        paths = []
    if not paths:
        raise ValueError("the dledger source needs paths: spark.read.format('dledger').load(path_or_paths)")
    return [str(p) for p in paths]


def plan_parts(nodes: list[Node], opts: ReadOptions) -> list[FilePart]:
    """One FilePart per data file of every node, nodes in order, files in order (a
    master-slave store's: per commit-log file that is part of its log)."""
    parts = []
    for node in nodes:
        if node.commit_log:
            check_records(node.dir, opts)
            known = (opts.first_indexes or {}).get(node.dir)
            parts.extend(FilePart(node.name, node.dir, start, 0, 0, commit_log=True, first_index=first)
                         for start, first in (plan_store(node.dir) if known is None else known))
            continue
        data, index = open_lists(node.dir, opts.data_file_size, opts.index_file_size, lazy=True)
        try:
            parts.extend(FilePart(node.name, node.dir, f.start, data.file_size, index.file_size) for f in data.files)
        finally:
            data.close()
            index.close()
    return parts


class DledgerDataSource(DataSource):
    """Entries of DLedger data files; one partition per data file."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return ReadOptions.parse(self.options).ddl()

    def reader(self, schema) -> "DledgerReader":
        return DledgerReader(self.options)


class DledgerReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.opts = ReadOptions.parse(options)
        self.paths = input_paths(options)

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in plan_parts(resolve_nodes(self.paths), self.opts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:  # Spark's stand-in when there are no data files at all
            return iter(())
        part = partition.value
        return read_commit_log_file(part, self.opts) if part.commit_log else read_file(part, self.opts)


def register(spark) -> None:
    spark.dataSource.register(DledgerDataSource)
