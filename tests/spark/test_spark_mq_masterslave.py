"""The Spark mq jobs on master-slave broker stores (issue 52): a store ``mq migrate`` made of a
DLedger-mode store this project wrote, with commit-log files small enough that several
files and blank records appear. mq-export, mq-topics and mq-find give the rows ``mq
messages`` / ``mq topics`` give on the same store (``index``: the message's ordinal in the
log, ``pos``: its commit-log offset - 48), for the migrated store alone and in a list that
mixes it with the DLedger-mode store it came from. The commit-log reader (commitlogs.py)
without Spark: batches split anywhere, and a log whose middle file is damaged ends there,
as ``mq messages`` ends it. On a real local Spark session (conftest's ``spark``)."""

from __future__ import annotations

import json
import os
import shutil
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from dledgerctl.pipeline import messages
from dledgerctl.pipeline.commitlogs import file_path, plan_store, read_commit_log_file, store_files
from dledgerctl.pipeline.inputs import resolve_nodes
from dledgerctl.pipeline.options import FilePart, ReadOptions
from store.rocketmq.check import topic_rows
from store.rocketmq.layout import resolve_broker
from store.rocketmq.migrate import migrate
from store.rocketmq.scan import Filter, message_rows
from tests.support.rmq_store import write_broker_store

runner = CliRunner()
CL = 2048  # commit-log file size: a few messages a file


