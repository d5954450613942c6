"""The Spark mq jobs (dledgerctl/pipeline/messages.py) on a real local Spark session, over
broker stores of two replicas: the source's RocketMQ columns against store/rocketmq's own
reading (``mq messages``), mq-topics against ``mq topics`` per node, mq-find across the
replicas, mq-export to Parquet, and the command line."""

from __future__ import annotations

import json
import os
import zlib

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from dledgerctl.pipeline import jobs, messages
from tests.support.rmq_store import write_broker_store
from store.filestore import FileStore
from store.format import MAGIC_NOOP
from store.rocketmq.check import topic_rows
from store.rocketmq.layout import resolve_broker
from store.rocketmq.scan import message_rows

runner = CliRunner()


def spec(i: int, **kw) -> dict:
    out = dict(topic=f"T{i % 3}", queue_id=i % 2, body=b"message %d" % i, store_timestamp=1_700_000_000_000 + i,
               properties={"TAGS": f"tag{i % 2}", "KEYS": f"order-{i} user-{i % 4}", "UNIQ_KEY": f"U{i:05d}"})
    out.update(kw)
    return out


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Two replicas of a broker group, n1 lacking n0's last 5 messages and ending in a no-op."""
    base = tmp_path_factory.mktemp("fleet")
    specs = [spec(i) for i in range(60)]
    specs[7] = spec(7, body=zlib.compress(b"compressed " * 50), sys_flag=0x1)
    specs[9] = spec(9, topic="主题", store_host="[::1]:10911")
    for node, n in (("n0", 60), ("n1", 55)):
        root = base / node
        write_broker_store(str(root), specs[:n], self_id=node)
    s = FileStore.open(str(base / "n1" / "dledger-n1"))
    s.append_leader([b""], 2, MAGIC_NOOP)
    s.close()
    return base, specs


def test_the_sources_rocketmq_columns_are_what_mq_messages_reads(spark, fleet):
    base, specs = fleet
    nodes = jobs.resolve_nodes([str(base / "n0")])
    got = (jobs.read_entries(spark, nodes, rocketmq=True, body=True).orderBy("index")
           .select("index", *[n for n, _, _ in messages.MQ_COLUMNS], "msg_body").collect())
    want = list(message_rows(str(base / "n0" / "dledger-n0"), body=lambda b: b))
    assert len(got) == len(want) == 60
    for g, w in zip(got, want):
        for name in ("msg_id", "topic", "queue_id", "queue_offset", "phy_offset", "store_timestamp", "born_host",
                     "store_host", "tags", "keys", "uniq_key", "body_crc_ok"):
            assert g[name] == w[name], name
        assert dict(g["properties"]) == w["properties"] and g["msg_body"] == w["body"]
    assert got[7]["msg_body"] == b"compressed " * 50 and got[7]["msg_body_size"] < 500
    noop = jobs.read_entries(spark, jobs.resolve_nodes([str(base / "n1")]), rocketmq=True).filter("magic = 2").collect()
    assert len(noop) == 1 and noop[0]["topic"] is None and noop[0]["msg_note"] == "no-op entry"


def test_mq_topics_per_node_is_mq_topics(spark, fleet):
    base, _specs = fleet
    rows = [r.asDict() for r in messages.mq_topics(spark, [str(base / "n0"), str(base / "n1")]).collect()]
    for node in ("n0", "n1"):
        mine = [{k: r[k] for k in r if k not in ("node", "damaged")} for r in rows if r["node"].endswith(node)]
        assert all(r["damaged"] == 0 for r in rows)
        want = [{k: t[k] for k in ("topic", "queue_id", "messages", "bytes", "first_queue_offset",
                                   "last_queue_offset", "first_store_time", "last_store_time")}
                for t in topic_rows(resolve_broker(str(base / node)))]
        assert mine == want


