"""``spark mq-align`` (issue 60): ``mq align`` for a fleet. Broker groups made of master-slave
stores ``mq migrate`` wrote (small commit-log files: a task per file), grouped by their
``brokerIdentity`` or by ``--group``: aligned, a slave behind, a byte flipped, a tail in an
old epoch (cut), a refused handshake, and a group given as digests. Each row equals the row
``mq align`` prints for the same replicas. On a real local Spark session (conftest's ``spark``)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from dledgerctl.pipeline.alignment import hash_file
from store.rocketmq.align import CHUNK, digest
from store.rocketmq.epochs import EpochEntry, epoch_file_text
from tests.rocketmq.test_mq_migrate import messages
from tests.support.commitlogs import BORN_AT, boundaries, cut_log, flip
from tests.support.rmq_store import write_broker_store

runner = CliRunner()
E = EpochEntry
FIELDS = ["replica", "max_offset", "last_epoch", "first_difference", "truncate_to", "cut_bytes", "detail"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A master-slave store of 120 messages in commit-log files of 8 KiB."""
    base = tmp_path_factory.mktemp("align")
    write_broker_store(str(base / "src"), messages(), data_file_size=16 << 10, cq_units_per_file=16)
    os.makedirs(base / "src" / "config")
    r = runner.invoke(app, ["mq", "migrate", str(base / "src"), str(base / "dest"), "--commitlog-file-size", "8192"])
    assert r.exit_code == 0, r.output
    assert len(os.listdir(base / "dest" / "commitlog")) > 4
    return base / "dest"


def replica(root, base, group, name, epochs, identity=True):
    d = base / group / name
    shutil.copytree(root, d)
    (d / "epochFileCheckpoint").write_text(epoch_file_text(epochs))
    if identity:
        (d / "brokerIdentity").write_text(f"DefaultCluster#{group}#{name[-1]}")
    elif (d / "brokerIdentity").exists():
        (d / "brokerIdentity").unlink()
    return d


@pytest.fixture(scope="module")
def fleet(root, tmp_path_factory):
    """group -> its replicas, the first the master mq align picks."""
    base = tmp_path_factory.mktemp("fleet")
    offs = boundaries(root)
    g = {}
    g["aligned"] = [replica(root, base, "aligned", n, [E(1, 0)]) for n in ("r0", "r1", "r2")]
    g["behind"] = [replica(root, base, "behind", n, [E(1, 0)]) for n in ("r0", "r1")]
    cut_log(g["behind"][1], offs[60])
    g["diverged"] = [replica(root, base, "diverged", n, [E(1, 0)]) for n in ("r0", "r1", "r2")]
    flip(g["diverged"][1], offs[50] + BORN_AT)
    flip(g["diverged"][2], offs[90] + BORN_AT)
    cut_log(g["diverged"][2], offs[100])
    x = offs[80]
    g["cut"] = [replica(root, base, "cut", "r0", [E(1, 0), E(2, x)]), replica(root, base, "cut", "r1", [E(1, 0)])]
    cut_log(g["cut"][0], x)
    g["refused"] = [replica(root, base, "refused", "r0", [E(2, 0)]), replica(root, base, "refused", "r1", [E(1, 0)])]
    return g


def mq_align(*paths):
    r = runner.invoke(app, ["mq", "align", *map(str, paths), "-f", "json"])
    return r.exit_code, [x for x in json.loads(r.stdout) if x["row"] == "replica" and x["role"] == "slave"], \
        [x for x in json.loads(r.stdout) if x["row"] == "cut"]


def spark_align(*args):
    r = runner.invoke(app, ["spark", "mq-align", *map(str, args), "-f", "json"])
    return r.exit_code, json.loads(r.stdout) if r.stdout.strip() else [], r.stderr


def test_every_group_gets_mq_aligns_rows(spark, fleet):
    code, rows, err = spark_align(*[d for ds in fleet.values() for d in ds])
    assert code == 1, err
    assert [(r["group"], os.path.basename(r["replica"])) for r in rows] == [
        ("aligned", "r1"), ("aligned", "r2"), ("behind", "r1"), ("cut", "r1"), ("diverged", "r1"), ("diverged", "r2"),
        ("refused", "r1")]
    assert {r["group"] for r in rows if not r["aligned"]} == {"cut", "diverged", "refused"}
    assert "5 groups, 12 replicas: 3 not aligned (cut, diverged, refused)" in err
    for name, ds in fleet.items():
        want_code, want, want_cuts = mq_align(*ds)
        got = [r for r in rows if r["group"] == name]
        assert all(r["master"] == str(ds[0]) and r["compared"] == "bytes" for r in got)
        assert [{k: r[k] for k in FIELDS} for r in got] == [{k: w[k] for k in FIELDS} for w in want], name
        assert [dict(c, replica=r["replica"]) for r in got for c in r["cuts"]] == [
            {k: c[k] for k in ("topic", "queue_id", "count", "first_queue_offset", "last_queue_offset", "replica")}
            for c in want_cuts], name
        assert want_code == (0 if all(r["aligned"] for r in got) else 1)
    by = {(r["group"], os.path.basename(r["replica"])): r for r in rows}
    offs = boundaries(fleet["aligned"][0])
    assert by[("diverged", "r1")]["first_difference"] == offs[50] + BORN_AT
    assert by[("diverged", "r2")]["first_difference"] == offs[90] + BORN_AT
    assert by[("cut", "r1")]["truncate_to"] == offs[80] and by[("cut", "r1")]["cut_messages"] == 40
    assert "no consistent point" in by[("refused", "r1")]["detail"]


