"""The answers a client reads back, typed: a member's state (METADATA), the entries of a
GET, the leader's replication rows (WATERMARKS), an APPEND's rows, what FORCE_COMPARE and
FORCE_TRUNCATE did, and a chunk of a member's snapshot (SNAPSHOT_READ). Sans-I/O.

Each is decoded with msgspec from the answer's JSON object (or, for a binary GET answer,
built from the entries' headers), its fields' types checked: a field of the wrong type
(``end_index`` a string, say) is a BadMessage of one line that says which field, which the
client turns into the error of the member that sent it. Unknown fields are ignored (a
newer node may say more); the wire is api.py's, unchanged.

Where a command renders a whole answer (``peer watermarks``, ``peer compare``, ``peer
truncate``), the answer's ``row()`` gives it back as a dict with the keys a leader writes, in its order (cluster/raft/leading.py
Leader.watermarks), so that the output is what the leader sent. A field this version does
not know is not shown: it is added here first.
"""

from __future__ import annotations

from typing import Any, Sequence

import msgspec
from msgspec import UNSET, UnsetType

from .frames import CRC, INDEX, SIZE, SOME_TERM, BadMessage, Frame, in_range


def _convert(o, kind, what: str):
    """``o`` (JSON values) as ``kind``; BadMessage naming ``what`` and the field that does
    not fit."""
    try:
        return msgspec.convert(o, kind)
    except msgspec.ValidationError as exc:
        raise BadMessage(f"{what}: {exc}") from None


# -- WATERMARKS ------------------------------------------------------------------------------

class ReplicationRow(msgspec.Struct, frozen=True):
    """What a leader's dispatcher says of one follower (cluster/raft/dispatcher.py
    Dispatcher.describe): its state, what it acknowledged (``watermark``), what goes to it
    next, how far behind it is, what is in flight to it, and what went wrong last."""

    peer: str
    state: str
    watermark: int
    next_index: int
    lag_entries: int
    lag_bytes: int
    in_flight: int
    in_flight_bytes: int
    ms_since_ack: int | None
    last_error: str
    note: str


class WatermarkRow(msgspec.Struct, frozen=True):
    """One member in the leader's WATERMARKS answer (cluster/raft/leading.py
    Leader.watermarks), the leader's row first: a ReplicationRow's fields with the member's
    address, kind of membership (voter, learner; None for one being removed) and whether
    it answers, and the leader's id, term, end and commit index. Fields in the order the
    leader writes them."""

    peer: str
    address: str
    member: str | None
    alive: bool
    state: str
    watermark: int
    next_index: int
    lag_entries: int
    lag_bytes: int
    in_flight: int
    in_flight_bytes: int
    ms_since_ack: int | None
    lag_ms: int
    last_error: str
    note: str
    leader: str
    term: int
    leader_end_index: int
    committed_index: int

    def row(self) -> dict:
        """The row as the leader sent it (a dict, its keys in the leader's order)."""
        return msgspec.structs.asdict(self)


def watermark_rows(o: dict) -> list[WatermarkRow]:
    """A WATERMARKS answer's JSON object (SUCCESS): its ``peers`` rows, checked."""
    return _convert(o.get("peers"), list[WatermarkRow], "WATERMARKS answer")


# -- GET -------------------------------------------------------------------------------------

class EntryRow(msgspec.Struct, frozen=True, rename={"body_crc": "bodyCrc", "chain_crc": "chainCrc"}):
    """A committed entry a GET answered with: where it lies (``index``, ``term``, ``pos``,
    ``size``: header and body), its ``magic``, its ``body`` (bytes: base64 in the JSON
    form), and its CRCs and channel (0 when a node does not say them). The JSON form's field
    names are DLedger's (``bodyCrc``, ``chainCrc``)."""

    index: int
    term: int
    pos: int
    size: int
    magic: int
    body: bytes
    body_crc: int = 0
    chain_crc: int = 0
    channel: int = 0


def entry_rows(entries) -> list[EntryRow]:
    """The ``entries`` of a GET answer in JSON (DLedger's entry objects), checked."""
    return _convert(entries, list[EntryRow], "GET answer")


# -- METADATA --------------------------------------------------------------------------------

