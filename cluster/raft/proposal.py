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


@dataclass(slots=True)
class Clock:
    """The time of the call being handled, in ms: the core sets it as every call enters, and
    the parts that act later in the same call (a commit, a read round) read it here."""

    now: int


class Outbox:
    """What the parts of the core hand out as they decide, until the node takes it: requests
    to send, notes for its log, proposals finished. Each part that sends, says or finishes
    something is given this, not the core (RaftCore.take and take_finished empty it)."""

    __slots__ = ("sends", "notes", "done")

    def __init__(self) -> None:
        self.sends: list[Send] = []
        self.notes: list[str] = []
        self.done: list[Proposal] = []

    def send(self, to: str, request) -> None:
        self.sends.append(Send(to, request))

    def note(self, text: str, **fields) -> None:
        self.notes.append(Note(text, fields) if fields else text)

    def finish(self, p: Proposal, code: Code, remark: str = "") -> None:
        p.code, p.remark = code, remark
        self.done.append(p)

    def take(self) -> Ready:
        ready = Ready(self.sends, self.notes)
        self.sends, self.notes = [], []
        return ready

    def take_done(self) -> list[Proposal]:
        done, self.done = self.done, []
        return done
