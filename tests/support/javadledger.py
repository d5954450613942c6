"""The real DLedger 0.2.7 server and client (Java), built from sources at test and benchmark time.

Nothing of DLedger, RocketMQ or fastjson lives in this repository: their sources are taken
from local git mirrors, compiled with javac, and the classes are cached. What is built:

- fastjson 1.2.51 (alibaba/fastjson), the core package: its optional integrations with
  frameworks that are not here (hsf, jaxrs, retrofit, spring, springfox) are left out;
- RocketMQ 4.3.2's ``remoting`` and ``logging`` modules (apache/rocketmq), against Debian's
  netty 4.1 (one adaptation: netty 4.1's logger interface has Throwable-only methods that
  RocketMQ's bridge logger does not define; they are added, delegating to its own);
- DLedger 0.2.7 (openmessaging/dledger), unchanged.

Needs ``javac``/``java``, the three mirrors (``DLEDGER_MIRROR``, ``ROCKETMQ_MIRROR``,
``FASTJSON_MIRROR``; defaults ``<project parent>/.mirror/<owner>+<name>/repo``) and Debian's
jars in /usr/share/java (``DEBIAN_JAVA_DIR``): packages libnetty-java, libslf4j-java,
libjcommander-java, and for compiling fastjson libguava-java, libjoda-time-java,
libjaxb-api-java. A missing piece raises :class:`Unavailable` naming it; tests skip with
that reason. The cache is ``~/.cache/dledgerctl-java`` (``DLEDGERCTL_JAVA_CACHE``), keyed by
the three commits, the jars and the javac version.

Used by tests/java/test_dledger_wire.py and benchmarks/bench_cluster.py (``build()``, then
``JavaDLedger.server_command`` / ``client``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

from tests.support.javabuild import (  # noqa: F401 (tests catch javadledger.Unavailable)
    JAVA_FLAGS,
    NETTY_LOGGER_EXTRA,
    SWAGGER_STANDIN,
    Unavailable,
    commit_of,
    extract,
    jar,
    javac,
    mirror,
)
from tests.support.paths import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = ROOT

DLEDGER_TAG = "dledger-0.2.7"
ROCKETMQ_TAG = "rocketmq-all-4.3.2"
FASTJSON_TAG = "1.2.51"

DEBIAN_PACKAGES = ["libnetty-java", "libslf4j-java", "libjcommander-java", "libguava-java", "libjoda-time-java",
                   "libjaxb-api-java"]
# jar (in DEBIAN_JAVA_DIR) -> Debian package; Debian's netty-all.jar holds no classes, so the split jars
NETTY = ["netty-buffer", "netty-codec", "netty-common", "netty-handler", "netty-transport",
         "netty-transport-native-epoll", "netty-transport-native-unix-common", "netty-resolver"]
RUNTIME_JARS = {**{j: "libnetty-java" for j in NETTY}, "slf4j-api": "libslf4j-java",
                "slf4j-simple": "libslf4j-java", "jcommander": "libjcommander-java"}
FASTJSON_JARS = {"guava": "libguava-java", "joda-time": "libjoda-time-java", "jaxb-api": "libjaxb-api-java"}

MAIN = "io.openmessaging.storage.dledger.cmdline.BossCommand"


def _build_into(out: str, commits: dict[str, tuple[str, str]], compile_jars: list[str], fastjson_jars: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="dledger-java-build-") as work:
        # fastjson
        repo, commit = commits["fastjson"]
        src = os.path.join(work, "fastjson")
        extract(repo, commit, ["src/main/java"], src)
        support = os.path.join(src, "src/main/java/com/alibaba/fastjson/support")
        for d in ("hsf", "jaxrs", "retrofit", "spring"):
            shutil.rmtree(os.path.join(support, d), ignore_errors=True)
        with open(os.path.join(support, "springfox", "SwaggerJsonSerializer.java"), "w") as fh:
            fh.write(SWAGGER_STANDIN)
        javac([os.path.join(src, "src/main/java")], os.path.join(out, "fastjson"), fastjson_jars,
              ["--add-exports", "java.base/sun.reflect.annotation=ALL-UNNAMED"])
        # RocketMQ remoting + logging
        repo, commit = commits["rocketmq"]
        src = os.path.join(work, "rocketmq")
        extract(repo, commit, ["remoting/src/main/java", "logging/src/main/java"], src)
        both = os.path.join(work, "rocketmq-src")
        for module in ("logging", "remoting"):
            shutil.copytree(os.path.join(src, module, "src/main/java"), both, dirs_exist_ok=True)
        bridge = os.path.join(both, "org/apache/rocketmq/remoting/netty/NettyLogger.java")
        with open(bridge) as fh:
            text = fh.read()
        marker = re.search(r"class NettyBridgeLogger implements [\w.]+InternalLogger \{\n", text)
        if marker is None:
            raise RuntimeError(f"{bridge}: NettyBridgeLogger not found where RocketMQ 4.3.2 has it")
        text = text[: marker.end()] + NETTY_LOGGER_EXTRA + text[marker.end():]
        with open(bridge, "w") as fh:
            fh.write(text)
        javac([both], os.path.join(out, "rocketmq"), compile_jars + [os.path.join(out, "fastjson")])
        # DLedger
        repo, commit = commits["dledger"]
        src = os.path.join(work, "dledger")
        extract(repo, commit, ["src/main/java"], src)
        javac([os.path.join(src, "src/main/java")], os.path.join(out, "dledger"),
              compile_jars + [os.path.join(out, "fastjson"), os.path.join(out, "rocketmq")])


class JavaDLedger:
    """A built DLedger 0.2.7: the command lines of its server and its client."""

    def __init__(self, root: str, jars: list[str]) -> None:
        self.root = root
        self.classpath = os.pathsep.join(
            [os.path.join(root, p) for p in ("dledger", "rocketmq", "fastjson")] + jars)

    def command(self, *args: str, log_level: str = "info") -> list[str]:
        return ["java", *JAVA_FLAGS, f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}",
                "-Dorg.slf4j.simpleLogger.showDateTime=true", "-Xms256m", "-Xmx512m", "-cp", self.classpath, MAIN,
                *args]

    def server_command(self, group: str, self_id: str, peers: str, store_base: str, *extra: str,
                       log_level: str = "info") -> list[str]:
        """``BossCommand server``: one member of ``group``; ``peers`` as DLedger spells them
        (``n0-127.0.0.1:40911;n1-...``); its files go to ``store_base/dledger-<self_id>``."""
        return self.command("server", "--group", group, "--id", self_id, "--peers", peers, "--store-base-dir",
                            store_base, *extra, log_level=log_level)

    def client(self, command: str, group: str, peers: str, *args: str, timeout: float = 60) -> dict:
        """DLedger's own client (``BossCommand append`` / ``get``): the JSON of the result
        line it logs (``Append Result:{...}`` / ``Get Result:{...}``)."""
        proc = subprocess.run(self.command(command, "--group", group, "--peers", peers, *args), capture_output=True,
                              text=True, timeout=timeout)
        out = proc.stdout + proc.stderr
        found = re.findall(r"(?:Append|Get) Result:(\{.*\})\s*$", out, re.M)
        if not found:
            raise AssertionError(f"DLedger client {command} printed no result (exit {proc.returncode}):\n{out[-4000:]}")
        import json
        return json.loads(found[-1])


def build(cache_root: str | None = None) -> JavaDLedger:
    """Build (or take from the cache) DLedger 0.2.7 with its dependencies; Unavailable if a
    piece is missing."""
    if not (shutil.which("javac") and shutil.which("java")):
        raise Unavailable("javac/java not found on PATH (install a JDK, 17 is what PySpark needs too)")
    commits = {
        "dledger": (mirror("openmessaging/dledger", "DLEDGER_MIRROR"), DLEDGER_TAG, "openmessaging/dledger",
                    "DLEDGER_MIRROR"),
        "rocketmq": (mirror("apache/rocketmq", "ROCKETMQ_MIRROR"), ROCKETMQ_TAG, "apache/rocketmq", "ROCKETMQ_MIRROR"),
        "fastjson": (mirror("alibaba/fastjson", "FASTJSON_MIRROR"), FASTJSON_TAG, "alibaba/fastjson",
                     "FASTJSON_MIRROR"),
    }
    resolved = {k: (repo, commit_of(repo, ref, what, env)) for k, (repo, ref, what, env) in commits.items()}
    runtime = [jar(j, p) for j, p in RUNTIME_JARS.items()]
    compile_jars = [j for j in runtime if "slf4j-simple" not in j]
    fastjson_jars = [jar(j, p) for j, p in FASTJSON_JARS.items()]
    javac_version = subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout.strip()
    h = hashlib.sha256()
    for part in [*(c for _, c in resolved.values()), *(os.path.realpath(j) for j in runtime + fastjson_jars),
                 javac_version, NETTY_LOGGER_EXTRA, SWAGGER_STANDIN]:
        h.update(part.encode() + b"\0")
    root = cache_root or os.environ.get("DLEDGERCTL_JAVA_CACHE") or os.path.expanduser("~/.cache/dledgerctl-java")
    os.makedirs(root, exist_ok=True)
    out = os.path.join(root, f"server-{DLEDGER_TAG}-{h.hexdigest()[:16]}")
    with open(os.path.join(root, ".server-build.lock"), "w") as lock:  # one build at a time (xdist, benchmarks)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isfile(os.path.join(out, "BUILT")):
            tmp = f"{out}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            _build_into(tmp, resolved, compile_jars, fastjson_jars)
            open(os.path.join(tmp, "BUILT"), "w").close()
            shutil.rmtree(out, ignore_errors=True)
            os.rename(tmp, out)
    return JavaDLedger(out, runtime)
