"""RocketMQ's own DLedger-mode store (tests/support/javarocketmq.py BrokerMember: 4.9.4 with
DLedger 0.2.6, 4.9.8 with 0.3.1.2), putting a message every millisecond:

- killed with -9 while its member's checkpoint (written every few seconds) lags the
  consume queues the broker dispatched (only committed entries are dispatched): ``mq
  migrate`` moves every acknowledged message, and RocketMQ's master-slave store serves each
  at its queue offset; ``mq rebuild`` gives every queue back whole (store/rocketmq/commitment.py);
- still running (its ``lock`` held): ``mq check`` says the store is in use and takes the
  messages its dispatch has not reached as in flight, not as ``cq-missing``.

Skipped, saying why, when Java, a mirror or a Debian jar is missing.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import time

from typer.testing import CliRunner

from dledgerctl.app import app
from store.metafiles import read_checkpoint
from store.rocketmq.commitment import commit_bound
from tests.java.test_mq_migrate_java import read_back
from tests.support import javarocketmq

runner = CliRunner()
CL = 1 << 20
INDEX_SHAPE = (1000, 4000)  # RocketMQBrokerMember's maxHashSlotNum and maxIndexNum


def _committed(node) -> int:
    try:
        c = read_checkpoint(str(node)).committed_index
    except Exception:  # (being replaced by the member as we read it)
        return -1
    return -1 if c is None else c


def killed_lagging(rocketmq, root) -> list[dict]:
    """A member killed with -9 once at least 300 acknowledged puts lie past its checkpoint's
    committed index, and its queues at least 200 (tried again, restarted on the same root,
    when its checkpoint caught up just before the kill); its acknowledged puts."""
    member = javarocketmq.BrokerMember(rocketmq, str(root), "n0", f"n0-127.0.0.1:{javarocketmq._free_port()}",
                                       put_interval_ms=1, body_bytes=100)
    node = root / "dledger-n0"
    deadline = time.monotonic() + 240
    try:
        for _attempt in range(3):
            member.start()
            while True:
                assert time.monotonic() < deadline, "no lagging checkpoint to kill the member at within 240 s"
                puts = member.puts()
                if len(puts) >= 500 and 0 <= _committed(node) <= len(puts) - 300:
                    break
                time.sleep(0.005)
            member.kill()
            b = commit_bound(str(node), str(root))
            if b.checkpoint is not None and b.proven > _phy_of(root, b.checkpoint + 200):
                return member.puts()
        raise AssertionError("the checkpoint caught up with the queues at each of 3 kills")
    finally:
        member.kill()


def _phy_of(root, index: int) -> int:
    r = runner.invoke(app, ["mq", "messages", str(root), "--from-index", str(index), "--to-index", str(index),
                                  "--format", "json"])
    rows = json.loads(r.stdout)
    return rows[0]["phy_offset"] if rows else -1


def test_a_broker_killed_mid_write_loses_no_committed_message(rocketmq, tmp_path):
    root = tmp_path / "store"
    puts = killed_lagging(rocketmq, root)
    b = commit_bound(str(root / "dledger-n0"), str(root))
    # the queues point 200 entries and more past the checkpoint's committed index: the puts up to
    # there were dispatched, so committed (the few acknowledged after the dispatch's last are
    # certain to no reader: a member's log past its committed index may be cut)
    dispatched = [p for p in puts if p["phy_offset"] <= b.proven]
    assert len(dispatched) >= b.checkpoint + 200 and len(puts) - len(dispatched) < 100

    dest = tmp_path / "ms"
    r = runner.invoke(app, ["mq", "migrate", str(root), str(dest), "--commitlog-file-size", CL, "--format", "json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert "the broker dispatches only committed entries" in s["note"], s
    assert s["messages"] >= len(dispatched) and s["committed_index"] >= b.checkpoint + 200
    got, _ = read_back(rocketmq, dest, CL, index_shape=INDEX_SHAPE)
    for p in dispatched:
        g = got[("T", p["queue_id"], p["queue_offset"])]
        assert g["keys"] == p["key"] and p["key"] in base64.b64decode(g["body"]).decode()

    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    r = runner.invoke(app, ["mq", "rebuild", str(copy), "--format", "json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert "no longer holds" not in s["note"] and s["units"] >= len(dispatched), s
    r = runner.invoke(app, ["mq", "check", str(copy)])
    assert "cq-" not in r.stdout, r.output


def test_check_on_a_running_broker_says_it_is_in_use(rocketmq, tmp_path):
    root = tmp_path / "store"
    member = javarocketmq.BrokerMember(rocketmq, str(root), "n0", f"n0-127.0.0.1:{javarocketmq._free_port()}",
                                       put_interval_ms=1, body_bytes=100)
    member.start()
    try:
        member.wait_for(lambda e: e["event"] == "put" and e["status"] == "PUT_OK" and e["queue_offset"] >= 300, 120,
                        "300 acknowledged puts to a queue")
        for _ in range(5):  # (each a snapshot of a store being written)
            r = runner.invoke(app, ["mq", "check", str(root), "--format", "json"])
            assert "in use" in r.stderr, r.output
            found = json.loads(r.stdout)
            assert [f for f in found if f["finding"] in ("cq-missing", "cq-hole", "cq-past-log-end",
                                                         "cq-elsewhere")] == [], found[:5]
        member.quit()
    finally:
        member.kill()
    r = runner.invoke(app, ["mq", "check", str(root)])
    assert r.exit_code == 0 and "in use" not in r.stderr, r.output
