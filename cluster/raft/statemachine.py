"""State machines on top of the log: committed entries applied in order, snapshots, recovery.

A state machine (``node start --state-machine module:Class``) is a class with:

- ``apply(index, term, body)``: one committed normal entry (magic 1), in index order, each
  once. No-op and config entries are not given to it.
- ``snapshot()``: its state as bytes, or a callable returning them (run in a thread, so a
  large state is serialised off the node's loop; it must not look at the live state then).
- ``restore(data)``: replace its state with a snapshot's bytes.
- optionally ``query(request: bytes) -> bytes``: answer a read (``dledgerctl kv get``).

Exactly once across restarts: the :class:`Applier` saves snapshots as of an index
(store/snapshot.py, DLedger HEAD's layout) every ``snapshot_threshold`` entries; at start it
restores the latest good one and applies the committed entries after it. An entry is thus
in the state once however often the node restarts, as long as the state machine's state
is only what ``apply`` and ``restore`` make of it.
"""

from __future__ import annotations

import json

from store.errors import StoreError
from store.format import ENTRY_HEADER, HEADER_SIZE, MAGIC_NORMAL
from store.snapshot import SnapshotInfo, SnapshotStore

DEFAULT_SNAPSHOT_THRESHOLD = 1000  # DLedgerConfig.snapshotThreshold
READ_BYTES = 4 << 20  # entries read at once while applying


class StateMachineError(Exception):
    """The state machine cannot be loaded (cluster/node/statemachines.py), or its snapshot
    cannot be restored."""


