"""The Spark jobs on a real Spark cluster, not ``local[*]``: a standalone master and one
worker started from the installed pyspark (``spark-class ...Master`` / ``...Worker``), on
127.0.0.1 only, one core, small memory; ``dledgerctl spark audit`` and ``spark mq-topics``
submitted to it with ``--master spark://127.0.0.1:PORT`` as a real process, with executors
whose Python has no dledgerctl (a bare venv holding only numpy and pyarrow, what pyspark's
Python workers and the pipeline's readers import): the answers must equal the local ones,
so the pipeline has shipped its own code (``store`` and ``dledgerctl.pipeline``, Python
only: the compiled loops' pure-Python twins run there).

Every wait has a deadline; the master, the worker and the executors it starts are stopped
by a finalizer (their whole process groups), whatever happens.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib

import numpy
import pyarrow
import pyspark
import pytest
from typer.testing import CliRunner

from tests.support.stores import copy_fixture, patch, write_project_store
from dledgerctl.app import app
from tests.support.ports import HOST, free_ports
from tests.support.rmq_store import write_broker_store
from store.rocketmq.layout import resolve_broker
from store.rocketmq.migrate import migrate
from store.filestore import FileStore
from store.format import MAGIC_NOOP, file_name

pytestmark = pytest.mark.timeout(900)

SPARK_HOME = os.path.dirname(os.path.abspath(pyspark.__file__))
START_DEADLINE = 120.0  # seconds for a master or worker JVM to come up on a busy machine
STOP_DEADLINE = 30.0
JOB_DEADLINE = 420.0  # one command: its own driver JVM, an executor, the job
runner = CliRunner()


# --- processes --------------------------------------------------------------------------------

def _group_members(pgid: int) -> list[int]:
    """Live processes of a process group (read from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            out.append(int(entry))
    return out


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop a process started in a session of its own and everything in its group
    (a worker's executors): SIGTERM, then SIGKILL after a deadline."""
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, STOP_DEADLINE), (signal.SIGKILL, STOP_DEADLINE)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + wait
        while _group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _group_members(pgid):
            return
    left = _group_members(pgid)
    assert not left, f"processes of group {pgid} survive SIGKILL: {left}"


def _wait_for_line(proc: subprocess.Popen, log: str, needle: str, what: str) -> None:
    deadline = time.monotonic() + START_DEADLINE
    while time.monotonic() < deadline:
        with open(log, errors="replace") as fh:
            text = fh.read()
        if needle in text:
            return
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode} before it was ready:\n{text[-3000:]}")
        time.sleep(0.2)
    with open(log, errors="replace") as fh:
        pytest.fail(f"{what} not ready within {START_DEADLINE:.0f} s:\n{fh.read()[-3000:]}")