def test_explicit_groups_masters_and_a_lone_replica(spark, fleet, tmp_path):
    a, b = fleet["behind"]
    plain = [replica(fleet["aligned"][0], tmp_path, "x", n, [E(1, 0)], identity=False) for n in ("p0", "p1")]
    code, rows, err = spark_align("--group", f"mine={a},{b}", "--group", f"plain={plain[0]},{plain[1]}",
                                  fleet["aligned"][0])
    assert code == 0, err
    assert [(r["group"], r["master"], r["replica"]) for r in rows] == [
        ("mine", str(a), str(b)), ("plain", str(plain[0]), str(plain[1]))]
    assert rows[0]["truncate_to"] is None and rows[0]["first_difference"] is None
    assert "one replica only, nothing compared: aligned" in err
    # (the slave behind made master: the longer replica's handshake cuts it to the master's end)
    code, rows, err = spark_align("--group", f"mine={a},{b}", "--master-replica", b)
    assert code == 1 and (rows[0]["master"], rows[0]["replica"]) == (str(b), str(a))
    assert rows[0]["truncate_to"] == rows[0]["master_max_offset"] < rows[0]["max_offset"]
    assert rows[0]["cut_messages"] == 60 and "1 not aligned (mine)" in err
    # (with epoch 1 on both, a master at epoch 1 replaces it: no consistent point, as mq align --master-epoch says)
    code, rows, err = spark_align("--group", f"mine={a},{b}", "--master-epoch", "1")
    assert code == 1 and "no consistent point" in rows[0]["detail"]


def test_digests_compare_by_chunks_as_mq_align_does(spark, fleet, tmp_path):
    ds = fleet["diverged"]
    outs = []
    for d in ds[1:]:
        out = tmp_path / f"{d.name}.json"
        assert runner.invoke(app, ["mq", "digest", str(d), "--out", str(out)]).exit_code == 0
        outs.append(out)
    code, rows, _err = spark_align(ds[0], *outs)
    assert code == 1 and {r["compared"] for r in rows} == {"chunks"}
    _code, want, _cuts = mq_align(ds[0], *outs)
    assert [{k: r[k] for k in FIELDS} for r in rows] == [{k: w[k] for k in FIELDS} for w in want]
    at = boundaries(ds[0])[50] + BORN_AT
    start = max(int(n) for n in os.listdir(ds[0] / "commitlog") if int(n) <= at)
    assert rows[0]["first_difference"] == start and "--upto" in rows[1]["detail"]  # (to the chunk: 8 KiB files)


def test_a_file_hashed_in_a_task_is_what_mq_digest_makes(fleet):
    d = digest(str(fleet["behind"][1]))
    for f in d.files:
        path = os.path.join(str(fleet["behind"][1]), "commitlog", f.name)
        assert hash_file(path, f.start, f.used, CHUNK) == f


def test_bad_inputs_are_one_error_line(fleet, tmp_path):
    plain = replica(fleet["aligned"][0], tmp_path, "x", "p0", [E(1, 0)], identity=False)
    (tmp_path / "junk.json").write_text("{}")
    for args, words in (([tmp_path / "nope"], ["nope", "no such file"]),
                        ([plain], ["no brokerIdentity", "--group"]),
                        ([tmp_path / "junk.json"], ["not a store root nor a digest"]),
                        ([fleet["aligned"][0], "--master-replica", tmp_path], ["not among the replicas"]),
                        (["--group", f"a={plain}", "--group", f"b={plain}"], ["groups a and b"])):
        r = runner.invoke(app, ["spark", "mq-align", *map(str, args)])
        assert r.exit_code == 1, (args, r.output)
        assert r.stderr.startswith("Error:") and r.stderr.count("\n") == 1 and all(w in r.stderr for w in words)
    for args in ([], ["--group", "nameless"], ["--group", "g="]):
        assert runner.invoke(app, ["spark", "mq-align", *args]).exit_code == 2


def test_output_and_csv(spark, fleet, tmp_path):
    out = tmp_path / "rows"
    r = runner.invoke(app, ["spark", "mq-align", *map(str, fleet["cut"]), "--output", str(out), "-f", "csv"])
    assert r.exit_code == 1, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split(",") == ["group", "master", "replica", "compared", "max_offset", "master_max_offset",
                                   "last_epoch", "first_difference", "truncate_to", "cut_bytes", "cut_messages",
                                   "aligned", "detail"] and len(lines) == 2
    got = [x.asDict(recursive=True) for x in spark.read.parquet(str(out)).collect()]
    assert len(got) == 1 and got[0]["group"] == "cut" and got[0]["aligned"] is False
    assert sum(c["count"] for c in got[0]["cuts"]) == got[0]["cut_messages"] == 40
