"""The ``spark`` command group through the real CLI: in process on the shared local session
(typer's CliRunner), and twice as a real process that starts its own Spark."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from dledgerctl.spark_cmd import INSTALL_HINT
from store.filestore import FileStore
from store.format import file_name
from tests.support.commands import invoke
from tests.support.stores import copy_fixture, fixture_path, patch, write_project_store


@pytest.fixture
def group(tmp_path):
    """Three replicas under one base directory; n2 diverges at index 40."""
    base = tmp_path / "group"
    write_project_store(base / "dledger-n0", count=60, data_file_size=16384, index_file_size=1024, committed=55)
    shutil.copytree(base / "dledger-n0", base / "dledger-n1")
    shutil.copytree(base / "dledger-n0", base / "dledger-n2")
    with FileStore.open(str(base / "dledger-n2")) as s:
        s.truncate(40, force=True)
        s.append_leader([b"x" * 30] * 5, term=3)
    return base


def test_audit_clean_then_damaged(spark, group):
    r = invoke("spark", "audit", group, "-f", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [(x["node"], x["verdict"], x["entries"]) for x in rows] == [
        ("dledger-n0", "ok", 60), ("dledger-n1", "ok", 60), ("dledger-n2", "ok", 45)]
    assert rows[0]["problems"] == [] and rows[0]["crc_checked"] == 60
    with FileStore.open(str(group / "dledger-n1"), read_only=True) as s:
        pos, _ = s.locate(30)
    patch(group / "dledger-n1" / "data" / file_name(pos - pos % 16384), pos % 16384 + 50, b"\xff\xfe")
    out = group.parent / "audit-csv"
    r = invoke("spark", "audit", group, "--output", out, "--output-format", "csv")
    assert r.exit_code == 1
    written = {x["node"]: x for part in sorted(os.listdir(out)) if part.endswith(".csv")
               for x in csv.DictReader(open(out / part))}
    assert written["dledger-n1"]["verdict"] == "damaged"
    assert json.loads(written["dledger-n1"]["problems"])[0]["code"] == "bad-body-crc"
    lines = r.stdout.splitlines()
    assert lines[0].split()[:5] == ["node", "severity", "code", "file", "offset"]
    assert "dledger-n1  error       bad-body-crc" in r.stdout
    verdicts = {ln.split()[0]: ln.split()[1] for ln in lines if ln.startswith("dledger-n") and "error" not in ln}
    assert verdicts == {"dledger-n0": "ok", "dledger-n1": "damaged", "dledger-n2": "ok"}
    r = invoke("spark", "audit", group / "dledger-n1", "--format", "csv", "--no-crc")
    assert r.exit_code == 0  # without checksums the flipped body goes unnoticed
    (row,) = list(csv.DictReader(io.StringIO(r.stdout)))
    assert row["verdict"] == "ok" and row["crc_checked"] == "60" and "problems" not in row


def test_diverge_and_stats(spark, group, tmp_path):
    r = invoke("spark", "diverge", group, "-f", "jsonl")
    assert r.exit_code == 1
    rows = [json.loads(ln) for ln in r.stdout.splitlines()]
    pairs = {(x["a"], x["b"]): x for x in rows}
    assert pairs[("dledger-n0", "dledger-n1")]["identical"] is True
    d = pairs[("dledger-n0", "dledger-n2")]
    assert (d["last_common_index"], d["first_diff_index"], d["a_term"], d["b_term"]) == (39, 40, 2, 3)
    r = invoke("spark", "diverge", group / "dledger-n0", group / "dledger-n1", "-f", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["identical"] is True
    out = tmp_path / "stats-out"
    r = invoke("spark", "stats", group / "dledger-n2", "-f", "csv", "--output", out)
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(x["term"], x["entries"], x["first_index"], x["last_index"]) for x in rows] == [
        ("1", "30", "0", "29"), ("2", "10", "30", "39"), ("3", "5", "40", "44")]
    assert pq.read_table(out).num_rows == 3 and f"wrote {out}" in r.stderr


def test_stats_plot_draws_the_leader_history_and_bytes_per_term(spark, group, tmp_path):
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.image import imread

    from dledgerctl.plots import HEIGHT, WIDTH
    from tests.support.pictures import png_size

    out = tmp_path / "history.png"
    r = invoke("spark", "stats", group, "--plot", out, "-f", "json")
    assert r.exit_code == 0, r.output
    terms = sorted({x["term"] for x in json.loads(r.stdout)})
    assert terms == [1, 2, 3]
    assert png_size(out) == (WIDTH, HEIGHT) and os.path.getsize(out) > 10_000
    img = imread(out)[:, :, :3]
    for k, term in enumerate(terms):  # every term's colour is there, in both panels
        colour = np.array(colormaps["tab20"](k)[:3])
        assert (np.abs(img - colour).max(axis=2) < 0.02).sum() > 500, term
    real = tmp_path / "dledger.png"  # a store the real DLedger wrote
    r = invoke("spark", "stats", fixture_path("leader"), "--plot", real)
    assert r.exit_code == 0, r.output
    assert png_size(real) == (WIDTH, HEIGHT)
    r = invoke("spark", "stats", fixture_path("leader"), "--plot", tmp_path / "missing" / "x.png")
    assert r.exit_code == 1 and "cannot write" in r.output


def test_export(spark, group, tmp_path):
    to = tmp_path / "parquet"
    r = invoke("spark", "export", group / "dledger-n0", group / "dledger-n2", "--to", to, "--committed-only", "-f", "json")
    assert r.exit_code == 0, r.output
    rows = {x["node"]: x for x in json.loads(r.stdout)}
    assert (rows["dledger-n0"]["entries"], rows["dledger-n0"]["last_index"], rows["dledger-n0"]["committed_index"]) == (
        56, 55, 55)
    table = pq.read_table(to / "node=dledger-n0").sort_by("index")
    with FileStore.open(str(group / "dledger-n0"), read_only=True) as s:
        assert table.column("body").to_pylist() == [s.get(i).body for i in range(56)]
    r = invoke("spark", "export", group, "--to", to)
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and "already exists" in r.stderr
    (tmp_path / "a-file").write_text("")  # (root may write anywhere: under a file, nobody can)
    r = invoke("spark", "export", group, "--to", tmp_path / "a-file" / "out")
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.output
    assert "An error occurred while calling" not in r.stderr and "a-file" in r.stderr, r.stderr


@pytest.mark.parametrize("args,code,text", [
    (["spark", "audit", "/nonexistent/dir"], 1, "no such directory"),
    (["spark", "stats", "/nonexistent/*"], 1, "matches nothing"),
    (["spark", "diverge", fixture_path("leader")], 1, "nothing to compare"),
    (["spark", "audit", ".", "--conf", "novalue"], 2, "KEY=VALUE"),
    (["spark", "stats", ".", "--format", "xml"], 2, "xml"),
    (["spark", "export", "."], 2, "--to"),
])
def test_errors_are_one_line(spark, args, code, text):
    r = invoke(*args)
    assert r.exit_code == code, r.output
    assert text in r.stderr
    if code == 1:
        assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1


def _cli(args, env=None, timeout=240):
    return subprocess.run([sys.executable, "-m", "dledgerctl", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_without_pyspark_the_spark_commands_say_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['pyspark'] = None; sys.argv = ['dledgerctl'] + sys.argv[1:];"
            "from dledgerctl.__main__ import main; main()")
    run = subprocess.run([sys.executable, "-c", code, "spark", "stats", fixture_path("leader")],
                         capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stderr, run.stdout) == (1, f"Error: {INSTALL_HINT}\n", "")
    # the rest of the tool never imports pyspark
    probe = ("import sys; import dledgerctl.app, dledgerctl.common; "
             "print(sorted(m for m in ('pyspark', 'pyarrow', 'py4j') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "[]"
    run = subprocess.run([sys.executable, "-c", code, "store", "verify", fixture_path("leader")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_a_real_process_without_java_home_and_with_a_bad_one(tmp_path):
    """The command as users run it: its own JVM (Java found on PATH), quiet stderr, exit 0;
    and a JAVA_HOME without Java is one error line."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    node = copy_fixture(tmp_path, "follower-truncated")
    run = _cli(["spark", "stats", node, "--master", "local[1]", "-f", "json"], env=env)
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)
    assert [(r["term"], r["last_index"]) for r in rows][-1] == (3, 290) and sum(r["entries"] for r in rows) == 291
    assert run.stderr == ""
    run = _cli(["spark", "stats", node], env=dict(env, JAVA_HOME=str(tmp_path / "no-java")))
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith("Error: JAVA_HOME=") and "Java 17" in run.stderr and run.stderr.count("\n") == 1


