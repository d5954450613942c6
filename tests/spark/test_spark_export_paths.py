"""``spark export`` and ``spark mq-export`` report where each node's rows went: Spark
escapes a partition value's '/', ':', '%' ... in the directory it writes
(``node=a%2Fstore%2Fdledger-n0`` for node ``a/store/dledger-n0``), so the reported path is
the directory Spark wrote, which exists and holds exactly that node's rows."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
from typer.testing import CliRunner

from tests.support.stores import write_project_store
from dledgerctl.app import app
from tests.support.rmq_store import write_broker_store

runner = CliRunner()


def _spec(i: int) -> dict:
    return dict(topic=f"T{i % 2}", queue_id=0, body=b"body %d" % i, store_timestamp=1_700_000_000_000 + i,
                properties={"KEYS": f"k{i}", "UNIQ_KEY": f"U{i:05d}"})


def _check(rows, to, counts):
    assert sorted(r["node"] for r in rows) == sorted(counts)
    for r in rows:
        path = r["path"]
        assert os.path.isdir(path), (r["node"], path, sorted(os.listdir(to)))
        assert os.path.dirname(path) == str(to)
        table = pq.read_table([os.path.join(path, f) for f in os.listdir(path) if f.endswith(".parquet")])
        assert table.num_rows == r["entries"] == counts[r["node"]]


def test_mq_export_reports_the_directories_spark_wrote(spark, tmp_path):
    """Two broker groups whose store roots are both named store/: the nodes are named
    a:1/store/dledger-n0 and b%2/store/dledger-n0, which Spark must escape."""
    roots = {"a:1": 12, "b%2": 7}
    for group, n in roots.items():
        write_broker_store(str(tmp_path / group / "store"), [_spec(i) for i in range(n)], self_id="n0")
    to = tmp_path / "out"
    r = runner.invoke(app, ["spark", "mq-export", str(tmp_path / "a:1" / "store"), str(tmp_path / "b%2" / "store"),
                            "--to", str(to), "-f", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    _check(rows, to, {"a:1/store/dledger-n0": 12, "b%2/store/dledger-n0": 7})


def test_export_reports_the_directories_spark_wrote(spark, tmp_path):
    for group in ("g1", "g2"):
        write_project_store(tmp_path / group / "dledger-n0", count=20, data_file_size=16384, index_file_size=1024)
    to = tmp_path / "parquet"
    r = runner.invoke(app, ["spark", "export", str(tmp_path / "g1"), str(tmp_path / "g2"), "--to", str(to), "-f",
                            "json"])
    assert r.exit_code == 0, r.output
    _check(json.loads(r.stdout), to, {"g1/dledger-n0": 20, "g2/dledger-n0": 20})
