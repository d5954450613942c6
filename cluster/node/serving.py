"""What a node answers: every frame its server reads, through :class:`Serving`, a base of
the Node (cluster/node/process.py).

Peer requests are decoded and handed to the core (raft/core.py ``handle``); client
requests are answered here: METADATA and STATUS, APPEND (ours, and DLedger's
AppendEntryRequest), GET (ours, and DLedger's GetEntriesRequest), QUERY (the state
machine), CHANGE_MEMBERS. Appends are the hot path: queued per loop iteration and proposed
together (_propose_batch), answered once the core says their proposal is done. Under TLS
every request is checked against its connection's identity first. A request that does not
decode is answered UNEXPECTED_ARGUMENT with the reason, and changes nothing: requests are
checked before any awaiting begins, and an awaited answer that still finds one bad is
answered the same way (never "internal error"). A VOTE or HEART_BEAT whose ``remoteId``
names another member is refused UNKNOWN_MEMBER, as DLedger refuses it
(DLedgerServer.handleVote/handleHeartBeat). What a peer or client can make the node log
goes through a rate limit (cluster/net/repeats.py): at most a line per host and kind
every 10 s, with a count of what was held back.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import os
import time

from store.base import appended_rows
from store.errors import StoreError
from store.kept import KEPT_IN
from store.packed import PackedBodies

from ..net import dialect, getraw
from ..net.appends import append_answers, check_bodies
from ..net.frames import (
    REMOTING_NO_PERMISSION,
    REMOTING_NOT_SUPPORTED,
    BadMessage,
    Frame,
    error_frame,
    json_body,
    json_object,
    response_bytes,
)
from ..net.repeats import held_back
from ..net.tls import CLIENT, OPERATOR, PEER, refusal
from ..net.wire import (
    APPEND,
    CHANGE_MEMBERS,
    COUNT,
    FORCE_COMPARE,
    FORCE_TRUNCATE,
    GET,
    HEART_BEAT,
    INDEX,
    INSTALL_SNAPSHOT,
    LEADERSHIP_TRANSFER,
    METADATA,
    OPERATOR_CODES,
    PROBE,
    PUSH,
    QUERY,
    READ_INDEX,
    REPAIR,
    STATUS,
    VOTE,
    decode_request,
    ext_int,
    get_field,
    response_frame,
)
from ..raft.proposal import Proposal
from ..raft.rpc import Code, HeartBeatResponse, LeadershipTransferRequest, RepairResponse, VoteResponse, VoteResult
from ..raft.statemachine import KeyValue, StateMachineError
from .reads import LINEARIZABLE, SERIALIZABLE, consistency_of

log = logging.getLogger("dledgerctl.node")

# requests only members send each other (decoded, then checked against their sender)
_PEER_CODES = frozenset({VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER, PROBE, REPAIR, INSTALL_SNAPSHOT})


def _client_need(f: Frame) -> str:
    """What a client request needs under TLS: an operator for what changes a replica."""
    if f.code in (FORCE_TRUNCATE, CHANGE_MEMBERS):
        return OPERATOR
    if f.code == FORCE_COMPARE:
        try:
            return CLIENT if json_object(f.body).get("dryRun") is True else OPERATOR
        except BadMessage:
            return OPERATOR
    return CLIENT


MAX_GET_COUNT = 1024
MAX_GET_BYTES = 16 << 20


class Serving:
    """The node's answers (a base of Node, whose state it uses: cfg, core, store, counts,
    loop, tls, applier and the queues of appends, changes and queries)."""

    def _serve(self, f: Frame, conn):
        """The answer to a frame: a Frame now, None when it comes later through ``conn``
        (APPEND), or an awaitable of one (operator requests, reads that wait)."""
        try:
            out = self._answer(f, conn)
        except BadMessage as exc:
            return self._bad_request(f, conn, exc)
        if out is None or isinstance(out, Frame):
            return out
        return self._awaited(f, conn, out)

    async def _awaited(self, f: Frame, conn, out) -> Frame:
        try:
            return await out
        except BadMessage as exc:  # (a check made late: still the request's fault, answered so)
            return self._bad_request(f, conn, exc)

    def _bad_request(self, f: Frame, conn, exc: BadMessage) -> Frame:
        """UNEXPECTED_ARGUMENT with the reason (REMOTING_NOT_SUPPORTED for a code no peer
        request has); a warning per host every 10 s at most."""
        if f.code == APPEND:
            self.counts.appends_answered("BAD_REQUEST", 1)
        else:
            self.counts.refusal("BAD_REQUEST")
        host = conn.peer[0] if conn.peer else None
        held = self._bad_requests.check(host, time.monotonic())
        if held is not None:
            log.warning("refused request code %d from %s: %s%s", f.code, host, exc, held_back(held))
        if "not a peer request" in str(exc):
            return error_frame(f.opaque, REMOTING_NOT_SUPPORTED, str(exc))
        # (answered, not dropped: a peer or client with a bug learns why; nothing here changed)
        return response_frame({"code": int(Code.UNEXPECTED_ARGUMENT), "term": self.core.member.term,
                               "leaderId": self.core.member.leader_id, "remark": str(exc)}, f.opaque, f.code)

    def _answer(self, f: Frame, conn):
        """_serve's answer; BadMessage for a request that does not decode."""
        if conn.refused is not None:  # (its certificate is revoked: cluster/net/crl.py)
            self.counts.refusal("NO_PERMISSION")
            return error_frame(f.opaque, REMOTING_NO_PERMISSION, conn.refused)
        if self.tls is not None and f.code not in _PEER_CODES:
            denied = self._denied(f, conn, _client_need(f))
            if denied is not None:
                return denied
        if f.code == APPEND:
            return self._append(f, conn)
        if f.code == GET:
            started = time.perf_counter()
            try:
                return self._get(f, conn)
            finally:
                self.counts.read_latency.observe(time.perf_counter() - started)
        if f.code in (METADATA, STATUS):
            refused = self._check_addressee(f)
            return refused or response_frame(self._metadata(), f.opaque, f.code)
        if f.code in OPERATOR_CODES:
            return self._operator(f)
        if f.code == QUERY:
            return self._query(f, conn)
        if f.code == READ_INDEX:
            return self._serve_read_index(f)
        if f.code == CHANGE_MEMBERS:
            return self._change_members(f)
        if f.code in (VOTE, HEART_BEAT):
            misaddressed = self._misaddressed(f, conn)
            if misaddressed is not None:
                return misaddressed
        if f.code == PUSH and "term" not in f.ext:  # a Java leader's: JSON, entries as objects
            req = dialect.decode_push(f.body)
        else:
            req = decode_request(f)
        if self.tls is not None:
            taking = type(req) is LeadershipTransferRequest and not req.take
            denied = self._denied(f, conn, OPERATOR if taking else PEER, None if taking else req.leader_id)
            if denied is not None:
                return denied
        started = time.perf_counter() if f.code == INSTALL_SNAPSHOT else 0.0  # (timed: installs only)
        # (a Java member is learnt from its request only once the core has taken it)
        keeper = self.store.keeper  # (--keep-truncated: a repair's answer names the file it kept)
        kept = keeper.last if keeper is not None else None
        resp = self.core.handle(req, self.now(), java=f.language == "JAVA")
        if type(resp) is RepairResponse and keeper is not None and keeper.last != kept and resp.dropped:
            resp = dataclasses.replace(resp, remark=f"{KEPT_IN}{keeper.last}")
        if f.code == PUSH and resp.code == Code.SUCCESS and req.count:
            self.counts.received_entries += req.count
            self.counts.received_bytes += len(req.entries)
        elif f.code == INSTALL_SNAPSHOT and resp.installed:
            self.counts.snapshot_install.observe(time.perf_counter() - started)
        self._process()
        if f.code == INSTALL_SNAPSHOT and resp.installed and self.applier is not None and not self._applying:
            self._applying = True  # (queries waiting for what the snapshot holds are answered)
            self.loop.call_soon(self.supervisor.guard, "the state machine feed", self._apply)
        return response_frame(resp, f.opaque, f.code)

    def _misaddressed(self, f: Frame, conn) -> Frame | None:
        """UNKNOWN_MEMBER for a VOTE or HEART_BEAT meant for another member (its ``remoteId``),
        with the leader this node knows, as DLedger answers it: a vote or a leader's beat for
        someone else (a member reached at an address that is now another's) must not count
        here. None when it names this node, or nobody (earlier dledgerctl members did not)."""
        remote = get_field(json_object(f.body), "remoteId", str, None)
        if remote is None or remote == self.cfg.self_id:
            return None
        m = self.core.member
        self.counts.refusal(Code.UNKNOWN_MEMBER.name)
        host = conn.peer[0] if conn.peer else None
        held = self._bad_requests.check(("misaddressed", host), time.monotonic())
        if held is not None:
            log.warning("refused request code %d from %s: it is for %s, this is %s%s", f.code, host, remote,
                        self.cfg.self_id, held_back(held))
        resp = (VoteResponse(m.term, VoteResult.REJECT_UNKNOWN_LEADER, Code.UNKNOWN_MEMBER) if f.code == VOTE else
                HeartBeatResponse(m.term, Code.UNKNOWN_MEMBER, m.leader_id))
        return response_frame(resp, f.opaque, f.code)

    def _denied(self, f: Frame, conn, need: str, sender: str | None = None) -> Frame | None:
        """Under TLS: the refusal of a request its connection's identity may not make (one
        warning in the log per client, reason and minute), or None."""
        why = refusal(conn.identity, self.cfg.group, self.cfg.peers, need, sender)
        if why is None:
            return None
        key = (conn.peer[0] if conn.peer else None, why)
        now = time.monotonic()
        if now - self._refusals_logged.get(key, -60.0) >= 60.0:
            if len(self._refusals_logged) > 1024:
                self._refusals_logged.clear()
            self._refusals_logged[key] = now
            log.warning("refused request code %d from %s: %s", f.code, conn.peer, why)
        self.counts.refusal("NO_PERMISSION")
        return error_frame(f.opaque, REMOTING_NO_PERMISSION, why)

    def _refusal(self, f: Frame, code: Code, remark: str, leader: str | None = None) -> Frame:
        """A refused request's answer, naming the leader (``leader``, else the one this node knows)."""
        self.counts.refusal(code.name)
        leader = leader or self.core.member.leader_id
        out = {"code": int(code), "remark": remark, "leaderId": leader}
        if leader in self.cfg.peers:
            out["leaderAddress"] = self.cfg.peers[leader].address
        return response_frame(out, f.opaque, f.code)

    # -- membership changes (peer add | remove | replace) -----------------------------
    def _change_members(self, f: Frame):
        """CHANGE_MEMBERS: the leader appends the config entry and answers once it commits
        (or at once when it refuses): code, remark, index, and the members then."""
        o = json_object(f.body)
        if get_field(o, "group", str, self.cfg.group) != self.cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {self.cfg.group!r}")
        kind = get_field(o, "kind", str)
        if kind not in ("add", "remove"):
            raise BadMessage(f"kind must be add or remove, not {kind!r}")
        node, address = get_field(o, "id", str), get_field(o, "address", str, None)
        if kind == "add" and not address:
            raise BadMessage("adding a member needs its address")
        p = self.core.change_members(kind, node, address, self.now())
        self._process()
        if p.done:
            return self._change_answer(f, p)
        fut = self._changes[id(p)] = self.loop.create_future()

        async def later() -> Frame:
            await fut
            return self._change_answer(f, p)
        return later()

    def _change_answer(self, f: Frame, p: Proposal) -> Frame:
        m = self.core.members
        return response_frame({"code": int(p.code), "remark": p.remark, "index": p.first_index, "term": p.term,
                               "leaderId": self.core.member.leader_id, "voters": list(m.voters),
                               "learners": list(m.learners),
                               "peers": {k: peer.address for k, peer in m.members.items()}}, f.opaque, f.code)

    # -- queries (the state machine) --------------------------------------------------
    def _query(self, f: Frame, conn=None):
        """QUERY: the state machine's answer. Linearizable (the default): once it has applied
        up to a confirmed read index (reads.py). Serializable: once it has applied what it
        knew to be committed when the request arrived. A Frame now, or an awaitable of one."""
        o = json_object(f.body)
        if get_field(o, "group", str, self.cfg.group) != self.cfg.group:
            return self._refusal(f, Code.UNKNOWN_GROUP, f"this node serves group {self.cfg.group!r}")
        if self.applier is None or not callable(getattr(self.applier.sm, "query", None)):
            return self._refusal(f, Code.UNSUPPORTED, "this node runs no state machine that answers queries"
                                 + ("" if self.cfg.state_machine else " (start it with --state-machine)"))
        try:
            request = base64.b64decode(get_field(o, "query", str), validate=True)
        except (ValueError, TypeError):
            raise BadMessage("field 'query' is not base64") from None
        if consistency_of(o) == LINEARIZABLE:
            return self._linearizable(f, lambda: self._query_answer(f, request), applied=True, conn=conn)
        want = self.store.committed_index
        if self.applier.applied >= want:
            return self._query_answer(f, request)
        return self._applied_then(f, want, lambda: self._query_answer(f, request))

    async def _wait_applied(self, f: Frame, want: int) -> Frame | None:
        """Wait until the state machine has applied entry ``want``: None, or the refusal
        Frame when it does not within max_wait_ack_ms or stops."""
        fut = self.loop.create_future()
        self._queries.append((want, fut))
        try:
            await asyncio.wait_for(fut, self.cfg.max_wait_ack_ms / 1000)
        except asyncio.TimeoutError:
            return self._refusal(f, Code.TIMEOUT, f"entry {want} not applied within {self.cfg.max_wait_ack_ms} ms")
        except StateMachineError as exc:
            return self._refusal(f, Code.INTERNAL_ERROR, str(exc))
        if self.applier is None:
            return self._refusal(f, Code.INTERNAL_ERROR, "the state machine stopped")
        return None

    def _query_answer(self, f: Frame, request: bytes) -> Frame:
        answer = self.applier.sm.query(request)
        return response_frame({"code": int(Code.SUCCESS), "result": base64.b64encode(answer).decode("ascii"),
                               "appliedIndex": self.applier.applied, "role": str(self.core.member.role)},
                              f.opaque, QUERY)

    # -- client requests --------------------------------------------------------------
    def _check_addressee(self, f: Frame) -> Frame | None:
        """UNKNOWN_GROUP when a client request names another group, UNKNOWN_MEMBER when it
        names another member in ``remoteId`` (as DLedger answers them: the client's idea of
        who is where is wrong); None when it names this group and node, or none (earlier
        dledgerctl clients did not say)."""
        req = dialect.client_request(f.body) if bytes(f.body[:1]) == b"{" else None
        if req is None:
            return None
        if req.group is not None and req.group != self.cfg.group:
            code, remark = Code.UNKNOWN_GROUP, f"this node serves group {self.cfg.group!r}, not {req.group!r}"
        elif req.remoteId is not None and req.remoteId != self.cfg.self_id:
            code, remark = Code.UNKNOWN_MEMBER, f"this is {self.cfg.self_id}, not {req.remoteId}"
        else:
            return None
        self.counts.refusal(code.name)
        return response_frame({"code": int(code), "group": self.cfg.group, "leaderId": self.core.member.leader_id,
                               "remark": remark}, f.opaque, f.code)

    def _metadata(self) -> dict:
        d = self.core.describe()
        d["replication"] = d.pop("peers", [])
        d["leaderId"] = d["leader"]  # (DLedger's MetadataResponse: group, leaderId, peers)
        d["code"] = int(Code.SUCCESS)
        d["address"] = self.cfg.peers[self.cfg.self_id].address
        d["peers"] = {p: peer.address for p, peer in self.core.members.members.items()}
        if self.applier is not None:
            d["applied_index"], d["snapshot_index"] = self.applier.applied, self.applier.snapshot_index
            sm = type(self.applier.sm)
            d["state_machine"] = "kv" if issubclass(sm, KeyValue) else f"{sm.__module__}:{sm.__qualname__}"
        d["flush"] = self.cfg.flush
        d["flush_interval_ms"] = self.cfg.flush_interval_ms
        d["pid"] = os.getpid()  # (which process answers: 'cluster status' tells a recorded member from a stranger)
        return d

    def _append(self, f: Frame, conn):
        """Checks the request now (BadMessage) and queues it for the next proposal; its
        answer goes to ``conn`` once the entries commit or fail (_answer_appends). Nothing
        is made per request but the queued tuple: appends are the hot path."""
        if "count" not in f.ext:  # DLedger's own client: one body, base64 in a JSON object
            return self._append_dledger(f, conn)
        count = ext_int(f.ext, "count", COUNT)  # (plain ASCII digits, as every number on the wire)
        if f.ext.get("group", self.cfg.group) != self.cfg.group:
            self.counts.appends_answered(Code.UNKNOWN_GROUP.name, 1)
            return response_frame({"code": int(Code.UNKNOWN_GROUP), "remark": f"group is {self.cfg.group!r}"},
                                  f.opaque, APPEND)
        largest = check_bodies(f.body, count)
        if not self._batch:
            self.loop.call_soon(self.supervisor.guard, "proposing appends", self._propose_batch)
        self._batch.append((f.body, count, largest, f.opaque, conn, False))
        conn.hold()
        return None

    def _append_dledger(self, f: Frame, conn):
        """An APPEND in DLedger's form (AppendEntryRequest): queued like ours, answered as
        DLedger answers (AppendEntryResponse: code, group, index, leaderId, pos, term)."""
        req = dialect.client_request(f.body)
        refusal = None
        if req.group != self.cfg.group:
            refusal = (Code.UNKNOWN_GROUP, f"{req.group} != {self.cfg.group}")
        elif req.remoteId is not None and req.remoteId != self.cfg.self_id:
            refusal = (Code.UNKNOWN_MEMBER, f"{req.remoteId} != {self.cfg.self_id}")
        elif req.body is None:
            refusal = (Code.REQUEST_WITH_EMPTY_BODYS, "the request carries no body")
        if refusal is not None:
            self.counts.appends_answered(refusal[0].name, 1)
            return response_frame({"code": int(refusal[0]), "group": self.cfg.group, "index": -1, "pos": -1,
                                   "leaderId": self.core.member.leader_id, "term": self.core.member.term,
                                   "remark": refusal[1]}, f.opaque, APPEND)
        if not self._batch:
            self.loop.call_soon(self.supervisor.guard, "proposing appends", self._propose_batch)
        self._batch.append((dialect.packed_one(req.body), 1, len(req.body), f.opaque, conn, True))
        conn.hold()
        return None

    def _answer_appends(self, p: Proposal, waiters: list, code: Code, remark: str, dledger: list = ()) -> None:
        """Answer the APPENDs of a proposal (``waiters``: connection, opaque, start, n), once:
        the caller has taken the proposal out of _waiting. Each answer is
        ``{"code", "term", "leaderId", "remark"}``, and on SUCCESS ``"entries"``, the
        request's ``n`` rows from ``start``, encoded whole (wire.response_bytes,
        wire.append_answers) around JSON that is made once per proposal up to the entries;
        the answers for one connection go to it in one call. ``dledger``: (connection,
        opaque, start) of APPENDs from DLedger's own client, answered in its form."""
        leader = p.leader_id or self.core.member.leader_id
        for w in waiters:
            w[0].release()
        self.counts.appends_answered(code.name, len(waiters) + len(dledger))
        if dledger:
            rows = appended_rows(p.appended) if code == Code.SUCCESS else None
            for conn, opaque, start in dledger:
                conn.release()
                index, term, pos, _size = rows[start] if rows is not None else (-1, p.term, -1, 0)
                conn.send_bytes(response_bytes(opaque, dialect.encode({
                    "code": int(code), "group": self.cfg.group, "index": index, "leaderId": leader, "pos": pos,
                    "term": term, **({"remark": remark} if remark else {})})))
            if not waiters:
                return
        body = json_body({"code": int(code), "term": p.term, "leaderId": leader, "remark": remark})
        if code != Code.SUCCESS:
            answers = [response_bytes(opaque, body) for _conn, opaque, _start, _n in waiters]
        else:
            answers = append_answers(body[:-1] + b',"entries":', waiters, p.appended)
        conn = waiters[0][0]
        if all(w[0] is conn for w in waiters):  # (the usual case: one client connection)
            conn.send_parts(answers)
            return
        for w, data in zip(waiters, answers):
            w[0].send_bytes(data)

    def _propose_batch(self) -> None:
        """Propose the APPENDs that arrived since the last call as one batch: their frames'
        bodies go to the store as they are (store.packed), without an object per body."""
        batch, self._batch = self._batch, []
        bodies = PackedBodies()
        waiters, dledger, start, size = [], [], 0, 0
        for data, count, largest, opaque, conn, theirs in batch:
            bodies.add(data, count, largest)
            size += len(data) - 4 * count  # (a run's size table: 4 bytes a body)
            if theirs:
                dledger.append((conn, opaque, start))
            else:
                waiters.append((conn, opaque, start, count))
            start += count
        p = self.core.propose(bodies, self.now())
        self._waiting[id(p)] = (p, waiters, dledger, time.perf_counter(), size)
        if p.done:
            self._finish(p)
        self._process()

    def _get(self, f: Frame, conn=None):
        """Committed entries from ``index`` (up to ``count``, MAX_GET_COUNT, MAX_GET_BYTES),
        each as DLedger's entry object. DLedger's own client asks with ``beginIndex`` for one
        entry (GetEntriesRequest) and is answered in its form (GetEntriesResponse)."""
        o = json_object(f.body)
        theirs = "index" not in o and "beginIndex" in o
        refused = self._check_addressee(f)
        if refused is not None:
            return refused
        if theirs:  # (DLedger's own client: as DLedger answers, from this node's log)
            return self._entries(f, get_field(o, "beginIndex", INDEX), 1)
        index, count = get_field(o, "index", INDEX), get_field(o, "count", COUNT, 1)
        raw = get_field(o, "raw", bool, False)  # (dledgerctl's client: the entries' own bytes, net/getraw.py)
        if consistency_of(o) == SERIALIZABLE:
            return self._entries(f, index, count, raw)
        return self._linearizable(f, lambda: self._entries(f, index, count, raw), applied=False, conn=conn)

    def _entries(self, f: Frame, index: int, count: int, raw: bool = False) -> Frame:
        s = self.store
        base = {"group": self.cfg.group, "leaderId": self.core.member.leader_id, "term": self.core.member.term}
        if not s.begin_index <= index <= s.committed_index or s.begin_index < 0:
            self.counts.refusal(Code.INDEX_OUT_OF_RANGE.name)
            return response_frame({**base, "code": int(Code.INDEX_OUT_OF_RANGE),
                                   "remark": f"index {index} is outside the committed log "
                                             f"[{s.begin_index}, {s.committed_index}]"}, f.opaque, GET)
        last = min(s.committed_index, index + max(1, min(count, MAX_GET_COUNT)) - 1)
        if raw:
            try:
                blob, n = s.read_entries(index, last - index + 1, MAX_GET_BYTES)
            except StoreError as exc:
                self.counts.refusal(Code.DISK_ERROR.name)
                return response_frame({**base, "code": int(Code.DISK_ERROR), "remark": str(exc)}, f.opaque, GET)
            return getraw.answer_frame(f.opaque, GET, blob, n, base["term"], base["leaderId"])
        entries, total = [], 0
        try:
            for i in range(index, last + 1):
                e = s.get(i)
                if entries and total + e.size > MAX_GET_BYTES:
                    break
                total += e.size
                entries.append(dialect.store_entry_object(e))
        except StoreError as exc:
            self.counts.refusal(Code.DISK_ERROR.name)
            return response_frame({**base, "code": int(Code.DISK_ERROR), "remark": str(exc)}, f.opaque, GET)
        return response_frame({**base, "code": int(Code.SUCCESS), "entries": entries}, f.opaque, GET)
