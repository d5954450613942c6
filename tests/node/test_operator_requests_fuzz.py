"""Hypothesis over client and operator requests to a running node (issue 45, "the fuzzers
extended to ... operator requests").

Requests of every client and operator code (METADATA 50000, APPEND 50001, GET 50002, STATUS
52000, WATERMARKS 52001, FORCE_COMPARE 52002, FORCE_TRUNCATE 52003, QUERY 52006,
CHANGE_MEMBERS 52007, READ_INDEX 52008, DIGESTS 52009) with hostile fields: wrong types, bools for whole
numbers, huge and negative numbers, non-ASCII digits, missing fields, another group, unknown
ids, text where lists go, nesting deep, bodies that are no JSON, extFields of the wrong kind.
The property, for each: an answer frame with a DLedger response code (a body's ``code``, or a
remoting code in the header for a frame no request has), never INTERNAL_ERROR or "internal
error" for bad input; a refused request leaves the node's term, end and committed index and
members as they were; the node stays up and its log gets no traceback.

One real node (a group of one, so it leads) on 127.0.0.1, shared by the module; one connection."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import struct
import sys
import time

import pytest
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

from cluster.net.frames import FrameReceiver
from cluster.net.wire import (APPEND, CHANGE_MEMBERS, DIGESTS, FORCE_COMPARE, FORCE_TRUNCATE, GET, METADATA, QUERY,
                              READ_INDEX, STATUS, WATERMARKS)
from cluster.raft.rpc import Code
from tests.support.hostile import frame
from tests.support.paths import ROOT
from tests.support.ports import free_ports

CODES = [METADATA, APPEND, GET, STATUS, WATERMARKS, FORCE_COMPARE, FORCE_TRUNCATE, QUERY, CHANGE_MEMBERS, READ_INDEX,
         DIGESTS]
GROUP = "fz"
FIELDS = ["group", "remoteId", "index", "count", "raw", "consistency", "beginIndex", "body", "peer", "deep", "dryRun",
          "fromIndex", "kind", "id", "address", "query", "code", "leaderId", "first"]
REMOTING = {1, 2, 3, 16}  # (frames.py: a header's code for a frame no request has, or one refused outright)


class Peer:
    """One connection to the node; ``ask`` sends a frame and returns its answer."""

    def __init__(self, port: int):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.receiver = FrameReceiver()
        self.pending: list = []
        self.opaque = 0

    def ask(self, code: int, body: bytes, ext=None, header: bytes | None = None):
        self.opaque += 1
        self.sock.sendall(frame(code, body, ext, opaque=self.opaque, header=header))
        deadline = time.monotonic() + 20
        while True:
            for f in self.pending:
                if f.opaque == self.opaque:
                    self.pending.remove(f)
                    return f
            assert time.monotonic() < deadline, f"no answer to code {code} in 20 s"
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError(f"the node closed the connection on code {code}")
            self.pending = [f for f in self.pending if f.opaque > self.opaque - 50] + list(self.receiver.feed(chunk))


def state(peer: Peer) -> tuple:
    f = peer.ask(METADATA, json.dumps({"group": GROUP}).encode())
    d = json.loads(bytes(f.body))
    assert d["code"] == int(Code.SUCCESS), d
    return d["term"], d["end_index"], d["committed_index"], d["leaderId"], sorted(d["peers"].items())


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    base = tmp_path_factory.mktemp("reqfuzz")
    port, = free_ports(1)
    log_path = base / "n0.log"
    env = dict(os.environ, PYTHONPATH=ROOT)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "dledgerctl", "-v", "node", "start", "--id", "n0", "--peers",
                                 f"n0-127.0.0.1:{port}", "--group", GROUP, "--store-base-dir", str(base / "store")],
                                stdout=log, stderr=log, env=env)
    try:
        deadline = time.monotonic() + 60
        peer = None
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                peer = peer or Peer(port)
                if state(peer)[3] == "n0":
                    break
            except OSError:
                peer = None
            assert time.monotonic() < deadline, "the node did not lead within 60 s: " + log_path.read_text()
            time.sleep(0.05)  # (polling interval, under the deadline above)
        yield proc, peer, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


hostile = st.one_of(
    st.none(), st.booleans(),
    st.integers(), st.sampled_from([0, -1, -2, 1, 2 ** 31, 2 ** 63 - 1, 2 ** 63, -(2 ** 63) - 1, 2 ** 64, 10 ** 40]),
    st.floats(allow_nan=False), st.sampled_from([1.0, -0.0, 1e300, 0.5]),
    st.text(max_size=8), st.sampled_from([GROUP, "default", "n0", "n1", "n9", "²", "٣", "-5", "1", "true", "",
                                          "add", "remove", "linearizable", "serializable", "aGk=", "!!", "[]"]),
    st.lists(st.integers(), max_size=3), st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@st.composite
def requests(draw):
    """(code, body bytes, extFields or None, header bytes or None)."""
    code = draw(st.sampled_from(CODES))
    fields = draw(st.lists(st.sampled_from(FIELDS), unique=True, max_size=5))
    obj = {k: draw(hostile) for k in fields}
    if draw(st.booleans()):
        obj["group"] = GROUP  # (often the right group, so the checks past it are reached)
    shape = draw(st.integers(0, 9))
    if shape == 0:
        body = draw(st.binary(max_size=40))
    elif shape == 1:
        body = deep(draw(st.sampled_from([50, 200, 3000]))).encode()
    elif shape == 2:
        body = json.dumps(obj)[:-1].encode() + b',"x":' + deep(draw(st.sampled_from([100, 3000]))).encode() + b"}"
    elif shape == 3:
        body = json.dumps(draw(hostile)).encode()  # (JSON, but no object)
    elif shape == 4 and code == APPEND:  # bodies that add up (a packed run): only the count may be wrong
        parts = draw(st.lists(st.binary(max_size=6), min_size=1, max_size=4))
        body = (struct.pack(f">{len(parts)}i", *map(len, parts)) if len(parts) > 1 else
                struct.pack(">i", len(parts[0]))) + b"".join(parts)
    else:
        body = json.dumps(obj).encode()
    ext = None
    if code == APPEND or draw(st.integers(0, 4)) == 0:
        ext = {k: draw(st.one_of(st.text(max_size=6), st.sampled_from(["1", "0", "-1", "٣", "²", "99999999999999",
                                                                         " 1", "1_0", "2", "3", "+2", "\u0662", GROUP,
                                                                         "x"])))
               for k in draw(st.lists(st.sampled_from(["count", "group", "remoteId"]), unique=True, max_size=3))}
    header = None
    if draw(st.integers(0, 9)) == 0:  # extFields that are not text to text
        header = json.dumps({"code": code, "flag": 0, "opaque": 0, "language": "PYTHON", "version": 0,
                             "extFields": draw(st.one_of(hostile, st.dictionaries(st.text(max_size=3), hostile,
                                                                                      max_size=2)))}).encode()
    return code, body, ext, header


def new_log(log_path, at: int) -> str:
    with open(log_path, "rb") as fh:
        fh.seek(at)
        return fh.read().decode(errors="replace")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(req=requests())
@example(req=(READ_INDEX, b'{"group": 5}', None, None))
@example(req=(GET, b'{"group": "fz", "index": true, "count": 2}', None, None))
@example(req=(FORCE_TRUNCATE, b'{"group": "fz", "peer": "n0", "fromIndex": 18446744073709551616}', None, None))
@example(req=(CHANGE_MEMBERS, b'{"group": "fz", "kind": "add", "id": ["n1"], "address": 5}', None, None))
@example(req=(APPEND, b"", {"count": "\u0663", "group": GROUP}, None))
# found by this fuzzer: APPEND's extField count went through int(), so a count in Arabic-Indic
# digits, with spaces or with an underscore was taken and the entries appended; the other
# extFields on the wire (wire.ext_int) take plain ASCII digits only
@example(req=(APPEND, struct.pack(">2i", 1, 1) + b"ab", {"count": "\u0662", "group": GROUP}, None))
@example(req=(APPEND, struct.pack(">2i", 1, 1) + b"ab", {"count": " 2", "group": GROUP}, None))
@example(req=(APPEND, struct.pack(">2i", 1, 1) + b"ab", {"count": "0_2", "group": GROUP}, None))
@example(req=(QUERY, json.dumps({"group": GROUP, "query": base64.b64encode(b"x").decode()}).encode(), None, None))
def test_every_hostile_request_is_answered_with_a_dledger_code_and_changes_nothing(node, req):
    proc, watch, log_path = node
    code, body, ext, header = req
    peer = Peer(watch.port)
    if header is not None:
        header = header.replace(b'"opaque": 0', b'"opaque": 1')
    at = os.path.getsize(log_path)
    before = state(watch)
    try:
        f = peer.ask(code, body, ext, header)
    except ConnectionError:
        # (a header that does not decode closes the connection: no frame of it can be answered)
        assert header is not None, req
        f = None
    finally:
        peer.sock.close()
    after = state(watch)
    assert proc.poll() is None, new_log(log_path, at)
    written = new_log(log_path, at)
    assert "Traceback" not in written, written[:3000]
    if f is None:
        event("closed (a bad header)")
        assert after == before
        return
    if f.body:
        answer = json.loads(bytes(f.body))
        assert isinstance(answer, dict) and answer.get("code") in {int(c) for c in Code}, answer
        answered = answer["code"]
        remark = str(answer.get("remark", ""))
    else:  # (no body: a remoting code in the header)
        assert f.code in REMOTING, (f.code, f.remark)
        answered, remark = -f.code, f.remark or ""
    event(f"answered {answered}")
    assert answered != int(Code.INTERNAL_ERROR) and "internal error" not in remark.lower(), (req, answered, remark)
    if answered != int(Code.SUCCESS):
        assert after == before, (req, answered, remark)
    elif code == APPEND:  # (taken: its count was plain ASCII digits, as every number on the wire)
        count = (ext or {}).get("count", "")
        assert count.isascii() and count.isdigit(), (req, answered)
