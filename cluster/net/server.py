"""The frame server: a node's listening side (see transport.py for the connection it is built on).

The handler answers a request frame at once (a Frame), later (it keeps the connection it is
given and writes the answer, encoded whole, when it is ready: no future or object per
request), or through an awaitable (run in its own task, so a slow request does not hold up
the ones behind it on the connection). A connection whose peer does not read its answers
stops being read (back-pressure) until they drain. A frame that cannot be decoded closes
that connection; nothing a peer sends can stop the server. Its limits (connections,
handshakes, idle and stalled connections, requests in flight per connection) keep its
descriptors and memory bounded.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from .frames import DEFAULT_MAX_FRAME, FLAG_RESPONSE, Frame, ProtocolError
from .repeats import Repeats, held_back
from .tls import identity_of
from .transport import FrameConnection, TooManyHandshakes

log = logging.getLogger("dledgerctl.transport")

# Answers queued on one connection leave once this many parts wait, not only when the loop
# iteration ends: a burst of answers (the 64 reads one socket read brought, or that one read
# round confirmed) reaches the client in pieces it can start on while the rest are made.
# Measured with 64 kv get clients in one process: 74k -> 144k/s serializable, 53k -> 81k/s
# linearizable (benchmarks/bench_reads.py). APPEND answers are written whole, per proposal.
ANSWER_PARTS_PER_WRITE = 16


class _ServerConnection(FrameConnection):
    def __init__(self, server: FrameServer) -> None:
        super().__init__(server.max_frame)
        self.server = server
        self.peer = None
        self.identity = None  # with TLS: who the client's certificate names (cluster/net/tls.py)
        self.peercert: dict | None = None  # with TLS: the client's certificate, as verified
        self.refused: str | None = None  # why every request on it is refused (its certificate is revoked)
        self.inflight: set = set()  # tasks and futures whose answers go out here
        self.held = 0  # requests the handler answers later (hold/release): APPENDs waiting to commit
        self.last_frame_at = self._loop.time()  # the last whole request (idle connections are closed)
        # when the frame now arriving began (None: none is): reset by every frame completed
        self.partial_since: float | None = None
        self._write_paused = self._full = False
        self._frames = 0
        self.read_seq = 0  # the server's count of socket reads when this connection last read

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.peer = transport.get_extra_info("peername")
        self.server._handshakes.pop(id(self), None)
        if self.server.ssl is not None:  # (called once the handshake has verified the certificate)
            self.peercert = transport.get_extra_info("peercert")
            self.identity = identity_of(self.peercert)
            self.refused = self.server.refuse(self.peercert) if self.server.refuse is not None else None
            if self.refused is not None:  # (a revoked certificate, cluster/net/crl.py: every request is refused)
                # once per certificate, not per connection: a client retrying connects again and again
                held = self.server.refused_certs.check(self.refused, self._loop.time())
                if held is not None:
                    log.warning("refusing every request from %s: %s%s", self.peer, self.refused,
                                held_back(held, "connection"))
        self.server._admit(self)

    def connection_lost(self, exc) -> None:
        super().connection_lost(exc)
        self.server._conns.discard(self)
        for t in list(self.inflight):
            t.cancel()  # a future's answer has nowhere to go (_answered ignores it)
        self.inflight.clear()

    def buffer_updated(self, nbytes: int) -> None:
        frames = self._frames
        self.server.reads += 1  # (the frames these bytes complete arrived no later than this read)
        self.read_seq = self.server.reads
        super().buffer_updated(nbytes)
        if not self.receiver.partial:
            self.partial_since = None
        elif self.partial_since is None or self._frames != frames:
            self.partial_since = self._loop.time()  # (a frame completed: the timer starts again)

    def stalled(self, now: float) -> bool:
        """A frame (or the handshake) has been arriving for longer than the frame timeout,
        while this side was reading (a connection this side stopped reading is not slow)."""
        return (self.partial_since is not None and not self._write_paused and not self._full
                and now - self.partial_since > self.server.frame_timeout)

    def bad_stream(self, exc: ProtocolError) -> None:
        length = getattr(exc, "length", 0)
        if (length >> 24) == 0x16 and (length >> 16) & 0xFF == 3:  # the first bytes of a TLS handshake
            exc = "it speaks TLS, and this node runs without --tls-cert"
        held = self.server.bad_streams.check(self.peer[0] if self.peer else None, self._loop.time())
        if held is not None:  # (one line per host every few seconds, however many connections it opens)
            log.warning("closing connection from %s: %s%s", self.peer, exc, held_back(held))
        self.close()

    # Reading stops while the answers do not drain (write back-pressure) and while more
    # requests than the server allows wait for their answers; it resumes when neither holds.
    def _reading(self) -> None:
        if self.closed or self.transport is None:
            return
        if self._write_paused or self._full:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._write_paused = True
        self._reading()  # no new requests until the answers drain

    def resume_writing(self) -> None:
        super().resume_writing()
        self._write_paused = False
        self._reading()

    def _check_full(self) -> None:
        full = len(self.inflight) + self.held
        limit = self.server.max_inflight
        if not self._full and full >= limit:
            self._full = True
            self._reading()
        elif self._full and full <= limit // 2:
            self._full = False
            self._reading()

    def hold(self) -> None:
        """A request on this connection will be answered later (the handler keeps it)."""
        self.held += 1
        self._check_full()

    def release(self, n: int = 1) -> None:
        """``n`` held requests were answered."""
        self.held = max(0, self.held - n)
        self._check_full()

    def frame_received(self, f: Frame) -> None:
        self.last_frame_at = self._loop.time()
        self._frames += 1
        if f.is_response:
            return  # nobody here asked
        try:
            resp = self.server.handler(f, self)
        except Exception:  # noqa: BLE001 - a handler bug must not take the server down
            held = self.server.bad_streams.check(("failed", f.code), self._loop.time())
            if held is not None:
                log.exception("request code %s failed%s", f.code, held_back(held))
            resp = Frame(1, f.opaque, FLAG_RESPONSE, "internal error")
        if resp is None or isinstance(resp, Frame):
            self.answer(f, resp)
            return
        if not isinstance(resp, asyncio.Future):  # an awaitable: a task of its own
            resp = asyncio.ensure_future(resp)
        self.inflight.add(resp)
        self._check_full()
        resp.add_done_callback(functools.partial(self._answered, f))

    def _answered(self, f: Frame, fut: asyncio.Future) -> None:
        self.inflight.discard(fut)
        self._check_full()
        if fut.cancelled() or self.closed:
            return
        exc = fut.exception()
        if exc is not None:
            held = self.server.bad_streams.check(("failed", f.code), self._loop.time())
            if held is not None:  # (as frame_received: a client must not be able to flood the log)
                log.error("request code %s failed: %s%s", f.code, exc, held_back(held), exc_info=exc)
            self.answer(f, Frame(1, f.opaque, FLAG_RESPONSE, "internal error"))
        else:
            self.answer(f, fut.result())

    def answer(self, f: Frame, resp: Frame | None) -> None:
        """Send ``resp`` as the answer to request ``f`` (nothing when None, or closed)."""
        if resp is None:
            return
        resp.opaque, resp.flag = f.opaque, resp.flag | FLAG_RESPONSE
        self.send_frame(resp)
        if len(self._parts) >= ANSWER_PARTS_PER_WRITE:
            self.flush()


STALLED_AFTER = 3.0  # s: a frame arriving this long no longer keeps its connection from eviction
REFUSED_LOG_WINDOW = 600.0  # s: a refused (revoked) certificate's connections are logged once per this
IDLE_BUFFER_S = 10.0  # s: a connection idle this long gives its receive buffer back


class FrameServer:
    """Limits, so that no client can take the server's descriptors, memory or attention:

    - ``max_connections``: a connection beyond it takes the place of the one idle longest
      (no request in flight), or is closed at once when every one is busy;
    - ``idle_timeout``: a connection that sends no request for this long is closed (the
      client's side reconnects when it needs to);
    - ``frame_timeout``: a frame begun must be complete within this (a client trickling a
      frame byte by byte, slowloris, is closed), as must a TLS handshake;
    - ``max_inflight``: requests waiting for their answers per connection; beyond it the
      connection is not read until half of them are answered;
    - bytes buffered per connection: at most one incomplete frame (``max_frame``) coming in,
      and going out answers up to the transport's high-water mark (then it is not read).
    """

    def __init__(self, handler, *, max_frame: int = DEFAULT_MAX_FRAME, ssl=None,
                 handshake_timeout: float = 10.0, max_connections: int = 1024, idle_timeout: float = 300.0,
                 frame_timeout: float = 30.0, max_inflight: int = 4096, refuse=None) -> None:
        """``handler(frame, conn)`` returns the response (a Frame), an awaitable of a Frame
        or None, or None for no response now. A handler that answers later keeps ``conn``
        and writes the whole answer frame, opaque included, with ``conn.send_bytes`` or
        ``conn.send_parts`` (and ``conn.flush()`` to send it before the loop iteration
        ends); on a connection lost meanwhile that does nothing."""
        self.handler = handler
        self.max_frame = max_frame
        self.ssl, self.handshake_timeout = ssl, handshake_timeout  # ssl: a server SSLContext, or None
        # refuse(peercert): why a verified client certificate is refused (revoked), or None
        self.refuse = refuse
        self.max_connections, self.idle_timeout = max_connections, idle_timeout
        self.frame_timeout, self.max_inflight = frame_timeout, max_inflight
        self.server: asyncio.base_events.Server | None = None
        self._conns: set[_ServerConnection] = set()
        self._sweeper: asyncio.Task | None = None
        self.closed_for = {"limit": 0, "idle": 0, "slow": 0}  # connections closed by the limits, by reason
        self.members: frozenset = frozenset()  # identities (cluster/net/tls.py) never evicted for another
        # TLS connections accepted whose handshake has not finished (id -> when accepted): at
        # most max_connections at once; past handshake_timeout, asyncio has closed them
        self._handshakes: dict[int, float] = {}
        self.bad_streams = Repeats()  # connections closed for bad bytes, logged per host
        self.refused_certs = Repeats(REFUSED_LOG_WINDOW)  # connections of a refused certificate, logged per certificate
        # socket reads so far, on every connection: a request parsed from read N arrived before
        # anything this server's process wrote after the count reached N (linearizable reads
        # join a heartbeat round sent after them this way, cluster/node/reads.py)
        self.reads = 0

    @property
    def upkeep(self) -> asyncio.Future | None:
        """The task that closes idle and stalled connections (None before start): it runs
        until close(), so its owner watches it for a failure."""
        return self._sweeper

    @property
    def connections(self) -> int:
        """Connections open now (past their TLS handshake)."""
        return len(self._conns)

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        tls = {} if self.ssl is None else {"ssl": self.ssl, "ssl_handshake_timeout": self.handshake_timeout}
        self.server = await loop.create_server(self._accept, host, port, reuse_address=True, backlog=1024, **tls)
        self._sweeper = asyncio.ensure_future(self._sweep())

    def _accept(self) -> _ServerConnection:
        """A new connection's protocol (before any TLS handshake). Connections still in their
        handshake are limited too: one beyond the limit is refused (closed) at once."""
        conn = _ServerConnection(self)
        if self.ssl is not None:
            now = conn._loop.time()
            if len(self._handshakes) >= self.max_connections:
                for k, at in list(self._handshakes.items()):
                    if now - at > self.handshake_timeout + 1:
                        del self._handshakes[k]
                if len(self._handshakes) >= self.max_connections:
                    self.closed_for["limit"] += 1
                    raise TooManyHandshakes(f"{len(self._handshakes)} TLS handshakes under way")
            self._handshakes[id(conn)] = now
        return conn

    def _evictable(self, c: _ServerConnection, now: float) -> bool:
        if c.identity is not None and c.identity in self.members:
            return False
        if c.inflight or c.held:
            return False
        # a frame or handshake dragging on for a few seconds does not hold its place
        return c.partial_since is None or now - c.partial_since > min(STALLED_AFTER, self.frame_timeout)

    def _admit(self, conn: _ServerConnection) -> bool:
        """Count a connection; at the limit, one evictable connection makes room, or ``conn``
        is closed."""
        if len(self._conns) >= self.max_connections:
            now = asyncio.get_running_loop().time()
            idle = [c for c in self._conns if self._evictable(c, now)]
            self.closed_for["limit"] += 1
            if not idle:
                conn.close()
                return False
            victim = min(idle, key=lambda c: c.partial_since if c.partial_since is not None else c.last_frame_at)
            self._conns.discard(victim)
            victim.close()
        self._conns.add(conn)
        return True



    async def _sweep(self) -> None:
        """Close connections idle too long, and those whose frame has not completed in time."""
        loop = asyncio.get_running_loop()
        period = max(0.05, min(self.idle_timeout, self.frame_timeout) / 4)
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for c in list(self._conns):
                if c.stalled(now):
                    self.closed_for["slow"] += 1
                    held = self.bad_streams.check(("slow", c.peer[0] if c.peer else None), now)
                    if held is not None:
                        log.warning("closing connection from %s: a frame has not completed in %g s%s", c.peer,
                                    self.frame_timeout, held_back(held))
                    c.close()
                elif (not c.inflight and not c.held and c.partial_since is None
                      and now - c.last_frame_at > self.idle_timeout):
                    self.closed_for["idle"] += 1
                    c.close()
                elif c.partial_since is None and now - c.last_frame_at > IDLE_BUFFER_S:
                    c.receiver.release()  # an idle connection keeps no receive buffer

    def close_refused(self) -> int:
        """Close the open connections whose certificate ``refuse`` now refuses (a CRL
        reloaded); how many."""
        by_why: dict[str, list] = {}
        for c in list(self._conns):
            why = self.refuse(c.peercert) if self.refuse is not None and c.peercert is not None else None
            if why is not None:
                by_why.setdefault(why, []).append(c.peer)
                c.close()
        for why, peers in by_why.items():  # (one line per certificate)
            more = f" and {len(peers) - 1} more" if len(peers) > 1 else ""
            log.warning("closing the connection from %s%s: %s", peers[0], more, why)
        return sum(len(p) for p in by_why.values())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self.server is not None:
            self.server.close()
        for c in list(self._conns):
            c.close()
            for t in list(c.inflight):
                t.cancel()
        # let the cancelled tasks and the transports finish closing
        for _ in range(3):
            await asyncio.sleep(0)
        if self.server is not None:
            await self.server.wait_closed()
