"""``mq migrate`` proven with RocketMQ's own store: a DLedger-mode store written by RocketMQ's
``DefaultMessageStore`` (4.9.4 with DLedger 0.2.6, 4.9.8 with 0.3.1.2; tests/support/javarocketmq.py),
migrated, then opened by the same version's ``DefaultMessageStore`` in master-slave mode
(``enableDLegerCommitLog=false``: it loads and recovers the commit log and the consume
queues as a broker does at start) and read through ``getMessage`` on every consume queue
(tests/support/java/rocketmq/RocketMQStoreReader.java). Every message put must be there once, at
its queue offset, with the same body, tags, keys, properties and times, and
``lookMessageByOffset`` must find it at its new offset. Also with commit-log files so small
that blanks end them, and on a store whose checkpoint says fewer entries are committed than
it holds and whose queues and index stop there too (a follower's, whose broker dispatches
only what its member knows committed): those are left out, and said. Skipped, saying why, when Java, a
mirror or a Debian jar is missing.
"""

from __future__ import annotations

import base64
import collections
import csv
import json
import os
import shutil
import zlib

import pytest
from typer.testing import CliRunner

from tests.rocketmq.test_mq_commitment import unpoint
from tests.support import javarocketmq
from dledgerctl.app import app
from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store, write_queue
from store.metafiles import read_checkpoint, write_checkpoint

runner = CliRunner()
READER = "RocketMQStoreReader"
CQ_FILE_SIZE = 20 * 1000  # what write_store gives the source's consume queues
SMALL = 70 << 10  # a 64 KiB body and its fields fit; a few messages fill a file


def specs() -> list[dict]:
    out = []
    for i in range(150):
        out.append({"topic": f"Orders{i % 2}", "queue_id": i % 3, "body": f"order {i} ü".encode() * (1 + i % 40),
                    "tags": f"tag{i % 3}", "keys": f"order-{i} user-{i % 7}", "properties": {"shop": f"s{i % 5}"},
                    "flag": i % 3})
    out += [{"topic": "Batch", "queue_id": 1, "body": b"batched %d" % k, "tags": "b", "keys": f"b{k}", "batch": 1}
            for k in range(5)]
    out.append({"topic": "V6", "queue_id": 0, "body": b"v6", "born_host": "[::1]:4321",
                "store_host": "[2001:db8::7]:10911"})
    out.append({"topic": "%RETRY%consumers", "queue_id": 0, "body": b"retry", "reconsume_times": 3})
    out.append({"topic": "主题-ü", "queue_id": 1, "body": b"non-ascii topic", "tags": "标签"})
    out.append({"topic": "Edge", "queue_id": 0, "body": b""})
    out.append({"topic": "Edge", "queue_id": 0, "body": bytes(range(256)) * 256})  # 64 KiB
    out.append({"topic": "Edge", "queue_id": 0, "body": bytes(range(256)) * 256})
    out.append({"topic": "Edge", "queue_id": 1, "body": zlib.compress(b"compressed " * 100), "sys_flag": 0x1})
    out.append({"topic": "Later", "queue_id": 0, "body": b"delayed", "delay_level": 3})
    out += [{"topic": "Orders0", "queue_id": 2, "body": b"after %d" % k, "tags": "late"} for k in range(20)]
    return out


@pytest.fixture(scope="module")
def written(rocketmq, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"rmq-migrate-{rocketmq.version}") / "store"
    reported = javarocketmq.write_store(rocketmq, str(root), specs(), data_file_size=96 << 10,
                                        consume_queue_file_size=CQ_FILE_SIZE)
    assert [r["status"] for r in reported] == ["PUT_OK"] * len(reported)
    os.makedirs(root / "config")
    with open(root / "config" / "consumerOffset.json", "w") as fh:
        json.dump({"offsetTable": {"Orders0@g": {"0": 3}}}, fh)
    return root, reported


