"""What the builds of the real Java systems share (tests/support/javadledger.py: DLedger 0.2.7;
tests/support/javarocketmq.py: RocketMQ 4.9.x's message store; the RocketMQ 5.3.3 builds, which
also share :mod:`tests.support.javarocketmq5build`): sources from local git mirrors
(:func:`commits`), Debian's jars (:func:`jars`), javac (:func:`javac`), fastjson's core package
(:func:`build_fastjson`), and the cache (:func:`cache_key`, :func:`cached`): a build's classes
under ``~/.cache/dledgerctl-java`` (``DLEDGERCTL_JAVA_CACHE``) in ``<name>-<key>``, the key a
hash of what went in (commits, jars, the javac version, our sources), built once under a lock
file and renamed into place only when whole (a ``BUILT`` file marks it), so parallel test
workers and benchmarks never see half a build.

One exception for a missing piece, :class:`Unavailable`, which tests turn into a skip naming
it."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Iterable

from tests.support.paths import ROOT

PROJECT = ROOT
HERE = os.path.dirname(os.path.abspath(__file__))
MIRRORS = os.path.join(os.path.dirname(PROJECT), ".mirror")


# what the JVM needs to run DLedger's and RocketMQ's mapped files and netty on Java 17; and, as
# the tests' JVMs live seconds, not hours: the quick compiler only (no C2 compiling in the
# background) and the one-thread garbage collector. A fifth less CPU for the Java tests.
# RocketMQ's remoting servers (controller, broker) without TLS: the tests speak plain TCP, and in
# its default "permissive" mode each server writes a self-signed key and certificate to /tmp
# (netty's keyutil_*) that only a normal JVM exit deletes, so every killed one left two behind.
JAVA_FLAGS = ["--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
              "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens",
              "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
              "-Dio.netty.tryReflectionSetAccessible=true", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
              "-Dtls.server.mode=disabled"]


# Debian's netty jars (its netty-all.jar holds no classes, so the split ones)
NETTY = ["netty-buffer", "netty-codec", "netty-common", "netty-handler", "netty-transport",
         "netty-transport-native-epoll", "netty-transport-native-unix-common", "netty-resolver"]


class Unavailable(Exception):
    """A piece the Java build needs is missing; the message says which and how to get it."""


def mirror(owner_name: str, env: str) -> str:
    """The git mirror of ``owner/name``: ``$env``, else ``<project parent>/.mirror/owner+name/repo``."""
    return os.environ.get(env) or os.path.join(MIRRORS, owner_name.replace("/", "+"), "repo")


def commit_of(repo: str, ref: str, what: str, env: str) -> str:
    if not os.path.isdir(repo):
        raise Unavailable(f"no git mirror of {what} at {repo} (set {env})")
    proc = subprocess.run(["git", "--git-dir", repo, "rev-parse", "--verify", f"{ref}^{{commit}}"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise Unavailable(f"{ref} is not in the {what} mirror at {repo}")
    return proc.stdout.strip()


# the mirrors builds take sources from: key -> (owner/name, the environment variable naming it)
MIRROR_OF = {"rocketmq": ("apache/rocketmq", "ROCKETMQ_MIRROR"), "dledger": ("openmessaging/dledger", "DLEDGER_MIRROR"),
             "fastjson": ("alibaba/fastjson", "FASTJSON_MIRROR")}


def require_jdk() -> None:
    if not (shutil.which("javac") and shutil.which("java")):
        raise Unavailable("javac/java not found on PATH (install a JDK; default-jdk-headless is 17 here)")


def commits(refs: dict[str, str]) -> dict[str, tuple[str, str]]:
    """``{key: ref}`` (keys of :data:`MIRROR_OF`) -> ``{key: (mirror, commit)}``; Unavailable if a
    mirror or a ref is missing."""
    out = {}
    for key, ref in refs.items():
        what, env = MIRROR_OF[key]
        repo = mirror(what, env)
        out[key] = (repo, commit_of(repo, ref, what, env))
    return out


def jar(name: str, package: str) -> str:
    """A Debian jar (in ``$DEBIAN_JAVA_DIR``, default /usr/share/java)."""
    base = os.environ.get("DEBIAN_JAVA_DIR", "/usr/share/java")
    path = os.path.join(base, f"{name}.jar")
    if not os.path.isfile(path):
        raise Unavailable(f"{path} is missing (install the Debian package {package}; scripts/test-deps.sh does)")
    return path


def jars(table: dict[str, str]) -> list[str]:
    """:func:`jar` of each ``{jar name: Debian package}``."""
    return [jar(j, p) for j, p in table.items()]


def optional_jar(name: str, package: str) -> list[str]:
    """``[jar(name, package)]``, or ``[]`` when it is not there (a jar the run can do without)."""
    try:
        return [jar(name, package)]
    except Unavailable:
        return []


def extract(repo: str, commit: str, paths: list[str], into: str) -> None:
    archive = subprocess.run(["git", "--git-dir", repo, "archive", "--format=tar", commit, *paths], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def java_files(root: str) -> list[str]:
    """Every .java file under ``root``, sorted."""
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".java"))


def javac(sources: Iterable[str], out: str, classpath: list[str], extra: Iterable[str] = (), what: str = "",
          debug: bool = False) -> None:
    """Compile ``sources`` into ``out``: a directory stands for every .java file under it, a
    file for itself. ``debug``: with ``-g``, as Maven compiles (fastjson reads constructor
    parameter names from the debug information)."""
    sources = list(sources)
    files = [f for s in sources for f in (java_files(s) if os.path.isdir(s) else [s])]
    os.makedirs(out, exist_ok=True)
    listing = out.rstrip("/") + ".sources"
    with open(listing, "w") as fh:
        fh.write("\n".join(files))
    cmd = ["javac", *(["-g"] if debug else []), "-nowarn", "-XDignore.symbol.file", "-encoding", "UTF-8", "-proc:none",
           "-d", out, "-cp", os.pathsep.join(classpath), *extra, f"@{listing}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    finally:
        os.unlink(listing)
    if proc.returncode != 0:
        raise RuntimeError(f"javac failed for {what or sources}:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")


@functools.lru_cache(maxsize=None)
def javac_version() -> str:
    return subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout.strip()


def cache_key(parts: Iterable[str], files: Iterable[str] = (), relative_to: str = HERE) -> str:
    """16 hex digits of a hash over the javac version, ``parts`` and ``files`` (each file's path
    relative to ``relative_to``, and its bytes): what a cached build is keyed by."""
    h = hashlib.sha256()
    for part in [javac_version(), *parts]:
        h.update(part.encode() + b"\0")
    for path in files:
        with open(path, "rb") as fh:
            h.update(os.path.relpath(path, relative_to).encode() + b"\0" + fh.read() + b"\0")
    return h.hexdigest()[:16]


def cache_root(given: str | None = None) -> str:
    root = given or os.environ.get("DLEDGERCTL_JAVA_CACHE") or os.path.expanduser("~/.cache/dledgerctl-java")
    os.makedirs(root, exist_ok=True)
    return root


def cached(name: str, key: str, build_into: Callable[[str], None], root: str | None = None) -> str:
    """``<root>/<name>-<key>`` (root: :func:`cache_root`), made by ``build_into(directory)`` if it
    is not there whole yet: one build at a time (the lock file ``.<name>-build.lock``, xdist
    workers and benchmarks), into a temporary directory renamed into place when done."""
    root = cache_root(root)
    out = os.path.join(root, f"{name}-{key}")
    with open(os.path.join(root, f".{name}-build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isfile(os.path.join(out, "BUILT")):
            tmp = f"{out}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                build_into(tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            open(os.path.join(tmp, "BUILT"), "w").close()
            shutil.rmtree(out, ignore_errors=True)
            os.rename(tmp, out)
    return out


# netty 4.1's InternalLogger has Throwable-only methods; RocketMQ's bridge logger (4.3.2's,
# and 4.9.x's against a netty older than the one it names) does not define them
NETTY_LOGGER_EXTRA = """
        @Override public void log(io.netty.util.internal.logging.InternalLogLevel level, Throwable t) {
            log(level, "", t);
        }
        @Override public void trace(Throwable t) { trace("", t); }
        @Override public void debug(Throwable t) { debug("", t); }
        @Override public void info(Throwable t) { info("", t); }
        @Override public void warn(Throwable t) { warn("", t); }
        @Override public void error(Throwable t) { error("", t); }
