"""The ``dledger`` PySpark data source: ``spark.read.format("dledger").load(paths)``.

Planning (on the driver) resolves the paths into node directories and makes one input
partition per data file, so a job's tasks spread with the files. Each task reads its file
with :mod:`dledgerctl.pipeline.batches` (the store's decoder) and hands Spark Arrow record
batches. Options and columns: see :class:`~dledgerctl.pipeline.batches.ReadOptions` and
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
    """One FilePart per data file of every node, nodes in order, files in order."""
    parts = []
    for node in nodes:
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
        return read_file(partition.value, self.opts)


def register(spark) -> None:
    spark.dataSource.register(DledgerDataSource)