def spec(i: int, **kw) -> dict:
    out = dict(topic=f"T{i % 3}", queue_id=i % 2, body=b"message %d " % i * (1 + i % 5),
               store_timestamp=1_700_000_000_000 + i,
               properties={"TAGS": f"tag{i % 2}", "KEYS": f"order-{i} user-{i % 4}", "UNIQ_KEY": f"U{i:05d}"})
    out.update(kw)
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(DLedger-mode store root, the master-slave store mq migrate made of it, the specs)."""
    base = tmp_path_factory.mktemp("ms")
    specs = [spec(i) for i in range(50)]
    specs[7] = spec(7, body=b"compressed " * 50, compress="zlib")
    specs[9] = spec(9, topic="主题", store_host="[::1]:10911")
    specs[11] = spec(11, v2=True)
    write_broker_store(str(base / "src"), specs)
    summary = migrate(resolve_broker(str(base / "src")), str(base / "ms"), commitlog_file_size=CL)
    assert summary.files >= 5 and summary.blanks >= 4 and summary.messages == 50
    return str(base / "src"), str(base / "ms"), specs


def _mq_messages(root: str) -> list[dict]:
    broker = resolve_broker(root)
    return list(message_rows(broker.node_dir, body=lambda b: b))


def test_mq_export_gives_mq_messages_rows_for_both_kinds_of_store(spark, stores, tmp_path):
    src, ms, _specs = stores
    to = str(tmp_path / "out")
    summary = {r["node"]: r.asDict() for r in messages.mq_export(spark, [ms, src], to, committed_only=True).collect()}
    assert set(summary) == {"ms", "dledger-n0"}
    assert summary["ms"]["committed_index"] is None and summary["ms"]["entries"] == 50
    for node, root in (("ms", ms), ("dledger-n0", src)):
        got = sorted(pq.read_table(summary[node]["path"]).to_pylist(), key=lambda r: r["index"])
        want = _mq_messages(root)
        assert len(got) == len(want) == 50
        for g, w in zip(got, want):
            for name in ("index", "pos", "phy_offset", "msg_id", "topic", "queue_id", "queue_offset", "store_host",
                         "tags", "keys", "uniq_key", "body_crc_ok", "sys_flag"):
                assert g[name] == w[name], (node, w["index"], name)
            assert g["msg_body"] == w["body"] and dict(g["properties"]) == w["properties"]
        if node == "ms":
            assert {g["term"] for g in got} == {None}
            assert {g["file"] for g in got} == {f"commitlog/{os.path.basename(f)}"
                                              for f in sorted(os.listdir(os.path.join(ms, "commitlog")))}
            assert got[0]["pos"] == -48 and got[7]["msg_body"] == b"compressed " * 50
            assert got[9]["topic"] == "主题" and got[9]["store_host"] == "[::1]:10911"


def test_mq_topics_on_a_mixed_list_is_mq_topics_per_store(spark, stores):
    src, ms, _specs = stores
    rows = [r.asDict() for r in messages.mq_topics(spark, [src, ms]).collect()]
    for node, root in (("ms", ms), ("dledger-n0", src)):
        mine = [{k: r[k] for k in r if k not in ("node", "damaged")} for r in rows if r["node"] == node]
        assert all(r["damaged"] == 0 for r in rows)
        want = [{k: t[k] for k in ("topic", "queue_id", "messages", "bytes", "first_queue_offset",
                                   "last_queue_offset", "first_store_time", "last_store_time")}
                for t in topic_rows(resolve_broker(root))]
        assert mine == want and sum(t["messages"] for t in mine) == 50


def test_mq_find_by_key_msg_id_and_uniq_key_is_mq_messages(spark, stores):
    src, ms, _specs = stores
    node_dir = resolve_broker(ms).node_dir
    offset_id = next(r["msg_id"] for r in message_rows(node_dir) if r["uniq_key"] == "U00031")
    cols = ["index", "pos", "msg_id", "queue_offset", "uniq_key"]

    def want(flt):
        return [{c: r[c] for c in cols} for r in message_rows(node_dir, flt=flt)]

    def find(**kw):
        return [{c: r[c] for c in cols} for r in messages.mq_find(spark, [ms, src], **kw).collect()
                if r["node"] == "ms"]

    by_key = find(key=("user-1", "order-4"))
    assert by_key == want(Filter(keys=("user-1", "order-4"))) and len(by_key) == 14
    # (mq messages reads the message at its offset, as the broker does, so it knows no ordinal;
    # the Spark job counts every file's messages and does)
    by_id = find(msg_id=offset_id.lower())
    assert [dict(r, index=None) for r in by_id] == want(Filter(msg_id=offset_id)) != []
    assert [r["index"] for r in by_id] == [31]
    assert find(uniq_key="U00031") == want(Filter(uniq_key="U00031")) == find(msg_id="U00031")
    both = messages.mq_find(spark, [ms, src], uniq_key="U00031").collect()
    assert sorted(r["node"] for r in both) == ["dledger-n0", "ms"] and len({r["msg_id"] for r in both}) == 2


def test_the_commands_on_a_master_slave_store(spark, stores):
    src, ms, _specs = stores
    r = runner.invoke(app, ["spark", "mq-find", ms, "--key", "order-20", "--format", "json"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    assert (row["node"], row["index"], row["uniq_key"]) == ("ms", 20, "U00020")
    r = runner.invoke(app, ["spark", "mq-topics", os.path.join(os.path.dirname(ms), "*"), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert sorted({t["node"] for t in json.loads(r.stdout)}) == ["dledger-n0", "ms"]
    for job in ("audit", "stats"):
        r = runner.invoke(app, ["spark", job, ms])
        assert r.exit_code == 1 and "a master-slave broker store" in r.output and f"spark {job} reads" in r.output


# --- the commit-log reader, without Spark ----------------------------------------------------------

def _read(root: str, **options) -> list[dict]:
    (node,) = resolve_nodes([root])
    opts = ReadOptions.parse({k: str(v).lower() for k, v in options.items()})
    rows = []
    for start, first in plan_store(root):
        part = FilePart(node.name, node.dir, start, 0, 0, commit_log=True, first_index=first)
        rows += pa.Table.from_batches(list(read_commit_log_file(part, opts)), opts.arrow_schema()).to_pylist()
    return rows


def test_batches_split_anywhere_give_the_same_rows(stores):
    _src, ms, _specs = stores
    whole = _read(ms, rocketmq=True, body=True, digest=True)
    assert [r["index"] for r in whole] == list(range(50))
    assert _read(ms, rocketmq=True, body=True, digest=True, batchRows=3, batchBytes=100) == whole
    want = _mq_messages(ms)
    assert [(r["index"], r["pos"], r["msg_id"], r["msg_body"]) for r in whole] == \
        [(w["index"], w["pos"], w["msg_id"], w["body"]) for w in want]
    for r in whole:  # body: the message's bytes, TOTALSIZE of them (size - 48)
        start = int(r["file"].split("/")[1])
        with open(file_path(ms, start), "rb") as fh:
            fh.seek(r["pos"] + 48 - start)
            raw = fh.read(r["size"] - 48)
        assert r["body"] == raw and r["body_digest"] == zlib.crc32(raw) and r["term"] is None


def test_a_damaged_file_ends_the_log_as_mq_messages_ends_it(stores, tmp_path):
    _src, ms, _specs = stores
    copy = str(tmp_path / "ms")
    shutil.copytree(ms, copy)
    starts = store_files(copy)
    third = file_path(copy, starts[2])
    with open(third, "r+b") as fh:  # the second message of the third file: not a message
        first = int.from_bytes(fh.read(4), "big")
        fh.seek(first)
        fh.write(b"\0\0\0\x10\x12\x34\x56\x78")
    rows = [r for r in _mq_messages(copy) if r["kind"] == "message"]
    assert [(r["index"], r["pos"]) for r in _read(copy, rocketmq=True)] == [(r["index"], r["pos"]) for r in rows]
    assert [s for s, _ in plan_store(copy)] == starts[:3] and len(starts) > 3
    assert _mq_messages(copy)[-1]["kind"] == "damage"


def test_a_store_whose_dledger_log_follows_an_old_commit_log_is_refused(spark, tmp_path):
    """The jobs read a node's DLedger log only: such a store's old messages would be missing
    from their rows, so it is refused in one line (mq topics and mq messages read both)."""
    from tests.support.rmq_divided import write_divided_store

    root = tmp_path / "divided"
    old = [{"topic": "T", "queue_id": 0, "body": b"old-%d" % i} for i in range(5)]
    new = [{"topic": "T", "queue_id": 0, "body": b"new-%d" % i} for i in range(3)]
    write_divided_store(str(root), old, new, file_size=4096)
    for job in ("mq-topics", "mq-find"):
        r = runner.invoke(app, ["spark", job, str(root), *(["--key", "x"] if job == "mq-find" else [])])
        assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.output
        assert "follows an old commit log" in r.stderr and "mq topics" in r.stderr
