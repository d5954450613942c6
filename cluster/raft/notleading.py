"""The calls only a leader serves, as a follower or a candidate answers them. RaftCore
(core.py) holds one of these as its ``role`` while it does not lead, and the Leader
(leading.py) while it does: each call of the node or of a peer that depends on leading goes
to ``role``, which is swapped on every role change (etcd-io/raft swaps its ``step``
function the same way), so no call asks "is there a leader?" first.

Here: appends, membership changes and linearizable reads are refused NOT_LEADER, naming the
leader this member knows; answers to requests of a leadership that has ended are dropped;
operator requests about followers are refused; there is nothing to expire, replicate,
transfer, keep for followers, or describe.
"""

from __future__ import annotations

from .member import MemberState
from .proposal import Proposal
from .rpc import Code, LeadershipTransferRequest, LeadershipTransferResponse


class NotLeading:
    """A follower's or candidate's answers to the leader's calls. ``member``: whose leader
    to name; ``reads`` (reads.py): refuses linearizable reads in its own words."""

    dispatchers: dict = {}  # (read only: none here)
    pending = ()
    transfer = None
    said = ""

    def __init__(self, member: MemberState, reads) -> None:
        self.member, self.reads = member, reads

    def _leader_is(self) -> str:
        return f"leader is {self.member.leader_id or 'unknown'}"

    # -- what the node and its clients ask ---------------------------------------------
    def propose(self, p: Proposal, bodies, now: int) -> Proposal:
        p.code, p.remark = Code.NOT_LEADER, self._leader_is()
        return p

    def change_members(self, kind: str, node: str, address: str | None, now: int) -> Proposal:
        m = self.member
        p = Proposal(1, m.term, leader_id=m.leader_id)
        p.code, p.remark = Code.NOT_LEADER, self._leader_is()
        return p

    def read_index(self, now: int, joins: int):
        return self.reads.refuse(now)

    def refuse_operator(self, peer: str | None) -> tuple[Code, str] | None:
        return Code.NOT_LEADER, self._leader_is()

    def on_transfer(self, req: LeadershipTransferRequest, now: int) -> LeadershipTransferResponse:
        return LeadershipTransferResponse(self.member.term, Code.NOT_LEADER, self._leader_is())

    def watermarks(self, now: int) -> list[dict]:
        return []

    def pause_peer(self, peer: str, below: int, why: str) -> bool:
        return False

    def describe(self, now: int) -> dict:
        return {}

    # -- nothing to do ----------------------------------------------------------------
    def step_down(self) -> None:
        pass

    def expire(self, now: int) -> None:
        pass

    def on_response(self, peer: str, req, resp, now: int) -> None:
        pass

    def on_failure(self, peer: str, req, why: str, now: int) -> None:
        pass

    def on_peer_lost(self, peer: str, now: int) -> None:
        pass

    def start_transfer(self, target: str, now: int) -> None:
        pass

    def compare_peer(self, peer: str, index: int, why: str, now: int) -> None:
        pass

    def speak_java(self, peer: str) -> None:
        pass

    def follow_members(self, new, now: int) -> None:
        pass

    def live_watermarks(self, now: int) -> None:
        return None  # (no followers to keep entries for)

    def cut_off(self, peer: str, note: str) -> None:
        pass
