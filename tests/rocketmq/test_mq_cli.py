"""``mq messages | topics | check`` through the real CLI (typer's CliRunner) on broker
stores written by this project's store and encoder (tests/support/rmq_store.py): listings and
filters, non-message entries, and each damage ``mq check`` must find, named by file and
offset. The same commands on stores RocketMQ itself wrote: tests/java/test_rocketmq_java.py."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from store.filestore import FileStore
from store.format import HEADER_SIZE, MAGIC_CONFIG, MAGIC_NOOP
from store.rocketmq.message import TRANSACTION_PREPARED_TYPE
from tests.support.commands import invoke
from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store, write_queue


def rows(r) -> list[dict]:
    assert r.exit_code in (0, 1), r.output
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def spec(i: int, **kw) -> dict:
    out = dict(topic=f"Topic{i % 2}", queue_id=i % 3, body=b"body-%d" % i, store_timestamp=1_700_000_000_000 + i,
               properties={"TAGS": f"tag{i % 4}", "KEYS": f"order-{i} user-{i % 5}", "UNIQ_KEY": f"U{i:06d}"})
    out.update(kw)
    return out


@pytest.fixture
def broker(tmp_path):
    root = tmp_path / "store"
    specs = [spec(i) for i in range(40)]
    specs[7] = spec(7, topic="%RETRY%group-a", queue_id=0)
    specs[11] = spec(11, topic="主题-ü", born_host="[2001:db8::1]:40000", store_host="[::1]:10911")
    specs[13] = spec(13, body=b"z" * 65536, compress="zlib")
    specs[17] = spec(17, sys_flag=TRANSACTION_PREPARED_TYPE)
    specs[19] = spec(19, topic="t" * 120)
    specs[23] = spec(23, body=b"")
    written = write_broker_store(str(root), specs, cq_units_per_file=4)
    return root, specs, written


def test_messages_lists_every_field(broker):
    root, specs, written = broker
    got = rows(invoke("mq", "messages", root, "--format", "jsonl", "--body", "utf8"))
    assert len(got) == len(specs)
    for row, s, w in zip(got, specs, written):
        assert row["kind"] == "message" and (row["index"], row["pos"], row["phy_offset"]) == \
            (w["index"], w["pos"], w["pos"] + HEADER_SIZE)
        assert (row["topic"], row["queue_id"], row["queue_offset"], row["store_timestamp"]) == \
            (s["topic"], s["queue_id"], w["queue_offset"], s["store_timestamp"])
        assert row["properties"] == s["properties"] and row["tags"] == s["properties"]["TAGS"]
        assert row["body"] == s["body"].decode() and row["body_crc_ok"] is True
        assert row["msg_id"].endswith(f"{w['pos'] + HEADER_SIZE:016X}")
    assert got[11]["born_host"] == "[2001:db8::1]:40000" and len(got[11]["msg_id"]) == 56
    assert "zlib-compressed" in got[13]["note"] and got[13]["body_size"] < 65536
    assert got[17]["queue_offset"] == 0 and got[23]["body"] == ""


def test_filters(broker):
    root, specs, written = broker
    pick = lambda *a: [r["index"] for r in rows(invoke("mq", "messages", root, "--format", "jsonl", *a))]
    assert pick("--topic", "Topic1") == [w["index"] for s, w in zip(specs, written) if s["topic"] == "Topic1"]
    assert pick("--topic", "Topic0", "--queue-id", "2") == \
        [w["index"] for s, w in zip(specs, written) if s["topic"] == "Topic0" and s["queue_id"] == 2]
    assert pick("--key", "user-3") == [w["index"] for s, w in zip(specs, written)
                                       if "user-3" in s["properties"]["KEYS"].split()]
    assert pick("--tag", "tag2", "--from-index", "10", "--to-index", "30") == \
        [w["index"] for s, w in zip(specs, written) if s["properties"]["TAGS"] == "tag2" and 10 <= w["index"] <= 30]
    assert pick("--uniq-key", "U000021") == [written[21]["index"]]
    one = rows(invoke("mq", "messages", root, "--format", "jsonl", "--msg-id", rows(invoke(
        "mq", "messages", root, "--format", "jsonl", "--index" if False else "--from-index", "5", "--to-index",
        "5"))[0]["msg_id"]))
    assert [r["index"] for r in one] == [written[5]["index"]]
    assert pick("--since", "1700000000030") == [w["index"] for w in written[30:]]
    assert pick("--until", "2023-11-14T22:13:20.005") == [w["index"] for w in written[:6]]
    r = invoke("mq", "messages", root, "--msg-id", "XYZ")
    assert r.exit_code == 2 and "not a message id" in r.output
    r = invoke("mq", "messages", root, "--since", "yesterday")
    assert r.exit_code == 2 and "ISO 8601" in r.output


def test_entries_that_are_not_messages_are_listed_as_such(tmp_path):
    root = tmp_path / "store"
    write_broker_store(str(root), [spec(0), spec(1)])
    s = FileStore.open(str(root / "dledger-n0"))
    s.append_leader([b""], 2, MAGIC_NOOP)
    s.append_leader([b'{"voters":"n0-127.0.0.1:1","learners":""}'], 2, MAGIC_CONFIG)
    s.append_leader([b"plain text, not a message"], 2)
    s.close()
    got = rows(invoke("mq", "messages", root, "--format", "jsonl"))
    assert [r["kind"] for r in got] == ["message", "message", "no-op", "config", "not-a-message"]
    assert "fewer than" in got[-1]["note"]
    assert [r["kind"] for r in rows(invoke("mq", "messages", root, "--format", "jsonl", "--topic", "Topic0"))] == \
        ["message"]
    r = invoke("mq", "check", root, "--format", "jsonl")
    assert r.exit_code == 1 and [f["finding"] for f in rows(r)] == ["not-a-message"]


def test_topics_counts_each_queue_beside_its_consume_queue(broker):
    root, specs, written = broker
    got = {(r["topic"], r["queue_id"]): r for r in rows(invoke("mq", "topics", root, "--format", "jsonl"))}
    want: dict = {}
    for s, w in zip(specs, written):
        want.setdefault((s["topic"], s["queue_id"]), []).append((w, s))
    assert set(got) == set(want)
    for key, ws in want.items():
        r = got[key]
        assert r["messages"] == len(ws) and r["bytes"] == sum(w["size"] for w, _s in ws)
        assert r["first_store_time"] == min(s["store_timestamp"] for _w, s in ws)
        dispatched = [w for w, s in ws if not s.get("sys_flag")]
        assert r["cq_units"] == len(dispatched) and r["cq_last"] == (len(dispatched) - 1 if dispatched else None)


def test_check_passes_on_a_sound_store(broker):
    root, _specs, _written = broker
    r = invoke("mq", "check", root)
    assert r.exit_code == 0, r.output
    assert "40 messages" in r.stderr and "0 findings" in r.stderr


def _flip(node, pos: int) -> None:
    """Change one byte at logical ``pos`` of a node's data (one data file in these tests)."""
    data = os.path.join(node, "data")
    path = os.path.join(data, sorted(os.listdir(data))[0])
    with open(path, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ 0x20]))