def _clean_env(**extra) -> dict[str, str]:
    """This environment without anything that would point a Python at dledgerctl or at
    another Spark."""
    drop = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "SPARK_CONF_DIR",
            "PYSPARK_SUBMIT_ARGS", "SPARK_LOCAL_IP")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def standalone(request, tmp_path_factory):
    """A standalone master and one worker (1 core, 1 GiB for executors) on 127.0.0.1; the
    master's URL. Both are stopped by finalizers registered as each starts."""
    base = tmp_path_factory.mktemp("standalone")
    conf_dir = base / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.master.rest.enabled false\n"  # (else a REST server on the fixed port 6066)
        "spark.worker.cleanup.enabled false\n")
    master_port, master_ui, worker_port, worker_ui = free_ports(4)
    env = _clean_env(SPARK_HOME=SPARK_HOME, SPARK_CONF_DIR=str(conf_dir), SPARK_LOCAL_IP=HOST,
                     SPARK_LOG_DIR=str(base / "logs"), SPARK_DAEMON_MEMORY="256m", SPARK_NO_DAEMONIZE="1")
    spark_class = os.path.join(SPARK_HOME, "bin", "spark-class")
    url = f"spark://{HOST}:{master_port}"

    def start(what: str, args: list[str], ready: str) -> None:
        log = str(base / f"{what}.log")
        with open(log, "wb") as out:
            proc = subprocess.Popen([spark_class, *args], env=env, cwd=str(base), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        request.addfinalizer(lambda: _stop_group(proc))
        _wait_for_line(proc, log, ready, what)

    start("master", ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(master_port),
                     "--webui-port", str(master_ui)], "I have been elected leader")
    start("worker", ["org.apache.spark.deploy.worker.Worker", "--host", HOST, "--port", str(worker_port),
                     "--webui-port", str(worker_ui), "--cores", "1", "--memory", "1g",
                     "--work-dir", str(base / "work"), url], "Successfully registered with master")
    return url


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A venv's Python with only what pyspark's Python workers and the pipeline's readers
    need (numpy, pyarrow: linked from this installation), and no dledgerctl or store."""
    venv = tmp_path_factory.mktemp("bare-venv")
    base_python = os.path.realpath(sys.executable)
    subprocess.run([base_python, "-m", "venv", "--without-pip", "--clear", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    here = os.path.dirname(os.path.dirname(os.path.abspath(numpy.__file__)))
    for name in ("numpy", "numpy.libs", "pyarrow"):
        if os.path.exists(os.path.join(here, name)):
            os.symlink(os.path.join(here, name), os.path.join(site, name))
    assert os.path.dirname(os.path.dirname(os.path.abspath(pyarrow.__file__))) == here
    probe = ("import importlib.util as u, numpy, pyarrow;"
             "print([m for m in ('dledgerctl', 'store', 'cluster', 'isal', 'pyspark') if u.find_spec(m)])")
    seen = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=str(venv), timeout=60)
    assert (seen.returncode, seen.stdout.strip()) == (0, "[]"), seen.stderr
    return python


def _cli(args, env, cwd, timeout=JOB_DEADLINE) -> subprocess.CompletedProcess:
    """``dledgerctl ARGS`` as a process of its own (its own driver JVM), in a session of its
    own so that nothing it starts outlives it."""
    proc = subprocess.Popen([sys.executable, "-m", "dledgerctl", *map(str, args)], env=env, cwd=str(cwd),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = "", f"(no answer within {timeout:.0f} s)"
    finally:
        _stop_group(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _local(*args):
    """The same command on the local session (local[2], this machine's two cores)."""
    return runner.invoke(app, [str(a) for a in args])


CLUSTER_CONF = ["--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=1",
                "--conf", "spark.task.maxFailures=1"]


# --- stores -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """Three replicas under one base directory (n2 diverges at 40, n1 has a damaged body)
    and DLedger 0.2.7's leader store: several data files each, so several tasks."""
    tmp = tmp_path_factory.mktemp("audit")
    base = tmp / "group"
    write_project_store(base / "dledger-n0", count=60, data_file_size=16384, index_file_size=1024, committed=55)
    for other in ("dledger-n1", "dledger-n2"):
        shutil.copytree(base / "dledger-n0", base / other)
    with FileStore.open(str(base / "dledger-n2")) as s:
        s.truncate(40, force=True)
        s.append_leader([b"x" * 30] * 5, term=3)
    with FileStore.open(str(base / "dledger-n1"), read_only=True) as s:
        pos, _ = s.locate(30)
    patch(base / "dledger-n1" / "data" / file_name(pos - pos % 16384), pos % 16384 + 50, b"\xff\xfe")
    return [base, copy_fixture(tmp, "leader")]


def _spec(i: int, **kw) -> dict:
    out = dict(topic=f"T{i % 3}", queue_id=i % 2, body=b"message %d " % i * (1 + i % 7),
               store_timestamp=1_700_000_000_000 + i,
               properties={"TAGS": f"tag{i % 2}", "KEYS": f"order-{i}", "UNIQ_KEY": f"U{i:05d}"})
    out.update(kw)
    return out


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """Two broker store roots (RocketMQ messages in DLedger entries, 16 KiB data files),
    one with a compressed body, a CJK topic and an IPv6 store host; b ends in a no-op; and
    the master-slave store mq migrate makes of a (16 KiB commit-log files: the job counts
    each file's messages in a task of its own first, on the cluster too)."""
    base = tmp_path_factory.mktemp("brokers")
    specs = [_spec(i) for i in range(200)]
    specs[7] = _spec(7, body=zlib.compress(b"compressed " * 50), sys_flag=0x1)
    specs[9] = _spec(9, topic="主题", store_host="[::1]:10911")
    for node, n in (("a", 200), ("b", 170)):
        write_broker_store(str(base / node), specs[:n], self_id="n0", data_file_size=16384)
    with FileStore.open(str(base / "b" / "dledger-n0")) as s:
        s.append_leader([b""], 2, MAGIC_NOOP)
    assert migrate(resolve_broker(str(base / "a")), str(base / "ms"), commitlog_file_size=16384).files > 2
    return [base / "a", base / "b", base / "ms"]


# --- tests ------------------------------------------------------------------------------------

def test_the_executors_python_has_no_dledgerctl(standalone, bare_python, group, tmp_path):
    """The premise of the tests below: without the shipped zip, the cluster's Python cannot
    run the job (so the answers below come from the code dledgerctl shipped)."""
    run = _cli(["spark", "stats", group[0], "--master", standalone, "--no-ship",
                "--conf", f"spark.pyspark.python={bare_python}", *CLUSTER_CONF], _clean_env(), tmp_path)
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert run.stderr.startswith("Error: ") and run.stderr.count("\n") == 1, run.stderr
    assert "No module named 'dledgerctl'" in run.stderr or "No module named 'store'" in run.stderr, run.stderr


def test_audit_on_a_standalone_cluster_is_the_local_audit(spark, standalone, bare_python, group, tmp_path):
    local = _local("spark", "audit", *group, "-f", "json")
    assert local.exit_code == 1, local.output  # n1 is damaged
    want = json.loads(local.stdout)
    assert [r["verdict"] for r in want] == ["ok", "damaged", "ok", "ok"]
    run = _cli(["spark", "audit", *group, "--master", standalone, "--conf", f"spark.pyspark.python={bare_python}",
                *CLUSTER_CONF, "-f", "json"], _clean_env(), tmp_path)
    assert run.returncode == 1, run.stderr
    assert json.loads(run.stdout) == want
    assert run.stderr == ""


def test_mq_topics_on_a_standalone_cluster_is_the_local_answer(spark, standalone, bare_python, brokers, tmp_path):
    local = _local("spark", "mq-topics", *brokers, "-f", "json")
    assert local.exit_code == 0, local.output
    want = json.loads(local.stdout)
    assert {r["topic"] for r in want} == {"T0", "T1", "T2", "主题"} and sum(r["messages"] for r in want) == 570
    assert sum(r["messages"] for r in want if r["node"] == "ms") == 200
    # the executors' Python through PYSPARK_PYTHON this time (the conf's route is above)
    run = _cli(["spark", "mq-topics", *brokers, "--master", standalone, *CLUSTER_CONF, "-f", "json"],
               _clean_env(PYSPARK_PYTHON=bare_python), tmp_path)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == want


def test_a_loopback_master_binds_the_driver_to_loopback():
    from dledgerctl.pipeline.session import default_conf

    for master in ("spark://127.0.0.1:7077", "spark://localhost:7077", "spark://[::1]:7077"):
        conf = default_conf(master)
        assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1"), master
    for master in ("spark://10.1.2.3:7077", "spark://spark-master:7077", "yarn"):
        assert "spark.driver.bindAddress" not in default_conf(master), master