"""

# fastjson reaches its springfox serializer only by class name: a stand-in without that import
SWAGGER_STANDIN = """package com.alibaba.fastjson.support.springfox;

import java.io.IOException;
import java.lang.reflect.Type;

import com.alibaba.fastjson.serializer.JSONSerializer;
import com.alibaba.fastjson.serializer.ObjectSerializer;

/** Stand-in (dledgerctl tests): springfox is not on this class path. */
public class SwaggerJsonSerializer implements ObjectSerializer {
    public static final SwaggerJsonSerializer instance = new SwaggerJsonSerializer();

    public void write(JSONSerializer serializer, Object object, Object fieldName, Type fieldType, int features)
            throws IOException {
        serializer.write(String.valueOf(object));
    }
}
"""

# and its JavaMoney codec, likewise (1.2.69 and later)
MONETA_STANDIN = """package com.alibaba.fastjson.support.moneta;

import java.io.IOException;
import java.lang.reflect.Type;

import com.alibaba.fastjson.parser.DefaultJSONParser;
import com.alibaba.fastjson.parser.deserializer.ObjectDeserializer;
import com.alibaba.fastjson.serializer.JSONSerializer;
import com.alibaba.fastjson.serializer.ObjectSerializer;

/** Stand-in (dledgerctl tests): the JavaMoney library is not on this class path. */
public class MonetaCodec implements ObjectSerializer, ObjectDeserializer {
    public static final MonetaCodec instance = new MonetaCodec();

