"""RocketMQ 5.3.3's real broker process in controller mode on a store ``mq migrate --cut N
--controller-mode`` made (issue 60): ``BrokerStartup`` with ``enableControllerMode=true``,
registered with RocketMQ's own controller (``ControllerStartup``, a DLedger controller group of
one member), both built from the mirrors by tests/support/javarocketmq5broker.py (stand-ins only
for metrics and for libraries whose code no test path runs, each named there).

The source is a DLedger-mode store written by 5.3.3's DefaultMessageStore with DLedger 0.3.1.2
(tests/java/test_mq_migrate_java5.specs: batches, a V2 topic, IPv6 hosts, an empty, a 64 KiB and a
compressed body, a delayed message), with the configs a broker keeps (topics.json,
subscriptionGroup.json, consumerOffset.json). After the move, the controller elects the broker
master (RocketMQ's own log line), and every message is served: pulled by queue offset through
RocketMQ's client (the PULL_MESSAGE request a consumer sends), with the same body, keys, tags and
properties that ``mq messages`` reads from the moved files, and no queue holds more or fewer."""

from __future__ import annotations

import base64
import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from store.metafiles import read_checkpoint
from tests.java import test_mq_migrate_java5
from tests.support import javarocketmq, javarocketmq5broker, javarocketmq5store
from tests.support.javarocketmq5procs import ControllerAndBroker
from tests.support.javabuild import Unavailable

runner = CliRunner()
CL_FILE = 1 << 20
CQ_FILE_SIZE = 20 * 1000
BROKER = {"mappedFileSizeCommitLog": CL_FILE, "mappedFileSizeConsumeQueue": CQ_FILE_SIZE, "maxHashSlotNum": 1000,
          "maxIndexNum": 4000, "messageIndexEnable": "true"}


@pytest.fixture(scope="module")
def java():
    try:
        return javarocketmq5store.build(), javarocketmq5broker.build()
    except Unavailable as exc:
        pytest.skip(str(exc))


def mq(*args):
    return runner.invoke(app, ["mq", *map(str, args)])


def _topics_json(specs) -> dict:
    """What a broker's TopicConfigManager writes for the specs' topics (4 queues each)."""
    names = sorted({s["topic"] for s in specs})
    return {"topicConfigTable": {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                                     "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False,
                                     "attributes": {}} for t in names},
            "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 0}}


