"""The shape of the index/ files ``mq rebuild`` and ``mq migrate`` write (the broker's
maxHashSlotNum and maxIndexNum): given, or read off the index/ files the broker wrote.

A broker maps its index files by its own settings and reads a file of another length at
the wrong places, so a rebuild with RocketMQ's defaults on a broker configured otherwise
would make every look-up by key miss without an error. Without the options, the files there
are decides; a length that tells no shape is refused before anything is written.
"""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from store.rocketmq.index import MAX_HASH_SLOT_NUM, MAX_INDEX_NUM
from store.rocketmq.lookup import IndexShapeUnknown, index_file_bytes, index_shape
from tests.support.rmq_store import write_broker_store
from tests.support.stores import file_crcs

runner = CliRunner()
DEFAULTS = (MAX_HASH_SLOT_NUM, MAX_INDEX_NUM)


def index_files(root, lengths: dict[str, int]) -> None:
    d = root / "index"
    d.mkdir(parents=True, exist_ok=True)
    for name, n in lengths.items():
        with open(d / name, "wb") as fh:
            fh.truncate(n)  # (sparse: a default one is 420 MB of holes)


def test_no_index_files_or_default_ones_give_the_defaults(tmp_path):
    shape = index_shape(str(tmp_path), None, None, DEFAULTS)
    assert (shape.slots, shape.index_num, shape.note) == (*DEFAULTS, None)
    index_files(tmp_path, {"20261126101010101": index_file_bytes(*DEFAULTS)})
    shape = index_shape(str(tmp_path), None, None, DEFAULTS)
    assert (shape.slots, shape.index_num, shape.note) == (*DEFAULTS, None)


def test_files_of_the_brokers_one_to_four_ratio_tell_their_shape(tmp_path):
    index_files(tmp_path, {"20261126101010101": index_file_bytes(1000, 4000),
                           "20261126111010101": index_file_bytes(1000, 4000)})
    shape = index_shape(str(tmp_path), None, None, DEFAULTS)
    assert (shape.slots, shape.index_num) == (1000, 4000)
    assert "1000 slots and 4000 entries" in shape.note


@pytest.mark.parametrize("lengths, said", [
    ({"20261126101010101": index_file_bytes(97, 60)}, "the length of no index file"),
    ({"20261126101010101": index_file_bytes(1000, 4000), "20261126111010101": index_file_bytes(10, 40)},
     "files of 2 lengths"),
])
def test_a_length_that_tells_no_shape_is_refused(tmp_path, lengths, said):
    index_files(tmp_path, lengths)
    with pytest.raises(IndexShapeUnknown, match=said) as err:
        index_shape(str(tmp_path), None, None, DEFAULTS)
    assert "--max-hash-slot-num and --max-index-num" in str(err.value)


def test_given_options_win_and_a_mismatch_is_said(tmp_path):
    index_files(tmp_path, {"20261126101010101": index_file_bytes(97, 60)})
    shape = index_shape(str(tmp_path), 97, 60, DEFAULTS)
    assert (shape.slots, shape.index_num, shape.note) == (97, 60, None)
    shape = index_shape(str(tmp_path), 11, None, DEFAULTS)  # (97 * 4 - 11 * 4 + 60 * 20 is no whole entry count)
    assert (shape.slots, shape.index_num) == (11, MAX_INDEX_NUM)
    assert f"{index_file_bytes(97, 60)} bytes" in shape.note


def test_one_option_given_takes_the_other_from_the_files(tmp_path):
    index_files(tmp_path, {"20261126101010101": index_file_bytes(1000, 4000)})
    for given, want in (((1000, None), (1000, 4000)), ((None, 4000), (1000, 4000)), ((500, None), (500, 4100))):
        shape = index_shape(str(tmp_path), *given, DEFAULTS)
        assert (shape.slots, shape.index_num, shape.note) == (*want, None), given


def specs(n: int = 40) -> list[dict]:
    return [{"topic": f"T{i % 2}", "queue_id": i % 2, "body": b"m%d" % i,
             "properties": {"KEYS": f"k{i}", "UNIQ_KEY": f"U{i:08d}"}} for i in range(n)]


@pytest.fixture
def broker(tmp_path):
    root = tmp_path / "broker"
    write_broker_store(str(root), specs(), data_file_size=8 << 10)
    os.makedirs(root / "config")
    return root


def new_index_lengths(root) -> set[int]:
    d = root / "index"
    return {os.path.getsize(d / n) for n in os.listdir(d)}


def test_rebuild_without_options_keeps_the_shape_the_broker_wrote(broker):
    index_files(broker, {"20261126101010101": index_file_bytes(101, 404)})
    r = runner.invoke(app, ["mq", "rebuild", str(broker), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "101 slots and 404 entries" in r.stderr
    assert new_index_lengths(broker) == {index_file_bytes(101, 404)}
    r = runner.invoke(app, ["mq", "messages", str(broker), "--topic", "T1", "--key", "k7", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert [m["queue_offset"] for m in json.loads(r.stdout)] == [3]


def test_rebuild_refuses_an_index_of_unknown_shape_and_changes_nothing(broker):
    index_files(broker, {"20261126101010101": index_file_bytes(97, 60)})
    before = file_crcs(str(broker))
    r = runner.invoke(app, ["mq", "rebuild", str(broker)])
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "20261126101010101: " in r.stderr and "--max-hash-slot-num" in r.stderr
    assert file_crcs(str(broker)) == before
    r = runner.invoke(app, ["mq", "rebuild", str(broker), "--max-hash-slot-num", "97", "--max-index-num", "60"])
    assert r.exit_code == 0, r.output
    assert new_index_lengths(broker) == {index_file_bytes(97, 60)}


def test_migrate_takes_the_shape_of_the_sources_index(broker, tmp_path):
    index_files(broker, {"20261126101010101": index_file_bytes(50, 200)})
    dest = tmp_path / "ms"
    r = runner.invoke(app, ["mq", "migrate", str(broker), str(dest), "--include-uncommitted",
                            "--commitlog-file-size", "65536", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert new_index_lengths(dest) == {index_file_bytes(50, 200)}
    index_files(broker, {"20261126111010101": 12345})
    r = runner.invoke(app, ["mq", "migrate", str(broker), str(tmp_path / "ms2"), "--include-uncommitted"])
    assert r.exit_code == 1 and "files of 2 lengths" in r.stderr, r.output
    assert not os.path.exists(tmp_path / "ms2")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".ms2")]
