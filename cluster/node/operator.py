"""Operator requests a leader serves about one follower, through :class:`OperatorRequests`,
a base of the Node (cluster/node/process.py): WATERMARKS (every peer's replication state),
FORCE_COMPARE (find where a follower's log leaves the leader's, by probes; with a repair
unless it is a dry run) and FORCE_TRUNCATE (cut a follower back past what is committed
nowhere). Replication to the follower pauses while it is repaired and starts again from a
COMPARE.
"""

from __future__ import annotations

from store.errors import StoreError
from store.kept import KEPT_IN

from ..net.frames import BadMessage, Frame, ProtocolError, json_object
from ..net.transport import TransportError
from ..net.wire import (
    ENTRY_INDEX,
    FORCE_COMPARE,
    WATERMARKS,
    decode_response,
    get_field,
    request_code_of,
    response_frame,
)
from ..raft.divergence import DivergenceSearch
from ..raft.rpc import Code, ProbeRequest, RepairRequest


class OperatorRequests:
    """Operator requests (a base of Node: cfg, core, store, channels, and Serving's _refusal)."""

    def _operator(self, f: Frame):
        """Checks the request now; WATERMARKS is answered at once, the others (which talk
        to the follower) return an awaitable of the answer."""
        o = json_object(f.body)
        if get_field(o, "group", str, self.cfg.group) != self.cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {self.cfg.group!r}")
        peer = get_field(o, "peer", str, None) if f.code != WATERMARKS else None
        if f.code != WATERMARKS and peer is None:
            raise BadMessage("missing field 'peer'")
        refused = self.core.refuse_operator(peer)
        if refused is not None:
            return self._refusal(f, *refused)
        if f.code == WATERMARKS:
            return response_frame({"code": int(Code.SUCCESS), "peers": self.core.watermarks(self.now())}, f.opaque,
                                  f.code)
        if f.code == FORCE_COMPARE:
            return self._force_compare(f, peer, get_field(o, "deep", bool, False), get_field(o, "dryRun", bool, False))
        return self._force_truncate(f, peer, get_field(o, "fromIndex", ENTRY_INDEX))

    async def _ask(self, peer: str, req):
        """One request to a peer outside the core's own traffic; its decoded answer."""
        ch = self.channels.get(peer)
        if ch is None:
            raise TransportError(f"{peer} is no member now")
        frame = await ch.request(self._frame_for(peer, req), self.cfg.max_push_timeout_ms / 1000 * 5)
        return decode_response(frame, request_code_of(req))

    async def _force_compare(self, f: Frame, peer: str, deep: bool, dry_run: bool) -> Frame:
        c, term = self.cfg, self.core.member.term
        search = DivergenceSearch(self.store, peer, deep=deep)
        try:
            while (probe := search.next_probe()) is not None:
                if self.core.member.term != term or self.core.refuse_operator(peer):
                    return self._refusal(f, Code.TERM_CHANGED, "leadership changed during the compare")
                resp = await self._ask(peer, ProbeRequest(c.group, c.self_id, term, *probe))
                if resp.code != Code.SUCCESS:
                    return self._refusal(f, resp.code, f"{peer} answered the probe with {resp.code.name}: {resp.remark}")
                search.feed(resp)
            out = {"code": int(Code.SUCCESS), **search.result.as_row(), "dry_run": dry_run, "dropped": 0,
                   "repaired": False}
            if not dry_run:
                result = search.result
                if result.truncate_from is not None:
                    repaired = await self._repair(f, peer, result.truncate_from, term,
                                                  f"compare found {peer} differs from {result.truncate_from}")
                    if isinstance(repaired, Frame):
                        return repaired
                    out["dropped"], out["repaired"] = repaired.dropped, True
                    out.update(_kept(repaired))
                self.core.compare_peer(peer, result.match_index, "an operator asked for a compare", self.now())
                self._process()
            return response_frame(out, f.opaque, f.code)
        except (TransportError, ProtocolError) as exc:
            return self._refusal(f, Code.NETWORK_ERROR, f"{peer}: {exc}")
        except StoreError as exc:
            return self._refusal(f, Code.DISK_ERROR, f"the leader's own log: {exc}")

    async def _force_truncate(self, f: Frame, peer: str, from_index: int) -> Frame:
        committed = self.store.committed_index
        if from_index <= committed:
            return self._refusal(f, Code.UNEXPECTED_ARGUMENT,
                                 f"refusing to cut {peer} from {from_index}: entries up to {committed} are committed "
                                 f"(cutting them could lose data)")
        try:
            repaired = await self._repair(f, peer, from_index, self.core.member.term,
                                          f"an operator cuts {peer} from {from_index}")
        except (TransportError, ProtocolError) as exc:
            return self._refusal(f, Code.NETWORK_ERROR, f"{peer}: {exc}")
        if isinstance(repaired, Frame):
            return repaired
        self.core.compare_peer(peer, from_index - 1, "re-filling after an operator's truncation", self.now())
        self._process()
        return response_frame({"code": int(Code.SUCCESS), "peer": peer, "from_index": from_index,
                               "dropped": repaired.dropped, "follower_end": repaired.end_index,
                               "follower_committed": repaired.committed_index, "committed_index": committed,
                               **_kept(repaired)}, f.opaque, f.code)

    async def _repair(self, f: Frame, peer: str, from_index: int, term: int, why: str):
        """Pause replication to ``peer``, have it drop entries from ``from_index``: the
        RepairResponse, or a refusal Frame. Replication stays paused until the caller sends
        the dispatcher back to COMPARE (or, on failure, it is resumed here)."""
        c = self.cfg
        if self.core.member.term != term or not self.core.pause_peer(peer, from_index - 1, why):
            return self._refusal(f, Code.TERM_CHANGED, "leadership changed before the truncation was sent")
        try:
            resp = await self._ask(peer, RepairRequest(c.group, c.self_id, term, from_index))
        except BaseException:
            self.core.compare_peer(peer, from_index - 1, "repair failed", self.now())
            raise
        if resp.code != Code.SUCCESS:
            self.core.compare_peer(peer, from_index - 1, "repair refused", self.now())
            self._process()
            return self._refusal(f, resp.code, f"{peer} refused the truncation: {resp.remark}")
        return resp


def _kept(resp) -> dict:
    """``kept``: the file a follower started with --keep-truncated wrote the cut entries to."""
    return {"kept": resp.remark[len(KEPT_IN):]} if resp.remark.startswith(KEPT_IN) else {}
