"""Reading a node directory's files: the primitives every reader shares.

The file store (its recovery at open), ``store inspect-*``, ``store verify``, the RocketMQ
tools (store/rocketmq/) and the Spark pipeline (dledgerctl/pipeline/) all list a node's
data and index files here, with the sizes the files were written with, and pick entries
with one :class:`Selection`. Imports only the store's formats, files and layout, so every
reader imports it downward; nothing here writes.
"""

from __future__ import annotations

import base64
import mmap
import os
from dataclasses import dataclass

from .errors import StoreIOError, StoreUsageError
from .files import FileList, MappedFile, list_store_files
from .format import DEFAULT_DATA_FILE_SIZE, DEFAULT_INDEX_FILE_SIZE, INDEX_RECORD, INDEX_UNIT_SIZE
from .layout import NodeLayout

BODY_FORMATS = ("none", "hex", "utf8", "base64")


def detect_file_size(files: FileList, configured: int | None, default: int) -> int:
    """The size the existing files were written with (name spacing, else on-disk size).

    A lone file shorter than the configured size is no evidence of another size: it is a
    file cut short (a crash while it was being written or sized), which recovery grows back."""
    found = files.files
    spacing = {b.start - a.start for a, b in zip(found, found[1:]) if b.start > a.start}
    if len(found) >= 2 and len(spacing) >= 1:
        detected = min(spacing)
    elif found:
        detected = found[0].actual_size or None
        if configured is not None and detected is not None and detected < configured:
            detected = None
    else:
        detected = None
    if configured is not None:
        if detected is not None and detected != configured:
            raise StoreUsageError(
                f"{files.directory}: files were written with size {detected}, not the configured {configured}"
            )
        return configured
    return detected or default


def load_file_lists(data: FileList, index: FileList, data_file_size: int | None,
                    index_file_size: int | None) -> None:
    """List a node's data and index files and give both lists, and every file, the size the
    files were written with (a configured size that disagrees raises StoreUsageError)."""
    data.load()
    index.load()
    data.file_size = detect_file_size(data, data_file_size, DEFAULT_DATA_FILE_SIZE)
    index.file_size = detect_file_size(index, index_file_size, DEFAULT_INDEX_FILE_SIZE)
    for f in data.files:
        f.size = data.file_size
    for f in index.files:
        f.size = index.file_size


class LazyFileList(FileList):
    """A read-only FileList whose files are mapped on first lookup (``find``) or ``view``:
    a Spark task that reads one data file of a node with a thousand opens one data file and
    the index files it needs."""

    def __init__(self, directory: str, file_size: int) -> None:
        super().__init__(directory, file_size, writable=False)

    def load(self) -> None:
        found, self.ignored = list_store_files(self.directory)
        for start, path in found:
            try:
                size = os.path.getsize(path)
            except OSError as exc:
                raise StoreIOError(f"cannot read {path}: {exc.strerror}") from exc
            self.files.append(MappedFile(path, start, self.file_size, size))

    def mapped(self, f: MappedFile) -> MappedFile:
        if f.mm is None and f.actual_size > 0:
            try:
                fd = os.open(f.path, os.O_RDONLY)
            except OSError as exc:
                raise StoreIOError(f"cannot open {f.path}: {exc.strerror}") from exc
            try:
                f.mm = mmap.mmap(fd, f.actual_size, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                os.close(fd)
                raise StoreIOError(f"cannot map {f.path}: {exc}") from exc
            f.fd = fd
        return f

    def find(self, offset: int) -> MappedFile | None:
        f = super().find(offset)
        return self.mapped(f) if f is not None else None


def open_lists(node_dir: str, data_file_size: int | None = None, index_file_size: int | None = None, *,
               lazy: bool = False) -> tuple[FileList, FileList]:
    """A node's data and index files, read-only, with their sizes detected as the store
    detects them (a configured size that disagrees with the files raises StoreUsageError).
    Every file is mapped at once, or with ``lazy`` when it is first looked up
    (:class:`LazyFileList`). The caller closes both lists."""
    layout = NodeLayout(node_dir)
    if lazy:
        data: FileList = LazyFileList(layout.data_dir, data_file_size or DEFAULT_DATA_FILE_SIZE)
        index: FileList = LazyFileList(layout.index_dir, index_file_size or DEFAULT_INDEX_FILE_SIZE)
    else:
        data = FileList(layout.data_dir, data_file_size or DEFAULT_DATA_FILE_SIZE)
        index = FileList(layout.index_dir, index_file_size or DEFAULT_INDEX_FILE_SIZE)
    try:
        load_file_lists(data, index, data_file_size, index_file_size)
    except BaseException:
        data.close()
        index.close()
        raise
    return data, index


@dataclass
class Selection:
    """Which entries to show: one index, an index range, or the entry at a pos."""

    index: int | None = None
    from_index: int | None = None
    to_index: int | None = None
    pos: int | None = None

    def lower(self) -> int | None:
        return self.index if self.index is not None else self.from_index

    def upper(self) -> int | None:
        return self.index if self.index is not None else self.to_index

    def wants(self, index: int, offset: int) -> bool:
        if self.pos is not None and offset != self.pos:
            return False
        lo, hi = self.lower(), self.upper()
        return (lo is None or index >= lo) and (hi is None or index <= hi)

    def past(self, index: int, offset: int) -> bool:
        hi = self.upper()
        return (hi is not None and index > hi) or (self.pos is not None and offset > self.pos)


def start_file(data: FileList, index: FileList, sel: Selection) -> int:
    """First data file worth scanning for ``sel``: jump with the index record when it
    points at a matching entry, else start at the first file."""
    if sel.pos is not None:
        f = data.find(sel.pos)
        return data.files.index(f) if f is not None else 0
    lo = sel.lower()
    if lo is None or lo <= 0:
        return 0
    off = lo * INDEX_UNIT_SIZE
    f = index.find(off)
    if f is None or f.mm is None or off - f.start + INDEX_UNIT_SIZE > f.actual_size:
        return 0
    _m, pos, _s, idx, _t = INDEX_RECORD.unpack_from(f.mm, off - f.start)
    d = data.find(pos)
    if idx != lo or d is None:
        return 0
    return data.files.index(d)


def render_body(body: bytes, fmt: str) -> str | None:
    """An entry body as ``fmt`` (one of BODY_FORMATS) shows it; None for "none"."""
    if fmt == "none":
        return None
    if fmt == "hex":
        return body.hex()
    if fmt == "base64":
        return base64.b64encode(body).decode("ascii")
    return body.decode("utf-8", errors="replace")
