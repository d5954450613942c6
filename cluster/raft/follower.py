"""Follower side of replication: answers the leader's PUSH requests. No I/O but the store.

Rules (the caller has already checked that the push comes from the leader of the current
term; see core.py):

- ``matched`` is the highest index known to equal the current leader's log: set by a
  COMPARE that found the same entry, a TRUNCATE, or entries appended from this leader.
  It is forgotten when the term changes. Nothing past it is ever appended to or
  committed: an APPEND whose first index does not follow ``matched`` is answered
  INCONSISTENT_STATE (the leader compares again), so entries a deposed leader left
  behind can never be built upon.
- Entries are applied strictly in index order. A batch that starts past the local end
  (an earlier push was lost or overtaken) is answered INCONSISTENT_INDEX with the end, so
  the leader resends from there; a batch that overlaps what is stored (a resend) is
  compared entry by entry: equal entries are skipped, the first different one and all
  after it are replaced.
- COMMIT (and every push) moves the commit index to ``min(leader commit, matched)``. A
  COMMIT that finds ``matched`` below what it could commit (the node restarted since the
  leader's last compare) is answered INCONSISTENT_STATE, so the leader compares again. DLedger
  uses the local end instead of ``matched``, which can mark a deposed leader's entries
  committed before the new leader's compare removes them; ``matched`` cannot.
- Committed entries are never truncated: a request that would is refused, not obeyed.
- A malformed or inconsistent request gets an error response; nothing raises. A push
  the disk cannot take (full, or failing) is answered DISK_FULL / DISK_ERROR and leaves
  the log as it was.
- Entries go where the leader put them. One whose position differs from where this log
  would put it (data files of another size) is refused, counted in ``refused`` by reason
  ("position"), kept as ``refusing`` until a push is taken again, and said in a note with
  the fix (``take_notes``: once, then at most every ``REFUSAL_NOTE_MS``). Unless the data
  file size was configured (``learn_file_size``), the leader's size is first learned from
  the entry (filesize.py) and adopted by the store if no entry of this log moves.
"""

from __future__ import annotations

from store.errors import PositionMismatch, StoreError, StoreIOError, StoreUsageError, is_disk_full
from store.format import ENTRY_HEADER, ENTRY_MAGICS, HEADER_SIZE
from store.kept import KEPT_IN

from .divergence import PROBE_MAX, fingerprints
from .filesize import fix_hint, leader_file_size
from .rpc import (
    Code,
    ProbeRequest,
    ProbeResponse,
    PushRequest,
    PushResponse,
    PushType,
    RepairRequest,
    RepairResponse,
    split_entries,
)


REFUSAL_NOTE_MS = 600_000  # the same refusal is said again this often at most, with how many since


class _Unlearned(Exception):
    """An entry showed the leader's data file size, which was not taken: (the store's
    PositionMismatch, the size, why the store could not take it or None: it was configured)."""


