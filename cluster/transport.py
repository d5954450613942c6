"""asyncio transport: a frame server and a pipelining client. Only bytes move here.

Server: one reader task per connection. The handler answers a request frame at once (a
Frame) or later (an awaitable, run in its own task, so a slow request does not hold up
the ones behind it on the connection).
Frames written in one loop iteration go out in one write (on both sides), with
``drain()`` for back-pressure. A frame that cannot be
decoded closes that connection; nothing a peer sends can stop the server.

Client (:class:`Channel`): one connection per peer, many requests in flight on it, each
matched to its response by ``opaque`` and timed out on its own. A lost connection fails
every pending request with :class:`ConnectionLost` (chained with ``from`` the cause); the
next request reconnects, no sooner than a back-off that doubles up to a cap after each
failed attempt.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging

from .wire import DEFAULT_MAX_FRAME, FLAG_RESPONSE, Frame, FrameDecoder, ProtocolError, encode_frame

log = logging.getLogger("dledgerctl.transport")


class TransportError(Exception):
    """A request got no response: the peer is unreachable, slow, or went away."""


class RequestTimeout(TransportError):
    pass


class ConnectionLost(TransportError):
    pass


class Unreachable(TransportError):
    pass


class _Expired(Exception):
    """A request's timer fired before its response came (becomes RequestTimeout)."""


def _expire(fut: asyncio.Future, why: str | None = None) -> None:
    if not fut.done():
        fut.set_exception(_Expired() if why is None else RequestTimeout(why))


_DRAIN_ABOVE = 1 << 20  # a request waits for the socket only when this much is unsent


class _Coalescer:
    """Frames written during one loop iteration leave in one ``write`` (one send call)
    instead of one each; order is kept. Back-pressure stays with ``drain()``."""

    __slots__ = ("writer", "parts", "scheduled")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.parts: list[bytes] = []
        self.scheduled = False

    def send(self, data: bytes) -> None:
        self.parts.append(data)
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self.scheduled = False
        data, self.parts = b"".join(self.parts), []
        if data and not self.writer.is_closing():
            self.writer.write(data)


class FrameServer:
    def __init__(self, handler, *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        """``handler(frame)`` returns the response (a Frame), None for no response, or an
        awaitable of either."""
        self.handler = handler
        self.max_frame = max_frame
        self.server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task] = set()

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._serve, host, port, reuse_address=True)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for t in list(self._conns):
            t.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._conns.add(task)
        out = _Coalescer(writer)
        decoder = FrameDecoder(self.max_frame)
        inflight: set[asyncio.Task] = set()
        inflight_futures: set[asyncio.Future] = set()
        peer = writer.get_extra_info("peername")
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                try:
                    frames = decoder.feed(data)
                except ProtocolError as exc:
                    log.warning("closing connection from %s: %s", peer, exc)
                    break
                for f in frames:
                    if f.is_response:
                        continue  # nobody here asked
                    try:
                        resp = self.handler(f)
                    except Exception:  # noqa: BLE001 - a handler bug must not take the server down
                        log.exception("request code %s failed", f.code)
                        resp = Frame(1, f.opaque, FLAG_RESPONSE, "internal error")
                    if resp is None or isinstance(resp, Frame):
                        self._send(f, resp, out)
                        continue
                    if isinstance(resp, asyncio.Future):  # answered by whoever sets it: no task
                        resp.add_done_callback(functools.partial(self._sent_later, f, out))
                        inflight_futures.add(resp)
                        resp.add_done_callback(inflight_futures.discard)
                        continue
                    t = asyncio.create_task(self._answer(f, resp, out))
                    inflight.add(t)
                    t.add_done_callback(inflight.discard)
                if out.parts:
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # the server is closing; ending quietly keeps asyncio from logging the cancel
        finally:
            for t in inflight:
                t.cancel()
            for fut in inflight_futures:
                fut.cancel()  # its answer has nowhere to go (_sent_later ignores it)
            writer.close()
            self._conns.discard(task)

    async def _answer(self, f: Frame, pending, out: _Coalescer) -> None:
        try:
            resp = await pending
        except Exception:  # noqa: BLE001 - a handler bug must not take the server down
            log.exception("request code %s failed", f.code)
            resp = Frame(1, f.opaque, FLAG_RESPONSE, "internal error")
        self._send(f, resp, out)
        try:
            await out.writer.drain()
        except (ConnectionError, RuntimeError):
            pass

    def _sent_later(self, f: Frame, out: _Coalescer, fut: asyncio.Future) -> None:
        if fut.cancelled() or out.writer.is_closing():
            return
        exc = fut.exception()
        if exc is not None:
            log.error("request code %s failed: %s", f.code, exc)
            resp = Frame(1, f.opaque, FLAG_RESPONSE, "internal error")
        else:
            resp = fut.result()
        self._send(f, resp, out)

    @staticmethod
    def _send(f: Frame, resp: Frame | None, out: _Coalescer) -> None:
        if resp is None:
            return
        resp.opaque, resp.flag = f.opaque, resp.flag | FLAG_RESPONSE
        out.send(encode_frame(resp))


