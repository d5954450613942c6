"""``mq digest`` and ``mq align`` (issues 60 and 61) on master-slave stores made by ``mq migrate``
from this project's writer: replicas identical, one behind, one with a tail in an old epoch,
one with a flipped byte, compared as directories and as digests. Whether RocketMQ's own
handshake does what ``mq align`` predicts is checked on RocketMQ's store in tests/java/."""

from __future__ import annotations

import json
import os
import shutil

from typer.testing import CliRunner

from dledgerctl.app import app
from store.rocketmq.epochs import EpochEntry, epoch_file_text
from store.rocketmq.message import decode
from store.rocketmq.replica import log_extent
from tests.support.commitlogs import BORN_AT, boundaries, cut_log, flip
from tests.rocketmq.test_mq_epochs import root  # noqa: F401 (the module's migrated store)

runner = CliRunner()
E = EpochEntry


def replica(root, tmp_path, name, epochs=None):  # noqa: F811
    d = tmp_path / name
    shutil.copytree(root, d)
    if epochs is not None:
        (d / "epochFileCheckpoint").write_text(epoch_file_text(epochs))
    return d


def align(*args):
    r = runner.invoke(app, ["mq", "align", *map(str, args), "-f", "json"])
    return r.exit_code, json.loads(r.stdout) if r.stdout.strip() else [], r.stderr


def slaves(rows):
    return {os.path.basename(r["replica"]): r for r in rows if r["row"] == "replica" and r["role"] == "slave"}


def test_identical_replicas_are_aligned(root, tmp_path):  # noqa: F811
    a, b = replica(root, tmp_path, "a", [E(1, 0)]), replica(root, tmp_path, "b", [E(1, 0)])
    code, rows, err = align(a, b, "--master", a)
    assert code == 0, (rows, err)
    s = slaves(rows)["b"]
    assert (s["first_difference"], s["truncate_to"], s["cut_bytes"]) == (None, None, 0)
    assert err.startswith("aligned")


def test_a_slave_behind_keeps_what_it_has_and_catches_up(root, tmp_path):  # noqa: F811
    a, b = replica(root, tmp_path, "a", [E(1, 0)]), replica(root, tmp_path, "b", [E(1, 0)])
    cut_log(b, boundaries(b)[60])
    code, rows, _ = align(a, b)  # (the master: the longer log)
    assert code == 0
    s = slaves(rows)["b"]
    assert s["truncate_to"] is None and "catches up" in s["detail"]


def test_a_tail_in_an_old_epoch_is_cut_to_the_consistent_point(root, tmp_path):  # noqa: F811
    full = boundaries(root)
    x = full[80]
    a = replica(root, tmp_path, "a")
    cut_log(a, x)
    (a / "epochFileCheckpoint").write_text(epoch_file_text([E(1, 0), E(2, x)]))
    b = replica(root, tmp_path, "b", [E(1, 0)])
    _lo, bmax = log_extent(str(b))
    code, rows, err = align(a, b)
    assert code == 1 and "not aligned" in err
    s = slaves(rows)["b"]
    assert (s["truncate_to"], s["cut_bytes"]) == (x, bmax - x)
    cuts = [r for r in rows if r["row"] == "cut"]
    assert sum(c["count"] for c in cuts) == len(full) - 80  # (messages 80.. of the 120)
    assert {(c["topic"], c["queue_id"]) for c in cuts} <= {(f"T{i}", q) for i in range(3) for q in range(2)}


def test_a_byte_that_differs_below_the_kept_point_is_named(root, tmp_path):  # noqa: F811
    a, b = replica(root, tmp_path, "a", [E(1, 0)]), replica(root, tmp_path, "b", [E(1, 0)])
    at = boundaries(b)[50] + BORN_AT
    flip(b, at)
    code, rows, _ = align(a, b, "--master", a)
    assert code == 1
    s = slaves(rows)["b"]
    assert s["first_difference"] == at and "a divergence no handshake repairs" in s["detail"]


def test_digests_stand_for_replicas_on_other_machines(root, tmp_path):  # noqa: F811
    a, b = replica(root, tmp_path, "a", [E(1, 0)]), replica(root, tmp_path, "b", [E(1, 0)])
    flip(b, boundaries(b)[10] + BORN_AT)  # (a byte no CRC covers: the replica's recovery keeps the message)
    for d in (a, b):
        r = runner.invoke(app, ["mq", "digest", str(d), "--out", str(tmp_path / f"{d.name}.json")])
        assert r.exit_code == 0, r.output
    got = json.loads((tmp_path / "a.json").read_text())
    assert got["max_offset"] == log_extent(str(a))[1] and got["epochs"] == [[1, 0]]
    code, rows, _ = align(tmp_path / "a.json", tmp_path / "b.json", "--master", tmp_path / "a.json")
    assert code == 1
    assert slaves(rows)["b.json"]["first_difference"] == 0  # (the first 4 MiB chunk: the difference is in it)
    code, _rows, _ = align(tmp_path / "a.json", a)  # (a digest and a directory: compared by digests)
    assert code == 0


