"""``mq messages --key/--uniq-key/--msg-id`` with ``--topic`` look keys up in the broker's
``index/`` files (issue 44, also expected), as ``mqadmin queryMsgByKey`` does, instead of
scanning the log: on stores RocketMQ's own message store wrote in DLedger mode
(tests/support/javarocketmq.py; its writer keeps 1,000 hash slots and 4,000 entries a file, so the
index spans several files). The answers must equal a full scan's (``--scan``), messages
the index does not reach yet are still found, and a look-up reads only the entries it
names. Skipped, saying why, when Java, a mirror or a Debian jar is missing."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest
from typer.testing import CliRunner

from tests.support import javarocketmq
import store.rocketmq.scan as scan
from dledgerctl.app import app
from store.rocketmq.lookup import INDEX_HEADER_SIZE, index_key_hash, open_index

runner = CliRunner()
N = 1500


def specs() -> list[dict]:
    return [{"topic": f"Orders{i % 2}", "queue_id": i % 4, "body": f"order {i}".encode(), "tags": f"tag{i % 3}",
             "keys": f"order-{i} user-{i % 7}"} for i in range(N)]


@pytest.fixture(scope="module")
def written(rocketmq, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"rmq-index-{rocketmq.version}") / "store"
    reported = javarocketmq.write_store(rocketmq, str(root), specs(), data_file_size=1 << 20)
    assert [r["status"] for r in reported] == ["PUT_OK"] * N
    return root, reported


def rows(root, *args) -> list[dict]:
    r = runner.invoke(app, ["mq", "messages", str(root), "--format", "jsonl", *map(str, args)])
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.exit_code == (0 if got else 1), r.output  # (a search that finds nothing: exit 1, as grep)
    return got


def test_rocketmq_wrote_several_index_files(written):
    root, _reported = written
    files = open_index(str(root))
    assert files is not None and len(files) >= 2, os.listdir(root / "index")
    assert all(f.slots == 1000 for f in files)  # (the writer's maxHashSlotNum, told by the size)


@pytest.mark.parametrize("args", [
    ["--topic", "Orders1", "--key", "order-7"],
    ["--topic", "Orders0", "--key", "user-3"],  # (a key of many messages: a long chain, across files)
    ["--topic", "Orders0", "--topic", "Orders1", "--key", "user-5", "--key", "order-100"],
    ["--topic", "Orders0", "--key", "order-7"],  # (no such message of that topic)
    ["--topic", "Orders1", "--key", "user-2", "--tag", "tag1", "--from-index", "300", "--to-index", "900"],
])
def test_key_lookups_through_the_index_equal_a_scan(written, args):
    root, _reported = written
    got = rows(root, *args)
    assert got == rows(root, *args, "--scan")
    opt = lambda name: [v for k, v in zip(args, args[1:]) if k == name]
    lo, hi = int((opt("--from-index") or [0])[0]), int((opt("--to-index") or [N])[0])
    want = [s["body"].decode() for i, s in enumerate(specs()) if s["topic"] in opt("--topic") and lo <= i <= hi
            and set(s["keys"].split()) & set(opt("--key")) and (not opt("--tag") or s["tags"] in opt("--tag"))]
    assert [r["body"] for r in rows(root, *args, "--body", "utf8")] == want


def test_uniq_keys_and_msg_ids_through_the_index(written):
    root, reported = written
    for k in (0, 777, N - 1):
        uniq = reported[k]["properties"]["UNIQ_KEY"]
        got = rows(root, "--topic", f"Orders{k % 2}", "--uniq-key", uniq)
        assert [r["uniq_key"] for r in got] == [uniq]
        got = rows(root, "--topic", f"Orders{k % 2}", "--msg-id", uniq)
        assert [(r["uniq_key"], r["matched"]) for r in got] == [(uniq, "uniq_key")]


def test_a_lookup_reads_only_the_entries_it_names(written, monkeypatch):
    root, _reported = written
    seen = []
    real = scan.entry_item

    def counting(*a, **kw):
        seen.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(scan, "entry_item", counting)
    assert len(rows(root, "--topic", "Orders1", "--key", "order-901")) == 1
    assert len(seen) < 10, len(seen)  # (the hit, and the last indexed entry to find where the index ends)
    seen.clear()
    assert len(rows(root, "--topic", "Orders1", "--key", "order-901", "--scan")) == 1
    assert len(seen) >= N


def test_messages_past_what_the_index_holds_are_scanned(written, tmp_path):
    root, reported = written
    dst = tmp_path / "store"
    shutil.copytree(root, dst, ignore=shutil.ignore_patterns("lock"))
    # the index as a broker that has not indexed the last 300 messages yet leaves it: the newest
    # file's header says it ends at message N - 301 (entries past that are ignored as unindexed)
    files = sorted(os.listdir(dst / "index"))
    newest = dst / "index" / files[-1]
    with open(newest, "r+b") as fh:
        fh.seek(24)  # IndexHeader endPhyoffsetIndex
        fh.write(struct.pack(">q", reported[N - 301]["phy_offset"]))
    for args in (["--topic", "Orders0", "--key", "user-4"], ["--topic", "Orders1", "--key", f"order-{N - 1}"],
                 ["--topic", "Orders0", "--key", f"order-{N - 300}"]):
        got = rows(dst, *args)
        assert got == rows(dst, *args, "--scan") and got


def test_index_key_hash_is_rocketmqs():
    # IndexFile.indexKeyHashMethod: Math.abs of Java's hashCode, and 0 for Integer.MIN_VALUE
    assert index_key_hash("TopicTest#order-1") == abs(_java_hash("TopicTest#order-1"))
    assert index_key_hash("polygenelubricants") == 0
    assert INDEX_HEADER_SIZE == 40


def _java_hash(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h
