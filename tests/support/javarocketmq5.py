"""RocketMQ 5's DLedger controller (its events, EventSerializer, ReplicasInfoManager) with
DLedger 0.3.1.2's file store, built from sources at test time, as tests/support/javarocketmq.py
builds RocketMQ 4.9.x's message store.

What is built, from the mirrors (``ROCKETMQ_MIRROR``, ``DLEDGER_MIRROR``, ``FASTJSON_MIRROR``):

- fastjson 1.2.83 (the version rocketmq-all-5.3.3's pom names), its core package, with the
  same two stand-ins tests/support/javarocketmq.py puts in 1.2.69;
- our programs tests/support/java/rocketmq5/*.java (ControllerLogWriter; EpochFileWriter, a
  broker's epoch file by RocketMQ's EpochFileCache; ControllerGroupMember, one live member of a
  controller group: RocketMQ's own DLedgerController, not a DLedgerServer of ours, since it
  builds with the stand-ins below and so runs the controller's state machine, role handler and
  request handling as a controller does), compiled with javac's ``-sourcepath``
  over rocketmq-all-5.3.3's ``common``, ``remoting``, ``controller`` and ``store`` modules
  and DLedger 0.3.1.2's ``dledger`` module (``dledger-all-0.3.1.2``, what 5.3.3's pom
  names): javac compiles only the classes the program reaches (the event classes,
  EventSerializer, FastJsonSerializer, ReplicasInfoManager, DLedgerMmapFileStore and what
  they import), about a hundred, not the modules whole;
- with ``-g``, as Maven compiles: fastjson finds the event classes' constructor parameter
  names in the debug information (built without it, EventSerializer.deserialize threw
  SerializationException for every event);
- stand-ins, in tests/support/java/rocketmq5-standins/, for what neither the mirrors nor Debian
  have: RocketMQ's shaded slf4j (``org.apache.rocketmq.logging.org.slf4j``: slf4j's own
  logger under that name), Hessian (ReplicasInfoManager uses it for the JRaft controller's
  snapshots only) and fastjson2's ``JSONField`` annotation (two enums of ``common``); for the
  live controller, the few OpenTelemetry API interfaces RocketMQ's no-op instruments implement,
  and RocketMQ's ``ControllerMetricsManager`` and ``RemotingMetricsManager`` (they build
  OpenTelemetry's SDK and exporters, which are not here) as classes holding those no-op
  instruments, what the real ones hold while metrics are disabled, RocketMQ's default. The
  stand-ins come first on the source path, so these two replace RocketMQ's.

Debian jars (/usr/share/java): netty (with its haproxy, socks and proxy-handler jars),
slf4j-api (slf4j-nop to run), commons-lang3, commons-validator, commons-collections3,
commons-codec, jsr305, guava, joda-time (fastjson's compile). A missing
piece raises :class:`Unavailable`; the tests skip naming it. Cached under ``~/.cache/dledgerctl-java``
(``DLEDGERCTL_JAVA_CACHE``), keyed by the commits, jars, javac version and our sources.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time

from tests.support import javarocketmq5build
from tests.support.javabuild import JAVA_FLAGS, Unavailable, jars, java_files, optional_jar  # noqa: F401
from tests.support.javarocketmq5build import STANDINS

HERE = os.path.dirname(os.path.abspath(__file__))
OURS = os.path.join(HERE, "java", "rocketmq5")
MODULES = ["common", "remoting", "controller", "store"]
JARS = javarocketmq5build.CONTROLLER_JARS
MAIN = "ControllerLogWriter"
EPOCHS = "EpochFileWriter"


class Controller5:
    """The built program: its class path and java command."""

    def __init__(self, out: str, jars: list[str]) -> None:
        self.classpath = os.pathsep.join([os.path.join(out, "classes"), os.path.join(out, "fastjson"), *jars])

    def command(self, *args: str, main: str = MAIN) -> list[str]:
        return ["java", *JAVA_FLAGS, "-cp", self.classpath, main, *args]


def build(cache_root: str | None = None) -> Controller5:
    classpath = jars(JARS)
    # the stand-ins come first: ControllerMetricsManager's stands in for RocketMQ's own
    out = javarocketmq5build.build("rocketmq5-controller", modules=MODULES, classpath=classpath,
                                   sources=lambda work, src: java_files(OURS),
                                   key_files=java_files(OURS), first=[STANDINS], last=[],
                                   what="tests/support/java/rocketmq5", cache_root=cache_root)
    return Controller5(out, classpath + optional_jar("slf4j-nop", "libslf4j-java"))


def write_log(built: Controller5, base: str, entries: list[dict], *, self_id: str = "n0",
              timeout: float = 120) -> list[dict]:
    """Have RocketMQ's classes write ``entries`` (ControllerLogWriter's stdin lines; a
    ``raw`` of bytes is base64-encoded here) into ``base/dledger-<id>`` and apply them;
    return its line per entry (index, term, error, state)."""
    lines = []
    for e in entries:
        e = dict(e)
        if isinstance(e.get("raw"), bytes):
            e["raw"] = base64.b64encode(e["raw"]).decode()
        lines.append(json.dumps(e))
    proc = subprocess.run(built.command(base, self_id), input="\n".join(lines) + "\n", capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{MAIN} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def write_epoch_file(built: Controller5, path: str, epochs: list[tuple[int, int]], timeout: float = 60) -> list[bool]:
    """Append ``(epoch, startOffset)`` pairs to the epoch file at ``path`` with RocketMQ's
    EpochFileCache; return whether it took each."""
    proc = subprocess.run(built.command(path, *(f"{e}-{o}" for e, o in epochs), main=EPOCHS), capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{EPOCHS} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return [line == "true" for line in proc.stdout.split()]


GROUP_MAIN = "ControllerGroupMember"


class ControllerGroup:
    """Live members of a RocketMQ 5 controller group, each RocketMQ's own DLedgerController
    (tests/support/java/rocketmq5/ControllerGroupMember.java) with its DLedger 0.3.1.2 server on
    127.0.0.1; each member's files under ``base/<id>/dledger-<id>``, its output in ``base/<id>.log``.
    Commands go to a member's stdin; its answers are the JSON lines it prints."""

    def __init__(self, built: Controller5, base: str, ids: list[str], ports: list[int], group: str) -> None:
        self.built, self.base, self.ids, self.group = built, base, ids, group
        self.peers = ";".join(f"{n}-127.0.0.1:{p}" for n, p in zip(ids, ports))
        self.procs: dict[str, subprocess.Popen] = {}

    def log_path(self, node: str) -> str:
        return os.path.join(self.base, f"{node}.log")

    def start(self, node: str) -> None:
        os.makedirs(self.base, exist_ok=True)
        with open(self.log_path(node), "ab") as log:
            self.procs[node] = subprocess.Popen(
                self.built.command(os.path.join(self.base, node), node, self.group, self.peers, main=GROUP_MAIN),
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _lines(self, node: str) -> list[str]:
        with open(self.log_path(node), errors="replace") as fh:
            return fh.read().splitlines()

    def ask(self, node: str, command: str, timeout: float = 60) -> dict:
        """Send ``command`` to ``node`` and return the JSON line it prints for it."""
        seen = sum(1 for x in self._lines(node) if x.startswith("{"))
        proc = self.procs[node]
        proc.stdin.write(command.encode() + b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answers = [x for x in self._lines(node) if x.startswith("{")]
            if len(answers) > seen:
                return json.loads(answers[seen])
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{node} did not answer {command!r}:\n" + "\n".join(self._lines(node)[-40:]))

    def stop(self, node: str) -> None:
        """Ask ``node`` to shut its controller down; kill it if it has not within 15 s."""
        proc = self.procs.pop(node)
        try:
            if proc.poll() is None:
                proc.stdin.write(b"quit\n")
                proc.stdin.flush()
            proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=30)
        finally:
            proc.stdin.close()

    def stop_all(self) -> None:
        for node in list(self.procs):
            self.stop(node)
