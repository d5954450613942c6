"""SNAPSHOT_READ (cluster/node/snapshotreads.py) on real node processes: a member's latest
snapshot read chunk by chunk is its file on disk byte for byte; each malformed or impossible
request is refused with its own code and changes nothing; a member without a state machine
says it keeps no snapshots. And the client's check of the binary answer (answers.py)."""

from __future__ import annotations

import asyncio
import json
import os
import zlib

import pytest

from cluster.net import answers
from cluster.net.client import Client, ClientError, Refused
from cluster.net.frames import FLAG_RESPONSE, BadMessage, Frame, json_body
from cluster.net.wire import SNAPSHOT_READ, decode_response
from cluster.raft.config import parse_peers
from cluster.raft.rpc import Code
from tests.support.commands import cli
from tests.support.group import file_sizes, wait_for


def _client(rec: dict) -> Client:
    return Client(parse_peers(rec["peers"]), rec["group"], timeout=10)


def _ask(rec: dict, work):
    async def go():
        c = _client(rec)
        try:
            return await work(c)
        finally:
            await c.close()
    return asyncio.run(go())


def _raw(rec: dict, node: str, body: dict) -> dict:
    """A SNAPSHOT_READ frame of ``body`` as it is (no client checks) to ``node``: its JSON answer."""
    async def go():
        c = _client(rec)
        try:
            f = await c.channels[node].request(Frame(SNAPSHOT_READ, body=json_body(body)), 10)
            return decode_response(f, SNAPSHOT_READ)
        finally:
            await c.close()
    return asyncio.run(go())


def _on_disk(base: str, node: str) -> list[dict]:
    r = cli("store", "snapshot", os.path.join(base, f"dledger-{node}"), "--format", "json")
    return [s for s in json.loads(r.stdout or "[]") if s["ok"]]


def test_a_snapshot_read_in_chunks_is_the_file_on_disk_and_bad_requests_are_refused(group):
    base, rec = group.recorded(3, "--state-machine", "kv", "--snapshot-threshold", "40",
                               sizes=file_sizes("1MiB", "64KiB"))
    r = cli("append", "--base-dir", base, *[a for i in range(100) for a in ("-d", f"k{i}={'v' * 200}")])
    assert r.returncode == 0, r.stderr
    wait_for(lambda: _on_disk(base, "n1"), 30, "n1's first snapshot")

    async def read_all(c: Client):
        first = await c.snapshot_chunk("n1", -1, 0, 1000)
        data, index = bytearray(first.data), first.index
        while len(data) < first.size:
            chunk = await c.snapshot_chunk("n1", index, len(data), 1000)
            assert (chunk.index, chunk.size, chunk.crc, chunk.offset) == (index, first.size, first.crc, len(data))
            data += chunk.data
        return first, bytes(data)

    first, data = _ask(rec, read_all)
    disk = next(s for s in _on_disk(base, "n1") if s["index"] == first.index)  # (nothing appended since: it stays)
    assert first.size > 1000 and (first.term, first.crc, first.size) == (disk["term"], disk["crc"], disk["size"])
    assert zlib.crc32(data) == first.crc and len(data) == first.size
    with open(os.path.join(disk["path"], "data"), "rb") as fh:
        assert fh.read() == data

    # refused, each with its own code (and nothing on the member changes: it keeps serving)
    for body, code in [({"index": -1, "offset": 0, "length": 0}, Code.UNEXPECTED_ARGUMENT),
                       ({"index": -1, "offset": 0, "length": (16 << 20) + 1}, Code.UNEXPECTED_ARGUMENT),
                       ({"index": -1, "offset": -1, "length": 10}, Code.UNEXPECTED_ARGUMENT),
                       ({"index": "1", "offset": 0, "length": 10}, Code.UNEXPECTED_ARGUMENT),
                       ({"index": first.index, "offset": first.size + 1, "length": 10}, Code.UNEXPECTED_ARGUMENT),
                       ({"index": 3, "offset": 0, "length": 10}, Code.INDEX_OUT_OF_RANGE),
                       ({"group": "other", "index": -1, "offset": 0, "length": 10}, Code.UNKNOWN_GROUP),
                       ({"remoteId": "n2", "index": -1, "offset": 0, "length": 10}, Code.UNKNOWN_MEMBER)]:
        got = _raw(rec, "n1", {"group": rec["group"], "remoteId": "n1", **body})
        assert got["code"] == code, (body, got)
    with pytest.raises(Refused) as exc:
        _ask(rec, lambda c: c.snapshot_chunk("n1", 3, 0, 10))
    assert exc.value.code == Code.INDEX_OUT_OF_RANGE and "n1" in str(exc.value)
    assert _ask(rec, lambda c: c.snapshot_chunk("n1", first.index, first.size, 10)).data == b""  # (at the end)
    assert cli("kv", "get", "--base-dir", base, "k1").returncode == 0


def test_a_member_without_a_state_machine_keeps_no_snapshots(group):
    _base, rec = group.recorded(3)
    with pytest.raises(Refused) as exc:
        _ask(rec, lambda c: c.snapshot_chunk("n0", -1, 0, 10))
    assert exc.value.code == Code.UNSUPPORTED and "no state machine" in str(exc.value)


@pytest.mark.parametrize("ext, why", [
    ({"index": "1", "term": "1", "size": "4", "crc": "0"}, "integers"),  # (offset missing)
    ({"index": "x", "term": "1", "size": "4", "crc": "0", "offset": "0"}, "integers"),
    ({"index": "-2", "term": "1", "size": "4", "crc": "0", "offset": "0"}, "index"),
    ({"index": "1", "term": "1", "size": "-4", "crc": "0", "offset": "0"}, "size"),
    ({"index": "1", "term": "1", "size": "4", "crc": str(1 << 33), "offset": "0"}, "crc"),
    ({"index": "1", "term": "1", "size": "4", "crc": "0", "offset": "2"}, "do not fit"),  # (3 bytes at 2 of 4)
])
def test_a_snapshot_answer_that_does_not_fit_is_a_bad_message(ext, why):
    f = Frame(0, 1, FLAG_RESPONSE, ext={"code": "200", **ext}, body=b"abc")
    with pytest.raises(BadMessage, match=why):
        answers.snapshot_chunk(f)
    ok = answers.snapshot_chunk(Frame(0, 1, FLAG_RESPONSE, ext={"code": "200", "index": "1", "term": "2", "size": "4",
                                                               "crc": "-1", "offset": "1"}, body=b"abc"))
    assert (ok.index, ok.term, ok.size, ok.crc, ok.offset, ok.data) == (1, 2, 4, 0xFFFFFFFF, 1, b"abc")


def test_client_error_names_the_member_when_it_is_unreachable():
    peers = "n0-127.0.0.1:1"  # (nothing listens on port 1)

    async def go():
        c = Client(parse_peers(peers), "g", timeout=1)
        try:
            await c.snapshot_chunk("n0", -1, 0, 10)
        finally:
            await c.close()
    with pytest.raises(ClientError, match="n0"):
        asyncio.run(go())
