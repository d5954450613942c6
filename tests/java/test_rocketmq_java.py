"""``mq`` commands on stores RocketMQ's own message store wrote in DLedger mode.

tests/support/javarocketmq.py builds RocketMQ 4.9.4 with DLedger 0.2.6 (and 4.9.8 with DLedger
0.3.1.2) from the mirrors and puts messages through ``DefaultMessageStore``: batches, IPv6
hosts, a retry topic, non-ASCII and 120-byte topics, empty and 64 KiB bodies, a body the
producer compressed, a delayed message, properties. ``mq messages`` must reproduce every
message RocketMQ reported putting, ``mq topics`` count them, ``mq check`` pass, and fail
naming the place on a changed body byte, a consume-queue unit that points elsewhere, and
consume queues left past a truncated log. Skipped, saying why, when Java, a mirror or a
Debian jar is missing.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import zlib

import pytest

from store.filestore import FileStore
from store.format import HEADER_SIZE
from tests.support import javarocketmq
from tests.support.commands import invoke
from tests.support.rmq_encode import cq_unit


def jsonl(r) -> list[dict]:
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def specs() -> list[dict]:
    out = []
    for i in range(240):
        out.append({"topic": f"Orders{i % 2}", "queue_id": i % 4, "body": f"order {i} ü".encode(),
                    "tags": f"tag{i % 3}", "keys": f"order-{i} user-{i % 7}", "properties": {"shop": f"s{i % 5}"},
                    "flag": i % 3})
    out += [{"topic": "Batch", "queue_id": 2, "body": b"batched %d" % k, "tags": "b", "keys": f"b{k}", "batch": 1}
            for k in range(5)]
    out.append({"topic": "V6", "queue_id": 0, "body": b"v6", "born_host": "[::1]:4321",
                "store_host": "[2001:db8::7]:10911"})
    out.append({"topic": "%RETRY%consumers", "queue_id": 0, "body": b"retry", "reconsume_times": 3})
    out.append({"topic": "主题-ü", "queue_id": 1, "body": b"non-ascii topic", "tags": "标签"})
    out.append({"topic": "t" * 120, "queue_id": 0, "body": b"long topic"})
    out.append({"topic": "Edge", "queue_id": 0, "body": b""})
    out.append({"topic": "Edge", "queue_id": 0, "body": bytes(range(256)) * 256})
    out.append({"topic": "Edge", "queue_id": 1, "body": zlib.compress(b"compressed " * 100), "sys_flag": 0x1})
    out.append({"topic": "Later", "queue_id": 0, "body": b"delayed", "delay_level": 3})
    return out


@pytest.fixture(scope="module")
def written(rocketmq, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"rmq-{rocketmq.version}") / "store"
    reported = javarocketmq.write_store(rocketmq, str(root), specs(), data_file_size=96 << 10)
    assert [r["status"] for r in reported] == ["PUT_OK"] * len(reported)
    assert len(os.listdir(root / "dledger-n0" / "data")) > 1  # (entries in several data files)
    return root, reported


def copy(written, tmp_path):
    root, reported = written
    dst = tmp_path / "store"
    shutil.copytree(root, dst, ignore=shutil.ignore_patterns("lock"))
    return dst, reported


def test_mq_messages_reproduces_every_message_rocketmq_put(written):
    root, reported = written
    r = invoke("mq", "messages", root, "--format", "jsonl", "--body", "base64")
    assert r.exit_code == 0, r.output
    got = jsonl(r)
    assert [g["kind"] for g in got] == ["message"] * len(reported)
    by_id = {g["msg_id"]: g for g in got}
    for want, spec in zip(reported, specs()):
        g = by_id[want["msg_id"]]
        assert (g["queue_offset"], g["phy_offset"], g["pos"] + HEADER_SIZE) == \
            (want["queue_offset"], want["phy_offset"], want["phy_offset"])
        assert (g["topic"], g["queue_id"], g["flag"], g["sys_flag"], g["reconsume_times"]) == \
            (want["topic"], want["queue_id"], want["flag"], want["sys_flag"], want["reconsume_times"])
        assert (g["tags"], g["keys"], g["properties"]) == (want["tags"], want["keys"], want["properties"])
        assert g["uniq_key"] == want["properties"].get("UNIQ_KEY")
        assert (g["born_timestamp"], g["store_timestamp"], g["born_host"], g["store_host"]) == \
            (want["born_timestamp"], want["store_timestamp"], want["born_host"], want["store_host"])
        body = base64.b64decode(g["body"])
        assert body == (zlib.decompress(want["body"]) if spec.get("sys_flag", 0) & 1 else want["body"])
        assert g["body_crc_ok"] is True
    v6 = by_id[next(w["msg_id"] for w in reported if w["topic"] == "V6")]
    assert len(v6["msg_id"]) == 56 and v6["sys_flag"] & 0x30 == 0x30


def test_mq_messages_finds_one_message_by_its_id_and_by_its_keys(written):
    root, reported = written
    want = reported[100]
    got = jsonl(invoke("mq", "messages", root, "--format", "jsonl", "--msg-id", want["msg_id"]))
    assert [g["msg_id"] for g in got] == [want["msg_id"]]
    got = jsonl(invoke("mq", "messages", root, "--format", "jsonl", "--uniq-key", want["properties"]["UNIQ_KEY"]))
    assert [g["msg_id"] for g in got] == [want["msg_id"]]
    got = jsonl(invoke("mq", "messages", root, "--format", "jsonl", "--key", "user-3", "--topic", "Orders1"))
    assert sorted(g["msg_id"] for g in got) == sorted(w["msg_id"] for w in reported
                                                      if w["topic"] == "Orders1" and "user-3" in w["keys"].split())


def test_mq_topics_counts_what_rocketmq_put(written):
    root, reported = written
    r = invoke("mq", "topics", root, "--format", "jsonl")
    assert r.exit_code == 0, r.output
    rows = {(t["topic"], t["queue_id"]): t for t in jsonl(r)}
    want: dict = {}
    for w in reported:
        want.setdefault((w["topic"], w["queue_id"]), []).append(w)
    assert set(rows) == set(want)
    for key, ws in want.items():
        t = rows[key]
        assert (t["messages"], t["bytes"]) == (len(ws), sum(w["size"] for w in ws))
        assert (t["first_queue_offset"], t["last_queue_offset"]) == (min(w["queue_offset"] for w in ws),
                                                                     max(w["queue_offset"] for w in ws))
        assert (t["cq_first"], t["cq_last"], t["cq_units"]) == (t["first_queue_offset"], t["last_queue_offset"],
                                                                len(ws))


def test_mq_check_passes_on_what_rocketmq_wrote(written):
    root, reported = written
    r = invoke("mq", "check", root)
    assert r.exit_code == 0, r.output
    assert f"{len(reported)} messages" in r.stderr and "0 findings" in r.stderr


def test_rocketmqs_own_decoder_reads_the_same_messages(rocketmq, written):
    root, reported = written
    got = javarocketmq.decode_all(rocketmq, str(root / "dledger-n0"))
    assert (got["messages"], got["failed"]) == (len(reported), 0)


def test_mq_check_finds_a_changed_body_byte(written, tmp_path):
    root, reported = copy(written, tmp_path)
    want = reported[50]
    node = root / "dledger-n0"
    data = sorted(os.listdir(node / "data"))
    start = max(int(n) for n in data if int(n) <= want["phy_offset"])
    # the body is the last thing before the topic and properties: count back from the end
    m = jsonl(invoke("mq", "messages", root, "--format", "jsonl", "--msg-id", want["msg_id"]))[0]
    body_end = want["phy_offset"] + want["size"] - 1 - len(want["topic"].encode()) - 2 - sum(
        len(k.encode()) + len(v.encode()) + 2 for k, v in m["properties"].items())
    with open(node / "data" / f"{start:020d}", "r+b") as fh:
        fh.seek(body_end - start - 1)
        b = fh.read(1)
        fh.seek(body_end - start - 1)
        fh.write(bytes([b[0] ^ 0x01]))
    r = invoke("mq", "check", root, "--format", "jsonl")
    found = jsonl(r)
    assert r.exit_code == 1 and [(f["finding"], f["file"], f["offset"]) for f in found] == \
        [("body-crc", f"data/{start:020d}", want["phy_offset"] - HEADER_SIZE - start)]


def test_mq_check_finds_a_unit_pointing_elsewhere(written, tmp_path):
    root, reported = copy(written, tmp_path)
    want = reported[10]
    qdir = root / "consumequeue" / want["topic"] / str(want["queue_id"])
    first = sorted(os.listdir(qdir))[0]
    at = want["queue_offset"] * 20 - int(first)
    with open(qdir / first, "r+b") as fh:
        fh.seek(at)
        fh.write(cq_unit(want["phy_offset"] + 20, want["size"], 0))
    found = jsonl(invoke("mq", "check", root, "--format", "jsonl"))
    elsewhere = [f for f in found if f["finding"] == "cq-elsewhere"]
    assert [(f["file"], f["offset"], f["queue_offset"]) for f in elsewhere] == \
        [(f"consumequeue/{want['topic']}/{want['queue_id']}/{first}", at, want["queue_offset"])]
    assert {f["finding"] for f in found} == {"cq-elsewhere", "cq-hole"}


def test_mq_check_finds_consume_queues_past_a_truncated_log(written, tmp_path):
    root, reported = copy(written, tmp_path)
    cut = reported[200]
    s = FileStore.open(str(root / "dledger-n0"), data_file_size=96 << 10)
    index = next(e.index for e in s.entries() if e.pos + HEADER_SIZE == cut["phy_offset"])
    s.truncate(index, force=True)  # what a leader does to a follower whose log it cuts back
    s.close()
    r = invoke("mq", "check", root, "--format", "jsonl")
    found = jsonl(r)
    assert r.exit_code == 1 and {f["finding"] for f in found} == {"cq-past-log-end"}
    assert len(found) == sum(1 for w in reported if w["phy_offset"] >= cut["phy_offset"])
    assert all(f["file"].startswith("consumequeue/") for f in found)
