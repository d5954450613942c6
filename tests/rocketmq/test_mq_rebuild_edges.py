"""``mq rebuild`` on the edges a rebuild is for (issue 58 items 11, 13; issue 59 item 7):

- torn consume-queue files (a length that is not a whole number of 20-byte units): a
  ValueError traceback before; now what is whole is read, the torn files are named in a
  note, and the queues come back as the log says (a hypothesis fuzzer tears them);
- no ``consumequeue/`` left: the queue files' size is the broker's mappedFileSizeConsumeQueue
  from its configuration (``config/broker.properties`` beside the store, or ``--broker-conf``),
  rounded up to units as the broker does; without one, RocketMQ's default, said in a note
  with how to give another (before: 6,000,000-byte files with no word, for a broker of 6,000);
- Ctrl-C at the final renames: they finish (SIGINT is held over them), and the interrupt
  says so (before: exit 130, no word, new queues beside the old checkpoint).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.paths import ROOT
from tests.support.rmq_store import write_broker_store
from tests.support.stores import file_crcs
from store.rocketmq.layout import resolve_broker
from store.rocketmq.rebuild import rebuild

runner = CliRunner()
PER_FILE = 16  # units per consume-queue file: queues cross files
SHAPE = ["--max-hash-slot-num", "101", "--max-index-num", "404"]


def specs(n: int = 200) -> list[dict]:
    return [{"topic": f"T{i % 3}", "queue_id": i % 2, "body": b"m%d" % i * (1 + i % 7),
             "properties": {"TAGS": f"tag{i % 4}", "KEYS": f"k{i}"}} for i in range(n)]


def queues_of(root, sub="consumequeue") -> dict:
    base = os.path.join(root, sub)
    return {os.path.relpath(os.path.join(d, f), base): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(base) for f in files}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A store and the queues RocketMQ's dispatch makes of its log (rmq_store writes them)."""
    root = tmp_path_factory.mktemp("edges") / "broker"
    write_broker_store(str(root), specs(), data_file_size=8 << 10, cq_units_per_file=PER_FILE)
    return root, queues_of(root)


@pytest.fixture
def store(built, tmp_path):
    src, want = built
    root = tmp_path / "broker"
    shutil.copytree(src, root)
    return root, want


def run_rebuild(root, *args, code=0):
    r = runner.invoke(app, ["mq", "rebuild", str(root), "--format", "json", *SHAPE, *map(str, args)])
    assert r.exit_code == code, r.output
    return (json.loads(r.stdout)[0] if code == 0 else {}), r.stderr


# --- torn consume-queue files ------------------------------------------------------------------------

def test_a_torn_queue_file_is_read_up_to_its_last_whole_unit_and_named(store):
    root, want = store
    path = root / "consumequeue" / "T0" / "0" / f"{2 * PER_FILE * 20:020d}"
    os.truncate(path, 20 + 7)  # (its last file, torn after its one unit: a ValueError traceback before)
    s, err = run_rebuild(root)
    assert queues_of(root) == want
    assert "1 old consume-queue file ends in part of a unit (torn: consumequeue/T0/0/00000000000000000640 has 7 " \
           "bytes past its last whole one)" in err
    assert "Traceback" not in err
    assert runner.invoke(app, ["mq", "check", str(root)]).exit_code == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_torn_and_trailing_bytes_in_queue_files_never_stop_a_rebuild(built, data):
    src, want = built
    files = sorted(want)
    keep = data.draw(st.sampled_from(files))  # (one stays whole: the old files' size is its length)
    hurt = data.draw(st.lists(st.sampled_from([f for f in files if f != keep]), min_size=1, max_size=4, unique=True))
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "broker")
        shutil.copytree(src, root)
        torn = 0
        for name in hurt:
            path = os.path.join(root, "consumequeue", name)
            size = os.path.getsize(path)
            how = data.draw(st.sampled_from(["cut", "tail", "empty"]))
            if how == "cut":
                n = data.draw(st.integers(0, size - 1))
                os.truncate(path, n)
                torn += n % 20 != 0
            elif how == "tail":
                with open(path, "ab") as fh:
                    fh.write(data.draw(st.binary(min_size=1, max_size=19)))
                torn += 1
            else:
                os.truncate(path, 0)
        s = rebuild(resolve_broker(root), max_hash_slot_num=101, max_index_num=404)
        assert queues_of(root) == want  # (what the log says, whatever the old files held)
        notes = "; ".join(s.notes)
        assert (f"{torn} old consume-queue file" in notes) if torn else ("part of a unit" not in notes), notes


# --- the queue file size: the broker's configuration -------------------------------------------------

