"""``mq check`` on a controller-mode store root (issue 61): the epoch file's errors, and what a
slave's truncation killed half-way leaves (store/rocketmq/check_replica.py): index entries and
timer-log units past the log's end, a tail past the checkpoint's confirm offset after a crash;
units past the end stay check.py's ``cq-past-log-end``. Stores are ``mq migrate``'s of this
project's writer (tests/support/rmq_store.py); what RocketMQ 5.3.3 itself leaves and does is in
tests/java/test_mq_check_controller_mode_java.py."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from store.format import HEADER_SIZE
from store.rocketmq.check_replica import read_confirm_offset
from store.rocketmq.commitlog import batches
from store.rocketmq.epochs import EpochEntry, epoch_file_text
from store.rocketmq.replica import log_extent
from store.rocketmq.timer import BLANK_MAGIC, UNIT_SIZE
from tests.rocketmq.test_mq_check_edges import hold_lock
from tests.rocketmq.test_mq_migrate import messages
from tests.support.rmq_store import write_broker_store

runner = CliRunner()
COLUMNS = ["finding", "file", "offset", "index", "topic", "queue_id", "queue_offset", "detail"]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    base = tmp_path_factory.mktemp("cm")
    src = base / "src"
    write_broker_store(str(src), messages(), data_file_size=16 << 10, cq_units_per_file=16)
    os.makedirs(src / "config")
    dest = base / "dest"
    r = runner.invoke(app, ["mq", "migrate", str(src), str(dest), "--commitlog-file-size", "16384"])
    assert r.exit_code == 0, r.output
    return dest


@pytest.fixture
def store(migrated, tmp_path):
    """A controller-mode root: the migrated store with one epoch from 0."""
    d = tmp_path / "s"
    shutil.copytree(migrated, d)
    write_epochs(d, [(1, 0)])
    return d


def write_epochs(root, entries):
    with open(os.path.join(root, "epochFileCheckpoint"), "w") as fh:
        fh.write(epoch_file_text([EpochEntry(e, s) for e, s in entries]))


def set_confirm(root, offset: int) -> None:
    with open(os.path.join(root, "checkpoint"), "r+b") as fh:
        data = bytearray(fh.read().ljust(40, b"\0"))
        struct.pack_into(">q", data, 32, offset)
        fh.seek(0)
        fh.write(data)


def check(root, *args):
    r = runner.invoke(app, ["mq", "check", str(root), "-f", "json", *args])
    rows = json.loads(r.stdout) if r.stdout.strip() else []
    return r.exit_code, rows, r.stderr


def kinds(rows):
    return [r["finding"] for r in rows]


def test_a_sound_controller_mode_store_has_no_finding(store):
    set_confirm(store, log_extent(str(store))[1])
    open(store / "abort", "w").close()  # (a crash with everything confirmed: nothing to say)
    code, rows, err = check(store)
    assert (code, rows) == (0, []), err
    assert "0 findings" in err


def test_epoch_errors_are_findings_in_the_check_row_shape(store):
    _lo, end = log_extent(str(store))
    write_epochs(store, [(1, 0), (3, 100), (2, 200), (4, end + 10)])
    code, rows, err = check(store)
    assert code == 1
    assert kinds(rows) == ["epoch-order", "epoch-past-log"]
    for r in rows:
        assert list(r) == COLUMNS and r["file"] == "epochFileCheckpoint"
    assert f"epoch 4 starts at offset {end + 10}, past the log's end {end}" in rows[1]["detail"]
    assert "2 findings" in err
    # warnings and notes stay mq epochs's: a main file that fails, read from .bak, is no finding
    shutil.copy(store / "epochFileCheckpoint", store / "epochFileCheckpoint.bak")
    write_epochs(store, [(1, 0)])
    with open(store / "epochFileCheckpoint", "a") as fh:
        fh.write("5-0\n")  # (its count and CRC no longer hold)
    code, rows, _ = check(store)
    assert kinds(rows) == ["epoch-order", "epoch-past-log"]
    assert {r["file"] for r in rows} == {"epochFileCheckpoint.bak"}


def test_a_master_slave_store_gets_none_of_them(store):
    os.unlink(store / "epochFileCheckpoint")
    set_confirm(store, 0)
    open(store / "abort", "w").close()
    code, rows, _ = check(store)
    assert (code, rows) == (0, [])


def test_files_a_truncation_deleted_leave_units_and_index_entries_past_the_end(store):
    """A slave's truncation deletes the commit-log files past its point (MappedFileQueue
    .truncateDirtyFiles), not the index; a crash before the queues are cut leaves units too."""
    names = sorted(os.listdir(store / "commitlog"))
    assert len(names) >= 3
    os.unlink(store / "commitlog" / names[-1])
    _lo, end = log_extent(str(store))
    set_confirm(store, end)
    code, rows, _ = check(store)
    assert code == 1
    got = set(kinds(rows))
    assert got == {"cq-past-log-end", "index-past-log-end"}, rows
    (ix,) = [r for r in rows if r["finding"] == "index-past-log-end"]
    assert ix["file"].startswith("index/") and f"past the log's max offset {end}" in ix["detail"]
    n = int(ix["detail"].split()[0])
    assert n == sum(1 for r in rows if r["finding"] == "cq-past-log-end")  # (one key per message here)
    # --max-findings counts them all
    code, shown, err = check(store, "--max-findings", "1")
    assert code == 1 and len(shown) == 1 and f"{len(rows)} findings" in err


def timer_unit(offset: int, size: int, magic: int = 1) -> bytes:
    return struct.pack(">iqiqiqii8x", UNIT_SIZE, -1, magic, 0, 0, offset, size, 0)


def test_timer_units_past_the_end(store):
    _lo, end = log_extent(str(store))
    os.makedirs(store / "timerlog")
    units = [timer_unit(0, 100), timer_unit(-1, 0), timer_unit(end - 50, 100), timer_unit(end + 1000, 300)]
    data = b"".join(units)
    rest = 4 * UNIT_SIZE + 16
    data += struct.pack(">iqi", rest - len(data), 0, BLANK_MAGIC).ljust(rest - len(data), b"\0")
    with open(store / "timerlog" / "00000000000000000000", "wb") as fh:
        fh.write(data)
    code, rows, _ = check(store)
    assert code == 1 and kinds(rows) == ["timer-past-log-end"]
    (r,) = rows
    assert r["file"] == "timerlog/00000000000000000000" and r["offset"] == 2 * UNIT_SIZE
    assert r["detail"].startswith(f"2 units from this one on ({end - 50}, 100) point past the log's max offset {end}")
    # a file that does not read as TimerLog writes it is said, not a traceback
    with open(store / "timerlog" / "00000000000000000000", "r+b") as fh:
        fh.write(struct.pack(">i", 17))
    code, rows, _ = check(store)
    assert kinds(rows) == ["timer-damaged"] and "a unit of 17 bytes" in rows[0]["detail"]
    # nor is a file that is no regular file (a FIFO is not opened)
    os.unlink(store / "timerlog" / "00000000000000000000")
    os.mkfifo(store / "timerlog" / "00000000000000104857")
    code, rows, _ = check(store)
    assert code == 1 and kinds(rows) == ["timer-damaged"] and rows[0]["file"] == "timerlog/00000000000000104857"


def test_a_crash_with_a_tail_past_the_confirm_offset(store):
    """#10666: killed after its handshake truncated, a slave's stale tail is valid on disk; its
    checkpoint's confirmPhyOffset holds the truncation point and ``abort`` says it crashed."""
    _lo, end = log_extent(str(store))
    set_confirm(store, 4096)
    code, rows, _ = check(store)
    assert (code, rows) == (0, [])  # (a clean stop: no abort)
    open(store / "abort", "w").close()
    assert read_confirm_offset(str(store)) == 4096
    code, rows, _ = check(store)
    assert code == 1 and kinds(rows) == ["unconfirmed-tail"]
    assert rows[0]["file"] == "checkpoint" and rows[0]["offset"] == 32
    assert f"{end - 4096} bytes of log past its confirm offset 4096 (to {end})" in rows[0]["detail"]
    # a running broker's (its lock held) is being written: its tail is in flight, not said
    holder = hold_lock(store)
    try:
        code, rows, _ = check(store)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert (code, rows) == (0, [])
    # nor without a checkpoint to compare with
    os.unlink(store / "checkpoint")
    code, rows, _ = check(store)
    assert (code, rows) == (0, [])


