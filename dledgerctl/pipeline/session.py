"""Starting Spark for the jobs: master, quiet logs, the Python the executors run, shipping
the package to a real cluster, task progress, and Spark's errors as one line.

``start_session`` reuses a session that already runs in the process (tests, notebooks,
``spark-submit``); otherwise it launches Spark's JVM itself, with its console output sent
to a log file unless ``verbose`` (Spark's start-up chatter would otherwise mix with the
command's output), and registers the ``dledger`` data source.

Local masters (``local``, ``local[N]``, ``local[*]``): executors are Python workers of this
machine and run this interpreter (``sys.executable``, unless PYSPARK_PYTHON says
otherwise); the driver binds to 127.0.0.1 and the web UI stays off.

Other masters (``spark://``, ``yarn``, ``k8s://``): executors must be able to import
``store`` and ``dledgerctl.pipeline``. With ``ship=True`` (the default for these) the two
packages are zipped from this installation and added with ``SparkContext.addPyFile``;
their own dependencies (pyarrow, numpy; isal optional) must be installed on the executors.
The zip holds Python files only: a compiled module cannot be imported from a zip, so the
executors run the store's pure-Python twins of its C loops (same results, slower).
A ``spark://`` master on a loopback address (127.0.0.1, localhost) means executors on this
machine: the driver then binds to 127.0.0.1 too.

Which Python the executors run: ``spark.pyspark.python`` when the conf gives it, else
PYSPARK_PYTHON, else this interpreter's path. A PySpark program started from Python (as
dledgerctl starts Spark) takes it from PYSPARK_PYTHON only, when its SparkContext starts,
so the conf is applied by setting PYSPARK_PYTHON here. Spark also plans a Python data
source's reads on the driver with that same Python (with the shipped zip on its path), so
the path must exist on the driver's machine too.
Every node directory must be readable at the same path on the driver and the executors.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
import threading
import zipfile
from contextlib import contextmanager
from typing import Callable, Iterator

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from .errors import JobError, SparkStartError
from .source import register

DEFAULT_MASTER = "local[*]"
APP_NAME = "dledgerctl"
_LOCAL = re.compile(r"^local(\[(\d+|\*)(,\d+)?\])?$")
_LOOPBACK_MASTER = re.compile(r"^spark://(127\.[0-9.]+|localhost|\[::1\])(:\d+)?/?$", re.IGNORECASE)


def is_local(master: str) -> bool:
    return bool(_LOCAL.match(master.strip()))


def is_loopback(master: str) -> bool:
    """A standalone master on this machine's loopback address (its executors run here)."""
    return bool(_LOOPBACK_MASTER.match(master.strip()))


def executor_python(conf: dict[str, str]) -> str:
    """The Python the executors (and the driver's data source planning) run."""
    return conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or sys.executable


def _local_threads(master: str) -> int:
    m = _LOCAL.match(master.strip())
    n = m.group(2) if m and m.group(2) else "1"
    return (os.cpu_count() or 1) if n == "*" else int(n)


def default_conf(master: str) -> dict[str, str]:
    conf = {
        "spark.app.name": APP_NAME,
        "spark.master": master,
        "spark.ui.showConsoleProgress": "false",  # the command draws its own progress
    }
    if is_local(master):
        python = os.environ.get("PYSPARK_PYTHON") or sys.executable
        conf.update({
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.pyspark.python": python,
            "spark.pyspark.driver.python": os.environ.get("PYSPARK_DRIVER_PYTHON") or sys.executable,
            "spark.sql.shuffle.partitions": str(max(2, 2 * _local_threads(master))),
        })
    elif is_loopback(master):
        conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    return conf


def _workdir() -> str:
    path = tempfile.mkdtemp(prefix="dledgerctl-spark-")
    atexit.register(shutil.rmtree, path, True)
    return path


