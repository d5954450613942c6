"""The answers the client types (cluster/net/answers.py): a member's METADATA, a GET's
entries, the leader's WATERMARKS rows, FORCE_COMPARE's and FORCE_TRUNCATE's results. A member that answers with a field of the wrong type
(``end_index`` a string, say) is an error of one line that names it, from the client and
from the commands: never a traceback, never a value of the wrong type passed on."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import socketserver
import threading

import msgspec
import pytest

from cluster.net import answers
from cluster.net.client import Client, ClientError
from cluster.net.frames import FLAG_RESPONSE, Frame, FrameReceiver, encode_frame
from cluster.net.wire import FORCE_COMPARE, FORCE_TRUNCATE, GET, METADATA, WATERMARKS
from cluster.raft.config import parse_peers
from tests.support.commands import cli

GROUP = "default"


def good_metadata(peer: str, port: int) -> dict:
    """What a dledgerctl leader of one member says (cluster/node/requests.py Requests.metadata)."""
    return {"id": peer, "group": GROUP, "role": "leader", "term": 3, "leader": peer, "voted_for": peer,
            "begin_index": 0, "end_index": 2, "end_term": 3, "committed_index": 2, "pending": 0, "member": "voter",
            "never_lead": False, "voters": [peer], "learners": [], "config_index": -1, "replication": [],
            "leaderId": peer, "code": 200, "address": f"127.0.0.1:{port}", "peers": {peer: f"127.0.0.1:{port}"},
            "flush": "async", "flush_interval_ms": 40, "pid": 1}


def good_entry(i: int) -> dict:
    return {"body": base64.b64encode(b"e%d" % i).decode(), "bodyCrc": 0, "chainCrc": 0, "channel": 0, "index": i,
            "magic": 1, "pos": 48 * i, "size": 50, "term": 3}


def good_watermark(peer: str, port: int) -> dict:
    return {"peer": peer, "address": f"127.0.0.1:{port}", "member": "voter", "alive": True, "state": "LEADER",
            "watermark": 2, "next_index": 3, "lag_entries": 0, "lag_bytes": 0, "in_flight": 0, "in_flight_bytes": 0,
            "ms_since_ack": 0, "lag_ms": 0, "last_error": "", "note": "", "leader": peer, "term": 3,
            "leader_end_index": 2, "committed_index": 2}


def good_compare(peer: str) -> dict:
    """(cluster/node/operator.py: the Divergence row, then what was done; ``kept`` only when
    the follower kept what was cut)"""
    return {"peer": peer, "mode": "terms", "leader_begin": 0, "leader_end": 2, "follower_begin": 0, "follower_end": 4,
            "follower_committed": 2, "match_index": 2, "first_diff": None, "truncate_from": 3, "to_cut": 2,
            "leader_term": None, "follower_term": None, "leader_digest": None, "follower_digest": None, "probes": 2,
            "compared": 0, "dry_run": False, "dropped": 2, "repaired": True, "kept": "/k/truncated-3.data"}


def good_truncate(peer: str) -> dict:
    return {"peer": peer, "from_index": 3, "dropped": 2, "follower_end": 2, "follower_committed": 2,
            "committed_index": 2}


class FakeMember:
    """A member ``n0`` at a port of its own that answers METADATA, GET (in JSON) and
    WATERMARKS as a dledgerctl leader does, but for ``spoil(code, answer)``, which may
    change the answer to a request of ``code``."""

    def __init__(self, spoil=lambda code, answer: None) -> None:
        member = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                rx = FrameReceiver()
                while True:
                    try:
                        data = self.request.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    for f in rx.feed(data):
                        self.request.sendall(encode_frame(member.answer(f)))

        self.spoil = spoil
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, f: Frame) -> Frame:
        if f.code == METADATA:
            o = good_metadata("n0", self.port)
        elif f.code == GET:
            asked = json.loads(bytes(f.body))
            o = {"group": GROUP, "leaderId": "n0", "term": 3, "code": 200,
                 "entries": [good_entry(i) for i in range(asked["index"], min(3, asked["index"] + asked["count"]))]}
        elif f.code == WATERMARKS:
            o = {"code": 200, "peers": [good_watermark("n0", self.port)]}
        elif f.code == FORCE_COMPARE:
            o = {"code": 200, **good_compare("n0")}
        elif f.code == FORCE_TRUNCATE:
            o = {"code": 200, **good_truncate("n0")}
        else:
            o = {"code": 1001, "remark": "not served here"}
        self.spoil(f.code, o)
        return Frame(0, f.opaque, FLAG_RESPONSE, body=json.dumps(o).encode())

    @property
    def peers(self) -> str:
        return f"n0-127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def spoiler(code: int, field: str, value):
    """Sets ``field`` of the answers to ``code`` to ``value`` (of its first entry or row, for
    GET and WATERMARKS)."""
    def spoil(c: int, o: dict) -> None:
        if c == code:
            (o["entries"][0] if code == GET else o["peers"][0] if code == WATERMARKS else o)[field] = value
    return spoil


def ask(member: FakeMember, work):
    async def go():
        c = Client(parse_peers(member.peers), GROUP, timeout=1.0)
        try:
            return await work(c)
        finally:
            await c.close()
    return asyncio.run(go())


@pytest.fixture
def member():
    made = []

    def make(spoil=lambda code, answer: None) -> FakeMember:
        made.append(FakeMember(spoil))
        return made[-1]
    yield make
    for m in made:
        m.close()


def test_a_well_formed_answer_comes_back_typed(member):
    m = member()
    state = ask(m, lambda c: c.metadata("n0"))
    assert isinstance(state, answers.NodeState)
    assert (state.id, state.role, state.impl, state.term, state.end_index, state.committed_index) == \
        ("n0", "leader", "dledgerctl", 3, 2, 2)
    assert state.peers == {"n0": f"127.0.0.1:{m.port}"} and state.applied_index is msgspec.UNSET
    assert state.other["flush"] == "async" and state.other["leaderId"] == "n0" and "end_index" not in state.other
    entries = ask(m, lambda c: c.get(1, 5, peer="n0"))
    assert [(e.index, e.body) for e in entries] == [(1, b"e1"), (2, b"e2")]
    rows = ask(m, lambda c: c.watermarks())
    assert [r.row() for r in rows] == [good_watermark("n0", m.port)]
    assert list(rows[0].row()) == list(good_watermark("n0", m.port))  # (the leader's key order)
    compared = ask(m, lambda c: c.force_compare("n0"))
    assert isinstance(compared, answers.CompareAnswer) and (compared.truncate_from, compared.kept) == (3, "/k/truncated-3.data")
    assert list(compared.row().items()) == list(good_compare("n0").items())
    cut = ask(m, lambda c: c.force_truncate("n0", 3))
    assert list(cut.row().items()) == list(good_truncate("n0").items()) and "kept" not in cut.row()


def test_a_java_nodes_metadata_is_completed():
    state = answers.node_state({"group": GROUP, "leaderId": "n1", "peers": {"n0": "h:1", "n1": "h:2"}, "code": 200},
                               "n0")
    assert (state.id, state.role, state.impl, state.leader, state.term, state.begin_index) == \
        ("n0", "follower", "dledger", "n1", None, None)
    assert state.other == {"leaderId": "n1", "code": 200}
    assert answers.node_state({"leaderId": None}, "n0").role == "candidate"


@pytest.mark.parametrize("code, field, value", [
    (METADATA, "end_index", "7"),
    (METADATA, "role", 1),
    (METADATA, "peers", ["n0"]),
    (METADATA, "scrub", "fine"),
    (GET, "index", "1"),
    (GET, "body", 5),
    (WATERMARKS, "watermark", "2"),
    (WATERMARKS, "alive", "yes"),
    (FORCE_COMPARE, "match_index", "2"),
    (FORCE_COMPARE, "repaired", None),
    (FORCE_TRUNCATE, "dropped", [2]),
])
def test_a_field_of_the_wrong_type_is_a_one_line_error_naming_the_member(member, code, field, value):
    m = member(spoiler(code, field, value))
    work = {METADATA: lambda c: c.metadata("n0"), GET: lambda c: c.get(1, 5, peer="n0"),
            WATERMARKS: lambda c: c.watermarks(), FORCE_COMPARE: lambda c: c.force_compare("n0"),
            FORCE_TRUNCATE: lambda c: c.force_truncate("n0", 3)}[code]
    with pytest.raises(ClientError) as exc:
        ask(m, work)
    text = str(exc.value)
    assert "\n" not in text and field in text and text.startswith("n0: "), text


@pytest.mark.parametrize("code, field, value, args", [
    (METADATA, "end_index", "7", ["get", "-i", "1", "--node", "n0"]),
    (METADATA, "committed_index", [], ["get", "-i", "1"]),
    (GET, "index", "1", ["get", "-i", "1", "--to-index", "2"]),
    (GET, "term", None, ["get", "-i", "1", "--node", "n0", "--format", "json"]),
    (WATERMARKS, "watermark", "2", ["peer", "watermarks", "--format", "json"]),
    (WATERMARKS, "state", 3, ["peer", "watermarks"]),
    (FORCE_COMPARE, "follower_end", "4", ["peer", "compare", "--peer", "n0"]),
    (FORCE_TRUNCATE, "follower_end", 2.5, ["peer", "truncate", "--peer", "n0", "--from-index", "3", "--yes"]),
])
def test_a_command_says_what_is_wrong_with_the_answer_in_one_line(member, code, field, value, args):
    m = member(spoiler(code, field, value))
    r = cli(*args, "--peers", m.peers, "--timeout", "1", timeout=30)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("Error: ") and "n0" in r.stderr and field in r.stderr, r.stderr


def test_cluster_status_shows_a_member_with_a_bad_answer_as_down_with_why(member):
    """(as a member that does not answer: its row says why, as that of one unreachable does)"""
    m = member(spoiler(METADATA, "end_index", "7"))
    r = cli("cluster", "status", "--peers", m.peers, "--timeout", "1", "--format", "json", timeout=30)
    assert "Traceback" not in r.stderr, r.stderr
    [row] = json.loads(r.stdout)
    assert row["state"] == "down" and "end_index" in row["error"] and "\n" not in row["error"], row


def test_the_fake_member_answers_as_a_node_would(member):
    """(the fake itself: well-formed answers make every command above work)"""
    m = member()
    r = cli("get", "-i", "1", "--to-index", "2", "--peers", m.peers, "--format", "json", timeout=30)
    assert r.returncode == 0 and json.loads(r.stdout)[1]["body"] == "e2", r.stderr
    r = cli("peer", "watermarks", "--peers", m.peers, "--format", "json", timeout=30)
    assert r.returncode == 0 and json.loads(r.stdout) == [good_watermark("n0", m.port)], r.stderr
    r = cli("peer", "compare", "--peer", "n0", "--peers", m.peers, "--format", "json", timeout=30)
    assert r.returncode == 0 and list(json.loads(r.stdout).items()) == list(good_compare("n0").items()), r.stderr
    r = cli("peer", "truncate", "--peer", "n0", "--from-index", "3", "--yes", "--peers", m.peers, "--format", "json",
            timeout=30)
    assert r.returncode == 0 and json.loads(r.stdout) == good_truncate("n0"), r.stderr
    with socket.create_connection(("127.0.0.1", m.port)):
        pass