def test_a_failed_spark_job_is_one_line(spark, tmp_path):
    from dledgerctl.pipeline.errors import JobError
    from dledgerctl.pipeline.session import spark_errors

    with pytest.raises(JobError) as err:
        with spark_errors():
            spark.read.format("dledger").option("batchRows", "-1").load(fixture_path("leader")).count()
    assert str(err.value) == "option batchRows='-1': must be positive"


def test_the_shipped_zip_is_enough_to_read(tmp_path):
    """What executors without dledgerctl installed get: the zip alone (site-packages on the
    path but not its .pth files, so the editable install is not seen) reads a store."""
    from dledgerctl.pipeline.session import package_zip
    import pyarrow

    zip_path = package_zip(str(tmp_path))
    site = os.path.dirname(os.path.dirname(pyarrow.__file__))
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]];"
            "import store, store.reading as r, dledgerctl.pipeline.batches as b, dledgerctl.pipeline.options as o,"
            " dledgerctl.pipeline.source, dledgerctl.pipeline.inputs as i;"
            "(n,) = i.resolve_nodes([sys.argv[3]]); d, x = r.open_lists(n.dir, lazy=True);"
            "rows = sum(t.num_rows for f in d.files for t in b.read_file(o.FilePart(n.name, n.dir, f.start, d.file_size,"
            " x.file_size), o.ReadOptions()));"
            "print(rows, store.__file__.startswith(sys.argv[1]))")
    run = subprocess.run([sys.executable, "-S", "-c", code, zip_path, site, fixture_path("leader")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["600", "True"]
