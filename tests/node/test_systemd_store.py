"""Where a member under the shipped systemd unit keeps its store (issue 44, item 1).

The unit sets ``PrivateTmp=yes``: the service's /tmp is a directory of its own that systemd
removes at every stop. A member whose config file has no ``store-base-dir`` used to run on
DLedger's default ``/tmp/dledgerstore`` there and lost its log, term and vote at each stop.
Now the unit has ``StateDirectory=dledgerctl/%i`` (systemd passes it as ``$STATE_DIRECTORY``,
the store's default), and ``node start`` started by systemd refuses a store under a private
or tmpfs /tmp, exit 2, which ``RestartPreventExitStatus=2`` keeps from restarting every 2 s.

The unit's ExecStart runs as systemd would: with ``INVOCATION_ID`` and ``STATE_DIRECTORY``
set, in a mount namespace whose /tmp and /var/tmp are private (tests/support/private_tmp.py: needs
root and ``unshare``; the detection itself is also tested on mount tables, which needs
neither)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import uuid

import pytest

from cluster.node import service
from tests.node.test_systemd_unit import UNIT, _exec_start, unit
from tests.support.commands import cli
from tests.support.group import wait_for
from tests.support.paths import ROOT, SUPPORT
from tests.support.ports import free_port_base

HELPER = os.path.join(SUPPORT, "private_tmp.py")


def test_the_unit_gives_the_store_a_state_directory_and_does_not_restart_a_config_error():
    s = unit()["Service"]
    assert s["StateDirectory"] == "dledgerctl/%i" and s["PrivateTmp"] == "yes"
    assert "2" in s["RestartPreventExitStatus"].split()
    assert "/tmp" not in s.get("ReadWritePaths", "")
    lines = open(UNIT).read().splitlines()
    said = lines[lines.index(next(x for x in lines if x.startswith("ExecReload="))) - 2:][:2]
    assert any("CRL" in x for x in said), said  # (SIGHUP reloads the CRL too, and the comment says so)


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


needs_namespace = pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare -m to give /tmp a private "
                                     "mount (test_the_mount_table_tells_a_private_tmp covers the detection)")


def _under_unit(tmp_path, mode: str, etc: str, state: str | None) -> list[str]:
    """The unit's ExecStart for n0, in a mount namespace with a private /tmp and /var/tmp."""
    keeps = [str(tmp_path), ROOT, sys.prefix, os.path.dirname(sys.executable)]
    return ["unshare", "-m", "--propagation", "private", sys.executable, HELPER, mode, str(tmp_path), *keeps, "--",
            *_exec_start("n0", etc)]


def _env(state: str | None) -> dict:
    env = {**os.environ, "PYTHONPATH": ROOT, "INVOCATION_ID": uuid.uuid4().hex}
    env.pop("STATE_DIRECTORY", None)
    if state is not None:
        env["STATE_DIRECTORY"] = state
    return env


def _config(tmp_path, peers: str, extra: str = "") -> str:
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "n0.toml").write_text(f'id = "n0"\npeers = "{peers}"\nheartbeat-interval = 100\n'
                                 f'data-file-size = "1MiB"\nindex-file-size = "64KiB"\n{extra}')
    return str(etc)


