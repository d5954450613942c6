"""asyncio transport: a frame server and a pipelining client. Only bytes move here.

Both sides are asyncio buffered protocols around :class:`cluster.net.wire.FrameReceiver`: the
kernel copies received bytes straight into the receiver's buffer (a frame of megabytes into
a buffer of its own), and frames are handled in the callback that completes them, with no
reader task and no stream buffer in between.

Server: the handler answers a request frame at once (a Frame), later (it keeps the
connection it is given and writes the answer, encoded whole, when it is ready: no future
or object per request), or through an awaitable (run in its own task, so a slow request
does not hold up the ones behind it on the connection). Frames written in one loop
iteration leave in one vectored write. A connection whose peer does not read its answers
stops being read (back-pressure) until they drain. A frame that cannot be decoded closes
that connection; nothing a peer sends can stop the server.

Client (:class:`Channel`): one connection per peer, many requests in flight on it, each
matched to its response by ``opaque`` and timed out on its own (by one timer per
connection, armed at the earliest deadline); a caller awaits the response or has a
callback called with it. A lost connection fails every pending request with
:class:`ConnectionLost` (chained with ``from`` the cause); the next request reconnects, no
sooner than a back-off that doubles up to a cap after each failed attempt.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Awaitable

from .repeats import Repeats, held_back
from .tls import identity_of
from .wire import DEFAULT_MAX_FRAME, FLAG_RESPONSE, JOIN_BELOW, Frame, FrameReceiver, ProtocolError, frame_head

log = logging.getLogger("dledgerctl.transport")


class TransportError(Exception):
    """A request got no response: the peer is unreachable, slow, or went away."""


class RequestTimeout(TransportError):
    pass


class ConnectionLost(TransportError):
    pass


class Unreachable(TransportError):
    pass


class TooManyHandshakes(Exception):
    """A TLS connection refused at accept: as many handshakes as connections allowed are under way."""


class WrongPeer(Unreachable):
    """The TLS peer's certificate is not the member meant (cluster/net/tls.py identities)."""


def _settle(target, frame: Frame | None, exc: BaseException | None) -> None:
    """Give a request's outcome to whoever waits: a future or a callback(frame, exc)."""
    if isinstance(target, asyncio.Future):
        if not target.done():  # (a caller may have given up on it)
            if exc is None:
                target.set_result(frame)
            else:
                target.set_exception(exc)
    else:
        try:
            target(frame, exc)
        except Exception:  # noqa: BLE001 - a caller's bug must not take the connection down
            log.exception("the callback of a request failed")


_DRAIN_ABOVE = 1 << 20  # a request waits for the socket only when this much is unsent


