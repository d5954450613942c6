"""``mq migrate`` and a queue left with no unit of a kept message but a max offset past 0
(a retry/DLQ/schedule queue idle since DLedger deleted the log's head files, or a queue
whose units all point at uncommitted entries): its offsets are kept (consumers' offsets
stay valid) as LOW_BLANK units (1, 1, 0), never fillPreBlank ones (0, Integer.MAX_VALUE, 0),
whose offset + size RocketMQ's ConsumeQueue.recover would take as the queue's
maxPhysicOffset and DefaultMessageStore.start as where dispatch resumes (2 GiB: nothing
stored after the move would reach a consume queue). The new log starts one file in, below
which those units lie. RocketMQ's own store is in tests/java/test_mq_migrate_java.py. Also
--id-map inside SRC (refused, nothing of SRC touched) and an id map that cannot be put in
place after DEST was (the error says DEST was written)."""

from __future__ import annotations

import json
import os

import numpy as np
from typer.testing import CliRunner

from dledgerctl.app import app
from tests.rocketmq.test_mq_commitment import unpoint
from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store, write_queue
from store.metafiles import read_checkpoint, write_checkpoint
from store.rocketmq.layout import resolve_broker
from store.rocketmq import check, logwalk, stream
from store.rocketmq.consumequeue import UNIT
from store.rocketmq.migrate import MigrateError, migrate

runner = CliRunner()
CL = 8 << 10


def blank_only_store(root, n_old: int = 3) -> list[dict]:
    written = write_broker_store(str(root), [{"topic": "C", "body": b"c%d" % i} for i in range(3)],
                                 data_file_size=16 << 10, cq_units_per_file=16)
    # OLD/0's units point below the log's first message (DLedger deleted the files they were in)
    write_queue(str(root), "OLD", 0, [cq_unit(i * 10, 10, 0) for i in range(n_old)], per_file=16)
    return written


def units(qdir) -> list[tuple]:
    out = []
    for n in sorted(os.listdir(qdir)):
        with open(os.path.join(qdir, n), "rb") as fh:
            u = np.frombuffer(fh.read(), UNIT)
        out += [(int(x["offset"]), int(x["size"]), int(x["tags"])) for x in u if x["size"] > 0]
    return out


def run(src, dest, *args):
    return runner.invoke(app, ["mq", "migrate", str(src), str(dest), "--commitlog-file-size", str(CL),
                               "--format", "json", *map(str, args)])


def test_a_queue_of_no_kept_unit_keeps_its_offsets_as_low_blanks_and_the_log_starts_one_file_in(tmp_path):
    blank_only_store(tmp_path / "src")
    dest = tmp_path / "ms"
    s = migrate(resolve_broker(str(tmp_path / "src")), str(dest), commitlog_file_size=CL)
    assert units(dest / "consumequeue" / "OLD" / "0") == [(1, 1, 0)] * 3  # (max offset 3, as it was)
    assert sorted(os.listdir(dest / "commitlog")) == [f"{CL:020d}"]
    c = units(dest / "consumequeue" / "C" / "0")
    assert len(c) == 3 and c[0][0] == CL
    assert s.dispatched_until == c[-1][0] + c[-1][1]  # (not 2**31 - 1)
    r = runner.invoke(app, ["mq", "check", str(dest)])
    assert r.exit_code == 0 and "0 findings" in r.stderr, r.output


