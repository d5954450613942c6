"""The edges of issues 58 and 59 on stores RocketMQ's own message store wrote (4.9.4 with DLedger
0.2.6, 4.9.8 with 0.3.1.2; tests/support/javarocketmq.py), then damaged:

- a torn consume-queue file (its last file cut inside a unit): ``mq rebuild`` gives RocketMQ's
  own queue files back byte for byte, and says which file was torn;
- no ``consumequeue/`` left and the broker's configuration beside the store setting
  mappedFileSizeConsumeQueue (19,990: RocketMQ's store wrote 20,000-byte files, its rounding):
  the rebuilt files are RocketMQ's, byte for byte, without ``--queue-file-size``;
- a hash chain of RocketMQ's ``index/`` made to loop (and its header's count 2^31-1): ``mq
  messages --key`` answers as before, in a real process with a deadline, and ``mq check``
  reports the loop.

Skipped, saying why, when Java, a mirror or a Debian jar is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

from typer.testing import CliRunner

from dledgerctl.app import app
from tests.java.test_mq_migrate_java import written  # noqa: F401
from tests.java.test_mq_rebuild_java import files_under
from tests.support.paths import ROOT
from store.rocketmq.lookup import HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_SIZE, index_key_hash, open_index

runner = CliRunner()


def copy(src, tmp_path):
    root = tmp_path / "store"
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("lock"))
    return root


def rebuild(root, *args) -> str:
    r = runner.invoke(app, ["mq", "rebuild", str(root), "--max-hash-slot-num", "1000", "--max-index-num", "4000",
                            *map(str, args)])
    assert r.exit_code == 0, r.output
    return r.stderr


def test_a_torn_queue_file_of_rocketmqs_comes_back_byte_for_byte(rocketmq, written, tmp_path):
    src, _reported = written
    root = copy(src, tmp_path)
    want = files_under(root / "consumequeue")
    qdir = root / "consumequeue" / "Orders1" / "2"
    last = sorted(os.listdir(qdir))[-1]
    os.truncate(qdir / last, 3 * 20 + 11)
    err = rebuild(root)
    assert files_under(root / "consumequeue") == want
    assert f"(torn: consumequeue/Orders1/2/{last} has 11 bytes past its last whole one)" in err


def test_the_queue_file_size_comes_from_the_brokers_configuration(rocketmq, written, tmp_path):
    src, _reported = written
    root = copy(src, tmp_path)
    want = files_under(root / "consumequeue")
    shutil.rmtree(root / "consumequeue")
    (root / "config" / "broker.properties").write_text("brokerName=broker-a\nmappedFileSizeConsumeQueue=19990\n")
    err = rebuild(root)
    assert files_under(root / "consumequeue") == want
    assert "mappedFileSizeConsumeQueue=19990, which the broker rounds up to 20000" in err


def test_a_looping_chain_in_rocketmqs_index(rocketmq, written, tmp_path):
    src, _reported = written
    root = copy(src, tmp_path)
    before = runner.invoke(app, ["mq", "messages", str(root), "--topic", "Orders1", "--key", "user-3", "--format",
                                 "json"])
    assert before.exit_code == 0, before.output
    f = open_index(str(root))[0]
    slots, name = f.slots, f.name
    f.data.close()
    path = root / "index" / name
    data = bytearray(path.read_bytes())
    base = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE

    def prev_of(n):
        return struct.unpack_from(">i", data, base + n * INDEX_SIZE + 16)[0]

    def set_prev(n, p):
        struct.pack_into(">i", data, base + n * INDEX_SIZE + 16, p)

    (n,) = struct.unpack_from(">i", data, INDEX_HEADER_SIZE + (index_key_hash("Orders1#user-3") % slots) * 4)
    while prev_of(n) > 0:
        n = prev_of(n)
    set_prev(n, 1)
    set_prev(1, 2)
    set_prev(2, 1)
    struct.pack_into(">i", data, 36, (1 << 31) - 1)
    path.write_bytes(data)
    r = subprocess.run([sys.executable, "-m", "dledgerctl", "mq", "messages", str(root), "--topic", "Orders1",
                        "--key", "user-3", "--format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout) == json.loads(before.stdout)
    c = runner.invoke(app, ["mq", "check", str(root), "--format", "json"])
    assert c.exit_code == 1, c.output
    found = [x for x in json.loads(c.stdout) if x["finding"] == "index-loop"]
    assert [x["file"] for x in found] == [f"index/{name}"], c.stdout