class _FrameConnection(asyncio.BufferedProtocol):
    """What both sides share: receiving into a FrameReceiver, writing coalesced frames,
    and write back-pressure."""

    def __init__(self, max_frame: int) -> None:
        self.receiver = FrameReceiver(max_frame)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parts: list = []
        self._flush_scheduled = False
        self._writable: asyncio.Future | None = None  # set while the transport is paused
        self._loop = asyncio.get_running_loop()
        self._join = False

    # -- receiving -------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        # Over TLS each write becomes at least one TLS record, encrypted and framed on its
        # own: what a burst queued goes out as one write (one copy; records of up to 16 KiB)
        self._join = transport.get_extra_info("sslcontext") is not None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.receiver.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.receiver.received(nbytes)
        except ProtocolError as exc:
            self.bad_stream(exc)
            return
        for f in frames:
            self.frame_received(f)
            if self.closed:
                return

    def frame_received(self, f: Frame) -> None:
        raise NotImplementedError

    def bad_stream(self, exc: ProtocolError) -> None:
        self.close()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._parts = []
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # -- sending ---------------------------------------------------------------------
    def send_frame(self, f: Frame) -> None:
        """Queue ``f``; everything queued in this loop iteration leaves in one write, at
        its end or at an earlier :meth:`flush`."""
        if self.closed:
            return
        head = frame_head(f)
        body = f.body
        if not body:
            self._parts.append(head)
        elif len(body) < JOIN_BELOW:
            self._parts.append(head + body)
        else:
            self._parts.append(head)
            self._parts.append(body)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_at_end)

    def send_bytes(self, data: bytes) -> None:
        """Queue a frame already encoded whole, like :meth:`send_frame`."""
        if self.closed:
            return
        self._parts.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_at_end)

    def send_parts(self, parts: list) -> None:
        """Queue the parts of frames already encoded, like :meth:`send_frame`."""
        if self.closed:
            return
        self._parts += parts
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_at_end)

    def flush(self) -> None:
        """Write what is queued now. For a caller that knows its burst of frames is
        complete: the frames leave without waiting for whatever else this loop iteration
        still has to do (in a node, say, a second follower's answer read in the same
        iteration)."""
        parts, self._parts = self._parts, []
        if parts and not self.closed and not self.transport.is_closing():
            if self._join and len(parts) > 1:
                self.transport.write(b"".join(parts))
            else:
                self.transport.writelines(parts)

    def _flush_at_end(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def unsent(self) -> int:
        return 0 if self.transport is None else self.transport.get_write_buffer_size()

    async def drain(self) -> None:
        """Wait while the transport holds more than its high-water mark."""
        if self._writable is not None and not self._writable.done():
            await self._writable


class _ServerConnection(_FrameConnection):
    def __init__(self, server: FrameServer) -> None:
        super().__init__(server.max_frame)
        self.server = server
        self.peer = None
        self.identity = None  # with TLS: who the client's certificate names (cluster/net/tls.py)
        self.inflight: set = set()  # tasks and futures whose answers go out here
        self.held = 0  # requests the handler answers later (hold/release): APPENDs waiting to commit
        self.last_frame_at = self._loop.time()  # the last whole request (idle connections are closed)
        # when the frame now arriving began (None: none is): reset by every frame completed
        self.partial_since: float | None = None
        self._write_paused = self._full = False
        self._frames = 0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.peer = transport.get_extra_info("peername")
        self.server._handshakes.pop(id(self), None)
        if self.server.ssl is not None:  # (called once the handshake has verified the certificate)
            self.identity = identity_of(transport.get_extra_info("peercert"))
        self.server._admit(self)

    def connection_lost(self, exc) -> None:
        super().connection_lost(exc)
        self.server._conns.discard(self)
        for t in list(self.inflight):
            t.cancel()  # a future's answer has nowhere to go (_answered ignores it)
        self.inflight.clear()

    def buffer_updated(self, nbytes: int) -> None:
        frames = self._frames
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
            self._answer(f, resp)
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
            log.error("request code %s failed: %s", f.code, exc, exc_info=exc)
            self._answer(f, Frame(1, f.opaque, FLAG_RESPONSE, "internal error"))
        else:
            self._answer(f, fut.result())

    def _answer(self, f: Frame, resp: Frame | None) -> None:
        if resp is None:
            return
        resp.opaque, resp.flag = f.opaque, resp.flag | FLAG_RESPONSE
        self.send_frame(resp)


STALLED_AFTER = 3.0  # s: a frame arriving this long no longer keeps its connection from eviction
IDLE_BUFFER_S = 10.0  # s: a connection idle this long gives its receive buffer back


def _opaques():
    """1, 2, ... 2^31 - 1, then 1 again: a request's opaque is a Java int on the wire (a
    busy leader sends 2^31 requests to a follower in hours; those of the last round were
    answered or timed out long before their opaque comes back)."""
    while True:
        yield from range(1, 1 << 31)


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
                 frame_timeout: float = 30.0, max_inflight: int = 4096) -> None:
        """``handler(frame, conn)`` returns the response (a Frame), an awaitable of a Frame
        or None, or None for no response now. A handler that answers later keeps ``conn``
        and writes the whole answer frame, opaque included, with ``conn.send_bytes`` or
        ``conn.send_parts`` (and ``conn.flush()`` to send it before the loop iteration
        ends); on a connection lost meanwhile that does nothing."""
        self.handler = handler
        self.max_frame = max_frame
        self.ssl, self.handshake_timeout = ssl, handshake_timeout  # ssl: a server SSLContext, or None
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
                    log.warning("closing connection from %s: a frame has not completed in %g s", c.peer,
                                self.frame_timeout)
                    c.close()
                elif (not c.inflight and not c.held and c.partial_since is None
                      and now - c.last_frame_at > self.idle_timeout):
                    self.closed_for["idle"] += 1
                    c.close()
                elif c.partial_since is None and now - c.last_frame_at > IDLE_BUFFER_S:
                    c.receiver.release()  # an idle connection keeps no receive buffer

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


