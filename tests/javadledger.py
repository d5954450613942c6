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

Used by tests/test_dledger_wire.py and benchmarks/bench_cluster.py (``build()``, then
``JavaDLedger.server_command`` / ``client``).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
_MIRRORS = os.path.join(os.path.dirname(PROJECT), ".mirror")

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

JAVA_FLAGS = ["--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
              "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens",
              "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
              "-Dio.netty.tryReflectionSetAccessible=true"]
MAIN = "io.openmessaging.storage.dledger.cmdline.BossCommand"


class Unavailable(Exception):
    """A piece the Java build needs is missing; the message says which and how to get it."""


def mirror(owner_name: str, env: str) -> str:
    return os.environ.get(env) or os.path.join(_MIRRORS, owner_name.replace("/", "+"), "repo")


def _commit(repo: str, ref: str, what: str, env: str) -> str:
    if not os.path.isdir(repo):
        raise Unavailable(f"no git mirror of {what} at {repo} (set {env})")
    proc = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", f"{ref}^{{commit}}"], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise Unavailable(f"{ref} is not in the {what} mirror at {repo}")
    return proc.stdout.strip()


def _jar(name: str, package: str) -> str:
    base = os.environ.get("DEBIAN_JAVA_DIR", "/usr/share/java")
    path = os.path.join(base, f"{name}.jar")
    if not os.path.isfile(path):
        raise Unavailable(f"{path} is missing (install the Debian package {package})")
    return path


def _extract(repo: str, commit: str, paths: list[str], into: str) -> None:
    archive = subprocess.run(["git", "-C", repo, "archive", "--format=tar", commit, *paths], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def _javac(sources_root: str, out: str, classpath: list[str], extra: list[str] = ()) -> None:
    files = [os.path.join(d, f) for d, _, fs in os.walk(sources_root) for f in fs if f.endswith(".java")]
    os.makedirs(out, exist_ok=True)
    listing = out + ".sources"
    with open(listing, "w") as fh:
        fh.write("\n".join(files))
    os.makedirs(out, exist_ok=True)
    cmd = ["javac", "-nowarn", "-XDignore.symbol.file", "-encoding", "UTF-8", "-proc:none", "-d", out,
           "-cp", os.pathsep.join(classpath), *extra, f"@{listing}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"javac failed for {sources_root}:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")


# netty 4.1's InternalLogger has Throwable-only methods; RocketMQ 4.3.2's bridge predates them
_NETTY_LOGGER_EXTRA = """
        @Override public void log(InternalLogLevel level, Throwable t) { log(level, "", t); }
        @Override public void trace(Throwable t) { trace("", t); }
        @Override public void debug(Throwable t) { debug("", t); }
        @Override public void info(Throwable t) { info("", t); }
        @Override public void warn(Throwable t) { warn("", t); }
        @Override public void error(Throwable t) { error("", t); }
"""

# fastjson's springfox serializer is reached only by class name; this one has no springfox import
_SWAGGER_STANDIN = """package com.alibaba.fastjson.support.springfox;

import java.io.IOException;
import java.lang.reflect.Type;

import com.alibaba.fastjson.serializer.JSONSerializer;
import com.alibaba.fastjson.serializer.ObjectSerializer;

public class SwaggerJsonSerializer implements ObjectSerializer {
    public static final SwaggerJsonSerializer instance = new SwaggerJsonSerializer();

    public void write(JSONSerializer serializer, Object object, Object fieldName, Type fieldType, int features)
            throws IOException {
        serializer.getWriter().write(String.valueOf(object));
    }
}
"""


def _build_into(out: str, commits: dict[str, tuple[str, str]], compile_jars: list[str], fastjson_jars: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="dledger-java-build-") as work:
        # fastjson
        repo, commit = commits["fastjson"]
        src = os.path.join(work, "fastjson")
        _extract(repo, commit, ["src/main/java"], src)
        support = os.path.join(src, "src/main/java/com/alibaba/fastjson/support")
        for d in ("hsf", "jaxrs", "retrofit", "spring"):
            shutil.rmtree(os.path.join(support, d), ignore_errors=True)
        with open(os.path.join(support, "springfox", "SwaggerJsonSerializer.java"), "w") as fh:
            fh.write(_SWAGGER_STANDIN)
        _javac(os.path.join(src, "src/main/java"), os.path.join(out, "fastjson"), fastjson_jars,
               ["--add-exports", "java.base/sun.reflect.annotation=ALL-UNNAMED"])
        # RocketMQ remoting + logging
        repo, commit = commits["rocketmq"]
        src = os.path.join(work, "rocketmq")
        _extract(repo, commit, ["remoting/src/main/java", "logging/src/main/java"], src)
        both = os.path.join(work, "rocketmq-src")
        for module in ("logging", "remoting"):
            shutil.copytree(os.path.join(src, module, "src/main/java"), both, dirs_exist_ok=True)
        bridge = os.path.join(both, "org/apache/rocketmq/remoting/netty/NettyLogger.java")
        with open(bridge) as fh:
            text = fh.read()
        marker = re.search(r"class NettyBridgeLogger implements [\w.]+InternalLogger \{\n", text)
        if marker is None:
            raise RuntimeError(f"{bridge}: NettyBridgeLogger not found where RocketMQ 4.3.2 has it")
        text = text[: marker.end()] + _NETTY_LOGGER_EXTRA + text[marker.end():]
        with open(bridge, "w") as fh:
            fh.write(text)
        _javac(both, os.path.join(out, "rocketmq"), compile_jars + [os.path.join(out, "fastjson")])
        # DLedger
        repo, commit = commits["dledger"]
        src = os.path.join(work, "dledger")
        _extract(repo, commit, ["src/main/java"], src)
        _javac(os.path.join(src, "src/main/java"), os.path.join(out, "dledger"),
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
    resolved = {k: (repo, _commit(repo, ref, what, env)) for k, (repo, ref, what, env) in commits.items()}
    runtime = [_jar(j, p) for j, p in RUNTIME_JARS.items()]
    compile_jars = [j for j in runtime if "slf4j-simple" not in j]
    fastjson_jars = [_jar(j, p) for j, p in FASTJSON_JARS.items()]
    javac_version = subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout.strip()
    h = hashlib.sha256()
    for part in [*(c for _, c in resolved.values()), *(os.path.realpath(j) for j in runtime + fastjson_jars),
                 javac_version, _NETTY_LOGGER_EXTRA, _SWAGGER_STANDIN]:
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
