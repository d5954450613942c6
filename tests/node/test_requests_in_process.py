"""A node's request path in this process: a one-member group's Node (cluster/node/process.py)
run on the test's own event loop with a real store in a temporary directory, and frames
handed to its Requests (``node.requests.serve``) as its server would hand them, answers read
from what it sends back on a recording connection. No process is started; the node listens
on a free loopback port only because ``Node.run`` serves one."""

from __future__ import annotations

import asyncio
import json

import pytest

from cluster.net import api
from cluster.net.api_client import append_ext, append_request, decode_append_answer, request_frame
from cluster.net.frames import REMOTING_NOT_SUPPORTED, Frame, FrameReceiver
from cluster.net.wire import APPEND, METADATA
from cluster.node.process import Node
from cluster.raft.config import NodeConfig, parse_peers
from cluster.raft.member import Role
from cluster.raft.rpc import Code
from tests.support.ports import free_ports


class Conn:
    """What Requests needs of a connection: its peer and identity, and the calls that send."""

    def __init__(self) -> None:
        self.peer, self.identity, self.refused = ("127.0.0.1", 1), None, None
        self.sent = FrameReceiver()
        self.frames: list[Frame] = []
        self.holds = 0
        self.read_seq = 0  # (the server's count of socket reads when it last read: reads join rounds by it)

    def hold(self) -> None:
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1

    def flush(self) -> None:
        pass

    def send_bytes(self, data) -> None:
        self.frames += self.sent.feed(bytes(data))

    def send_parts(self, parts) -> None:
        for p in parts:
            self.send_bytes(p)


async def _run(tmp_path, work):
    cfg = NodeConfig("g", "n0", parse_peers(f"n0-127.0.0.1:{free_ports(1)[0]}"), store_base_dir=str(tmp_path))
    node = Node(cfg)
    ready = asyncio.Event()
    task = asyncio.ensure_future(node.run(ready.set))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        loop = asyncio.get_running_loop()
        end = loop.time() + 10
        while node.core.member.role != Role.LEADER or node.store.committed_index < 0:  # (its no-op committed)
            assert loop.time() < end, "the one member did not lead within 10 s"
            await asyncio.sleep(0.01)
        return await work(node)
    finally:
        node.stop()
        await asyncio.wait_for(task, 10)


async def _answer(node, f: Frame, conn: Conn) -> Frame:
    """The answer to ``f``: returned now, awaited, or sent on ``conn`` later (an APPEND)."""
    out = node.requests.serve(f, conn)
    if isinstance(out, Frame):
        return out
    if out is not None:
        return await asyncio.wait_for(out, 10)
    loop = asyncio.get_running_loop()
    end = loop.time() + 10
    while not conn.frames:
        assert loop.time() < end, "no answer sent within 10 s"
        await asyncio.sleep(0.005)
    return conn.frames.pop(0)


def test_append_get_and_metadata_through_the_requests_of_a_node_in_process(tmp_path):
    async def work(node):
        conn = Conn()
        md = json.loads((await _answer(node, request_frame(api.Metadata(METADATA, "g", "n0")), conn)).body)
        assert md["role"] == "leader" and md["leaderId"] == "n0"
        end = node.store.end_index
        parts = append_request(7, append_ext("g", 3), [b"a", b"bb", b"ccc"])
        f, = FrameReceiver().feed(b"".join(bytes(p) for p in parts))
        answer = decode_append_answer(await _answer(node, f, conn))
        assert answer.code == Code.SUCCESS and [r[0] for r in answer.entries] == [end + 1, end + 2, end + 3]
        assert conn.holds == 0  # (an APPEND's hold on its connection is released with its answer)
        got = await _answer(node, request_frame(api.Get("g", "n0", end + 1, 3, "linearizable")), conn)
        entries = json.loads(got.body)["entries"]
        assert [e["index"] for e in entries] == [end + 1, end + 2, end + 3]
        return node.store.committed_index, end

    committed, end = asyncio.run(_run(tmp_path, work))
    assert committed == end + 3


@pytest.mark.parametrize("frame, code, why", [
    (Frame(APPEND, 1, ext={"group": "g", "count": "2"}, body=b"\x00\x00\x00\x05abc"), None,
     "too few for its size table"),  # (UNEXPECTED_ARGUMENT in the body, with the reason)
    (Frame(59999, 2), REMOTING_NOT_SUPPORTED, "request code 59999"),
])
def test_a_request_that_does_not_decode_is_answered_and_changes_nothing(tmp_path, frame, code, why):
    async def work(node):
        before = node.store.end_index
        out = await _answer(node, frame, Conn())
        return before, node.store.end_index, out

    before, after, out = asyncio.run(_run(tmp_path, work))
    assert before == after and out.is_response and out.opaque == frame.opaque
    if code is None:
        body = json.loads(out.body)
        assert body["code"] == Code.UNEXPECTED_ARGUMENT and why in body["remark"], body
    else:
        assert out.code == code and why in out.remark, (out.code, out.remark)