def tree(root) -> dict:
    """Every file under ``root``: its bytes' crc and size (to see SRC left as it was)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = (zlib.crc32(fh.read()), os.path.getsize(p))
    return out


HARNESS_INDEX_SHAPE = (1000, 4000)  # RocketMQStoreWriter's maxHashSlotNum and maxIndexNum


def migrate(src, dest, *args) -> dict:
    r = runner.invoke(app, ["mq", "migrate", str(src), str(dest), "--format", "json", *map(str, args)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)[0] | {"stderr": r.stderr}


def read_back(rocketmq, root, commitlog_file_size: int, cq_file_size: int = CQ_FILE_SIZE,
              index_shape=HARNESS_INDEX_SHAPE) -> tuple[dict, list[dict]]:
    """What RocketMQ's master-slave store serves: messages by (topic, queue, queue offset), and the other lines.
    ``index_shape``: the broker's maxHashSlotNum and maxIndexNum (by default the harness's, which the DLedger-mode
    brokers of these tests ran with and so ``mq migrate`` takes from their index/ files)."""
    lines = javarocketmq._run_json(rocketmq.command(READER, str(root), str(commitlog_file_size), str(cq_file_size),
                                                    "110000", *map(str, index_shape)), 120,
                                   f"{READER} (RocketMQ {rocketmq.version})")
    assert [m for m in lines if m["kind"] in ("miss", "undecodable")] == []  # (what getMessage could not serve)
    msgs = [m for m in lines if m["kind"] == "message"]
    counts = collections.Counter((m["topic"], m["queue_id"], m["queue_offset"]) for m in msgs)
    assert [k for k, n in counts.items() if n > 1] == []
    return {(m["topic"], m["queue_id"], m["queue_offset"]): m for m in msgs}, [m for m in lines
                                                                               if m["kind"] != "message"]


def assert_served(got: dict, want: list[dict]) -> None:
    assert set(got) == {(w["topic"], w["queue_id"], w["queue_offset"]) for w in want}
    for w in want:
        g = got[(w["topic"], w["queue_id"], w["queue_offset"])]
        assert (g["msg_topic"], g["msg_queue_id"], g["stored_queue_offset"]) == \
            (w["topic"], w["queue_id"], w["queue_offset"])
        assert base64.b64decode(g["body"]) == w["body"]
        assert (g["tags"], g["keys"], g["properties"]) == (w["tags"], w["keys"], w["properties"])
        assert (g["born_timestamp"], g["store_timestamp"], g["flag"], g["sys_flag"], g["body_crc"]) == \
            (w["born_timestamp"], w["store_timestamp"], w["flag"], w["sys_flag"], w["body_crc"])
        assert g["size"] == w["size"]
        assert g["look_ok"] is True
        assert g["msg_id"].endswith(f"{g['phy_offset']:016X}")  # the offset msgId names the new offset
    offsets = sorted((g["phy_offset"], g["size"]) for g in got.values())
    assert all(a + n <= b for (a, n), (b, _) in zip(offsets, offsets[1:]))
    assert_indexed(got)


def assert_consumers_agree(root, queue_lines: list[dict]) -> None:
    """``mq consumers`` gives each queue the min and max RocketMQ's store answered
    (getMinOffsetInQueue/getMaxOffsetInQueue): offsets committed at every queue's max (no
    finding), and one past a queue's end (a finding)."""
    queues = [q for q in queue_lines if q["kind"] == "queue" and q["max"]]
    assert queues
    table: dict = {}
    for q in queues:
        table.setdefault(f"{q['topic']}@g", {})[str(q["queue_id"])] = q["max"]
    with open(os.path.join(root, "config", "consumerOffset.json"), "w") as fh:
        json.dump({"offsetTable": table}, fh)
    r = runner.invoke(app, ["mq", "consumers", str(root), "--format", "json"])
    assert r.exit_code == 0, r.output
    got = {(x["topic"], x["queue_id"]): (x["min"], x["max"], x["status"]) for x in json.loads(r.stdout)}
    assert got == {(q["topic"], q["queue_id"]): (q["min"], q["max"], "ok") for q in queues}
    q = queues[0]
    table[f"{q['topic']}@g"][str(q["queue_id"])] = q["max"] + 1
    with open(os.path.join(root, "config", "consumerOffset.json"), "w") as fh:
        json.dump({"offsetTable": table}, fh)
    r = runner.invoke(app, ["mq", "consumers", str(root)])
    assert r.exit_code == 1 and "1 offset past the end of its queue" in r.stderr, r.output


