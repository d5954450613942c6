"""The answers a client reads back as typed rows: a member's state (METADATA), the entries
of a GET, the leader's replication rows (WATERMARKS). Sans-I/O.

Each is decoded with msgspec from the answer's JSON object (or, for a binary GET answer,
built from the entries' headers), its fields' types checked: a field of the wrong type
(``end_index`` a string, say) is a BadMessage of one line that says which field, which the
client turns into the error of the member that sent it. Unknown fields are ignored (a
newer node may say more); the wire is api.py's, unchanged.

Where a command renders a whole answer (``peer watermarks``), :meth:`WatermarkRow.row`
gives it back as a dict with the keys a leader writes, in its order (cluster/raft/leading.py
Leader.watermarks), so that the output is what the leader sent. A field this version does
not know is not shown: it is added here first.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from .frames import BadMessage


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
