"""RocketMQ 5.3.3's own processes, as the tests run them, from the one build of
tests/support/javarocketmq5broker.py: controllers (``ControllerStartup``, a DLedger controller
group: :class:`ControllerCluster`), a controller with a broker (``BrokerStartup`` in controller
mode on a store: :class:`ControllerAndBroker`) and brokers simulated at the protocol level
(:class:`SimulatedBrokers`, for the controller's side of controller mode alone).

Each JVM is a :class:`Proc`: RocketMQ's home and user.home are its directory, its stdout and
stderr (RocketMQ's log through slf4j-simple, e.g. "Elect a new master in broker-set ...")
go to a log file, appended across restarts, and every wait on it polls that file until a
deadline. A controller member reads a properties file as ``mqcontroller -c FILE`` does
(ControllerConfig, NettyServerConfig, NettyClientConfig); its remoting server is its DLedger
server (DLedger listens on the member's port in ``controllerDLegerPeers`` and the controller
registers its request processor there), so one port per member serves both the controller's
admin requests and DLedger's. The harnesses are context managers: every process they started
is stopped at the end (SIGTERM, RocketMQ's shutdown hooks; SIGKILL if it lingers), on failure
too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

from tests.support.javabuild import Unavailable
from tests.support import javarocketmq5build
from tests.support.javarocketmq5broker import BROKER_MAIN, CONTROLLER_MAIN, JavaBroker, build
from tests.support.ports import HOST, free_port_base, free_ports

__all__ = ["Unavailable", "build", "Proc", "ProcessError", "ControllerCluster", "ControllerAndBroker",
           "SimulatedBrokers"]

CONTROLLER_BOOTED = re.compile(re.escape("The Controller Server boot success"))  # ControllerStartup.main0, stdout
BROKER_BOOTED = re.compile(r"The broker\[[^\]]*\] boot success")
MASTER = re.compile(r"Change broker \[id:(\d+)\]\[address:[^\]]*\] to SYNC_MASTER.*newMasterEpoch:(\d+)")


class ProcessError(AssertionError):
    """A process died, or what was awaited did not show in its log in time."""


class Proc:
    """One JVM: ``main`` with ``args`` (java.command), run in ``home``, its output in ``log_path``;
    started by :meth:`start` (again after :meth:`stop`: the log is appended to)."""

    def __init__(self, java: JavaBroker, name: str, main: str, args: list[str], log_path: str, home: str,
                 heap: str = "256m") -> None:
        self.java, self.name, self.main, self.args, self.log_path, self.home = java, name, main, args, log_path, home
        self.heap = heap
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        os.makedirs(self.home, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.java.command(self.main, *self.args, heap=self.heap, home=self.home),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.home, start_new_session=True)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return javarocketmq5build.log_text(self.log_path)

    def log_tail(self, n: int = 40) -> str:
        return javarocketmq5build.log_tail(self.log_path, n)

    def wait_for(self, pattern: re.Pattern, what: str, timeout: float = 90.0) -> re.Match:
        """The first match of ``pattern`` in the log, polled until ``timeout``; ProcessError if
        the process ends first or the deadline passes."""
        deadline = time.monotonic() + timeout
        while True:
            m = pattern.search(self.log_text())
            if m:
                return m
            if not self.alive():
                raise ProcessError(f"{self.name} ended (exit {self.proc.returncode if self.proc else None}) before "
                                   f"{what}; log tail:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ProcessError(f"{self.name}: {what} not seen in {timeout:.0f} s; log tail:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to its process group (RocketMQ's shutdown hooks run), SIGKILL after ``grace``
        seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        except ProcessLookupError:
            pass


def _conf(path: str, settings: dict) -> str:
    with open(path, "w") as fh:
        fh.write("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


class ControllerCluster:
    """``ids`` members of one controller group on 127.0.0.1 (on ``ports``, default free ones),
    each ControllerStartup in its own JVM with ``options`` (ControllerConfig's property names,
    e.g. ``scanNotActiveBrokerInterval``) over the defaults below; member files under
    ``base/<id>/``, output in ``base/<id>.log``."""

    GROUP = "watch-ctl"

    def __init__(self, java: JavaBroker, base: str, ids=("n0",), options: dict | None = None,
                 ports: list[int] | None = None) -> None:
        self.java, self.base, self.ids = java, base, list(ids)
        self.ports = dict(zip(self.ids, ports or free_ports(len(self.ids))))
        self.peers = ";".join(f"{n}-{HOST}:{p}" for n, p in self.ports.items())
        self.options = dict(options or {})
        self.members = {n: Proc(java, n, CONTROLLER_MAIN, ["-c", self._config(n)], self.log_path(n),
                                os.path.join(base, n), heap="160m") for n in self.ids}

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
        return self.members[node].log_text()

    def _config(self, node: str) -> str:
        home = os.path.join(self.base, node)
        os.makedirs(home, exist_ok=True)
        props = {"controllerDLegerGroup": self.GROUP, "controllerDLegerPeers": self.peers,
                 "controllerDLegerSelfId": node, "controllerStorePath": os.path.join(home, "store"),
                 "configStorePath": os.path.join(home, "controller.properties"), "mappedFileSize": 4 << 20,
                 "listenPort": self.ports[node], "rocketmqHome": home, **self.options}
        return _conf(os.path.join(home, "controller.conf"), props)

    def start(self, node: str, timeout: float = 90.0) -> None:
        """Start ``node`` and wait (at most ``timeout``) for ControllerStartup's boot line."""
        self.members[node].start()
        self.members[node].wait_for(CONTROLLER_BOOTED, f"{node} to boot", timeout)

    def start_all(self, timeout: float = 90.0) -> None:
        for node in self.ids:
            self.start(node, timeout)

    def kill(self, node: str, grace: float = 10.0) -> None:
        """SIGTERM (ControllerStartup's shutdown hook), SIGKILL after ``grace`` seconds."""
        self.members[node].stop(grace)

    def close(self) -> None:
        for node in self.ids:
            self.kill(node)

    def pids(self) -> list[int]:
        return [m.pid for m in self.members.values() if m.alive()]


