"""``spark mq-find`` takes ids and keys as ``mq messages`` does (issue 44.5, 44.15): ``--msg-id``
either id a message has (the offset msgId or the producer's UNIQ_KEY) with a ``matched``
column, and ``--key`` repeated (any of them). On a real local Spark session."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.rmq_store import write_broker_store


def test_mq_find_takes_either_id_and_several_keys(spark, tmp_path):
    uniq = lambda i: f"7F000001{i:024X}"
    specs = [dict(topic="T", body=b"m%d" % i, properties={"KEYS": f"order-{i}", "UNIQ_KEY": uniq(i)})
             for i in range(6)]
    written = write_broker_store(str(tmp_path / "n0"), specs)

    def find(*args):
        r = CliRunner().invoke(app, ["spark", "mq-find", str(tmp_path / "n0"), "--format", "json", *args])
        assert r.exit_code in (0, 1), r.output
        return json.loads(r.stdout) if r.exit_code == 0 else []

    (row,) = find("--msg-id", uniq(4).lower())
    assert (row["index"], row["matched"]) == (written[4]["index"], "uniq_key")
    (row,) = find("--msg-id", row["msg_id"])
    assert (row["index"], row["matched"]) == (written[4]["index"], "msg_id")
    assert [r["index"] for r in find("--key", "order-1", "--key", "order-5", "--key", "nope")] == \
        [written[1]["index"], written[5]["index"]]
