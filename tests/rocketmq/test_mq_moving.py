"""``mq migrate``'s batch pass (store/rocketmq/moving.py) and the batch commit-log writer
(commitlog.CommitLogWriter): held byte for byte to the message-at-a-time writer the move had
before (tests/support/rmq_onebyone.py), through file rolls and blanks at every boundary, in
batches cut anywhere, with the compiled copy and without it; the index keys a batch gives
(index.take_keys) against message.decode's; the id map's rows where the compiled path
leaves a message to the decoder."""

from __future__ import annotations

import csv
import os
import shutil
import struct

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from store.filestore import FileStore
from store.rocketmq import commitlog
from store.rocketmq.commitlog import CommitLogWriter, MessageTooLarge
from store.rocketmq.index import index_hashes, message_keys, take_keys
from store.rocketmq.layout import resolve_broker
from store.rocketmq.message import TRANSACTION_ROLLBACK_TYPE, decode
from store.rocketmq.migrate import migrate
from store.rocketmq.scan import items
from tests.support.rmq_encode import encode_message
from tests.support.rmq_onebyone import OneByOneWriter
from tests.support.rmq_store import commitlog_walk, write_broker_store

compiled_place = pytest.mark.skipif(commitlog._placing is None, reason="store.rocketmq._placing is not built")


def tree(d: str) -> dict[str, bytes]:
    out = {}
    for n in sorted(os.listdir(d)):
        with open(os.path.join(d, n), "rb") as fh:
            out[n] = fh.read()
    return out


def blob(k: int, n: int) -> bytes:
    """A message-like run of ``n`` bytes (TOTALSIZE and a fill; the writer reads no field)."""
    return struct.pack(">i", n) + bytes([k % 251 + 1]) * (n - 4)


@st.composite
def runs(draw):
    file_size = draw(st.one_of(st.integers(45, 160), st.integers(45, 400)))
    sizes = draw(st.lists(st.integers(36, file_size - 8), min_size=1, max_size=40))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(sizes)), max_size=6))))
    gaps = draw(st.lists(st.integers(0, 60), min_size=len(sizes), max_size=len(sizes)))
    return file_size, sizes, cuts, gaps, draw(st.integers(0, 2)), draw(st.sampled_from([1 << 20, 1, 100]))


def _write_both(base: str, file_size: int, sizes: list[int], cuts: list[int], gaps: list[int], start_files: int,
                chunk: int):
    start = start_files * file_size
    ref, new = os.path.join(base, "ref"), os.path.join(base, "new")
    one = OneByOneWriter(ref, file_size, start)
    want = [one.append(blob(k, n)) for k, n in enumerate(sizes)]
    one.close()
    w = CommitLogWriter(new, file_size, start)
    w.CHUNK = chunk
    got = []
    for lo, hi in zip([0] + cuts, cuts + [len(sizes)]):
        if lo == hi:
            continue
        # the batch's messages in a buffer as entries lie in a data file: a header (a gap) before each
        buf, at = bytearray(), []
        for k in range(lo, hi):
            buf += b"\xee" * gaps[k]
            at.append(len(buf))
            buf += blob(k, sizes[k])
        got += w.append_many(bytes(buf), np.array(at, np.int64), np.array(sizes[lo:hi], np.int64)).tolist()
    w.close()
    return (want, one.files, one.blanks, tree(ref)), (got, w.files, w.blanks, tree(new))


@settings(max_examples=300, deadline=None)
@given(runs(), st.booleans())
@example((100, [40, 52, 40], [], [0, 0, 0], 0, 1 << 20), True)  # 40 + 52 + 8 = 100: fits exactly, then a blank of 8
@example((100, [40, 53, 92, 92], [1, 2], [48, 48, 48, 48], 1, 1), True)  # 53 + 8 > 60: a blank of 60; 92 fills one
@example((100, [40, 53, 47], [], [0, 0, 0], 0, 1 << 20), True)  # 53 + 8 = 61 > 60 in one batch: a blank of 60
@example((45, [37, 37, 36], [2], [0, 0, 0], 0, 1), False)  # each alone in a file of 45 (a blank of 8, then of 9)
def test_the_batch_writer_writes_what_the_one_by_one_writer_wrote(tmp_path_factory, run, compiled):
    if compiled and commitlog._placing is None:
        compiled = False
    base = str(tmp_path_factory.mktemp("w"))
    saved = commitlog.place
    commitlog.place = commitlog._placing.place if compiled else commitlog._place_py
    try:
        want, got = _write_both(base, *run)
    finally:
        commitlog.place = saved
        shutil.rmtree(base)
    assert got[:3] == want[:3]
    assert list(got[3]) == list(want[3])
    for name in want[3]:
        assert got[3][name] == want[3][name], name


