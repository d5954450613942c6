"""``mq topics`` and ``mq check`` on crafted broker stores (issue 45: items 4-7): a
message whose QUEUEID is negative, names of non-ASCII digits, names that are not UTF-8,
and something other than a regular file where a consume-queue file should be. Each is a
finding or a clean line, never a traceback, a hang or a crash of the JSON output."""

from __future__ import annotations

import json
import os

from store.format import HEADER_SIZE
from tests.support.commands import cli, invoke
from tests.support.rmq_store import write_broker_store


def jsonl(r) -> list[dict]:
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def store(tmp_path, n: int = 6):
    root = tmp_path / "store"
    written = write_broker_store(str(root), [dict(topic="T", queue_id=i % 2, body=b"m%d" % i) for i in range(n)],
                                 cq_units_per_file=2)
    return root, written


def test_a_negative_queue_id_is_a_row_of_topics_and_a_finding_of_check(tmp_path):
    root, written = store(tmp_path)
    w = written[2]  # queue 0, queue offset 1
    data = root / "dledger-n0" / "data" / ("0" * 20)
    with open(data, "r+b") as fh:  # one flipped byte: QUEUEID's highest
        fh.seek(w["pos"] + HEADER_SIZE + 12)
        fh.write(b"\x80")
    r = invoke("mq", "topics", root, "--format", "jsonl")
    assert r.exit_code == 0 and r.exception is None, r.output
    got = {(x["topic"], x["queue_id"]): x["messages"] for x in jsonl(r)}
    assert got == {("T", -(1 << 31)): 1, ("T", 0): 2, ("T", 1): 3}, got
    r = invoke("mq", "check", root, "--format", "jsonl")
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    found = jsonl(r)
    assert [(f["finding"], f["file"], f["offset"], f["index"]) for f in found if f["finding"] == "queue-id"] == \
        [("queue-id", "data/" + "0" * 20, w["pos"], w["index"])], found
    assert "QUEUEID -2147483648" in next(f for f in found if f["finding"] == "queue-id")["detail"]
    # the unit that pointed at it (queue 0, offset 1) now points at a message of another
    # queue, and queue 0's messages go from offset 0 to 2; the entry's own bodyCrc fails
    assert {(f["finding"], f["queue_id"], f["queue_offset"]) for f in found} == \
        {("entry-crc", None, None), ("queue-id", -(1 << 31), 1), ("cq-mismatch", 0, 1), ("queue-offset", 0, 2)}, found


def test_a_fifo_where_a_queue_file_should_be_is_a_finding_not_a_hang(tmp_path):
    root, written = store(tmp_path)
    qdir = root / "consumequeue" / "T" / "0"
    fifo = qdir / f"{40:020d}"
    os.remove(fifo)
    os.mkfifo(fifo)
    os.mkdir(root / "consumequeue" / "T" / "1" / f"{80:020d}")  # a directory of a file's name
    r = cli("mq", "check", root, "--format", "jsonl")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    found = jsonl(r)
    damaged = {f["file"]: f["detail"] for f in found if f["finding"] == "cq-damaged"}
    assert set(damaged) == {f"consumequeue/T/0/{40:020d}", f"consumequeue/T/1/{80:020d}"}, found
    assert "a FIFO" in damaged[f"consumequeue/T/0/{40:020d}"] and "not read" in damaged[f"consumequeue/T/0/{40:020d}"]
    assert "a directory" in damaged[f"consumequeue/T/1/{80:020d}"]
    r = cli("mq", "topics", root, "--format", "jsonl")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert f"consumequeue/T/0/{40:020d}" in r.stderr and "a FIFO" in r.stderr, r.stderr
    assert {(x["queue_id"], x["cq_units"]) for x in jsonl(r)} == {(0, 2), (1, 3)}


def test_a_topic_directory_whose_name_is_not_utf8_is_shown_escaped_in_every_format(tmp_path):
    import shutil
    root, written = store(tmp_path)
    shutil.copytree(os.fsencode(root / "consumequeue" / "T"), os.fsencode(root / "consumequeue") + b"/T\xff")
    for fmt in ("table", "csv", "json", "jsonl"):
        slash = "\\" if fmt in ("table", "csv") else "\\\\"  # (JSON escapes the backslash)
        r = invoke("mq", "topics", root, "--format", fmt)
        assert r.exit_code == 0 and r.exception is None, (fmt, r.output)
        assert f"T{slash}xff" in r.stdout, (fmt, r.stdout)
        r = invoke("mq", "check", root, "--format", fmt)
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (fmt, r.output)
        assert f"consumequeue/T{slash}xff/0/" + "0" * 20 in r.stdout, (fmt, r.stdout)
    rows = json.loads(invoke("mq", "topics", root, "--format", "json").stdout)
    assert {(x["topic"], x["queue_id"], x["messages"], x["cq_units"]) for x in rows} == \
        {("T", 0, 3, 3), ("T", 1, 3, 3), ("T\\xff", 0, 0, 3), ("T\\xff", 1, 0, 3)}
    found = jsonl(invoke("mq", "check", root, "--format", "jsonl"))
    assert {f["topic"] for f in found} == {"T\\xff"} and all(f["finding"] == "cq-mismatch" for f in found), found
    assert all(f["detail"].endswith("but its topic is T") for f in found)
