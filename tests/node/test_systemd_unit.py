"""The shipped systemd unit, ``share/systemd/dledgerctl@.service``: what it says (one member
per instance from /etc/dledgerctl/%i.toml, SIGHUP to reload certificates, SIGTERM to stop,
restart on failure, a descriptor limit), and its ExecStart run as written, without systemd:
three members from three config files form a TLS group, one reloads a rotated certificate
on SIGHUP, and all stop cleanly on SIGTERM (exit 0, checkpoint written)."""

from __future__ import annotations

import configparser
import os
import shlex
import signal
import subprocess
import sys

from cluster.node import pki
from cluster.net.tls import Identity
from tests.support.commands import cli
from tests.support.group import wait_for
from tests.support.paths import ROOT
from tests.support.ports import free_port_base

UNIT = os.path.join(ROOT, "share", "systemd", "dledgerctl@.service")
ETC = "/etc/dledgerctl/"


def unit() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#", ";"))
    cp.optionxform = str
    cp.read(UNIT)
    return cp


def test_the_unit_runs_one_member_per_instance_from_its_config_file():
    s = unit()["Service"]
    argv = shlex.split(s["ExecStart"])
    assert os.path.isabs(argv[0]) and os.path.basename(argv[0]) == "dledgerctl"
    assert argv[1:] == ["-v", "node", "start", "--config", ETC + "%i.toml"]
    assert s["ExecReload"].split()[-2:] == ["-HUP", "$MAINPID"] and s["KillSignal"] == "SIGTERM"
    assert s["Restart"] == "on-failure" and int(s["LimitNOFILE"]) >= 4096
    assert int(s["TimeoutStopSec"]) >= 10
    assert unit()["Install"]["WantedBy"] == "multi-user.target"


def _exec_start(instance: str, etc: str) -> list[str]:
    """The unit's ExecStart for ``instance``, as systemd would run it, but for this
    checkout's dledgerctl and the config directory ``etc`` in place of /etc/dledgerctl."""
    argv = shlex.split(unit()["Service"]["ExecStart"].replace("%i", instance))
    argv[0] = os.path.join(os.path.dirname(sys.executable), "dledgerctl")
    return [a.replace(ETC, etc + "/") for a in argv]


def test_three_members_run_from_their_files_reload_on_sighup_and_stop_on_sigterm(tmp_path):
    etc, store, tls = str(tmp_path / "etc"), str(tmp_path / "var"), str(tmp_path / "tls")
    os.makedirs(etc)
    ids = ["n0", "n1", "n2"]
    port = free_port_base(3)
    peers = ";".join(f"{n}-127.0.0.1:{port + i}" for i, n in enumerate(ids))
    pki.init_ca(tls)
    for n in ids:
        pki.issue(tls, Identity("svc", "member", n))
    op_cert, op_key = pki.issue(tls, Identity("svc", "operator", "ops"))
    for n in ids:
        with open(os.path.join(etc, f"{n}.toml"), "w") as fh:
            fh.write(f'id = "{n}"\npeers = "{peers}"\ngroup = "svc"\nstore-base-dir = "{store}"\n'
                     f'heartbeat-interval = 100\ndata-file-size = "1MiB"\nindex-file-size = "64KiB"\n'
                     f'tls-cert = "{tls}/member-{n}.pem"\ntls-key = "{tls}/member-{n}.key"\n'
                     f'tls-ca = "{tls}/ca.pem"\n')
    env = {**os.environ, "PYTHONPATH": ROOT}
    logs = {n: open(tmp_path / f"{n}.log", "wb") for n in ids}
    procs = {n: subprocess.Popen(_exec_start(n, etc), stdout=logs[n], stderr=subprocess.STDOUT, env=env,
                                 stdin=subprocess.DEVNULL) for n in ids}
    client = ["--peers", peers, "--group", "svc", "--tls-cert", op_cert, "--tls-key", op_key,
              "--tls-ca", os.path.join(tls, "ca.pem")]
    try:
        wait_for(lambda: cli("append", *client, "-d", "under systemd's command line").returncode == 0, 40,
                 "an append committed by the three members")
        victim = procs["n1"]
        pki.issue(tls, Identity("svc", "member", "n1"))  # (rotated: a new key and certificate)
        victim.send_signal(signal.SIGHUP)  # (what ExecReload sends)
        wait_for(lambda: b"TLS certificate reloaded" in (tmp_path / "n1.log").read_bytes(), 20, "the reload")
        assert victim.poll() is None
        assert cli("append", *client, "-d", "after the reload").returncode == 0
        for p in procs.values():
            p.send_signal(signal.SIGTERM)  # (KillSignal)
        codes = {n: p.wait(timeout=30) for n, p in procs.items()}  # (TimeoutStopSec)
        assert codes == {n: 0 for n in ids}, codes
        for n in ids:
            with open(os.path.join(store, f"dledger-{n}", "checkpoint")) as fh:
                assert "committedIndex=" in fh.read()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        for fh in logs.values():
            fh.close()
