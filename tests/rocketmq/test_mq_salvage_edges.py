"""mq salvage (and store truncate's backup) on the edges issues 58 and 59 found:

- a migrated (master-slave) store given to --against is read as one: its messages count as
  held (58.4: "10 not in DEST2, 0 held", and re-sending would duplicate them);
- exit 1 when a kept message is missing, 0 when the log holds every one (58.15);
- a ``FILE.part`` that --out (or store truncate's ``--backup B``: ``B.part``) finds is left
  alone: never removed by a command that did not create it (59.5);
- a FIFO or a link to /dev/zero named like a kept file, or in place of a node's checkpoint,
  is refused or skipped at once, never waited on or read without end (59.6). Those run as
  real processes under a deadline, so a hang fails the test instead of stalling it.
"""

from __future__ import annotations

import json
import os

import pytest

from store.filestore import FileStore
from store.kept import kept_name, write_kept
from tests.support.commands import cli, invoke
from tests.support.rmq_encode import encode_message
from tests.support.rmq_store import write_broker_store


def one_error(stderr: str, *words: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert "Traceback" not in stderr
    return lines[0]


def _messages(n: int = 10) -> list[dict]:
    return [{"topic": "Orders", "queue_id": i % 2, "body": b"order %d" % i,
             "properties": {"UNIQ_KEY": f"AA{i:04X}", "KEYS": f"k{i}"}} for i in range(n)]


@pytest.fixture
def broker(tmp_path):
    """A DLedger-mode broker store of 10 messages, and a kept file holding the same entries
    (what a member's cut kept while the leader's log held them all)."""
    root = str(tmp_path / "broker")
    write_broker_store(root, _messages())
    with FileStore.open(os.path.join(root, "dledger-n0"), read_only=True) as s:
        raws = [s.get_bytes(i) for i in range(s.end_index + 1)]
    kept_dir = tmp_path / "kept"
    kept_dir.mkdir()
    kept = str(kept_dir / kept_name(0, len(raws) - 1, 1_700_000_000.0))
    write_kept(kept, raws)
    return root, kept


def test_a_migrated_store_holds_what_it_moved(broker, tmp_path):
    root, kept = broker
    dest = str(tmp_path / "dest2")
    r = invoke("mq", "migrate", root, dest, "--commitlog-file-size", "64KiB")
    assert r.exit_code == 0, r.output
    r = invoke("mq", "salvage", kept, "--against", dest, "--all", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert len(rows) == 10 and {x["status"] for x in rows} == {"held"}
    assert {x["held_by"] for x in rows} == {"dest2"}
    assert "0 not in" in r.stderr and "10 held" in r.stderr


def test_exit_1_when_a_kept_message_is_missing(broker, tmp_path):
    root, kept = broker
    r = invoke("mq", "salvage", kept, "--against", root, "--format", "json")
    assert r.exit_code == 0, r.output  # (the broker's own log holds them all)
    other = str(tmp_path / "other")
    write_broker_store(other, _messages(4))  # (the first four only)
    r = invoke("mq", "salvage", kept, "--against", other, "--format", "json")
    assert r.exit_code == 1, r.output
    assert sorted(x["uniq_key"] for x in json.loads(r.stdout)) == [f"AA{i:04X}" for i in range(4, 10)]
    assert "6 not in" in r.stderr and "Error" not in r.stderr


def test_a_controller_log_or_no_store_is_refused_as_against(broker, tmp_path):
    _root, kept = broker
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    r = invoke("mq", "salvage", kept, "--against", str(nothing))
    assert r.exit_code == 1
    one_error(r.stderr, "no store", "mq salvage --against takes")
    controller = str(tmp_path / "controller" / "dledger-c0")
    with FileStore.open(controller) as s:
        s.append_leader([b"", b"\x00\x03" + b'{"brokerName":"a","newMasterElected":false}'], 1)
    r = invoke("mq", "salvage", kept, "--against", str(tmp_path / "controller"))
    assert r.exit_code == 1
    one_error(r.stderr, "controller events")


def test_out_leaves_a_part_file_it_did_not_create(broker, tmp_path):
    root, kept = broker
    other = str(tmp_path / "other")
    write_broker_store(other, _messages(4))
    out = tmp_path / "resend.jsonl"
    part = tmp_path / "resend.jsonl.part"
    part.write_text("another salvage's\n")
    r = invoke("mq", "salvage", kept, "--against", other, "--out", str(out))
    assert r.exit_code == 1
    one_error(r.stderr, str(part), "exists")
    assert part.read_text() == "another salvage's\n" and not out.exists()
    assert r.stdout == ""  # (refused before anything was read or shown)


def test_store_truncate_leaves_a_backup_part_it_did_not_create(tmp_path):
    node = str(tmp_path / "dledger-n0")
    with FileStore.open(node) as s:
        s.append_leader([b"e%d" % i for i in range(10)], 1)
        s.set_committed(4)
    backup = tmp_path / "cut.entries"
    part = tmp_path / "cut.entries.part"
    part.write_bytes(b"not ours")
    r = invoke("store", "truncate", node, "--from-index", "6", "--backup", str(backup), "--yes")
    assert r.exit_code == 1, r.output
    one_error(r.stderr, str(part))
    assert part.read_bytes() == b"not ours" and not backup.exists()
    with FileStore.open(node, read_only=True) as s:
        assert s.end_index == 9  # (nothing cut)


def test_special_files_named_like_kept_files_are_never_read(broker, tmp_path):
    root, kept = broker
    kept_dir = os.path.dirname(kept)
    fifo = os.path.join(kept_dir, kept_name(20, 29, 1_700_000_001.0))
    os.mkfifo(fifo)
    zero = os.path.join(kept_dir, kept_name(30, 39, 1_700_000_002.0))
    os.symlink("/dev/zero", zero)
    r = cli("mq", "salvage", kept_dir, "--against", root, "--format", "json", timeout=60)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)) == 0 and "10 held" in r.stderr
    assert f"Note: {fifo} (a FIFO)" in r.stderr and f"Note: {zero} (a character device)" in r.stderr
    for path, what in ((fifo, "a FIFO"), (zero, "a character device")):
        r = cli("mq", "salvage", path, "--against", root, timeout=60)
        assert r.returncode == 1
        one_error(r.stderr, path, f"not a regular file ({what})")


@pytest.mark.parametrize("special", ["fifo", "zero"])
def test_a_special_checkpoint_is_never_read(broker, tmp_path, special):
    """store elect and mq migrate read the node's checkpoint (store/metafiles.py): a FIFO or
    a link to /dev/zero there is unreadable, said, and the .bak or no checkpoint used."""
    root, _kept = broker
    node = os.path.join(root, "dledger-n0")
    cp = os.path.join(node, "checkpoint")
    os.replace(cp, cp + ".bak")  # (the values, where a reader falls back to)
    if special == "fifo":
        os.mkfifo(cp)
    else:
        os.symlink("/dev/zero", cp)
    r = cli("store", "elect", node, "--format", "json", timeout=60)
    assert r.returncode == 0, r.stderr
    (member,) = [x for x in json.loads(r.stdout) if x["row"] == "member"]
    assert member["committed"] == 9 and "Traceback" not in r.stderr
    r = cli("mq", "migrate", root, str(tmp_path / "dest"), "--commitlog-file-size", "64KiB", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
