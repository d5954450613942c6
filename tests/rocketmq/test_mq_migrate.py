"""``mq migrate`` on stores this project writes (tests/support/rmq_store.py): the bytes of the new
commit log (each message as it was but for PHYSICALOFFSET; RocketMQ's blank record ending a
file), consume queues at the same queue offsets (a queue that starts past 0 keeps its file
names and fillPreBlank units), the checkpoint, and what it refuses. RocketMQ's own store
reading the result is tests/java/test_mq_migrate_java.py."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from store.metafiles import read_checkpoint, write_checkpoint
from store.rocketmq import commitlog
from store.rocketmq.commitlog import BLANK_MAGIC_CODE, CommitLogWriter
from store.rocketmq.message import decode
from store.rocketmq.migrate import temp_name
from tests.rocketmq.test_mq_commitment import unpoint
from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store, write_queue
from tests.support.stores import file_crcs

runner = CliRunner()
CL = 8 << 10


def invoke(*args):
    return runner.invoke(app, ["mq", "migrate", *map(str, args)])


def messages(n=120):
    return [{"topic": f"T{i % 3}", "queue_id": i % 2, "body": bytes([i % 251]) * (i * 37 % 700),
             "properties": {"KEYS": f"k{i}", "TAGS": f"t{i % 4}"}, "store_timestamp": 1700000000000 + i}
            for i in range(n)]


def log_messages(dest) -> list:
    """(offset, message bytes) of every message in DEST's commit log, walking as RocketMQ recovers."""
    out = []
    names = sorted(os.listdir(dest / "commitlog"))
    for n in names:
        with open(dest / "commitlog" / n, "rb") as fh:
            b = fh.read()
        assert len(b) == CL
        p = 0
        while p + 8 <= len(b):
            size, magic = struct.unpack_from(">ii", b, p)
            if magic == BLANK_MAGIC_CODE:
                assert size == len(b) - p
                break
            if size == 0:
                assert n == names[-1] and not any(b[p:])
                break
            out.append((int(n) + p, b[p:p + size]))
            p += size
    return out


