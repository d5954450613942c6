"""``peer add`` at its edges: an id with a '-' is refused (it was cut to the part before),
address errors name the option given, an unresolvable host says so; Ctrl-C while a member
is being added takes the addition back (the member removed again, the process started for
it stopped, unrecorded, its files gone), exit 130. Real node processes on 127.0.0.1; the
interrupt is sent once the command has said the learner's config entry committed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.commands import cli
from tests.support.group import file_sizes, recorded, wait_for
from tests.support.paths import ROOT
from tests.support.ports import free_port_base

runner = CliRunner()


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


@pytest.mark.parametrize("args, words", [
    (["add", "--id", "n3-x", "--address", "127.0.0.1:7003"], ["--id 'n3-x'", "'-'"]),
    (["add", "--id", "n3", "--address", "nohost"], ["--address 'nohost'", "HOST:PORT"]),
    (["add", "--id", "n3", "--address", "127.0.0.1:99999"], ["--address '127.0.0.1:99999'", "1-65535"]),
    (["add", "--id", "n3", "--address", "a,b:7003"], ["--address 'a,b:7003'", "not a host name"]),
    (["replace", "--id", "n0", "--with", "n3-x=127.0.0.1:7003"], ["--with", "id 'n3-x'"]),
    (["replace", "--id", "n0", "--with", "n3"], ["--with 'n3'", "ID=HOST:PORT"]),
])
def test_bad_ids_and_addresses_name_the_option(args, words):
    r = runner.invoke(app, ["peer", *args, "--peers", "n0-127.0.0.1:7000;n1-127.0.0.1:7001"])
    assert r.exit_code == 2, r.output
    (line,) = errors(r.stderr)
    for w in words:
        assert w in line, line
    if args[0] == "add":  # (no ID=HOST:PORT to give to --id/--address)
        assert "ID=HOST:PORT" not in line, line


@pytest.fixture(scope="module")
def shared_group(module_group):
    """The module's group of three, and its port base: n3..n5 may join at the ports after it."""
    port = free_port_base(6)
    return module_group(3, sizes=file_sizes("1MiB", "64KiB"), port_base=port), port


def _members(base: str) -> dict[str, str]:
    """The group's members as its leader has them: id -> voter/learner."""
    r = cli("peer", "watermarks", "--base-dir", base, "--format", "json", "--timeout", "10")
    assert r.returncode == 0, r.stderr
    return {x["peer"]: x["member"] for x in json.loads(r.stdout)}


def _files(base: str) -> set[str]:
    """What is in ``base`` but in the running members' stores (whose checkpoints come and go)."""
    out = {os.path.relpath(os.path.join(d, n), base) for d, dirs, files in os.walk(base) for n in dirs + files}
    return {f for f in out if f.split(os.sep)[0] not in ("dledger-n0", "dledger-n1", "dledger-n2")}


def test_an_unresolvable_host_is_named(shared_group):
    base, port = shared_group
    before, files = recorded(base), _files(base)
    r = cli("peer", "add", "--base-dir", base, "--id", "n5", "--address", f"nosuchhost.invalid:{port + 5}")
    assert r.returncode == 1, r.stderr
    (line,) = errors(r.stderr)
    assert "nosuchhost.invalid" in line and "does not resolve" in line and "Unknown error" not in line, line
    assert recorded(base) == before
    assert {f for f in _files(base) - files if not f.startswith("logs/")} == set()


def _interrupted_add(base: str, node: str, address: str, *extra: str,
                     stop_new: bool = False) -> tuple[int, str, int | None]:
    """``peer add`` sent SIGINT once it says the learner's config entry committed. With
    ``stop_new``, the member it started is held (SIGSTOP) from its start until the signal
    is sent, so it cannot catch up and be promoted first. (exit code, stderr, its pid)"""
    env = dict(os.environ, PYTHONPATH=ROOT, COLUMNS="200")
    proc = subprocess.Popen([sys.executable, "-m", "dledgerctl", "peer", "add", "--base-dir", base, "--id", node,
                             "--address", address, "--wait", "120", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    held, said = None, []
    try:
        for line in proc.stderr:
            said.append(line)
            if stop_new and "started as a learner" in line:
                held = next(n["pid"] for n in recorded(base)["nodes"] if n["id"] == node)
                os.kill(held, signal.SIGSTOP)
            if "committed: a learner" in line:
                break
        else:
            raise AssertionError("".join(said))
        proc.send_signal(signal.SIGINT)
    finally:
        if held is not None:
            os.kill(held, signal.SIGCONT)
    said.append(proc.stderr.read())
    return proc.wait(timeout=120), "".join(said), held


def test_ctrl_c_takes_a_learner_back(shared_group):
    base, port = shared_group
    before = recorded(base)
    code, err, _ = _interrupted_add(base, "n6", f"127.0.0.1:{port + 4}", "--no-start")  # (nobody listens there)
    assert code == 130, err
    assert "Traceback" not in err and "removed again" in err, err
    assert set(_members(base)) == {"n0", "n1", "n2"}
    assert recorded(base) == before


def test_ctrl_c_takes_a_started_member_back(shared_group):
    base, port = shared_group
    before, files = recorded(base), _files(base)
    code, err, pid = _interrupted_add(base, "n3", f"127.0.0.1:{port + 3}", stop_new=True)
    assert code == 130, err
    assert "Traceback" not in err and "removed again" in err and "process stopped" in err, err
    assert _members(base) == {"n0": "voter", "n1": "voter", "n2": "voter"}
    assert [n["id"] for n in recorded(base)["nodes"]] == [n["id"] for n in before["nodes"]]
    assert _files(base) - files == set()  # its store, config and log gone

    def gone():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                return fh.read() == b""  # (a zombie)
        except FileNotFoundError:
            return True
    wait_for(gone, 15, "n3's process to end")
    # and the group takes the same member for real afterwards
    r = cli("peer", "add", "--base-dir", base, "--id", "n3", "--address", f"127.0.0.1:{port + 3}", "--wait", "60",
            "--format", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    assert _members(base)["n3"] == "voter"