def test_check_finds_a_changed_body_byte(broker):
    root, specs, written = broker
    w = written[9]
    _flip(root / "dledger-n0", w["pos"] + HEADER_SIZE + 88 + 2)  # (IPv4 hosts: the body starts 88 bytes in)
    r = invoke("mq", "check", root, "--format", "jsonl")
    found = rows(r)
    # (the entry's own bodyCrc, dledgerctl's, fails too: the message is all of the entry's body)
    assert r.exit_code == 1 and [(f["finding"], f["index"]) for f in found] == [("entry-crc", w["index"]),
                                                                               ("body-crc", w["index"])]
    assert all(f["file"] == "data/" + "0" * 20 and f["offset"] == w["pos"] for f in found)


def test_check_finds_a_unit_pointing_elsewhere(broker):
    root, specs, written = broker
    qdir = root / "consumequeue" / "Topic0" / "0"
    first = os.path.join(qdir, sorted(os.listdir(qdir))[0])
    with open(first, "r+b") as fh:  # unit 1 of the queue now points at the middle of a message
        fh.seek(20)
        fh.write(cq_unit(written[6]["phy_offset"] + 7, 99, 0))
    found = rows(invoke("mq", "check", root, "--format", "jsonl"))
    kinds = sorted(f["finding"] for f in found)
    assert kinds == ["cq-elsewhere", "cq-hole"]
    unit = next(f for f in found if f["finding"] == "cq-elsewhere")
    assert unit["file"] == "consumequeue/Topic0/0/" + "0" * 20 and unit["offset"] == 20 and unit["queue_offset"] == 1


def test_check_finds_units_past_a_truncated_log(broker):
    root, specs, written = broker
    cut = written[30]
    s = FileStore.open(str(root / "dledger-n0"))
    s.truncate(cut["index"], force=True)  # a follower's log cut back by its leader
    s.close()
    r = invoke("mq", "check", root, "--format", "jsonl")
    found = rows(r)
    assert r.exit_code == 1 and {f["finding"] for f in found} == {"cq-past-log-end"}
    dispatched_after = [w for s, w in zip(specs[30:], written[30:]) if not s.get("sys_flag")]
    assert len(found) == len(dispatched_after)