def test_a_checkpoint_without_a_confirm_offset_is_none(tmp_path):
    (tmp_path / "checkpoint").write_bytes(b"\0" * 24)  # (a 4.x broker's: three timestamps)
    assert read_confirm_offset(str(tmp_path)) is None
    assert read_confirm_offset(str(tmp_path / "nowhere")) is None


def message_offsets(root) -> list[tuple[str, int, int]]:
    """(file, byte in it, commit-log offset) of every message, in log order."""
    out = []
    for b in batches(os.path.join(root, "commitlog")):
        for pos in (b.pos + HEADER_SIZE).tolist():
            out.append((b.file, pos - b.start, pos))
    return out


def set_store_time(root, file: str, at: int, ts: int) -> None:
    with open(os.path.join(root, file), "r+b") as fh:
        fh.seek(at + 36)
        (sys_flag,) = struct.unpack(">i", fh.read(4))
        assert not sys_flag & 0x10  # (an IPv4 born host: STORETIMESTAMP at byte 56)
        fh.seek(at + 56)
        fh.write(struct.pack(">q", ts))


def store_time(root, file: str, at: int) -> int:
    with open(os.path.join(root, file), "rb") as fh:
        fh.seek(at + 56)
        return struct.unpack(">q", fh.read(8))[0]


def test_a_message_stored_before_its_epoch_began_starts_a_stale_tail(store):
    """Within one epoch one master stamped every message under its put lock: a message of the
    last epoch's span stored before the epoch's first is another master's, left by a
    truncation behind the new master's data (#10666)."""
    msgs = message_offsets(store)
    _lo, end = log_extent(str(store))
    first, stale = msgs[100], msgs[110]
    set_store_time(store, stale[0], stale[1], store_time(store, first[0], first[1]) - 1000)
    code, rows, _ = check(store)
    assert (code, rows) == (0, [])  # (one epoch: not judged, a moved store's holds several masters')
    write_epochs(store, [(1, 0), (2, first[2])])
    code, rows, _ = check(store)
    assert code == 1 and [(r["finding"], r["file"], r["offset"]) for r in rows] == [
        ("stale-tail", stale[0], stale[1])]
    assert (f"the message at commit-log offset {stale[2]}, in epoch 2's span (from {first[2]})" in rows[0]["detail"]
            and f"the {end - stale[2]} bytes from there to the log's end {end}" in rows[0]["detail"])
    # stored after the epoch's first: in order, nothing
    set_store_time(store, stale[0], stale[1], store_time(store, first[0], first[1]) + 1)
    code, rows, _ = check(store)
    assert (code, rows) == (0, [])
