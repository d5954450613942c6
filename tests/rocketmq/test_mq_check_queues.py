"""``mq check`` on consume queues whose files are missing, short, or do not follow each
other (issue 44, items 2 and 3; issue 45, item 9's queue files).

A broker restarts dispatch from the highest commit-log offset any queue reached
(``DefaultMessageStore.start``: ``maxPhysicalPosInLogicQueue``): a message below it that no
unit of its queue points at is never dispatched, so consumers never get it. Those are
findings (``cq-missing``) naming the queue and the offsets it lacks; messages past that
point are only "not in a queue yet" (the broker dispatches them at its next start).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from store.rocketmq.message import tags_code
from tests.support.commands import invoke
from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store, write_queue

Z = "0" * 20
TAG = tags_code("t")


def check(root):
    r = invoke("mq", "check", root, "--format", "jsonl")
    assert r.exit_code in (0, 1), r.output
    return r, [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def name(byte: int) -> str:
    return f"{byte:020d}"


def spec(i: int) -> dict:
    """Message i: topic A for i % 4 in (0, 1), else B; queue i % 2. Each queue gets 6."""
    return dict(topic="A" if i % 4 < 2 else "B", queue_id=i % 2, body=b"m%d" % i, properties={"TAGS": "t"})


def make(tmp_path):
    root = tmp_path / "store"
    specs = [spec(i) for i in range(24)]
    written = write_broker_store(str(root), specs, cq_units_per_file=2)  # files of 2 units: 0, 40, 80
    return root, specs, written


def test_a_sound_store_has_no_missing_queue_files(tmp_path):
    root, _s, _w = make(tmp_path)
    r, found = check(root)
    assert r.exit_code == 0 and found == [], r.output


def test_a_missing_head_file_is_a_finding_with_the_offsets_it_lacks(tmp_path):
    root, specs, written = make(tmp_path)
    os.remove(root / "consumequeue" / "A" / "0" / Z)
    r, found = check(root)
    assert r.exit_code == 1, r.output
    assert [(f["finding"], f["file"], f["offset"], f["topic"], f["queue_id"], f["queue_offset"]) for f in found] == \
        [("cq-missing", f"consumequeue/A/0/{Z}", 0, "A", 0, 0)]
    assert "queue offsets 0-1" in found[0]["detail"] and "2 messages" in found[0]["detail"], found[0]["detail"]
    assert found[0]["index"] == written[0]["index"]


def test_a_missing_tail_file_is_a_finding(tmp_path):
    root, specs, written = make(tmp_path)
    os.remove(root / "consumequeue" / "A" / "1" / name(80))
    r, found = check(root)
    assert r.exit_code == 1, r.output
    assert [(f["finding"], f["file"], f["offset"], f["queue_offset"]) for f in found] == \
        [("cq-missing", f"consumequeue/A/1/{name(80)}", 0, 4)]
    assert "queue offsets 4-5" in found[0]["detail"], found[0]["detail"]


def test_a_whole_topic_without_queues_is_a_finding_up_to_where_dispatch_restarts(tmp_path):
    root, specs, written = make(tmp_path)
    shutil.rmtree(root / "consumequeue" / "B")
    r, found = check(root)
    assert r.exit_code == 1, r.output
    # the broker restarts dispatch after A's last message (21): B's messages 22 and 23 are past
    # it (dispatched at the next start), the others never are
    assert [(f["finding"], f["topic"], f["queue_id"], f["queue_offset"], f["file"]) for f in found] == \
        [("cq-missing", "B", 0, 0, f"consumequeue/B/0/{Z}"), ("cq-missing", "B", 1, 0, f"consumequeue/B/1/{Z}")]
    assert all("queue offsets 0-4" in f["detail"] for f in found), found
    assert "2 messages not in a queue yet" in r.stderr, r.stderr


def test_messages_past_every_queue_are_not_dispatched_yet_not_findings(tmp_path):
    root, specs, written = make(tmp_path)
    shutil.rmtree(root / "consumequeue")
    units: dict = {}
    for s, w in list(zip(specs, written))[:12]:
        units.setdefault((s["topic"], s["queue_id"]), []).append(cq_unit(w["phy_offset"], w["size"], TAG))
    for (t, q), us in units.items():
        write_queue(str(root), t, q, us, 2)
    r, found = check(root)
    assert r.exit_code == 0 and found == [], r.output
    assert "12 messages not in a queue yet" in r.stderr, r.stderr


def _point_elsewhere(path, slot: int, written) -> None:
    """Unit ``slot`` of the file at ``path`` now points into the middle of a message."""
    with open(path, "r+b") as fh:
        fh.seek(slot * 20)
        fh.write(cq_unit(written[0]["phy_offset"] + 5, 10, 0))


def test_a_missing_middle_file_is_named_and_the_files_after_it_are_checked(tmp_path):
    root, specs, written = make(tmp_path)
    qdir = root / "consumequeue" / "A" / "0"
    os.remove(qdir / name(40))
    _point_elsewhere(qdir / name(80), 1, written)  # queue offset 5, after the gap
    r, found = check(root)
    assert r.exit_code == 1, r.output
    got = {(f["finding"], f["file"], f["queue_offset"]): f for f in found}
    assert set(got) == {("cq-damaged", f"consumequeue/A/0/{name(40)}", None),
                        ("cq-missing", f"consumequeue/A/0/{name(40)}", 2),
                        ("cq-elsewhere", f"consumequeue/A/0/{name(80)}", 5),
                        ("cq-hole", f"consumequeue/A/0/{name(80)}", 5)}, found
    damaged = got[("cq-damaged", f"consumequeue/A/0/{name(40)}", None)]
    assert "is missing" in damaged["detail"] and "queue offsets 2-3" in damaged["detail"], damaged["detail"]
    assert "gap of" not in damaged["detail"]


def test_a_short_file_is_named_with_its_size_and_the_files_after_it_are_checked(tmp_path):
    root, specs, written = make(tmp_path)
    qdir = root / "consumequeue" / "A" / "0"
    os.truncate(qdir / name(40), 30)  # one unit and a half of two
    _point_elsewhere(qdir / name(80), 0, written)  # queue offset 4
    r, found = check(root)
    assert r.exit_code == 1, r.output
    got = {(f["finding"], f["file"], f["queue_offset"]): f for f in found}
    assert set(got) == {("cq-damaged", f"consumequeue/A/0/{name(40)}", None),
                        ("cq-missing", f"consumequeue/A/0/{name(40)}", 3),
                        ("cq-elsewhere", f"consumequeue/A/0/{name(80)}", 4),
                        ("cq-hole", f"consumequeue/A/0/{name(80)}", 4)}, found
    damaged = got[("cq-damaged", f"consumequeue/A/0/{name(40)}", None)]
    assert "30 bytes" in damaged["detail"] and "not 40" in damaged["detail"], damaged["detail"]
    assert "queue offset 3" in damaged["detail"] and "gap of" not in damaged["detail"], damaged["detail"]


# -- files that overlap (issue 45, item 9) --------------------------------------------------

def _overlapping_store(tmp_path):
    """A store of 64 KiB data files whose first file is one of 128 KiB (the same messages
    written with that file size): it runs on past where the second file begins."""
    big, small = tmp_path / "big", tmp_path / "store"
    specs = [dict(topic=f"T{i % 3}", queue_id=i % 2, body=b"x" * (200 + i % 50)) for i in range(700)]
    write_broker_store(str(big), specs, data_file_size=128 << 10, cq_units_per_file=100)
    write_broker_store(str(small), specs, data_file_size=64 << 10, cq_units_per_file=100)
    shutil.copy(big / "dledger-n0" / "data" / Z, small / "dledger-n0" / "data" / Z)
    return small


def _both_paths(root, monkeypatch):
    from store.rocketmq import check
    from store.rocketmq.layout import resolve_broker
    b = resolve_broker(str(root))
    got = check.check_broker(b)
    with monkeypatch.context() as mp:
        mp.setattr(check, "_columns", None)
        assert check.check_broker(b) == got
    return got


def test_overlapping_data_files_the_c_and_numpy_matchers_agree_and_name_the_file(tmp_path, monkeypatch):
    root = _overlapping_store(tmp_path)
    findings, summary = _both_paths(root, monkeypatch)
    # the messages the first file holds past 65536 are left out, once, named there: no
    # spurious cq-hole or queue-offset findings for them
    assert [(f["finding"], f["file"]) for f in findings if f["finding"] != "damage"] == [("overlap", f"data/{Z}")]
    over = next(f for f in findings if f["finding"] == "overlap")
    assert f"data/{name(65536)} begins" in over["detail"] and 0 < over["offset"] < 65536
    assert summary["messages"] == 700


def test_unsorted_offsets_reach_both_matchers_sorted(tmp_path, monkeypatch):
    """(With the overlap not left out, the messages' offsets go back at the second file:
    the matchers look units up in a sorted copy, so both find the same.)"""
    from store.rocketmq import check
    root = _overlapping_store(tmp_path)
    monkeypatch.setattr(check, "_overlapped", lambda c, findings: None, raising=False)
    if check._columns is None:
        pytest.skip("store.rocketmq._columns is not built")
    findings, _summary = _both_paths(root, monkeypatch)
    assert not [f for f in findings if f["finding"] in ("cq-elsewhere", "cq-mismatch")], findings


def test_overlapping_queue_files_name_the_one_that_runs_over(tmp_path):
    root, specs, written = make(tmp_path)
    qdir = root / "consumequeue" / "A" / "0"
    with open(qdir / Z, "ab") as fh:  # 3 units where the queue's files hold 2: it overlaps file 40's first
        fh.write(open(qdir / name(40), "rb").read()[:20])
    r, found = check(root)
    assert r.exit_code == 1, r.output
    assert [(f["finding"], f["file"], f["offset"]) for f in found] == [("cq-damaged", f"consumequeue/A/0/{Z}", 40)]
    assert "holds 60 bytes, not 40" in found[0]["detail"] and f"overlaps {name(40)}" in found[0]["detail"]
    assert "gap of" not in found[0]["detail"]
