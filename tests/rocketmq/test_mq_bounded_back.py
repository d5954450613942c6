"""``mq check`` on a store whose consume-queue units go back (a unit overwritten with an
earlier or a later message's offset, two units swapped): the bounded merge takes such a
queue as the runs in which its offsets go up (stream.Runs) instead of reading the whole log,
and finds what the whole-log path finds, in the same order (issue 51)."""

from __future__ import annotations

import os
import random
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store
from store.rocketmq import check, logwalk, stream
from store.rocketmq.layout import resolve_broker


@pytest.fixture(scope="module")
def made():
    tmp = tempfile.mkdtemp(prefix="mq-back-")
    root = os.path.join(tmp, "store")
    specs = [dict(topic=f"T{i % 3}", queue_id=(i // 3) % 2, body=b"b%d" % i, properties={"TAGS": f"tag{i % 4}"})
             for i in range(600)]
    written = write_broker_store(root, specs, data_file_size=16 << 10, cq_units_per_file=40)
    yield root, written
    shutil.rmtree(tmp, ignore_errors=True)


def damage(root: str, written: list, rng: random.Random, rate: float) -> None:
    """Units overwritten so that offsets go back: another message's offset (earlier or later,
    a few bytes off or not), or two neighbours swapped."""
    cq = os.path.join(root, "consumequeue")
    end = written[-1]["phy_offset"] + written[-1]["size"]
    for topic in sorted(os.listdir(cq)):
        for qid in sorted(os.listdir(os.path.join(cq, topic))):
            qdir = os.path.join(cq, topic, qid)
            for name in sorted(os.listdir(qdir)):
                with open(os.path.join(qdir, name), "r+b") as fh:
                    data = bytearray(fh.read())
                    n = len(data) // 20
                    for slot in range(n):
                        if int.from_bytes(data[slot * 20 + 8:slot * 20 + 12], "big") == 0 or rng.random() >= rate:
                            continue
                        how = rng.randrange(3)
                        if how == 0:
                            w = rng.choice(written)
                            data[slot * 20:slot * 20 + 20] = cq_unit(w["phy_offset"] + rng.choice([0, 0, 5]), w["size"],
                                                                     0)
                        elif how == 1:
                            data[slot * 20:slot * 20 + 20] = cq_unit(end + rng.randrange(1, 999), 10, 0)
                        elif slot + 1 < n and int.from_bytes(data[slot * 20 + 28:slot * 20 + 32], "big"):
                            a, b = bytes(data[slot * 20:slot * 20 + 20]), bytes(data[slot * 20 + 20:slot * 20 + 40])
                            data[slot * 20:slot * 20 + 40] = b + a
                    fh.seek(0)
                    fh.write(data)


def bounded_and_whole(root: str, monkeypatch) -> tuple:
    monkeypatch.setattr(logwalk, "BATCH", 7)
    monkeypatch.setattr(stream, "CHUNK", 5)
    b = resolve_broker(root)
    try:
        bounded = stream.bounded_check(b, check._match_units)
    except stream.Unbounded:
        bounded = None
    return bounded, check.check_whole(b)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.01, 0.03, 0.1]))
def test_units_that_go_back_the_merge_finds_what_the_whole_log_path_finds(made, monkeypatch, seed, rate):
    root0, written = made
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "store")
        shutil.copytree(root0, root)
        damage(root, written, random.Random(seed), rate)
        bounded, whole = bounded_and_whole(root, monkeypatch)
        assert bounded is not None, "the bounded path gave up"
        assert bounded == whole
        assert check.check_broker(resolve_broker(root)) == whole
        if check._columns is not None:
            monkeypatch.setattr(check, "_columns", None)
            assert stream.bounded_check(resolve_broker(root), check._match_units) == whole


def test_a_queue_that_goes_back_past_the_budget_takes_the_whole_log_path(made, monkeypatch, tmp_path):
    root0, written = made
    root = str(tmp_path / "store")
    shutil.copytree(root0, root)
    damage(root, written, random.Random(7), 0.2)
    monkeypatch.setattr(stream, "MAX_RUNS", 2)
    bounded, whole = bounded_and_whole(root, monkeypatch)
    assert bounded is None
    assert check.check_broker(resolve_broker(root)) == whole
    assert any(f["finding"] == "cq-mismatch" for f in whole[0])