def test_a_queue_whose_units_all_point_at_uncommitted_entries(tmp_path):
    src = tmp_path / "src"
    write_broker_store(str(src), [{"topic": "C", "body": b"c%d" % i} for i in range(3)]
                       + [{"topic": "LATE", "body": b"l%d" % i} for i in range(2)], data_file_size=16 << 10,
                       cq_units_per_file=16)
    late = src / "consumequeue" / "LATE" / "0"
    got = units(late)
    for n in os.listdir(late):
        os.unlink(late / n)
    write_queue(str(src), "LATE", 0, [cq_unit(o, n, t) for o, n, t in got], per_file=16, first=5, blanks=5)
    node = src / "dledger-n0"
    cp = read_checkpoint(str(node))
    rows = [json.loads(x) for x in runner.invoke(app, ["mq", "messages", str(src), "--format", "jsonl"])
            .stdout.splitlines()]
    write_checkpoint(str(node), cp.end_index, rows[3]["index"] - 1)  # the LATE messages not committed
    unpoint(src, rows[3]["phy_offset"])  # (nor dispatched: only committed entries are)
    dest = tmp_path / "ms"
    s = migrate(resolve_broker(str(src)), str(dest), commitlog_file_size=CL)
    assert s.left_out == 2
    assert units(dest / "consumequeue" / "LATE" / "0") == [(1, 1, 0)] * 5
    assert sorted(os.listdir(dest / "commitlog")) == [f"{CL:020d}"]
    assert s.dispatched_until == sum(units(dest / "consumequeue" / "C" / "0")[-1][:2])


def test_id_map_inside_src_is_refused_and_nothing_of_src_is_touched(tmp_path):
    src = tmp_path / "src"
    blank_only_store(src)
    stale = src / ".ids.csv.migrating-999999999"  # (what a killed run's temp file beside the map looks like)
    stale.write_text("keep me")
    for where in (src / "ids.csv", src / "config" / "ids.csv"):
        os.makedirs(where.parent, exist_ok=True)
        r = run(src, tmp_path / "ms", "--id-map", where)
        assert r.exit_code == 1 and r.stderr.startswith("Error: ") and "--id-map must lie outside SRC" in r.stderr, \
            r.output
        assert "Traceback" not in r.output and not where.exists()
    assert stale.read_text() == "keep me"
    assert not (tmp_path / "ms").exists()
    link = tmp_path / "alias"
    os.symlink(src, link)
    r = run(src, tmp_path / "ms", "--id-map", link / "ids.csv")
    assert r.exit_code == 1 and "--id-map must lie outside SRC" in r.stderr, r.output


def test_an_id_map_that_cannot_be_put_in_place_says_dest_was_written(tmp_path):
    src = tmp_path / "src"
    blank_only_store(src)
    ids = tmp_path / "ids.csv"

    def progress(_n):  # the map's place taken (a directory) while the move runs
        os.makedirs(ids, exist_ok=True)

    try:
        migrate(resolve_broker(str(src)), str(tmp_path / "ms"), commitlog_file_size=CL, id_map=str(ids), progress=progress)
    except MigrateError as exc:
        text = str(exc)
    else:
        raise AssertionError("no error")
    assert "written (the move is done)" in text and "could not be renamed" in text
    assert os.listdir(tmp_path / "ms")
    left = [n for n in os.listdir(tmp_path) if n.startswith(".ids.csv.migrating-")]
    assert len(left) == 1 and left[0] in text


def test_mq_check_finds_a_queue_of_fill_pre_blank_units_only_on_both_paths(tmp_path, monkeypatch):
    """(what an earlier mq migrate wrote for such a queue) RocketMQ would resume dispatch at
    Integer.MAX_VALUE: a finding, the same from the bounded and the whole-log check."""
    root = tmp_path / "ms"
    blank_only_store(root)
    write_queue(str(root), "BL", 0, [], per_file=16, first=3, blanks=3)
    b = resolve_broker(str(root))
    monkeypatch.setattr(logwalk, "BATCH", 2)
    monkeypatch.setattr(stream, "CHUNK", 2)
    bounded = stream.bounded_check(b, check._match_units)
    assert bounded == check.check_whole(b)
    assert [(f["finding"], f["topic"], f["queue_id"], f["file"]) for f in bounded[0]] == \
        [("cq-blanks-only", "BL", 0, f"consumequeue/BL/0/{0:020d}")]
    r = runner.invoke(app, ["mq", "check", str(root)])
    assert r.exit_code == 1 and "cq-blanks-only" in r.output and "2147483647" in r.output, r.output