class _ClientConnection(_FrameConnection):
    """Requests in flight, by opaque: (future or callback, deadline, timeout). One timer
    per connection, armed at the earliest deadline, expires them: no timer is made or
    cancelled per request, and a RequestTimeout's text is made only when one expires."""

    def __init__(self, channel: Channel) -> None:
        super().__init__(channel.max_frame)
        self.channel = channel
        self.pending: dict[int, tuple] = {}
        self.cause: BaseException | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def add(self, opaque: int, target, deadline: float, timeout: float) -> None:
        self.pending[opaque] = target, deadline, timeout
        if self._timer is None or deadline < self._timer_at:
            self._arm(deadline)

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = self._loop.call_at(at, self._sweep), at

    def _sweep(self) -> None:
        self._timer = None
        now = self._loop.time()
        expired = [(o, e) for o, e in self.pending.items() if e[1] <= now]
        for opaque, _e in expired:
            del self.pending[opaque]
        if self.pending:
            self._arm(min(e[1] for e in self.pending.values()))
        for _opaque, (target, _deadline, timeout) in expired:
            _settle(target, None, RequestTimeout(f"{self.channel.address} did not answer within {timeout:.3g} s"))

    def frame_received(self, f: Frame) -> None:
        entry = self.pending.pop(f.opaque, None)
        if entry is not None:
            _settle(entry[0], f, None)

    def bad_stream(self, exc: ProtocolError) -> None:
        self.cause = exc
        self.close()

    def connection_lost(self, exc) -> None:
        super().connection_lost(exc)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.channel._lost(self, exc or self.cause)