class Channel:
    """A client connection to one address, reconnecting on demand."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = 1.0, max_frame: int = DEFAULT_MAX_FRAME,
                 backoff_min: float = 0.05, backoff_max: float = 2.0) -> None:
        self.host, self.port = host, port
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.backoff_min, self.backoff_max = backoff_min, backoff_max
        self._backoff = 0.0
        self._retry_at = 0.0
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._opaque = itertools.count(1)
        self._connecting: asyncio.Lock | None = None
        self._out: _Coalescer | None = None
        self.closed = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _connect(self) -> None:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is not None:
                return
            loop = asyncio.get_running_loop()
            if loop.time() < self._retry_at:
                raise Unreachable(f"{self.address} unreachable (retrying in {self._retry_at - loop.time():.2f} s)")
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port),
                                                        self.connect_timeout)
            except (OSError, asyncio.TimeoutError) as exc:
                self._backoff = min(self.backoff_max, max(self.backoff_min, self._backoff * 2))
                self._retry_at = loop.time() + self._backoff
                raise Unreachable(f"cannot connect to {self.address}: {exc or 'timed out'}") from exc
            self._backoff = 0.0
            self._writer, self._out = writer, _Coalescer(writer)
            self._reader_task = asyncio.create_task(self._read(reader, writer))

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(self.max_frame)
        cause: BaseException | None = None
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                for f in decoder.feed(data):
                    fut = self._pending.pop(f.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(f)
        except (ConnectionError, ProtocolError) as exc:
            cause = exc
        except asyncio.CancelledError:
            cause = ConnectionLost("channel closed")
        finally:
            if self._writer is writer:
                self._writer = None
            writer.close()
            self._fail_pending(cause)

    def _fail_pending(self, cause: BaseException | None) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                err = ConnectionLost(f"connection to {self.address} lost")
                err.__cause__ = cause
                fut.set_exception(err)

    def send(self, frame: Frame, timeout: float) -> asyncio.Future | None:
        """Send ``frame`` now and return a future of its response (failing with
        RequestTimeout or ConnectionLost), without a coroutine; None when the channel is
        not connected (use :meth:`request`, which connects)."""
        if self.closed or self._writer is None or self._writer.is_closing():
            return None
        frame.opaque = opaque = next(self._opaque)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending[opaque] = fut
        timer = loop.call_later(timeout, _expire, fut, f"{self.address} did not answer within {timeout:.3g} s")

        def settled(_f: asyncio.Future) -> None:
            timer.cancel()
            self._pending.pop(opaque, None)

        fut.add_done_callback(settled)
        self._out.send(encode_frame(frame))
        return fut

    async def request(self, frame: Frame, timeout: float) -> Frame:
        """Send ``frame`` (its opaque is assigned here) and wait for its response."""
        if self.closed:
            raise ConnectionLost(f"channel to {self.address} is closed")
        if self._writer is None:
            await self._connect()
        frame.opaque = next(self._opaque)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending[frame.opaque] = fut
        # a timer that fails the future, cheaper than wrapping it in asyncio.wait_for
        timer = loop.call_later(timeout, _expire, fut)
        try:
            writer = self._writer
            if writer is None:
                raise ConnectionLost(f"connection to {self.address} lost")
            self._out.send(encode_frame(frame))
            if writer.transport.get_write_buffer_size() > _DRAIN_ABOVE:
                await writer.drain()
            return await fut
        except _Expired:
            raise RequestTimeout(f"{self.address} did not answer within {timeout:.3g} s") from None
        except ConnectionError as exc:
            raise ConnectionLost(f"connection to {self.address} lost: {exc}") from exc
        finally:
            timer.cancel()
            self._pending.pop(frame.opaque, None)

    async def close(self) -> None:
        self.closed = True
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)
        if self._writer is not None:
            self._writer.close()
        self._fail_pending(None)
