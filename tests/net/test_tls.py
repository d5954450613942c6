"""Mutual TLS with identities: real node processes on 127.0.0.1, certificates from cluster/node/pki.py.

Who may do what (cluster/net/tls.py): members of the group send VOTE, HEART_BEAT and PUSH as
themselves; clients append, get and read; operators also cut followers and move
leadership. Everything else is refused with one clear error, and nothing changes.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import stat

import pytest

from cluster.node import pki
from cluster.net.channel import Channel
from cluster.net.frames import REMOTING_NO_PERMISSION
from cluster.net.tls import Identity, Tls, TlsFiles, identity_of, parse_uri, refusal
from cluster.net.transport import TransportError
from cluster.net.wire import request_frame
from cluster.raft.rpc import HeartBeatRequest, PushRequest, PushType, VoteRequest
from tests.support.commands import cli
from tests.support.group import recorded
from tests.support.ports import free_port_base

GROUP = "default"  # (cluster up's)


def test_identities_and_who_may_do_what():
    member = Identity("g", "member", "n1")
    assert parse_uri(member.uri) == member and str(member) == "member n1 of group g"
    for bad in ("dledger://g/member", "dledger://g/king/n1", "https://g/member/n1", "dledger://g//n1"):
        assert parse_uri(bad) is None
    assert identity_of({"subjectAltName": (("URI", member.uri), ("DNS", "localhost"))}) == member
    assert identity_of({"subjectAltName": (("URI", member.uri), ("URI", "dledger://g/member/n2"))}) is None
    peers = ["n0", "n1", "n2"]
    assert refusal(member, "g", peers, "peer", "n1") is None
    assert "sent a request as member n2" in refusal(member, "g", peers, "peer", "n2")
    assert refusal(member, "g2", peers, "client") == "the certificate is for group g, not g2"
    client = Identity("g", "client", "app")
    assert refusal(client, "g", peers, "client") is None
    assert "not a member" in refusal(client, "g", peers, "peer", "app")
    assert "no operator role" in refusal(client, "g", peers, "operator")
    ops = Identity("*", "operator", "ops")
    assert refusal(ops, "g", peers, "operator") is None and refusal(ops, "other", peers, "operator") is None
    assert refusal(Identity("*", "member", "n1"), "g", peers, "peer", "n1") == "the certificate is for group *, not g"
    assert refusal(None, "g", peers, "client") == "the connection's certificate names no identity"


def test_certs_init_makes_a_ca_and_one_certificate_per_identity(tmp_path):
    d = str(tmp_path / "tls")
    r = cli("certs", "init", d, "--members", "n0,n1", "--members", "n2", "--operators", "ops", "--clients", "app",
            "--group", "g", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [x["identity"] for x in rows] == ["dledger://g/member/n0", "dledger://g/member/n1", "dledger://g/member/n2",
                                             "dledger://g/operator/ops", "dledger://g/client/app"]
    for x in rows:
        assert stat.S_IMODE(os.stat(x["key"]).st_mode) == 0o600
        assert Tls(TlsFiles(x["cert"], x["key"], os.path.join(d, "ca.pem"))).identity.uri == x["identity"]
    ca = open(os.path.join(d, "ca.pem")).read()
    again = cli("certs", "init", d, "--members", "n3", "--any-group", "--clients", "x", "--format", "json")
    assert again.returncode == 0 and open(os.path.join(d, "ca.pem")).read() == ca  # the CA is kept
    assert json.loads(again.stdout)[1]["identity"] == "dledger://*/client/x"
    bad = cli("certs", "init", d, "--members", "n0,n0")
    assert bad.returncode == 2 and "twice" in bad.stderr
    half = cli("append", "-d", "x", "--tls-cert", rows[0]["cert"])
    assert half.returncode == 2 and "--tls-key" in half.stderr


@pytest.fixture
def tls_cluster(group):
    base = group(3, "--tls")
    return base, recorded(base)


def _tls(rec, stem: str, ca: str | None = None) -> list[str]:
    d = rec["tls"]["dir"]
    return ["--tls-cert", os.path.join(d, f"{stem}.pem"), "--tls-key", os.path.join(d, f"{stem}.key"),
            "--tls-ca", ca or os.path.join(d, "ca.pem")]


def _ask(rec, stem: str, node: dict, frame, ca: str | None = None):
    """One request to ``node`` on a TLS connection made with certificate ``stem``: its answer."""
    d = rec["tls"]["dir"]
    tls = Tls(TlsFiles(os.path.join(d, f"{stem}.pem"), os.path.join(d, f"{stem}.key"),
                       ca or os.path.join(d, "ca.pem")))
    host, port = node["address"].rsplit(":", 1)

    async def go():
        ch = Channel(host, int(port), ssl=tls.client, connect_timeout=3)
        try:
            return await ch.request(frame, 5)
        finally:
            await ch.close()
    return asyncio.run(go())


def _log(base: str) -> str:
    return "".join(open(os.path.join(base, "logs", f)).read() for f in sorted(os.listdir(os.path.join(base, "logs"))))


def test_a_tls_cluster_serves_its_identities_and_refuses_the_rest(tls_cluster, tmp_path):
    base, rec = tls_cluster
    peers = rec["peers"]
    # through the record: the operator certificate cluster up made
    r = cli("append", "--base-dir", base, "-d", "one", "-d", "two", "--format", "json")
    assert r.returncode == 0, r.stderr
    # a client certificate appends and reads
    app = _tls(rec, "client-app")
    r = cli("append", "--peers", peers, "-d", "three", "--format", "json", *app)
    assert r.returncode == 0, r.stderr
    got = cli("get", "--peers", peers, "-i", "1", "--count", "3", "--format", "json", *app)
    assert [e["body"] for e in json.loads(got.stdout)] == ["one", "two", "three"]
    assert cli("peer", "watermarks", "--peers", peers, *app).returncode == 0
    # ... but may not cut a follower or move leadership: refused, nothing changes
    before = json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)
    end_before = {x["id"]: x["end_index"] for x in before}
    leader = next(x["id"] for x in before if x["role"] == "leader")
    other = next(n for n in ("n0", "n1", "n2") if n != leader)
    cut = cli("peer", "truncate", "--peers", peers, "--peer", other, "--from-index", "2", "--yes", *app)
    assert cut.returncode == 1 and "has no operator role" in cut.stderr and cut.stderr.count("\n") == 1
    cmp = cli("peer", "compare", "--peers", peers, "--peer", other, *app)
    assert cmp.returncode == 1 and "has no operator role" in cmp.stderr
    dry = cli("peer", "compare", "--peers", peers, "--peer", other, "--dry-run", *app)
    assert dry.returncode == 0, dry.stderr
    moved = cli("peer", "transfer-leader", "--peers", peers, "--to", other, *app)
    assert moved.returncode == 1 and "no operator role" in moved.stderr
    status = {x["id"]: x for x in json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)}
    assert {k: v["end_index"] for k, v in status.items()} == end_before and status[leader]["role"] == "leader"
    assert "has no operator role" in _log(base)
    # an operator may
    ops = _tls(rec, "operator-admin")
    moved = cli("peer", "transfer-leader", "--peers", peers, "--to", other, "--format", "json", *ops)
    assert moved.returncode == 0 and json.loads(moved.stdout)["leader"] == other, moved.stderr

    nodes = {n["id"]: n for n in rec["nodes"]}
    term = max(x["term"] for x in json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout))
    # a client certificate sending a member's requests
    vote = request_frame(VoteRequest(GROUP, "n0", term + 5, 100, term + 5), 0, "n1")
    answer = _ask(rec, "client-app", nodes["n1"], vote)
    assert answer.code == REMOTING_NO_PERMISSION and "not a member" in answer.remark
    push = request_frame(PushRequest(GROUP, "n0", term + 5, PushType.COMMIT, 3), 0, "n1")
    assert _ask(rec, "client-app", nodes["n1"], push).code == REMOTING_NO_PERMISSION
    # member n1's certificate speaking as n2
    beat = request_frame(HeartBeatRequest(GROUP, "n2", term + 5), 0, "n0")
    answer = _ask(rec, "member-n1", nodes["n0"], beat)
    assert answer.code == REMOTING_NO_PERMISSION and "sent a request as member n2" in answer.remark
    # none of it moved any term
    after = json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)
    assert max(x["term"] for x in after) == term and all(x["state"] == "up" for x in after)

    # a CA the cluster does not trust, plain TCP, and an expired certificate: no connection
    other_ca = str(tmp_path / "other")
    pki.issue(other_ca, Identity(GROUP, "client", "app"))
    r = cli("append", "--peers", peers, "-d", "x", "--timeout", "2", *["--tls-cert",
            os.path.join(other_ca, "client-app.pem"), "--tls-key", os.path.join(other_ca, "client-app.key"),
            "--tls-ca", rec["tls"]["ca"]])
    assert r.returncode == 1 and "no leader" in r.stderr
    r = cli("append", "--peers", peers, "-d", "x", "--timeout", "2", *_tls(rec, "client-app", ca=os.path.join(
        other_ca, "ca.pem")))
    assert r.returncode == 1 and "certificate verify failed" in r.stderr  # the members' certificates are not trusted
    r = cli("append", "--peers", peers, "-d", "x", "--timeout", "2")
    assert r.returncode == 1 and "this member speaks TLS" in r.stderr  # (tests/net/test_net_refusals.py)
    now = datetime.datetime.now(datetime.timezone.utc)
    pki.issue(rec["tls"]["dir"], Identity(GROUP, "client", "old"), not_before=now - datetime.timedelta(days=30),
              not_after=now - datetime.timedelta(days=1))
    r = cli("append", "--peers", peers, "-d", "x", "--timeout", "2", *_tls(rec, "client-old"))
    assert r.returncode == 1 and "no leader" in r.stderr
    with pytest.raises(TransportError):
        _ask(rec, "client-old", nodes["n0"], beat)
    got = cli("get", "--peers", peers, "-i", "1", "--count", "10", "--format", "json", *app)
    # nothing else got in (but the no-op of the leader the operator made)
    assert [e["body"] for e in json.loads(got.stdout) if e["magic"] == 1] == ["one", "two", "three"]


def test_a_node_refuses_to_start_with_another_members_certificate(tmp_path):
    d = str(tmp_path / "tls")
    pki.issue(d, Identity("g", "member", "n1"))
    port = free_port_base(2)
    r = cli("node", "start", "--id", "n0", "--group", "g", "--peers", f"n0-127.0.0.1:{port};n1-127.0.0.1:{port + 1}",
            "--store-base-dir", str(tmp_path / "s"), "--tls-cert", f"{d}/member-n1.pem", "--tls-key",
            f"{d}/member-n1.key", "--tls-ca", f"{d}/ca.pem", timeout=30)
    assert r.returncode == 1 and "names member n1 of group g, not member n0" in r.stderr
    r = cli("node", "start", "--id", "n0", "--group", "g", "--peers", f"n0-127.0.0.1:{port}",
            "--store-base-dir", str(tmp_path / "s"), "--tls-cert", f"{d}/nope.pem", "--tls-key",
            f"{d}/member-n1.key", "--tls-ca", f"{d}/ca.pem", timeout=30)
    assert r.returncode == 1 and "does not exist" in r.stderr


def _served_serial(address: str, ca: str, cert: str, key: str) -> int:
    """The serial number of the certificate a node presents to a new connection now."""
    import ssl as ssl_mod
    from cryptography import x509

    ctx = ssl_mod.SSLContext(ssl_mod.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(ca)
    ctx.load_cert_chain(cert, key)
    host, port = address.rsplit(":", 1)
    import socket
    with socket.create_connection((host, int(port)), timeout=5) as raw, ctx.wrap_socket(raw) as s:
        return x509.load_der_x509_certificate(s.getpeercert(binary_form=True)).serial_number


def test_certificates_rotate_under_load_without_losing_an_append(tls_cluster):
    import signal
    from cryptography import x509

    base, rec = tls_cluster
    d, ca = rec["tls"]["dir"], rec["tls"]["ca"]
    op = rec["tls"]["operator"]
    tls = Tls(TlsFiles(op["cert"], op["key"], ca))

    def serial(path: str) -> int:
        with open(path, "rb") as fh:
            return x509.load_pem_x509_certificate(fh.read()).serial_number

    async def load_and_rotate() -> tuple[list[int], int]:
        from cluster.raft.config import parse_peers
        from cluster.net.client import Client
        c = Client(parse_peers(rec["peers"]), GROUP, timeout=5, tls=tls)
        acked, failed = [], 0
        stop = asyncio.Event()

        async def appender():
            nonlocal failed
            k = 0
            while not stop.is_set():
                try:
                    resp = await c.append([b"rot-%d" % k])
                    acked.append(resp.entries[0][0])
                except Exception:  # noqa: BLE001 - counted: must stay 0
                    failed += 1
                k += 1
                await asyncio.sleep(0.005)

        task = asyncio.ensure_future(appender())
        await asyncio.sleep(1.5)
        for n in rec["nodes"]:  # new keys and certificates for every member, then SIGHUP
            pki.issue(d, Identity(GROUP, "member", n["id"]))
            os.kill(n["pid"], signal.SIGHUP)
        await asyncio.sleep(1.5)
        # a new connection (a follower restarted: its peers connect to it again) uses them
        r = await asyncio.to_thread(cli, "cluster", "stop", "--base-dir", base, "n2")
        assert r.returncode == 0, r.stderr
        r = await asyncio.to_thread(cli, "cluster", "start", "--base-dir", base, "n2")
        assert r.returncode == 0, r.stderr
        await asyncio.sleep(1.5)
        stop.set()
        await task
        await c.close()
        return acked, failed

    old = {n["id"]: serial(os.path.join(d, f"member-{n['id']}.pem")) for n in rec["nodes"]}
    acked, failed = asyncio.run(load_and_rotate())
    assert failed == 0 and len(acked) > 100
    for n in rec["nodes"]:
        new = serial(os.path.join(d, f"member-{n['id']}.pem"))
        assert new != old[n["id"]]
        assert _served_serial(n["address"], ca, op["cert"], op["key"]) == new  # served to new connections
    got = cli("get", "--base-dir", base, "-i", "0", "--count", "5000", "--format", "json")
    assert got.returncode == 0, got.stderr
    entries = {e["index"]: e["body"] for e in json.loads(got.stdout)}
    assert all(entries[i].startswith("rot-") for i in acked)
    assert [int(entries[i][4:]) for i in acked] == sorted(int(entries[i][4:]) for i in acked)
    assert "TLS certificate reloaded" in _log(base)


def test_a_reload_that_fails_keeps_the_certificate_in_use(tmp_path):
    d = str(tmp_path / "tls")
    cert, key = pki.issue(d, Identity("g", "member", "n0"))
    t = Tls(TlsFiles(cert, key, os.path.join(d, "ca.pem")), Identity("g", "member", "n0"))
    other_cert, other_key = pki.issue(d, Identity("g", "member", "n0"), stem="other")
    with open(key, "wb") as fh:  # a key that does not fit the certificate
        fh.write(open(other_key, "rb").read())
    with pytest.raises(Exception, match="cannot load TLS files"):
        t.reload()
    # the contexts still serve a handshake with the certificate loaded before
    import ssl as ssl_mod
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    out = {}

    def serve():
        conn, _ = srv.accept()
        try:
            with t.server.wrap_socket(conn, server_side=True) as s:
                s.recv(1)
                out["ok"] = True
        except (ssl_mod.SSLError, OSError) as exc:
            out["err"] = exc
    th = threading.Thread(target=serve)
    th.start()
    client_cert, client_key = pki.issue(d, Identity("g", "client", "c"))
    ctx = ssl_mod.SSLContext(ssl_mod.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(os.path.join(d, "ca.pem"))
    ctx.load_cert_chain(client_cert, client_key)
    with socket.create_connection(srv.getsockname(), timeout=5) as raw, ctx.wrap_socket(raw) as s:
        s.sendall(b"x")
    th.join(5)
    srv.close()
    assert out.get("ok"), out
    # another member's certificate is refused at reload too
    pki.issue(d, Identity("g", "member", "n1"), stem="member-n0")
    with pytest.raises(Exception, match="names member n1 of group g, not member n0"):
        t.reload()