class Channel:
    """A client connection to one address, reconnecting on demand."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = 1.0, max_frame: int = DEFAULT_MAX_FRAME,
                 backoff_min: float = 0.05, backoff_max: float = 2.0, ssl=None, expect=None) -> None:
        """``ssl``: a client SSLContext (mutual TLS), or None for plain TCP. ``expect(identity)``
        says why the server's certificate identity (cluster/net/tls.py) is not the one meant, or
        returns None: a connection to another one is closed and the request fails."""
        self.host, self.port = host, port
        self.ssl, self.expect = ssl, expect
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.backoff_min, self.backoff_max = backoff_min, backoff_max
        self._backoff = 0.0
        self._retry_at = 0.0
        self._conn: _ClientConnection | None = None
        self._opaque = _opaques()
        self._connecting: asyncio.Lock | None = None
        self.closed = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _connect(self) -> None:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._live() is not None:
                return
            loop = asyncio.get_running_loop()
            if loop.time() < self._retry_at:
                raise Unreachable(f"{self.address} unreachable (retrying in {self._retry_at - loop.time():.2f} s)")
            tls = {} if self.ssl is None else {"ssl": self.ssl, "ssl_handshake_timeout": self.connect_timeout}
            try:
                transport, conn = await asyncio.wait_for(
                    loop.create_connection(lambda: _ClientConnection(self), self.host, self.port, **tls),
                    self.connect_timeout)
                if conn.closed:  # accepted and closed at once (say, by a proxy whose target is down)
                    raise ConnectionResetError("closed as soon as it was opened")
                sock = transport.get_extra_info("socket")
                if sock is not None and sock.getsockname() == sock.getpeername():
                    # TCP simultaneous open onto itself: nobody listens on a port in the
                    # ephemeral range, and holding this would keep its owner from binding it
                    conn.close()
                    raise ConnectionRefusedError("connected to itself (nothing listens there)")
                if self.ssl is not None and self.expect is not None:
                    problem = self.expect(identity_of(transport.get_extra_info("peercert")))
                    if problem is not None:
                        conn.close()
                        raise WrongPeer(f"{self.address}: {problem}")
            except WrongPeer:
                self._backoff = self.backoff_max
                self._retry_at = loop.time() + self._backoff
                raise
            except (OSError, asyncio.TimeoutError) as exc:
                self._backoff = min(self.backoff_max, max(self.backoff_min, self._backoff * 2))
                self._retry_at = loop.time() + self._backoff
                raise Unreachable(f"cannot connect to {self.address}: {exc or 'timed out'}") from exc
            self._backoff = 0.0
            if self.closed:
                conn.close()
                raise ConnectionLost(f"channel to {self.address} is closed")
            self._conn = conn

    def _live(self) -> _ClientConnection | None:
        """The open connection, if any (one that has been lost is forgotten here)."""
        conn = self._conn
        if conn is not None and conn.closed:
            self._conn = conn = None
        return conn

    def _lost(self, conn: _ClientConnection, cause: BaseException | None) -> None:
        if self._conn is conn:
            self._conn = None
        pending, conn.pending = conn.pending, {}
        for target, _deadline, _timeout in pending.values():
            err = ConnectionLost(f"connection to {self.address} lost")
            err.__cause__ = cause
            _settle(target, None, err)

    def _issue(self, conn: _ClientConnection, frame: Frame, timeout: float, target=None):
        # The answer, the connection's deadline sweep or its loss settles the request,
        # each taking it out of ``pending`` first.
        frame.opaque = opaque = next(self._opaque)
        if target is None:
            target = conn._loop.create_future()
        conn.add(opaque, target, conn._loop.time() + timeout, timeout)
        conn.send_frame(frame)
        return target

    def _issue_encoded(self, conn: _ClientConnection, encode, args: tuple, timeout: float):
        opaque = next(self._opaque)
        fut = conn._loop.create_future()
        conn.add(opaque, fut, conn._loop.time() + timeout, timeout)
        conn.send_parts(encode(opaque, *args))
        return fut

    def flush(self) -> None:
        """Write the requests queued on the connection now (see _FrameConnection.flush)."""
        conn = self._conn
        if conn is not None:
            conn.flush()

    def send(self, frame: Frame, timeout: float, callback=None) -> asyncio.Future | bool | None:
        """Send ``frame`` now, without a coroutine. With ``callback``, it is called once
        with (response, None) or (None, RequestTimeout | ConnectionLost) and True is
        returned; without, a future of the response (failing with those). None when the
        channel is not connected (nothing is sent; use :meth:`request`, which connects)."""
        conn = self._live()
        if self.closed or conn is None:
            return None
        target = self._issue(conn, frame, timeout, callback)
        return True if callback is not None else target

    def call(self, encode, args: tuple, timeout: float) -> Awaitable[Frame]:
        """Send the request ``encode(opaque, *args)`` makes (a list of bytes-like parts that
        together are one whole frame, e.g. cluster.net.wire.append_request) and wait for its
        response, as :meth:`request` does for a Frame. A client's hot path: no Frame and no
        header dict are made, and the awaitable is the response's future itself when the
        channel is connected and its socket keeps up (no coroutine: a client making one
        request per append spent a tenth of its CPU on the coroutine)."""
        conn = self._live()
        if self.closed or conn is None or conn.unsent() > _DRAIN_ABOVE:
            return self._request(conn, encode, args, timeout)
        return self._issue_encoded(conn, encode, args, timeout)

    async def request(self, frame: Frame, timeout: float) -> Frame:
        """Send ``frame`` (its opaque is assigned here) and wait for its response."""
        return await self._request(None, None, (frame,), timeout)

    async def _request(self, conn, encode, args: tuple, timeout: float) -> Frame:
        if self.closed:
            raise ConnectionLost(f"channel to {self.address} is closed")
        if conn is None:
            if self._live() is None:
                await self._connect()
            conn = self._live()
            if conn is None:
                raise ConnectionLost(f"connection to {self.address} lost")
        if encode is None:
            fut = self._issue(conn, args[0], timeout)
        else:
            fut = self._issue_encoded(conn, encode, args, timeout)
        if conn.unsent() > _DRAIN_ABOVE:
            await conn.drain()
        return await fut

    async def close(self) -> None:
        self.closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            self._lost(conn, None)
        await asyncio.sleep(0)  # let the transport finish closing
