"""A member that refuses this client (a revoked certificate, another group, a TLS port reached in
plain TCP, a plain port reached with TLS) is said to refuse it, with why, at once: `cluster
status` shows it `refused`, client commands end with that reason instead of waiting for a
leader, `cluster up` stops waiting, and a `get --follow` whose certificate is revoked ends.
Real node processes on 127.0.0.1 (issue 44, items 7 and 8).

Client commands here are given a --timeout far longer than the deadline the test waits for
them: a command that waited for a leader until its timeout fails the test by running too long.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from cluster.node import pki
from cluster.net.tls import Identity
from tests.net.test_tls_revoke import GROUP, _hup, _up
from tests.support.commands import cli
from tests.support.group import recorded, wait_for
from tests.support.paths import ROOT

LONG = "600"  # s: a client's --timeout no test waits for
DEADLINE = 60  # s: how long a command that must fail at once may take here


def _plain_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("DLEDGERCTL_TLS_")}


def run(*args):
    """The command line without any TLS of the environment (a plain client unless given some)."""
    env = dict(_plain_env(), PYTHONPATH=ROOT, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "dledgerctl", *args], capture_output=True, text=True,
                          timeout=DEADLINE, env=env)


def _certs(rec: dict, stem: str) -> list[str]:
    d = rec["tls"]["dir"]
    return ["--tls-cert", os.path.join(d, f"{stem}.pem"), "--tls-key", os.path.join(d, f"{stem}.key"),
            "--tls-ca", os.path.join(d, "ca.pem")]


def _revoke(rec: dict, uri: str) -> None:
    r = cli("certs", "revoke", rec["tls"]["dir"], "--identity", uri)
    assert r.returncode == 0, r.stderr
    before = {n["id"]: open(n["log"], errors="replace").read().count("CRL") for n in rec["nodes"]}
    _hup(rec)
    wait_for(lambda: all(open(n["log"], errors="replace").read().count("CRL") > before[n["id"]] for n in rec["nodes"]),
          10, "every member to reload its CRL")


def _line(proc: subprocess.Popen, seconds: float) -> str:
    """The next line ``proc`` writes to its stdout, within ``seconds``."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(seconds)
    assert got, f"no line within {seconds} s"
    return got[0]


def _one_error(r) -> str:
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert r.returncode == 1 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    return errors[0]


@pytest.fixture(scope="module")
def tls_group(module_group):
    base = module_group(3, "--tls")
    return base, recorded(base)


def test_a_revoked_client_is_refused_at_once_and_status_says_so(tls_group):
    base, rec = tls_group
    pki.issue(rec["tls"]["dir"], Identity(GROUP, "client", "gone"))
    mine = _certs(rec, "client-gone")
    assert run("append", "--peers", rec["peers"], "-d", "before", *mine).returncode == 0
    _revoke(rec, f"dledger://{GROUP}/client/gone")

    for args in (("append", "-d", "x"), ("get", "-i", "0"), ("kv", "get", "k"), ("peer", "watermarks")):
        r = run(*args, "--peers", rec["peers"], "--timeout", LONG, *mine)
        line = _one_error(r)
        assert "revoked" in line and "client gone" in line and "no leader" not in line, (args, line)

    r = run("cluster", "status", "--peers", rec["peers"], "--format", "json", "--timeout", LONG, *mine)
    assert r.returncode == 1, r.stderr
    rows = json.loads(r.stdout)
    assert [x["state"] for x in rows] == ["refused"] * 3, rows
    assert all("revoked" in x["error"] for x in rows), rows
    table = run("cluster", "status", "--peers", rec["peers"], *mine)
    assert table.returncode == 1 and table.stdout.count("refused") >= 3, table.stdout
    # the record's operator is served as before
    assert all(x["state"] == "up" for x in json.loads(cli("cluster", "status", "--base-dir", base, "--format",
                                                          "json").stdout))


