"""Follower side of INSTALL_SNAPSHOT: a follower that needs entries its leader no longer holds
receives the leader's state-machine snapshot, installs it, and begins its log again. No I/O
but through the store and the state machine's snapshot side (cluster/raft/statemachine.py
Applier: ``snapshot_index``, ``receive``, ``install``).

The leader side is a dispatcher state (cluster/raft/dispatcher.py, INSTALL_SNAPSHOT). Rules:

- Chunks arrive in order; each answer says how many bytes of that snapshot the follower
  holds, and the leader goes on from there. A chunk past them (one was lost) or one already
  held (sent again) changes nothing. What has arrived stays in ``install_tmp`` across
  restarts of either side, so an install resumes; another snapshot arriving replaces it.
- Nothing is a snapshot until all of it has arrived and its size and crc32 match: then it is
  placed (a rename), the state machine is restored from it, and only then does the log
  begin again with the leader's first entry (carried by the last chunk, at most one past
  the snapshot's index, so nothing between the snapshot and the log is missing).
- A crash between placing and the log's new beginning leaves a follower that restores the
  snapshot at its restart; the leader's next install finds it there (the snapshot index
  is at least the one sent) and only begins the log again.
- A follower without a state machine answers UNSUPPORTED: the leader cuts it back instead.
- A malformed request, or a snapshot that fails its checks, is answered with an error and
  leaves the follower as it was (a failed crc discards what arrived, so the next install
  starts over).
"""

from __future__ import annotations

from store.errors import StoreError, StoreIOError, is_disk_full
from store.format import ENTRY_HEADER

from .rpc import Code, InstallSnapshotRequest, InstallSnapshotResponse, split_entries
from .statemachine import StateMachineError


def receive(req: InstallSnapshotRequest, follower, sm) -> InstallSnapshotResponse:
    """Answer one chunk. ``follower``: the node's FollowerLog (its store, and what it holds
    as matched with the leader); ``sm``: the Applier, or None without a state machine."""
    s = follower.store

    def reply(code: Code, received: int = 0, installed: bool = False, remark: str = "") -> InstallSnapshotResponse:
        return InstallSnapshotResponse(req.term, code, received, installed, s.begin_index, s.end_index, remark)

    if sm is None:
        return reply(Code.UNSUPPORTED, remark="no state machine here to install a snapshot into")
    problem = _check(req)
    if problem:
        return reply(Code.UNEXPECTED_ARGUMENT, remark=problem)
    try:
        have = req.size if sm.snapshot_index >= req.index else sm.receive(
            req.index, req.snap_term, req.size, req.crc, req.offset, req.data)
        if have < req.size or not req.begin_entry:
            return reply(Code.SUCCESS, have)
        if sm.snapshot_index < req.index:
            sm.install()
    except StoreIOError as exc:
        return reply(Code.DISK_FULL if is_disk_full(exc) else Code.DISK_ERROR, 0, remark=str(exc))
    except (StoreError, StateMachineError) as exc:
        return reply(Code.INSTALL_SNAPSHOT_ERROR, 0, remark=str(exc))
    # the state holds everything up to req.index: the log begins again with the leader's first entry
    begin = ENTRY_HEADER.unpack_from(req.begin_entry)[2]
    try:
        if not (s.begin_index <= begin <= s.end_index and s.get_bytes(begin) == bytes(req.begin_entry)):
            s.reset_to(bytes(req.begin_entry))
    except StoreIOError as exc:
        return reply(Code.DISK_FULL if is_disk_full(exc) else Code.DISK_ERROR, req.size, remark=str(exc))
    except StoreError as exc:
        return reply(Code.INSTALL_SNAPSHOT_ERROR, req.size, remark=f"snapshot {req.index} is in place, but the log "
                                                                    f"cannot begin again at {begin}: {exc}")
    follower.term, follower.matched = req.term, begin
    return reply(Code.SUCCESS, req.size, True, f"installed snapshot {req.index}; the log begins again at {begin}")


def _check(req: InstallSnapshotRequest) -> str:
    """What is wrong with the request's fields ('' when nothing)."""
    if req.index < 0 or req.size < 0 or not 0 <= req.crc <= 0xFFFFFFFF:
        return f"snapshot index {req.index}, size {req.size}, crc {req.crc}: out of range"
    if not 0 <= req.offset <= req.size or req.offset + len(req.data) > req.size:
        return f"chunk of {len(req.data)} bytes at {req.offset} does not fit a snapshot of {req.size}"
    if req.begin_entry:
        if req.offset + len(req.data) != req.size:
            return "the leader's first entry comes with the last chunk only"
        try:
            spans = split_entries(req.begin_entry)
        except ValueError as exc:
            return f"the leader's first entry: {exc}"
        if len(spans) != 1 or not 0 <= spans[0][2] <= req.index + 1:
            return f"the leader's first entry must be one entry at most {req.index + 1}"
    return ""