class KeyValue:
    """The built-in state machine: the latest value of every key, from entries whose body is
    ``key=value`` (UTF-8; the first ``=`` splits). Other bodies are counted and left alone.
    ``query(key)`` answers JSON ``{"key": ..., "value": ... or null}``."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.applied = 0  # entries applied (its state; what the tests count)
        self.ignored = 0

    def apply(self, index: int, term: int, body: bytes) -> None:
        self.applied += 1
        key, sep, value = body.decode("utf-8", "replace").partition("=")
        if not sep or not key:
            self.ignored += 1
            return
        self.values[key] = value

    def snapshot(self):
        view = (dict(self.values), self.applied, self.ignored)  # (a copy now; JSON in a thread)
        return lambda: json.dumps({"values": view[0], "applied": view[1], "ignored": view[2]},
                                  sort_keys=True).encode()

    def restore(self, data: bytes) -> None:
        try:
            o = json.loads(data)
            values, applied, ignored = dict(o["values"]), int(o["applied"]), int(o["ignored"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StateMachineError(f"not a key-value snapshot: {exc}") from None
        self.values, self.applied, self.ignored = values, applied, ignored

    def query(self, request: bytes) -> bytes:
        key = request.decode("utf-8", "replace")
        return json.dumps({"key": key, "value": self.values.get(key)}).encode()


class Applier:
    """Feeds committed entries of ``store`` (a LogStore) to ``sm`` and saves its snapshots in
    ``snapshots`` (a store/snapshot.py SnapshotStore). Synchronous: the node calls
    :meth:`step` after the commit index moves and writes the snapshots :meth:`due` hands it."""

    def __init__(self, sm, store, snapshots: SnapshotStore, threshold: int = DEFAULT_SNAPSHOT_THRESHOLD) -> None:
        self.sm, self.store, self.snapshots, self.threshold = sm, store, snapshots, threshold
        self.applied = -1  # the last entry applied
        self.snapshot_index = -1  # the last snapshot saved (or restored)
        self.snapshot_term = -1
        self.writing = False  # a snapshot is being written
        self._installer = None  # a snapshot arriving from the leader (store/snapshot.py Installer)

    def recover(self) -> str:
        """Restore the latest good snapshot; returns what was done, for the log."""
        latest = self.snapshots.latest()
        if latest is not None:
            try:
                self.sm.restore(self.snapshots.read(latest))
            except (OSError, StateMachineError) as exc:
                raise StateMachineError(f"cannot restore snapshot {latest.index} ({latest.path}): {exc}") from None
            self.applied = self.snapshot_index = latest.index
            self.snapshot_term = latest.term if latest.term is not None else -1
            said = f"restored snapshot {latest.index} (term {latest.term})"
        else:
            said = "no snapshot"
        begin = self.store.begin_index
        if begin > self.applied + 1:
            # (the log lost its head without a snapshot: the state starts where the log does)
            said += f"; the log begins at {begin}, entries before it are not in the state"
            self.applied = begin - 1
        return said

    def step(self, max_entries: int = 4096) -> int:
        """Apply committed entries after the last applied, at most ``max_entries``; how many."""
        s = self.store
        last = min(s.committed_index, self.applied + max_entries)
        n = 0
        apply, unpack = self.sm.apply, ENTRY_HEADER.unpack_from
        while self.applied < last:
            first = self.applied + 1
            if first < s.begin_index:  # deleted under us (it should not be: retention keeps them)
                raise StoreError(f"entry {first} is needed by the state machine but the log begins at "
                                 f"{s.begin_index}")
            # a run of encoded entries at once (a leader's are served from what it just wrote)
            raw, count = s.read_entries(first, last - first + 1, READ_BYTES)
            count = min(count, last - first + 1)
            off = 0
            for _ in range(count):
                magic, size, index, term = unpack(raw, off)[:4]
                if magic == MAGIC_NORMAL:
                    apply(index, term, bytes(raw[off + HEADER_SIZE: off + size]))
                off += size
            self.applied = first + count - 1
            n += count
        return n

    def due(self):
        """When ``threshold`` entries were applied since the last snapshot: (index, term, data
        or a callable making it) to save now, else None."""
        if self.writing or self.applied < 0 or self.applied - self.snapshot_index < self.threshold:
            return None
        return self.applied, self.store.term_of(self.applied), self.sm.snapshot()

    def save(self, index: int, term: int, data) -> None:
        """Write a snapshot :meth:`due` handed out (in any thread)."""
        if callable(data):
            data = data()
        self.snapshots.write(index, term, data)

    def saved(self, index: int, term: int) -> None:
        if index > self.snapshot_index:  # (one installed from the leader meanwhile may be newer)
            self.snapshot_index, self.snapshot_term = index, term

    # -- snapshots between members (the leader's dispatcher, cluster/raft/install.py) --------
    def snapshot_to_send(self) -> SnapshotInfo | None:
        """The newest snapshot whose data checks out: what a follower that needs entries
        the leader no longer holds is sent."""
        return self.snapshots.latest()

    def read_snapshot(self, info: SnapshotInfo, offset: int, n: int) -> bytes:
        return self.snapshots.read_chunk(info, offset, n)

    def receive(self, index: int, term: int, size: int, crc: int, offset: int, data) -> int:
        """Take a chunk of a snapshot the leader sends; returns the bytes of it held now (a
        chunk past them is not taken: the leader resends from there)."""
        inst = self._installer
        if inst is None or (inst.index, inst.term, inst.size, inst.crc) != (index, term, size, crc):
            inst = self._installer = self.snapshots.installer(index, term, size, crc)
        have = inst.received
        if offset > have or offset + len(data) <= have:
            return have  # a gap (a chunk was lost), or bytes already here (a chunk sent again)
        return inst.write(have, memoryview(data)[have - offset:])

    def install(self) -> SnapshotInfo:
        """Place the snapshot :meth:`receive` completed and restore the state machine from
        it: everything up to its index is applied. StoreError (it is not whole, or its crc
        differs: discarded) or StateMachineError."""
        inst, self._installer = self._installer, None
        if inst is None:
            raise StoreError("no snapshot is arriving")
        info = inst.finish()
        try:
            self.sm.restore(self.snapshots.read(info))
        except OSError as exc:
            raise StoreError(f"snapshot {info.index}: cannot read it back: {exc}") from None
        self.applied = self.snapshot_index = info.index
        self.snapshot_term = info.term if info.term is not None else -1
        return info
