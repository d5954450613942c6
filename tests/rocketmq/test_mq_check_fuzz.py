"""``mq check`` and ``mq topics`` over crafted consume queues (issue 45: names and files):
random queue directories and file names (non-ASCII digits, not UTF-8, offsets off a unit),
files of random sizes holding random bytes or units near the log's own. Whatever they hold,
the check ends without an exception, its findings are text any output can carry, and the
compiled and numpy matchers find the same."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store
from store.rocketmq import check
from store.rocketmq.layout import resolve_broker


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzlog")
    written = write_broker_store(str(root), [dict(topic=f"T{i % 2}", queue_id=i % 3, body=b"b%d" % i)
                                             for i in range(30)], cq_units_per_file=4)
    shutil.rmtree(root / "consumequeue")
    return root, written


def units(written):
    near = st.sampled_from([w["phy_offset"] for w in written] + [0, 7, -1, 1 << 40])
    unit = st.builds(lambda p, d, s, t: cq_unit(p + d, s, t), near, st.sampled_from([0, 0, 3]),
                     st.sampled_from([101, 0, -5, (1 << 31) - 1, 102]), st.sampled_from([0, 2640, -1]))
    return st.lists(unit, max_size=8).map(b"".join)


def queue_files(written):
    name = st.one_of(st.integers(0, 12).map(lambda k: f"{k * 40:020d}"), st.integers(0, 400).map(lambda k: f"{k:020d}"),
                     st.sampled_from(["0" * 19 + "²", "٣" * 20, "x", "0" * 21]))
    body = st.one_of(units(written), st.binary(max_size=90))
    return st.dictionaries(name, body, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_crafted_consume_queues_never_break_the_check(log, data):
    root, written = log
    topics = data.draw(st.lists(st.sampled_from([b"T0", b"T1", b"X", b"T\xff", "主题".encode()]), min_size=1,
                                max_size=3, unique=True))
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(root / "dledger-n0", os.path.join(tmp, "dledger-n0"))
        for topic in topics:
            for qname in data.draw(st.lists(st.sampled_from([b"0", b"1", b"2", "²".encode(), b"-1", b"00",
                                                             b"99999999999"]), max_size=2, unique=True)):
                qdir = os.path.join(os.fsencode(tmp), b"consumequeue", topic, qname)
                os.makedirs(qdir, exist_ok=True)
                for fname, body in data.draw(queue_files(written)).items():
                    with open(os.path.join(qdir, fname.encode()), "wb") as fh:
                        fh.write(body)
        b = resolve_broker(tmp)
        got = check.check_broker(b)
        rows = check.topic_rows(b, notes=[])
        json.dumps([got, rows], ensure_ascii=False).encode("utf-8")  # (no lone surrogates)
        if check._columns is not None:
            saved, check._columns = check._columns, None
            try:
                assert check.check_broker(b) == got
            finally:
                check._columns = saved
