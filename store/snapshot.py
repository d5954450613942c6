"""State-machine snapshots in a node directory, laid out as DLedger HEAD lays them out.

``<node dir>/snapshot/`` (DLedgerConfig.getSnapshotStoreBaseDir) holds::

    snapshot_<index>/snapshot_meta   JSON: {"lastIncludedIndex": N, "lastIncludedTerm": T, ...}
    snapshot_<index>/data            the state machine's bytes, as of entry N included
    tmp/                             a snapshot being written (DLedger's SNAPSHOT_TEMP_DIR)
    install_tmp/                     a snapshot arriving from the leader (SNAPSHOT_INSTALL_TEMP_DIR)

so that either side's tools find a node's latest snapshot. dledgerctl adds ``dataSize`` and
``dataCrc`` (crc32 of ``data``) to the meta object, which DLedger's reader ignores, and
checks them when it reads one. A snapshot appears only whole: it is written (or received)
in a temporary directory, synced, and renamed into place. What a crash leaves in ``tmp`` is
removed when the store is opened for writing; what it leaves in ``install_tmp`` stays, so an
install the leader resumes continues where it stopped (:class:`Installer` checks that the
same snapshot is arriving, and its size and crc32 before placing it). Synchronous, no sockets.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from dataclasses import dataclass

from .errors import StoreError
from .format import INT64_MAX, parse_decimal

SNAPSHOT_DIR = "snapshot"
META_FILE = "snapshot_meta"
DATA_FILE = "data"
DIR_PREFIX = "snapshot_"
TMP_DIR = "tmp"
INSTALL_TMP_DIR = "install_tmp"


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot directory as found: ``problem`` says what is wrong with it, or is None."""

    path: str
    index: int
    term: int | None
    size: int | None
    crc: int | None
    problem: str | None = None

    def as_row(self) -> dict:
        return {"index": self.index, "term": self.term, "size": self.size, "crc": self.crc,
                "ok": self.problem is None, "problem": self.problem, "path": self.path}


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _meta_bytes(index: int, term: int, size: int, crc: int) -> bytes:
    return json.dumps({"lastIncludedIndex": index, "lastIncludedTerm": term, "dataSize": size,
                       "dataCrc": crc}).encode()


class SnapshotStore:
    """The snapshots of one node directory."""

    def __init__(self, node_dir: str, *, writable: bool = True) -> None:
        self.node_dir = node_dir
        self.base = os.path.join(node_dir, SNAPSHOT_DIR)
        self.writable = writable
        if writable:
            try:
                os.makedirs(self.base, exist_ok=True)
                shutil.rmtree(os.path.join(self.base, TMP_DIR), ignore_errors=True)  # half-written: never a snapshot
            except OSError as exc:
                raise StoreError(f"{self.base}: cannot prepare the snapshot directory: {exc.strerror or exc}") from None

    # -- reading -------------------------------------------------------------------------
    def list(self, *, check_data: bool = True) -> list[SnapshotInfo]:
        """Every ``snapshot_<index>`` directory, by index, each checked: its meta must parse
        and name its index, and its data must be there (and, with ``check_data``, have the
        size and crc32 the meta records, when it records them)."""
        try:
            names = os.listdir(self.base)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"{self.base}: {exc.strerror or exc}") from None
        out = []
        for name in names:
            index = parse_decimal(name[len(DIR_PREFIX):], signed=True, limit=INT64_MAX) if name.startswith(DIR_PREFIX) else None
            if index is None:
                continue
            out.append(self._inspect(os.path.join(self.base, name), index, check_data))
        return sorted(out, key=lambda s: s.index)

    def _inspect(self, path: str, index: int, check_data: bool) -> SnapshotInfo:
        try:
            with open(os.path.join(path, META_FILE), "rb") as fh:
                meta = json.loads(fh.read())
        except FileNotFoundError:
            return SnapshotInfo(path, index, None, None, None, f"no {META_FILE}")
        except (OSError, ValueError) as exc:
            return SnapshotInfo(path, index, None, None, None, f"{META_FILE} is unreadable: {exc}")
        if not isinstance(meta, dict) or not all(isinstance(meta.get(k), int) and not isinstance(meta.get(k), bool)
                                                 for k in ("lastIncludedIndex", "lastIncludedTerm")):
            return SnapshotInfo(path, index, None, None, None, f"{META_FILE} lacks lastIncludedIndex/Term")
        term = meta["lastIncludedTerm"]
        want_size, want_crc = meta.get("dataSize"), meta.get("dataCrc")
        if meta["lastIncludedIndex"] != index:
            return SnapshotInfo(path, index, term, None, None,
                                f"{META_FILE} says index {meta['lastIncludedIndex']}, the directory {index}")
        data = os.path.join(path, DATA_FILE)
        try:
            size = os.path.getsize(data)
        except OSError:
            return SnapshotInfo(path, index, term, None, want_crc, f"no {DATA_FILE}")
        if isinstance(want_size, int) and size != want_size:
            return SnapshotInfo(path, index, term, size, want_crc, f"{DATA_FILE} has {size} bytes, the meta says "
                                                                    f"{want_size}")
        crc = None
        if check_data:
            try:
                crc = self._crc(data)
            except OSError as exc:
                return SnapshotInfo(path, index, term, size, want_crc, f"{DATA_FILE} is unreadable: {exc}")
            if isinstance(want_crc, int) and crc != want_crc:
                return SnapshotInfo(path, index, term, size, crc, f"{DATA_FILE} crc32 {crc:#010x}, the meta says "
                                                                  f"{want_crc:#010x}")
        return SnapshotInfo(path, index, term, size, crc if crc is not None else want_crc)

    @staticmethod
    def _crc(path: str) -> int:
        crc = 0
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
        return crc

    def latest(self) -> SnapshotInfo | None:
        """The newest snapshot that checks out, data included (a damaged newer one is passed
        over; older ones are not read)."""
        for s in reversed(self.list(check_data=False)):
            if s.problem is None:
                s = self._inspect(s.path, s.index, check_data=True)
                if s.problem is None:
                    return s
        return None

    def read(self, info: SnapshotInfo) -> bytes:
        with open(os.path.join(info.path, DATA_FILE), "rb") as fh:
            return fh.read()

    def read_chunk(self, info: SnapshotInfo, offset: int, n: int) -> bytes:
        """``n`` bytes of a snapshot's data from ``offset`` (OSError if they are not all
        there: the snapshot was removed, or is shorter than its meta says)."""
        with open(os.path.join(info.path, DATA_FILE), "rb") as fh:
            fh.seek(offset)
            data = fh.read(n)
        if len(data) != n:
            raise OSError(f"{info.path}: {len(data)} of {n} bytes at {offset}")
        return data

    # -- writing -------------------------------------------------------------------------
    def _require_writable(self) -> None:
        if not self.writable:
            raise StoreError(f"{self.base} was opened read-only")

    def write(self, index: int, term: int, data: bytes) -> SnapshotInfo:
        """Save a snapshot as of entry ``index`` (of ``term``), whole or not at all."""
        self._require_writable()
        tmp = os.path.join(self.base, TMP_DIR)
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            os.makedirs(tmp)
            _write_file(os.path.join(tmp, DATA_FILE), data)
            _write_file(os.path.join(tmp, META_FILE), _meta_bytes(index, term, len(data), zlib.crc32(data)))
            _fsync_dir(tmp)
            return self._place(tmp, index)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise StoreError(f"{self.base}: cannot save snapshot {index}: {exc.strerror or exc}") from None

    def _place(self, tmp: str, index: int) -> SnapshotInfo:
        final = os.path.join(self.base, f"{DIR_PREFIX}{index}")
        if os.path.exists(final):  # the same index again: the new one replaces it
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(self.base)
        return self._inspect(final, index, check_data=False)

    def installer(self, index: int, term: int, size: int, crc: int) -> "Installer":
        """Receive a snapshot in chunks (from the leader's INSTALL_SNAPSHOT), resumable: an
        installer for the same snapshot continues where the last one stopped."""
        self._require_writable()
        return Installer(self, index, term, size, crc)

    def prune(self, keep: int) -> list[SnapshotInfo]:
        """Remove all but the newest ``keep`` snapshots (damaged ones count too); the removed."""
        self._require_writable()
        snaps = self.list(check_data=False)
        gone = snaps[:max(0, len(snaps) - keep)]
        for s in gone:
            shutil.rmtree(s.path, ignore_errors=True)
        return gone


