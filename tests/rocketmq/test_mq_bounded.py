"""``mq check`` and ``mq topics`` in bounded memory (store/rocketmq/stream.py, issue 51):
the batch-at-a-time merge of units and messages finds what the whole-log path finds, in the
same order, on stores damaged every way a unit or a message can be; and the memory it
holds does not grow with the number of messages."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store, write_queue
from store.rocketmq import check, logwalk, stream
from store.rocketmq.layout import resolve_broker
from store.rocketmq.message import TRANSACTION_PREPARED_TYPE


def specs(n: int, topics: int = 3, queues: int = 2) -> list[dict]:
    out = []
    for i in range(n):
        s = dict(topic=f"T{i % topics}", queue_id=(i // topics) % queues, body=b"b%d" % i,
                 properties={"TAGS": f"tag{i % 4}"})
        if i % 97 == 5:
            s["sys_flag"] = TRANSACTION_PREPARED_TYPE
        out.append(s)
    return out


@pytest.fixture(scope="module")
def made():
    tmp = tempfile.mkdtemp(prefix="mq-bounded-")
    root = os.path.join(tmp, "store")
    written = write_broker_store(root, specs(600), data_file_size=16 << 10, cq_units_per_file=40)
    yield root, written
    shutil.rmtree(tmp, ignore_errors=True)


def both(root: str, monkeypatch) -> tuple:
    """(bounded check, whole check, bounded topics, whole topics), small batches and chunks."""
    b = resolve_broker(root)
    monkeypatch.setattr(logwalk, "BATCH", 7)
    monkeypatch.setattr(stream, "CHUNK", 5)
    try:
        bounded = stream.bounded_check(b, check._match_units)
    except stream.Unbounded:
        bounded = None
    rows = check.topic_rows(b, notes=[])
    return bounded, check.check_whole(b), rows, check.topic_rows_whole(b, notes=[])


def test_a_healthy_store_takes_the_bounded_path_and_agrees(made, monkeypatch):
    root, _written = made
    bounded, whole, rows, rows_whole = both(root, monkeypatch)
    assert bounded is not None and bounded == whole
    assert rows == rows_whole
    assert bounded[1]["messages"] == 600 and not bounded[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.01, 0.05, 0.3]), drop=st.booleans(),
       tail=st.integers(0, 30))
def test_damaged_units_the_merge_finds_what_the_whole_log_path_finds(made, monkeypatch, seed, rate, drop, tail):
    root0, written = made
    rng = random.Random(seed)
    by_phy = {w["phy_offset"]: w for w in written}
    end = written[-1]["phy_offset"] + written[-1]["size"]
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "store")
        shutil.copytree(root0, root)
        cq = os.path.join(root, "consumequeue")
        for topic in sorted(os.listdir(cq)):
            for qid in sorted(os.listdir(os.path.join(cq, topic))):
                qdir = os.path.join(cq, topic, qid)
                names = sorted(os.listdir(qdir))
                if drop and rng.random() < 0.3:  # a missing file: holes, cq-missing, cq-damaged
                    os.unlink(os.path.join(qdir, rng.choice(names)))
                    continue
                for name in names:
                    with open(os.path.join(qdir, name), "r+b") as fh:
                        data = fh.read()
                        for slot in range(len(data) // 20):
                            o = int.from_bytes(data[slot * 20:slot * 20 + 8], "big", signed=True)
                            w = by_phy.get(o)
                            if w is None or rng.random() >= rate:
                                continue
                            # (units that keep going up, as the merge needs: at the same message or
                            # just past it; of another size or tag code)
                            fh.seek(slot * 20)
                            fh.write(cq_unit(o + rng.choice([0, 0, 3]), w["size"] + rng.choice([0, 0, 1]),
                                             rng.choice([0, 3552214])))
        if tail:  # the queues stop short of the log's end: undispatched, or cq-missing below the others' reach
            qdir = os.path.join(cq, "T1", "0")
            for name in sorted(os.listdir(qdir))[-1:]:
                with open(os.path.join(qdir, name), "r+b") as fh:
                    size = len(fh.read())
                    fh.truncate(max(0, size - tail * 20))
        write_queue(root, "NoSuchTopic", 0, [cq_unit(w["phy_offset"], w["size"], 0) for w in written[:3]]
                    + [cq_unit(end + 100, 10, 0)])
        bounded, whole, rows, rows_whole = both(root, monkeypatch)
        assert bounded == whole
        assert rows == rows_whole
        if check._columns is not None:
            monkeypatch.setattr(check, "_columns", None)
            assert stream.bounded_check(resolve_broker(root), check._match_units) == (bounded or
                                                                                      check.check_whole(resolve_broker(root)))


def _peak(root: str, fn) -> int:
    b = resolve_broker(root)
    tracemalloc.start()
    try:
        fn(b)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_check_and_topics_hold_no_column_of_every_message(tmp_path, monkeypatch):
    """Four times the messages, about the same peak (numpy's arrays are traced): today's
    whole-log columns grew by about 100 bytes a message."""
    monkeypatch.setattr(logwalk, "BATCH", 512)
    monkeypatch.setattr(stream, "CHUNK", 256)
    small, big = str(tmp_path / "small"), str(tmp_path / "big")
    write_broker_store(small, specs(3000), data_file_size=64 << 10, cq_units_per_file=2000)
    write_broker_store(big, specs(12000), data_file_size=64 << 10, cq_units_per_file=2000)
    for fn in (lambda b: check.check_broker(b), lambda b: check.topic_rows(b)):
        _peak(small, fn)  # (imports, caches)
        grown = _peak(big, fn) - _peak(small, fn)
        assert grown < 9000 * 30, grown  # (the whole-log path: about 9000 * 100 and more)
