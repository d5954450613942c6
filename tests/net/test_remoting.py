"""cluster/net/remoting.py: answers decoded once, every number range-checked, a malformed answer
a BadAnswer (never another exception), a server that stays silent an Unreachable by the
timeout; and the watch's decision (dledgerctl/ops/controller_watch.py HoldBackTracker), pure,
driven by a clock of our own. The real controller answering these requests:
tests/java/test_controller_watch_java.py."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.net.frames import FLAG_RESPONSE, Frame, encode_frame
from cluster.net.remoting import (BadAnswer, ControllerClient, Refused, Unreachable, check_response, decode_master,
                                  decode_metadata, decode_sync_state_data)
from dledgerctl.ops.controller_watch import HELD_BACK, NO_MASTER, OK, WAITING, HoldBackTracker, View

A = "127.0.0.1:9878"


def answer(body=b"", ext=None, code=0, flag=FLAG_RESPONSE) -> Frame:
    return Frame(code, 1, flag, "", ext or {}, body)


def sync_body(table) -> bytes:
    return msgspec.json.encode({"replicasInfoTable": table})


GOOD = {"b1": {"masterBrokerId": 1, "masterAddress": "h:1", "masterEpoch": 3, "syncStateSetEpoch": 4,
               "inSyncReplicas": [{"brokerName": "b1", "brokerId": 1, "brokerAddress": "h:1", "alive": False},
                                  {"brokerName": "b1", "brokerId": 2, "brokerAddress": "h:2", "alive": True}],
               "notInSyncReplicas": [{"brokerName": "b1", "brokerId": 3, "brokerAddress": "h:3", "alive": True}]}}


def test_sync_state_data_as_fastjson_writes_it():
    info = decode_sync_state_data(A, answer(sync_body(GOOD)))["b1"]
    assert (info.master_broker_id, info.master_epoch, info.sync_state_set_epoch) == (1, 3, 4)
    v = View.of(info)
    assert (v.master_alive, v.sync_state_set, v.in_sync_alive, v.alive) == (False, (1, 2), (2,), (2, 3))
    assert decode_sync_state_data(A, answer(b"")) == {}


@pytest.mark.parametrize("change, words", [
    ({"masterEpoch": 1 << 31}, "masterEpoch"),
    ({"masterBrokerId": 1 << 63}, "masterBrokerId"),
    ({"masterBrokerId": "one"}, "masterBrokerId"),
    ({"masterEpoch": True}, "masterEpoch"),
    ({"inSyncReplicas": {"x": 1}}, "inSyncReplicas"),
    ({"inSyncReplicas": [{"brokerId": 1, "alive": "yes"}]}, "alive"),
    ({"inSyncReplicas": [7]}, r"inSyncReplicas\[0\]"),
    ({"masterAddress": "x" * 5000}, "masterAddress"),
])
def test_a_field_out_of_its_domain_is_a_bad_answer(change, words):
    body = sync_body({"b1": {**GOOD["b1"], **change}})
    with pytest.raises(BadAnswer, match=words):
        decode_sync_state_data(A, answer(body))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4), max_leaves=20)
    .map(lambda d: msgspec.json.encode({"replicasInfoTable": d})))
def test_whatever_the_body_it_decodes_or_is_a_bad_answer(body):
    try:
        decode_sync_state_data(A, answer(body))
    except BadAnswer:
        pass


def test_json_nested_too_deep_is_refused_before_parsing():
    with pytest.raises(BadAnswer, match="nests"):
        decode_sync_state_data(A, answer(b"[" * 100_000 + b"]" * 100_000))


def test_metadata_and_master_answers():
    md = decode_metadata(A, answer(ext={"group": "g", "controllerLeaderId": "n1", "isLeader": "false",
                                         "controllerLeaderAddress": "127.0.0.1:9879",
                                         "peers": "n0:127.0.0.1:9878;n1:127.0.0.1:9879;"}))
    assert (md.leader_id, md.leader_address, md.is_leader) == ("n1", "127.0.0.1:9879", False)
    assert md.peers == {"n0": "127.0.0.1:9878", "n1": "127.0.0.1:9879"}
    for ext, words in (({"peers": "n0-127.0.0.1:1"}, "peer"), ({"isLeader": "maybe"}, "isLeader"),
                       ({"controllerLeaderAddress": "nowhere"}, "controllerLeaderAddress")):
        with pytest.raises(BadAnswer, match=words):
            decode_metadata(A, answer(ext=ext))
    m = decode_master(A, answer(ext={"masterBrokerId": "2", "masterEpoch": "5"}))
    assert (m.master_broker_id, m.master_epoch, m.master_address) == (2, 5, None)
    for value in ("2x", "99999999999999999999", " 2", "1_0"):
        with pytest.raises(BadAnswer, match="masterBrokerId"):
            decode_master(A, answer(ext={"masterBrokerId": value}))


def test_a_refusal_names_rocketmqs_code_and_a_request_is_no_answer():
    with pytest.raises(Refused, match="CONTROLLER_NOT_LEADER: not leader") as exc:
        check_response(A, Frame(2007, 1, FLAG_RESPONSE, "not leader"), 1006)
    assert exc.value.code == 2007
    with pytest.raises(BadAnswer, match="not a response"):
        check_response(A, Frame(0, 1, 0), 1006)


async def _server(reply):
    """A server that reads one frame and answers with ``reply(frame bytes)`` (None: silence)."""
    async def handle(reader, writer):
        try:
            head = await reader.readexactly(4)
            data = await reader.readexactly(int.from_bytes(head, "big"))
            out = reply(data)
            if out is not None:
                writer.write(out)
                await writer.drain()
            await asyncio.sleep(3)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize("reply, error, words", [
    (lambda d: None, Unreachable, "did not answer"),
    (lambda d: b"\x7f\xff\xff\xff", Unreachable, "127.0.0.1"),  # (a frame length past the maximum: the connection is cut)
    (lambda d: encode_frame(Frame(0, 1, FLAG_RESPONSE, "", {"nextBrokerId": "-"})), BadAnswer, "nextBrokerId"),
    (lambda d: encode_frame(Frame(2005, 1, FLAG_RESPONSE, "bad")), Refused, "CONTROLLER_INVALID_REQUEST"),
])
def test_the_client_turns_every_misbehaviour_into_a_controller_error(reply, error, words):
    async def go():
        srv = await _server(reply)
        port = srv.sockets[0].getsockname()[1]
        try:
            async with ControllerClient(f"127.0.0.1:{port}", timeout=0.5) as c:
                with pytest.raises(error, match=words):
                    await c.next_broker_id("c", "b")
        finally:
            srv.close()
            await srv.wait_closed()
    asyncio.run(go())


def test_the_client_sends_a_brokers_request_as_rocketmq_reads_it():
    seen = []

    def reply(data):
        seen.append(data)
        return encode_frame(Frame(0, 1, FLAG_RESPONSE, "", {"nextBrokerId": "3"}))

    async def go():
        srv = await _server(reply)
        port = srv.sockets[0].getsockname()[1]
        try:
            async with ControllerClient(f"127.0.0.1:{port}", timeout=2) as c:
                assert await c.next_broker_id("c1", "b1") == 3
        finally:
            srv.close()
            await srv.wait_closed()
    asyncio.run(go())
    hlen = int.from_bytes(seen[0][:4], "big")
    assert hlen >> 24 == 0  # JSON
    header = msgspec.json.decode(seen[0][4:4 + (hlen & 0xFFFFFF)])
    assert header["code"] == 1012 and header["extFields"] == {"clusterName": "c1", "brokerName": "b1"}


# -- the decision ----------------------------------------------------------------------------

def view(master=1, master_alive=True, epoch=1, in_sync_alive=(2,)):
    return View("b1", master, "h:1" if master else None, master_alive, epoch, (1, 2), 1, tuple(in_sync_alive),
                tuple(in_sync_alive) + ((master,) if master_alive and master else ()))


def test_the_clock_runs_from_the_first_look_that_sees_the_master_gone_and_reports_once():
    t = HoldBackTracker(bound=10)
    assert [s.state for s in t.observe(0, [view()])] == [OK]
    s = t.observe(5, [view(master_alive=False)])[0]
    assert (s.state, s.held_back_seconds, s.new) == (WAITING, 0, False)
    s = t.observe(14, [view(master_alive=False)])[0]
    assert (s.state, s.held_back_seconds) == (WAITING, 9)
    s = t.observe(15, [view(master_alive=False)])[0]
    assert (s.state, s.held_back_seconds, s.new) == (HELD_BACK, 10, True)
    s = t.observe(20, [view(master_alive=False)])[0]
    assert (s.state, s.new) == (HELD_BACK, False)  # (one finding per episode)


def test_an_election_restarts_the_clock_and_a_healthy_failover_stays_quiet():
    t = HoldBackTracker(bound=10)
    t.observe(0, [view(master_alive=False)])
    s = t.observe(8, [view(master=None, master_alive=False, epoch=2)])[0]  # (an election that elected no one)
    assert (s.state, s.held_back_seconds) == (WAITING, 0)
    s = t.observe(12, [view(master=2, epoch=3, in_sync_alive=())])[0]
    assert s.state == OK and s.held_back_seconds is None


def test_no_in_sync_replica_alive_is_nothing_held_back_and_a_forgotten_set_starts_over():
    t = HoldBackTracker(bound=0)
    assert t.observe(0, [view(master_alive=False, in_sync_alive=())])[0].state == NO_MASTER
    assert t.observe(1, [view(master_alive=False)])[0].state == HELD_BACK
    assert t.observe(2, []) == []
    assert t.observe(3, [view(master_alive=False)])[0].new
