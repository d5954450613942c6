"""The client side (:class:`Channel`): one connection per peer, many requests in flight on
it, each matched to its response by ``opaque`` and timed out on its own (by one timer per
connection, armed at the earliest deadline); a caller awaits the response or has a
callback called with it. A lost connection fails every pending request with
:class:`ConnectionLost` (chained with ``from`` the cause); the next request reconnects, no
sooner than a back-off that doubles up to a cap after each failed attempt.

A channel that ``diagnose``s (a client's) tells a member in the other mode from one that is
gone: a plain connection closed before any answer, or a TLS handshake cut short, is probed
once in the other mode (:func:`speaks_tls`, :func:`speaks_plain`), and an answer there
fails the request with :class:`OtherMode`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
from typing import Awaitable

from .frames import DEFAULT_MAX_FRAME, Frame, FrameReceiver, ProtocolError, encode_frame, json_body
from .tls import identity_of
from .transport import ConnectionLost, FrameConnection, OtherMode, RequestTimeout, Unreachable, WrongPeer, settle, why

log = logging.getLogger("dledgerctl.transport")

DRAIN_ABOVE = 1 << 20  # a request waits for the socket only when this much is unsent


def _opaques():
    """1, 2, ... 2^31 - 1, then 1 again: a request's opaque is a Java int on the wire (a
    busy leader sends 2^31 requests to a follower in hours; those of the last round were
    answered or timed out long before their opaque comes back)."""
    while True:
        yield from range(1, 1 << 31)


class _ClientConnection(FrameConnection):
    """Requests in flight, by opaque: (future or callback, deadline, timeout). One timer
    per connection, armed at the earliest deadline, expires them: no timer is made or
    cancelled per request, and a RequestTimeout's text is made only when one expires."""

    def __init__(self, channel: Channel) -> None:
        super().__init__(channel.max_frame)
        self.channel = channel
        self.pending: dict[int, tuple] = {}
        self.cause: BaseException | None = None
        self.answered = False  # a frame came back on it (a TLS port a plain client reached answers none)
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
            settle(target, None, RequestTimeout(f"{self.channel.address} did not answer within {timeout:.3g} s"))

    def frame_received(self, f: Frame) -> None:
        self.answered = True
        entry = self.pending.pop(f.opaque, None)
        if entry is not None:
            settle(entry[0], f, None)

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
                 backoff_min: float = 0.05, backoff_max: float = 2.0, ssl=None, expect=None, on_lost=None,
                 refuse=None, diagnose: bool = False) -> None:
        """``ssl``: a client SSLContext (mutual TLS), or None for plain TCP. ``expect(identity)``
        says why the server's certificate identity (cluster/net/tls.py) is not the one meant, or
        returns None: a connection to another one is closed and the request fails.
        ``on_lost()`` is called when an open connection is lost (the other side went away),
        with requests pending or not. ``refuse(peercert)`` says why a verified server
        certificate is refused all the same (revoked), or returns None. ``diagnose``: find out
        a member speaking the other mode (plain TCP or TLS) and say so (OtherMode)."""
        self.host, self.port = host, port
        self.ssl, self.expect, self.on_lost, self.refuse = ssl, expect, on_lost, refuse
        self.diagnose = diagnose
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
                if self.ssl is not None:
                    cert = transport.get_extra_info("peercert")
                    problem = self.expect(identity_of(cert)) if self.expect is not None else None
                    problem = problem or (self.refuse(cert) if self.refuse is not None else None)
                    if problem is not None:
                        conn.close()
                        raise WrongPeer(f"{self.address}: {problem}")
            except WrongPeer:
                self._backoff = self.backoff_max
                self._retry_at = loop.time() + self._backoff
                raise
            except (OSError, asyncio.TimeoutError) as exc:
                if self.diagnose and self.ssl is not None and _cut_short(exc) and \
                        await speaks_plain(self.host, self.port, self.connect_timeout):
                    self._backoff = self.backoff_max
                    self._retry_at = loop.time() + self._backoff
                    raise OtherMode(SPEAKS_PLAIN) from exc
                self._backoff = min(self.backoff_max, max(self.backoff_min, self._backoff * 2))
                self._retry_at = loop.time() + self._backoff
                raise Unreachable(f"cannot connect to {self.address}: {why(exc)}") from exc
            self._backoff = 0.0
            if self.closed:
                conn.close()
                raise ConnectionLost(f"channel to {self.address} is closed")
            self._conn = conn

    def close_if_refused(self) -> str | None:
        """Close the open connection when ``refuse`` now refuses its server's certificate (a
        CRL reloaded); why, or None."""
        conn = self._live()
        if conn is None or self.refuse is None or conn.transport is None:
            return None
        why = self.refuse(conn.transport.get_extra_info("peercert"))
        if why is not None:
            conn.close()
        return why

    @property
    def connected(self) -> bool:
        """Is a connection to the peer open now (none is opened to find out)?"""
        return self._live() is not None

    def _live(self) -> _ClientConnection | None:
        """The open connection, if any (one that has been lost is forgotten here)."""
        conn = self._conn
        if conn is not None and conn.closed:
            self._conn = conn = None
        return conn

    def _lost(self, conn: _ClientConnection, cause: BaseException | None) -> None:
        was_open = self._conn is conn
        if was_open:
            self._conn = None
        pending, conn.pending = conn.pending, {}
        for target, _deadline, _timeout in pending.values():
            err = ConnectionLost(f"connection to {self.address} lost" + (f": {why(cause)}" if cause else ""))
            err.__cause__ = cause
            settle(target, None, err)
        if was_open and not self.closed and self.on_lost is not None:
            self.on_lost()

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
        """Write the requests queued on the connection now (see FrameConnection.flush)."""
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
        together are one whole frame, e.g. cluster.net.api_client.append_request) and wait for its
        response, as :meth:`request` does for a Frame. A client's hot path: no Frame and no
        header dict are made, and the awaitable is the response's future itself when the
        channel is connected and its socket keeps up (no coroutine: a client making one
        request per append spent a tenth of its CPU on the coroutine)."""
        conn = self._live()
        if self.closed or conn is None or conn.unsent() > DRAIN_ABOVE:
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
        if conn.unsent() > DRAIN_ABOVE:
            await conn.drain()
        try:
            return await fut
        except ConnectionLost as exc:
            # (a TLS port closes a plain connection at its first bytes, without a word)
            if self.diagnose and self.ssl is None and not conn.answered and not self.closed and \
                    await speaks_tls(self.host, self.port, self.connect_timeout):
                raise OtherMode(SPEAKS_TLS) from exc
            raise

    async def close(self) -> None:
        self.closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            self._lost(conn, None)
        await asyncio.sleep(0)  # let the transport finish closing


# -- which mode an address speaks --------------------------------------------------------

SPEAKS_TLS = ("this member speaks TLS, and this client plain TCP: give it a certificate (--tls-cert, --tls-key "
              "and --tls-ca, or DLEDGERCTL_TLS_*)")
SPEAKS_PLAIN = "this member speaks plain TCP (it runs without --tls-cert), and this client TLS"
_PROBE_METADATA = 50000  # wire.METADATA: any frame server answers it


def _cut_short(exc: BaseException) -> bool:
    """A TLS handshake that ended as a plain frame server ends it (it closes, or answers what
    is no TLS record), not one refused for a certificate or not answered at all."""
    if isinstance(exc, (_ssl.SSLCertVerificationError, ConnectionRefusedError, asyncio.TimeoutError)):
        return False
    if isinstance(exc, _ssl.SSLError):
        return "alert" not in (exc.reason or str(exc)).lower()
    return isinstance(exc, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError))


async def _exchange(host: str, port: int, data: bytes, timeout: float, answer) -> bool:
    """Send ``data`` on a new plain connection; ``await answer(reader)``, False when the
    connection fails or ``timeout`` passes first."""
    async def go():
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(data)
            await writer.drain()
            return await answer(reader)
        finally:
            writer.close()
    try:
        return await asyncio.wait_for(go(), timeout)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ProtocolError):
        return False


async def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` answers a TLS ClientHello with a TLS record (a handshake, 0x16,
    or an alert, 0x15, of version 3.x): a TLS server."""
    ctx = _ssl.SSLContext(_ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, _ssl.CERT_NONE
    outgoing = _ssl.MemoryBIO()
    hello = ctx.wrap_bio(_ssl.MemoryBIO(), outgoing)
    try:
        hello.do_handshake()
    except _ssl.SSLWantReadError:
        pass

    async def answer(reader) -> bool:
        head = await reader.readexactly(2)
        return head[0] in (0x15, 0x16) and head[1] == 3
    return await _exchange(host, port, outgoing.read(), timeout, answer)


async def speaks_plain(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` answers a plain METADATA frame with a frame: a frame server
    without TLS (dledgerctl's or DLedger's)."""
    async def answer(reader) -> bool:
        head = await reader.readexactly(4)
        length = int.from_bytes(head, "big")
        if not 4 <= length <= 1 << 20:
            return False
        frames = FrameReceiver(1 << 20).feed(head + await reader.readexactly(length))
        return bool(frames) and frames[0].is_response
    return await _exchange(host, port, encode_frame(Frame(_PROBE_METADATA, 1, body=json_body({}))), timeout, answer)