@compiled_place
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(36, 120), min_size=1, max_size=12), st.data())
def test_the_compiled_copy_is_the_pythons(sizes, data):
    buf = bytes(data.draw(st.binary(min_size=sum(sizes), max_size=sum(sizes) + 50)))
    at = np.cumsum([0] + sizes[:-1]).astype(np.int64)
    sizes_a = np.array(sizes, np.int64)
    dst = sum(sizes) - np.cumsum(sizes).astype(np.int64) if data.draw(st.booleans()) else at  # (back to front)
    phy = np.array(data.draw(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=len(sizes),
                                      max_size=len(sizes))), np.int64)
    outs = []
    for place in (commitlog._placing.place, commitlog._place_py):
        out = bytearray(sum(sizes) + 8)
        place(buf, at, sizes_a, out, dst, phy)
        outs.append(bytes(out))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("place", ["compiled", "python"])
def test_a_range_outside_the_buffers_is_refused(place):
    if place == "compiled" and commitlog._placing is None:
        pytest.skip("store.rocketmq._placing is not built")
    fn = commitlog._placing.place if place == "compiled" else commitlog._place_py
    one = lambda v: np.array([v], np.int64)  # noqa: E731
    for args in ((b"x" * 50, one(10), one(50), bytearray(100), one(0)),  # past the source
                 (b"x" * 50, one(0), one(50), bytearray(40), one(0)),  # past the output
                 (b"x" * 50, one(-1), one(40), bytearray(100), one(0)),
                 (b"x" * 50, one(0), one(30), bytearray(100), one(0))):  # no room for PHYSICALOFFSET
        with pytest.raises(ValueError):
            fn(*args, one(7))


def test_a_message_too_large_for_a_file_writes_nothing(tmp_path):
    w = CommitLogWriter(str(tmp_path / "cl"), 100)
    with pytest.raises(MessageTooLarge, match="a message of 93 bytes does not fit in a commit-log file of 100 bytes"):
        w.append_many(blob(0, 40) + blob(1, 93), np.array([0, 40], np.int64), np.array([40, 93], np.int64))
    assert os.listdir(tmp_path / "cl") == [] and w.offset == 0 and w.files == 0


# -- the whole move, byte for byte ---------------------------------------------------------