def units(qdir) -> list:
    out = []
    for n in sorted(os.listdir(qdir)):
        with open(os.path.join(qdir, n), "rb") as fh:
            b = fh.read()
        out += [(int(n) // 20 + k, *struct.unpack_from(">qiq", b, k * 20)) for k in range(len(b) // 20)]
    return [u for u in out if u[2] > 0]


@pytest.fixture
def src(tmp_path):
    root = tmp_path / "src"
    written = write_broker_store(str(root), messages(), data_file_size=16 << 10, cq_units_per_file=16)
    os.makedirs(root / "config")
    (root / "config" / "topics.json").write_text('{"topicConfigTable": {}}')
    return root, written


def test_messages_move_byte_for_byte_but_their_offset(src, tmp_path):
    root, written = src
    before = file_crcs(root)
    dest = tmp_path / "dest"
    r = invoke(root, dest, "--commitlog-file-size", CL, "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert file_crcs(root) == before
    got = log_messages(dest)
    assert (s["messages"], s["files"], s["blanks"], s["left_out"]) == (len(written), len(os.listdir(
        dest / "commitlog")), len(os.listdir(dest / "commitlog")) - 1, 0)
    node = root / "dledger-n0" / "data"
    for (at, raw), w in zip(got, written):
        start = max(int(n) for n in os.listdir(node) if int(n) <= w["pos"])
        with open(node / f"{start:020d}", "rb") as fh:
            fh.seek(w["phy_offset"] - start)
            old = fh.read(w["size"])
        assert raw[:28] + raw[36:] == old[:28] + old[36:]
        assert decode(raw).phy_offset == at
    # consume queues: the same queue offsets, sizes and tag codes, at the new offsets
    new_at = {w["phy_offset"]: at for (at, _), w in zip(got, written)}
    for t in range(3):
        for q in range(2):
            old_u = units(root / "consumequeue" / f"T{t}" / str(q))
            new_u = units(dest / "consumequeue" / f"T{t}" / str(q))
            assert new_u == [(qo, new_at[off], size, tags) for qo, off, size, tags in old_u]
            assert sorted(os.listdir(dest / "consumequeue" / f"T{t}" / str(q))) == \
                sorted(os.listdir(root / "consumequeue" / f"T{t}" / str(q)))
    with open(dest / "checkpoint", "rb") as fh:
        cp = fh.read()
    assert len(cp) == 4096 and struct.unpack_from(">qqq", cp) == (1700000000119, 1700000000119, 1700000000119)
    assert (dest / "config" / "topics.json").read_text() == '{"topicConfigTable": {}}'
    assert sorted(os.listdir(tmp_path)) == ["dest", "src"]


def test_a_queue_that_starts_past_zero_keeps_its_file_names_and_blanks(tmp_path):
    root = tmp_path / "src"
    written = write_broker_store(str(root), [{"topic": "A", "body": b"m%d" % i} for i in range(5)],
                                 data_file_size=16 << 10)
    # queue A/0 as RocketMQ leaves it when its first unit was written at queue offset 37:
    # files of 16 units, the first named by byte 32 * 20, five fillPreBlank units, then the messages
    qdir = root / "consumequeue" / "A" / "0"
    for n in os.listdir(qdir):
        os.unlink(qdir / n)
    write_queue(str(root), "A", 0, [cq_unit(w["phy_offset"], w["size"], 0) for w in written], per_file=16, first=37,
                blanks=5)
    # and queue B/0: units of messages no longer in the log (the log's head deleted), then none
    write_queue(str(root), "B", 0, [cq_unit(1, 100, 0)] * 3, per_file=16, first=40)
    dest = tmp_path / "dest"
    r = invoke(root, dest, "--commitlog-file-size", CL)
    assert r.exit_code == 0, r.output
    # the log starts one file in, so the blanks (offset 0) lie below it, as RocketMQ's correctMinOffset needs
    assert sorted(os.listdir(dest / "commitlog")) == [f"{CL:020d}"] and f"the commit log starts at {CL}" in r.stdout
    assert sorted(os.listdir(dest / "consumequeue" / "A" / "0")) == [f"{32 * 20:020d}"]
    with open(dest / "consumequeue" / "A" / "0" / f"{32 * 20:020d}", "rb") as fh:
        b = fh.read()
    assert len(b) == 16 * 20
    assert [struct.unpack_from(">qiq", b, k * 20) for k in range(5)] == [(0, 2 ** 31 - 1, 0)] * 5
    assert [u[0] for u in units(dest / "consumequeue" / "A" / "0")][5:] == [37, 38, 39, 40, 41]
    # B: its end kept (43) with blanks, so consumer offsets up to it stay valid; (1, 1, 0) ones, whose
    # offset + size (RocketMQ's maxPhysicOffset for the queue) lies below the log (test_mq_migrate_blankq.py)
    b_units = units(dest / "consumequeue" / "B" / "0")
    assert [u[0] for u in b_units] == [32 + k for k in range(11)] and {u[1:] for u in b_units} == {(1, 1, 0)}


def test_uncommitted_entries_are_left_out_and_said(src, tmp_path):
    root, written = src
    node = str(root / "dledger-n0")
    cp = read_checkpoint(node)
    write_checkpoint(node, cp.end_index, written[99]["index"])
    unpoint(root, written[100]["phy_offset"])  # (the broker dispatched only the committed ones)
    dest = tmp_path / "dest"
    r = invoke(root, dest, "--commitlog-file-size", CL, "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert (s["messages"], s["left_out"], s["left_out_units"]) == (100, 20, 0)
    assert "left out 20 messages past the committed index" in r.stderr
    at = {off for off, _ in log_messages(dest)}
    assert len(at) == 100
    pointed = [u[1] for t in range(3) for q in range(2) for u in units(dest / "consumequeue" / f"T{t}" / str(q))]
    assert sorted(pointed) == sorted(at)


def test_refuses_a_dest_that_is_not_empty_and_leaves_nothing_on_failure(src, tmp_path):
    root, _ = src
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "x").write_text("keep me")
    r = invoke(root, dest)
    assert r.exit_code == 1 and "not empty" in r.stderr and (dest / "x").read_text() == "keep me"
    r = invoke(root, root / "inside")
    assert r.exit_code == 1 and "outside SRC" in r.stderr
    # a message that does not fit a file fails the move: no DEST, no temporary directory
    r = invoke(root, tmp_path / "d2", "--commitlog-file-size", 512)
    assert r.exit_code == 1 and "--commitlog-file-size" in r.stderr and "Traceback" not in r.output
    assert sorted(os.listdir(tmp_path)) == ["dest", "src"]
    # an empty DEST directory is taken
    empty = tmp_path / "empty"
    empty.mkdir()
    assert invoke(root, empty, "--commitlog-file-size", CL).exit_code == 0
    assert (empty / "commitlog").is_dir() and not os.path.exists(temp_name(str(empty)))


def test_without_a_committed_index_it_asks_for_include_uncommitted(src, tmp_path):
    root, _ = src
    for n in os.listdir(root / "dledger-n0"):
        if n.startswith("checkpoint"):
            os.unlink(root / "dledger-n0" / n)
    unpoint(root, 0)  # (nor does a queue prove any committed: test_mq_commitment.py)
    r = invoke(root, tmp_path / "dest")
    assert r.exit_code == 1 and "--include-uncommitted" in r.stderr
    r = invoke(root, tmp_path / "dest", "--include-uncommitted", "--commitlog-file-size", CL)
    assert r.exit_code == 0, r.output


def test_the_writer_rolls_as_rocketmq_does(tmp_path):
    w = CommitLogWriter(str(tmp_path / "cl"), 100)
    msg = lambda n: struct.pack(">ii", n, -626843481) + bytes(n - 8)  # noqa: E731
    assert [w.append(msg(40)), w.append(msg(52)), w.append(msg(92)), w.append(msg(40))] == [0, 40, 100, 200]
    w.close()
    names = sorted(os.listdir(tmp_path / "cl"))
    assert names == ["00000000000000000000", "00000000000000000100", "00000000000000000200"]
    with open(tmp_path / "cl" / names[0], "rb") as fh:
        b = fh.read()
    assert len(b) == 100 and struct.unpack_from(">q", b, 28 + 40)[0] == 40  # its PHYSICALOFFSET
    with open(tmp_path / "cl" / names[1], "rb") as fh:
        b = fh.read()
    assert struct.unpack_from(">ii", b, 92) == (8, BLANK_MAGIC_CODE)  # 92 + 8 fits exactly: no blank before it
    assert (w.files, w.blanks) == (3, 2)
    with pytest.raises(FileExistsError):
        CommitLogWriter(str(tmp_path / "cl"), 100)  # not empty


def listed(path, *args) -> list[dict]:
    """mq messages' rows; a search that finds nothing exits 1 (as grep), with no rows."""
    r = runner.invoke(app, ["mq", "messages", str(path), "--format", "json", *map(str, args)])
    rows = json.loads(r.stdout)
    assert r.exit_code == (0 if rows else 1), r.output
    return rows


def test_mq_check_reads_the_migrated_store_and_names_damage_in_commitlog(src, tmp_path):
    root, written = src
    dest = tmp_path / "dest"
    assert invoke(root, dest, "--commitlog-file-size", CL).exit_code == 0
    r = runner.invoke(app, ["mq", "check", str(dest)])
    assert r.exit_code == 0, r.output
    assert f"{len(written)} messages" in r.stderr and "0 findings" in r.stderr
    r = runner.invoke(app, ["mq", "topics", str(dest), "--format", "json"])
    assert r.exit_code == 0 and sum(t["messages"] for t in json.loads(r.stdout)) == len(written)
    r = invoke(dest, tmp_path / "again")
    assert r.exit_code == 1 and "a master-slave store already" in r.stderr and not (tmp_path / "again").exists()
    # mq messages: the same messages, read from commitlog/ (each at its new offset)
    before = listed(root)
    after = listed(dest)
    moved = ("pos", "phy_offset", "msg_id")
    assert [{k: v for k, v in m.items() if k not in moved} for m in after] == \
        [{k: v for k, v in m.items() if k not in moved} for m in before if m["kind"] == "message"]
    assert [m["phy_offset"] for m in after] == [at for at, _ in log_messages(dest)]
    assert all(m["msg_id"].endswith(f"{m['phy_offset']:016X}") for m in after)
    # read by offset, as the broker reads one (no walk from the first file: the ordinal is not known)
    one = after[40]
    by_offset = one | {"index": None}
    assert listed(dest, "--msg-id", one["msg_id"]) == [by_offset | {"matched": "msg_id"}]
    assert listed(dest, "--topic", one["topic"], "--queue-id", one["queue_id"], "--queue-offset",
                    one["queue_offset"]) == [by_offset]
    keyed = [m for m in after if m["keys"]]
    if keyed:  # (through the rebuilt index/)
        k = keyed[0]["keys"].split()[0]
        assert listed(dest, "--topic", keyed[0]["topic"], "--key", k) == \
            [m | {"index": None} for m in after if m["topic"] == keyed[0]["topic"] and k in (m["keys"] or "").split()]
    # ... so the first file may be damaged: a message of a later one is still found
    first = sorted(os.listdir(dest / "commitlog"))[0]
    assert one["phy_offset"] >= CL
    with open(dest / "commitlog" / first, "r+b") as fh:
        head = fh.read(8)
        fh.seek(0)
        fh.write(b"\xff" * 8)
    assert listed(dest, "--msg-id", one["msg_id"]) == [by_offset | {"matched": "msg_id"}]
    # no message starts there: taken for a UNIQ_KEY then, which no message has
    assert listed(dest, "--msg-id", f"{one['msg_id'][:-16]}{one['phy_offset'] + 1:016X}") == []
    with open(dest / "commitlog" / first, "r+b") as fh:
        fh.write(head)
    # a changed body byte: body-crc, at the message's byte in its commit-log file
    at, raw = log_messages(dest)[50]
    m = decode(raw)
    name = f"{at - at % CL:020d}"
    with open(dest / "commitlog" / name, "r+b") as fh:
        fh.seek(at % CL + m.body_at)
        b = fh.read(1)
        fh.seek(at % CL + m.body_at)
        fh.write(bytes([b[0] ^ 1]))
    r = runner.invoke(app, ["mq", "check", str(dest), "--format", "json"])
    found = json.loads(r.stdout)
    assert r.exit_code == 1 and [(f["finding"], f["file"], f["offset"]) for f in found] == \
        [("body-crc", f"commitlog/{name}", at % CL)]


def test_refuses_a_store_a_running_broker_holds(src, tmp_path):
    root, _ = src
    (root / "lock").write_bytes(b"lock")
    # what DefaultMessageStore.start does: FileChannel.tryLock(0, 1, false), a POSIX lock of byte 0, in another process
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys\n"
                               f"fd = os.open({str(root / 'lock')!r}, os.O_RDWR)\n"
                               "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
                               "print('locked', flush=True)\nsys.stdin.read()\n"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = invoke(root, tmp_path / "dest")
        assert r.exit_code == 1 and "a running broker holds its lock file" in r.stderr
        assert not (tmp_path / "dest").exists()
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert invoke(root, tmp_path / "dest", "--commitlog-file-size", CL).exit_code == 0  # stopped: it moves
    assert (root / "lock").read_bytes() == b"lock"


def test_a_commit_log_file_size_rocketmq_cannot_map_is_a_usage_error(src, tmp_path):
    root, _ = src
    r = invoke(root, tmp_path / "dest", "--commitlog-file-size", "2GiB")
    assert r.exit_code == 2 and "--commitlog-file-size" in r.stderr and "Java int" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_v2_and_compressed_messages_move_unchanged_from_a_node_directory(tmp_path):
    root = tmp_path / "src"
    specs = [{"topic": "主题" * 30, "body": b"v2 " * 50, "v2": True},
             {"topic": "Z", "body": b"zlib " * 200, "compress": "zlib"},
             {"topic": "Z", "body": b"lz4 " * 200, "compress": "lz4", "v2": True},
             {"topic": "Z", "body": b"zstd " * 200, "compress": "zstd", "v2": True},
             {"topic": "Z", "body": b"", "store_host": "[2001:db8::1]:10911"}]
    written = write_broker_store(str(root), specs, data_file_size=16 << 10)
    dest = tmp_path / "dest"
    r = invoke(root / "dledger-n0", dest, "--commitlog-file-size", CL, "--format", "json")  # (the node directory)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["messages"] == len(specs)
    got = log_messages(dest)
    with open(root / "dledger-n0" / "data" / f"{0:020d}", "rb") as fh:
        data = fh.read()
    for (at, raw), w in zip(got, written):
        old = data[w["phy_offset"]:w["phy_offset"] + w["size"]]
        assert raw[:28] + raw[36:] == old[:28] + old[36:] and decode(raw).phy_offset == at
    assert [decode(raw).version for _, raw in got] == ["v2", "v1", "v2", "v2", "v1"]


def test_a_commit_log_is_read_a_bounded_batch_at_a_time_with_the_same_results(src, tmp_path, monkeypatch):
    """A commit-log file may hold millions of messages: commitlog.batches yields at most
    BATCH of them at a time; what the commands make of them does not depend on it."""
    root, written = src
    dest = tmp_path / "dest"
    assert invoke(root, dest, "--commitlog-file-size", CL).exit_code == 0

    def results():
        check = runner.invoke(app, ["mq", "check", str(dest), "--format", "json"])
        assert check.exit_code == 0, check.output
        return listed(dest), check.stderr, listed(dest, "--topic", "T1", "--format", "json")

    whole = results()
    monkeypatch.setattr(commitlog, "BATCH", 3)
    sizes = [len(b) for b in commitlog.batches(str(dest / "commitlog"))]
    assert max(sizes) == 3 and sum(sizes) == len(written)
    assert results() == whole
    again = tmp_path / "again"  # (and rebuild, whose index pass reads the new log)
    shutil.copytree(dest, again)
    r = runner.invoke(app, ["mq", "rebuild", str(again), "--format", "json"])
    assert r.exit_code == 0, r.output


def test_the_progress_says_each_step_the_bytes_do_not_measure(src, tmp_path):
    """The bar stood at 582/592 MB while the index was written (issue 58): the steps after the
    messages are said by name."""
    from store.rocketmq.layout import resolve_broker
    from store.rocketmq.migrate import migrate

    class Recorder:
        def __init__(self):
            self.done, self.steps = 0, []

        def __call__(self, n):
            self.done += n

        def step(self, text):
            self.steps.append((self.done, text))

    rec = Recorder()
    migrate(resolve_broker(str(src[0])), str(tmp_path / "dest"), commitlog_file_size=CL, progress=rec)
    names = [t for _d, t in rec.steps]
    assert names[:2] == ["finishing the commit log and index", "writing the consume queues"], names
    assert all(done == rec.done for done, _t in rec.steps)  # (each after every byte was counted)


def test_a_store_migrated_from_an_empty_log_is_checked_as_empty(tmp_path):
    """A log whose checkpoint said committed index -1 moves to a commitlog/ with no file; mq check
    said 'no commit-log file' of it (issue 59 item 11): it is a store with no message yet."""
    from store.filestore import FileStore
    src = tmp_path / "src"
    FileStore.open(str(src / "dledger-n0")).close()
    os.makedirs(src / "consumequeue")
    r = invoke(src, tmp_path / "dest")
    assert r.exit_code == 0, r.output
    assert os.listdir(tmp_path / "dest" / "commitlog") == []
    for cmd in ("check", "topics", "messages"):
        r = runner.invoke(app, ["mq", cmd, str(tmp_path / "dest")])
        assert r.exit_code == 0, (cmd, r.output)
    assert "0 findings" in runner.invoke(app, ["mq", "check", str(tmp_path / "dest")]).stderr


def test_a_group_moves_at_one_cut_with_an_epoch_each_replica_keeps(src, tmp_path):
    """--cut moves the entries up to the group's committed index whatever this replica's own
    checkpoint says; --controller-mode writes the epoch file (epoch 0 from the log's first
    offset). A replica that proves entries past the cut committed is refused (issue 60)."""
    root, written = src
    cp = read_checkpoint(str(root / "dledger-n0")).committed_index
    r = runner.invoke(app, ["mq", "migrate", str(root), str(tmp_path / "a"), "--cut", str(cp - 10),
                            "--controller-mode", "--format", "json"])
    assert r.exit_code == 1 and "past --cut" in r.stderr and not os.path.exists(tmp_path / "a"), r.output
    from store.filestore import FileStore
    with FileStore.open(str(root / "dledger-n0"), read_only=True) as s:
        end, (pos, _size) = s.end_index, s.locate(cp - 9)
    write_checkpoint(str(root / "dledger-n0"), end, cp - 10)  # (a follower whose checkpoint lags the group's)
    unpoint(str(root), pos + 48)
    r = runner.invoke(app, ["mq", "migrate", str(root), str(tmp_path / "a"), "--cut", str(cp - 10),
                            "--controller-mode", "--format", "json"])
    assert r.exit_code == 0, r.output
    row, = json.loads(r.stdout)
    assert row["epochs"] == [[0, row["log_start"]]] and "epochFileCheckpoint: epoch 0 from offset" in r.stderr
    from store.rocketmq.epochs import read_epochs
    assert read_epochs(str(tmp_path / "a")).entries == [(0, row["log_start"])]
    r = runner.invoke(app, ["mq", "epochs", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    # a cut past what this replica's checkpoint says (it lags the group's): the entries up to the cut move
    r = runner.invoke(app, ["mq", "migrate", str(root), str(tmp_path / "c"), "--cut", str(cp - 5), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["messages"] == row["messages"] + 5
    r = runner.invoke(app, ["mq", "migrate", str(root), str(tmp_path / "b"), "--cut", "3", "--include-uncommitted"])
    assert r.exit_code == 2 and not os.path.exists(tmp_path / "b")
