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

import json
import os
import re
import shutil
import subprocess
import tempfile

from tests.support.javabuild import JAVA_FLAGS, NETTY, NETTY_LOGGER_EXTRA, SWAGGER_STANDIN, add_netty_logger_methods, \
    build_fastjson, cache_key, cached, commits, extract, jars, javac, require_jdk
from tests.support.javabuild import Unavailable  # noqa: F401 (tests catch javadledger.Unavailable)
from tests.support.paths import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = ROOT

DLEDGER_TAG = "dledger-0.2.7"
ROCKETMQ_TAG = "rocketmq-all-4.3.2"
FASTJSON_TAG = "1.2.51"

DEBIAN_PACKAGES = ["libnetty-java", "libslf4j-java", "libjcommander-java", "libguava-java", "libjoda-time-java",
                   "libjaxb-api-java"]
# jar (in DEBIAN_JAVA_DIR) -> Debian package
RUNTIME_JARS = {**{j: "libnetty-java" for j in NETTY}, "slf4j-api": "libslf4j-java",
                "slf4j-simple": "libslf4j-java", "jcommander": "libjcommander-java"}
FASTJSON_JARS = {"guava": "libguava-java", "joda-time": "libjoda-time-java", "jaxb-api": "libjaxb-api-java"}

MAIN = "io.openmessaging.storage.dledger.cmdline.BossCommand"


def _build_into(out: str, resolved: dict[str, tuple[str, str]], compile_jars: list[str],
                fastjson_jars: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="dledger-java-build-") as work:
        build_fastjson(resolved["fastjson"], os.path.join(out, "fastjson"), fastjson_jars, work, FASTJSON_TAG,
                       {"springfox/SwaggerJsonSerializer.java": SWAGGER_STANDIN})
        # RocketMQ remoting + logging
        repo, commit = resolved["rocketmq"]
        src = os.path.join(work, "rocketmq")
        extract(repo, commit, ["remoting/src/main/java", "logging/src/main/java"], src)
        both = os.path.join(work, "rocketmq-src")
        for module in ("logging", "remoting"):
            shutil.copytree(os.path.join(src, module, "src/main/java"), both, dirs_exist_ok=True)
        add_netty_logger_methods(os.path.join(both, "org/apache/rocketmq/remoting/netty/NettyLogger.java"),
                                 "RocketMQ 4.3.2")
        javac([both], os.path.join(out, "rocketmq"), compile_jars + [os.path.join(out, "fastjson")])
        # DLedger
        repo, commit = resolved["dledger"]
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
        return json.loads(found[-1])


def build(cache_root: str | None = None) -> JavaDLedger:
    """Build (or take from the cache) DLedger 0.2.7 with its dependencies; Unavailable if a
    piece is missing."""
    require_jdk()
    resolved = commits({"dledger": DLEDGER_TAG, "rocketmq": ROCKETMQ_TAG, "fastjson": FASTJSON_TAG})
    runtime = jars(RUNTIME_JARS)
    compile_jars = [j for j in runtime if "slf4j-simple" not in j]
    fastjson_jars = jars(FASTJSON_JARS)
    key = cache_key([*(c for _, c in resolved.values()), *(os.path.realpath(j) for j in runtime + fastjson_jars),
                     NETTY_LOGGER_EXTRA, SWAGGER_STANDIN])
    out = cached(f"server-{DLEDGER_TAG}", key, lambda tmp: _build_into(tmp, resolved, compile_jars, fastjson_jars),
                 cache_root)
    return JavaDLedger(out, runtime)