def package_zip(directory: str) -> str:
    """A zip of ``store`` (its subpackages too: store.rocketmq) and ``dledgerctl.pipeline``
    (with ``dledgerctl/__init__``) as this process imports them, for executors that do not
    have dledgerctl installed. Python only: the compiled loops have their Python twins."""
    import store

    import dledgerctl

    path = os.path.join(directory, "dledgerctl-pipeline.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for pkg, sub in ((store, ""), (dledgerctl, "pipeline")):
            root = os.path.dirname(os.path.abspath(pkg.__file__))
            parent = os.path.dirname(root)
            if sub:
                z.write(os.path.join(root, "__init__.py"), os.path.relpath(os.path.join(root, "__init__.py"), parent))
            top = os.path.join(root, sub) if sub else root
            for folder, dirs, names in os.walk(top):
                dirs[:] = sorted(d for d in dirs if os.path.exists(os.path.join(folder, d, "__init__.py")))
                for name in sorted(names):
                    if name.endswith(".py"):
                        full = os.path.join(folder, name)
                        z.write(full, os.path.relpath(full, parent))
    return path


def _java_problem() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        if not os.path.exists(os.path.join(home, "bin", "java")):
            return f"JAVA_HOME={home} has no bin/java; point it at a Java 17 or later installation"
        return None
    if shutil.which("java") is None:
        return "Java is not installed (Spark needs Java 17 or later): install it or set JAVA_HOME"
    return None


def _start_failure(log_path: str | None) -> str:
    tail = ""
    if log_path and os.path.exists(log_path):
        with open(log_path, errors="replace") as fh:
            lines = [ln.strip() for ln in fh.read().splitlines() if ln.strip()]
        if any("UnsupportedClassVersionError" in ln or "class file version" in ln for ln in lines):
            return "Spark needs Java 17 or later; set JAVA_HOME to one (java -version shows an older one)"
        errors = [ln for ln in lines if re.search(r"(Exception|Error)\b", ln)]
        tail = (errors or lines or [""])[-1]
    return "cannot start Spark" + (f": {tail}" if tail else "") + (f" (log: {log_path})" if log_path else "")


def start_session(master: str | None = None, conf: dict[str, str] | None = None, *, ship: bool | None = None,
                  verbose: bool = False) -> tuple[SparkSession, bool]:
    """A session with the ``dledger`` source registered; and whether this call started it
    (the caller then stops it). ``conf`` entries override the defaults."""
    if SparkContext._active_spark_context is not None:
        spark = SparkSession.builder.getOrCreate()
        register(spark)
        return spark, False
    master = master or DEFAULT_MASTER
    problem = _java_problem()
    if problem:
        raise SparkStartError(problem)
    settings = default_conf(master)
    settings.update(conf or {})
    spark_conf = SparkConf(loadDefaults=False)
    for k, v in settings.items():
        spark_conf.set(k, v)
    # PySpark's SparkContext takes the Python of every Python worker (the executors', and
    # the one planning a Python data source's reads on the driver) from PYSPARK_PYTHON,
    # the environment variable, when it starts; spark.pyspark.python is read only by
    # spark-submit. So a spark.pyspark.python given here is passed on through the variable.
    os.environ["PYSPARK_PYTHON"] = executor_python(settings)
    work = _workdir()
    log_path = None
    popen_kwargs = {}
    if not verbose:
        log_path = os.path.join(work, "spark.log")
        log = open(log_path, "ab")
        popen_kwargs = {"stdout": log, "stderr": log}
    from pyspark.java_gateway import launch_gateway

    try:
        gateway = launch_gateway(spark_conf, popen_kwargs=popen_kwargs)
    except Exception as exc:  # the JVM exited before it was ready: Java missing or too old, bad options
        raise SparkStartError(_start_failure(log_path)) from exc
    try:
        sc = SparkContext(conf=spark_conf, gateway=gateway)
    except Exception as exc:  # e.g. an unreachable master
        raise SparkStartError(f"cannot start Spark with master {master}: {first_line(exc)}") from exc
    sc.setLogLevel("INFO" if verbose else "ERROR")
    ship = (not is_local(master)) if ship is None else ship
    if ship:
        sc.addPyFile(package_zip(work))
    spark = SparkSession(sc)
    register(spark)
    return spark, True


@contextmanager
def session(master: str | None = None, conf: dict[str, str] | None = None, *, ship: bool | None = None,
            verbose: bool = False) -> Iterator[SparkSession]:
    """``start_session`` for the length of a block; stops Spark if the block started it."""
    spark, started = start_session(master, conf, ship=ship, verbose=verbose)
    try:
        yield spark
    finally:
        if started:
            spark.stop()


@contextmanager
def watch_tasks(spark: SparkSession, on_progress: Callable[[int, int], None], interval: float = 0.25):
    """Call ``on_progress(done, total)`` with the tasks of the running stages, from a
    thread, every ``interval`` seconds while the block runs."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            done = total = 0
            try:
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
            except Exception:  # the context is going away
                return
            if total:
                on_progress(done, total)

    thread = threading.Thread(target=loop, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


_PY_ERROR = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception)): (.+)$")


def first_line(exc: BaseException) -> str:
    """The line of a Spark error that says why: for a failed Python task the last
    ``SomeError: message`` of its traceback, else the first line."""
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _PY_ERROR.match(ln)
        if m and not ln.startswith(("org.apache", "java.", "py4j.", "scala.")):
            return f"{m.group(2)}" if m.group(1) in ("StoreIOError", "NotAStoreError", "StoreCorruptError",
                                                          "StoreUsageError", "ValueError") else f"{m.group(1)}: {m.group(2)}"
    java = _java_reason(exc)
    if java is not None:
        return java
    return lines[0] if lines else type(exc).__name__


def _java_reason(exc: BaseException) -> str | None:
    """For an error the JVM raised (py4j's "An error occurred while calling o71.parquet."),
    the innermost Java cause: ``IOException: Mkdirs failed to create file:/out``."""
    j = getattr(exc, "java_exception", None)
    if j is None:
        return None
    try:
        for _ in range(32):
            cause = j.getCause()
            if cause is None:
                break
            j = cause
        name = j.getClass().getSimpleName()
        message = j.getMessage()
    except Exception:  # noqa: BLE001 - the JVM may be gone: the text is all there is
        return None
    first = " ".join(str(message).split("\n")[0].split()) if message else ""
    return f"{name}: {first}" if first else name


@contextmanager
def spark_errors() -> Iterator[None]:
    """Spark's exceptions (analysis errors, failed tasks, a dead JVM) as JobError."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JError) as exc:
        raise JobError(first_line(exc)) from exc
