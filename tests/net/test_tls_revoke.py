"""Revoking a certificate on a running group: ``certs revoke`` writes the CRL that ``cluster
up --tls`` gave every member (``--tls-crl``), SIGHUP makes them read it, and from then on
the revoked identity is refused, its open connections closed, while everything else goes on.
Real node processes on 127.0.0.1 (cluster/net/crl.py).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time

from cluster.node import pki
from cluster.net.client import Client
from cluster.net.tls import Identity, Tls, TlsFiles
from cluster.raft.config import parse_peers
from tests.support.commands import cli
from tests.support.group import wait_for
from tests.support.paths import ROOT
from tests.support.ports import free_port_base

GROUP = "default"


def _up(group, *extra) -> tuple[str, dict]:
    """A group of three with ``cluster up --tls`` (the ``group`` fixture's): its base directory and
    record (its ``tls``: the certificates, the CRL)."""
    return group.recorded(3, "--tls", *extra)


def _certs(rec: dict, stem: str) -> list[str]:
    d = rec["tls"]["dir"]
    return ["--tls-cert", os.path.join(d, f"{stem}.pem"), "--tls-key", os.path.join(d, f"{stem}.key"),
            "--tls-ca", os.path.join(d, "ca.pem")]


def _hup(rec: dict) -> None:
    for n in rec["nodes"]:
        os.kill(n["pid"], signal.SIGHUP)


def _logged(rec: dict, text: str) -> bool:
    return all(text in open(n["log"], errors="replace").read() for n in rec["nodes"])


class Appender(threading.Thread):
    """A client appending one entry every 20 ms with the client certificate; records each
    acknowledgement's time and every failure."""

    def __init__(self, rec: dict) -> None:
        super().__init__(daemon=True)
        c = rec["tls"]["client"]
        self.tls = Tls(TlsFiles(c["cert"], c["key"], rec["tls"]["ca"]))
        self.peers = parse_peers(rec["peers"])
        self.acked: list[float] = []
        self.failed: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        async def go():
            client = Client(self.peers, GROUP, timeout=5, tls=self.tls)
            try:
                while not self.stop.is_set():
                    try:
                        await client.append([b"x" * 100])
                        self.acked.append(time.monotonic())
                    except Exception as exc:  # noqa: BLE001 - recorded, the test fails on it
                        self.failed.append(str(exc))
                    await asyncio.sleep(0.02)
            finally:
                await client.close()
        asyncio.run(go())

    def finish(self) -> float:
        """Stop; the longest time between two acknowledgements."""
        self.stop.set()
        self.join(15)
        assert not self.failed, self.failed[:3]
        gaps = [b - a for a, b in zip(self.acked, self.acked[1:])]
        assert len(self.acked) > 20
        return max(gaps)


class Holder(threading.Thread):
    """One connection to a member with certificate ``stem``, opened and used once, then
    held: ``lost`` is set when the member closes it."""

    def __init__(self, rec: dict, stem: str, node: dict) -> None:
        super().__init__(daemon=True)
        d = rec["tls"]["dir"]
        self.tls = Tls(TlsFiles(os.path.join(d, f"{stem}.pem"), os.path.join(d, f"{stem}.key"),
                                os.path.join(d, "ca.pem")))
        self.host, self.port = node["address"].rsplit(":", 1)
        self.id = node["id"]
        self.ready, self.lost, self.done = threading.Event(), threading.Event(), threading.Event()

    def run(self) -> None:
        from cluster.net.channel import Channel
        from cluster.net.frames import Frame
        from cluster.net.wire import METADATA, json_body

        async def go():
            ch = Channel(self.host, int(self.port), ssl=self.tls.client, connect_timeout=3, on_lost=self.lost.set)
            try:
                await ch.request(Frame(METADATA, body=json_body({"group": GROUP, "remoteId": self.id})), 5)
                self.ready.set()
                while not self.done.is_set():
                    await asyncio.sleep(0.05)
            finally:
                await ch.close()
        asyncio.run(go())


def _scrape(url: str, rec: dict, stem: str) -> int:
    d = rec["tls"]["dir"]
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
    ctx.check_hostname = False
    ctx.load_cert_chain(os.path.join(d, f"{stem}.pem"), os.path.join(d, f"{stem}.key"))
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=5)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_revoked_operator_is_cut_off_and_the_group_goes_on(group):
    base, rec = _up(group, "--metrics-port-base", str(free_port_base(3)))
    pki.issue(rec["tls"]["dir"], Identity(GROUP, "operator", "ops2"))
    assert cli("peer", "watermarks", "--base-dir", base).returncode == 0  # (the record's operator: admin)
    metrics = rec["nodes"][0]["metrics"]
    assert _scrape(metrics, rec, "operator-admin") == 200
    appender = Appender(rec)
    appender.start()
    held = Holder(rec, "operator-admin", rec["nodes"][1])
    held.start()
    assert held.ready.wait(10)
    watch = subprocess.Popen([sys.executable, "-m", "dledgerctl", "peer", "watermarks", "--watch", "--interval",
                              "0.3", "--base-dir", base, "--format", "jsonl"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        for _ in range(6):  # (it is watching: a rendering per refresh)
            assert watch.stdout.readline()
        r = cli("certs", "revoke", rec["tls"]["dir"], "--identity", f"dledger://{GROUP}/operator/admin")
        assert r.returncode == 0 and "revoked" in r.stdout, r.stderr
        _hup(rec)
        wait_for(lambda: _logged(rec, "CRL"), 10, "every member to reload its CRL")
        assert held.lost.wait(5), "the revoked certificate's open connection was not closed at the reload"
        held.done.set()
        try:
            out, err = watch.communicate(timeout=20)  # its connection was closed; reconnecting, it is refused
        except subprocess.TimeoutExpired:
            raise AssertionError("peer watermarks --watch with a revoked certificate still runs") from None
        assert watch.returncode == 1
        errors = [line for line in err.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "revoked" in errors[0] and "operator admin" in errors[0], err
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    cut = cli("peer", "truncate", "--base-dir", base, "--peer", "n1", "--from-index", "100000", "--yes")
    assert cut.returncode == 1 and cut.stderr.count("\n") == 1 and "revoked" in cut.stderr, cut.stderr
    other = cli("peer", "watermarks", "--base-dir", base, "--format", "json", *_certs(rec, "operator-ops2"))
    assert other.returncode == 0, other.stderr
    try:
        status = _scrape(metrics, rec, "operator-admin")
    except (OSError, http.client.HTTPException):
        status = None  # (closed after the handshake)
    assert status is None
    assert _scrape(metrics, rec, "operator-ops2") == 200
    assert appender.finish() < 2.0  # appends never stopped
    assert _logged(rec, "is revoked")

    # a CRL that cannot be read leaves the one loaded in force
    with open(rec["tls"]["crl"], "w") as fh:
        fh.write("not a CRL\n")
    _hup(rec)
    wait_for(lambda: _logged(rec, "TLS reload failed"), 10, "the failed reload to be logged")
    again = cli("peer", "watermarks", "--base-dir", base)
    assert again.returncode == 1 and "revoked" in again.stderr, again.stderr


def test_a_revoked_member_is_cut_off_from_replication(group):
    base, rec = _up(group)
    rows = json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)
    leader = next(x["id"] for x in rows if x["role"] == "leader")
    gone = next(x["id"] for x in rows if x["id"] != leader)
    r = cli("certs", "revoke", rec["tls"]["dir"], "--identity", f"dledger://{GROUP}/member/{gone}")
    assert r.returncode == 0, r.stderr
    _hup(rec)
    wait_for(lambda: _logged(rec, "CRL"), 10, "every member to reload its CRL")
    appender = Appender(rec)
    appender.start()
    wait_for(lambda: len(appender.acked) >= 50, 30, "50 appends acknowledged by the other two")
    assert appender.finish() < 2.0  # the other two go on

    def ends():
        got = json.loads(cli("cluster", "status", "--base-dir", base, "--format", "json").stdout)
        return {x["id"]: x["end_index"] for x in got}
    e = ends()
    assert e[leader] - e[gone] >= 50, e  # nothing more reached it
    marks = json.loads(cli("peer", "watermarks", "--base-dir", base, "--format", "json").stdout)
    row = next(x for x in marks if x["peer"] == gone)
    assert "revoked" in (row.get("note") or "") or not row["alive"], row