def test_mq_find_says_which_replicas_hold_a_message(spark, fleet):
    base, specs = fleet
    paths = [str(base / "n0"), str(base / "n1")]
    both = [r.asDict() for r in messages.mq_find(spark, paths, uniq_key="U00020").collect()]
    assert [r["node"] for r in both] == ["dledger-n0", "dledger-n1"] and len({r["index"] for r in both}) == 1
    only = [r.asDict() for r in messages.mq_find(spark, paths, key="order-57").collect()]
    assert [r["node"] for r in only] == ["dledger-n0"]
    by_id = [r.asDict() for r in messages.mq_find(spark, paths, msg_id=both[0]["msg_id"].lower()).collect()]
    assert len(by_id) == 2
    user = [r["uniq_key"] for r in messages.mq_find(spark, [paths[0]], key="user-3").collect()]
    assert user == [s["properties"]["UNIQ_KEY"] for s in specs if "user-3" in s["properties"]["KEYS"].split()]


def test_mq_export_writes_messages_to_parquet(spark, fleet, tmp_path):
    base, _specs = fleet
    to = str(tmp_path / "out")
    summary = {r["node"]: r.asDict() for r in
               messages.mq_export(spark, [str(base / "n0"), str(base / "n1")], to).collect()}
    assert summary["dledger-n0"]["entries"] == 60 and summary["dledger-n1"]["entries"] == 55  # (no-ops are none)
    table = pq.read_table(summary["dledger-n0"]["path"])
    assert set(messages.MQ_EXPORT_COLUMNS) - {"node"} <= set(table.column_names)
    rows = sorted(table.to_pylist(), key=lambda r: r["index"])
    assert rows[7]["msg_body"] == b"compressed " * 50 and rows[9]["topic"] == "主题"


def test_a_message_changed_where_its_bodycrc_does_not_look_is_said(spark, fleet, tmp_path):
    """A byte of a message's KEYS changed on disk: its BODYCRC (the body only) still holds, its
    DLedger entry's own CRC does not (issue 59 item 8): mq-topics counts it damaged, mq-find and
    mq-export say entry_crc_ok false, as mq check names it."""
    import shutil
    base, _specs = fleet
    node = tmp_path / "n0"
    shutil.copytree(base / "n0", node)
    rows = list(message_rows(str(node / "dledger-n0")))
    victim = next(r for r in rows if r["uniq_key"] == "U00012")
    with FileStore.open(str(node / "dledger-n0"), read_only=True) as s:
        raw = s.get_bytes(victim["index"])
        pos = victim["pos"]
    at = raw.index(b"order-12") + 6  # (the '1' of order-12: now order-02)
    data = node / "dledger-n0" / "data" / sorted(os.listdir(node / "dledger-n0" / "data"))[0]
    with open(data, "r+b") as fh:
        fh.seek(pos + at)
        fh.write(b"0")
    topics = [r.asDict() for r in messages.mq_topics(spark, [str(node)]).collect()]
    assert sum(r["damaged"] for r in topics) == 1
    found = [r.asDict() for r in messages.mq_find(spark, [str(node)], uniq_key="U00012").collect()]
    assert [(r["body_crc_ok"], r["entry_crc_ok"]) for r in found] == [(True, False)]
    ok = [r.asDict() for r in messages.mq_find(spark, [str(node)], uniq_key="U00013").collect()]
    assert [r["entry_crc_ok"] for r in ok] == [True]


def test_the_commands(spark, fleet):
    base, _specs = fleet
    r = runner.invoke(app, ["spark", "mq-find", str(base / "n0"), str(base / "n1"), "--key", "order-3",
                            "--format", "jsonl"])
    assert r.exit_code == 0, r.output
    assert len([json.loads(line) for line in r.stdout.splitlines()]) == 2
    r = runner.invoke(app, ["spark", "mq-find", str(base / "n0"), "--key", "no-such-key"])
    assert r.exit_code == 1
    r = runner.invoke(app, ["spark", "mq-find", str(base / "n0")])
    assert r.exit_code == 1 and "--key, --msg-id or --uniq-key" in r.output
    r = runner.invoke(app, ["spark", "mq-topics", str(base / "n1"), "--format", "json"])
    assert r.exit_code == 0 and sum(t["messages"] for t in json.loads(r.stdout)) == 55
    assert os.path.isdir(base / "n0" / "dledger-n0")
