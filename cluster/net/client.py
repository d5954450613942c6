"""Client side of APPEND, GET and METADATA: finds the leader, follows NOT_LEADER, keeps deadlines.

An append that is not acknowledged raises :class:`AppendError`, which says whether the
entries can still be in the log: ``outcome == "failed"`` only when every leader asked
refused before appending (the codes in :data:`REFUSED_BEFORE_APPEND`) or nothing was sent;
``"unknown"`` after a timeout, a lost connection, TERM_CHANGED or WAIT_QUORUM_ACK_TIMEOUT
(the leader appended and may still commit the entries).

A member that refuses this client for good (its certificate revoked or of another group,
another group's node at the address, a TLS port reached in plain TCP or the other way
round: :func:`refusal_of`) is remembered in :attr:`Client.refused`; when every member
refuses, or the one that leads does, requests end at once with :class:`Rejected` instead of
waiting for a leader until their deadline.
"""

from __future__ import annotations

import asyncio
import functools
import ssl

import msgspec

from ..raft.config import ConfigError, Peer, parse_peers
from ..raft.rpc import Code
from . import api
from . import client_java
from .answers import (
    AppendAnswer,
    CompareAnswer,
    EntryRow,
    NodeState,
    SnapshotChunk,
    TruncateAnswer,
    WatermarkRow,
    compare_answer,
    entry_rows,
    node_state,
    snapshot_chunk,
    truncate_answer,
    watermark_rows,
)
from .api_client import (
    append_ext,
    append_request,
    code_of,
    decode_append_answer,
    decode_raw_answer,
    is_raw,
    request_frame,
    term_probe_frame,
    transfer_frame,
)
from .channel import Channel
from .frames import BadMessage, Forbidden, Frame, ProtocolError, json_body
from .tls import expect_member
from .transport import ConnectionLost, OtherMode, TransportError, Unreachable, WrongPeer
from .wire import APPEND, GET, LEADERSHIP_TRANSFER, METADATA, QUERY, SNAPSHOT_READ, decode_response


class ClientError(Exception):
    """The request could not be served: one line says why."""


class Refused(ClientError):
    """A member answered with a refusal: ``code`` (a Code) and its ``remark``, by ``peer``."""

    def __init__(self, message: str, peer: str, code: Code, remark: str) -> None:
        super().__init__(message)
        self.peer, self.code, self.remark = peer, code, remark


class Rejected(ClientError):
    """Members refuse this client for good (asking again does not help): one line says who
    and why."""


class BadAnswer(ClientError):
    """A METADATA answer with a field missing or mistyped: ``peer``, ``why`` (taken as no answer)."""

    def __init__(self, peer: str, why: str) -> None:
        super().__init__(f"{peer}: {why}")
        self.peer, self.why = peer, why


class NotServed(BadMessage):
    """A member answered METADATA with a refusal (UNKNOWN_GROUP: it is of another group;
    UNKNOWN_MEMBER: another member listens at the address)."""


def refusal_of(exc: BaseException) -> str | None:
    """Why a request's failure is its member refusing this client for good, in words; None
    for a failure that may pass (a member stopped, slow, restarting, electing)."""
    if isinstance(exc, Forbidden):  # (NO_PERMISSION: "refused: <why>")
        return str(exc).removeprefix("refused: ")
    if isinstance(exc, (WrongPeer, OtherMode, NotServed)):
        return str(exc)
    if isinstance(exc, TransportError) and isinstance(exc.__cause__, ssl.SSLError):
        if isinstance(exc, ConnectionLost):  # (TLS 1.3: the server's alert comes after the handshake)
            return f"{exc} (is this certificate valid, and signed by the CA the members trust?)"
        return str(exc)
    return None


class OutOfRange(ClientError):
    """GET of an index outside the node's committed log ``[begin, committed]`` (DLedger's
    INDEX_OUT_OF_RANGE). ``begin``/``committed``: the node's, asked right after; None when
    it did not say."""

    def __init__(self, message: str, peer: str, begin: int | None, committed: int | None) -> None:
        super().__init__(message)
        self.peer, self.begin, self.committed = peer, begin, committed


