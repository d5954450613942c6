"""``mq check`` and ``mq migrate`` at the edges of a store: a data file deleted from the middle
of the log (the gap is named first), a broker still writing the store (its ``lock`` held:
the dispatch's tail is in flight, not ``cq-missing``), a store root without
``consumequeue/`` (said, with the way on). RocketMQ's own running store:
tests/java/test_mq_commitment_java.py."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.rmq_store import write_broker_store

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [*map(str, args)])


def a_store(root, n=300, data_file_size=16 << 10):
    msgs = [{"topic": f"T{i % 2}", "queue_id": i % 2, "body": b"m%d" % i * 20, "properties": {"KEYS": f"k{i}"}}
            for i in range(n)]
    return write_broker_store(str(root), msgs, data_file_size=data_file_size, cq_units_per_file=64)


def test_a_deleted_middle_data_file_is_named_first(tmp_path):
    root = tmp_path / "src"
    a_store(root)
    data = root / "dledger-n0" / "data"
    names = sorted(os.listdir(data))
    assert len(names) >= 4
    gone = names[2]
    os.unlink(data / gone)
    r = run("mq", "check", root, "--format", "json")
    assert r.exit_code == 1
    found = json.loads(r.stdout)
    first = found[0]
    assert first["finding"] == "damage" and first["file"] == f"data/{names[3]}", first
    assert f"gap: data/{gone} missing between data/{names[1]} and data/{names[3]}" in first["detail"]
    # a migrate names it too, and writes nothing
    r = run("mq", "migrate", root, tmp_path / "ms")
    assert r.exit_code == 1 and f"data/{gone} missing" in r.stderr and "Traceback" not in r.output, r.output
    assert not (tmp_path / "ms").exists()


def hold_lock(root):
    """Another process holding ``root/lock`` as DefaultMessageStore.start does (a POSIX lock of byte 0)."""
    (root / "lock").write_bytes(b"")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys\n"
                               f"fd = os.open({str(root / 'lock')!r}, os.O_RDWR)\n"
                               "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
                               "print('locked', flush=True)\nsys.stdin.read()\n"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def drop_tail(qdir, keep: int) -> None:
    """Zero a queue's units from its ``keep``-th on (the dispatch has not written them yet)."""
    name = sorted(os.listdir(qdir))[0]
    with open(qdir / name, "r+b") as fh:
        b = bytearray(fh.read())
        b[keep * 20:] = bytes(len(b) - keep * 20)
        fh.seek(0)
        fh.write(b)


def test_check_on_a_store_in_use_takes_the_dispatch_tail_as_in_flight(tmp_path):
    root = tmp_path / "src"
    a_store(root, n=60)
    # queue T0/0 read before the dispatch wrote its last 5 units, T1/1 after (RocketMQ writes
    # a unit once it reaches the message; files are read one after another)
    drop_tail(root / "consumequeue" / "T0" / "0", 25)
    r = run("mq", "check", root, "--format", "json")
    assert r.exit_code == 1 and {f["finding"] for f in json.loads(r.stdout)} == {"cq-missing"}, r.output
    holder = hold_lock(root)
    try:
        r = run("mq", "check", root, "--format", "json")
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert r.exit_code == 0 and json.loads(r.stdout) == [], r.output
    assert "the store is in use" in r.stderr and "(5 messages and units taken so)" in r.stderr, r.stderr
    # a hole inside a queue is no dispatch lag: still a finding while in use
    qdir = root / "consumequeue" / "T1" / "1"
    name = sorted(os.listdir(qdir))[0]
    with open(qdir / name, "r+b") as fh:
        fh.seek(3 * 20)
        fh.write(struct.pack(">qiq", 7, 99, 0))
    holder = hold_lock(root)
    try:
        r = run("mq", "check", root, "--format", "json")
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert r.exit_code == 1 and "in use" in r.stderr
    assert {f["finding"] for f in json.loads(r.stdout)} == {"cq-hole"}, r.output


@pytest.mark.parametrize("given", ["root", "node"])
def test_migrate_without_consumequeue_says_what_is_missing_and_the_way_on(tmp_path, given):
    root = tmp_path / "src"
    a_store(root, n=40)
    shutil.rmtree(root / "consumequeue")
    src = root if given == "root" else root / "dledger-n0"
    r = run("mq", "migrate", src, tmp_path / "ms")
    assert r.exit_code == 1 and "Traceback" not in r.output
    err = r.stderr
    assert err.startswith(f"Error: {root}: no consumequeue/ beside dledger-n0/") and err.count("\n") == 1, err
    assert f"'dledgerctl mq rebuild {root}'" in err and "max-hash-slot-num" not in err, err
    assert not (tmp_path / "ms").exists()
    # the way on: the queues made from the log (on a copy), then the move
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    assert run("mq", "rebuild", copy).exit_code == 0
    r = run("mq", "migrate", copy, tmp_path / "ms", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["messages"] == 40


def test_the_last_entry_being_copied_in_is_in_flight_while_in_use(tmp_path):
    root = tmp_path / "src"
    written = a_store(root, n=30, data_file_size=64 << 10)
    last = written[-1]
    data = root / "dledger-n0" / "data" / ("0" * 20)
    with open(data, "r+b") as fh:  # its message's bytes not all there yet, and the next header begun
        fh.seek(last["pos"] + 48 + 20)
        fh.write(bytes(last["size"] - 20))
        fh.seek(last["pos"] + 48 + last["size"])
        fh.write(struct.pack(">ii", 1, 48 + 100) + bytes(8))
    r = run("mq", "check", root, "--format", "json")
    assert r.exit_code == 1
    kinds = {f["finding"] for f in json.loads(r.stdout)}
    assert "damage" in kinds and kinds & {"not-a-message", "entry-crc"}, r.output
    holder = hold_lock(root)
    try:
        r = run("mq", "check", root, "--format", "json")
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert r.exit_code == 0 and json.loads(r.stdout) == [] and "the store is in use" in r.stderr, r.output
