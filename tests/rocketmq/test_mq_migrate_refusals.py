"""What stops ``mq migrate`` part way through the log, and what it says: an entry that is not a
RocketMQ message (committed or not: the move cannot tell what it is), a damaged data file, and
a message larger than a commit-log file; the first of them in log order is the one named, and
nothing is left at DEST or beside it."""

from __future__ import annotations

import os

import pytest

from store.filestore import FileStore
from store.rocketmq.layout import resolve_broker
from store.rocketmq.message import NotAMessage, decode
from store.rocketmq.migrate import MigrateError, migrate
from tests.support.rmq_encode import encode_message
from tests.support.rmq_store import write_broker_store

GARBAGE = b"\x00\x00\x00\x10not a message at all, nor anything else" * 3


def specs(n=40):
    return [{"topic": f"T{i % 2}", "body": b"m%d" % i * 30, "properties": {"KEYS": f"k{i}"}} for i in range(n)]


def store_with(root, raws: list[bytes], *, uncommitted: int = 0, data_file_size=64 << 20):
    """``specs()`` then entries of the bodies ``raws``; the last ``uncommitted`` of them past
    the committed index. The appended entries' (index, pos)."""
    write_broker_store(str(root), specs(), data_file_size=data_file_size)
    store = FileStore.open(str(root / "dledger-n0"))
    try:
        done = store.append_leader(raws, 1)
        store.set_committed(store.end_index - uncommitted)
    finally:
        store.close()
    return [(a.index, a.pos) for a in done]


def refused(tmp_path, **kw) -> str:
    with pytest.raises(MigrateError) as exc:
        migrate(resolve_broker(str(tmp_path / "src")), str(tmp_path / "ms"), **kw)
    assert sorted(os.listdir(tmp_path)) == ["src"]  # (no DEST, no temporary directory)
    return str(exc.value)


def why(raw: bytes) -> str:
    with pytest.raises(NotAMessage) as exc:
        decode(raw, 0, len(raw))
    return str(exc.value)


@pytest.mark.parametrize("uncommitted", [0, 1])
def test_an_entry_that_is_not_a_message_is_named_by_file_index_and_offset(tmp_path, uncommitted):
    ((idx, pos),) = store_with(tmp_path / "src", [GARBAGE], uncommitted=uncommitted)
    node = tmp_path / "src" / "dledger-n0"
    assert refused(tmp_path) == f"{node}/data/{0:020d}: entry {idx} at offset {pos} is not a RocketMQ message " \
                                f"({why(GARBAGE)})"


def test_the_first_refusal_in_log_order_is_the_one_said(tmp_path):
    big = encode_message(topic="T0", body=b"x" * 5000)
    a, b = tmp_path / "a", tmp_path / "b"
    os.makedirs(a)
    os.makedirs(b)
    ((i_big, _), (i_bad, pos_bad)) = store_with(a / "src", [big, GARBAGE])
    assert refused(a, commitlog_file_size=4096) == \
        f"entry {i_big}: a message of {len(big)} bytes does not fit in a commit-log file of 4096 bytes (it needs " \
        f"{len(big) + 8}) (give a larger --commitlog-file-size)"
    assert refused(a, commitlog_file_size=8192) == f"{a}/src/dledger-n0/data/{0:020d}: entry {i_bad} at offset " \
                                                   f"{pos_bad} is not a RocketMQ message ({why(GARBAGE)})"
    ((i_bad, pos_bad), _) = store_with(b / "src", [GARBAGE, big])
    assert refused(b, commitlog_file_size=4096) == f"{b}/src/dledger-n0/data/{0:020d}: entry {i_bad} at offset " \
                                                   f"{pos_bad} is not a RocketMQ message ({why(GARBAGE)})"


def test_a_damaged_data_file_is_named_with_the_offset_where_its_scan_stops(tmp_path):
    written = write_broker_store(str(tmp_path / "src"), specs(200), data_file_size=16 << 10)
    node = tmp_path / "src" / "dledger-n0"
    names = sorted(os.listdir(node / "data"))
    assert len(names) > 1
    at = written[5]["pos"]  # (in the first data file)
    with open(node / "data" / names[0], "r+b") as fh:
        fh.seek(at)
        fh.write(b"\x7f\x7f\x7f\x7f")  # the entry's magic
    text = refused(tmp_path)
    assert text.startswith(f"{node}/data/{names[0]}: damaged at offset {at} (") and \
        text.endswith("); run 'dledgerctl store verify' on it"), text
