"""What the deciding logic hands back: a Proposal per client append (and per config entry),
finished when committed, refused or timed out; Ready, what the node must do after a call
(requests to send, notes for the log); and Finished, the clients' requests the core has
finished since (proposals, and linearizable reads, raft/reads.py), for whoever holds them."""

from __future__ import annotations

from dataclasses import dataclass, field

from .rpc import Code, Send


@dataclass
class Proposal:
    """A client append. ``code`` is None while it waits for the quorum."""

    count: int
    term: int = -1
    first_index: int = -1
    last_index: int = -1
    appended: list = field(default_factory=list)
    deadline: int = 0
    code: Code | None = None
    leader_id: str | None = None  # with NOT_LEADER: who leads, if known
    remark: str = ""

    @property
    def done(self) -> bool:
        return self.code is not None


class Note(str):
    """A line for the node's log; ``fields`` carry its numbers by name, for machines
    (``--log-format json``). Everything else reads it as the text it is."""

    fields: dict

    def __new__(cls, text: str, fields: dict | None = None) -> "Note":
        note = super().__new__(cls, text)
        note.fields = fields or {}
        return note


@dataclass(slots=True)
class Ready:
    """RaftCore.take(): what the node must do (the loop's)."""

    sends: list[Send]
    notes: list[str]


@dataclass(slots=True)
class Finished:
    """RaftCore.take_finished(): what the clients asked that the core has finished (the
    request handler's, which holds the requests)."""

    proposals: list[Proposal]
    reads: list = field(default_factory=list)  # ReadIndex reads done (raft/reads.py)