# Entries asked for per GET while paging: a node answers at most this many
# (cluster/node/requests.py MAX_GET_COUNT); asking for more would only be cut.
MAX_PAGE = 1024
# GETs in flight at once while paging a Java DLedger node (one entry per GET)
JAVA_PAGE = 64


# Answers a leader gives before it appends anything (core.propose, node/requests.py Requests._append): the
# entries of such an attempt are not in any log. Every other answer to an APPEND that is
# not SUCCESS may come after the append (TERM_CHANGED, WAIT_QUORUM_ACK_TIMEOUT, DISK_ERROR).
REFUSED_BEFORE_APPEND = frozenset({
    Code.NOT_LEADER, Code.LEADER_TRANSFERRING, Code.LEADER_NOT_READY, Code.LEADER_PENDING_FULL, Code.DISK_FULL,
    Code.REQUEST_WITH_EMPTY_BODYS, Code.UNEXPECTED_ARGUMENT, Code.UNKNOWN_GROUP,
})
# Answers after which the next attempt goes to another node (or the same one, later).
_RETRY = frozenset({Code.NOT_LEADER, Code.TERM_CHANGED, Code.LEADER_TRANSFERRING, Code.LEADER_NOT_READY})


class AppendError(ClientError):
    """An append that was not acknowledged. ``outcome``: "failed" when no attempt can
    have appended the entries, "unknown" when one may have (they may be committed, now or
    later). ``code``: the last answer's code, None when the last attempt got no answer."""

    def __init__(self, message: str, outcome: str, code: Code | None = None) -> None:
        super().__init__(message)
        self.outcome, self.code = outcome, code


def _append_error(message: str, unknown: bool, code: Code | None) -> AppendError:
    return AppendError(message, "unknown" if unknown else "failed", code)


_SUCCESS = int(Code.SUCCESS)


def _default_consistency(peer: str | None) -> str:
    """A read of the leader is linearizable unless asked otherwise; a read of a named member,
    serializable (its own state, as such reads always were)."""
    return "linearizable" if peer is None else "serializable"


