"""RocketMQ 5.3.3's own message store in controller mode, three replicas over loopback: each a
``DefaultMessageStore`` with ``enableControllerMode=true`` (the store then makes an
``AutoSwitchHAService``) in its own JVM, driven the way RocketMQ's broker drives it
(broker/.../controller/ReplicasManager.java: changeToMaster / changeToSlave with the master
epoch, the SyncStateSet and its epoch, broker ids), with the test process as the controller.

Our Java programs, tests/support/java/rocketmq5ha/: ``HaReplica`` (the store, a line protocol
on stdin/stdout) and ``ReplicaRoles`` (ReplicasManager's steps, in its order, over RocketMQ's
AutoSwitchHAService; what a broker does beside its store is left out and said there). Commands
and answers: see HaReplica.java and :class:`HaReplica` below.

Built at test time from the mirrors (``ROCKETMQ_MIRROR``, ``DLEDGER_MIRROR``,
``FASTJSON_MIRROR``) as tests/support/javarocketmq5store.py builds the store: fastjson 1.2.83,
then our programs compiled with javac's ``-sourcepath`` over rocketmq-all-5.3.3's ``common``,
``remoting`` and ``store`` modules and DLedger 0.3.1.2 (the store names DLedgerCommitLog), with
the same Debian jars and stand-ins (tests/support/javastandins.py, java/rocketmq5-standins/).
Cached under ``~/.cache/dledgerctl-java`` (``DLEDGERCTL_JAVA_CACHE``) as
``rocketmq5ha-<key>``; a missing piece raises :class:`Unavailable` naming it.

RocketMQ's log: RocketMQ 5 logs through its shaded slf4j (``org.apache.rocketmq.logging.org.
slf4j``), whose stand-in (java/rocketmq5-standins/) hands every call to slf4j's own logger of
the same name. At run time Debian's ``slf4j-simple`` (libslf4j-java) is the binding instead of
slf4j-nop, at INFO, writing to the JVM's stderr, which :class:`HaReplica` sends to a file
(``<name>.log``, appended across restarts). So RocketMQ's own lines are there as it writes
them, e.g. AutoSwitchHAClient's ``... RocketmqStore - truncateOffset is 4242`` and ``Truncate
slave log to 4242 success``; :meth:`HaReplica.truncate_offsets` reads the former. Our
harness's own lines start with ``[dledgerctl-harness]``.

Every wait is bounded by a deadline; :class:`HaGroup` (a context manager) kills every process
it started when it ends.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
import time

from tests.support import javarocketmq5build, javastandins
from tests.support.javabuild import JAVA_FLAGS, Unavailable, jar, jars, java_files
from tests.support.javarocketmq5build import LOG_FLAGS, LOG_JAR, STANDINS
from tests.support.ports import HOST, free_ports

__all__ = ["Unavailable", "JavaHa", "HaReplica", "HaGroup", "build", "read_epoch_file"]

HERE = os.path.dirname(os.path.abspath(__file__))
OURS = os.path.join(HERE, "java", "rocketmq5ha")
MAIN = "HaReplica"
MODULES = ["common", "remoting", "store"]  # (the store names DLedgerCommitLog: DLedger too)
# small files, so that tests cross commit-log file ends with little data; index files small
DEFAULT_OPTIONS = {"mappedFileSizeCommitLog": 1 << 20, "mappedFileSizeConsumeQueue": 20 * 3000,
                   "maxHashSlotNum": 1000, "maxIndexNum": 4000, "brokerName": "broker-a",
                   "brokerClusterName": "DefaultCluster"}
# each handshake of AutoSwitchHAClient: a consistent point, or none (an empty epoch cache)
HANDSHAKE_LINE = re.compile(
    r"RocketmqStore - (?:truncateOffset is (-?\d+)|Slave local epochCache is empty, skip truncate log)")
START_LINE = "[dledgerctl-test] start replica "


class JavaHa:
    """The built programs: class path and the java command for one replica."""

    def __init__(self, root: str, jars: list[str]) -> None:
        self.root = root
        self.classpath = os.pathsep.join([os.path.join(root, "classes"), os.path.join(root, "fastjson"), *jars])

    def command(self, *args: str) -> list[str]:
        return ["java", *JAVA_FLAGS, *LOG_FLAGS, "-Xmx192m", "-cp", self.classpath, MAIN, *args]


def build(cache_root: str | None = None) -> JavaHa:
    """Build (or take from the cache) our replica program over RocketMQ 5.3.3's store;
    Unavailable naming what is missing."""
    classpath = jars(javarocketmq5build.STORE_JARS)
    out = javarocketmq5build.build(
        "rocketmq5ha", modules=MODULES, classpath=classpath, sources=lambda work, src: java_files(OURS),
        key_parts=[javastandins.fingerprint()], key_files=java_files(OURS), last=[STANDINS],
        generated=javastandins.write_sources, what="tests/support/java/rocketmq5ha", cache_root=cache_root)
    return JavaHa(out, classpath + [jar(*LOG_JAR)])  # RocketMQ's log lines are what the tests read: no quiet fallback


def handshakes(log: str) -> list[int | None]:
    """The handshakes in a replica's log, oldest first: each ``truncateOffset is N`` as N, each
    empty-cache handshake as None."""
    return [None if m.group(1) is None else int(m.group(1)) for m in HANDSHAKE_LINE.finditer(log)]


def last_run_handshakes(log: str) -> list[int | None]:
    """The handshakes in a replica's log after its last start marker (the whole log if it has
    none)."""
    return handshakes(log[log.rfind(START_LINE) + 1:])


def read_epoch_file(path: str) -> dict:
    """An ``epochFileCheckpoint`` (or ``.bak``) as text: ``count`` (line 1), ``crc`` (line 2),
    ``entries`` [(epoch, startOffset)] from the ``epoch-startOffset`` lines; None if absent."""
    if not os.path.isfile(path):
        return None
    with open(path) as fh:
        lines = fh.read().splitlines()
    entries = [tuple(int(x) for x in line.split("-")) for line in lines[2:] if line]
    return {"count": int(lines[0]), "crc": int(lines[1]), "entries": entries, "text": "\n".join(lines)}


class ReplicaError(RuntimeError):
    """A replica answered ok=false, died, or did not answer in time."""


class HaReplica:
    """One replica process: ``HaReplica <root> <haPort> <brokerId> name=value...``. Commands
    answer one JSON object each (ok, kind, and for most the replica's state: ``max_phy_offset``,
    ``confirm_offset``, ``epochs`` [{epoch, start, end}], ``role``, ``client`` (the slave's HA
    client state), ``connections`` (the master's), ``local_sync_state_set``, ``queues``
    {"topic/queue": max offset}, ``roles`` (ReplicasManager's record: master_epoch,
    sync_state_set, its epoch, what was reported)). Not started until :meth:`start`."""

    def __init__(self, java: JavaHa, root: str, broker_id: int, ha_port: int, log_path: str,
                 options: dict | None = None) -> None:
        self.java = java
        self.root = root
        self.broker_id = broker_id
        self.ha_port = ha_port
        self.log_path = log_path
        self.options = {**DEFAULT_OPTIONS, **(options or {})}
        self.proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue()
        self.ready: dict | None = None
        self._lock = threading.Lock()  # one command at a time (a producer thread beside the test's own)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.ha_port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 90.0) -> dict:
        if self.alive():
            raise ReplicaError(f"replica {self.broker_id} is running")
        os.makedirs(self.root, exist_ok=True)
        args = [self.root, str(self.ha_port), str(self.broker_id), *(f"{k}={v}" for k, v in self.options.items())]
        log = open(self.log_path, "ab")
        try:
            log.write(f"[dledgerctl-test] start replica {self.broker_id} at {time.time():.3f}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.java.command(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=log, text=True, bufsize=1)
        finally:
            log.close()
        self._lines = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc, self._lines), daemon=True).start()
        self.ready = self._answer(timeout, "ready")
        return self.ready

    @staticmethod
    def _pump(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def _answer(self, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReplicaError(f"replica {self.broker_id}: no answer to {what!r} in {timeout} s; "
                                   f"log tail:\n{self.log_tail()}")
            try:
                line = self._lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if line is None:
                raise ReplicaError(f"replica {self.broker_id} ended (exit {self.proc.wait(timeout=10)}) during "
                                   f"{what!r}; log tail:\n{self.log_tail()}")
            reply = json.loads(line)
            if not reply.get("ok"):
                raise ReplicaError(f"replica {self.broker_id}: {what!r} failed: {reply.get('error')}; "
                                   f"log tail:\n{self.log_tail()}")
            return reply

    def request(self, command: str, timeout: float = 60.0) -> dict:
        """One command and its answer; safe from several threads (commands are serialized)."""
        with self._lock:
            if not self.alive():
                raise ReplicaError(f"replica {self.broker_id} is not running ({command!r})")
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
            return self._answer(timeout, command)

    # the commands ---------------------------------------------------------------------------
    def master(self, master_epoch: int, sync_state_set_epoch: int, sync_state_set=None, timeout: float = 60.0) -> dict:
        ids = "" if sync_state_set is None else " " + ",".join(str(i) for i in sync_state_set)
        return self.request(f"master {master_epoch} {sync_state_set_epoch} {self.broker_id}{ids}", timeout)

    def slave(self, master: "HaReplica | str", master_epoch: int, master_id: int | None = None) -> dict:
        if isinstance(master, HaReplica):
            master_id = master.broker_id if master_id is None else master_id
            master = master.address
        return self.request(f"slave {master} {master_epoch} {master_id}")

    def sync_state_set(self, epoch: int, ids) -> dict:
        return self.request(f"syncstateset {epoch} {','.join(str(i) for i in ids)}")

    def auto_accept(self, on: bool = True) -> dict:
        return self.request(f"syncstateset {'auto' if on else 'manual'}")

    def put(self, topic: str, queue_id: int, count: int, body_size: int, prefix: str = "m",
            timeout: float = 120.0) -> dict:
        return self.request(f"put {topic} {queue_id} {count} {body_size} {prefix}", timeout)

    def state(self) -> dict:
        return self.request("state")

    def read(self, topic: str, queue_id: int, queue_offset: int, count: int = 32) -> dict:
        """DefaultMessageStore.getMessage from ``queue_offset``: ``status``, ``messages``
        [{queue_offset, phy_offset, size, keys, body}] (RocketMQ hands back 32 at most)."""
        return self.request(f"read {topic} {queue_id} {queue_offset} {count}")

    def read_queue(self, topic: str, queue_id: int, start: int, end: int) -> list[dict]:
        """Every message of the queue at queue offsets ``start`` .. ``end - 1``, read as a
        consumer pulls (getMessage, then from its next begin offset); fewer when the store
        stops answering FOUND."""
        out: list[dict] = []
        at = start
        while at < end:
            r = self.read(topic, queue_id, at, min(32, end - at))
            if r["status"] != "FOUND" or not r["messages"]:
                break
            out += [m for m in r["messages"] if m["queue_offset"] < end]
            at = r["next_begin_offset"]
        return out

    def flush(self) -> dict:
        return self.request("flush")

    def quit(self, timeout: float = 30.0) -> int:
        """Clean shutdown (store.shutdown()); the exit code. Killed if it takes longer."""
        if not self.alive():
            return self.proc.returncode if self.proc else 0
        try:
            self.request("quit", timeout)
            return self.proc.wait(timeout=timeout)
        except (ReplicaError, subprocess.TimeoutExpired, OSError):
            self.kill()
            return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL (a crash: nothing flushed by the store's shutdown)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            finally:
                for f in (self.proc.stdin, self.proc.stdout):
                    try:
                        f.close()
                    except OSError:
                        pass

    def wait_until(self, predicate, what: str, timeout: float = 60.0, interval: float = 0.2) -> dict:
        """Poll ``state`` until ``predicate(state)``; the state then, or ReplicaError at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.state()
            if predicate(s):
                return s
            if time.monotonic() > deadline:
                raise ReplicaError(f"replica {self.broker_id}: {what} not reached in {timeout} s; last state "
                                   f"{json.dumps({k: s.get(k) for k in ('max_phy_offset', 'epochs', 'client')})}")
            time.sleep(interval)

    # files and log ---------------------------------------------------------------------------
    def epoch_file(self, bak: bool = False) -> dict | None:
        return read_epoch_file(os.path.join(self.root, "epochFileCheckpoint" + (".bak" if bak else "")))

    def log_text(self) -> str:
        return javarocketmq5build.log_text(self.log_path)

    def wait_log(self, text: str, what: str, timeout: float = 60.0) -> None:
        """Until the log holds ``text``: a line RocketMQ writes after the step it reports
        (the truncation after its ``truncateOffset is`` line) is not there the moment it is."""
        self.wait_until(lambda _s: text in self.log_text(), what, timeout)

    def log_tail(self, n: int = 40) -> str:
        return javarocketmq5build.log_tail(self.log_path, n)

    def truncate_offsets(self) -> list[int]:
        """Every ``truncateOffset is N`` AutoSwitchHAClient logged (its handshake's consistent
        point), over every run of this replica, oldest first."""
        return [o for o in handshakes(self.log_text()) if o is not None]

    def run_handshakes(self) -> list[int | None]:
        """The handshakes AutoSwitchHAClient logged since this replica's last start, oldest
        first: each one's consistent point, or None where its epoch cache was empty (nothing
        compared, nothing cut). A slave reconnects and shakes hands again after a failed read
        or write, or 20 s without reads (seen on loaded machines): the first is the one a test
        means, and later ones only find a point it reached since."""
        return last_run_handshakes(self.log_text())


class HaGroup:
    """Three replicas (broker ids 1, 2, 3) under ``base/r<id>/`` on loopback HA ports, logs in
    ``base/r<id>.log``. Started by the test (``group[1].start()``, ...); on exit every process
    still running is asked to quit, then killed."""

    def __init__(self, java: JavaHa, base: str, ids=(1, 2, 3), options: dict | None = None) -> None:
        ports = free_ports(len(ids))
        self.replicas = {i: HaReplica(java, os.path.join(base, f"r{i}"), i, p, os.path.join(base, f"r{i}.log"),
                                      options) for i, p in zip(ids, ports)}

    def __getitem__(self, broker_id: int) -> HaReplica:
        return self.replicas[broker_id]

    def __enter__(self) -> "HaGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for r in self.replicas.values():
            if r.alive():
                r.quit(timeout=20)
        for r in self.replicas.values():
            r.kill()

    def pids(self) -> list[int]:
        return [r.proc.pid for r in self.replicas.values() if r.proc is not None]

    def start_master_and_slaves(self, master_id: int = 1, epoch: int = 1, timeout: float = 90.0) -> None:
        """All started; ``master_id`` master at ``epoch`` (SyncStateSet: itself, epoch 1, accepting
        the master's alterSyncStateSet reports), the others its slaves."""
        for r in self.replicas.values():
            r.start(timeout)
        master = self.replicas[master_id]
        master.auto_accept(True)
        master.master(epoch, 1)
        for i, r in self.replicas.items():
            if i != master_id:
                r.slave(master, epoch)

    def wait_caught_up(self, master_id: int, timeout: float = 60.0) -> int:
        """Until every running slave's max offset equals the master's (which is not written to
        meanwhile); that offset."""
        target = self.replicas[master_id].state()["max_phy_offset"]
        for i, r in self.replicas.items():
            if i != master_id and r.alive():
                r.wait_until(lambda s: s["max_phy_offset"] == target, f"max offset {target}", timeout)
        return target