class FollowerLog:
    def __init__(self, store, *, sync: bool = False, learn_file_size: bool = False) -> None:
        self.store = store
        self.sync = sync  # flush=sync: what a response acknowledges is on disk first
        self.learn_file_size = learn_file_size  # no configured data file size: take the leader's
        self.refused: dict[str, int] = {}  # pushes refused, by reason ("position")
        self.refusing: str | None = None  # why the latest push was refused (until one is taken)
        self._notes: list[tuple[str, dict]] = []
        self._key: str | None = None  # the refusal's cause and fix (its entry numbers aside)
        self._said: tuple[str, int, int] | None = None  # (refusal key said, when, refused count then)
        self.term = -1  # the leader term ``matched`` belongs to
        self.matched = -1
        # what a leader's push cut from the log, for the node's log (the core takes them):
        # (first index dropped, last index dropped, why)
        self.cuts: list[tuple[int, int, str]] = []

    def _cut(self, index: int, why: str) -> None:
        """Drop the log from ``index`` on, and say so."""
        end = self.store.end_index
        self.store.truncate(index)
        if end >= index:
            self.cuts.append((index, end, why))

    def handle(self, req: PushRequest) -> PushResponse:
        if req.term != self.term:
            self.term, self.matched = req.term, -1
        try:
            if req.type == PushType.COMPARE:
                resp = self._compare(req)
            elif req.type == PushType.TRUNCATE:
                resp = self._truncate(req)
            elif req.type == PushType.APPEND:
                resp = self._append(req)
            elif self.matched < min(req.commit_index, self.store.end_index):
                # e.g. restarted since the leader last compared: it must compare again
                # before this node can commit what it holds
                resp = self._reply(req, Code.INCONSISTENT_STATE, remark="log not yet compared with this leader")
            else:
                resp = self._reply(req, Code.SUCCESS)
        except StoreIOError as exc:
            # an append the disk refused was put back whole by the store; the leader's
            # dispatcher sends it again after a back-off
            resp = self._reply(req, Code.DISK_FULL if is_disk_full(exc) else Code.DISK_ERROR, remark=str(exc))
        except _Unlearned as exc:
            resp = self._reply(req, Code.INCONSISTENT_STATE, remark=self._refuse_position(*exc.args))
        except PositionMismatch as exc:
            resp = self._reply(req, Code.INCONSISTENT_STATE, remark=self._refuse_position(exc))
        except (StoreError, ValueError) as exc:
            resp = self._reply(req, Code.INCONSISTENT_STATE, remark=str(exc))
        if resp.code == Code.SUCCESS and req.type in (PushType.APPEND, PushType.TRUNCATE):
            self.refusing = None
        if resp.code == Code.SUCCESS and self.sync and req.type in (PushType.APPEND, PushType.TRUNCATE):
            self.store.flush(index=False)  # the entries are durable with the data file (see FileStore.flush)
        # every push, refused or not: what equals the leader's log up to its commit index is
        # committed here too (a follower whose disk is full keeps learning it, and serves it)
        self.store.set_committed(min(req.commit_index, self.matched))
        return resp

    # -- entries at another position: the leader's data file size ---------------------
    def _store_pushed(self, raw, max_term: int) -> int:
        """Append pushed entries; on the first whose position shows the leader's data file
        size (filesize.py), take that size when allowed and go on. Returns how many were
        appended; when refused, PositionMismatch, or _Unlearned with the size it shows."""
        s = self.store
        try:
            return len(s.append_follower(raw, max_term=max_term))
        except PositionMismatch as exc:
            off, done = _offset_of(raw, exc.index)
            size = _entry_size(raw, off)
            start = s.locate(s.begin_index)[0] if s.end_index >= s.begin_index >= 0 else -1
            found = leader_file_size(s.data_file_size, start, s.write_pos, exc.pos, size)
            if found is None:
                raise
            if not self.learn_file_size:
                raise _Unlearned(exc, found, None) from exc
            was = s.data_file_size
            try:
                s.adopt_data_file_size(found)
            except StoreUsageError as why:
                raise _Unlearned(exc, found, str(why)) from exc
            self._notes.append((
                f"took the leader's data file size, {found} bytes (this member had {was}): its entry {exc.index} "
                f"begins a data file at pos {exc.pos}", {"event": "data_file_size", "data_file_size": found,
                                                        "was": was, "index": exc.index, "pos": exc.pos}))
            return done + len(s.append_follower(memoryview(raw)[off:], max_term=max_term))

    def _refuse_position(self, exc: PositionMismatch, size: int | None = None, why: str | None = None) -> str:
        """Count and describe a push refused for an entry's position (``size``: the leader's
        data file size it shows; ``why``: the store could not take it): the remark, with the fix."""
        own = self.store.data_file_size
        if size is not None and why is not None:
            cause = f"the leader's data files are {size} bytes, this member's {own}, and it cannot change: {why}"
        elif size is not None:
            cause = f"the leader's data files are {size} bytes, this member's {own} (configured)"
        elif exc.expected is not None and exc.pos < exc.expected:
            cause = f"the leader's data files are larger than this member's {own} bytes"
        else:
            cause = f"this member writes data files of {own} bytes"
        fix = fix_hint(size, own if self.store.end_index >= 0 else None)
        text = f"refusing the leader's entries: {exc} ({cause}); {fix}"
        self.refused["position"] = self.refused.get("position", 0) + 1
        self.refusing, self._key = text, f"{cause}; {fix}"
        return text

    def take_cuts(self) -> list[tuple[int, int, str]]:
        """The entries cut since the last call: (first, last, why) each."""
        cuts, self.cuts = self.cuts, []
        return cuts

    def take_notes(self, now: int) -> list[tuple[str, dict]]:
        """What to log (text, fields): a size taken, and a refusal the first time it is made
        and then every REFUSAL_NOTE_MS at most while it goes on."""
        out, self._notes = self._notes, []
        text, n = self.refusing, self.refused.get("position", 0)
        if text is not None:
            said = self._said
            if said is None or said[0] != self._key or now - said[1] >= REFUSAL_NOTE_MS:
                again = f" ({n - said[2]} refused since it was last said)" if said and said[0] == self._key else ""
                out.append((text + again, {"event": "push_refused", "reason": "position", "refused": n}))
                self._said = (self._key, now, n)
        return out

    def describe(self) -> dict:
        """For the node's status: why pushes are refused now, and how many were, by reason."""
        out: dict = {"push_refused": self.refusing} if self.refusing else {}
        if self.refused:
            out["pushes_refused"] = dict(self.refused)
        return out

    # -- operator requests the leader relays (peer compare, peer truncate) --------------
    def probe(self, req: ProbeRequest, term: int) -> ProbeResponse:
        """Fingerprints of the entries asked for (read-only)."""
        s = self.store
        try:
            first, terms, chains, digests = fingerprints(s, req.first, min(max(req.count, 0), PROBE_MAX))
        except StoreError as exc:
            return ProbeResponse(term, Code.DISK_ERROR, s.begin_index, s.end_index, s.committed_index, remark=str(exc))
        return ProbeResponse(term, Code.SUCCESS, s.begin_index, s.end_index, s.committed_index, first,
                             tuple(terms), tuple(chains), tuple(digests))

    def repair(self, req: RepairRequest, term: int) -> RepairResponse:
        """Drop entries from ``from_index`` on, committed ones included: the leader found
        they differ from its own (or an operator asked, above the cluster's commit index).
        Nothing after the cut counts as matched until the leader compares again.
        The log keeps what it cuts (an operator's cut always is, in a file of the node's
        choosing: RaftLog.cut_ordered) and the answer's remark names that file."""
        s = self.store
        try:
            dropped, kept = s.cut_ordered(req.from_index) if req.from_index <= s.end_index else (0, None)
        except StoreError as exc:
            return RepairResponse(term, Code.UNEXPECTED_ARGUMENT, 0, s.end_index, s.committed_index, str(exc))
        self.matched = min(self.matched, req.from_index - 1)
        remark = f"{KEPT_IN}{kept}" if kept is not None and dropped else ""
        return RepairResponse(term, Code.SUCCESS, dropped, s.end_index, s.committed_index, remark)

    # -- the four push types ----------------------------------------------------------
    def _reply(self, req: PushRequest, code: Code, **extra) -> PushResponse:
        s = self.store
        return PushResponse(req.term, code, req.first_index, req.count, s.begin_index, s.end_index, **extra)

    def _same_entry(self, index: int, raw) -> bool:
        s = self.store
        return s.begin_index <= index <= s.end_index and s.get_bytes(index) == bytes(raw)

    def _mismatch(self, req: PushRequest, index: int) -> PushResponse:
        """INCONSISTENT_STATE at ``index``, with the hints that let the leader skip a term."""
        s = self.store
        if s.begin_index <= index <= s.end_index:
            return self._reply(req, Code.INCONSISTENT_STATE, x_term=s.term_of(index),
                               x_index=s.first_index_of_term(index))
        return self._reply(req, Code.INCONSISTENT_STATE)

    def _one_entry(self, req: PushRequest):
        if req.first_index < 0:
            return None
        spans = split_entries(req.entries)
        if len(spans) != 1 or spans[0][2] != req.first_index:
            raise ValueError(f"{req.type} push must carry exactly entry {req.first_index}")
        return req.entries

    def _compare(self, req: PushRequest) -> PushResponse:
        raw = self._one_entry(req)
        if raw is not None and not self._same_entry(req.first_index, raw):
            return self._mismatch(req, req.first_index)
        self.matched = req.first_index
        return self._reply(req, Code.SUCCESS)

    def _truncate(self, req: PushRequest) -> PushResponse:
        """Keep the log up to ``first_index`` (which must equal the leader's), drop the rest.
        At the leader's first entry (``begin_index``), a log that does not hold it is cut
        back to it instead (:meth:`_cut_back`)."""
        raw = self._one_entry(req)
        s = self.store
        if raw is not None and not self._same_entry(req.first_index, raw):
            if req.first_index == req.begin_index >= 0:
                return self._cut_back(req, raw)
            return self._mismatch(req, req.first_index)
        if req.first_index < s.committed_index:
            return self._reply(req, Code.INCONSISTENT_STATE,
                               remark=f"refusing to cut committed entries after {req.first_index} "
                                      f"(committed {s.committed_index})")
        if s.end_index > req.first_index:
            self._cut(max(req.first_index + 1, s.begin_index if s.begin_index >= 0 else 0),
                      f"the leader's log ends at {req.first_index} (TRUNCATE)")
        self.matched = req.first_index
        return self._reply(req, Code.SUCCESS)

    def _cut_back(self, req: PushRequest, raw) -> PushResponse:
        """The leader's log begins at ``first_index`` and ours does not hold that entry: all
        of ours lies before it (the leader deleted those files while we were away), or after
        its end, or it differs there. Begin again with the leader's first entry (DLedger's
        TRUNCATE does so too). Refused when a committed entry of ours at or after that index
        would be replaced by another: committed entries never change."""
        s = self.store
        index = req.first_index
        if s.begin_index <= index <= s.committed_index:
            return self._reply(req, Code.INCONSISTENT_STATE,
                               remark=f"entry {index} differs from a committed local entry")
        if s.begin_index > index and s.committed_index >= s.begin_index:
            return self._reply(req, Code.INCONSISTENT_STATE,
                               remark=f"this log begins at {s.begin_index}, after the leader's first entry {index}, "
                                      f"and is committed up to {s.committed_index}")
        old = (s.begin_index, s.end_index)
        s.reset_to(bytes(raw))
        if old[1] >= 0:
            self.cuts.append((old[0], old[1], f"cut back to the leader's first entry {index}"))
        self.matched = index
        return self._reply(req, Code.SUCCESS, remark=f"cut back to the leader's first entry {index}")

    def _append(self, req: PushRequest) -> PushResponse:
        s = self.store
        raw = req.entries
        if len(raw) < HEADER_SIZE:
            raise ValueError(f"APPEND of {req.count} entries from {req.first_index} carries {len(raw)} bytes")
        first = ENTRY_HEADER.unpack_from(raw, 0)[2]
        if first != req.first_index:
            raise ValueError(f"APPEND from {req.first_index} starts with entry {first}")
        if first - 1 > self.matched:
            if first > s.end_index + 1 and s.end_index == self.matched:
                return self._reply(req, Code.INCONSISTENT_INDEX)  # a gap: resend from our end
            return self._reply(req, Code.INCONSISTENT_STATE)  # our log after `matched` is unverified
        # A resend overlaps what is here: skip what is equal, cut at the first entry that differs.
        off, k, index = 0, 0, first
        while index <= s.end_index and off < len(raw):
            size = _entry_size(raw, off)
            if s.get_bytes(index) != bytes(raw[off:off + size]):
                if index <= s.committed_index:
                    return self._reply(req, Code.INCONSISTENT_STATE,
                                       remark=f"entry {index} differs from a committed local entry")
                self._cut(index, f"entry {index} differs from the leader's (APPEND)")
                break
            self.matched = max(self.matched, index)
            off, k, index = off + size, k + 1, index + 1
        if off < len(raw):
            try:
                k += self._store_pushed(memoryview(raw)[off:], req.term)
            finally:
                self.matched = max(self.matched, s.end_index)
        if k != req.count:
            raise ValueError(f"APPEND says {req.count} entries from {req.first_index} but carries {k}")
        return self._reply(req, Code.SUCCESS)


def _offset_of(raw, index: int) -> tuple[int, int]:
    """(byte offset, entries before it) of entry ``index`` in a push's entries."""
    off, k = 0, 0
    while off < len(raw) and ENTRY_HEADER.unpack_from(raw, off)[2] != index:
        off, k = off + _entry_size(raw, off), k + 1
    return off, k


def _entry_size(raw, off: int) -> int:
    """Size of the entry at ``off`` of a push, framing checked (ValueError if malformed)."""
    if len(raw) - off < HEADER_SIZE:
        raise ValueError(f"{len(raw) - off} trailing bytes are not an entry header")
    magic, size = ENTRY_HEADER.unpack_from(raw, off)[:2]
    if magic not in ENTRY_MAGICS or size < HEADER_SIZE or off + size > len(raw):
        raise ValueError(f"malformed entry at byte {off} of the batch (magic {magic}, size {size})")
    return size