class Client:
    def __init__(self, peers: dict[str, Peer], group: str, *, timeout: float = 3.0, tls=None) -> None:
        """``tls``: a cluster/net/tls.py Tls for mutual TLS (each member must present its own
        member certificate), None for plain TCP."""
        self.peers, self.group, self.timeout = dict(peers), group, timeout
        self._ssl = {} if tls is None else {"ssl": tls.client}
        self.channels = {p: self._channel(p, peer) for p, peer in peers.items()}
        self.leader: str | None = None
        self._exts: dict[int, bytes] = {}  # extFields JSON of an APPEND, by body count
        # What each peer is, from its METADATA answer: True for a Java DLedger node (spoken to
        # in DLedger's own form: one body per APPEND, one entry per GET), False for dledgerctl.
        self.java: dict[str, bool] = {}
        # members refusing this client for good (refusal_of), and why; one that answers is taken out
        self.refused: dict[str, str] = {}

    def _channel(self, p: str, peer: Peer) -> Channel:
        return Channel(peer.host, peer.port, connect_timeout=min(1.0, self.timeout),
                       expect=functools.partial(expect_member, self.group, p), diagnose=True, **self._ssl)

    def rejected(self, peers=None) -> Rejected:
        """The error of members that refuse this client (``peers``, default: those that do)."""
        peers = [p for p in (peers or self.peers) if p in self.refused]
        reasons = {self.refused[p] for p in peers}
        if len(reasons) == 1:
            return Rejected(f"refused by {', '.join(peers)}: {reasons.pop()}")
        return Rejected("refused: " + "; ".join(f"{p}: {self.refused[p]}" for p in peers))

    def _failed(self, peer: str, exc: BaseException) -> ClientError:
        """The error of a request to ``peer`` that failed with ``exc``: Rejected when the
        member refuses it."""
        why = refusal_of(exc)
        return ClientError(f"{peer}: {exc}") if why is None else Rejected(f"{peer}: {why}")

    def _refusing(self, peer: str, exc: BaseException, code: int = METADATA) -> str | None:
        """Remember ``peer`` as refusing this client when ``exc`` (the failure of a request
        of ``code``) says so; why, or None. NO_PERMISSION counts for requests every client
        may make (METADATA, APPEND, GET): of others it may refuse that request only (an
        operator's)."""
        why = refusal_of(exc)
        if why is not None and (code in (METADATA, APPEND, GET) or not isinstance(exc, Forbidden)):
            self.refused[peer] = why
        return why

    def learn(self, members: dict) -> list[str]:
        """Members a node named (its METADATA ``peers``: id -> address) that this client did
        not know, added (a member added since the peers it was given); their ids."""
        new = []
        for p, address in members.items():
            if p in self.peers:
                continue
            try:
                peer = parse_peers(f"{p}-{address}")[p]
            except ConfigError:
                continue
            self.peers[p], self.channels[p] = peer, self._channel(p, peer)
            new.append(p)
        return new

    async def close(self) -> None:
        for ch in self.channels.values():
            await ch.close()

    async def _call(self, peer: str, frame: Frame, code: int, timeout: float) -> dict:
        """``peer``'s answer: its fields (a GET's ``entries`` as EntryRows, checked), or ProtocolError."""
        try:
            resp = await self.channels[peer].request(frame, timeout)
            if code == GET and is_raw(resp):  # (entries as their bytes: no JSON, no base64)
                return decode_raw_answer(resp, typed=True)
            if code == SNAPSHOT_READ and "size" in resp.ext:  # (its binary answer; refusals are JSON)
                return {"code": _SUCCESS, "chunk": snapshot_chunk(resp)}
            o = decode_response(resp, code)
            if code == GET and o.get("code") == _SUCCESS:
                o["entries"] = entry_rows(o.get("entries"))
            return o
        except (TransportError, ProtocolError) as exc:
            self._refusing(peer, exc, code)
            raise

    async def metadata(self, peer: str, timeout: float | None = None) -> NodeState:
        """The peer's METADATA answer (answers.NodeState: a Java DLedger node's, which says
        only its group, leader and peers, completed); ProtocolError when it does not decode,
        :class:`BadAnswer` when a field is of the wrong type."""
        md = await self._call(peer, request_frame(api.Metadata(METADATA, self.group, peer)), METADATA,
                              timeout or self.timeout)
        code = md.get("code", _SUCCESS)
        if code != _SUCCESS:  # e.g. UNKNOWN_MEMBER: another member listens where the peers say it is
            name = Code(code).name if code in Code._value2member_map_ else str(code)
            exc = NotServed(f"METADATA refused: {name} {md.get('remark') or ''}".strip())
            self._refusing(peer, exc)
            raise exc
        self.refused.pop(peer, None)
        try:
            state = node_state(md, peer)
        except BadMessage as exc:
            raise BadAnswer(peer, str(exc)) from None
        self.java[peer] = state.impl == "dledger"
        if not self.java[peer]:
            self.learn(state.peers)
        return state

    async def _metadata_of(self, peer: str, timeout: float):
        try:
            return peer, await self.metadata(peer, timeout)
        except (TransportError, ProtocolError, BadAnswer) as exc:
            return peer, exc

    async def java_term(self, peer: str, timeout: float | None = None) -> int | None:
        """A Java DLedger node's current term, which its METADATA does not say: a HEART_BEAT
        of term -1 changes nothing and is answered EXPIRED_TERM with the node's term. None
        when it does not answer so."""
        others = [p for p in self.peers if p != peer]
        if not others:
            return None
        try:
            o = await self._call(peer, term_probe_frame(self.group, peer, others[0]), METADATA, timeout or self.timeout)
        except (TransportError, ProtocolError):
            return None
        term = o.get("term")
        return term if o.get("code") == Code.EXPIRED_TERM and isinstance(term, int) else None

    async def status(self) -> dict[str, NodeState | str]:
        """METADATA of every peer at once (a Java node's with its term, java_term); an
        unreachable peer maps to the error text."""
        async def one(p):
            try:
                md = await self.metadata(p)
            except (TransportError, ProtocolError, BadAnswer) as exc:
                return p, exc.why if isinstance(exc, BadAnswer) else str(exc)
            if md.impl == "dledger":
                md = msgspec.structs.replace(md, term=await self.java_term(p))
            return p, md
        return dict(await asyncio.gather(*(one(p) for p in self.peers)))

    async def find_leader(self, deadline: float, avoid: frozenset = frozenset()) -> str:
        """The leader's id: asks every peer at once and takes the first that says it leads,
        without waiting for peers that do not answer (stopped or partitioned); not one of
        ``avoid`` (members that just refused to serve as leader). :class:`Rejected` at once
        when every peer refuses this client, or the leader another names does."""
        loop = asyncio.get_running_loop()
        last = None  # why a member did not answer: the likely reason when no leader is found
        while True:
            if self.leader is not None and self.leader not in avoid:
                return self.leader
            wait = max(0.05, min(1.0, deadline - loop.time()))
            tasks = [asyncio.ensure_future(self._metadata_of(p, wait)) for p in self.peers]
            try:
                for next_done in asyncio.as_completed(tasks):
                    p, md = await next_done
                    if isinstance(md, Exception):
                        if p not in self.refused:
                            last = last or (str(md) if isinstance(md, BadAnswer) else f"{p}: {md}")
                        if all(q in self.refused for q in self.peers):
                            raise self.rejected()
                        continue
                    if md.leader in self.refused and md.leader != p:  # (it leads, and will not serve this client)
                        raise self.rejected([md.leader])
                    if md.role == "leader" and md.id in self.peers and md.id not in avoid:
                        self.leader = md.id
                        return self.leader
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            if loop.time() >= deadline:
                why = next((f"{p}: {r}" for p, r in self.refused.items() if p in self.peers), last)
                raise ClientError(f"no leader among {', '.join(self.peers)} within {self.timeout:g} s"
                                  + (f" ({why})" if why else ""))
            await asyncio.sleep(0.05)

    async def append(self, bodies: list[bytes], *, resend_unknown: bool = True) -> AppendAnswer:
        """Append on the leader; returns its answer (answers.AppendAnswer: its ``entries``,
        [index, term, pos, size] per body, are read when first used).

        Follows NOT_LEADER and retries until the timeout. After an attempt whose outcome
        is unknown (no answer, TERM_CHANGED), the bodies are sent again only with
        ``resend_unknown`` (the default): they may then be in the log twice. Without it
        the call ends there with AppendError(outcome="unknown")."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + self.timeout
        ext = self._exts.get(len(bodies))
        if ext is None:
            if len(self._exts) > 256:
                self._exts.clear()
            ext = self._exts[len(bodies)] = append_ext(self.group, len(bodies))
        last_error, unknown, code = "no answer", False, None
        while now < deadline:
            leader = self.leader
            if leader is None:
                try:
                    leader = await self.find_leader(deadline)
                except ClientError as exc:
                    raise _append_error(str(exc), unknown, code) from None
                now = loop.time()
            if leader not in self.java:  # learn what it is first (nothing is sent to append yet)
                try:
                    await self.metadata(leader, max(0.05, deadline - now))
                except (TransportError, ProtocolError) as exc:
                    last_error, self.leader = f"{leader}: {exc}", None
                    await asyncio.sleep(0.05)
                    now = loop.time()
                    continue
            try:  # (the hot path of every append: no Frame and no coroutine of its own)
                if self.java[leader]:
                    resp = await client_java.append(self._call, self.group, leader, bodies, deadline)
                else:
                    resp = decode_append_answer(await self.channels[leader].call(
                        append_request, (ext, bodies), max(0.05, deadline - now)))
            except client_java.PartlyAppended as exc:
                raise AppendError(str(exc), "unknown", exc.code) from None
            except (TransportError, ProtocolError) as exc:
                last_error, code = f"{leader}: {exc}", None
                why = self._refusing(leader, exc, APPEND)
                if why is not None:  # (refused before anything was appended)
                    raise _append_error(f"{leader}: {why}", unknown, None) from None
                self.leader = None
                if not isinstance(exc, Unreachable):  # it was sent: it may have been appended
                    unknown = True
                    if not resend_unknown:
                        raise _append_error(last_error, unknown, code) from None
                await asyncio.sleep(0.05)
                now = loop.time()
                continue
            rc = resp.code
            if rc == _SUCCESS:
                return resp
            code = Code(rc) if rc in Code._value2member_map_ else Code.UNKNOWN
            last_error = f"{leader}: {code.name} {resp.remark}".strip()
            if code not in REFUSED_BEFORE_APPEND:
                unknown = True
            if code not in _RETRY or (unknown and not resend_unknown):
                raise _append_error(last_error, unknown, code)
            hint = resp.leader_id
            self.leader = hint if hint in self.peers and hint != leader else None
            await asyncio.sleep(0.02)
            now = loop.time()
        raise _append_error(f"append not committed within {self.timeout:g} s ({last_error})", unknown, code)

    async def watermarks(self) -> list[WatermarkRow]:
        """Every peer's replication state, from the leader (WATERMARKS): a row per peer, the
        leader's first; ClientError naming the leader when its answer does not decode."""
        return self._typed(watermark_rows, await self._on_leader(api.Watermarks(self.group)))

    async def force_compare(self, peer: str, *, deep: bool = False, dry_run: bool = False) -> CompareAnswer:
        """Have the leader find where ``peer``'s log leaves its own (FORCE_COMPARE; ``deep``:
        by every entry's fingerprint) and repair it, unless ``dry_run``: what it found and did."""
        return self._typed(compare_answer, await self._on_leader(api.ForceCompare(self.group, peer, deep, dry_run)))

    async def force_truncate(self, peer: str, from_index: int) -> TruncateAnswer:
        """Have the leader cut ``peer``'s log from ``from_index`` (FORCE_TRUNCATE) and re-fill
        it: what it cut. Refused for committed entries."""
        return self._typed(truncate_answer, await self._on_leader(api.ForceTruncate(self.group, peer, from_index)))

    def _typed(self, kind, answer: dict):
        """The leader's ``answer`` as ``kind`` makes it; ClientError naming the leader when it does not fit."""
        try:
            return kind(answer)
        except ProtocolError as exc:
            raise ClientError(f"{self.leader}: {exc}") from None

    async def operator(self, code: int, body: dict) -> dict:
        """An operator request of ``code`` with the JSON fields ``body`` on the leader (the
        typed methods above are the ones to use: this one sends any fields it is given)."""
        return await self._on_leader(None, Frame(code, body=json_body({"group": self.group, **body})), code)

    async def _on_leader(self, req, frame: Frame | None = None, code: int = 0) -> dict:
        """An operator request (api.py: ``req``, or a ``frame`` of ``code``) on the leader,
        following NOT_LEADER; the leader's answer, or ClientError naming why there is none."""
        if req is not None:
            frame, code = request_frame(req), code_of(req)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        last_error = "no answer"
        for _attempt in range(len(self.peers) + 3):
            leader = await self.find_leader(deadline)
            if self.java.get(leader):
                raise ClientError(f"{leader} is a Java DLedger node: this request needs a dledgerctl leader")
            try:
                resp = await self._call(leader, frame, code, max(0.05, deadline - loop.time()))
            except (TransportError, ProtocolError) as exc:
                last_error = f"{leader}: {exc}"
                if refusal_of(exc) is not None:
                    raise self._failed(leader, exc) from None
                self.leader = None
                if loop.time() >= deadline:
                    break
                await asyncio.sleep(0.05)
                continue
            rc = resp.get("code", -1)
            if rc == Code.SUCCESS:
                return resp
            name = Code(rc).name if rc in Code._value2member_map_ else str(rc)
            last_error = f"{leader}: {name} {resp.get('remark') or ''}".strip()
            if rc != Code.NOT_LEADER:
                if rc in Code._value2member_map_:
                    raise Refused(last_error, leader, Code(rc), resp.get("remark") or "")
                raise ClientError(last_error)
            hint = resp.get("leaderId")
            self.leader = hint if hint in self.peers and hint != leader else None
            await asyncio.sleep(0.02)
        raise ClientError(last_error)

    async def change_members(self, kind: str, node: str, address: str | None = None) -> api.ChangeAnswer:
        """Ask the leader to add ``node`` at ``address`` as a learner (``kind`` "add"; the
        leader promotes it once caught up) or to remove it ("remove"); the answer once the
        config entry is committed: index, term, voters, learners, peers. ClientError when
        refused (another change pending, no live majority left, not a member, ...)."""
        try:
            answer = api.change_reply(await self._on_leader(api.ChangeMembers(self.group, kind, node, address)))
        except ProtocolError as exc:
            raise ClientError(f"the answer to CHANGE_MEMBERS: {exc}") from None
        self.learn(answer.peers)
        return answer

    async def _read(self, code: int, request, peer: str | None) -> tuple[str, dict]:
        """A read (GET or QUERY) of ``peer``, or of the leader: a member that refuses to
        serve a linearizable read as leader (NOT_LEADER: it was deposed) is left for the one
        it names or the next that says it leads; after a TIMEOUT (it could not reach a
        majority in time) the leader is looked for again. A named ``peer`` that knows no
        leader yet (just started) is asked again until the deadline.
        ``request(target)`` is the request (api.py) for member ``target``. (target, answer)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        avoid: set[str] = set()
        while True:
            target = peer or await self.find_leader(deadline, frozenset(avoid))
            if self.java.get(target) and code == QUERY:
                raise ClientError(f"{target} is a Java DLedger node: it runs no dledgerctl state machine")
            try:
                resp = await self._call(target, request_frame(request(target), target), code,
                                        max(0.05, deadline - loop.time()))
            except (TransportError, ProtocolError) as exc:
                raise self._failed(target, exc) from None
            rc = resp.get("code")
            if peer is not None and rc == Code.NOT_LEADER and not resp.get("leaderId") and loop.time() + 0.1 < deadline:
                await asyncio.sleep(0.1)  # (a member just started, that has not heard from a leader yet: ask it again)
                continue
            if peer is None and rc in (Code.NOT_LEADER, Code.TIMEOUT) and loop.time() < deadline:
                if rc == Code.NOT_LEADER:  # (TIMEOUT: slow, or cut off and soon deposed: it may be asked again)
                    avoid.add(target)
                hint = resp.get("leaderId")
                self.leader = hint if hint in self.peers and hint not in avoid else None
                await asyncio.sleep(0.02)
                continue
            return target, resp

    async def query(self, request: bytes, peer: str | None = None,
                    consistency: str | None = None) -> api.QueryAnswer:
        """Ask a node's state machine (QUERY; the leader by default): its ``result`` (bytes),
        ``applied_index`` and ``role``. Linearizable (the default, but of a ``peer``): once it has applied
        up to a read index the leader confirmed (it sees every put acknowledged before the
        query began); serializable (the default of a ``peer``): once it has applied what it
        knew to be committed."""
        consistency = consistency or _default_consistency(peer)
        target, resp = await self._read(QUERY, lambda target: api.Query(self.group, request, consistency), peer)
        code = resp.get("code")
        if code != _SUCCESS:
            name = Code(code).name if code in Code._value2member_map_ else str(code)
            raise ClientError(f"{target}: {name} {resp.get('remark') or ''}".strip())
        try:
            return api.query_reply(resp)
        except ProtocolError as exc:
            raise ClientError(f"{target}: {exc}") from None

    async def snapshot_chunk(self, peer: str, index: int, offset: int, length: int) -> SnapshotChunk:
        """``length`` bytes from ``offset`` of member ``peer``'s state-machine snapshot as of entry
        ``index`` (-1: its latest; answers.SnapshotChunk, ``index`` -1 when it has none; fewer
        bytes at its end). Refused (a ClientError) when refused: UNSUPPORTED, no state machine
        there; INDEX_OUT_OF_RANGE, no such snapshot any more (a newer one was saved and the old
        one removed)."""
        try:
            resp = await self._call(peer, request_frame(api.SnapshotRead(self.group, peer, index, offset, length), peer),
                                    SNAPSHOT_READ, self.timeout)
        except (TransportError, ProtocolError) as exc:
            raise self._failed(peer, exc) from None
        code = resp.get("code")
        if code != _SUCCESS:
            name = Code(code).name if code in Code._value2member_map_ else str(code)
            remark = resp.get("remark") or ""
            if code in Code._value2member_map_:
                raise Refused(f"{peer}: {name} {remark}".strip(), peer, Code(code), remark)
            raise ClientError(f"{peer}: {name} {remark}".strip())
        return resp["chunk"]

    async def transfer_leadership(self, target: str) -> tuple[str, int]:
        """Ask the leader to hand leadership to ``target`` (DLedger's LEADERSHIP_TRANSFER);
        returns (old leader, its term) once the leader has started, ClientError if it refused."""
        loop = asyncio.get_running_loop()
        leader = await self.find_leader(loop.time() + self.timeout)
        try:
            md = await self.metadata(leader)
            term = await self.java_term(leader) if self.java[leader] else md.term
            term = -1 if term is None else term
            resp = await self._call(leader, transfer_frame(self.group, leader, target, term), LEADERSHIP_TRANSFER,
                                    self.timeout)
        except (TransportError, ProtocolError) as exc:
            raise ClientError(f"{leader}: {exc}") from None
        if resp.code != Code.SUCCESS:
            raise Refused(f"{leader} refused to hand leadership to {target}: {resp.code.name} {resp.remark}".strip(),
                          leader, resp.code, resp.remark)
        # (the term asked in: a Java leader answers with its transferee's answer, given once
        # that one has started its election in the next term)
        return leader, term if term >= 0 else resp.term

    async def get(self, index: int, count: int = 1, peer: str | None = None,
                  consistency: str | None = None) -> list[EntryRow]:
        """Committed entries from ``index`` (answers.EntryRow), as many as the node gives in
        one answer (at most ``count``; a node caps an answer, cluster/node/requests.py
        MAX_GET_COUNT/BYTES). Linearizable (the default, but of a ``peer``): the node answers
        once a read index is confirmed (an entry committed before the read began is there);
        serializable (the default of a ``peer``): from its own log at once. An index outside
        the node's committed log raises :class:`OutOfRange`."""
        consistency = consistency or _default_consistency(peer)
        loop = asyncio.get_running_loop()
        target = peer or await self.find_leader(loop.time() + self.timeout)
        try:
            if target not in self.java:
                await self.metadata(target)
        except (TransportError, ProtocolError) as exc:
            raise self._failed(target, exc) from None
        if self.java[target]:  # (a Java node answers from its own log, as leader only)
            try:
                resp = await client_java.get(self._call, self.group, target, index, min(count, JAVA_PAGE),
                                              self.timeout)
            except (TransportError, ProtocolError) as exc:
                raise self._failed(target, exc) from None
        else:
            target, resp = await self._read(GET, lambda target: api.Get(self.group, target, index, count, consistency,
                                                                        raw=True), peer)
        code = resp.get("code")
        if code == Code.INDEX_OUT_OF_RANGE:
            try:
                md = await self.metadata(target)
                begin, committed = md.begin_index, md.committed_index
            except (TransportError, ProtocolError, BadAnswer):
                begin = committed = None
            raise OutOfRange(f"{target}: {resp.get('remark') or 'index out of range'}", target, begin, committed)
        if code != Code.SUCCESS:
            name = Code(code).name if code in Code._value2member_map_ else str(code)
            raise ClientError(f"{target}: {name} {resp.get('remark') or ''}".strip())
        return resp["entries"]
