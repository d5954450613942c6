"""``mq rebuild`` proven with RocketMQ's own store (4.9.4 with DLedger 0.2.6, 4.9.8 with
0.3.1.2; tests/support/javarocketmq.py):

- a DLedger-mode store RocketMQ wrote, its consume queues and index deleted and rebuilt:
  the consume-queue files come back byte for byte as RocketMQ's dispatch wrote them (the
  delayed message's delivery time included), and queries by key through the new index find
  what RocketMQ's own index found;
- a master-slave store (``mq migrate`` of it; RocketMQ serves it, tests/java/test_mq_migrate_java.py),
  its queues and index deleted, or its commit log cut under its queues: after the rebuild
  RocketMQ's ``DefaultMessageStore`` serves every message left in the log at its queue
  offset, finds each by ``lookMessageByOffset`` and by every key through ``queryMessage``.

Skipped, saying why, when Java, a mirror or a Debian jar is missing.
"""

from __future__ import annotations

import json
import os
import shutil

from typer.testing import CliRunner

from dledgerctl.app import app
from tests.java.test_mq_migrate_java import CQ_FILE_SIZE, SMALL, assert_served, migrate, read_back, written  # noqa: F401

runner = CliRunner()


def files_under(root) -> dict:
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(d, n), "rb") as fh:
                out[os.path.relpath(os.path.join(d, n), root)] = fh.read()
    return out


def rebuild(root, *args) -> dict:
    r = runner.invoke(app, ["mq", "rebuild", str(root), "--format", "json", *map(str, args)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)[0] | {"stderr": r.stderr}


def by_key(root, key: str) -> list:
    r = runner.invoke(app, ["mq", "messages", str(root), "--key", key, "--format", "json"])
    assert r.exit_code == 0, r.output
    return sorted((m["topic"], m["phy_offset"]) for m in json.loads(r.stdout))


def test_rocketmqs_own_queues_come_back_byte_for_byte(rocketmq, written, tmp_path):
    src, reported = written
    root = tmp_path / "store"
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("lock"))
    want = files_under(root / "consumequeue")
    keys = ["order-7", "user-3", "b2", "order-140"]
    found = {k: by_key(root, k) for k in keys}
    assert all(found.values())
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    s = rebuild(root, "--queue-file-size", CQ_FILE_SIZE)
    assert files_under(root / "consumequeue") == want
    assert s["units"] == len(reported) and s["blanks"] == 0
    assert {k: by_key(root, k) for k in keys} == found
    r = runner.invoke(app, ["mq", "check", str(root)])
    assert r.exit_code == 0 and "0 findings" in r.stderr, r.output


def test_rocketmq_serves_a_master_slave_store_whose_queues_were_rebuilt(rocketmq, written, tmp_path):
    src, reported = written
    dest = tmp_path / "ms"
    migrate(src, dest, "--commitlog-file-size", SMALL)
    want = files_under(dest / "consumequeue")
    shutil.rmtree(dest / "consumequeue")
    shutil.rmtree(dest / "index")  # (with no index file left to tell its shape, the broker's is given)
    s = rebuild(dest, "--queue-file-size", CQ_FILE_SIZE, "--max-hash-slot-num", 1000, "--max-index-num", 4000)
    assert files_under(dest / "consumequeue") == want
    assert s["units"] == len(reported)
    got, _ = read_back(rocketmq, dest, SMALL)
    assert_served(got, reported)


def test_rocketmq_serves_what_is_left_of_a_log_cut_under_its_queues(rocketmq, written, tmp_path):
    src, reported = written
    dest = tmp_path / "ms"
    migrate(src, dest, "--commitlog-file-size", SMALL)
    before, _ = read_back(rocketmq, dest, SMALL)
    files = sorted(os.listdir(dest / "commitlog"))
    cut = int(files[-2])  # the last two files go: the queues point past the log's end
    for n in files[-2:]:
        os.unlink(dest / "commitlog" / n)
    kept = [w for w in reported if before[(w["topic"], w["queue_id"], w["queue_offset"])]["phy_offset"] < cut]
    assert 0 < len(kept) < len(reported)
    s = rebuild(dest)
    assert s["units"] == len(kept)
    assert "queues end earlier than their old files did" in s["stderr"]
    assert {n.split(".old-")[0] for n in s["kept_aside"].split()} == {"consumequeue", "index", "checkpoint"}
    got, _ = read_back(rocketmq, dest, SMALL)
    assert_served(got, kept)