def test_a_plain_client_at_a_tls_member_is_told_it_speaks_tls(tls_group):
    _base, rec = tls_group
    r = run("append", "--peers", rec["peers"], "-d", "x", "--timeout", LONG)
    line = _one_error(r)
    assert "speaks TLS" in line and "no leader" not in line, line
    r = run("get", "--peers", rec["peers"], "-i", "0", "--node", "n1", "--timeout", LONG)
    assert "speaks TLS" in _one_error(r)
    r = run("cluster", "status", "--peers", rec["peers"], "--format", "json")
    rows = json.loads(r.stdout)
    assert r.returncode == 1 and [x["state"] for x in rows] == ["refused"] * 3, rows
    assert all("speaks TLS" in x["error"] for x in rows), rows


def test_a_revoked_clients_follow_ends_with_one_error(tls_group):
    """docs/security.md: the open connections of a revoked certificate are closed at the reload;
    a `get --follow` of it ends there with one Error line naming the refusal (issue 44.8)."""
    _base, rec = tls_group
    pki.issue(rec["tls"]["dir"], Identity(GROUP, "client", "tail"))
    mine = _certs(rec, "client-tail")
    follow = subprocess.Popen([sys.executable, "-m", "dledgerctl", "get", "--follow", "-i", "0", "--peers",
                               rec["peers"], "--format", "jsonl", "--interval", "0.05", *mine],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(_plain_env(), PYTHONPATH=ROOT))
    try:
        # (it follows: an entry appended now comes out, after those before it)
        wait_for(lambda: run("append", "--peers", rec["peers"], "-d", "tick", *mine).returncode == 0, 20, "an append")
        while json.loads(_line(follow, 20))["body"] != "tick":
            pass
        _revoke(rec, f"dledger://{GROUP}/client/tail")
        try:
            out, err = follow.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            raise AssertionError("get --follow of a revoked certificate still runs") from None
        errors = [line for line in err.splitlines() if line.startswith("Error:")]
        assert follow.returncode == 1 and len(errors) == 1 and "Traceback" not in err, err
        assert "revoked" in errors[0] and "client tail" in errors[0], err
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()


def test_another_group_and_a_tls_client_at_a_plain_member_are_refused_at_once(group, tmp_path):
    _base, rec = group.recorded(3)
    peers = rec["peers"]
    r = run("append", "--peers", peers, "--group", "other", "-d", "x", "--timeout", LONG)
    line = _one_error(r)
    assert "UNKNOWN_GROUP" in line and "'default'" in line and "no leader" not in line, line
    r = run("cluster", "status", "--peers", peers, "--group", "other", "--format", "json")
    rows = json.loads(r.stdout)
    assert r.returncode == 1 and [x["state"] for x in rows] == ["refused"] * 3, rows
    assert all("UNKNOWN_GROUP" in x["error"] for x in rows), rows

    d = str(tmp_path / "tls")
    pki.issue(d, Identity(GROUP, "client", "app"))
    tls = ["--tls-cert", os.path.join(d, "client-app.pem"), "--tls-key", os.path.join(d, "client-app.key"),
           "--tls-ca", os.path.join(d, "ca.pem")]
    r = run("append", "--peers", peers, "-d", "x", "--timeout", LONG, *tls)
    line = _one_error(r)
    assert "plain TCP" in line and "no leader" not in line, line


def test_cluster_up_stops_waiting_when_the_members_refuse_its_certificate(group):
    base, rec = _up(group)
    _revoke(rec, f"dledger://{GROUP}/operator/admin")  # (the record's: cluster up asks with it)
    assert cli("cluster", "stop", "--base-dir", base, "n0").returncode == 0
    r = cli("cluster", "up", "--base-dir", base, "--wait", LONG, timeout=DEADLINE)
    line = _one_error(r)
    assert "revoked" in line and "operator admin" in line, line


def _serial(path: str) -> str:
    from cryptography import x509

    with open(path, "rb") as fh:
        return f"{x509.load_pem_x509_certificate(fh.read()).serial_number:X}"


