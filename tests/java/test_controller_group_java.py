"""dledgerctl against a live RocketMQ 5 controller group: three members, each RocketMQ 5.3.3's own
DLedgerController (its DLedger 0.3.1.2 server, DLedgerControllerStateMachine and role handler),
started with a ControllerConfig on 127.0.0.1 (tests/support/java/rocketmq5/ControllerGroupMember.java,
built by tests/support/javarocketmq5.py; skipped with the reason when a mirror, javac or a Debian jar
is missing). Brokers are registered through the controller's own methods, so the events in its log are
the ones a broker joining in controller mode makes. Every wait is bounded; every member is stopped at
the end, on failure too.
"""

from __future__ import annotations

import json

import pytest

from tests.support import javarocketmq5
from tests.support.commands import cli
from tests.support.group import wait_for
from tests.support.javabuild import Unavailable
from tests.support.ports import free_ports

GROUP = "DefaultControllerGroup"
CLUSTER = "DefaultCluster"


@pytest.fixture
def controllers(tmp_path):
    try:
        built = javarocketmq5.build()
    except Unavailable as exc:
        pytest.skip(str(exc))
    g = javarocketmq5.ControllerGroup(built, str(tmp_path / "controllers"), ["n0", "n1", "n2"], free_ports(3),
                                      GROUP)
    try:
        for n in g.ids:
            g.start(n)
        yield g
    finally:
        g.stop_all()


def statuses(g) -> list[dict]:
    r = cli("cluster", "status", "--peers", g.peers, "--group", GROUP, "--format", "json", "--timeout", "2")
    return json.loads(r.stdout) if r.stdout.strip() else []


def settled(g, leader: str | None = None) -> list[dict] | None:
    """The status rows once every member is up and names one leader (``leader`` if given)."""
    rows = statuses(g)
    leaders = {r.get("leader") for r in rows}
    if len(rows) != 3 or {r["state"] for r in rows} != {"up"} or len(leaders) != 1 or None in leaders:
        return None
    if leader is not None and leaders != {leader}:
        return None
    return rows


def ask_leader(g, leader: str, command: str) -> dict:
    """``command``'s answer from the controller of ``leader``, asked again while it answers
    CONTROLLER_NOT_LEADER (2007; changes nothing): a controller takes requests only once its
    own leader proposal is applied, a moment after DLedger names it leader (30 s at most)."""
    return wait_for(lambda: (lambda a: None if a.get("code") == 2007 else a)(g.ask(leader, command)), 30,
                    f"{leader} to serve as controller leader")


def events(g) -> list[dict]:
    r = cli("get", "--peers", g.peers, "--group", GROUP, "-i", "0", "--count", "100", "--decode",
            "rocketmq-controller", "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_status_events_and_transfer_on_a_live_controller_group(controllers, tmp_path):
    g = controllers
    rows = wait_for(lambda: settled(g), 90, "the controller members to elect a leader and all name it")
    assert {r["impl"] for r in rows} == {"dledger"}
    (leader,) = [r["id"] for r in rows if r["role"] == "leader"]
    assert sorted(r["role"] for r in rows) == ["follower", "follower", "leader"]
    term = rows[0]["term"]
    assert term >= 1 and all(r["term"] == term for r in rows)
    # DLedger's METADATA and HEART_BEAT carry no log positions: nothing is made up for them
    assert all(r[k] is None for r in rows for k in ("begin_index", "end_index", "committed_index"))

    # a broker set joins as a broker in controller mode does; a second broker of the set too
    first = ask_leader(g, leader, f"register {CLUSTER} broker-a 127.0.0.1:30911")
    assert first == {"brokerId": 1, "masterBrokerId": 1, "masterAddress": "127.0.0.1:30911", "masterEpoch": 1}
    second = g.ask(leader, f"register {CLUSTER} broker-a 127.0.0.1:30921")
    assert second["step"] == "electMaster" and second["code"] == 2011  # CONTROLLER_MASTER_STILL_EXIST
    got = events(g)
    assert [(e["index"], e["term"], e["type"]) for e in got] == [
        (0, term, "leader-proposal"), (1, term, "ApplyBrokerIdEvent"), (2, term, "ElectMasterEvent"),
        (3, term, "ApplyBrokerIdEvent")]
    assert got[1]["broker_name"] == "broker-a" and got[1]["fields"]["brokerAddress"] == "127.0.0.1:30911"
    assert got[1]["fields"]["newBrokerId"] == 1 and got[1]["fields"]["clusterName"] == CLUSTER
    assert got[2]["fields"] == {"newMasterElected": True, "newMasterBrokerId": 1}
    assert got[3]["fields"]["newBrokerId"] == 2 and got[3]["fields"]["brokerAddress"] == "127.0.0.1:30921"

    # DLedger has no request that reports replication watermarks: refused, saying why
    wm = cli("peer", "watermarks", "--peers", g.peers, "--group", GROUP, "--timeout", "5")
    assert wm.returncode == 1 and "Java DLedger" in wm.stderr and "Traceback" not in wm.stderr

    # DLedger's LEADERSHIP_TRANSFER: the controller role moves with it
    to = next(n for n in g.ids if n != leader)
    moved = cli("peer", "transfer-leader", "--to", to, "--peers", g.peers, "--group", GROUP, "--format", "json",
                "--timeout", "30")
    assert moved.returncode == 0, moved.stderr
    out = json.loads(moved.stdout)
    assert out["from"] == leader and out["to"] == to and out["term"] > term
    rows = wait_for(lambda: settled(g, to), 30, f"every member to name {to}")
    new_term = out["term"]
    assert all(r["term"] == new_term for r in rows)
    # the new leader's controller takes requests once its own proposal is applied; the old one refuses
    joined = wait_for(lambda: (lambda a: a if "brokerId" in a else None)(
        g.ask(to, f"register {CLUSTER} broker-b 127.0.0.1:30912")), 30, f"{to} to serve as controller leader")
    assert joined["masterBrokerId"] == joined["brokerId"] == 1
    refused = g.ask(leader, f"register {CLUSTER} broker-c 127.0.0.1:30913")
    assert refused["code"] == 2007  # CONTROLLER_NOT_LEADER
    got = events(g)
    assert [(e["index"], e["term"], e["type"], e["broker_name"]) for e in got[4:]] == [
        (4, new_term, "leader-proposal", None), (5, new_term, "ApplyBrokerIdEvent", "broker-b"),
        (6, new_term, "ElectMasterEvent", "broker-b")]

    # what the members wrote, replayed from their files once stopped, is what they decided
    g.stop_all()
    for n in g.ids:
        r = cli("controller", "state", f"{g.base}/{n}", "--format", "json")
        assert r.returncode == 0, r.stderr
        state = {s["broker_name"]: s for s in json.loads(r.stdout)}
        assert sorted(state) == ["broker-a", "broker-b"], n
        assert state["broker-a"]["master_broker_id"] == 1 and state["broker-a"]["master_epoch"] == 1
        assert state["broker-a"]["master_address"] == "127.0.0.1:30911"
        assert state["broker-b"]["master_address"] == "127.0.0.1:30912"
