"""A broker that enters DLedger mode with data, written by RocketMQ's own store (4.9.4 with
DLedger 0.2.6, 4.9.8 with 0.3.1.2; tests/support/javarocketmq.py): messages put in
master-slave mode, the store stopped, the same root opened with ``enableDLegerCommitLog=true``
and more put. ``DLedgerCommitLog`` keeps the old ``commitlog/`` and starts the DLedger log at
the divided offset (store/rocketmq/divided.py). Then:

- ``mq messages`` lists every message put, old and new, at the offsets RocketMQ gave them,
  which RocketMQ in DLedger mode serves by ``getMessage`` and finds by ``lookMessageByOffset``;
- ``mq check`` is clean;
- ``mq rebuild`` of its queues and index gives RocketMQ's own queue files back, and RocketMQ
  in DLedger mode serves every message through them and finds every key;
- ``mq migrate`` gives a master-slave store RocketMQ serves every message of (``getMessage``
  on every queue, ``lookMessageByOffset``, ``queryMessage``).

Skipped, saying why, when Java, a mirror or a Debian jar is missing.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from tests.java.test_mq_migrate_java import CQ_FILE_SIZE, READER, assert_served, migrate, read_back, specs
from tests.java.test_mq_rebuild_java import files_under
from tests.support import javarocketmq

runner = CliRunner()
FILE = 96 << 10  # mappedFileSizeCommitLog in both modes (DLedger's data files take it too)


def parts() -> tuple[list[dict], list[dict]]:
    """What goes in before the switch and after: both with plain messages, IPv6 hosts, a
    retry topic and a 64 KiB body; the batch, the delayed message and the rest after."""
    s = specs()
    return s[:100] + s[155:157] + s[159:160], s[100:155] + s[157:159] + s[160:]


@pytest.fixture(scope="module")
def switched(rocketmq, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"rmq-divided-{rocketmq.version}") / "store"
    old, new = parts()
    before = javarocketmq.write_store(rocketmq, str(root), old, data_file_size=FILE,
                                      consume_queue_file_size=CQ_FILE_SIZE, dledger=False)
    assert not os.path.exists(root / "dledger-n0")
    done: dict = {}
    after = javarocketmq.write_store(rocketmq, str(root), new, data_file_size=FILE,
                                     consume_queue_file_size=CQ_FILE_SIZE, done=done)
    reported = before + after
    assert [r["status"] for r in reported] == ["PUT_OK"] * len(reported)
    os.makedirs(root / "config", exist_ok=True)  # (master-slave mode's schedule service writes one)
    with open(root / "config" / "consumerOffset.json", "w") as fh:
        json.dump({"offsetTable": {"Orders0@g": {"0": 3}}}, fh)
    return root, before, after, done


def dledger_read(rocketmq, root) -> tuple[dict, list[dict]]:
    """What RocketMQ's store in DLedger mode serves of ``root`` (a copy: it writes), as read_back."""
    peers = f"n0-127.0.0.1:{javarocketmq._free_port()}"
    lines = javarocketmq._run_json(rocketmq.command(READER, str(root), str(FILE), str(CQ_FILE_SIZE), "110000",
                                                    "1000", "4000", f"dledger:broker-a|n0|{peers}"), 150,
                                   f"{READER} in DLedger mode (RocketMQ {rocketmq.version})")
    assert [m for m in lines if m["kind"] in ("miss", "undecodable")] == []
    msgs = [m for m in lines if m["kind"] == "message"]
    got = {(m["topic"], m["queue_id"], m["queue_offset"]): m for m in msgs}
    assert len(got) == len(msgs)
    return got, [m for m in lines if m["kind"] != "message"]


def copy(root, to):
    shutil.copytree(root, to, ignore=shutil.ignore_patterns("lock"))
    return to


def test_rocketmq_starts_the_dledger_log_at_the_old_logs_end_rounded_up_to_a_file(switched):
    root, before, after, done = switched
    old_files = sorted(int(n) for n in os.listdir(root / "commitlog"))
    assert len(old_files) >= 2  # (messages crossed a file end in master-slave mode)
    assert done["divided"] == old_files[-1] + FILE
    assert sorted(int(n) for n in os.listdir(root / "dledger-n0" / "data"))[0] == done["divided"]
    assert max(w["phy_offset"] for w in before) < done["divided"]
    assert min(w["phy_offset"] for w in after) == done["divided"] + 48  # the first entry's pos + 48
    # queue offsets run on across the switch
    last_old = max(w["queue_offset"] for w in before if (w["topic"], w["queue_id"]) == ("Orders0", 0))
    assert min(w["queue_offset"] for w in after if (w["topic"], w["queue_id"]) == ("Orders0", 0)) == last_old + 1


def test_messages_lists_every_message_at_rocketmqs_offsets(rocketmq, switched, tmp_path):
    root, before, after, _ = switched
    r = runner.invoke(app, ["mq", "messages", str(root), "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [x["phy_offset"] for x in rows] == sorted(w["phy_offset"] for w in before + after)
    by_phy = {x["phy_offset"]: x for x in rows}
    for w in before + after:
        x = by_phy[w["phy_offset"]]
        assert (x["topic"], x["queue_id"], x["queue_offset"], x["msg_id"]) == \
            (w["topic"], w["queue_id"], w["queue_offset"], w["msg_id"])
        assert w["cq_phy_offset"] == w["phy_offset"]  # (RocketMQ's consume queue points there)
    assert [x["index"] is None for x in rows] == [True] * len(before) + [False] * len(after)
    got, other = dledger_read(rocketmq, copy(root, tmp_path / "copy"))
    assert_served(got, before + after)  # getMessage through both logs; lookMessageByOffset agrees
    assert {g["phy_offset"] for g in got.values()} == set(by_phy)  # (every message is in a queue)
    assert other[-1]["divided"] == switched[3]["divided"] and other[-1]["min_phy_offset"] == 0


def test_check_is_clean(switched):
    root, before, after, _ = switched
    r = runner.invoke(app, ["mq", "check", str(root)])
    assert r.exit_code == 0, r.output
    assert f"{len(before) + len(after)} messages" in r.stderr and "0 findings" in r.stderr


def test_rebuild_gives_rocketmqs_queues_back_and_rocketmq_serves_them(rocketmq, switched, tmp_path):
    root, before, after, _ = switched
    store = copy(root, tmp_path / "store")
    want = files_under(store / "consumequeue")
    shutil.rmtree(store / "consumequeue")
    shutil.rmtree(store / "index")
    r = runner.invoke(app, ["mq", "rebuild", str(store), "--format", "json", "--max-hash-slot-num", "1000",
                            "--max-index-num", "4000", "--queue-file-size", str(CQ_FILE_SIZE)])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert s["units"] == len(before) + len(after) and s["messages"] == len(before) + len(after)
    assert files_under(store / "consumequeue") == want
    got, _ = dledger_read(rocketmq, store)
    assert_served(got, before + after)


def test_migrate_gives_a_master_slave_store_rocketmq_serves(rocketmq, switched, tmp_path):
    root, before, after, _ = switched
    dest = tmp_path / "ms"
    s = migrate(root, dest, "--commitlog-file-size", FILE)
    assert (s["messages"], s["left_out"], s["units"]) == (len(before) + len(after), 0, len(before) + len(after))
    got, other = read_back(rocketmq, dest, FILE)
    assert_served(got, before + after)
    r = runner.invoke(app, ["mq", "check", str(dest)])
    assert r.exit_code == 0 and "0 findings" in r.stderr, r.output