def test_the_compiled_unit_check_finds_what_numpys_finds(broker, monkeypatch):
    """check.py matches each queue's units to the messages in C (_columns.units) where it
    is built: the same findings, in the same order, as its numpy twin, over units damaged
    every way a unit can be (and a queue whose topic the log does not hold)."""
    import random

    from store.rocketmq import check
    from store.rocketmq.layout import resolve_broker

    if check._columns is None:
        pytest.skip("store.rocketmq._columns is not built")
    root, specs, written = broker
    rng = random.Random(7)
    end = written[-1]["phy_offset"] + written[-1]["size"]
    for topic, qid in (("Topic0", 0), ("Topic1", 1), ("Topic0", 2)):
        qdir = root / "consumequeue" / topic / str(qid)
        for name in sorted(os.listdir(qdir)):
            with open(qdir / name, "r+b") as fh:
                for slot in range(len(fh.read()) // 20):
                    if rng.random() < 0.4:
                        w = rng.choice(written)
                        fh.seek(slot * 20)
                        fh.write(cq_unit(rng.choice([w["phy_offset"], w["phy_offset"] + 3, end + 100, 0]),
                                         w["size"] + rng.choice([0, 0, 1]), rng.choice([0, 3552214])))
    write_queue(str(root), "NoSuchTopic", 0, [cq_unit(w["phy_offset"], w["size"], 0) for w in written[:3]])
    b = resolve_broker(str(root))
    compiled = check.check_broker(b)
    monkeypatch.setattr(check, "_columns", None)
    assert check.check_broker(b) == compiled
    kinds = {f["finding"] for f in compiled[0]}
    assert {"cq-mismatch", "cq-elsewhere", "cq-past-log-end"} <= kinds, kinds


def test_check_finds_a_unit_of_another_size_and_a_queue_offset_out_of_order(tmp_path):
    root = tmp_path / "store"
    specs = [spec(0, queue_id=0, topic="T"), spec(1, queue_id=0, topic="T"), spec(2, queue_id=0, topic="T",
                                                                                     queue_offset=5)]
    written = write_broker_store(str(root), specs)
    shutil.rmtree(root / "consumequeue")
    write_queue(str(root), "T", 0, [cq_unit(w["phy_offset"], w["size"] + (k == 1), 0) for k, w in
                                     enumerate(written[:2])])
    found = rows(invoke("mq", "check", root, "--format", "jsonl"))
    # (the units carry tag code 0 where the messages have tags: both mismatch, the second in size too)
    assert sorted(f["finding"] for f in found) == ["cq-mismatch", "cq-mismatch", "queue-offset"]
    cq = [f["detail"] for f in found if f["finding"] == "cq-mismatch"]
    assert cq[0].endswith(", but its tag code is 3552214"), cq  # ("tag0".hashCode())
    assert cq[1].endswith(f"but its size is {written[1]['size']}, its tag code is 3552215"), cq


def test_a_queue_that_begins_with_fillers_is_read_from_its_first_unit(tmp_path):
    root = tmp_path / "store"
    specs = [spec(i, topic="T", queue_id=0, queue_offset=100 + i, properties={}) for i in range(3)]
    written = write_broker_store(str(root), specs)
    shutil.rmtree(root / "consumequeue")
    write_queue(str(root), "T", 0, [cq_unit(w["phy_offset"], w["size"], 0) for w in written], per_file=200,
                first=100, blanks=100)
    r = invoke("mq", "check", root)
    assert r.exit_code == 0, r.output
    got = rows(invoke("mq", "topics", root, "--format", "jsonl"))
    assert (got[0]["cq_first"], got[0]["cq_last"], got[0]["cq_units"]) == (100, 102, 3)


def test_a_path_that_holds_no_store_is_one_error_line(tmp_path):
    r = invoke("mq", "messages", tmp_path)
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1


def test_queue_files_are_read_in_chunks_up_to_their_end(broker, monkeypatch):
    """(A preallocated queue file is read only up to the chunk that holds its last unit.)"""
    from store.rocketmq import consumequeue
    root, specs, written = broker
    want = rows(invoke("mq", "topics", root, "--format", "jsonl"))
    monkeypatch.setattr(consumequeue, "_CHUNK", 2 * consumequeue.CQ_STORE_UNIT_SIZE)
    assert rows(invoke("mq", "topics", root, "--format", "jsonl")) == want
    assert invoke("mq", "check", root).exit_code == 0


def test_queue_keys_are_small_when_they_fit_and_exact_when_they_do_not():
    import numpy as np

    from store.rocketmq.check import _small_key
    small = _small_key(np.array([0, 2, 2], np.int32), np.array([3, 0, 3], np.int32))
    assert small.dtype == np.int16 and len(set(small.tolist())) == 3
    big = _small_key(np.array([40000, 40000, 1], np.int32), np.array([1, 2, 1], np.int32))
    assert big.dtype == np.int64 and len(set(big.tolist())) == 3
