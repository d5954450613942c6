"""A RocketMQ 5.3.3 controller group as RocketMQ starts one: ``ControllerStartup`` (its
``ControllerManager``: the DLedgerController, the ``ControllerRequestProcessor`` on the
controller's remoting server, the ``DefaultBrokerHeartbeatManager`` and its scan of inactive
brokers), one JVM per member, for ``controller watch`` (tests/java/test_controller_watch_java.py).

Built at test time from the mirrors (``ROCKETMQ_MIRROR``, ``DLEDGER_MIRROR``, ``FASTJSON_MIRROR``)
as tests/support/javarocketmq5.py builds the DLedgerController alone: fastjson 1.2.83, then
RocketMQ's own ``org.apache.rocketmq.controller.ControllerStartup`` compiled with javac's
``-sourcepath`` over rocketmq-all-5.3.3's ``common``, ``remoting``, ``controller`` and
``srvutil`` modules and DLedger 0.3.1.2 (javac compiles only what ControllerStartup reaches).
No program of ours runs in the JVM: the main class is RocketMQ's.

Stand-ins, first on the source path (tests/support/java/rocketmq5ctl/), then those of
java/rocketmq5-standins/ and tests/support/javastandins.py (OpenTelemetry's API):

- ``ControllerMetricsManager``: the no-op instruments of java/rocketmq5-standins/ plus the
  ``getInstance(ControllerManager)`` that ``ControllerManager.initialize`` calls (metrics are
  disabled by default in RocketMQ, and OpenTelemetry's SDK is not here);
- ``JRaftController``: RocketMQ's JRaft controller needs sofa-jraft, which neither the mirrors
  nor Debian have. ``ControllerManager`` names it but reaches it only with
  ``controllerType=jRaft``; every method of the stand-in throws. The DLedger controller (the
  default) is what runs.

Debian jars: those of tests/support/javarocketmq5.py, plus commons-cli (``ServerUtil`` parses
``-c FILE``); slf4j-simple at run time, so RocketMQ's log lines ("Elect a new master in
broker-set ...", "The broker channel ... expired") land in ``<member>.log``.

Each member reads a properties file as ``mqcontroller -c FILE`` does (ControllerConfig,
NettyServerConfig, NettyClientConfig); its remoting server is its DLedger server (DLedger
listens on the member's port in ``controllerDLegerPeers`` and the controller registers its
request processor there), so one port per member serves both the controller's admin requests
and DLedger's. A missing piece raises :class:`Unavailable`; the tests skip naming it. Every
process started is killed by :meth:`ControllerCluster.close` (a context manager), on failure too.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time

from tests.support import javastandins
from tests.support.javabuild import JAVA_FLAGS, SWAGGER_STANDIN, Unavailable, commit_of, extract, jar, mirror
from tests.support.javarocketmq import _MONETA_STANDIN
from tests.support.javarocketmq5 import DLEDGER_TAG, FASTJSON_JARS, FASTJSON_TAG, ROCKETMQ_TAG, STANDINS, _java_files, \
    _javac, build_fastjson
from tests.support.javarocketmq5 import JARS as CONTROLLER_JARS
from tests.support.javarocketmq5ha import LOG_FLAGS, LOG_JAR
from tests.support.ports import HOST, free_ports

__all__ = ["Unavailable", "JavaController", "ControllerCluster", "build"]

HERE = os.path.dirname(os.path.abspath(__file__))
OURS = os.path.join(HERE, "java", "rocketmq5ctl")  # stand-ins only
MODULES = ["common", "remoting", "controller", "srvutil"]
MAIN = "org.apache.rocketmq.controller.ControllerStartup"
MAIN_SOURCE = "controller/src/main/java/org/apache/rocketmq/controller/ControllerStartup.java"
JARS = {**CONTROLLER_JARS, "commons-cli": "libcommons-cli-java"}
BOOTED = "The Controller Server boot success"  # ControllerStartup.main0's line on stdout


class JavaController:
    """The built controller: its class path and the java command for one member."""

    def __init__(self, root: str, jars: list[str]) -> None:
        self.root = root
        self.classpath = os.pathsep.join([os.path.join(root, "classes"), os.path.join(root, "fastjson"), *jars])

    def command(self, config: str, home: str) -> list[str]:
        return ["java", *JAVA_FLAGS, *LOG_FLAGS, "-Xmx160m", f"-Drocketmq.home.dir={home}", "-cp", self.classpath,
                MAIN, "-c", config]


def _build_into(out: str, commits: dict, jars: list[str], fastjson_jars: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="rocketmq5-ctl-build-") as work:
        build_fastjson(work, os.path.join(out, "fastjson"), commits["fastjson"], fastjson_jars)
        repo, commit = commits["rocketmq"]
        src = os.path.join(work, "rocketmq")
        extract(repo, commit, [f"{m}/src/main/java" for m in MODULES], src)
        repo, commit = commits["dledger"]
        dsrc = os.path.join(work, "dledger")
        extract(repo, commit, ["dledger/src/main/java"], dsrc)
        generated = os.path.join(work, "standins")
        javastandins.write_sources(generated)
        roots = [OURS, STANDINS] + [os.path.join(src, m, "src/main/java") for m in MODULES] + [
            os.path.join(dsrc, "dledger/src/main/java"), generated]
        _javac([os.path.join(src, MAIN_SOURCE)], os.path.join(out, "classes"), [*jars, os.path.join(out, "fastjson")],
               ["-implicit:class", "-sourcepath", os.pathsep.join(roots),
                "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"],
               f"ControllerStartup of {ROCKETMQ_TAG} ({', '.join(MODULES)}) + {DLEDGER_TAG}")


def build(cache_root: str | None = None) -> JavaController:
    """Build (or take from the cache) RocketMQ 5.3.3's controller; Unavailable naming what is
    missing."""
    if not (shutil.which("javac") and shutil.which("java")):
        raise Unavailable("javac/java not found on PATH (install a JDK; default-jdk-headless is 17 here)")
    wanted = {
        "rocketmq": (mirror("apache/rocketmq", "ROCKETMQ_MIRROR"), ROCKETMQ_TAG, "apache/rocketmq", "ROCKETMQ_MIRROR"),
        "dledger": (mirror("openmessaging/dledger", "DLEDGER_MIRROR"), DLEDGER_TAG, "openmessaging/dledger",
                    "DLEDGER_MIRROR"),
        "fastjson": (mirror("alibaba/fastjson", "FASTJSON_MIRROR"), FASTJSON_TAG, "alibaba/fastjson",
                     "FASTJSON_MIRROR"),
    }
    commits = {k: (repo, commit_of(repo, ref, what, env)) for k, (repo, ref, what, env) in wanted.items()}
    jars = [jar(j, p) for j, p in JARS.items()]
    fastjson_jars = [jar(j, p) for j, p in FASTJSON_JARS.items()]
    log_jar = jar(*LOG_JAR)
    h = hashlib.sha256()
    javac_version = subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout.strip()
    for part in ["rocketmq5ctl", *(c for _, c in commits.values()), *map(os.path.realpath, jars + fastjson_jars),
                 javac_version, SWAGGER_STANDIN, _MONETA_STANDIN, javastandins.fingerprint()]:
        h.update(part.encode() + b"\0")
    for path in _java_files(OURS) + _java_files(STANDINS):
        with open(path, "rb") as fh:
            h.update(path.encode() + b"\0" + fh.read() + b"\0")
    root = cache_root or os.environ.get("DLEDGERCTL_JAVA_CACHE") or os.path.expanduser("~/.cache/dledgerctl-java")
    os.makedirs(root, exist_ok=True)
    out = os.path.join(root, f"rocketmq5ctl-{h.hexdigest()[:16]}")
    with open(os.path.join(root, ".rocketmq5ctl-build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isfile(os.path.join(out, "BUILT")):
            tmp = f"{out}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                _build_into(tmp, commits, jars, fastjson_jars)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            open(os.path.join(tmp, "BUILT"), "w").close()
            shutil.rmtree(out, ignore_errors=True)
            os.rename(tmp, out)
    return JavaController(out, jars + [log_jar])


class ControllerCluster:
    """``ids`` members of one controller group on 127.0.0.1, each ControllerStartup in its own
    JVM with ``options`` (ControllerConfig's property names, e.g. ``scanNotActiveBrokerInterval``)
    over the defaults below; member files under ``base/<id>/``, output in ``base/<id>.log``."""

    GROUP = "watch-ctl"

    def __init__(self, java: JavaController, base: str, ids=("n0",), options: dict | None = None) -> None:
        self.java, self.base, self.ids = java, base, list(ids)
        self.ports = dict(zip(self.ids, free_ports(len(self.ids))))
        self.peers = ";".join(f"{n}-{HOST}:{p}" for n, p in self.ports.items())
        self.options = dict(options or {})
        self.procs: dict[str, subprocess.Popen] = {}

    def __enter__(self) -> "ControllerCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def address(self, node: str) -> str:
        return f"{HOST}:{self.ports[node]}"

    @property
    def addresses(self) -> str:
        """The members' remoting addresses as ``mqadmin -a`` takes them (``;`` between)."""
        return ";".join(self.address(n) for n in self.ids)

    def log_path(self, node: str) -> str:
        return os.path.join(self.base, f"{node}.log")

    def log_text(self, node: str) -> str:
        try:
            with open(self.log_path(node), errors="replace") as fh:
                return fh.read()
        except FileNotFoundError:
            return ""

    def _config(self, node: str) -> str:
        home = os.path.join(self.base, node)
        os.makedirs(home, exist_ok=True)
        props = {"controllerDLegerGroup": self.GROUP, "controllerDLegerPeers": self.peers,
                 "controllerDLegerSelfId": node, "controllerStorePath": os.path.join(home, "store"),
                 "configStorePath": os.path.join(home, "controller.properties"), "mappedFileSize": 4 << 20,
                 **self.options}
        path = os.path.join(home, "controller.conf")
        with open(path, "w") as fh:
            fh.write("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def start(self, node: str, timeout: float = 90.0) -> None:
        """Start ``node`` and wait (at most ``timeout``) for ControllerStartup's boot line."""
        config = self._config(node)
        with open(self.log_path(node), "ab") as log:
            self.procs[node] = subprocess.Popen(self.java.command(config, os.path.join(self.base, node)),
                                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True)
        self.wait_for(node, lambda text: BOOTED in text, f"{node} to boot", timeout)

    def start_all(self, timeout: float = 90.0) -> None:
        for node in self.ids:
            self.start(node, timeout)

    def wait_for(self, node: str, predicate, what: str, timeout: float) -> str:
        """Poll ``node``'s output until ``predicate(text)`` (AssertionError with its tail at
        the deadline, or when the process has exited)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text(node)
            if predicate(text):
                return text
            proc = self.procs.get(node)
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"{node} exited ({proc.returncode}) while waiting for {what}:\n{text[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:.0f} s:\n{text[-4000:]}")
            time.sleep(0.2)

    def kill(self, node: str, grace: float = 10.0) -> None:
        """SIGTERM (ControllerStartup's shutdown hook), SIGKILL after ``grace`` seconds."""
        proc = self.procs.pop(node, None)
        if proc is None:
            return
        try:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=30)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        for node in list(self.procs):
            self.kill(node)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]


class SimulatedBrokers:
    """Brokers of controller mode simulated at the protocol level, through dledgerctl's own
    remoting client (cluster/net/remoting.py), in the order RocketMQ 5.3.3's broker sends its
    requests (broker/.../controller/ReplicasManager and BrokerOuterAPI): getNextBrokerId,
    applyBrokerId (check code ``address;millis``), a heartbeat, registerBroker, and electMaster
    as a broker triggers it when no master is registered; a master then asks alterSyncStateSet
    to take a caught-up slave in. No store runs: heartbeats say epoch, maxOffset 0.

    Each broker has a connection of its own (the controller keeps a broker's channel with its
    liveness) and heartbeats every ``every`` seconds, two-way so that each one is known taken
    (a broker sends them one-way; the controller handles both alike), from an asyncio loop in
    a thread. :meth:`hang` stops a broker's heartbeats and keeps its connection open, as a
    broker that hangs (a long GC pause, a stuck disk) does; :meth:`close_connection` closes it,
    as a broker process that dies does."""

    def __init__(self, controller_address: str, cluster: str = "watch-cluster", *, timeout_millis: int = 3000,
                 every: float = 0.5) -> None:
        import asyncio
        import threading

        self.address, self.cluster = controller_address, cluster
        self.timeout_millis, self.every = timeout_millis, every
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.clients: dict[tuple[str, int], object] = {}
        self.beating: dict[tuple[str, int], object] = {}  # (broker set, id) -> its heartbeat task
        self.addresses: dict[tuple[str, int], str] = {}
        self.heartbeats: dict[tuple[str, int], int] = {}

    def _run(self, coro, timeout: float = 30.0):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def join(self, broker: str, port: int):
        """One broker of set ``broker`` (advertising 127.0.0.1:``port``) joins: its id and the
        master the controller answered (cluster.net.remoting.MasterAnswer)."""
        from cluster.net.remoting import ControllerClient

        async def go():
            c = ControllerClient(self.address, timeout=5.0)
            address = f"{HOST}:{port}"
            bid = await c.next_broker_id(self.cluster, broker)
            await c.apply_broker_id(self.cluster, broker, bid, f"{address};{int(time.time() * 1000)}")
            await c.heartbeat(self.cluster, broker, address, bid, timeout_millis=self.timeout_millis)
            answer = await c.register_broker(self.cluster, broker, bid, address)
            if answer.master_broker_id is None:
                answer = await c.elect_master(self.cluster, broker, bid)
            key = (broker, bid)
            self.clients[key], self.addresses[key], self.heartbeats[key] = c, address, 1
            self.beating[key] = self.loop.create_task(self._beat(key))
            return bid, answer

        return self._run(go())

    async def _beat(self, key) -> None:
        import asyncio

        c, (broker, bid) = self.clients[key], key
        while True:
            await asyncio.sleep(self.every)
            try:
                await c.heartbeat(self.cluster, broker, self.addresses[key], bid, timeout_millis=self.timeout_millis)
                self.heartbeats[key] += 1
            except Exception:  # (a controller restarting: the next beat tries again)
                pass

    def alter_sync_state_set(self, broker: str, master_id: int, master_epoch: int, ids, epoch: int) -> int:
        return self._run(self.clients[(broker, master_id)].alter_sync_state_set(broker, master_id, master_epoch, ids,
                                                                                 epoch))

    def hang(self, broker: str, bid: int) -> None:
        """Stop ``bid``'s heartbeats; its connection stays open."""
        task = self.beating.pop((broker, bid))
        self.loop.call_soon_threadsafe(task.cancel)

    def close_connection(self, broker: str, bid: int) -> None:
        key = (broker, bid)
        if key in self.beating:
            self.hang(broker, bid)
        self._run(self.clients.pop(key).close())

    def close(self) -> None:
        for key in list(self.beating):
            self.hang(*key)
        for key in list(self.clients):
            try:
                self._run(self.clients.pop(key).close(), timeout=10)
            except Exception:
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
