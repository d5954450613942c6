"""Damage the ``mq`` readers must not launder: one byte of a message's properties (a KEYS
value, which the message's BODYCRC does not cover) flipped in a DLedger-mode store dledgerctl
wrote (its entries hold DLedger bodyCrcs). ``mq check`` reports the entry by index, ``mq
messages`` says it on the row, ``mq migrate`` refuses it (or with ``--skip-damaged`` leaves it
out and lists it, its unit a blank unit), ``mq rebuild`` refuses it. RocketMQ's master-slave
store serving such a move: tests/java/test_mq_damage_java.py."""

from __future__ import annotations

import json
import os
import struct

from typer.testing import CliRunner

from dledgerctl.app import app
from store.rocketmq import scan
from store.rocketmq.columns import body_crcs
from store.rocketmq.entries import Batch
from tests.support.rmq_store import write_broker_store
from tests.support.stores import file_crcs

import numpy as np

runner = CliRunner()
CL = 8 << 10
N = 60
HIT = 17  # the message whose KEYS value is flipped


def run(*args):
    return runner.invoke(app, [*map(str, args)])


def damaged_store(root) -> list[dict]:
    msgs = [{"topic": f"T{i % 2}", "queue_id": i % 2, "body": b"body %d" % i * 10,
             "properties": {"KEYS": f"key-{i:03d}", "TAGS": "t"}} for i in range(N)]
    written = write_broker_store(str(root), msgs, data_file_size=16 << 10, cq_units_per_file=64)
    w = written[HIT]
    data = root / "dledger-n0" / "data"
    for name in sorted(os.listdir(data)):
        start = int(name)
        if start <= w["pos"] < start + (16 << 10):
            with open(data / name, "r+b") as fh:
                fh.seek(w["pos"] - start)
                entry = bytearray(fh.read(48 + w["size"]))
                at = entry.index(b"key-%03d" % HIT) + 4
                entry[at] ^= 0x01  # '0' -> '1': key-017 reads key-117, still UTF-8
                fh.seek(w["pos"] - start)
                fh.write(entry)
    return written


def test_check_reports_the_entry_whose_own_crc_fails(tmp_path):
    root = tmp_path / "src"
    written = damaged_store(root)
    assert run("store", "verify", root / "dledger-n0").exit_code == 1  # (the node's own check sees it)
    r = run("mq", "check", root, "--format", "json")
    assert r.exit_code == 1, r.output
    found = json.loads(r.stdout)
    assert [(f["finding"], f["index"]) for f in found] == [("entry-crc", written[HIT]["index"])], found
    assert "bodyCrc" in found[0]["detail"] and "changed since the entry was written" in found[0]["detail"]
    rows = json.loads(run("mq", "messages", root, "--format", "json").stdout)
    assert [r["index"] for r in rows if "bodyCrc" in r["note"]] == [written[HIT]["index"]]
    assert all(r["body_crc_ok"] for r in rows)  # (the message's own BODYCRC does not see it)
    r = run("mq", "topics", root)
    assert r.exit_code == 0 and f"entry {written[HIT]['index']}'s DLedger bodyCrc" in r.stderr, r.output


def test_migrate_refuses_a_damaged_entry_or_leaves_it_out_when_asked(tmp_path):
    root = tmp_path / "src"
    written = damaged_store(root)
    before = file_crcs(root)
    r = run("mq", "migrate", root, tmp_path / "ms", "--commitlog-file-size", CL)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"entry {written[HIT]['index']}'s DLedger bodyCrc" in r.stderr and "--skip-damaged" in r.stderr, r.stderr
    assert not (tmp_path / "ms").exists() and sorted(os.listdir(tmp_path)) == ["src"]

    r = run("mq", "migrate", root, tmp_path / "ms", "--commitlog-file-size", CL, "--skip-damaged", "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert (s["messages"], s["damaged"], s["units"]) == (N - 1, 1, N)
    assert f"left out 1 damaged entry: {written[HIT]['index']} (offset {written[HIT]['phy_offset']})" in r.stderr
    assert file_crcs(root) == before
    dest = tmp_path / "ms"
    # the one thing mq check sees in DEST: the queue offset the left-out message held is missing from the log
    r = run("mq", "check", dest, "--format", "json")
    assert f"{N - 1} messages" in r.stderr, r.output
    qo = written[HIT]["queue_offset"]
    assert [(f["finding"], f["topic"], f["queue_offset"], f["detail"]) for f in json.loads(r.stdout)] == \
        [("queue-offset", f"T{HIT % 2}", qo + 1, f"queue offset {qo + 1} follows {qo - 1} in its queue")]
    rows = json.loads(run("mq", "messages", dest, "--format", "json").stdout)
    assert b"key-%03d" % HIT not in json.dumps(rows).encode() and len(rows) == N - 1
    # its unit keeps its queue offset, blank: (1, 1, 0), below the log, which starts one file in
    qdir = dest / "consumequeue" / f"T{HIT % 2}" / str(HIT % 2)
    with open(qdir / sorted(os.listdir(qdir))[0], "rb") as fh:
        b = fh.read()
    assert struct.unpack_from(">qiq", b, written[HIT]["queue_offset"] * 20) == (1, 1, 0)
    assert sorted(os.listdir(dest / "commitlog"))[0] == f"{CL:020d}"


def test_rebuild_refuses_a_damaged_entry(tmp_path):
    root = tmp_path / "src"
    written = damaged_store(root)
    before = file_crcs(root)
    r = run("mq", "rebuild", root)
    assert r.exit_code == 1 and "entry-crc" in r.stderr and f"entry {written[HIT]['index']}'s" in r.stderr, r.output
    assert file_crcs(root) == before


def test_a_store_without_crcs_is_not_damaged_and_the_crcs_agree_with_zlib():
    buf = bytes(range(256)) * 8
    b = Batch("data/x", 0, buf, np.ones(3, np.int64), np.full(3, 148, np.int64), np.arange(3), np.zeros(3, np.int64),
              np.array([0, 148, 296]), np.full(3, 100, np.int64), bcrc=np.zeros(3, np.int64), chain=np.zeros(3, np.int64))
    assert scan.crc_damaged(b).tolist() == [False] * 3  # (both 0: none recorded, as DLedger 0.2.7 and Java write)
    right = body_crcs(buf, np.array([48, 196, 344]), np.full(3, 100), compiled=False).astype(np.int64)
    b.bcrc = right.copy()
    b.bcrc[1] ^= 1
    assert scan.crc_damaged(b).tolist() == [False, True, False]
    assert scan.crc_damaged(b, np.array([1, 2])).tolist() == [True, False]
    assert body_crcs(buf, np.array([48, 2040, -1]), np.array([100, 9, 1])).tolist() == \
        body_crcs(buf, np.array([48, 2040, -1]), np.array([100, 9, 1]), compiled=False).tolist()