class ControllerAndBroker:
    """RocketMQ's controller (ControllerStartup: a one-member DLedger controller group, whose
    DLedger address is also the controller's remoting address, as RocketMQ's deploy guide has
    it) and one broker (BrokerStartup, ``enableControllerMode=true``, ``controllerAddr`` that
    address) on ``store_root``. A context manager: every process it started is stopped at the
    end, killed if it does not stop."""

    def __init__(self, java: JavaBroker, base: str, store_root: str, broker: dict | None = None) -> None:
        self.java, self.base, self.store_root = java, base, store_root
        os.makedirs(base, exist_ok=True)
        # the broker listens on its port, on port - 2 (fastListenPort) and port + 1 (haListenPort)
        base_port = free_port_base(5)
        self.controllers = ControllerCluster(java, os.path.join(base, "controller"), ports=[base_port])
        self.broker_port = base_port + 3
        self.controller_addr = self.controllers.address("n0")
        self.broker_addr = f"{HOST}:{self.broker_port}"
        settings = {"brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerIP1": HOST,
                    "listenPort": self.broker_port, "storePathRootDir": store_root,
                    "storePathCommitLog": os.path.join(store_root, "commitlog"), "enableControllerMode": "true",
                    "controllerAddr": self.controller_addr, "rocketmqHome": base, **(broker or {})}
        broker_conf = _conf(os.path.join(base, "broker.conf"), settings)
        self.controller = self.controllers.members["n0"]
        self.broker = Proc(java, "broker", BROKER_MAIN, ["-c", broker_conf], os.path.join(base, "broker.log"), base)

    def __enter__(self) -> "ControllerAndBroker":
        return self

    def __exit__(self, *exc) -> None:
        self.broker.stop()
        self.controllers.close()

    def start(self, timeout: float = 120.0) -> tuple[int, int]:
        """Both started; until the broker has booted and the controller made it the master:
        (its broker id, the master epoch), from RocketMQ's own log line."""
        self.controllers.start_all(timeout)
        self.broker.start()
        self.broker.wait_for(BROKER_BOOTED, "boot success", timeout)
        m = self.broker.wait_for(MASTER, "SYNC_MASTER from the controller", timeout)
        return int(m.group(1)), int(m.group(2))

    def pull(self, queues: list[tuple[str, int]], group: str = "dledgerctl_pull_check",
             timeout: float = 120.0) -> tuple[list[dict], dict]:
        """Every message of ``queues`` pulled through RocketMQ's client (QueuePuller): the
        message rows, and per queue its last answer (status, next, min, max)."""
        cmd = self.java.command("QueuePuller", self.broker_addr, group, *(f"{t}/{q}" for t, q in queues),
                                heap="128m")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.base)
        if proc.returncode != 0:
            raise ProcessError(f"QueuePuller exit {proc.returncode}: {proc.stderr[-3000:]}")
        rows, ends = [], {}
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            if "queue" in row:
                ends[row["queue"]] = row
            else:
                rows.append(row)
        return rows, ends


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
        master the controller answered (cluster.net.remoting.MasterAnswer). A controller
        takes requests only once its own leader proposal is applied, a moment after DLedger
        names it leader: the first request (a read) is asked again, for 15 s at most, while it
        answers CONTROLLER_NOT_LEADER."""
        import asyncio

        from cluster.net.remoting import CONTROLLER_NOT_LEADER, ControllerClient, Refused

        async def first_id(c):
            deadline = time.monotonic() + 15
            while True:
                try:
                    return await c.next_broker_id(self.cluster, broker)
                except Refused as exc:
                    if exc.code != CONTROLLER_NOT_LEADER or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)

        async def go():
            c = ControllerClient(self.address, timeout=5.0)
            address = f"{HOST}:{port}"
            bid = await first_id(c)
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
