"""``mq check --max-findings N`` (issue 51): the first N findings of the full list, the
total still counted and said, the same exit status; and the progress callback counts the
log once, also when the whole-log path reads it again."""

from __future__ import annotations

import json
import os
import shutil

from store.rocketmq import check
from store.rocketmq.layout import resolve_broker
from tests.support.commands import invoke as run
from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store, write_queue


def damaged(tmp_path, *, back: bool = False):
    """A store with a queue whose every unit has the wrong size (cq-mismatch each), and one
    whose topic the log lacks; with ``back``, a queue whose units go back (the whole-log path)."""
    root = tmp_path / "store"
    specs = [dict(topic=f"T{i % 2}", queue_id=i % 2, body=b"x%d" % i) for i in range(200)]
    written = write_broker_store(str(root), specs, data_file_size=16 << 10, cq_units_per_file=30)
    qdir = root / "consumequeue" / "T0" / "0"
    shutil.rmtree(qdir)
    mine = [w for s, w in zip(specs, written) if s["topic"] == "T0" and s["queue_id"] == 0]
    units = [cq_unit(w["phy_offset"], w["size"] + 1, 0) for w in mine]
    if back:
        units = units[::-1]
    write_queue(str(root), "T0", 0, units, per_file=30)
    write_queue(str(root), "Nope", 0, [cq_unit(w["phy_offset"], w["size"], 0) for w in written[:20]])
    return root


def test_max_findings_shows_the_first_n_and_counts_all(tmp_path):
    for back in (False, True):
        root = damaged(tmp_path / str(back), back=back)
        full = run("mq", "check", root, "-f", "jsonl")
        assert full.exit_code == 1, full.output
        rows = [json.loads(x) for x in full.stdout.splitlines() if x.strip()]
        assert len(rows) > 40
        for n in (0, 1, 7, len(rows) - 1):
            r = run("mq", "check", root, "-f", "jsonl", "--max-findings", n)
            assert r.exit_code == 1, r.output
            got = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
            assert got == rows[:n]
            assert f": {len(rows)} findings (the first {n} shown: --max-findings)" in r.stderr
        r = run("mq", "check", root, "-f", "jsonl", "--max-findings", len(rows))
        assert r.exit_code == 1 and "shown" not in r.stderr and f": {len(rows)} findings" in r.stderr
        b = resolve_broker(str(root))
        f, s = check.check_broker(b, max_findings=5)
        assert len(f) == 5 and s["findings"] == len(rows)


def test_max_findings_must_not_be_negative(tmp_path):
    r = run("mq", "check", damaged(tmp_path), "--max-findings", "-1")
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_progress_counts_the_log_once_on_either_path(tmp_path):
    for back in (False, True):
        root = damaged(tmp_path / str(back), back=back)
        b = resolve_broker(str(root))
        data = os.path.join(b.node_dir, "data")
        walked = []
        check.check_broker(b, progress=walked.append)
        once = []
        check.check_whole(b, progress=once.append)
        assert sum(walked) == sum(once) > 0
        assert sum(walked) <= sum(os.path.getsize(os.path.join(data, n)) for n in os.listdir(data))
        rows = []
        check.topic_rows(b, progress=rows.append)
        assert sum(rows) == sum(once)