def index_keys(g) -> list[str]:
    p = g["properties"] or {}
    return ([p["UNIQ_KEY"]] if "UNIQ_KEY" in p else []) + [k for k in (g["keys"] or "").split(" ") if k]


def assert_indexed(got: dict) -> None:
    """RocketMQ's queryMessage (the rebuilt index/) finds, for each key and the UNIQ_KEY of each
    message served, exactly the messages of its topic that have that key, at their new offsets."""
    want: dict = {}
    for g in got.values():
        for k in index_keys(g):
            want.setdefault((g["msg_topic"], k), set()).add(g["phy_offset"])
    assert want and any(len(v) > 1 for v in want.values())
    for g in got.values():
        assert sorted(g["index"]) == sorted(set(index_keys(g)))
        for k, found in g["index"].items():
            assert len(found) == len(set(found)) and set(found) == want[(g["msg_topic"], k)], (g["msg_topic"], k)


def test_rocketmq_serves_every_message_of_a_migrated_store(rocketmq, written, tmp_path):
    src, reported = written
    before = tree(src)
    dest = tmp_path / "ms"
    s = migrate(src, dest, "--commitlog-file-size", 4 << 20, "--id-map", tmp_path / "ids.csv")
    assert tree(src) == before  # SRC only read
    assert (s["messages"], s["left_out"], s["files"]) == (len(reported), 0, 1)
    assert s["bytes"] == sum(w["size"] for w in reported)
    assert sorted(os.listdir(dest)) == ["checkpoint", "commitlog", "config", "consumequeue", "index"]
    assert s["index_files"] == 1 and s["index_keys"] > len(reported)
    assert "index files of 1000 slots and 4000 entries" in s["stderr"]  # (the shape of the broker's own)
    with open(dest / "config" / "consumerOffset.json") as fh:
        assert json.load(fh) == {"offsetTable": {"Orders0@g": {"0": 3}}}
    got, other = read_back(rocketmq, dest, 4 << 20)
    assert_served(got, reported)
    # --id-map: the offset msgId RocketMQ gave each message at put (DLedger mode) -> the one its
    # master-slave store gives it after the move (batches: one id per message)
    with open(tmp_path / "ids.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    new_of = {w["msg_id"]: got[(w["topic"], w["queue_id"], w["queue_offset"])]["msg_id"] for w in reported}
    assert [r["old_msg_id"] for r in rows] == [w["msg_id"] for w in reported]
    assert {r["old_msg_id"]: r["new_msg_id"] for r in rows} == new_of
    assert any(len(r["new_msg_id"]) == 56 for r in rows)  # (the IPv6 store host's)
    assert other[-1]["kind"] == "done" and other[-1]["min_phy_offset"] == 0
    r = runner.invoke(app, ["mq", "consumers", str(dest), "--format", "json"])  # (the offsets config/ brought)
    assert r.exit_code == 0 and [(x["group"], x["topic"], x["queue_id"], x["committed"], x["status"])
                                 for x in json.loads(r.stdout)] == [("g", "Orders0", 0, 3, "ok")], r.output
    assert other[-1]["max_phy_offset"] == s["bytes"]  # back to back from 0, no blank in one file
    r = runner.invoke(app, ["mq", "check", str(dest)])  # (the store RocketMQ opened: its abort and lock files gone)
    assert r.exit_code == 0, r.output
    assert f"{len(reported)} messages" in r.stderr and "0 findings" in r.stderr
    assert_consumers_agree(dest, other)


def test_small_commit_log_files_end_in_blanks_rocketmq_reads_past(rocketmq, written, tmp_path):
    src, reported = written
    dest = tmp_path / "ms"
    s = migrate(src, dest, "--commitlog-file-size", SMALL)
    assert s["files"] >= 3 and s["blanks"] == s["files"] - 1
    assert sorted(os.listdir(dest / "commitlog")) == [f"{k * SMALL:020d}" for k in range(s["files"])]
    assert {os.path.getsize(dest / "commitlog" / n) for n in os.listdir(dest / "commitlog")} == {SMALL}
    got, other = read_back(rocketmq, dest, SMALL)
    assert_served(got, reported)
    # every message lies inside one file
    assert all(g["phy_offset"] // SMALL == (g["phy_offset"] + g["size"] - 1) // SMALL for g in got.values())


def test_queries_by_key_through_index_files_that_roll(rocketmq, written, tmp_path):
    """Index files of 97 slots and 60 entries (the broker configured alike): keys fill several
    files, each query walks them newest first, RocketMQ's store finds every message by each key."""
    src, reported = written
    dest = tmp_path / "ms"
    s = migrate(src, dest, "--commitlog-file-size", SMALL, "--max-hash-slot-num", 97, "--max-index-num", 60)
    assert s["index_files"] == len(os.listdir(dest / "index")) >= 5
    assert all(os.path.getsize(dest / "index" / n) == 40 + 97 * 4 + 60 * 20 for n in os.listdir(dest / "index"))
    got, _ = read_back(rocketmq, dest, SMALL, index_shape=(97, 60))
    assert_served(got, reported)


def test_a_followers_uncommitted_entries_are_left_out_and_said(rocketmq, written, tmp_path):
    src, reported = written
    follower = tmp_path / "follower"
    shutil.copytree(src, follower, ignore=shutil.ignore_patterns("lock"))
    node = follower / "dledger-n0"
    rows = [json.loads(line) for line in runner.invoke(app, ["mq", "messages", str(follower), "--format",
                                                               "jsonl"]).stdout.splitlines()]
    index_of = {r["phy_offset"]: r["index"] for r in rows}
    cut = 140  # reported[140:] are past the committed index
    committed = index_of[reported[cut]["phy_offset"]] - 1
    cp = read_checkpoint(str(node))
    write_checkpoint(str(node), cp.end_index, committed)
    # a follower's broker dispatches (and indexes) only what its member knows committed
    unpoint(follower, reported[cut]["phy_offset"])
    shutil.rmtree(follower / "index")
    left = [w for w in reported if index_of[w["phy_offset"]] > committed]
    kept = [w for w in reported if index_of[w["phy_offset"]] <= committed]
    assert left and kept

    dest = tmp_path / "ms"
    shape = ("--max-hash-slot-num", HARNESS_INDEX_SHAPE[0], "--max-index-num", HARNESS_INDEX_SHAPE[1])
    s = migrate(follower, dest, "--commitlog-file-size", SMALL, *shape)
    assert (s["messages"], s["left_out"], s["committed_index"]) == (len(kept), len(left), committed)
    assert f"left out {len(left)} messages past the committed index {committed}" in s["stderr"]
    got, other = read_back(rocketmq, dest, SMALL)
    assert_served(got, kept)

    dest2 = tmp_path / "ms-all"
    s = migrate(follower, dest2, "--commitlog-file-size", SMALL, "--include-uncommitted", *shape)
    assert (s["messages"], s["left_out"]) == (len(reported), 0)
    got, _ = read_back(rocketmq, dest2, SMALL)
    assert_served(got, reported)


def test_a_queue_that_starts_past_zero_is_served_from_its_first_message(rocketmq, tmp_path):
    """A queue whose first unit is at queue offset 37 (RocketMQ's fillPreBlank units before
    it in its file; files of 16 units): RocketMQ's store gives 37 as its minimum and serves
    its messages from there (the blanks must lie below the new log's first offset)."""
    root = tmp_path / "src"
    written = write_broker_store(str(root), [{"topic": "A", "body": b"m%d" % i, "properties": {"TAGS": "t"},
                                              "queue_offset": 37 + i} for i in range(5)] + [{"topic": "C", "body": b"c%d" % i}
                                                                   for i in range(3)], data_file_size=16 << 10,
                                 cq_units_per_file=16)
    qdir = root / "consumequeue" / "A" / "0"
    for n in os.listdir(qdir):
        os.unlink(qdir / n)
    write_queue(str(root), "A", 0, [cq_unit(w["phy_offset"], w["size"], 116) for w in written[:5]],
                per_file=16, first=37, blanks=5)
    dest = tmp_path / "ms"
    cl = 8 << 10
    migrate(root, dest, "--commitlog-file-size", cl)
    lines = javarocketmq._run_json(rocketmq.command(READER, str(dest), str(cl), str(16 * 20), "110000"), 120, READER)
    queues = {(q["topic"], q["queue_id"]): (q["min"], q["max"]) for q in lines
              if q["kind"] == "queue" and q["max"]}  # (the schedule service's queues are made empty)
    assert queues == {("A", 0): (37, 42), ("C", 0): (0, 3)}
    got = [(m["topic"], m["stored_queue_offset"], base64.b64decode(m["body"])) for m in lines
           if m["kind"] == "message" and m["queue_offset"] == m["stored_queue_offset"] and m["look_ok"]]
    assert got == [("A", 37 + i, b"m%d" % i) for i in range(5)] + [("C", i, b"c%d" % i) for i in range(3)]
    assert [m for m in lines if m["kind"] in ("miss", "undecodable")] == []
    assert_consumers_agree(dest, lines)


def test_refuses_the_store_of_a_running_broker_then_moves_it_stopped(rocketmq, tmp_path):
    root = tmp_path / "store"
    member = javarocketmq.BrokerMember(rocketmq, str(root), "n0", f"n0-127.0.0.1:{javarocketmq._free_port()}",
                                       put_interval_ms=20, body_bytes=50)
    member.start()
    try:
        member.wait_for(lambda e: e["event"] == "put" and e["status"] == "PUT_OK", 60, "an acknowledged put")
        r = runner.invoke(app, ["mq", "migrate", str(root), str(tmp_path / "ms")])
        assert r.exit_code == 1 and "a running broker holds its lock file" in r.stderr, r.output
        assert not (tmp_path / "ms").exists()
        member.quit()
    finally:
        member.kill()
    puts = member.puts()
    s = migrate(root, tmp_path / "ms", "--commitlog-file-size", 1 << 20)
    assert s["messages"] == len(puts) and s["left_out"] == 0


def test_a_queue_left_with_no_message_keeps_its_offsets_and_dispatch_goes_on(rocketmq, tmp_path):
    """A queue whose units all point below the log's first message (idle since DLedger deleted
    the head files) keeps its max offset (3) as blank units; RocketMQ's store, opened on the
    moved store, takes new messages put to it and to a normal queue, dispatches them (the
    blanks' offset + size, which ConsumeQueue.recover takes as the queue's maxPhysicOffset,
    must not move the start of dispatch past the log) and serves them through getMessage at
    the queues' next offsets; reading the blanks serves nothing (no byte of a message)."""
    root = tmp_path / "src"
    write_broker_store(str(root), [{"topic": "C", "body": b"c%d" % i} for i in range(3)], data_file_size=16 << 10,
                       cq_units_per_file=16)
    write_queue(str(root), "OLD", 0, [cq_unit(i * 10, 10, 0) for i in range(3)], per_file=16)
    dest = tmp_path / "ms"
    cl = 8 << 10
    migrate(root, dest, "--commitlog-file-size", cl)
    lines = javarocketmq._run_json(rocketmq.command(READER, str(dest), str(cl), str(16 * 20), "110000",
                                                    "put:C:0", "put:OLD:0"), 120, READER)
    queues = {(q["topic"], q["queue_id"]): q["max"] for q in lines if q["kind"] == "queue" and q["max"]}
    assert queues == {("C", 0): 3, ("OLD", 0): 3}
    assert [m for m in lines if m["kind"] == "undecodable"] == []
    assert {(m["topic"], m["status"]) for m in lines if m["kind"] == "miss"} <= {("OLD", "MESSAGE_WAS_REMOVING")}
    assert [base64.b64decode(m["body"]) for m in lines if m["kind"] == "message"] == [b"c%d" % i for i in range(3)]
    puts = {p["topic"]: p for p in lines if p["kind"] == "put"}
    for topic, n in (("C", 0), ("OLD", 1)):
        p = puts[topic]
        assert (p["status"], p["queue_offset"], p["max_before"]) == ("PUT_OK", 3, 3), p
        assert (p["dispatched"], p["max_after"], p["pulled"]) == (True, 4, "FOUND"), p
        assert base64.b64decode(p["pulled_body"]) == f"new {n} {topic}/0".encode()
        assert (p["pulled_queue_offset"], p["pulled_phy_offset"]) == (3, p["phy_offset"])
