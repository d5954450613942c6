"""Names of non-ASCII digits (``²``, which ``str.isdigit()`` accepts and ``int()`` refuses)
and of malformed numbers (``snapshot_--5``) where the store keeps numbered files: a stray
``data/²``, consume-queue directories and files, snapshot directories. Each is skipped or
named as a finding, never a traceback: in ``mq``, ``store snapshot`` and a node's start-up
with a state machine (issue 45, item 5). Numbers in names are parsed in one place
(store/format.py's ``parse_decimal``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.commands import invoke
from tests.support.paths import ROOT
from tests.support.ports import HOST, free_port_base
from tests.support.rmq_store import write_broker_store


@pytest.mark.parametrize("text,signed,want", [("12", False, 12), ("²", False, None), ("1²", False, None),
                                               ("٣", False, None), ("+5", False, None), (" 5", False, None),
                                               ("1_0", False, None), ("-5", False, None), ("-5", True, -5),
                                               ("--5", True, None), ("-", True, None), ("", False, None),
                                               ("-²", True, None)])
def test_numbers_in_names_are_ascii_digits_only(text, signed, want):
    from store.format import parse_decimal  # (here: so that the other tests run where it is missing)
    assert parse_decimal(text, signed=signed) == want


def test_file_names_are_20_ascii_digits():
    from store.format import parse_decimal, parse_file_name
    assert parse_file_name("0" * 20) == 0 and parse_file_name("0" * 19 + "²") is None
    assert parse_file_name("0" * 19) is None and parse_file_name("٣" * 20) is None
    assert parse_decimal("2147483648", limit=(1 << 31) - 1) is None


def test_mq_skips_or_names_non_ascii_digit_names(tmp_path):
    root = tmp_path / "store"
    write_broker_store(str(root), [dict(topic="T", queue_id=0), dict(topic="T", queue_id=0),
                                   dict(topic="T", queue_id=0, queue_offset=7)])  # (a queue-offset finding)
    (root / "dledger-n0" / "data" / "²").write_bytes(b"")
    os.makedirs(root / "consumequeue" / "T" / "²")
    os.makedirs(root / "consumequeue" / "T" / "٣")
    (root / "consumequeue" / "T" / "0" / ("0" * 19 + "²")).write_bytes(b"\0" * 20)
    r = invoke("mq", "check", root, "--format", "jsonl")
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    found = [json.loads(x) for x in r.stdout.splitlines()]
    assert {(f["finding"], f["file"]) for f in found} == {
        ("queue-offset", "data/" + "0" * 20), ("cq-damaged", "consumequeue/T/0/" + "0" * 19 + "²"),
        ("cq-mismatch", f"consumequeue/T/0/{'0' * 20}")}, found  # (the third unit says queue offset 2)
    assert "not read" in next(f["detail"] for f in found if f["finding"] == "cq-damaged")
    for cmd in ("topics", "messages"):
        r = invoke("mq", cmd, root, "--format", "jsonl")
        assert r.exit_code == 0 and r.exception is None, (cmd, r.output)


def _stray_snapshots(node) -> None:
    for name in ("snapshot_²", "snapshot_--5", "snapshot_-²", "snapshot_٣"):
        os.makedirs(os.path.join(node, "snapshot", name))
    os.makedirs(os.path.join(node, "data"), exist_ok=True)
    with open(os.path.join(node, "data", "²"), "wb"):
        pass


def test_store_snapshot_skips_directories_whose_names_are_no_index(tmp_path):
    from store.filestore import FileStore
    node = str(tmp_path / "dledger-n0")
    FileStore.open(node).close()
    _stray_snapshots(node)
    r = invoke("store", "snapshot", node, "--format", "json")
    assert r.exit_code == 0 and r.exception is None, r.output
    assert json.loads(r.stdout) == []


def test_a_node_with_a_state_machine_starts_beside_such_names(tmp_path):
    base = str(tmp_path / "s")
    _stray_snapshots(os.path.join(base, "dledger-n0"))
    port = free_port_base(1)
    peers = f"n0-{HOST}:{port}"
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "dledgerctl", "node", "start", "--id", "n0", "--peers", peers,
                             "--store-base-dir", base, "--state-machine", "kv"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read()
            r = subprocess.run([sys.executable, "-m", "dledgerctl", "kv", "put", "--peers", peers, "k", "v",
                                "--timeout", "5"], env=env, capture_output=True, text=True, timeout=60)
            if r.returncode == 0:
                break
            assert time.monotonic() < deadline, r.stderr
            time.sleep(0.2)
        r = subprocess.run([sys.executable, "-m", "dledgerctl", "kv", "get", "--peers", peers, "k", "--format",
                            "json"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and json.loads(r.stdout)[0]["value"] == "v", r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in proc.stderr.read()
