"""The asyncio transport (cluster/net/transport.py, server.py, channel.py) on real loopback sockets.

Channels must recover from whatever the far end does: close at once, go away with
requests in flight, come back. Every wait here has a deadline.
"""

from __future__ import annotations

import asyncio

import pytest

from cluster.node import runtime
from cluster.net.channel import Channel
from cluster.net.server import FrameServer
from cluster.net.transport import ConnectionLost, RequestTimeout, TransportError, Unreachable
from tests.support.ports import free_ports
from cluster.net.appends import unpack_bodies
from cluster.net.api_client import append_ext, append_request
from cluster.net.frames import FLAG_RESPONSE, Frame, response_bytes

HOST = "127.0.0.1"


def _free_port() -> int:
    return free_ports(1)[0]


def _echo(f: Frame, conn=None):
    return Frame(0, f.opaque, FLAG_RESPONSE, body=bytes(f.body))


async def _answered_again(ch: Channel, body: bytes, within: float = 5.0) -> Frame:
    """The answer to a request sent as soon as ``ch`` connects again (the server just came
    back); fails the test if it has not within ``within`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        try:
            return await ch.request(Frame(1, body=body), 1.0)
        except (Unreachable, ConnectionLost):
            assert loop.time() < deadline, "the channel never connected again"
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_channel_reconnects_after_the_far_end_closed_at_once(loop):
    """A listener that accepts and closes at once (a proxy whose target is down) makes
    requests fail; once a real server listens there, the channel connects again and is
    answered, however fast the first connections were closed."""
    async def main():
        port = _free_port()

        dead_port = _free_port()

        async def slam(reader, writer):  # what tests/support/faults.py's proxy does when its target is down
            try:
                await asyncio.open_connection(HOST, dead_port)
            except OSError:
                writer.transport.abort()

        slammer = await asyncio.start_server(slam, HOST, port, reuse_address=True)
        ch = Channel(HOST, port, connect_timeout=1.0, backoff_min=0.0001, backoff_max=0.0002)
        failures = 0
        for _ in range(200):  # enough for some connections to be lost before the connect returns
            try:
                await ch.request(Frame(1, body=b"x"), 1.0)
            except TransportError:
                failures += 1
                await asyncio.sleep(0.0003)
        assert failures == 200
        slammer.close()
        await slammer.wait_closed()

        server = FrameServer(_echo)
        await server.start(HOST, port)
        try:
            got = await _answered_again(ch, b"hello")
            assert bytes(got.body) == b"hello"
        finally:
            await ch.close()
            await server.close()

    runtime.run(main, loop)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_requests_in_flight_fail_when_the_server_goes_and_work_when_it_returns(loop):
    """Requests pipelined on one connection are matched by opaque, large and small; a
    server that goes away fails the ones still waiting with ConnectionLost; a new server
    on the same port is reached by the same channel."""
    async def main():
        port = _free_port()
        hold: list[asyncio.Future] = []

        def handler(f: Frame, conn):
            if f.code == 2:  # answered only when the test says so
                fut = asyncio.get_running_loop().create_future()
                hold.append(fut)
                return fut
            return _echo(f)

        server = FrameServer(handler)
        await server.start(HOST, port)
        ch = Channel(HOST, port, backoff_min=0.01, backoff_max=0.05)
        bodies = [bytes([k]) * n for k, n in enumerate((0, 1, 1000, 70_000, 300_000, 5))]
        got = await asyncio.gather(*(ch.request(Frame(1, body=b), 5.0) for b in bodies))
        assert [bytes(g.body) for g in got] == bodies

        # unanswered: each way of asking times out on its own, and the channel goes on
        with pytest.raises(RequestTimeout):
            await ch.request(Frame(2), 0.2)
        with pytest.raises(RequestTimeout, match="did not answer within 0.2 s"):
            await ch.send(Frame(2), 0.2)
        assert bytes((await ch.request(Frame(1, body=b"still"), 5.0)).body) == b"still"
        hold.clear()

        waiting = asyncio.ensure_future(ch.request(Frame(2), 5.0))
        while not hold:
            await asyncio.sleep(0.001)
        await server.close()
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(waiting, 5.0)

        server = FrameServer(handler)
        await server.start(HOST, port)
        try:
            assert bytes((await _answered_again(ch, b"again")).body) == b"again"
        finally:
            await ch.close()
            await server.close()

    runtime.run(main, loop)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_answers_later_callbacks_and_deadlines(loop):
    """A handler may answer later through the connection it was given, encoded whole, or
    in the handler itself; a stray second answer to one opaque is ignored by the client;
    an answer written after the client went away goes nowhere. A callback gets the answer
    or the timeout. Deadlines are kept by one timer per connection: a short request
    issued after a long one still times out first, and the long one when its own time
    comes."""
    async def main():
        lp = asyncio.get_running_loop()
        port = _free_port()
        later: list[tuple[object, Frame]] = []

        def handler(f: Frame, conn):
            if f.code == 3:  # answered in the handler itself
                conn.send_bytes(response_bytes(f.opaque, b'{"early":%d}' % len(f.body)))
            elif f.code == 5:  # ... in parts
                conn.send_parts([response_bytes(f.opaque, b'{"parts":1}')])
            elif f.code in (4, 6):  # answered when the test says so
                later.append((conn, f))
            return None

        server = FrameServer(handler)
        await server.start(HOST, port)
        ch = Channel(HOST, port)
        try:
            assert bytes((await ch.request(Frame(3, body=b"early"), 5.0)).body) == b'{"early":5}'

            got = lp.create_future()
            assert ch.send(Frame(4, body=b"cb"), 5.0, lambda frame, exc: got.set_result((frame, exc))) is True
            while not later:
                await asyncio.sleep(0.001)
            conn, req = later.pop()
            conn.send_bytes(response_bytes(req.opaque, b'{"cb":1}'))
            conn.send_bytes(response_bytes(req.opaque, b'{"twice":1}'))  # a stray second answer
            frame, exc = await asyncio.wait_for(got, 5.0)
            assert exc is None and bytes(frame.body) == b'{"cb":1}'

            assert bytes((await ch.request(Frame(5), 5.0)).body) == b'{"parts":1}'
            fut = ch.send(Frame(6), 5.0)
            while not later:
                await asyncio.sleep(0.001)
            conn, req = later.pop()
            conn.send_bytes(response_bytes(req.opaque, b'{"later":1}'))
            conn.flush()
            frame = await asyncio.wait_for(fut, 5.0)
            assert frame.is_response and bytes(frame.body) == b'{"later":1}'

            outcomes: dict[str, tuple[float, BaseException | None]] = {}
            done = asyncio.Event()

            def note(name):
                def cb(frame, exc):
                    outcomes[name] = lp.time() - t0, exc
                    if len(outcomes) == 2:
                        done.set()
                return cb

            t0 = lp.time()
            ch.send(Frame(4), 1.5, note("long"))
            ch.send(Frame(4), 0.2, note("short"))
            await asyncio.wait_for(done.wait(), 10.0)
            assert isinstance(outcomes["short"][1], RequestTimeout)
            assert isinstance(outcomes["long"][1], RequestTimeout)
            # (uvloop's clock counts whole milliseconds: a timer may fire a hair before its time)
            assert 0.199 <= outcomes["short"][0] < 1.0, outcomes
            assert outcomes["long"][0] >= 1.499, outcomes

            # answers to requests whose connection is gone go nowhere, and nothing breaks
            assert len(later) == 2
            await ch.close()
            await asyncio.sleep(0.05)
            deadline = lp.time() + 5.0
            while not all(conn.closed for conn, _req in later):
                assert lp.time() < deadline, "the server never saw the client go"
                await asyncio.sleep(0.01)
            for conn, req in later:
                conn.send_bytes(response_bytes(req.opaque, b"{}"))
                conn.send_parts([response_bytes(req.opaque, b"{}")])
                conn.flush()
            ch2 = Channel(HOST, port)
            try:
                assert bytes((await ch2.request(Frame(3, body=b"after"), 5.0)).body) == b'{"early":5}'
            finally:
                await ch2.close()
        finally:
            await ch.close()
            await server.close()

    runtime.run(main, loop)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_call_sends_encoded_requests_connected_or_not(loop):
    """Channel.call (the client's APPEND path, appends.append_request) connects when it has
    to, matches answers by the opaque it assigns, leaves large bodies as they are, and
    times out like request does."""
    async def main():
        port = _free_port()
        seen: list[Frame] = []

        def handler(f: Frame, conn):
            seen.append(f)
            if f.ext.get("group") == "slow":
                return asyncio.get_running_loop().create_future()  # never answered
            n = int(f.ext["count"])
            return Frame(0, body=b"".join(bytes(b) for b in unpack_bodies(f.body, n)))

        server = FrameServer(handler)
        await server.start(HOST, port)
        ch = Channel(HOST, port)
        try:
            ext = append_ext("g", 1)
            first = await ch.call(append_request, (ext, [b"before connecting"]), 5.0)  # (a coroutine)
            assert bytes(first.body) == b"before connecting"
            batches = [[bytes([k]) * n for n in sizes] for k, sizes in
                       enumerate([(1,), (10, 20), (40_000,), (20_000, 30_000), (100,) * 70, (300,) * 65])]
            got = await asyncio.gather(*(ch.call(append_request, (append_ext("g", len(b)), b), 5.0) for b in batches))
            assert [bytes(g.body) for g in got] == [b"".join(b) for b in batches]
            assert len({f.opaque for f in seen}) == len(seen) == 1 + len(batches)
            with pytest.raises(RequestTimeout):
                await ch.call(append_request, (append_ext("slow", 1), [b"x"]), 0.2)
        finally:
            await ch.close()
            await server.close()
        with pytest.raises(ConnectionLost):
            await ch.call(append_request, (ext, [b"closed"]), 1.0)

    runtime.run(main, loop)