def _lines_with(path: str, text: str) -> list[str]:
    return [line for line in open(path, errors="replace").read().splitlines() if text in line]


def test_a_revoked_certificate_is_logged_once_and_the_revoked_member_says_why(group):
    """Issue 44.16: a revoked client retrying logs one line per certificate, not one per
    connection; a revoked member's own log says why it is cut off."""
    import asyncio

    from cluster.net.channel import Channel
    from cluster.net.frames import Frame
    from cluster.net.tls import Tls, TlsFiles
    from cluster.net.wire import METADATA, json_body

    base, rec = _up(group)
    d = rec["tls"]["dir"]
    pki.issue(d, Identity(GROUP, "client", "noisy"))
    _revoke(rec, f"dledger://{GROUP}/client/noisy")
    node = rec["nodes"][0]
    host, port = node["address"].rsplit(":", 1)
    tls = Tls(TlsFiles(os.path.join(d, "client-noisy.pem"), os.path.join(d, "client-noisy.key"),
                       os.path.join(d, "ca.pem")))

    async def knock(times: int) -> list[str]:
        answers = []
        for _ in range(times):  # (a new connection each time, as retrying commands make)
            ch = Channel(host, int(port), ssl=tls.client, connect_timeout=5)
            try:
                frame = await ch.request(Frame(METADATA, body=json_body({"group": GROUP})), 5)
                answers.append(frame.remark)
            finally:
                await ch.close()
        return answers
    answers = asyncio.run(knock(30))
    assert all("revoked" in a for a in answers), answers[:2]
    serial = _serial(os.path.join(d, "client-noisy.pem"))
    assert len(_lines_with(node["log"], serial)) == 1, _lines_with(node["log"], serial)[:3]

    # a member: the others refuse it, and it says so in its own log
    rows = json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)
    gone = next(x["id"] for x in rows if x["role"] != "leader")
    gone_log = next(n["log"] for n in rec["nodes"] if n["id"] == gone)
    serial = _serial(os.path.join(d, f"member-{gone}.pem"))
    _revoke(rec, f"dledger://{GROUP}/member/{gone}")
    wait_for(lambda: any("cut off from" in line for line in _lines_with(gone_log, serial)), 20,
          f"{gone} to log why it is cut off")
    assert any("own certificate" in line for line in _lines_with(gone_log, serial))


def test_what_counts_as_refusing_this_client_for_good():
    """A refusal of a request every client may make (METADATA, APPEND, GET), a wrong member
    at the address or the other mode is remembered as the member refusing this client; an
    operator request refused to a client certificate is that request's refusal only."""
    from cluster.net.client import Client, NotServed, refusal_of
    from cluster.net.frames import Forbidden
    from cluster.net.transport import ConnectionLost, OtherMode, RequestTimeout, WrongPeer
    from cluster.net.wire import APPEND, WATERMARKS
    from cluster.raft.config import parse_peers

    c = Client(parse_peers("n0-127.0.0.1:1;n1-127.0.0.1:2"), GROUP)
    c._refusing("n0", Forbidden("refused: client app of group default has no operator role"), WATERMARKS)
    assert c.refused == {}
    c._refusing("n0", Forbidden("refused: certificate serial 1F (client app of group default) is revoked"), APPEND)
    c._refusing("n1", OtherMode("this member speaks TLS, and this client plain TCP"))
    assert c.refused == {"n0": "certificate serial 1F (client app of group default) is revoked",
                         "n1": "this member speaks TLS, and this client plain TCP"}
    assert str(c.rejected()).startswith("refused: n0: certificate serial 1F")
    assert refusal_of(WrongPeer("x")) and refusal_of(NotServed("METADATA refused: UNKNOWN_GROUP"))
    assert refusal_of(ConnectionLost("lost")) is None and refusal_of(RequestTimeout("slow")) is None
