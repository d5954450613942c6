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
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time

from tests.support.javabuild import JAVA_FLAGS, SWAGGER_STANDIN, Unavailable, commit_of, extract, jar, mirror
from tests.support.javarocketmq import _MONETA_STANDIN, NETTY

HERE = os.path.dirname(os.path.abspath(__file__))
OURS = os.path.join(HERE, "java", "rocketmq5")
STANDINS = os.path.join(HERE, "java", "rocketmq5-standins")
ROCKETMQ_TAG, DLEDGER_TAG, FASTJSON_TAG = "rocketmq-all-5.3.3", "dledger-all-0.3.1.2", "1.2.83"
MODULES = ["common", "remoting", "controller", "store"]
JARS = {**{j: "libnetty-java" for j in NETTY}, "slf4j-api": "libslf4j-java", "commons-lang3": "libcommons-lang3-java",
        "commons-validator": "libcommons-validator-java", "guava": "libguava-java",
        "commons-collections3": "libcommons-collections3-java",  # (CheckpointFile, of the epoch files)
        # the live controller (DLedgerController's netty server and client, BinaryUtil)
        "netty-codec-haproxy": "libnetty-java", "netty-codec-socks": "libnetty-java",
        "netty-handler-proxy": "libnetty-java", "commons-codec": "libcommons-codec-java", "jsr305": "libjsr305-java"}
FASTJSON_JARS = {"guava": "libguava-java", "joda-time": "libjoda-time-java"}
MAIN = "ControllerLogWriter"
EPOCHS = "EpochFileWriter"


def _javac(files: list[str], out: str, classpath: list[str], extra: list[str], what: str) -> None:
    os.makedirs(out, exist_ok=True)
    listing = out.rstrip("/") + ".sources"
    with open(listing, "w") as fh:
        fh.write("\n".join(files))
    cmd = ["javac", "-g", "-nowarn", "-XDignore.symbol.file", "-encoding", "UTF-8", "-proc:none", "-d", out,
           "-cp", os.pathsep.join(classpath), *extra, f"@{listing}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    finally:
        os.unlink(listing)
    if proc.returncode != 0:
        raise RuntimeError(f"javac failed for {what}:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")


def _java_files(root: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".java"))


def build_fastjson(work: str, out: str, fastjson: tuple[str, str], fastjson_jars: list[str]) -> None:
    """fastjson ``FASTJSON_TAG`` (``fastjson``: its mirror and commit), its core package with
    the two stand-ins, compiled into ``out`` (``work``: a scratch directory)."""
    repo, commit = fastjson
    src = os.path.join(work, "fastjson")
    extract(repo, commit, ["src/main/java"], src)
    support = os.path.join(src, "src/main/java/com/alibaba/fastjson/support")
    for d in ("hsf", "jaxrs", "retrofit", "spring"):
        shutil.rmtree(os.path.join(support, d), ignore_errors=True)
    for rel, text in (("springfox/SwaggerJsonSerializer.java", SWAGGER_STANDIN),
                      ("moneta/MonetaCodec.java", _MONETA_STANDIN)):
        if not os.path.isfile(os.path.join(support, rel)):
            raise RuntimeError(f"fastjson: {rel} is not where {FASTJSON_TAG} has it")
        with open(os.path.join(support, rel), "w") as fh:
            fh.write(text)
    _javac(_java_files(os.path.join(src, "src/main/java")), out, fastjson_jars,
           ["--add-exports", "java.base/sun.reflect.annotation=ALL-UNNAMED"], f"fastjson {FASTJSON_TAG}")


def _build_into(out: str, commits: dict, jars: list[str], fastjson_jars: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="rocketmq5-java-build-") as work:
        build_fastjson(work, os.path.join(out, "fastjson"), commits["fastjson"], fastjson_jars)
        repo, commit = commits["rocketmq"]
        src = os.path.join(work, "rocketmq")
        extract(repo, commit, [f"{m}/src/main/java" for m in MODULES], src)
        repo, commit = commits["dledger"]
        dsrc = os.path.join(work, "dledger")
        extract(repo, commit, ["dledger/src/main/java"], dsrc)
        # the stand-ins come first: ControllerMetricsManager's stands in for RocketMQ's own
        roots = [STANDINS] + [os.path.join(src, m, "src/main/java") for m in MODULES] + [
            os.path.join(dsrc, "dledger/src/main/java")]
        _javac(_java_files(OURS), os.path.join(out, "classes"), [*jars, os.path.join(out, "fastjson")],
               ["-implicit:class", "-sourcepath", os.pathsep.join(roots),
                "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"],
               f"tests/support/java/rocketmq5 against {ROCKETMQ_TAG} ({', '.join(MODULES)}) + {DLEDGER_TAG}")


class Controller5:
    """The built program: its class path and java command."""

    def __init__(self, out: str, jars: list[str]) -> None:
        self.classpath = os.pathsep.join([os.path.join(out, "classes"), os.path.join(out, "fastjson"), *jars])

    def command(self, *args: str, main: str = MAIN) -> list[str]:
        return ["java", *JAVA_FLAGS, "-cp", self.classpath, main, *args]


def build(cache_root: str | None = None) -> Controller5:
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
    try:
        quiet = [jar("slf4j-nop", "libslf4j-java")]
    except Unavailable:
        quiet = []
    h = hashlib.sha256()
    javac_version = subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout.strip()
    for part in [*(c for _, c in commits.values()), *map(os.path.realpath, jars + fastjson_jars), javac_version,
                 SWAGGER_STANDIN, _MONETA_STANDIN]:
        h.update(part.encode() + b"\0")
    for path in _java_files(OURS) + _java_files(STANDINS):
        with open(path, "rb") as fh:
            h.update(path.encode() + b"\0" + fh.read() + b"\0")
    root = cache_root or os.environ.get("DLEDGERCTL_JAVA_CACHE") or os.path.expanduser("~/.cache/dledgerctl-java")
    os.makedirs(root, exist_ok=True)
    out = os.path.join(root, f"rocketmq5-controller-{h.hexdigest()[:16]}")
    with open(os.path.join(root, ".rocketmq5-build.lock"), "w") as lock:
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
    return Controller5(out, jars + quiet)


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