class NodeState(msgspec.Struct, frozen=True):
    """A member's METADATA answer: the fields code reads, typed, and ``other``.

    What a dledgerctl node says depends on its role and features (cluster/node/requests.py
    Requests.metadata): a leader adds its ``replication`` rows, a node with a state machine
    ``state_machine`` and its ``applied_index``/``snapshot_index`` (UNSET without one), a
    node running the scrub its ``scrub`` row (a dict as the node wrote it: ``cluster status``
    shows it whole), a follower refusing pushes ``push_refused``.
    Those that some code reads are typed here (None, or UNSET, when the node does not say
    them). Everything else the node said (``voted_for``, ``end_term``, ``pending``,
    ``pushes_refused``, ``flush``, ``flush_interval_ms``, DLedger's ``leaderId``, ...) is
    carried in ``other`` as it came, not typed nor checked: no code decides anything by it.

    A Java DLedger node says only its group, leader (``leaderId``) and peers: its ``id`` is
    the member asked, its ``role`` leader when it names itself, follower when it names
    another, candidate when none, its ``impl`` "dledger" and its ``term`` None (Client.status
    asks for it: Client.java_term); a dledgerctl node's ``impl`` is "dledgerctl"."""

    id: str
    role: str
    impl: str
    group: str | None = None
    term: int | None = None
    leader: str | None = None
    member: str | None = None
    begin_index: int | None = None
    end_index: int | None = None
    committed_index: int | None = None
    never_lead: bool = False
    voters: list[str] | None = None
    learners: list[str] | None = None
    config_index: int | None = None
    address: str | None = None
    peers: dict[str, str] = {}
    replication: list[ReplicationRow] = []
    state_machine: str | None = None
    applied_index: int | None | UnsetType = UNSET
    snapshot_index: int | None | UnsetType = UNSET
    push_refused: str | None = None
    scrub: dict[str, Any] | None = None
    pid: int | None = None
    other: dict[str, Any] = {}


_TYPED = frozenset(NodeState.__struct_fields__) - {"other"}


def node_state(o: dict, peer: str) -> NodeState:
    """A METADATA answer's JSON object (SUCCESS) from member ``peer``, checked. A Java
    DLedger node's (no ``role``: it says only group, leaderId and peers) is completed as
    NodeState says."""
    if "role" not in o:
        leader = o.get("leaderId")
        o = {**o, "id": peer, "leader": leader, "impl": "dledger",
             "role": "leader" if leader == peer else "follower" if leader else "candidate"}
    else:
        o = {**o, "impl": "dledgerctl"}
    state = _convert(o, NodeState, "METADATA answer")
    other = {k: v for k, v in o.items() if k not in _TYPED}
    return msgspec.structs.replace(state, other=other) if other else state


# -- APPEND ----------------------------------------------------------------------------------

class _AppendWire(msgspec.Struct):
    code: int = -1
    term: int = -1
    leaderId: str | None = None
    remark: str | None = ""
    entries: msgspec.Raw | UnsetType = UNSET


_append_decoder = msgspec.json.Decoder(_AppendWire)
_rows_decoder = msgspec.json.Decoder(list[list[int]])


class AnswerRows(Sequence):
    """The ``entries`` of an APPEND answer, ``[index, term, pos, size]`` per body, read
    from their JSON when first used. A client that only waits for the acknowledgement
    (a producer, the benchmark) never builds the rows, which at 64 bodies were most of
    decoding an answer (3.0 us now, 10.5 with the rows). Equal to the list of rows."""

    __slots__ = ("_raw", "_rows")

    def __init__(self, raw: bytes) -> None:
        self._raw, self._rows = raw, None

    def _list(self) -> list:
        if self._rows is None:
            try:
                rows = _rows_decoder.decode(self._raw)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
                raise BadMessage(f"APPEND answer: entries do not fit: {exc}") from None
            if any(len(r) != 4 for r in rows):
                raise BadMessage("APPEND answer: an entry is not [index, term, pos, size]")
            self._rows = rows
        return self._rows

    def __len__(self) -> int:
        return len(self._list())

    def __getitem__(self, i):
        return self._list()[i]

    def __iter__(self):
        return iter(self._list())

    def __eq__(self, other) -> bool:
        if isinstance(other, AnswerRows):
            other = other._list()
        return self._list() == other if isinstance(other, list) else NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return repr(self._list())


class AppendAnswer(msgspec.Struct, frozen=True):
    """A leader's answer to an APPEND: its ``code`` (a Code's value), ``term``, the leader it
    names (``leader_id``: DLedger's ``leaderId``), ``remark``, and ``entries``: one row
    ``[index, term, pos, size]`` per body, in order (an :class:`AnswerRows`, or a list for a
    Java leader's answers), None when the leader listed none (a refusal)."""

    code: int
    term: int
    leader_id: str | None
    remark: str
    entries: Sequence | None = None


