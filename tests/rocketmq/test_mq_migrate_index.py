"""``mq migrate`` rebuilds the broker's ``index/`` (store/rocketmq/index.py): byte for byte what
RocketMQ's ``IndexFile.putKey`` makes (a literal reference below, written from IndexFile.java,
IndexHeader.java and IndexService.buildIndex of rocketmq-all-4.9.4; 4.9.8's are the same),
through file rolls and slot chains across write batches; every key found by the index
reader the way ``queryMessage`` looks; rollback messages not indexed, prepared ones indexed;
messages past every queue's end left to the broker (said); a default-size file sparse.
RocketMQ's own ``queryMessage`` on a migrated store is tests/java/test_mq_migrate_java.py."""

from __future__ import annotations

import json
import os
import struct

from typer.testing import CliRunner

from dledgerctl.app import app
from store.metafiles import read_checkpoint, write_checkpoint
from store.rocketmq import index as index_mod
from store.rocketmq.layout import resolve_broker
from store.rocketmq.lookup import open_index
from store.rocketmq.message import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, tags_code
from store.rocketmq.migrate import migrate
from tests.rocketmq.test_mq_commitment import unpoint
from tests.support.rmq_store import commitlog_walk, write_broker_store

runner = CliRunner()
CL = 16 << 10


def specs(n=90):
    out = []
    for i in range(n):
        props = {"TAGS": f"t{i % 4}", "UNIQ_KEY": f"7F00000100002A9F0000{i:012X}"}
        if i % 5:
            props["KEYS"] = f"order-{i} user-{i % 7}  shop-é{i % 3}"  # (two spaces: an empty key, skipped)
        out.append({"topic": f"T{i % 3}", "queue_id": i % 2, "body": b"m%d" % i, "properties": props,
                    "store_timestamp": 1700000000000 + i * 1700})
    return out


def expected_keys(spec) -> list[str]:
    t, p = spec["topic"], spec["properties"]
    if spec.get("sys_flag", 0) & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_ROLLBACK_TYPE:
        return []
    out = [f"{t}#{p['UNIQ_KEY']}"] if "UNIQ_KEY" in p else []
    return out + [f"{t}#{k}" for k in p.get("KEYS", "").split(" ") if k]


def reference(entries, slots, num) -> list[bytes]:
    """IndexFile.putKey and IndexService's roll, literally, one key at a time."""
    files = []
    buf = None
    hdr = None  # [beginTs, endTs, beginPhy, endPhy, slotCount, indexCount]

    def close():
        struct.pack_into(">qqqqii", buf, 0, *hdr)
        files.append(bytes(buf))

    for key, phy, ts in entries:
        if buf is None or hdr[5] >= num:
            end_phy, end_ts = (hdr[3], hdr[1]) if hdr else (0, 0)
            if buf is not None:
                close()
            buf = bytearray(40 + slots * 4 + num * 20)
            hdr = [0, 0, 0, 0, 0, 1]
            if end_phy > 0:
                hdr[2] = hdr[3] = end_phy
            if end_ts > 0:
                hdr[0] = hdr[1] = end_ts
        h = tags_code(key)
        h = 0 if h == -(1 << 31) else abs(h)
        slot_at = 40 + (h % slots) * 4
        (sv,) = struct.unpack_from(">i", buf, slot_at)
        if sv <= 0 or sv > hdr[5]:
            sv = 0
        diff = int((ts - hdr[0]) / 1000)
        if hdr[0] <= 0:
            diff = 0
        diff = max(0, min(diff, (1 << 31) - 1))
        struct.pack_into(">iqii", buf, 40 + slots * 4 + hdr[5] * 20, h, phy, diff, sv)
        struct.pack_into(">i", buf, slot_at, hdr[5])
        if hdr[5] <= 1:
            hdr[2], hdr[0] = phy, ts
        if sv == 0:
            hdr[4] += 1
        hdr[5] += 1
        hdr[3], hdr[1] = phy, ts
    if buf is not None:
        close()
    return files


def moved(tmp_path, all_specs, **kw):
    src = tmp_path / "src"
    written = write_broker_store(str(src), all_specs, data_file_size=64 << 10)
    dest = tmp_path / "ms"
    s = migrate(resolve_broker(str(src), None), str(dest), commitlog_file_size=CL, **kw)
    return written, dest, s


def new_offsets(dest) -> list[int]:
    return [start + p for start, _b, p, _size in commitlog_walk(dest)]


def test_index_files_are_byte_for_byte_what_putkey_makes_through_rolls(tmp_path, monkeypatch):
    monkeypatch.setattr(index_mod, "BATCH", 7)  # (slot chains across write batches)
    sp = specs()
    written, dest, s = moved(tmp_path, sp, max_hash_slot_num=11, max_index_num=40)
    offs = new_offsets(dest)
    entries = [(k, offs[i], sp[i]["store_timestamp"]) for i in range(len(sp)) for k in expected_keys(sp[i])]
    want = reference(entries, 11, 40)
    names = sorted(os.listdir(dest / "index"))
    assert len(names) == len(want) > 3 and s.index_files == len(want) and s.index_keys == len(entries)
    assert all(len(n) == 17 and n.isdigit() for n in names)
    for name, w in zip(names, want):
        with open(dest / "index" / name, "rb") as fh:
            assert fh.read() == w, name
    with open(dest / "checkpoint", "rb") as fh:
        assert struct.unpack_from(">qqq", fh.read()) == (sp[-1]["store_timestamp"],) * 3


