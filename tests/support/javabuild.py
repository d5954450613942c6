"""What the builds of the real Java systems share (tests/support/javadledger.py: DLedger 0.2.7;
tests/support/javarocketmq.py: RocketMQ's message store): sources from local git mirrors, Debian's
jars, one javac run per piece, and one exception for a missing piece, which tests turn
into a skip naming it."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile

from tests.support.paths import ROOT

PROJECT = ROOT
MIRRORS = os.path.join(os.path.dirname(PROJECT), ".mirror")


# what the JVM needs to run DLedger's and RocketMQ's mapped files and netty on Java 17; and, as
# the tests' JVMs live seconds, not hours: the quick compiler only (no C2 compiling in the
# background) and the one-thread garbage collector. A fifth less CPU for the Java tests.
JAVA_FLAGS = ["--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
              "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens",
              "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
              "-Dio.netty.tryReflectionSetAccessible=true", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


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


def jar(name: str, package: str) -> str:
    """A Debian jar (in ``$DEBIAN_JAVA_DIR``, default /usr/share/java)."""
    base = os.environ.get("DEBIAN_JAVA_DIR", "/usr/share/java")
    path = os.path.join(base, f"{name}.jar")
    if not os.path.isfile(path):
        raise Unavailable(f"{path} is missing (install the Debian package {package}; scripts/test-deps.sh does)")
    return path


def extract(repo: str, commit: str, paths: list[str], into: str) -> None:
    archive = subprocess.run(["git", "--git-dir", repo, "archive", "--format=tar", commit, *paths], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def javac(sources: list[str], out: str, classpath: list[str], extra: list[str] = (), what: str = "") -> None:
    """Compile every .java file under ``sources`` (directories) into ``out``."""
    files = [os.path.join(d, f) for root in sources for d, _, fs in os.walk(root) for f in fs if f.endswith(".java")]
    os.makedirs(out, exist_ok=True)
    listing = out.rstrip("/") + ".sources"
    with open(listing, "w") as fh:
        fh.write("\n".join(files))
    cmd = ["javac", "-nowarn", "-XDignore.symbol.file", "-encoding", "UTF-8", "-proc:none", "-d", out,
           "-cp", os.pathsep.join(classpath), *extra, f"@{listing}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    finally:
        os.unlink(listing)
    if proc.returncode != 0:
        raise RuntimeError(f"javac failed for {what or sources}:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")


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
