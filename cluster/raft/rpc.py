"""The requests peers send each other (VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER) as the
deciding logic sees them: plain values, no bytes, no sockets.

Field names are DLedger's (``ledgerEndIndex`` -> ``ledger_end_index``); the codec maps them
to and from frames. Every request gets exactly one response; the logic is handed the
request back with its response (or with a failure), so nothing needs matching ids here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from store.format import ENTRY_HEADER, ENTRY_MAGICS, HEADER_SIZE


class Code(enum.IntEnum):
    """DLedgerResponseCode."""

    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    PUSH_REQUEST_IS_FULL = 421  # (DLedger 0.3.x: a follower whose compare/commit queue is full)
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506
    INSTALL_SNAPSHOT_ERROR = 508


class VoteResult(enum.StrEnum):
    """VoteResponse.RESULT."""

    UNKNOWN = "UNKNOWN"
    ACCEPT = "ACCEPT"
    REJECT_UNKNOWN_LEADER = "REJECT_UNKNOWN_LEADER"
    REJECT_UNEXPECTED_LEADER = "REJECT_UNEXPECTED_LEADER"
    REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
    REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
    REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"
    REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
    REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
    REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
    REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
    REJECT_TAKING_LEADERSHIP = "REJECT_TAKING_LEADERSHIP"


class PushType(enum.StrEnum):
    """PushEntryRequest.Type."""

    APPEND = "APPEND"
    COMMIT = "COMMIT"
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"


@dataclass(frozen=True, slots=True)
class VoteRequest:
    group: str
    leader_id: str  # the candidate
    term: int  # the term it asks for (for a pre-vote: the term it would ask for)
    ledger_end_index: int
    ledger_end_term: int
    pre_vote: bool = False  # ours: a dry run that changes no state (DLedger has none)
    take_leadership: bool = False  # a leadership transfer: voters skip the known-leader check


@dataclass(frozen=True, slots=True)
class VoteResponse:
    term: int
    vote_result: VoteResult
    code: Code = Code.SUCCESS


@dataclass(frozen=True, slots=True)
class HeartBeatRequest:
    group: str
    leader_id: str
    term: int
    read_round: int = 0  # the leader's own mark: the read round it confirms (raft/reads.py); not on the wire
    sent_at: int = 0  # the leader's own mark: when it was made, for read leases (raft/reads.py); not on the wire


@dataclass(frozen=True, slots=True)
class HeartBeatResponse:
    term: int
    code: Code = Code.SUCCESS
    leader_id: str | None = None  # who the responder thinks leads, when it is not the sender
    lease: bool = False  # the responder keeps the read-lease promise (NodeConfig.read_lease)


@dataclass(frozen=True, slots=True)
class PushRequest:
    """A push from the leader. ``first_index``/``count``/``entries``: for APPEND the batch
    (raw on-disk bytes of ``count`` entries starting at ``first_index``); for COMPARE and
    TRUNCATE one entry, the one compared or kept as the new end (``first_index`` -1 and no
    bytes: the follower's log should be empty); for COMMIT nothing. ``begin_index``: the
    leader's first entry (-1 when not said); a TRUNCATE at it cuts a follower whose log
    does not meet the leader's back to that entry (FollowerLog._truncate)."""

    group: str
    leader_id: str
    term: int
    type: PushType
    commit_index: int
    first_index: int = -1
    count: int = 0
    entries: bytes = b""
    begin_index: int = -1
    config_at: tuple = ()  # which of the entries carried are config entries (magic 3)
    members: bytes = b""  # TRUNCATE at begin_index: the membership in force before it (cluster/raft/membership.py)


@dataclass(frozen=True, slots=True)
class PushResponse:
    term: int
    code: Code
    index: int = -1  # the request's first_index
    count: int = 0
    begin_index: int = -1  # the follower's log after handling the request
    end_index: int = -1
    x_term: int = -1  # INCONSISTENT_STATE at a compared index: the follower's term there...
    x_index: int = -1  # ... and the first index of that term in its log
    remark: str = ""


@dataclass(frozen=True, slots=True)
class LeadershipTransferRequest:
    """To the leader: hand leadership to ``transferee``. From the leader to the transferee
    (``take=True``): you are caught up, start an election now."""

    group: str
    leader_id: str
    transferee: str
    term: int
    take: bool = False
    end_index: int = -1  # take: the leader's last index (DLedger's takeLeadershipLedgerIndex)


@dataclass(frozen=True, slots=True)
class LeadershipTransferResponse:
    term: int
    code: Code = Code.SUCCESS
    remark: str = ""


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    """Leader to follower (ours, for operators): fingerprints of the follower's entries
    ``first .. first + count - 1`` (those it has), plus its log's bounds. Read-only."""

    group: str
    leader_id: str
    term: int
    first: int
    count: int


@dataclass(frozen=True, slots=True)
class ProbeResponse:
    term: int
    code: Code = Code.SUCCESS
    begin_index: int = -1
    end_index: int = -1
    committed_index: int = -1
    first: int = -1  # index of the first fingerprint
    terms: tuple = ()  # per entry from ``first``: term ...
    chains: tuple = ()  # ... chainCrc as stored ...
    digests: tuple = ()  # ... and crc32 of the entry's whole encoded bytes
    remark: str = ""


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """Leader to follower (ours, for operators): drop every entry from ``from_index`` on,
    committed ones included, because they differ from the leader's (a forced compare
    found it) or an operator asked. Then the leader's dispatcher compares again and
    re-fills the follower."""

    group: str
    leader_id: str
    term: int
    from_index: int


@dataclass(frozen=True, slots=True)
class RepairResponse:
    term: int
    code: Code = Code.SUCCESS
    dropped: int = 0
    end_index: int = -1
    committed_index: int = -1
    remark: str = ""


@dataclass(frozen=True, slots=True)
class InstallSnapshotRequest:
    """Leader to a follower that needs entries the leader no longer holds (DLedger HEAD's
    INSTALL_SNAPSHOT, sent here in chunks): bytes ``offset ..`` of the state machine's
    snapshot as of entry ``index`` (of ``snap_term``), ``size`` bytes whole with crc32
    ``crc``. The last chunk also carries ``begin_entry``, the leader's first log entry (raw,
    at most ``index + 1``): once the snapshot is whole and in place the follower's log
    begins again with it, and the leader fills it from there."""

    group: str
    leader_id: str
    term: int
    index: int
    snap_term: int
    size: int
    crc: int
    offset: int
    data: bytes = b""
    begin_entry: bytes = b""
    members: bytes = b""  # with begin_entry: the membership in force before it


@dataclass(frozen=True, slots=True)
class InstallSnapshotResponse:
    term: int
    code: Code = Code.SUCCESS
    received: int = 0  # bytes of that snapshot the follower holds now: where the next chunk starts
    installed: bool = False  # in place, the state machine restored from it, the log begun again
    begin_index: int = -1
    end_index: int = -1
    remark: str = ""


@dataclass(slots=True)
class Send:
    """An outgoing request: ``to`` a peer id."""

    to: str
    request: object
    meta: dict = field(default_factory=dict)  # the sender's own bookkeeping, not sent


def split_entries(raw) -> list[tuple[int, int, int, int]]:
    """(offset, size, index, term) of each entry in a PUSH body (raw on-disk entries, one
    after another). Raises ValueError naming the first malformed one; never reads past the
    end."""
    out = []
    off, n = 0, len(raw)
    while off < n:
        if n - off < HEADER_SIZE:
            raise ValueError(f"{n - off} trailing bytes are not an entry header")
        magic, size, index, term, _pos, _ch, _chain, _bcrc, bsize = ENTRY_HEADER.unpack_from(raw, off)
        if magic not in ENTRY_MAGICS or bsize < 0 or size != HEADER_SIZE + bsize or off + size > n:
            raise ValueError(f"malformed entry at byte {off} of the batch (magic {magic}, size {size})")
        if out and index != out[-1][2] + 1:
            raise ValueError(f"entry index {index} does not follow {out[-1][2]} in the batch")
        out.append((off, size, index, term))
        off += size
    return out


def error_response(kind, term: int, code: Code, remark: str):
    """The answer to a request of type ``kind`` that is refused with ``code``."""
    if kind is VoteRequest:
        return VoteResponse(term, VoteResult.REJECT_UNKNOWN_LEADER, code)
    if kind is HeartBeatRequest:
        return HeartBeatResponse(term, code)
    if kind is PushRequest:
        return PushResponse(term, code, remark=remark)
    if kind is ProbeRequest:
        return ProbeResponse(term, code, remark=remark)
    if kind is RepairRequest:
        return RepairResponse(term, code, remark=remark)
    if kind is InstallSnapshotRequest:
        return InstallSnapshotResponse(term, code, remark=remark)
    return LeadershipTransferResponse(term, code, remark)