def test_a_digest_of_a_longer_log_compares_once_cut_where_the_other_ends(root, tmp_path):  # noqa: F811
    a, b = replica(root, tmp_path, "a", [E(1, 0)]), replica(root, tmp_path, "b", [E(1, 0)])
    cut_log(b, boundaries(b)[70])
    bmax = log_extent(str(b))[1]
    for d, extra in ((a, []), (b, [])):
        assert runner.invoke(app, ["mq", "digest", str(d), "--out", str(tmp_path / f"{d.name}.json"), *extra]).exit_code == 0
    code, rows, err = align(tmp_path / "a.json", tmp_path / "b.json")
    assert code == 1 and f"--upto {bmax}" in slaves(rows)["b.json"]["detail"]
    assert runner.invoke(app, ["mq", "digest", str(a), "--out", str(tmp_path / "a.json"), "--upto",
                               str(bmax)]).exit_code == 0
    code, rows, err = align(tmp_path / "a.json", tmp_path / "b.json", "--master", tmp_path / "a.json")
    assert code == 0, rows


def test_bad_arguments_are_one_line(root, tmp_path):  # noqa: F811
    a = replica(root, tmp_path, "a")
    (tmp_path / "junk.json").write_text("{}")
    r = runner.invoke(app, ["mq", "align", str(a), str(tmp_path / "junk.json")])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "not a store root nor a digest" in r.stderr
    r = runner.invoke(app, ["mq", "align", str(a)])
    assert r.exit_code == 2
    r = runner.invoke(app, ["mq", "align", str(a), str(a), "--master", "elsewhere"])
    assert r.exit_code == 1 and "--master elsewhere is not among the replicas" in r.stderr


def test_the_master_epoch_to_come_decides_the_handshake(root, tmp_path):  # noqa: F811
    """With one epoch 0 on every replica (mq migrate --controller-mode) the first master at epoch 1
    keeps it and the slaves keep what they hold; with epoch 1 the master drops it and appends its
    own at its max offset, leaving the slaves no consistent point (RocketMQ's changeToMaster)."""
    a, b = replica(root, tmp_path, "a", [E(0, 0)]), replica(root, tmp_path, "b", [E(0, 0)])
    cut_log(b, boundaries(b)[60])
    code, rows, _ = align(a, b, "--master", a, "--master-epoch", "1")
    assert code == 0 and slaves(rows)["b"]["truncate_to"] is None
    for d in (a, b):
        (d / "epochFileCheckpoint").write_text(epoch_file_text([E(1, 0)]))
    code, rows, _ = align(a, b, "--master", a, "--master-epoch", "1")
    assert code == 1 and "no consistent point" in slaves(rows)["b"]["detail"]
    code, rows, err = align(a, b, "--master", a, "--master-epoch", "0")
    assert code == 1 and "would not become master at epoch 0" in err


def test_digests_from_several_machines_naming_one_path_are_told_apart(root, tmp_path):  # noqa: F811
    """Digests record their store's path, which replicas on different machines share: mq align
    tells replicas apart by the argument that gave them."""
    a, b = replica(root, tmp_path, "a", [E(1, 0)]), replica(root, tmp_path, "b", [E(1, 0)])
    cut_log(b, boundaries(b)[60])
    for d in (a, b):
        assert runner.invoke(app, ["mq", "digest", str(d), "--out", str(tmp_path / f"{d.name}.json")]).exit_code == 0
        got = json.loads((tmp_path / f"{d.name}.json").read_text())
        got["root"] = "/data/broker-a/store"  # (as each machine names it)
        (tmp_path / f"{d.name}.json").write_text(json.dumps(got))
    code, rows, _ = align(tmp_path / "a.json", tmp_path / "b.json")
    roles = {os.path.basename(r["replica"]): r["role"] for r in rows if r["row"] == "replica"}
    assert roles == {"a.json": "master", "b.json": "slave"}, rows


def test_a_body_that_fails_its_crc_in_the_last_file_ends_the_replicas_log(root, tmp_path):  # noqa: F811
    """RocketMQ's recovery checks each body against BODYCRC from the file the consume queues
    end in (a whole log of one file here) and ends the log before the first that fails: that
    replica is behind, not different (RocketMQ 5.3.3 shown so in tests/java/test_torn_tail_java.py)."""
    a, b = replica(root, tmp_path, "a", [E(1, 0)]), replica(root, tmp_path, "b", [E(1, 0)])
    at = boundaries(b)[60]
    flip(b, boundaries(b)[61] - 3)  # (a byte of message 60's properties: no CRC, kept)
    assert log_extent(str(b))[1] == log_extent(str(a))[1]
    name = max(n for n in os.listdir(b / "commitlog") if int(n) <= at)
    m = decode((b / "commitlog" / name).read_bytes(), at - int(name))
    assert m.body_size > 1
    flip(b, at + (m.body_at - (at - int(name))) + 1)  # (a byte of its body)
    assert log_extent(str(b))[1] == at
    code, rows, _ = align(a, b, "--master", a)
    s = slaves(rows)[b.name]
    assert (s["max_offset"], s["cut_bytes"]) == (at, 0), rows
