"""asyncio transport: a frame server (server.py) and a pipelining client (channel.py) over
the frame connection here. Only bytes move in these three modules.

Both sides are asyncio buffered protocols around :class:`cluster.net.frames.FrameReceiver`
(:class:`FrameConnection`): the kernel copies received bytes straight into the receiver's
buffer (a frame of megabytes into a buffer of its own), and frames are handled in the
callback that completes them, with no reader task and no stream buffer in between. Frames
written in one loop iteration leave in one vectored write.

The errors a request can end with are here too (:class:`TransportError` and its kinds).
"""

from __future__ import annotations

import asyncio
import logging

from .api_client import JOIN_BELOW
from .frames import Frame, FrameReceiver, ProtocolError, frame_head

log = logging.getLogger("dledgerctl.transport")


class TransportError(Exception):
    """A request got no response: the peer is unreachable, slow, or went away."""


class RequestTimeout(TransportError):
    pass


class ConnectionLost(TransportError):
    pass


def why(exc: BaseException | None) -> str:
    """What went wrong, in words, for an error whose text may be empty (a reset connection
    says nothing; an SSL error's text is its library's code): TLS errors name the alert or
    the verification failure."""
    import ssl

    if exc is None:
        return "no reason given"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: certificate verify failed: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        reason = (exc.reason or str(exc)).replace("_", " ").lower()
        if "alert" in reason:  # (the other side refused our certificate, and said why)
            return f"TLS: the other side refused this connection ({reason})"
        return f"TLS: {reason}"
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    text = str(exc)
    if isinstance(exc, OSError) and exc.errno and exc.strerror:
        text = exc.strerror
    return text or {ConnectionResetError: "connection reset by the other side"}.get(type(exc), type(exc).__name__)


class Unreachable(TransportError):
    pass


class TooManyHandshakes(Exception):
    """A TLS connection refused at accept: as many handshakes as connections allowed are under way."""


class WrongPeer(Unreachable):
    """The TLS peer's certificate is not the member meant (cluster/net/tls.py identities)."""


class OtherMode(Unreachable):
    """The address speaks TLS and this side plain TCP, or the other way round (channel.py
    finds it out when asked to: a probe in the other mode is answered)."""


def settle(target, frame: Frame | None, exc: BaseException | None) -> None:
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


class FrameConnection(asyncio.BufferedProtocol):
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