class Installer:
    """A snapshot arriving in ``install_tmp``; :meth:`finish` places it once whole and checked."""

    def __init__(self, store: SnapshotStore, index: int, term: int, size: int, crc: int) -> None:
        self.store, self.index, self.term, self.size, self.crc = store, index, term, size, crc
        self.dir = os.path.join(store.base, INSTALL_TMP_DIR)
        self.data = os.path.join(self.dir, DATA_FILE)
        marker = os.path.join(self.dir, META_FILE)
        want = _meta_bytes(index, term, size, crc)
        try:
            with open(marker, "rb") as fh:
                same = fh.read() == want
        except OSError:
            same = False
        if not same:  # another snapshot was arriving: start over
            shutil.rmtree(self.dir, ignore_errors=True)
            os.makedirs(self.dir)
            _write_file(marker, want)
            open(self.data, "wb").close()

    @property
    def received(self) -> int:
        """Bytes received so far: the offset the next chunk must start at."""
        try:
            return os.path.getsize(self.data)
        except OSError:
            return 0

    def write(self, offset: int, chunk: bytes) -> int:
        """Write ``chunk`` at ``offset`` (at most :attr:`received`: a chunk sent again is
        written again); returns the bytes received now."""
        have = self.received
        if offset > have:
            raise StoreError(f"snapshot {self.index}: chunk at {offset}, but only {have} bytes are here")
        if offset + len(chunk) > self.size:
            raise StoreError(f"snapshot {self.index}: chunk ends at {offset + len(chunk)}, past its {self.size} bytes")
        with open(self.data, "r+b") as fh:
            fh.seek(offset)
            fh.write(chunk)
            fh.truncate(offset + len(chunk))
        return offset + len(chunk)

    def finish(self) -> SnapshotInfo:
        """Check the bytes received (size, crc32) and place the snapshot atomically."""
        have = self.received
        if have != self.size:
            raise StoreError(f"snapshot {self.index}: {have} of {self.size} bytes received")
        crc = SnapshotStore._crc(self.data)
        if crc != self.crc:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise StoreError(f"snapshot {self.index}: crc32 {crc:#010x} of the bytes received, expected "
                             f"{self.crc:#010x}; discarded")
        with open(self.data, "rb") as fh:
            os.fsync(fh.fileno())
        _fsync_dir(self.dir)
        try:
            return self.store._place(self.dir, self.index)
        except OSError as exc:
            raise StoreError(f"snapshot {self.index}: cannot place it: {exc.strerror or exc}") from None

    def abort(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
