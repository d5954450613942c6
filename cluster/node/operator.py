"""Operator requests a leader serves, through :class:`Operator`, a part of the request handler
(requests.py): WATERMARKS (every peer's replication state), FORCE_COMPARE (find where a
follower's log leaves the leader's, by probes; with a repair unless it is a dry run),
FORCE_TRUNCATE (cut a follower back past what is committed nowhere) and CHANGE_MEMBERS (add
a learner or remove a member through a config entry). Replication to a follower pauses while
it is repaired and starts again from a COMPARE.
"""

from __future__ import annotations

from store.errors import StoreError
from store.kept import KEPT_IN

from ..net import api
from ..net.frames import Frame, ProtocolError
from ..net.transport import TransportError
from ..net.api import answer_frame
from ..net.wire import decode_response, request_code_of
from ..raft.divergence import DivergenceSearch
from ..raft.proposal import Proposal
from ..raft.rpc import Code, ProbeRequest, RepairRequest
from .nodeview import NodeView


class Operator:
    """Operator requests, and the membership changes waiting for their config entry to
    commit (``changes``). ``refusal(f, code, remark, leader)``: the handler's refusal answer."""

    def __init__(self, node: NodeView, refusal) -> None:
        self.node, self._refusal = node, refusal
        self.changes: dict[int, object] = {}  # membership changes waiting for their entry to commit: futures

    def _refused(self, req, f: Frame) -> Frame | None:
        """The refusal of an operator request this node may not serve (another group; not
        the leader, or no such peer: the core's refuse_operator), or None."""
        node = self.node
        if req.group is not None and req.group != node.cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {node.cfg.group!r}")
        refused = node.core.refuse_operator(getattr(req, "peer", None))
        return None if refused is None else self._refusal(f, *refused)

    def watermarks(self, req: api.Watermarks, f: Frame, conn=None) -> Frame:
        node = self.node
        return self._refused(req, f) or answer_frame(api.OperatorAnswer({"peers": node.core.watermarks(node.now())}),
                                                     f.opaque)

    def force_compare(self, req: api.ForceCompare, f: Frame, conn=None):
        """Checked now; the answer (which talks to the follower) is an awaitable."""
        return self._refused(req, f) or self._force_compare(f, req.peer, req.deep, req.dry_run)

    def force_truncate(self, req: api.ForceTruncate, f: Frame, conn=None):
        """Checked now; the answer (which talks to the follower) is an awaitable."""
        return self._refused(req, f) or self._force_truncate(f, req.peer, req.from_index)

    async def _ask(self, peer: str, req):
        """One request to a peer outside the core's own traffic; its decoded answer."""
        node = self.node
        ch = node.channels.get(peer)
        if ch is None:
            raise TransportError(f"{peer} is no member now")
        frame = await ch.request(node.frame_for(peer, req), node.cfg.max_push_timeout_ms / 1000 * 5)
        return decode_response(frame, request_code_of(req))

    async def _force_compare(self, f: Frame, peer: str, deep: bool, dry_run: bool) -> Frame:
        node = self.node
        c, term = node.cfg, node.core.member.term
        search = DivergenceSearch(node.store, peer, deep=deep)
        try:
            while (probe := search.next_probe()) is not None:
                if node.core.member.term != term or node.core.refuse_operator(peer):
                    return self._refusal(f, Code.TERM_CHANGED, "leadership changed during the compare")
                resp = await self._ask(peer, ProbeRequest(c.group, c.self_id, term, *probe))
                if resp.code != Code.SUCCESS:
                    return self._refusal(f, resp.code, f"{peer} answered the probe with {resp.code.name}: {resp.remark}")
                search.feed(resp)
            out = {**search.result.as_row(), "dry_run": dry_run, "dropped": 0, "repaired": False}
            if not dry_run:
                result = search.result
                if result.truncate_from is not None:
                    repaired = await self._repair(f, peer, result.truncate_from, term,
                                                  f"compare found {peer} differs from {result.truncate_from}")
                    if isinstance(repaired, Frame):
                        return repaired
                    out["dropped"], out["repaired"] = repaired.dropped, True
                    out.update(_kept(repaired))
                node.core.compare_peer(peer, result.match_index, "an operator asked for a compare", node.now())
                node.process()
            return answer_frame(api.OperatorAnswer(out), f.opaque)
        except (TransportError, ProtocolError) as exc:
            return self._refusal(f, Code.NETWORK_ERROR, f"{peer}: {exc}")
        except StoreError as exc:
            return self._refusal(f, Code.DISK_ERROR, f"the leader's own log: {exc}")

    async def _force_truncate(self, f: Frame, peer: str, from_index: int) -> Frame:
        node = self.node
        committed = node.store.committed_index
        if from_index <= committed:
            return self._refusal(f, Code.UNEXPECTED_ARGUMENT,
                                 f"refusing to cut {peer} from {from_index}: entries up to {committed} are committed "
                                 f"(cutting them could lose data)")
        try:
            repaired = await self._repair(f, peer, from_index, node.core.member.term,
                                          f"an operator cuts {peer} from {from_index}")
        except (TransportError, ProtocolError) as exc:
            return self._refusal(f, Code.NETWORK_ERROR, f"{peer}: {exc}")
        if isinstance(repaired, Frame):
            return repaired
        node.core.compare_peer(peer, from_index - 1, "re-filling after an operator's truncation", node.now())
        node.process()
        return answer_frame(api.OperatorAnswer({
            "peer": peer, "from_index": from_index, "dropped": repaired.dropped, "follower_end": repaired.end_index,
            "follower_committed": repaired.committed_index, "committed_index": committed, **_kept(repaired)}), f.opaque)

    async def _repair(self, f: Frame, peer: str, from_index: int, term: int, why: str):
        """Pause replication to ``peer``, have it drop entries from ``from_index``: the
        RepairResponse, or a refusal Frame. Replication stays paused until the caller sends
        the dispatcher back to COMPARE (or, on failure, it is resumed here)."""
        node = self.node
        c = node.cfg
        if node.core.member.term != term or not node.core.pause_peer(peer, from_index - 1, why):
            return self._refusal(f, Code.TERM_CHANGED, "leadership changed before the truncation was sent")
        try:
            resp = await self._ask(peer, RepairRequest(c.group, c.self_id, term, from_index))
        except BaseException:
            node.core.compare_peer(peer, from_index - 1, "repair failed", node.now())
            raise
        if resp.code != Code.SUCCESS:
            node.core.compare_peer(peer, from_index - 1, "repair refused", node.now())
            node.process()
            return self._refusal(f, resp.code, f"{peer} refused the truncation: {resp.remark}")
        return resp


    # -- membership changes (peer add | remove | replace) -----------------------------
    def change_members(self, req: api.ChangeMembers, f: Frame, conn=None):
        """CHANGE_MEMBERS: the leader appends the config entry and answers once it commits
        (or at once when it refuses): code, remark, index, and the members then."""
        node = self.node
        if req.group is not None and req.group != node.cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {node.cfg.group!r}")
        p = node.core.change_members(req.kind, req.node, req.address, node.now())
        node.process()
        if p.done:
            return self._change_answer(f, p)
        fut = self.changes[id(p)] = node.loop.create_future()

        async def later() -> Frame:
            await fut
            return self._change_answer(f, p)
        return later()

    def finish(self, p: Proposal) -> bool:
        """Wake the change waiting for proposal ``p``, done; False when it is none of theirs."""
        fut = self.changes.pop(id(p), None)
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(None)
        return True

    def _change_answer(self, f: Frame, p: Proposal) -> Frame:
        node = self.node
        m = node.core.members
        return answer_frame(api.ChangeAnswer(p.code, p.remark, p.first_index, p.term, node.core.member.leader_id,
                                             list(m.voters), list(m.learners),
                                             {k: peer.address for k, peer in m.members.items()}), f.opaque)


def _kept(resp) -> dict:
    """``kept``: the file a follower started with --keep-truncated wrote the cut entries to."""
    return {"kept": resp.remark[len(KEPT_IN):]} if resp.remark.startswith(KEPT_IN) else {}
