"""Which epoch file RocketMQ 5.3.3's store reads, against what ``mq epochs`` says it reads
(issue 61: "a damaged epochFileCheckpoint is found with which file RocketMQ will read
instead"): its store in controller mode (tests/support/javarocketmq5ha.py) started on a root
whose ``epochFileCheckpoint`` is broken in each way, with a sound ``.bak`` beside it. Its
epochs as loaded (the replica's state) are compared with ``mq epochs``' choice; a number Java
cannot parse is not a fallback but a store that does not load."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from store.rocketmq.epochs import EpochEntry, epoch_file_text
from tests.support import javarocketmq5ha
from tests.support.javabuild import Unavailable
from tests.support.javarocketmq5ha import HaGroup, ReplicaError

runner = CliRunner()
BAK = [EpochEntry(1, 0), EpochEntry(3, 0)]  # (two epochs: a file RocketMQ took whole shows both)


@pytest.fixture(scope="module")
def java():
    try:
        return javarocketmq5ha.build()
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("main, reads", [
    (epoch_file_text([EpochEntry(2, 0)]), "main"),  # sound: the main file
    ("1\n12345\n2-0\n", "bak"),  # a CRC that fails
    ("2\n0\n2-0\n", "bak"),  # a count that does not match
    ("0\n0\n", "bak"),  # no entries
    (None, "bak"),  # missing
], ids=["sound", "crc", "count", "empty", "missing"])
def test_the_file_rocketmq_reads_is_the_one_mq_epochs_names(java, tmp_path, main, reads):
    with HaGroup(java, str(tmp_path), ids=(1,)) as g:
        root = g[1].root
        os.makedirs(os.path.join(root, "commitlog"))
        if main is not None:
            with open(os.path.join(root, "epochFileCheckpoint"), "w") as fh:
                fh.write(main)
        with open(os.path.join(root, "epochFileCheckpoint.bak"), "w") as fh:
            fh.write(epoch_file_text(BAK))
        r = runner.invoke(app, ["mq", "epochs", root, "-f", "json"])
        rows = json.loads(r.stdout)
        used, = [x for x in rows if x["row"] == "file" and x["used"]]
        assert used["path"].endswith(".bak") == (reads == "bak"), rows
        g[1].start()
        loaded = [(e["epoch"], e["start"]) for e in g[1].state()["epochs"]]
        assert loaded == [tuple(e) for e in used["entries"]]


def test_a_number_java_cannot_parse_stops_the_store_as_mq_epochs_says(java, tmp_path):
    with HaGroup(java, str(tmp_path), ids=(1,)) as g:
        root = g[1].root
        os.makedirs(os.path.join(root, "commitlog"))
        with open(os.path.join(root, "epochFileCheckpoint"), "w") as fh:
            fh.write("one\n0\n2-0\n")
        with open(os.path.join(root, "epochFileCheckpoint.bak"), "w") as fh:
            fh.write(epoch_file_text(BAK))
        r = runner.invoke(app, ["mq", "epochs", root, "-f", "json"])
        assert r.exit_code == 1
        assert [x["code"] for x in json.loads(r.stdout) if x["row"] == "error"] == ["epoch-file-unloadable"]
        with pytest.raises(ReplicaError) as failed:
            g[1].start()
        assert "NumberFormatException" in str(failed.value) or "NumberFormatException" in g[1].log_text()
