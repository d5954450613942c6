"""What the deciding logic hands back for appends: a Proposal per client append (and per
config entry), finished when committed, refused or timed out; and Ready, what a call left
to do (requests to send, proposals finished, notes for the log)."""

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


@dataclass
class Ready:
    sends: list[Send]
    done: list[Proposal]
    notes: list[str]
    reads: list = field(default_factory=list)  # ReadIndex reads done (raft/reads.py)
