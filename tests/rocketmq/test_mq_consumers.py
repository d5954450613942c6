"""``mq consumers DIR``: config/consumerOffset.json (fastjson's ConsumerOffsetManager, bare
integer queue ids; the .bak when the file is missing, empty or does not decode, as
ConfigManager.load falls back) against the consume queues, on a DLedger-mode store and on
the master-slave store ``mq migrate`` makes of it: committed, min, max, backlog and status
per group, topic and queue; an offset past its queue's end is a finding (exit 1).
RocketMQ's own min and max for the same queues: tests/java/test_mq_migrate_java.py."""

from __future__ import annotations

import json
import os

from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store, write_queue
from store.rocketmq.jsonread import quote_int_keys

runner = CliRunner()

# (fastjson writes Map<Integer, Long> keys bare; one group pretty-printed, as persist() does)
OFFSETS = """{
\t"offsetTable":{
\t\t"T0@g1":{0:3
\t\t},
\t\t"T1@g1":{1:999,0:0},
\t\t"T0@g4":{0:10},
\t\t"%RETRY%g1@g1":{0:0},
\t\t"Gone@g2":{0:7},
\t\t"A@g2":{0:40,1:0},
\t\t"A@g3":{0:12}
\t}
}"""


def store(tmp_path):
    root = tmp_path / "src"
    w = write_broker_store(str(root), [{"topic": f"T{i % 2}", "queue_id": i % 2, "body": b"m%d" % i}
                                       for i in range(20)] + [{"topic": "A", "body": b"a%d" % i, "queue_offset": 37 + i}
                                                              for i in range(5)], cq_units_per_file=16)
    qdir = root / "consumequeue" / "A" / "0"
    for n in os.listdir(qdir):
        os.unlink(qdir / n)
    write_queue(str(root), "A", 0, [cq_unit(x["phy_offset"], x["size"], 0) for x in w[20:]], per_file=16, first=37,
                blanks=5)
    os.makedirs(root / "config")
    (root / "config" / "consumerOffset.json").write_text(OFFSETS)
    return root


WANT = [  # group, topic, queue, committed, min, max, backlog, status
    ["g1", "%RETRY%g1", 0, 0, 0, 0, 0, "no queue"],
    ["g2", "A", 0, 40, 37, 42, 2, "ok"],
    ["g3", "A", 0, 12, 37, 42, 30, "before min"],
    ["g2", "A", 1, 0, 0, 0, 0, "no queue"],
    ["g2", "Gone", 0, 7, 0, 0, 0, "past the end (no queue)"],
    ["g1", "T0", 0, 3, 0, 10, 7, "ok"],
    ["g4", "T0", 0, 10, 0, 10, 0, "ok"],
    ["g1", "T1", 0, 0, 0, 0, 0, "no queue"],
    ["g1", "T1", 1, 999, 0, 10, 0, "past the end"],
]
COLS = ["group", "topic", "queue_id", "committed", "min", "max", "backlog", "status"]


def rows(path):
    r = runner.invoke(app, ["mq", "consumers", str(path), "--format", "json"])
    return r, [[row[c] for c in COLS] for row in json.loads(r.stdout)] if r.stdout else []


def test_offsets_against_queues_on_a_dledger_store_and_its_migrated_store(tmp_path):
    root = store(tmp_path)
    r, got = rows(root)
    assert r.exit_code == 1, r.output
    assert sorted(got, key=lambda x: (x[1], x[2], x[0])) == WANT
    assert "4 groups, 9 committed offsets, 2 offsets past the end of their queues" in r.stderr
    assert "Error" not in r.stderr
    m = runner.invoke(app, ["mq", "migrate", str(root), str(tmp_path / "ms"), "--commitlog-file-size", "64KiB"])
    assert m.exit_code == 0, m.output
    r2, got2 = rows(tmp_path / "ms")
    assert r2.exit_code == 1 and sorted(got2, key=lambda x: (x[1], x[2], x[0])) == WANT
    t = runner.invoke(app, ["mq", "consumers", str(tmp_path / "ms")])  # (the table)
    assert "past the end" in t.stdout and "before min" in t.stdout


def test_no_finding_exits_0(tmp_path):
    root = store(tmp_path)
    (root / "config" / "consumerOffset.json").write_text('{"offsetTable":{"T1@g1":{1:10},"T0@g1":{0:5}}}')
    r, got = rows(root)
    assert r.exit_code == 0 and got == [["g1", "T0", 0, 5, 0, 10, 5, "ok"], ["g1", "T1", 1, 10, 0, 10, 0, "ok"]]
    assert "0 offsets past the end" in r.stderr


def test_the_bak_file_when_the_file_is_empty_or_does_not_decode(tmp_path):
    root = store(tmp_path)
    cfg = root / "config"
    (cfg / "consumerOffset.json.bak").write_text('{"offsetTable":{"T1@old":{1:1}}}')
    for main, why in (("", "is missing or empty"), ('{"offsetTable":{"T0@g1":{0:', "not fastjson's JSON")):
        (cfg / "consumerOffset.json").write_text(main)
        r, got = rows(root)
        assert r.exit_code == 0 and got == [["old", "T1", 1, 1, 0, 10, 9, "ok"]], r.output
        assert why in r.stderr and "read config/consumerOffset.json.bak, as the broker does" in r.stderr
        assert "consumerOffset.json.bak: 1 group" in r.stderr
    os.unlink(cfg / "consumerOffset.json")
    r, got = rows(root)
    assert r.exit_code == 0 and got == [["old", "T1", 1, 1, 0, 10, 9, "ok"]]


def test_unreadable_offsets_are_one_error_line(tmp_path):
    root = store(tmp_path)
    cfg = root / "config"
    os.unlink(cfg / "consumerOffset.json")
    r = runner.invoke(app, ["mq", "consumers", str(root)])
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and "nor consumerOffset.json.bak" in r.stderr
    (cfg / "consumerOffset.json").write_text('{"offsetTable":{"T0@g1":{0:"x"}}}')
    r = runner.invoke(app, ["mq", "consumers", str(root)])
    assert r.exit_code == 1 and "offset 'x' is not a whole number" in r.stderr and "Traceback" not in r.output
    (cfg / "consumerOffset.json").write_text('{"offsetTable":{"T0g1":{0:1}}}')
    r = runner.invoke(app, ["mq", "consumers", str(root)])
    assert r.exit_code == 1 and "is not \"topic@group\"" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_fastjson_keys_are_quoted_outside_strings_only():
    text = '{"offsetTable":{"a{0:1},b@g":{0:1, -1 :2}}, "x": [1, {3:4}]}'
    assert json.loads(quote_int_keys(text)) == {"offsetTable": {"a{0:1},b@g": {"0": 1, "-1": 2}}, "x": [1, {"3": 4}]}
    assert quote_int_keys('{"s":"q\\"{1:2}"}') == '{"s":"q\\"{1:2}"}'