def append_answer(body: bytes) -> AppendAnswer:
    """An APPEND answer's JSON body; BadMessage if it does not fit."""
    try:
        a = _append_decoder.decode(body or b"{}")
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:  # (too deep: msgspec recurses)
        raise BadMessage(f"APPEND answer does not fit: {exc}") from None
    return AppendAnswer(a.code, a.term, a.leaderId, a.remark or "",
                        None if a.entries is UNSET else AnswerRows(a.entries))


# -- FORCE_COMPARE, FORCE_TRUNCATE -----------------------------------------------------------

class _Done(msgspec.Struct, frozen=True):
    """What an operator request did, as the leader says it."""

    def row(self) -> dict:
        """The answer as the leader sent it, without its code (a dict in the leader's order;
        an UNSET field left out)."""
        return msgspec.to_builtins(self)


class CompareAnswer(_Done, frozen=True):
    """What FORCE_COMPARE found (cluster/raft/divergence.py Divergence: both logs' bounds,
    ``match_index`` up to which they are equal, ``first_diff`` and the terms and digests
    there, ``truncate_from`` where the follower must be cut and ``to_cut`` how many that
    drops, the ``probes`` and ``compared`` entries it took) and what it did: ``dry_run``,
    ``dropped`` entries, ``repaired``, and ``kept``, the file a follower started with
    --keep-truncated wrote the cut entries to (UNSET when none). Fields in the leader's order
    (cluster/node/operator.py)."""

    peer: str
    mode: str
    leader_begin: int
    leader_end: int
    follower_begin: int
    follower_end: int
    follower_committed: int
    match_index: int
    first_diff: int | None
    truncate_from: int | None
    to_cut: int
    leader_term: int | None
    follower_term: int | None
    leader_digest: int | None
    follower_digest: int | None
    probes: int
    compared: int
    dry_run: bool
    dropped: int
    repaired: bool
    kept: str | UnsetType = UNSET


class TruncateAnswer(_Done, frozen=True):
    """What FORCE_TRUNCATE did: ``dropped`` entries of ``peer`` from ``from_index``, the
    follower's end and commit index after it, the leader's commit index, and ``kept`` as
    in :class:`CompareAnswer`."""

    peer: str
    from_index: int
    dropped: int
    follower_end: int
    follower_committed: int
    committed_index: int
    kept: str | UnsetType = UNSET


def compare_answer(o: dict) -> CompareAnswer:
    """A FORCE_COMPARE answer's JSON object (SUCCESS), checked."""
    return _convert(o, CompareAnswer, "FORCE_COMPARE answer")


def truncate_answer(o: dict) -> TruncateAnswer:
    """A FORCE_TRUNCATE answer's JSON object (SUCCESS), checked."""
    return _convert(o, TruncateAnswer, "FORCE_TRUNCATE answer")


# -- SNAPSHOT_READ ---------------------------------------------------------------------------

class SnapshotChunk(msgspec.Struct, frozen=True):
    """A chunk of a member's state-machine snapshot: the snapshot's ``index`` (the entry it
    is as of; -1: the member has none), ``term``, ``size`` and ``crc`` (crc32 of all of
    it), and ``data`` from ``offset``."""

    index: int
    term: int
    size: int
    crc: int
    offset: int
    data: bytes


def snapshot_chunk(f: Frame) -> SnapshotChunk:
    """SNAPSHOT_READ's binary answer (api.py), every number range-checked; BadMessage when it
    does not fit (a chunk past the snapshot's size, a field missing or not a number)."""
    try:
        index, term, size, crc, offset = (int(f.ext[k]) for k in ("index", "term", "size", "crc", "offset"))
    except (KeyError, ValueError):
        raise BadMessage("SNAPSHOT_READ answer: index, term, size, crc and offset must be integers") from None
    in_range(index, INDEX, "index")
    in_range(term, SOME_TERM, "term")
    in_range(size, SIZE, "size")
    in_range(crc, CRC, "crc")
    in_range(offset, SIZE, "offset")
    data = bytes(f.body or b"")
    if offset + len(data) > size:
        raise BadMessage(f"SNAPSHOT_READ answer: {len(data)} bytes at {offset} do not fit a snapshot of {size}")
    return SnapshotChunk(index, term, size, crc & 0xFFFFFFFF, offset, data)