@needs_namespace
def test_a_member_under_the_unit_keeps_its_store_across_stops(tmp_path):
    peers = f"n0-127.0.0.1:{free_port_base(1)}"
    etc = _config(tmp_path, peers)  # (no store-base-dir: as the docs' example had it)
    state = tmp_path / "var" / "lib" / "dledgerctl" / "n0"
    state.mkdir(parents=True)  # (what StateDirectory= makes before ExecStart)
    for run, data in enumerate(["before the stop", "after the restart"]):
        log = open(tmp_path / f"run{run}.log", "wb")
        proc = subprocess.Popen(_under_unit(tmp_path, "bind", etc, str(state)), env=_env(str(state)),
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_for(lambda: cli("append", "--peers", peers, "-d", data).returncode == 0 or proc.poll() is not None,
                     40, "an append")
            assert proc.poll() is None, (tmp_path / f"run{run}.log").read_text()
            if run:  # (the restart found the first run's log in the state directory)
                got = cli("get", "--peers", peers, "-i", "0", "-c", "4", "-f", "json")
                assert got.returncode == 0 and "before the stop" in got.stdout and "after the restart" in got.stdout, (got.stdout, got.stderr)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            log.close()
    assert (state / "dledger-n0" / "checkpoint").read_text().count("committedIndex=") == 1
    assert not glob.glob(str(tmp_path / "systemd-private-*" / "*" / "tmp" / "dledgerstore"))


@needs_namespace
@pytest.mark.parametrize("mode,state,store,says", [
    ("bind", None, None, "/tmp is private to this service (systemd's PrivateTmp=)"),  # (a unit with no StateDirectory=)
    ("bind", "var/lib/dledgerctl/n0", "/var/tmp/dledger", "/var/tmp is private to this service"),
    ("tmpfs", None, "/tmp/members", "/tmp is a tmpfs here"),  # (PrivateTmp=disconnected)
])
def test_a_store_in_the_private_tmp_is_refused_saying_why(tmp_path, mode, state, store, says):
    etc = _config(tmp_path, f"n0-127.0.0.1:{free_port_base(1)}",
                  "" if store is None else f'store-base-dir = "{store}"\n')
    state_dir = None if state is None else str(tmp_path / state)
    if state_dir is not None:
        os.makedirs(state_dir)
    r = subprocess.run(_under_unit(tmp_path, mode, etc, state_dir), env=_env(state_dir), capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    line = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stderr)  # (RestartPreventExitStatus=2: not restarted)
    assert "\n" not in line and line.startswith("Error: store-base-dir ") and says in line, line
    assert "log, term and vote" in line and "/var/lib/dledgerctl" in line, line
    assert state_dir is None or os.listdir(state_dir) == []  # (nothing made)
    assert not glob.glob(str(tmp_path / "systemd-private-*" / "*" / "tmp" / os.path.basename(store or "dledgerstore")))


# /proc/self/mountinfo lines as systemd 252 (PrivateTmp=yes, host /tmp on the root file system)
# and a host with a tmpfs /tmp show them
ROOT_FS = "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
PRIVATE = ("812 27 254:0 /tmp/systemd-private-5f0c2d-dledgerctl@n0.service-Qm3v9x/tmp /tmp rw,relatime "
           "shared:409 master:1 - ext4 /dev/vda rw\n"
           "813 27 254:0 /var/tmp/systemd-private-5f0c2d-dledgerctl@n0.service-1cWbJr/tmp /var/tmp rw,relatime "
           "shared:410 master:1 - ext4 /dev/vda rw\n")
HOST_TMPFS = "40 27 0:41 / /tmp rw,nosuid,nodev shared:20 - tmpfs tmpfs rw\n"
SYSTEMD = {"INVOCATION_ID": "0f1e2d3c4b5a69788796a5b4c3d2e1f0"}


def test_the_mount_table_tells_a_private_tmp():
    problem = service.lost_store_problem
    assert "PrivateTmp=" in problem("/tmp/dledgerstore", SYSTEMD, ROOT_FS + PRIVATE)
    assert "PrivateTmp=" in problem("/var/tmp/x/y", SYSTEMD, ROOT_FS + PRIVATE)
    assert "tmpfs" in problem("/tmp/dledgerstore", SYSTEMD, ROOT_FS + HOST_TMPFS)
    # a tmpfs /tmp: refused for the process the unit started, not for one that inherited its
    # environment (a CI job of a runner installed as a service); a private /tmp for both
    started = {**SYSTEMD, "SYSTEMD_EXEC_PID": "4242"}
    assert "tmpfs" in problem("/tmp/dledgerstore", started, ROOT_FS + HOST_TMPFS, pid=4242)
    assert problem("/tmp/dledgerstore", started, ROOT_FS + HOST_TMPFS, pid=4343) is None
    assert "PrivateTmp=" in problem("/tmp/dledgerstore", started, ROOT_FS + PRIVATE, pid=4343)
    assert problem("/var/lib/dledgerctl/n0", SYSTEMD, ROOT_FS + PRIVATE) is None
    assert problem("/tmpx/store", SYSTEMD, ROOT_FS + PRIVATE) is None
    assert problem("/tmp/dledgerstore", {}, ROOT_FS + PRIVATE) is None  # (not systemd: a trial run, as before)
    assert problem("/tmp/dledgerstore", SYSTEMD, ROOT_FS) is None  # (a /tmp that lasts)
    # a directory bound below /tmp from a lasting disk is judged as that disk
    kept = "900 812 254:0 /srv/keep /tmp/keep rw - ext4 /dev/vda rw\n"
    assert problem("/tmp/keep/store", SYSTEMD, ROOT_FS + PRIVATE + kept) is None
    escaped = "41 27 0:42 / /var/tmp/a\\040b rw - tmpfs tmpfs rw\n"  # (a space in a mount point)
    assert problem("/var/tmp/a b/store", SYSTEMD, ROOT_FS + escaped) is None  # (tmpfs below /var/tmp, bound)


def test_the_store_defaults_to_the_state_directory_systemd_gives():
    assert service.default_store_base_dir({"STATE_DIRECTORY": "/var/lib/dledgerctl/n0"}) == "/var/lib/dledgerctl/n0"
    assert service.default_store_base_dir({"STATE_DIRECTORY": "/var/lib/a:/var/lib/b"}) == "/var/lib/a"
    assert service.default_store_base_dir({}) == "/tmp/dledgerstore"
    r = subprocess.run([sys.executable, "-m", "dledgerctl", "node", "start", "--id", "n0", "--peers",
                        "n0-127.0.0.1:30911", "--print-config"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": ROOT, "STATE_DIRECTORY": "/var/lib/dledgerctl/n0"})
    assert r.returncode == 0 and 'store-base-dir = "/var/lib/dledgerctl/n0"' in r.stdout, r.stderr
