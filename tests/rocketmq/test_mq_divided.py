"""A DLedger-mode store whose DLedger log follows an old master-slave commit log (a broker that
entered DLedger mode with messages; store/rocketmq/divided.py): the offsets arithmetic, and
every ``mq`` command reading both logs, written by hand (tests/support/rmq_divided.py); also
damaged and odd ones (no blank after the old log, an empty old log, old files deleted by
retention, damage in the old log). tests/java/test_mq_divided_java.py has RocketMQ write one."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from store.reading import Selection
from store.rocketmq import divided
from store.rocketmq.commitlog import COMMIT_LOG_DIR
from store.rocketmq.layout import resolve_broker
from store.rocketmq.migrate import migrate
from store.rocketmq.scan import batches
from tests.rocketmq.test_mq_commitment import unpoint
from tests.support.rmq_divided import write_divided_store

runner = CliRunner()
FILE = 4 << 10  # a few messages a file: several files in each log


def msgs(word: str, n: int, topic: str = "T") -> list[dict]:
    return [{"topic": topic, "queue_id": i % 2, "body": f"{word} {i} ".encode() * (20 + i % 50), "properties": {"KEYS": f"{word}-{i}", "TAGS": word}} for i in range(n)]


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    info = write_divided_store(str(root), msgs("old", 40), msgs("new", 30), file_size=FILE)
    return root, info


def run(*args) -> list[dict]:
    r = runner.invoke(app, [*map(str, args), "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_divided_offset_is_the_old_logs_end_rounded_up_to_a_file(store):
    root, info = store
    node = root / "dledger-n0"
    last_old = info["old"][-1]["phy_offset"]
    assert info["divided"] == (last_old // FILE + 1) * FILE
    assert divided.divided_offset(str(node)) == info["divided"]
    assert divided.old_log_dir(str(node)) == str(root / COMMIT_LOG_DIR)
    assert info["new"][0]["phy_offset"] == info["divided"] + 48  # the first entry's pos + 48
    assert divided.in_old_log(last_old, info["divided"]) and not divided.in_old_log(info["divided"], info["divided"])
    assert divided.in_old_log(10**12, None)  # (a DLedger log of no file yet: every offset is the old log's)


def test_messages_lists_the_old_logs_messages_then_the_dledger_logs_at_their_offsets(store):
    root, info = store
    rows = run("mq", "messages", root)
    want = info["old"] + info["new"]
    assert [(r["phy_offset"], r["queue_offset"]) for r in rows] == [(w["phy_offset"], w["queue_offset"]) for w in want]
    assert [r["index"] for r in rows] == [None] * 40 + list(range(30))  # (old messages are no DLedger entries)
    assert all(r["msg_id"].endswith(f"{r['phy_offset']:016X}") for r in rows)


@pytest.mark.parametrize("which", ["old", "new"])
def test_an_offset_msg_id_is_read_from_the_log_rocketmq_reads_it_from(store, which):
    root, info = store
    w = info[which][7]
    rows = run("mq", "messages", root)
    msg_id = next(r["msg_id"] for r in rows if r["phy_offset"] == w["phy_offset"])
    got = run("mq", "messages", root, "--msg-id", msg_id)
    assert [(r["phy_offset"], r["matched"]) for r in got] == [(w["phy_offset"], "msg_id")]
    got = run("mq", "messages", root, "--topic", "T", "--queue-id", w["queue_id"], "--queue-offset", w["queue_offset"])
    assert [r["phy_offset"] for r in got] == [w["phy_offset"]]


def test_a_pos_selection_reads_one_log_only(store):
    root, info = store
    node = str(root / "dledger-n0")
    for w in (info["old"][3], info["new"][3]):
        got = [int(p) for b in batches(node, Selection(pos=w["phy_offset"] - 48)) for p in b.pos]
        assert got == [w["phy_offset"] - 48]
    assert [b for b in batches(node, Selection(pos=info["divided"] - 1000)) if len(b)] == []


def test_index_selections_name_dledger_entries_only(store):
    root, _ = store
    assert [r["index"] for r in run("mq", "messages", root, "--from-index", 28)] == [28, 29]
    assert len(run("mq", "messages", root, "--to-index", 1)) == 40 + 2  # (the old log comes before entry 0)


def test_check_topics_and_consumers_count_both_logs(store):
    root, info = store
    r = runner.invoke(app, ["mq", "check", str(root)])
    assert r.exit_code == 0 and "70 messages" in r.stderr and "0 findings" in r.stderr, r.output
    topics = run("mq", "topics", root)
    assert sum(t["messages"] for t in topics) == 70 and sum(t["cq_units"] for t in topics) == 70
    os.makedirs(root / "config")
    (root / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": {"T@g": {"0": 3, "1": 50}}}))
    r = runner.invoke(app, ["mq", "consumers", str(root), "--format", "json"])
    assert r.exit_code == 1, r.output  # (an offset past its queue's end)
    rows = {r["queue_id"]: r for r in json.loads(r.stdout)}
    assert (rows[0]["min"], rows[0]["max"], rows[0]["status"]) == (0, 35, "ok")
    assert (rows[1]["max"], rows[1]["status"]) == (35, "past the end")


def test_check_names_the_old_logs_file_for_a_changed_body_byte(store):
    root, info = store
    w = info["old"][5]
    start = w["phy_offset"] // FILE * FILE
    path = root / COMMIT_LOG_DIR / f"{start:020d}"
    data = bytearray(path.read_bytes())
    body = data.index(b"old 5 ", w["phy_offset"] - start)
    data[body] ^= 0xFF
    path.write_bytes(bytes(data))
    r = runner.invoke(app, ["mq", "check", str(root), "--format", "json"])
    assert r.exit_code != 0
    found = json.loads(r.stdout)
    assert [(f["finding"], f["file"], f["offset"], f["index"]) for f in found] == \
        [("body-crc", f"commitlog/{start:020d}", w["phy_offset"] - start, None)]


def test_rebuild_makes_rocketmqs_queues_of_both_logs_again(store):
    root, info = store
    cq = root / "consumequeue" / "T" / "0" / f"{0:020d}"
    before = cq.read_bytes()
    s = run("mq", "rebuild", root, "--queue-file-size", 1000 * 20)[0]
    assert s["units"] == 70 and s["messages"] == 70 and s["blanks"] == 0
    assert cq.read_bytes() == before
    r = runner.invoke(app, ["mq", "check", str(root)])
    assert r.exit_code == 0 and "0 findings" in r.stderr, r.output


def test_migrate_moves_both_logs_in_order(store, tmp_path):
    root, info = store
    dest = tmp_path / "ms"
    s = migrate(resolve_broker(str(root)), str(dest), commitlog_file_size=FILE)
    assert s.messages == 70 and s.units == 70 and s.left_out == 0
    rows = run("mq", "messages", dest)
    assert [(r["topic"], r["queue_id"], r["queue_offset"]) for r in rows] == \
        [(w["topic"], w["queue_id"], w["queue_offset"]) for w in info["old"] + info["new"]]
    r = runner.invoke(app, ["mq", "check", str(dest)])
    assert r.exit_code == 0 and "0 findings" in r.stderr, r.output


def test_uncommitted_entries_are_left_out_but_old_messages_never_are(tmp_path):
    root = tmp_path / "store"
    info = write_divided_store(str(root), msgs("old", 10), msgs("new", 10), file_size=FILE, committed=4)
    unpoint(root, info["new"][5]["phy_offset"])  # (only committed entries are dispatched)
    s = migrate(resolve_broker(str(root)), str(tmp_path / "ms"), commitlog_file_size=FILE)
    assert (s.messages, s.left_out) == (15, 5)


def test_an_old_log_without_the_blank_reads_the_same(tmp_path):
    root = tmp_path / "store"
    info = write_divided_store(str(root), msgs("old", 40), msgs("new", 5), file_size=FILE, blank=False)
    rows = run("mq", "messages", root)
    assert [r["phy_offset"] for r in rows] == [w["phy_offset"] for w in info["old"] + info["new"]]


def test_an_empty_old_log_is_no_old_log(tmp_path):
    root = tmp_path / "store"
    info = write_divided_store(str(root), [], msgs("new", 5), file_size=FILE)
    assert info["divided"] == 0 and os.listdir(root / COMMIT_LOG_DIR) == []
    assert divided.old_log_dir(str(root / "dledger-n0")) is None
    assert [r["index"] for r in run("mq", "messages", root)] == list(range(5))


def test_an_old_file_of_zeros_puts_the_dledger_log_a_file_in(tmp_path):
    """A broker whose old log holds a file but no message (the switch blanks it and starts
    the DLedger log at its end): nothing of the old log, the DLedger log from 1 file on."""
    root = tmp_path / "store"
    info = write_divided_store(str(root), [], msgs("new", 5), file_size=FILE, zero_file=True)
    assert info["divided"] == FILE
    rows = run("mq", "messages", root)
    assert [(r["index"], r["phy_offset"]) for r in rows] == [(i, w["phy_offset"]) for i, w in enumerate(info["new"])]
    r = runner.invoke(app, ["mq", "check", str(root)])
    assert r.exit_code == 0 and "0 findings" in r.stderr, r.output
    s = migrate(resolve_broker(str(root)), str(tmp_path / "ms"), commitlog_file_size=FILE)
    assert s.messages == 5


def test_old_files_deleted_by_retention(store):
    root, info = store
    files = sorted(os.listdir(root / COMMIT_LOG_DIR))
    for n in files[:2]:  # the oldest two, as the broker's retention deletes them
        os.unlink(root / COMMIT_LOG_DIR / n)
    first = int(files[2])
    kept = [w for w in info["old"] if w["phy_offset"] >= first] + info["new"]
    assert [r["phy_offset"] for r in run("mq", "messages", root)] == [w["phy_offset"] for w in kept]
    r = runner.invoke(app, ["mq", "check", str(root)])
    assert r.exit_code == 0 and "0 findings" in r.stderr, r.output
    os.makedirs(root / "config")
    (root / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": {"T@g": {"0": 0}}}))
    row = run("mq", "consumers", root)[0]
    assert row["min"] == sum(1 for w in info["old"] if w["queue_id"] == 0 and w["phy_offset"] < first)
    assert row["status"] == "before min"
    for n in files[2:]:  # all of them: an ordinary DLedger log that starts past 0
        os.unlink(root / COMMIT_LOG_DIR / n)
    assert [r["phy_offset"] for r in run("mq", "messages", root)] == [w["phy_offset"] for w in info["new"]]
    r = runner.invoke(app, ["mq", "check", str(root)])
    assert r.exit_code == 0 and "0 findings" in r.stderr, r.output


def test_damage_in_the_old_log_ends_it_but_not_the_dledger_log(store):
    root, info = store
    files = sorted(os.listdir(root / COMMIT_LOG_DIR))
    path = root / COMMIT_LOG_DIR / files[1]
    data = bytearray(path.read_bytes())
    data[4:8] = b"\x00\x00\x00\x07"  # the file's first message's MAGICCODE
    path.write_bytes(bytes(data))
    r = runner.invoke(app, ["mq", "check", str(root), "--format", "json"])
    found = json.loads(r.stdout)
    assert found[0]["finding"] == "damage" and found[0]["file"] == f"commitlog/{files[1]}" and found[0]["offset"] == 0
    rows = run("mq", "messages", root)
    assert [r["phy_offset"] for r in rows if r["kind"] == "message"][-30:] == [w["phy_offset"] for w in info["new"]]
    with pytest.raises(Exception) as err:
        migrate(resolve_broker(str(root)), str(root.parent / "ms"), commitlog_file_size=FILE)
    # the old log's file under the store root, the byte in it, and the check that reads a commit log
    assert str(err.value).startswith(f"{root / COMMIT_LOG_DIR / files[1]}: damaged at offset 0 "), str(err.value)
    assert "mq check" in str(err.value)
    assert not os.path.exists(root.parent / "ms")
