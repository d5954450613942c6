"""Requests only members send each other (VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER, PROBE,
REPAIR, INSTALL_SNAPSHOT), through :class:`PeerRequests`, a part of the request handler
(requests.py): decoded by cluster/net/wire.py (a Java leader's PUSH by cluster/net/dialect.py),
checked against their sender, handed to the core (raft/core.py ``handle``) and answered with
what it says. A VOTE or HEART_BEAT whose ``remoteId`` names another member is refused
UNKNOWN_MEMBER, as DLedger refuses it (DLedgerServer.handleVote/handleHeartBeat).
"""

from __future__ import annotations

import logging
import time

from ..net import dialect
from ..net.frames import Frame, get_field, json_object
from ..net.repeats import Repeats, held_back
from ..net.tls import OPERATOR, PEER
from ..net.wire import (
    HEART_BEAT,
    INSTALL_SNAPSHOT,
    LEADERSHIP_TRANSFER,
    PROBE,
    PUSH,
    REPAIR,
    VOTE,
    decode_request,
    response_frame,
)
from ..raft.rpc import Code, HeartBeatResponse, LeadershipTransferRequest, VoteResponse, VoteResult
from .nodeview import NodeView

log = logging.getLogger("dledgerctl.node")

# requests only members send each other (decoded, then checked against their sender)
PEER_CODES = frozenset({VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER, PROBE, REPAIR, INSTALL_SNAPSHOT})


class PeerRequests:
    """Members' requests to this node. ``denied(f, conn, need, sender)``: the handler's TLS
    check (a refusal Frame, or None); ``misaddressed``: VOTEs and HEART_BEATs for another
    member, logged per host."""

    def __init__(self, node: NodeView, denied, misaddressed: Repeats) -> None:
        self.node, self._denied, self._misaddressed_seen = node, denied, misaddressed

    def serve(self, f: Frame, conn) -> Frame:
        """The core's answer to a member's request (BadMessage when it does not decode)."""
        node = self.node
        if f.code in (VOTE, HEART_BEAT):
            misaddressed = self._misaddressed(f, conn)
            if misaddressed is not None:
                return misaddressed
        if f.code == PUSH and "term" not in f.ext:  # a Java leader's: JSON, entries as objects
            req = dialect.decode_push(f.body)
        else:
            req = decode_request(f)
        if node.tls is not None:
            taking = type(req) is LeadershipTransferRequest and not req.take
            denied = self._denied(f, conn, OPERATOR if taking else PEER, None if taking else req.leader_id)
            if denied is not None:
                return denied
        started = time.perf_counter() if f.code == INSTALL_SNAPSHOT else 0.0  # (timed: installs only)
        # (a Java member is learnt from its request only once the core has taken it; an
        # operator's cut, REPAIR, is kept by the store, which the node opened with a keeper for
        # it, and the core's answer names the file: LogStore.cut_ordered)
        resp = node.core.handle(req, node.now(), java=f.language == "JAVA")
        if f.code == PUSH and resp.code == Code.SUCCESS and req.count:
            node.counts.received_entries += req.count
            node.counts.received_bytes += len(req.entries)
        elif f.code == INSTALL_SNAPSHOT and resp.installed:
            node.counts.snapshot_install.observe(time.perf_counter() - started)
        node.process()
        if f.code == INSTALL_SNAPSHOT and resp.installed:
            node.apply_soon()  # (queries waiting for what the snapshot holds are answered)
        return response_frame(resp, f.opaque, f.code)

    def _misaddressed(self, f: Frame, conn) -> Frame | None:
        """UNKNOWN_MEMBER for a VOTE or HEART_BEAT meant for another member (its ``remoteId``),
        with the leader this node knows, as DLedger answers it: a vote or a leader's beat for
        someone else (a member reached at an address that is now another's) must not count
        here. None when it names this node, or nobody (earlier dledgerctl members did not)."""
        node = self.node
        remote = get_field(json_object(f.body), "remoteId", str, None)
        if remote is None or remote == node.cfg.self_id:
            return None
        m = node.core.member
        node.counts.refusal(Code.UNKNOWN_MEMBER.name)
        host = conn.peer[0] if conn.peer else None
        held = self._misaddressed_seen.check(("misaddressed", host), time.monotonic())
        if held is not None:
            log.warning("refused request code %d from %s: it is for %s, this is %s%s", f.code, host, remote,
                        node.cfg.self_id, held_back(held))
        resp = (VoteResponse(m.term, VoteResult.REJECT_UNKNOWN_LEADER, Code.UNKNOWN_MEMBER) if f.code == VOTE else
                HeartBeatResponse(m.term, Code.UNKNOWN_MEMBER, m.leader_id))
        return response_frame(resp, f.opaque, f.code)
