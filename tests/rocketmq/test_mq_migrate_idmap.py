"""``mq migrate --id-map FILE``: old offset msgId -> new offset msgId (CSV), for IPv4 and IPv6
store hosts, as ``MessageDecoder.createMessageId`` makes them (store host address and port,
then the commit-log offset); never over an existing file, nothing left behind on a refusal.
RocketMQ's own ids (the ones its DLedger-mode store gave at put, and the ones its
master-slave store gives after the move) are compared in tests/java/test_mq_migrate_java.py."""

from __future__ import annotations

import csv
import ipaddress
import os
import struct

from typer.testing import CliRunner

from dledgerctl.app import app
from store.rocketmq.message import decode
from tests.support.rmq_store import commitlog_walk, write_broker_store

runner = CliRunner()
CL = 8 << 10


def java_id(host: str, offset: int) -> str:
    """createMessageId, written out: address bytes, port i32, offset i64, upper-case hex."""
    addr, port = host.rsplit(":", 1)
    raw = ipaddress.ip_address(addr.strip("[]")).packed
    return (raw + struct.pack(">iq", int(port), offset)).hex().upper()


def specs():
    out = []
    for i in range(60):
        host = "[2001:db8::7]:10911" if i % 4 == 3 else "10.0.0.2:10911"
        out.append({"topic": f"T{i % 2}", "body": b"m%d" % i * (i * 13 % 500), "store_host": host,
                    "properties": {"UNIQ_KEY": f"U{i:04d}"}})
    return out


def new_messages(dest) -> list:
    return [(start + p, decode(b, p, size)) for start, b, p, size in commitlog_walk(dest)]


def test_id_map_names_each_moved_message_old_and_new_ids(tmp_path):
    sp = specs()
    written = write_broker_store(str(tmp_path / "src"), sp, data_file_size=16 << 10)
    dest, idmap = tmp_path / "ms", tmp_path / "ids.csv"
    r = runner.invoke(app, ["mq", "migrate", str(tmp_path / "src"), str(dest), "--commitlog-file-size", str(CL),
                            "--id-map", str(idmap), "--format", "json"])
    assert r.exit_code == 0, r.output
    with open(idmap, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["old_msg_id", "new_msg_id", "uniq_key"]
    moved = new_messages(dest)
    assert len(rows) - 1 == len(sp) == len(moved)
    for row, spec, w, (at, m) in zip(rows[1:], sp, written, moved):
        assert row == [java_id(spec["store_host"], w["phy_offset"]), java_id(spec["store_host"], at),
                       spec["properties"]["UNIQ_KEY"]]
        assert row[1] == m.msg_id  # (what the new store's message says it is)
    assert {len(r[0]) for r in rows[1:]} == {32, 56}  # IPv4 and IPv6 hosts
    assert sum(r[0] != r[1] for r in rows[1:]) == len(sp)  # (offset 48 + pos in DLedger's log; 0 on in the new)
    assert sorted(os.listdir(tmp_path)) == ["ids.csv", "ms", "src"]


def test_an_existing_id_map_file_is_refused_and_nothing_is_written(tmp_path):
    write_broker_store(str(tmp_path / "src"), specs()[:3])
    (tmp_path / "ids.csv").write_text("keep me")
    r = runner.invoke(app, ["mq", "migrate", str(tmp_path / "src"), str(tmp_path / "ms"), "--id-map",
                            str(tmp_path / "ids.csv")])
    assert r.exit_code == 1 and r.stderr.strip() == f"Error: {tmp_path / 'ids.csv'}: exists (give a new file for " \
                                                    f"--id-map)", r.output
    assert (tmp_path / "ids.csv").read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["ids.csv", "src"]
    r = runner.invoke(app, ["mq", "migrate", str(tmp_path / "src"), str(tmp_path / "ms"), "--id-map",
                            str(tmp_path / "no" / "ids.csv")])
    assert r.exit_code == 1 and "no such directory (for --id-map" in r.stderr and "Traceback" not in r.output
    assert sorted(os.listdir(tmp_path)) == ["ids.csv", "src"]


def test_a_failed_move_leaves_no_id_map(tmp_path):
    write_broker_store(str(tmp_path / "src"), [{"topic": "T", "body": b"x" * 9000}])
    r = runner.invoke(app, ["mq", "migrate", str(tmp_path / "src"), str(tmp_path / "ms"), "--commitlog-file-size",
                            "4096", "--id-map", str(tmp_path / "ids.csv")])
    assert r.exit_code == 1 and "give a larger --commitlog-file-size" in r.stderr, r.output
    assert sorted(os.listdir(tmp_path)) == ["src"]
