"""Fixtures and options shared by every room of the tests: writable copies of the DLedger
0.2.7 reference stores, the seeds of the cluster simulation, RocketMQ's message store built
from the mirrors, and one local Spark session. Plain helpers live in tests/support/.
"""

from __future__ import annotations

import signal

import pytest

from tests.support import bytecode, javadledger, timebound
from tests.support.group import Groups
from tests.support.stores import copy_fixture


@pytest.fixture
def fixture_copy(tmp_path):
    """``fixture_copy(name)``: a fresh writable copy of reference store ``name`` (a Path)."""
    made = []

    def make(name: str):
        dst = copy_fixture(tmp_path / f"copy{len(made)}", name)
        made.append(dst)
        return dst

    return make


@pytest.fixture
def group(tmp_path):
    """``group(nodes, *options)``: a local group of real node processes on 127.0.0.1 (cluster up,
    waited on until it serves: tests/support/group.py Groups), its base directory; every group
    the test started is stopped after it, on failure too."""
    groups = Groups(tmp_path)
    try:
        yield groups
    finally:
        groups.close()


@pytest.fixture(scope="module")
def module_group(request, tmp_path_factory):
    """``group`` for the tests of one module together: the groups started are stopped after
    the module's last test."""
    groups = Groups(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))
    try:
        yield groups
    finally:
        groups.close()


@pytest.fixture
def cluster(group):
    """A group of three real node processes on 127.0.0.1 (cluster up), stopped after the test."""
    return group(3, "--flush-interval", "40")


def pytest_addoption(parser):
    parser.addoption("--seeds", type=int, default=200,
                     help="how many seeds the random cluster simulation runs (tests/raft/test_cluster_sim.py)")


def pytest_configure(config):
    # A run started in the background (nohup, or '&' in a script) has SIGINT ignored, and every
    # process it starts inherits that, Python keeping it so: then the tests' Ctrl-C (SIGINT to a
    # command, a node, a follower) does nothing. The tests need a terminal's Ctrl-C.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line("markers", f"{timebound.MARK}: checks wall-clock bounds; in a parallel run it goes first "
                                       "and the other tests run niced (tests/support/timebound.py)")
    if not timebound.parallel(config):  # (the run's first process: xdist's controller, or the only one)
        bytecode.compile_project()


@pytest.hookimpl(tryfirst=True)  # (before xdist's own, which reads the xdist_group marks)
def pytest_collection_modifyitems(config, items):
    """In a parallel run (pytest-xdist, ``--dist loadgroup``), every test on the one Spark session
    goes to one worker: one Spark JVM a run instead of one per worker (each takes 10-20 s to
    start and about 1 GB). The timebound tests go first, on one worker (tests/support/timebound.py)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))
    if timebound.parallel(config):
        timebound.order(items)


_PRIORITY = pytest.StashKey[timebound.Priority]()


@pytest.hookimpl(tryfirst=True)  # (before the test's fixtures start anything)
def pytest_runtest_setup(item):
    if timebound.parallel(item.config):
        if _PRIORITY not in item.config.stash:
            item.config.stash[_PRIORITY] = timebound.Priority()
        item.config.stash[_PRIORITY].before(item)


def pytest_generate_tests(metafunc):
    if "sim_seed" in metafunc.fixturenames:
        metafunc.parametrize("sim_seed", range(metafunc.config.getoption("seeds")))


@pytest.fixture(scope="session")
def dledger_java():
    """Java DLedger 0.2.7 built from the mirrors (tests/support/javadledger.py), once a run;
    the test skips, saying why, when it cannot be built here."""
    try:
        return javadledger.build()
    except javadledger.Unavailable as exc:
        pytest.skip(f"Java DLedger 0.2.7 cannot be built here: {exc}")


# --- Spark ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["4.9.4", "4.9.8"])
def rocketmq(request):
    """RocketMQ's message store in DLedger mode built from the mirrors (tests/support/javarocketmq.py):
    4.9.4 with DLedger 0.2.6, and 4.9.8 with DLedger 0.3.1.2; the test skips, saying why,
    when a piece is missing."""
    from tests.support import javarocketmq

    try:
        return javarocketmq.build(request.param)
    except javarocketmq.Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def spark_session():
    """One real local Spark session (local[2]) for the whole test run: small shuffles, no
    web UI, the JVM's console output in a log file. CLI tests that use it run their
    commands on this session (start_session reuses a running one)."""
    from dledgerctl.pipeline.session import start_session

    session, started = start_session("local[2]", {"spark.sql.shuffle.partitions": "2",
                                                  "spark.default.parallelism": "2"})
    yield session
    if started:
        session.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def spark(spark_session, request):
    """The run's Spark session. A test that failed inside a call to the JVM (pytest-timeout's
    alarm, an interrupt) can leave this thread's Py4J connection with an answer unread, and
    every later call would read the one before it: after a failed test the connection is
    closed, the next call opens a new one, and the jobs it left running are cancelled."""
    yield spark_session
    if request.node.stash.get(_FAILED, False):
        client = spark_session.sparkContext._gateway._gateway_client
        connection = client.get_thread_connection()
        if connection is not None:
            connection.close()
        spark_session.sparkContext.cancelAllJobs()  # (a job the test left running would hold the cores)
