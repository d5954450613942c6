"""``mq consumers`` on a hostile ``config/consumerOffset.json`` (issue 59, items 3, 6 and 11):
JSON nested 100,000 deep, a 5,000-digit integer, queue ids Python's int() would take but
fastjson's Integer does not ("1_0", " 0"), and special files (a FIFO,
a symlink to /dev/zero, a directory) where the file should be. Each is the one-line "not
fastjson's JSON" (or "not a regular file") error, or the ``.bak`` read instead as the broker's
ConfigManager.load falls back: never a traceback, a hang or a MemoryError. (A queue id in
other decimal digits, "\u0661", is 1 to the broker's Integer.parseInt, and so here:
tests/java/test_consumer_offsets_java.py runs RocketMQ's own load on these files.)

Plus hypothesis: fastjson-shaped config files (consumerOffset.json, topics.json,
subscriptionGroup.json, delayOffset.json shapes, with bare integer keys) read back equal
through store/rocketmq/jsonread.py, and mutated ones give JsonError or objects, nothing else.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.rocketmq import jsonread
from tests.rocketmq.test_mq_consumers import store
from tests.support.commands import cli, invoke_clean

BAK = '{"offsetTable":{"T1@old":{1:1}}}'
OLD = [["old", "T1", 1, 1, 0, 10, 9, "ok"]]
COLS = ["group", "topic", "queue_id", "committed", "min", "max", "backlog", "status"]


def consumers(root):
    r = invoke_clean("mq", "consumers", str(root), "--format", "json")
    return r, [[row[c] for c in COLS] for row in json.loads(r.stdout)] if r.stdout.strip() else []


HOSTILE = {
    "nested 100,000 deep": '{"offsetTable":{"T0@g1":{0:1}},"x":' + "[" * 100_000 + "]" * 100_000 + "}",
    "nested objects 5,000 deep": '{"offsetTable":' + '{"a@b":' * 5000 + "{}" + "}" * 5000 + "}",
    "a 5,000-digit offset": '{"offsetTable":{"T0@g1":{0:' + "9" * 5000 + "}}}",
    "an offset past a Long": '{"offsetTable":{"T0@g1":{0:9223372036854775808}}}',
    "queue id 1_0": '{"offsetTable":{"T0@g1":{"1_0":1}}}',
    "queue id ' 0'": '{"offsetTable":{"T0@g1":{" 0":1}}}',
    "a 5,000-digit queue id": '{"offsetTable":{"T0@g1":{' + "1" * 5000 + ":1}}}",
    "queue id past an Integer": '{"offsetTable":{"T0@g1":{2147483648:1}}}',
    "NaN": '{"offsetTable":{"T0@g1":{0:NaN}}}',
}


@pytest.mark.parametrize("what", list(HOSTILE))
def test_hostile_offsets_fall_back_to_the_bak_or_are_one_error_line(tmp_path, what):
    root = store(tmp_path)
    cfg = root / "config"
    (cfg / "consumerOffset.json").write_text(HOSTILE[what])
    r, _ = consumers(root)
    assert r.exit_code == 1, (what, r.output)
    assert r.stderr.startswith("Error: ") and len(r.stderr.splitlines()) == 1, (what, r.stderr)
    assert "consumerOffset.json" in r.stderr and len(r.stderr) < 400, r.stderr
    (cfg / "consumerOffset.json.bak").write_text(BAK)
    r, got = consumers(root)
    assert r.exit_code == 0 and got == OLD, (what, r.output)
    assert "read config/consumerOffset.json.bak, as the broker does" in r.stderr


def test_queue_ids_in_other_decimal_digits_are_read_as_the_broker_reads_them(tmp_path):
    root = store(tmp_path)
    (root / "config" / "consumerOffset.json").write_text('{"offsetTable":{"T1@g1":{"\u0661":4,"+0":0}}}')
    r, got = consumers(root)
    assert r.exit_code == 0 and got == [["g1", "T1", 0, 0, 0, 0, 0, "no queue"], ["g1", "T1", 1, 4, 0, 10, 6, "ok"]]


def test_why_the_file_was_refused_is_said(tmp_path):
    root = store(tmp_path)
    cfg = root / "config"
    for text, why in ((HOSTILE["nested 100,000 deep"], "not fastjson's JSON (JSON nested 100001 deep"),
                      (HOSTILE["queue id 1_0"], "queue id '1_0' is not a number"),
                      (HOSTILE["a 5,000-digit offset"], "offset <integer of 5000 digits> is not a whole number")):
        (cfg / "consumerOffset.json").write_text(text)
        r, _ = consumers(root)
        assert why in r.stderr, r.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_special_files_are_refused_at_once_and_the_bak_read(tmp_path, kind):
    root = store(tmp_path)
    path = root / "config" / "consumerOffset.json"
    os.unlink(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    else:
        os.mkdir(path)
    # a process of its own: a hang fails at the timeout instead of holding the test run
    r = cli("mq", "consumers", str(root), timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert "not a regular file" in r.stderr, r.stderr
    (root / "config" / "consumerOffset.json.bak").write_text(BAK)
    r = cli("mq", "consumers", str(root), "--format", "json", timeout=60)
    assert r.returncode == 0, r.stderr
    assert [[row[c] for c in COLS] for row in json.loads(r.stdout)] == OLD
    assert "not a regular file" in r.stderr and "consumerOffset.json.bak" in r.stderr


# ---- the reader itself, fuzzed -------------------------------------------------------------

_key = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1), _key)


def _fastjson(value) -> str:
    """``value`` as fastjson writes it: Map<Integer, ...> keys bare (ints here), others quoted."""
    if isinstance(value, dict):
        return "{" + ",".join((str(k) if isinstance(k, int) else json.dumps(k, ensure_ascii=False)) + ":" + _fastjson(v)
                              for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(map(_fastjson, value)) + "]"
    return json.dumps(value, ensure_ascii=False)


def _as_read(value):
    """What the reader gives back: integer keys as text."""
    if isinstance(value, dict):
        return {str(k): _as_read(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_read(v) for v in value]
    return value


def _distinct(d: dict) -> bool:
    return len({str(k) for k in d}) == len(d)  # (1 and "1" read back as one key)


_offsets = st.fixed_dictionaries({"offsetTable": st.dictionaries(
    st.builds(lambda t, g: f"{t}@{g}", _key, _key), st.dictionaries(st.integers(0, 1 << 20),
                                                                   st.integers(0, (1 << 63) - 1), max_size=4),
    max_size=4)})
_topics = st.fixed_dictionaries({"topicConfigTable": st.dictionaries(_key, st.fixed_dictionaries(
    {"topicName": _key, "readQueueNums": st.integers(0, 64), "perm": st.integers(0, 7), "order": st.booleans()}),
    max_size=3), "dataVersion": st.fixed_dictionaries({"counter": st.integers(0, 1 << 40),
                                                       "timestamp": st.integers(0, 1 << 45)})})
_delay = st.fixed_dictionaries({"offsetTable": st.dictionaries(st.integers(1, 18), st.integers(0, 1 << 40),
                                                               max_size=18)})
_any = st.recursive(_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                   st.dictionaries(st.one_of(_key, st.integers(-99, 99)), inner,
                                                                   max_size=4).filter(_distinct)), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_offsets, _topics, _delay, _any))
def test_fastjson_shaped_config_files_read_back_equal(doc):
    assert jsonread.loads(_fastjson(doc).encode()) == _as_read(doc)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_offsets, _topics, _delay), st.data())
def test_mutated_config_files_give_objects_or_json_error(doc, data):
    raw = bytearray(_fastjson(doc).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        how = data.draw(st.sampled_from(["flip", "cut", "insert", "nest", "digits"]))
        at = data.draw(st.integers(0, len(raw)))
        if how == "flip" and raw:
            raw[min(at, len(raw) - 1)] ^= 1 << data.draw(st.integers(0, 7))
        elif how == "cut":
            del raw[at:]
        elif how == "insert":
            raw[at:at] = data.draw(st.binary(max_size=8))
        elif how == "nest":
            n = data.draw(st.sampled_from([513, 514, 515, 5000, 100_000]))
            raw[at:at] = b"[" * n + b"]" * n
        else:
            raw[at:at] = b"9" * data.draw(st.sampled_from([19, 41, 5000]))
    try:
        jsonread.loads(bytes(raw))
    except jsonread.JsonError as exc:
        assert str(exc) and "\n" not in str(exc)


def test_bounds_at_the_edges():
    ok = b"[" * 514 + b"]" * 514
    assert jsonread.depth(ok) == 514 and jsonread.loads(ok) is not None
    with pytest.raises(jsonread.JsonError, match="nested 515 deep"):
        jsonread.loads(b"[" * 515 + b"]" * 515)
    assert jsonread.loads(b'"[[[[' + b"[" * 1000 + b'"') == "[[[[" + "[" * 1000  # (brackets in strings)
    assert isinstance(jsonread.loads(b"9" * 41), jsonread.HugeInteger)
    assert jsonread.loads(b"9" * 40) == int("9" * 40)