def specs(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        props = {"UNIQ_KEY": f"U{seed}-{i:05d}", "TAGS": f"t{i % 3}"}
        if i % 5:
            props["KEYS"] = " ".join(f"k{int(x)}" for x in rng.integers(0, 50, int(rng.integers(1, 4))))
        out.append({"topic": f"T{i % 3}", "queue_id": i % 2, "body": bytes([i % 251]) * int(rng.integers(0, 900)),
                    "properties": props, "store_timestamp": 1700000000000 + i * 700,
                    "store_host": "[2001:db8::9]:10911" if i % 7 == 3 else "10.0.0.2:10911", "v2": i % 11 == 5})
    return out


@pytest.mark.parametrize("seed,cl", [(1, 2048), (2, 1111), (3, 4096), (4, 64 << 10)])
def test_the_move_writes_the_log_the_one_by_one_pass_wrote(tmp_path, seed, cl):
    """Messages over several data files (so several batches), moved into small commit-log
    files: the new log is what the message-at-a-time writer makes of SRC's messages."""
    sp = specs(300, seed)
    write_broker_store(str(tmp_path / "src"), sp, data_file_size=16 << 10)
    broker = resolve_broker(str(tmp_path / "src"))
    s = migrate(broker, str(tmp_path / "ms"), commitlog_file_size=cl)
    names = sorted(os.listdir(tmp_path / "ms" / "commitlog"))
    one = OneByOneWriter(str(tmp_path / "ref"), cl, int(names[0]))
    for it in items(broker.node_dir):
        at = it.pos - int(it.file.split("/")[-1]) + 48
        one.append(bytes(it.buf[at:at + it.message.size]))
    one.close()
    assert (s.messages, s.files, s.blanks) == (len(sp), one.files, one.blanks) and s.blanks > 0
    assert tree(str(tmp_path / "ms" / "commitlog")) == tree(str(tmp_path / "ref"))


# -- index keys a batch at a time ------------------------------------------------------------

@st.composite
def keyed(draw):
    """A message whose topic, UNIQ_KEY and KEYS may be anything: non-ASCII, astral, not UTF-8,
    empty, repeated, spaced; sometimes a rollback."""
    text = st.sampled_from([b"a", b"k1 k2", b" k1  k2 ", b"  ", "ключ 键".encode(), b"x\xffy", b"\xed\xa0\x80",
                            "\U0001F600 z".encode(), b"a,b\"c", b"k" * 300])
    pairs = draw(st.lists(st.tuples(st.sampled_from([b"UNIQ_KEY", b"KEYS", b"TAGS", b""]),
                                    st.one_of(text, st.just(b""))), max_size=4))
    props = b"\x02".join(k + b"\x01" + v for k, v in pairs) + (b"\x02" if pairs and draw(st.booleans()) else b"")
    topic = draw(st.sampled_from([b"T", "主题".encode(), b"t\xfe", "\U0001F600".encode()]))
    raw = encode_message(topic="X", body=b"b" * draw(st.integers(0, 30)), v2=draw(st.booleans()),
                         sys_flag=draw(st.sampled_from([0, TRANSACTION_ROLLBACK_TYPE, 4])),
                         store_host=draw(st.sampled_from(["1.2.3.4:5", "[::1]:7"])),
                         store_timestamp=draw(st.integers(0, 1 << 45)))
    m = decode(raw)
    tl = 2 if m.version == "v2" else 1
    out = bytearray(raw[:m.body_at + m.body_size] + (struct.pack(">h", len(topic)) if tl == 2 else bytes([len(topic)]))
                    + topic + struct.pack(">h", len(props)) + props)
    struct.pack_into(">i", out, 0, len(out))
    return bytes(out)


@settings(max_examples=400, deadline=None)
@given(st.lists(keyed(), min_size=1, max_size=8))
def test_a_batchs_keys_are_decodes_the_compiled_ones_and_the_slow_ones_alike(blobs):
    buf = b"".join(blobs)
    at = np.cumsum([0] + [len(b) for b in blobs[:-1]]).astype(np.int64)
    lens = np.array([len(b) for b in blobs], np.int64)
    counts, hashes, kc = take_keys(buf, at, lens)
    want_keys, want_ts = [], []
    for raw in blobs:
        m = decode(raw)
        p = m.properties
        want_keys.append(message_keys(m.topic, m.sys_flag, p.get("UNIQ_KEY"), p.get("KEYS")))
        want_ts.append(m.store_timestamp)
    assert counts.tolist() == [len(k) for k in want_keys] == kc.count.tolist()
    flat = [k for ks in want_keys for k in ks]
    assert hashes.tolist() == (index_hashes(flat).tolist() if flat else [])
    assert kc.store_ts.tolist() == want_ts


# -- refusals and the id map's slow rows -----------------------------------------------------

def _with_raw_entries(root, specs_, raws, committed_back: int = 0):
    """A store of ``specs_``, then entries of the raw bodies ``raws`` appended after them."""
    write_broker_store(str(root), specs_)
    store = FileStore.open(str(root / "dledger-n0"))
    try:
        store.append_leader(raws, 1)
        store.set_committed(store.end_index - committed_back)
    finally:
        store.close()


def test_an_id_map_row_of_a_uniq_key_that_is_not_utf8_or_holds_a_comma(tmp_path):
    sp = [{"topic": "T", "body": b"a", "properties": {"UNIQ_KEY": "A,B\"C"}},
          {"topic": "T", "body": b"b", "store_host": "[::1]:9"}]
    bad = bytearray(encode_message(topic="T", properties={"UNIQ_KEY": "Qx"}, store_host="1.2.3.4:5"))
    bad[bad.index(b"Qx") + 1] = 0xFF  # (decode reads it as Java does: U+FFFD)
    _with_raw_entries(tmp_path / "src", sp, [bytes(bad)])
    broker = resolve_broker(str(tmp_path / "src"))
    migrate(broker, str(tmp_path / "ms"), commitlog_file_size=4096, id_map=str(tmp_path / "ids.csv"))
    with open(tmp_path / "ids.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    old = [it.message for it in items(broker.node_dir)]
    new = [decode(b, p, n) for _start, b, p, n in commitlog_walk(tmp_path / "ms")]
    assert rows[1:] == [[o.msg_id, m.msg_id, o.uniq_key or ""] for o, m in zip(old, new)]
    assert [r[2] for r in rows[1:]] == ["A,B\"C", "", "Q\ufffd"] and len(rows[2][0]) == 56


def _store_files(root) -> dict[str, bytes]:
    """Every file under ``root`` by its path, but index/ files by their order (their names are
    the time they were made)."""
    out = {}
    for d, _, names in os.walk(root):
        for k, n in enumerate(sorted(names)):
            rel = os.path.relpath(os.path.join(d, n), root)
            key = f"index/#{k}" if rel.startswith("index" + os.sep) else rel
            with open(os.path.join(d, n), "rb") as fh:
                out[key] = fh.read()
    return out


def test_without_the_compiled_modules_the_move_writes_the_same_store(tmp_path, monkeypatch):
    from store.rocketmq import columns
    sp = specs(200, 7)
    sp[3]["properties"]["KEYS"] = "ключ 键 \U0001F600"
    write_broker_store(str(tmp_path / "src"), sp, data_file_size=16 << 10)
    broker = resolve_broker(str(tmp_path / "src"))
    kw = dict(commitlog_file_size=2048, max_hash_slot_num=101, max_index_num=400, id_map=None)
    migrate(broker, str(tmp_path / "fast"), **kw)
    monkeypatch.setattr(columns, "_columns", None)
    monkeypatch.setattr(commitlog, "place", commitlog._place_py)
    migrate(broker, str(tmp_path / "slow"), **kw)
    fast, slow = _store_files(tmp_path / "fast"), _store_files(tmp_path / "slow")
    assert sorted(fast) == sorted(slow) and any(k.startswith("index/#1") for k in fast)
    for k in fast:
        assert fast[k] == slow[k], k


@pytest.mark.skipif(commitlog._placing is None, reason="store.rocketmq._placing is not built")
@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, (1 << 31) - 1), st.integers(-5, 1 << 40),
                                   st.integers(-3000, 1 << 42)), max_size=30), min_size=1, max_size=5),
       st.integers(1, 13), st.integers(2, 40))
def test_the_compiled_key_placing_writes_the_index_the_numpy_one_wrote(tmp_path_factory, batches_, slots, index_num):
    """Hashes in a few slots (chains), times before and after a file's begin time, files that
    fill (a new one begins where the full one ended), batches of keys one after another."""
    from store.rocketmq import index as index_mod
    base = str(tmp_path_factory.mktemp("ix"))
    got = []
    try:
        for placing in (commitlog._placing, None):
            index_mod._placing, saved = placing, index_mod._placing
            try:
                w = index_mod.IndexWriter(os.path.join(base, str(placing is None)), slots, index_num, now_millis=7)
                for keys in batches_:
                    a = np.array(keys, np.int64).reshape(-1, 3)
                    w.add_many(np.ones(len(a), np.int64), a[:, 0], a[:, 1], a[:, 2])
                    w._flush()
                w.close()
            finally:
                index_mod._placing = saved
            got.append([open(f, "rb").read() for f in w.files])
    finally:
        shutil.rmtree(base)
    assert got[0] == got[1]