@pytest.fixture(scope="module")
def moved(java, tmp_path_factory):
    """(the moved store root, the messages mq messages reads there)."""
    writer, _broker = java
    specs = test_mq_migrate_java5.specs()
    base = tmp_path_factory.mktemp("broker-controller-mode")
    src = base / "dledger-mode"
    reported = javarocketmq.write_store(writer, str(src), specs, data_file_size=96 << 10,
                                        consume_queue_file_size=CQ_FILE_SIZE)
    assert [r["status"] for r in reported] == ["PUT_OK"] * len(reported)
    os.makedirs(src / "config", exist_ok=True)
    (src / "config" / "topics.json").write_text(json.dumps(_topics_json(specs)))
    (src / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": {"Orders0@g": {"0": 3}}}))
    (src / "config" / "subscriptionGroup.json").write_text(json.dumps({"subscriptionGroupTable": {
        "g": {"groupName": "g", "consumeEnable": True, "retryQueueNums": 1}}}))
    node = next(p for p in os.listdir(src) if p.startswith("dledger-"))
    committed = read_checkpoint(str(src / node)).committed_index
    dest = base / "controller-mode"
    r = mq("migrate", src, dest, "--cut", committed, "--controller-mode", "--commitlog-file-size", CL_FILE,
           "--max-hash-slot-num", 1000, "--max-index-num", 4000, "--format", "json")
    assert r.exit_code == 0, r.output
    r = mq("messages", dest, "-f", "json", "--body", "base64")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert len(rows) == len(specs)
    return dest, rows


def _key(m: dict) -> tuple:
    return (m["topic"], m["queue_id"], m["queue_offset"])


def _served(m: dict) -> tuple:
    return (m["keys"] or None, m["tags"] or None, base64.b64decode(m["body"] or ""),
            json.dumps(m["properties"], sort_keys=True))


def test_the_real_broker_in_controller_mode_serves_every_moved_message(java, moved, tmp_path):
    _writer, broker = java
    root, expected = moved
    queues = sorted({(m["topic"], m["queue_id"]) for m in expected})
    with ControllerAndBroker(broker, str(tmp_path), str(root), BROKER) as run:
        broker_id, epoch = run.start()
        assert epoch == 1  # (a fresh controller's first master epoch for a new broker set)
        pulled, ends = run.pull(queues)
        log = run.broker.log_text() + run.controller.log_text()
    # nothing a stand-in stands for ran (each throws naming itself)
    assert javarocketmq5broker.standin_failures(log) == []
    by_key = {_key(m): m for m in pulled}
    assert len(by_key) == len(pulled)
    missing = [k for k in map(_key, expected) if k not in by_key]
    assert missing == []
    for m in expected:
        assert _served(by_key[_key(m)]) == _served(m), _key(m)
    extra = sorted(set(by_key) - {_key(m) for m in expected})
    assert extra == []
    for topic, q in queues:
        end = ends[f"{topic}/{q}"]
        top = max(m["queue_offset"] for m in expected if (m["topic"], m["queue_id"]) == (topic, q)) + 1
        assert (end["status"], end["next"], end["max"]) == ("NO_NEW_MSG", top, top), end
    # the controller's record: the broker registered under the id it was given, master at epoch 1
    with open(os.path.join(root, "brokerIdentity")) as fh:
        assert fh.read().strip() == f"DefaultCluster#broker-a#{broker_id}"
    with open(os.path.join(root, "epochFileCheckpoint")) as fh:
        lines = fh.read().split()
    assert lines[2:][-1].startswith(f"{epoch}-")


def test_the_moved_configs_are_checked_against_the_new_queues(moved, tmp_path):
    """mq check and mq consumers on the moved store RocketMQ wrote: clean; then each config made
    to disagree with the queues on purpose is named, and only that."""
    src, _expected = moved
    root = tmp_path / "store"
    shutil.copytree(src, root)
    for cmd in ("check", "consumers"):
        r = mq(cmd, root)
        assert r.exit_code == 0 and "Finding" not in r.stderr, r.output
    config = root / "config"
    topics = json.loads((config / "topics.json").read_text())
    topics["topicConfigTable"]["Orders0"]["readQueueNums"] = 2  # (its queue 2 holds messages)
    del topics["topicConfigTable"]["Edge"]
    (config / "topics.json").write_text(json.dumps(topics))
    (config / "subscriptionGroup.json").write_text(json.dumps({"subscriptionGroupTable": {"g": {
        "groupName": "g", "subscriptionDataSet": [{"topic": "Orders1", "expressionType": "TAG", "expression": "*"},
                                                  {"topic": "Nowhere", "expressionType": "TAG", "expression": "*"}]}}}))
    (config / "consumerOffset.json").write_text(json.dumps({"offsetTable": {
        "Orders0@g": {"0": 3, "2": 999}, "Gone@g": {"0": 0}}}))
    r = mq("check", root, "-f", "json")
    assert r.exit_code == 1, r.output
    got = sorted((f["finding"], f["file"], f["topic"], f["queue_id"]) for f in json.loads(r.stdout))
    assert got == [("group-topic-missing", "config/consumerOffset.json", "Gone", None),
                   ("group-topic-missing", "config/subscriptionGroup.json", "Nowhere", None),
                   ("offset-past-end", "config/consumerOffset.json", "Orders0", 2),
                   ("topic-missing", "config/topics.json", "Edge", 0),
                   ("topic-missing", "config/topics.json", "Edge", 1),
                   ("topic-queues", "config/topics.json", "Orders0", 2)]
    r = mq("consumers", root)
    assert r.exit_code == 1
    findings = sorted(line.split(":")[1].strip() for line in r.stderr.splitlines() if line.startswith("Finding:"))
    assert findings == ["group-topic-missing", "topic-missing", "topic-missing", "topic-queues"]
    assert "1 offset past the end of its queue" in r.stderr