def test_every_key_is_found_in_a_default_size_sparse_index(tmp_path):
    sp = specs()
    written, dest, s = moved(tmp_path, sp)
    (name,) = os.listdir(dest / "index")
    st = os.stat(dest / "index" / name)
    assert st.st_size == 40 + 5_000_000 * 4 + 20_000_000 * 20
    assert st.st_blocks * 512 < 32 << 20  # (holes: only touched pages are allocated)
    files = open_index(str(dest))
    offs = new_offsets(dest)
    by_key: dict[str, set] = {}
    for i, w in enumerate(sp):
        for k in expected_keys(w):
            by_key.setdefault(k, set()).add(offs[i])
    assert any(len(v) > 1 for v in by_key.values())
    for k, want in by_key.items():
        assert set(files[0].offsets(k)) == want, k
    r = runner.invoke(app, ["mq", "migrate", str(tmp_path / "src"), str(tmp_path / "ms2"), "--format", "json",
                            "--commitlog-file-size", CL])
    row = json.loads(r.stdout)[0]
    assert (row["index_files"], row["index_keys"]) == (1, sum(map(len, by_key.values())))


def test_rollback_is_not_indexed_prepared_is_and_the_tail_past_every_queue_is_left_to_the_broker(tmp_path):
    sp = specs(12)
    sp[3]["sys_flag"] = TRANSACTION_ROLLBACK_TYPE
    sp[4]["sys_flag"] = TRANSACTION_PREPARED_TYPE
    tail = {"topic": "T0", "body": b"half", "sys_flag": TRANSACTION_PREPARED_TYPE, "store_timestamp": 1700000099000,
            "properties": {"KEYS": "late", "UNIQ_KEY": "U-late"}}
    written, dest, s = moved(tmp_path, sp + [tail])
    offs = new_offsets(dest)
    files = open_index(str(dest))
    assert files[0].offsets(f"T0#{sp[3]['properties']['UNIQ_KEY']}") == []
    assert files[0].offsets(f"T1#{sp[4]['properties']['UNIQ_KEY']}") == [offs[4]]
    assert files[0].offsets("T0#late") == [] and files[0].offsets("T0#U-late") == []
    assert s.index_keys == sum(len(expected_keys(w)) for w in sp)
    assert "1 messages past the end of every consume queue not indexed" in "; ".join(s.notes)


def test_java_string_hash_of_non_ascii_and_astral_keys():
    keys = ["a#b", "主题-ü#标签", "T#\U0001F600k", "polygenelubricants", "x" * 400]
    assert [int(h) for h in index_mod.java_hashes(keys)] == [tags_code(k) for k in keys]
    assert int(index_mod.index_hashes(["polygenelubricants"])[0]) == 0  # (hashCode is Integer.MIN_VALUE)


def test_a_followers_cut_moves_the_dispatch_point_and_the_index_follows_it(tmp_path):
    """The last committed message has no unit (a prepared half) and the units after it are
    of left-out entries: the broker dispatches from the end of the last kept unit, so the
    half is left to it (the index is made again from the new log for that end)."""
    sp = specs(12)
    half = {"topic": "T0", "body": b"half", "sys_flag": TRANSACTION_PREPARED_TYPE, "store_timestamp": 1700000099000,
            "properties": {"KEYS": "late", "UNIQ_KEY": "U-late"}}
    after = [{"topic": "T1", "queue_id": 1, "body": b"after", "properties": {"KEYS": "after"}}] * 2
    src = tmp_path / "src"
    written = write_broker_store(str(src), sp + [half] + after)
    node = src / "dledger-n0"
    cp = read_checkpoint(str(node))
    write_checkpoint(str(node), cp.end_index, written[12]["index"])
    unpoint(src, written[13]["phy_offset"])  # (only committed entries are dispatched)
    s = migrate(resolve_broker(str(src), None), str(tmp_path / "ms"), commitlog_file_size=CL)
    assert (s.messages, s.left_out) == (13, 2)
    files = open_index(str(tmp_path / "ms"))
    offs = new_offsets(tmp_path / "ms")
    assert files[0].offsets("T0#late") == [] and files[0].offsets("T1#after") == []
    assert files[0].offsets(f"T2#{sp[11]['properties']['UNIQ_KEY']}") == [offs[11]]
    assert s.index_keys == sum(len(expected_keys(w)) for w in sp)
    assert "1 messages past the end of every consume queue not indexed" in "; ".join(s.notes)