    public void write(JSONSerializer serializer, Object object, Object fieldName, Type fieldType, int features)
            throws IOException {
        serializer.write(String.valueOf(object));
    }

    public <T> T deserialze(DefaultJSONParser parser, Type type, Object fieldName) {
        throw new UnsupportedOperationException("javax.money is not available");
    }

    public int getFastMatchToken() {
        return 0;
    }
}
"""
# fastjson's classes that name absent libraries only to be reached by class name: path under
# com/alibaba/fastjson/support -> the stand-in written there
FASTJSON_STANDINS = {"springfox/SwaggerJsonSerializer.java": SWAGGER_STANDIN, "moneta/MonetaCodec.java": MONETA_STANDIN}


def build_fastjson(fastjson: tuple[str, str], out: str, classpath: list[str], work: str, tag: str,
                   standins: dict[str, str] = FASTJSON_STANDINS, debug: bool = False) -> None:
    """fastjson ``tag`` (``fastjson``: its mirror and commit), its core package: its integrations
    with frameworks that are not here (hsf, jaxrs, retrofit, spring) left out, ``standins``
    written over the classes they replace; compiled into ``out`` (``work``: a scratch directory)."""
    repo, commit = fastjson
    src = os.path.join(work, "fastjson")
    extract(repo, commit, ["src/main/java"], src)
    support = os.path.join(src, "src/main/java/com/alibaba/fastjson/support")
    for d in ("hsf", "jaxrs", "retrofit", "spring"):
        shutil.rmtree(os.path.join(support, d), ignore_errors=True)
    for rel, text in standins.items():
        if not os.path.isfile(os.path.join(support, rel)):
            raise RuntimeError(f"fastjson: {rel} is not where {tag} has it")
        with open(os.path.join(support, rel), "w") as fh:
            fh.write(text)
    javac([os.path.join(src, "src/main/java")], out, classpath,
          ["--add-exports", "java.base/sun.reflect.annotation=ALL-UNNAMED"], f"fastjson {tag}", debug=debug)


def add_netty_logger_methods(bridge: str, what: str) -> None:
    """Give RocketMQ's ``NettyBridgeLogger`` (the file ``bridge``) netty 4.1's Throwable-only
    logger methods (:data:`NETTY_LOGGER_EXTRA`) unless it has them; ``what``: the RocketMQ it is of."""
    with open(bridge) as fh:
        text = fh.read()
    if "trace(Throwable" in text:
        return
    marker = re.search(r"class NettyBridgeLogger implements [\w.]+InternalLogger \{\n", text)
    if marker is None:
        raise RuntimeError(f"{bridge}: NettyBridgeLogger not found where {what} has it")
    with open(bridge, "w") as fh:
        fh.write(text[: marker.end()] + NETTY_LOGGER_EXTRA + text[marker.end():])
