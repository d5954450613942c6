"""``mq consumers`` reads config/consumerOffset.json as a broker does: RocketMQ 4.9.4's own
``ConfigManager.load`` with ConsumerOffsetManager's decode (fastjson 1.2.69;
tests/support/java/rocketmq/RocketMQOffsetsRead.java) is given the same hostile files, each with
a good ``.bak`` beside it, and takes the file or falls back to the ``.bak`` exactly where we
do: JSON nested deep, integers of thousands of digits, values past a Long or an Integer, queue
ids with spaces or underscores (refused: the .bak), and queue ids of other decimal digits or
a sign (read: "\\u0661" and "+1" are 1 to Integer.parseInt too).

Where fastjson coerces what no broker writes (an offset as a string or a fraction, a queue id
"1.0", objects nested 515 to some thousands deep), we refuse and read the .bak: listed in
store/rocketmq/consumers.py, not tested as equal here.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.rocketmq.test_mq_consumers import store
from tests.rocketmq.test_mq_consumers_hostile import BAK, HOSTILE
from tests.support import javarocketmq
from tests.support.commands import invoke_clean
from tests.support.javabuild import Unavailable

CASES = {
    **HOSTILE,
    "queue id in Arabic-Indic digits": '{"offsetTable":{"T0@g1":{"\u0661":1}}}',
    "queue id in fullwidth digits": '{"offsetTable":{"T0@g1":{"\uff11":2}}}',
    "queue id with a sign": '{"offsetTable":{"T0@g1":{"+1":3,"-1":4}}}',
    "queue id with leading zeros": '{"offsetTable":{"T0@g1":{"0001":5}}}',
    "queue id with a space after": '{"offsetTable":{"T0@g1":{"1 ":1}}}',
    "arrays nested 513 deep in another field": '{"offsetTable":{"T0@g1":{0:6}},"x":' + "[" * 513 + "]" * 513 + "}",
    "arrays nested 600 deep in another field": '{"offsetTable":{"T0@g1":{0:6}},"x":' + "[" * 600 + "]" * 600 + "}",
    "an offset that is no number": '{"offsetTable":{"T0@g1":{0:"x"}}}',
    "an offset that is null": '{"offsetTable":{"T0@g1":{0:null}}}',
    "a topic's queues null": '{"offsetTable":{"T0@g1":null}}',
    "trailing garbage": '{"offsetTable":{"T0@g1":{0:1}}} x',
    "fastjson's own": '{"offsetTable":{"T0@g1":{0:7,1:8},"T1@g2":{1:9}}}',
}


@pytest.fixture(scope="module")
def rocketmq():
    try:
        return javarocketmq.build("4.9.4")
    except Unavailable as exc:
        pytest.skip(str(exc))


def brokers_tables(rocketmq, tmp_path) -> dict[str, dict]:
    """What RocketMQ's load makes of each case: its offset table (from the file or the .bak)."""
    paths = {}
    tmp_path.mkdir()
    for i, (what, text) in enumerate(CASES.items()):
        path = tmp_path / f"case{i}.json"
        path.write_text(text)
        (tmp_path / f"case{i}.json.bak").write_text(BAK)
        paths[what] = str(path)
    proc = subprocess.run(rocketmq.command("RocketMQOffsetsRead", *paths.values()), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [x["path"] for x in lines] == list(paths.values())
    assert all(x["loaded"] and x["thrown"] is None for x in lines), lines
    return {what: x["offsetTable"] for what, x in zip(paths, lines)}


def test_the_file_or_the_bak_as_the_broker_takes_it(rocketmq, tmp_path):
    java = brokers_tables(rocketmq, tmp_path / "java")
    bak = {"T1@old": {"1": 1}}
    for i, (what, text) in enumerate(CASES.items()):
        (tmp_path / f"s{i}").mkdir()
        root = store(tmp_path / f"s{i}")
        (root / "config" / "consumerOffset.json").write_text(text)
        (root / "config" / "consumerOffset.json.bak").write_text(BAK)
        r = invoke_clean("mq", "consumers", str(root), "--format", "json")
        assert r.exit_code in (0, 1) and "Error" not in r.stderr, (what, r.stderr)
        ours: dict = {}
        for row in json.loads(r.stdout):
            ours.setdefault(f"{row['topic']}@{row['group']}", {})[str(row["queue_id"])] = row["committed"]
        assert ours == java[what], (what, ours, java[what])
        assert ("consumerOffset.json.bak" in r.stderr) == (java[what] == bak), (what, r.stderr)