@pytest.mark.parametrize("where", ["config", "option"])
def test_with_no_queue_left_the_size_is_the_brokers_configured_one(store, tmp_path, where):
    root, want = store
    shutil.rmtree(root / "consumequeue")
    text = "# broker-a\nbrokerName = broker-a\nmappedFileSizeConsumeQueue = 310\n"  # (310: rounded up to 320)
    if where == "config":
        os.makedirs(root / "config")
        conf = root / "config" / "broker.properties"
        conf.write_text(text)
        _s, err = run_rebuild(root)
    else:
        conf = tmp_path / "broker.conf"
        conf.write_text(text)
        _s, err = run_rebuild(root, "--broker-conf", conf)
    assert queues_of(root) == want  # (PER_FILE units of 20 bytes: 320-byte files, as rmq_store wrote them)
    assert f"{conf}: mappedFileSizeConsumeQueue=310, which the broker rounds up to 320" in err
    assert f"consume-queue files of 320 bytes, the mappedFileSizeConsumeQueue of {conf}" in err


def test_without_a_size_anywhere_the_default_is_said_with_how_to_give_another(store):
    root, _want = store
    shutil.rmtree(root / "consumequeue")
    _s, err = run_rebuild(root)
    sizes = {os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root / "consumequeue") for f in fs}
    assert sizes == {6_000_000}
    assert "consume-queue files of 6000000 bytes, RocketMQ's default mappedFileSizeConsumeQueue" in err
    assert "--broker-conf FILE" in err and "--queue-file-size SIZE" in err


def test_a_size_the_broker_skips_is_said_and_the_default_taken(store, tmp_path):
    root, _want = store
    shutil.rmtree(root / "consumequeue")
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeConsumeQueue=6000 \n")  # (Integer.parseInt of "6000 " throws: skipped)
    _s, err = run_rebuild(root, "--broker-conf", conf)
    assert "mappedFileSizeConsumeQueue='6000 ' is not an int, so the broker skips it" in err
    assert {os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root / "consumequeue") for f in fs} == \
        {6_000_000}


@pytest.mark.parametrize("what", ["fifo", "bad-escape", "missing", "overflow"])
def test_a_broker_conf_that_cannot_be_used_is_one_error_and_nothing_changes(store, tmp_path, what):
    root, _want = store
    conf = tmp_path / "broker.conf"
    if what == "fifo":
        os.mkfifo(conf)  # (read blindly, it would wait for a writer forever)
    elif what == "bad-escape":
        conf.write_text("mappedFileSizeConsumeQueue=\\u00zz\n")
    elif what == "overflow":
        conf.write_text("mappedFileSizeConsumeQueue=2147483647\n")  # (the broker's int product wraps negative)
    before = file_crcs(root)
    r = runner.invoke(app, ["mq", "rebuild", str(root), *SHAPE, "--broker-conf", str(conf)])
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("Error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert str(conf) in r.stderr
    assert file_crcs(root) == before and not [n for n in os.listdir(root) if n.startswith(".rebuild-")]


# --- Ctrl-C ------------------------------------------------------------------------------------------

INTERRUPTING = """
import os, signal, sys
where, root = sys.argv[1], sys.argv[2]
sys.argv = ["dledgerctl", "mq", "rebuild", root, *sys.argv[3:]]
import store.rocketmq.rebuild as rebuild

def interrupt():
    os.kill(os.getpid(), signal.SIGINT)  # (a real SIGINT, as a terminal's Ctrl-C sends it)

if where == "renames":  # at the first of the final renames (the old consumequeue/ set aside)
    real = os.rename
    def rename(a, b):
        if os.path.basename(a) == "consumequeue" and ".old-" in b:
            interrupt()
        return real(a, b)
    os.rename = rename
else:  # while the index is written
    real_index = rebuild._write_index
    def write_index(*a, **kw):
        interrupt()
        return real_index(*a, **kw)
    rebuild._write_index = write_index
from dledgerctl.__main__ import main
main()
"""


def interrupted(root, where: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", INTERRUPTING, where, str(root), *SHAPE], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_ctrl_c_at_the_final_renames_lets_them_finish_and_says_so(store):
    root, want = store
    os.truncate(root / "consumequeue" / "T1" / "1" / "00000000000000000000", 33)  # (something to rebuild)
    r = interrupted(root, "renames")
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.splitlines()[-1].startswith(f"{root}: interrupted during the final renames, which were "
                                                f"finished first: the rebuild is complete (the old files are "
                                                f"consumequeue.old-"), r.stderr
    assert queues_of(root) == want  # the new queues are in, with their checkpoint and index
    names = os.listdir(root)
    assert not [n for n in names if n.startswith(".rebuild-")], names
    assert {n.split(".old-")[0] for n in names if ".old-" in n} == {"consumequeue", "index"}
    assert "checkpoint" in names and runner.invoke(app, ["mq", "check", str(root)]).exit_code == 0


def test_ctrl_c_before_the_renames_leaves_the_store_as_it_was_and_says_so(store):
    root, _want = store
    before = file_crcs(root)
    r = interrupted(root, "index")
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "interrupted before the rebuilt files were renamed in: the store is as it was" in r.stderr
    assert file_crcs(root) == before and not [n for n in os.listdir(root) if n.startswith(".rebuild-")]
