"""Leader side of replication: one dispatcher per follower. No I/O, no clock of its own.

States are DLedger's (EntryDispatcher): COMPARE -> TRUNCATE -> APPEND <-> COMMIT.

- COMPARE: find the highest index where the follower's log equals ours. The first compare
  of a term is at our last index; an INCONSISTENT_STATE answer carries the follower's term
  at that index (``x_term``), so the next compare skips every index of ours whose term is
  above it -- a whole term per round trip, not one entry.
- TRUNCATE: once the follower has all our entries, it drops any it holds past our end (a
  deposed leader's). Entries after the match but within our log are not truncated up
  front: APPEND overwrites them from the first one that differs, so nothing the follower
  holds equal to ours is ever cut (it may be committed there).
- APPEND: batches bounded by bytes and entries, up to ``push_window`` of them and
  ``push_window_bytes`` in flight (the one that crosses the byte bound still goes). Each batch
  is in a pending map with its send time; one unanswered for ``max_push_timeout_ms``, or
  a failure, makes the dispatcher resend everything from the watermark + 1.
- COMMIT: nothing to append; the commit index goes out when it moved (once no push has
  carried it for ``COMMIT_IDLE_MS`` after it moved: every push carries it anyway, so under
  load a commit costs no message of its own) or every heartbeat interval, and its answer shows whether
  the follower still has what it acknowledged.
  A follower whose end is now below its watermark (it restarted from an older disk state)
  has its watermark lowered and goes back to COMPARE: caught up, never wedged.
- A follower whose disk refuses a push (DISK_FULL, DISK_ERROR) is sent it again from the
  watermark after a back-off, not at once.
- Flow control: when the follower lags more than ``peer_push_throttle_point`` bytes, at
  most ``peer_push_quota`` bytes per second are pushed to it.
- INSTALL_SNAPSHOT (DLedger HEAD's): a follower that needs entries before our first one
  (we deleted them after a state-machine snapshot, or for retention) is sent our latest
  snapshot instead of being cut back, when we have one that reaches our first entry and
  it is a dledgerctl member: in chunks of ``install_chunk_bytes``, one in flight, at most
  ``peer_push_quota`` bytes per second, each resumed from what the follower says it holds.
  The last chunk carries our first entry; once the follower has installed the snapshot
  its log begins with that entry and APPEND fills it from there. A follower without a
  state machine is cut back instead (cluster/raft/install.py has the follower's side).
- REPAIR (ours, for ``peer compare``/``peer truncate``): nothing is sent and no answer
  counts while the leader's forced truncation is on its way to the follower; the
  watermark is first lowered below the cut, so no entry can commit on the strength of
  copies about to be dropped. :meth:`compare_from` then restarts at COMPARE.
- DEEP_COMPARE (ours): a follower that does not converge (it refuses, again and again,
  to replace an entry it counts as committed) is compared byte for byte, cut where it
  differs and filled again: deepcompare.py.

Invariants: the watermark only counts entries the follower acknowledged in this term;
responses to requests of another term, or to a compare/truncate that is no longer the
outstanding one, are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from store.errors import StoreCorruptError, StoreError
from store.format import ENTRY_HEADER

from .deepcompare import DeepCompare
from .dispatchstate import DispatchState
from .javapeers import NOOP_NOTE, readable_by_java
from .rpc import (
    Code,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    ProbeRequest,
    PushRequest,
    PushResponse,
    PushType,
    RepairRequest,
)

# A moved commit index waits this long for a push to carry it before it gets a COMMIT of
# its own. Sending one after every commit doubled the pushes of a busy leader: with one
# client appending, 8 messages per append instead of 4. Counted from when the index moved,
# not from the last push: with 64 clients a wave of appends goes round in about 4 ms, so
# the last push was always more than 2 ms old when its answer moved the commit index, and
# every wave cost each follower a COMMIT round trip the next wave's push would have made
# unneeded. Followers then learn a commit up to this much (plus a tick) later; clients are
# answered by the leader and do not wait for that.
COMMIT_IDLE_MS = 5


@dataclass
class _Sending:
    """A snapshot on its way to the follower: ``info`` (store/snapshot.py SnapshotInfo), and
    the offset of the next chunk."""

    info: object
    offset: int = 0


@dataclass
class InFlight:
    request: PushRequest
    last: int
    nbytes: int
    sent_at: int


class Dispatcher:
    def __init__(self, peer: str, group: str, self_id: str, term: int, store, config, quorum, now: int,
                 java: bool = False, snapshots=None, configs=None) -> None:
        self.peer, self.group, self.self_id, self.term = peer, group, self_id, term
        # a Java DLedger follower: it compares and truncates only at an entry it is sent, so
        # where dledgerctl would compare "nothing" (an empty log) it is cut back to our first
        # entry instead, as DLedger's own leader does
        self.java = java
        self.store, self.config, self.quorum = store, config, quorum
        # the state machine's snapshots (cluster/raft/statemachine.py Applier), None without one
        self.snapshots = snapshots
        self.configs = configs  # the leader's config entries (cluster/raft/membership.py Configs), for the hints
        self.sending: _Sending | None = None  # INSTALL_SNAPSHOT: what is being sent
        self.installs = 0  # snapshots this follower installed from us
        self.state = DispatchState.COMPARE
        self.said_state: DispatchState | None = None  # the state the log last said (state_changed)
        self.compare_index = store.end_index  # the first compare of a term: our last entry
        self.truncate_index = -1
        self.next_index = -1  # APPEND: the next index to push
        self.watermark = -1
        self.inflight: dict[int, InFlight] = {}
        self.outstanding: PushRequest | None = None  # a COMPARE/TRUNCATE awaiting its answer
        self.outstanding_at = 0
        self.retry_at = now  # nothing is sent before this (back-off after a failure)
        # the first entry this dispatcher could not send because our copy is damaged (-1: none):
        # the leader decides (Leader.damage_met: repaired by the scrub if committed, else cut)
        self.damaged_at = -1
        self.last_send_at = -(1 << 62)
        self.last_ack_at: int | None = None
        self.lost_at: int | None = None  # when its connection or a request failed, since its last answer
        self.commit_sent = -2
        self.commit_moved_at: int | None = None  # when the commit index first differed from commit_sent
        self.quota_window = now
        self.quota_used = 0
        self.last_error = ""
        self.note = ""  # what an operator should know of this follower now (a cut back, a cut off)
        self.said: list[str] = []  # for the node's log (the core takes them): snapshots sent
        self.deep = DeepCompare(self)  # DEEP_COMPARE: a follower that does not converge

    # -- sending ----------------------------------------------------------------------
    def poll(self, now: int, commit_index: int) -> list[PushRequest]:
        """What to send now (possibly nothing)."""
        if now < self.retry_at or self.state == DispatchState.REPAIR:
            return []
        begin = self.store.begin_index
        if self.state == DispatchState.COMPARE and 0 <= self.compare_index < begin:
            # an index we no longer hold (our head was deleted): nothing to compare there
            self._meet_at_begin(f"it needs entries before our first one {begin}")
        elif self.state == DispatchState.TRUNCATE and 0 <= self.truncate_index < begin:
            # our head was deleted again before the cut back reached it: cut back further
            self._meet_at_begin(f"entry {self.truncate_index} was deleted before it was cut back there")
        if self.state == DispatchState.INSTALL_SNAPSHOT:
            return self._send_chunk(now)
        if self.state == DispatchState.DEEP_COMPARE:
            return self._deep_compare(now, commit_index)
        if self.state == DispatchState.COMPARE and self.java and self.compare_index < 0:
            if self.store.end_index < 0:
                return []  # nothing to compare or send yet
            self.state, self.truncate_index = DispatchState.TRUNCATE, max(begin, 0)
        if self.state == DispatchState.COMPARE:
            return self._once(now, PushType.COMPARE, self.compare_index, commit_index)
        if self.state == DispatchState.TRUNCATE:
            return self._once(now, PushType.TRUNCATE, self.truncate_index, commit_index)
        self._expire(now)
        if not self.inflight and self.next_index > self.watermark + 1:
            self._resend_from_watermark("pushed entries were neither acknowledged nor in flight")
        out = []
        store, cfg = self.store, self.config
        if self.next_index < store.begin_index:
            # what it needs next was deleted from our head (retention): compare again, which
            # cuts it back to our first entry (_compared)
            self.state, self.compare_index = DispatchState.COMPARE, store.end_index
            self.inflight.clear()
            return self._once(now, PushType.COMPARE, self.compare_index, commit_index)
        in_flight_bytes = sum(f.nbytes for f in self.inflight.values())
        while (len(self.inflight) < cfg.push_window and in_flight_bytes < cfg.push_window_bytes
               and self.next_index <= store.end_index):
            if not self._quota_allows(now):
                break
            try:
                raw, count = store.read_entries(self.next_index, cfg.push_batch_entries, cfg.push_batch_bytes)
            except StoreError as exc:  # (a damaged entry: never pushed; the leader decides, Leader.damage_met)
                self.note = f"cannot push entry {self.next_index}: {exc}"
                self.retry_at = now + 1000  # (not read again every tick)
                if isinstance(exc, StoreCorruptError):
                    self.damaged_at = self.next_index
                break
            if self.java:
                raw, count = readable_by_java(raw, count)
                if not count:
                    self.note = NOOP_NOTE.format(index=self.next_index, peer=self.peer)
                    break
            req = PushRequest(self.group, self.self_id, self.term, PushType.APPEND, commit_index,
                              self.next_index, count, raw, config_at=self._configs_in(self.next_index, count))
            self.inflight[self.next_index] = InFlight(req, self.next_index + count - 1, len(raw), now)
            self.quota_used += len(raw)
            in_flight_bytes += len(raw)
            self.next_index += count
            out.append(req)
        self.state = DispatchState.APPEND if self.inflight or self.next_index <= store.end_index else DispatchState.COMMIT
        if self.state == DispatchState.COMMIT and self.note.startswith("cut back"):
            self.note = ""  # caught up
        if commit_index == self.commit_sent:
            self.commit_moved_at = None
        elif self.commit_moved_at is None:
            self.commit_moved_at = now
        if out:
            self.last_send_at = now
            self.commit_sent, self.commit_moved_at = commit_index, None
        elif not self.inflight and ((self.commit_moved_at is not None and now - self.commit_moved_at >= COMMIT_IDLE_MS)
                                    or now - self.last_send_at >= cfg.heartbeat_interval_ms):
            self.last_send_at = now
            self.commit_sent, self.commit_moved_at = commit_index, None
            out.append(PushRequest(self.group, self.self_id, self.term, PushType.COMMIT, commit_index))
        return out

    def _once(self, now: int, kind: PushType, index: int, commit_index: int) -> list[PushRequest]:
        if self.outstanding is not None:
            if now - self.outstanding_at < self.config.max_push_timeout_ms:
                return []
            self.outstanding = None  # unanswered: ask again
        try:
            raw = self.store.get_raw(index, 1, 1) if index >= 0 else b""
        except StoreError as exc:  # (a damaged entry: never sent; the leader decides, Leader.damage_met)
            self.note, self.retry_at = f"cannot send entry {index}: {exc}", now + 1000
            if isinstance(exc, StoreCorruptError):
                self.damaged_at = index
            return []
        if self.java and kind == PushType.TRUNCATE and raw and not readable_by_java(raw, 1)[1]:
            self.note = NOOP_NOTE.format(index=index, peer=self.peer)  # (a TRUNCATE would write it)
            return []
        begin = self.store.begin_index
        members = self._members_before(begin) if kind == PushType.TRUNCATE and index == begin >= 0 else b""
        req = PushRequest(self.group, self.self_id, self.term, kind, commit_index, index, 1 if raw else 0, raw,
                          begin, self._configs_in(index, 1 if raw else 0), members)
        self.outstanding, self.outstanding_at, self.last_send_at = req, now, now
        return [req]

    def _configs_in(self, first: int, count: int) -> tuple:
        """Which of entries ``first .. first + count - 1`` are config entries."""
        if self.configs is None or not count:
            return ()
        return tuple(i for i, _t, _m in self.configs.entries if first <= i < first + count)

    def _members_before(self, index: int) -> bytes:
        return b"" if self.configs is None else self.configs.at(index - 1).body()

    def _expire(self, now: int) -> None:
        timeout = self.config.max_push_timeout_ms
        if any(now - f.sent_at >= timeout for f in self.inflight.values()):
            self._resend_from_watermark("a push went unanswered")

    def _resend_from_watermark(self, why: str) -> None:
        self.inflight.clear()
        self.next_index = self.watermark + 1
        self.last_error = why

    def _quota_allows(self, now: int) -> bool:
        if now - self.quota_window >= 1000:
            self.quota_window, self.quota_used = now, 0
        lag_bytes = self._unsent_bytes()
        return lag_bytes <= self.config.peer_push_throttle_point or self.quota_used < self.config.peer_push_quota

    def _unsent_bytes(self) -> int:
        store = self.store
        if self.next_index > store.end_index or self.next_index < store.begin_index:
            return 0
        return store.write_pos - store.locate(self.next_index)[0]

    # -- answers ----------------------------------------------------------------------
    def on_response(self, req, resp, now: int) -> None:
        if req.term != self.term or self.state == DispatchState.REPAIR:
            return
        self.last_ack_at, self.lost_at = now, None
        if type(req) is InstallSnapshotRequest:
            if req is self.outstanding:
                self.outstanding = None
                self._install_answered(req, resp, now)
            return
        if type(req) is ProbeRequest or type(req) is RepairRequest:
            if req is self.outstanding and self.state == DispatchState.DEEP_COMPARE:
                self.outstanding = None
                self.deep.answered(req, resp, now)
            return
        if req.type in (PushType.COMPARE, PushType.TRUNCATE):
            if req is not self.outstanding:
                return  # an answer to an abandoned request
            self.outstanding = None
            if req.type == PushType.COMPARE:
                self._compared(req, resp)
            else:
                self._truncated(req, resp)
            return
        if req.type == PushType.APPEND:
            self._appended(req, resp)
            if resp.code in (Code.DISK_FULL, Code.DISK_ERROR):  # the follower's disk: try again later
                self.retry_at = now + min(self.config.heartbeat_interval_ms, 100)
        elif resp.code == Code.SUCCESS and resp.end_index < self.watermark:
            self._lost_entries(resp.end_index)
        elif resp.code == Code.INCONSISTENT_STATE and req.type == PushType.COMMIT:
            # the follower has not compared its log with ours (it restarted): compare again
            self.state, self.compare_index = DispatchState.COMPARE, min(self.watermark, resp.end_index)
            self.inflight.clear()
            self.last_error = f"commit: {resp.remark or 'follower asks for a compare'}"
        if (resp.code == Code.SUCCESS and self.state == DispatchState.COMMIT
                and self.watermark == self.store.end_index < resp.end_index):
            # caught up, yet the follower holds entries past our end (a deposed leader's):
            # cut them after our last entry, which it has acknowledged
            self.state, self.truncate_index = DispatchState.TRUNCATE, self.watermark

    def on_failure(self, req, now: int, why: str) -> None:
        """The request failed (timeout, connection lost): retry after a short back-off."""
        if req.term != self.term or self.state == DispatchState.REPAIR:
            return
        self.last_error, self.lost_at = why, now
        self.retry_at = now + min(self.config.heartbeat_interval_ms, 100)
        if req is self.outstanding:
            self.outstanding = None
        elif type(req) is PushRequest and req.type == PushType.APPEND and self._current(req):
            self._resend_from_watermark(why)

    def _compared(self, req: PushRequest, resp: PushResponse) -> None:
        c = req.first_index
        if resp.code == Code.SUCCESS:
            if self.java and resp.end_index != c:
                # a Java follower appends only at its end: cut what it holds after the match
                # first, as DLedger's own leader does (DLedgerEntryPusher.doCompare)
                self.state, self.truncate_index = DispatchState.TRUNCATE, c
                return
            # Append from the match on. The follower compares what it already holds after
            # c entry by entry and replaces from the first difference, so nothing it holds
            # equal to ours is cut (those may be committed there).
            self._start_append(c)
            return
        if resp.code != Code.INCONSISTENT_STATE:
            self.last_error = f"compare at {c}: {resp.code.name} {resp.remark}".strip()
            return
        nxt = min(c - 1, resp.end_index)
        if resp.x_term >= 0:
            nxt = min(nxt, self._last_index_with_term_at_most(resp.x_term))
        begin, end = self.store.begin_index, self.store.end_index
        if (begin > 0 or (self.java and begin == 0)) and (nxt < begin or resp.begin_index > end):
            # The follower's log does not meet ours: it ends before our first entry (we
            # deleted those files while it was away), begins after our end, or differs all
            # the way down. Send it our snapshot, or cut it back to our first entry, and
            # fill it from there.
            self._meet_at_begin(f"its log {resp.begin_index}..{resp.end_index} does not meet ours {begin}..{end}")
            return
        self.compare_index = max(nxt, begin - 1, -1)

    # -- a follower that needs entries we no longer hold -------------------------------
    def _meet_at_begin(self, why: str) -> None:
        """Send the follower our snapshot when one reaches our first entry, else cut it back
        to our first entry (TRUNCATE at it)."""
        begin = self.store.begin_index
        info = None
        if self.snapshots is not None and not self.java and begin > 0:
            try:
                info = self.snapshots.snapshot_to_send()
            except StoreError as exc:
                self.last_error = f"no snapshot to send: {exc}"
            if info is not None and info.index < begin - 1:
                info = None  # entries between it and our log would be missing
        self.outstanding = None
        self.inflight.clear()
        if info is None:
            self.sending = None
            self.state, self.truncate_index = DispatchState.TRUNCATE, begin
            self.note = f"cutting back to {begin}: {why}"
            return
        self.state, self.sending = DispatchState.INSTALL_SNAPSHOT, _Sending(info)
        self.note = f"sending snapshot {info.index} ({info.size} bytes): {why}"
        self.said.append(f"sending {self.peer} snapshot {info.index} ({info.size} bytes): {why}")

    def _send_chunk(self, now: int) -> list:
        if self.outstanding is not None:
            if now - self.outstanding_at < self.config.max_push_timeout_ms:
                return []
            self.outstanding = None  # unanswered: send it again
        if now - self.quota_window >= 1000:
            self.quota_window, self.quota_used = now, 0
        if self.quota_used >= self.config.peer_push_quota:
            return []  # (a snapshot counts against the quota whatever the lag)
        sending, begin = self.sending, self.store.begin_index
        info = sending.info
        if begin > info.index + 1:  # our log moved past this snapshot meanwhile: send a newer one
            self._meet_at_begin(f"our log now begins at {begin}, after snapshot {info.index}")
            if self.state != DispatchState.INSTALL_SNAPSHOT:
                return []
            sending = self.sending
            info = sending.info
        n = min(self.config.install_chunk_bytes, self.config.peer_push_quota, info.size - sending.offset)
        try:
            data = self.snapshots.read_snapshot(info, sending.offset, n)
        except (OSError, StoreError) as exc:
            # removed meanwhile (newer snapshots were saved): start again with the latest
            self.last_error = f"snapshot {info.index} is gone ({getattr(exc, 'strerror', None) or exc}): sending the latest"
            self._meet_at_begin(f"it needs entries before our first one {begin}")
            return []
        try:
            first = self.store.get_raw(begin, 1, 1) if sending.offset + n >= info.size else b""
        except StoreError as exc:  # (a damaged first entry: the snapshot's last chunk waits for its repair)
            self.note, self.retry_at = f"cannot send entry {begin} with the snapshot: {exc}", now + 1000
            return []
        req = InstallSnapshotRequest(self.group, self.self_id, self.term, info.index, info.term, info.size, info.crc,
                                     sending.offset, data, first, self._members_before(begin) if first else b"")
        self.outstanding, self.outstanding_at, self.last_send_at = req, now, now
        self.quota_used += n
        return [req]

    def _install_answered(self, req: InstallSnapshotRequest, resp: InstallSnapshotResponse, now: int) -> None:
        sending = self.sending
        if sending is None or sending.info.index != req.index:
            return
        if resp.code == Code.SUCCESS and resp.installed and req.begin_entry:  # (only the last chunk installs)
            begin = ENTRY_HEADER.unpack_from(req.begin_entry)[2]
            self.sending = None
            self.installs += 1
            self.note = f"installed snapshot {req.index}; filling it from {begin + 1}"
            self.said.append(f"{self.peer} installed snapshot {req.index}; filling it from {begin + 1}")
            self._start_append(begin)
            return
        if resp.code == Code.UNSUPPORTED:  # no state machine there
            self.sending = None
            self.state, self.truncate_index = DispatchState.TRUNCATE, self.store.begin_index
            self.note = f"cutting back to {self.truncate_index}: it has no state machine to install a snapshot into"
            return
        sending.offset = min(max(resp.received, 0), sending.info.size)
        if resp.code == Code.SUCCESS:
            self.note = f"sending snapshot {req.index}: {sending.offset} of {sending.info.size} bytes"
        else:  # (a snapshot whose crc failed there was discarded: it starts over from what it says it holds)
            self.last_error = f"install snapshot {req.index}: {resp.code.name} {resp.remark}".strip()
            self.retry_at = now + min(self.config.heartbeat_interval_ms, 100)

    def _truncated(self, req: PushRequest, resp: PushResponse) -> None:
        if resp.code == Code.SUCCESS:
            if self.note.startswith("cutting back"):
                self.note = f"cut back to {req.first_index}; filling it from there"
            self._start_append(req.first_index)
        else:
            self.state, self.compare_index = DispatchState.COMPARE, min(req.first_index, resp.end_index)
            self.last_error = f"truncate at {req.first_index}: {resp.code.name} {resp.remark}".strip()
            if resp.code == Code.INCONSISTENT_STATE:
                self.deep.refused_after(req.first_index)

    def _start_append(self, matched: int) -> None:
        self.state = DispatchState.APPEND
        self.inflight.clear()
        self.next_index = matched + 1
        self._ack(matched)

    def _current(self, req: PushRequest) -> bool:
        """Is ``req`` the push in flight for its first index (not one it replaced)?"""
        fl = self.inflight.get(req.first_index)
        return fl is not None and fl.request is req

    def _appended(self, req: PushRequest, resp: PushResponse) -> None:
        current = self._current(req)
        if current:
            del self.inflight[req.first_index]
        if resp.code == Code.SUCCESS:
            self._ack(req.first_index + req.count - 1)
            return
        if not current:
            return  # answers a push that was already resent
        if resp.code == Code.INCONSISTENT_INDEX and resp.end_index >= self.watermark:
            # a gap: the follower's log up to its end came from us in this term
            self._ack(resp.end_index)
            self._resend_from_watermark(f"gap at {req.first_index}")
        elif resp.code == Code.INCONSISTENT_INDEX:
            # a gap below what it acknowledged: it lost entries (a restart on a log torn down
            # to nothing answers so); resending from the watermark would meet the same gap
            self._lost_entries(resp.end_index)
        elif resp.code == Code.INCONSISTENT_STATE:
            self.state = DispatchState.COMPARE
            self.compare_index = min(req.first_index - 1, resp.end_index)
            self.inflight.clear()
            self.last_error = f"append at {req.first_index}: inconsistent {resp.remark}".strip()
            if req.first_index - 1 == self.watermark:
                self.deep.refused_after(self.watermark)
        else:
            self.last_error = f"append at {req.first_index}: {resp.code.name} {resp.remark}".strip()
            self._resend_from_watermark(self.last_error)

    def _ack(self, index: int) -> None:
        if index > self.watermark:
            self.watermark = index
            self.deep.moved_on(index)
        self.quorum.ack(self.peer, self.term, index)

    def _lost_entries(self, end: int) -> None:
        self.quorum.lower(self.peer, end)
        self.watermark = end
        self.state, self.compare_index = DispatchState.COMPARE, end
        self.inflight.clear()
        self.last_error = f"follower's log ends at {end}, below what it acknowledged"

    def _last_index_with_term_at_most(self, term: int) -> int:
        """Our highest index whose term is <= ``term`` (-1 if none); terms never go down."""
        store = self.store
        lo, hi = store.begin_index, store.end_index
        if lo < 0 or store.term_of(lo) > term:
            return lo - 1 if lo >= 0 else -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if store.term_of(mid) <= term:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # -- for operators ----------------------------------------------------------------
    def pause(self, below: int, why: str) -> None:
        """Stop sending and listening (REPAIR): the follower is about to lose entries from
        ``below + 1`` on, so its watermark drops to ``below`` first."""
        self.restart(DispatchState.REPAIR, below, why)

    def _deep_compare(self, now: int, commit_index: int) -> list:
        if self.outstanding is not None:
            if now - self.outstanding_at < self.config.max_push_timeout_ms:
                return []
            self.outstanding = None  # unanswered: ask again
        req = self.deep.next_request()
        if req is None:  # all equal after all: compare_from went on
            return self.poll(now, commit_index)
        self.outstanding, self.outstanding_at, self.last_send_at = req, now, now
        return [req]

    def deep_refused(self, why: str, now: int, index: int) -> None:
        """A probe or repair of DEEP_COMPARE was refused: back off, then compare from ``index``."""
        self.last_error = why
        self.retry_at = now + min(self.config.heartbeat_interval_ms, 100)
        self.compare_from(index, why)

    def state_changed(self) -> tuple | None:
        """(the state the log last said, the state now) when they differ, once: for the
        core's state lines (RaftCore._say_state)."""
        if self.state is self.said_state:
            return None
        before, self.said_state = self.said_state, self.state
        return before, self.state

    def lost(self, now: int) -> None:
        """Its connection was lost (or a request to it failed) at ``now``."""
        self.lost_at = now

    def speak_java(self) -> None:
        """The follower turned out to be a Java DLedger node."""
        self.java = True

    def say(self, text: str) -> None:
        """A line for the node's log (the core takes them: :meth:`take_said`)."""
        self.said.append(text)

    def take_said(self) -> list[str]:
        said, self.said = self.said, []
        return said

    def set_note(self, note: str) -> None:
        """What an operator should know of this follower now (a cut back, a cut off)."""
        self.note = note

    def compare_from(self, index: int, why: str) -> None:
        """Start over at COMPARE from ``index`` (an operator's forced compare), or from our
        end when ``index`` lies past it."""
        index = min(index, self.store.end_index)
        self.restart(DispatchState.COMPARE, index, why)
        self.compare_index = max(index, -1)

    def restart(self, state: DispatchState, keep: int, why: str) -> None:
        self.state = state
        self.inflight.clear()
        self.outstanding = None
        self.sending = None
        if self.watermark > keep:
            self.watermark = keep
            self.quorum.lower(self.peer, keep)
        self.last_error = why

    def lag_bytes(self) -> int:
        """Bytes of our log past what the follower acknowledged."""
        store = self.store
        if store.begin_index < 0 or self.watermark >= store.end_index:
            return 0
        if self.watermark < store.begin_index:
            return store.write_pos - store.locate(store.begin_index)[0]
        pos, size = store.locate(self.watermark)
        return max(0, store.write_pos - (pos + size))

    def describe(self, now: int) -> dict:
        end = self.store.end_index
        return {
            "peer": self.peer,
            "state": str(self.state),
            "watermark": self.watermark,
            "next_index": self.next_index,
            "lag_entries": max(0, end - self.watermark),
            "lag_bytes": self.lag_bytes(),
            "in_flight": len(self.inflight) + (self.outstanding is not None and self.sending is not None),
            "in_flight_bytes": sum(f.nbytes for f in self.inflight.values()),
            "ms_since_ack": None if self.last_ack_at is None else now - self.last_ack_at,
            "last_error": self.last_error,
            "note": self.note,
        }
