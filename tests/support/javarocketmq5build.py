"""What the builds of RocketMQ 5.3.3's classes share (tests/support/javarocketmq5.py: the
DLedger controller; javarocketmq5store.py: the message store; javarocketmq5ha.py: the store in
controller mode; javarocketmq5broker.py: the broker and controller processes): :func:`build`.

Each is fastjson 1.2.83 (what rocketmq-all-5.3.3's pom names, built with ``-g``: fastjson finds
the controller's event classes' constructor parameter names in the debug information), then a
set of sources of ours (or RocketMQ's own mains) compiled with javac's ``-implicit:class`` and
``-sourcepath`` over some of rocketmq-all-5.3.3's modules and DLedger 0.3.1.2's ``dledger``
module (``dledger-all-0.3.1.2``, what 5.3.3's pom names): javac compiles only the classes
reached, not the modules whole. Stand-ins for what neither the mirrors nor Debian have go on
the source path too, before the modules (they replace RocketMQ's classes of the same name) or
after them (they fill in only what is absent): tests/support/java/rocketmq5-standins/ and
those written by tests/support/javastandins.py.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable

from tests.support.javabuild import FASTJSON_STANDINS, NETTY, build_fastjson, cache_key, cached, commits, extract, \
    java_files, javac, jars, require_jdk

HERE = os.path.dirname(os.path.abspath(__file__))
STANDINS = os.path.join(HERE, "java", "rocketmq5-standins")
ROCKETMQ_TAG, DLEDGER_TAG, FASTJSON_TAG = "rocketmq-all-5.3.3", "dledger-all-0.3.1.2", "1.2.83"
REFS = {"rocketmq": ROCKETMQ_TAG, "dledger": DLEDGER_TAG, "fastjson": FASTJSON_TAG}
DLEDGER_ROOT = "dledger/src/main/java"
FASTJSON_JARS = {"guava": "libguava-java", "joda-time": "libjoda-time-java"}
# Debian jars: the DLedger controller's: netty (with its haproxy, socks and proxy-handler jars:
# remoting's proxy protocol and SOCKS support), jsr305 (javax.annotation.Nonnull),
# commons-collections3 (CheckpointFile, of the epoch files), commons-codec (BinaryUtil), ...
CONTROLLER_JARS = {**{j: "libnetty-java" for j in NETTY + ["netty-codec-haproxy", "netty-handler-proxy",
                                                            "netty-codec-socks"]},
                   "slf4j-api": "libslf4j-java", "commons-lang3": "libcommons-lang3-java",
                   "commons-validator": "libcommons-validator-java",
                   "commons-collections3": "libcommons-collections3-java", "commons-codec": "libcommons-codec-java",
                   "guava": "libguava-java", "jsr305": "libjsr305-java"}
# the message store's: those and commons-io, conversant-disruptor (DisruptorBlockingQueue,
# remoting's executors), zstd-jni, lz4-java, jna
STORE_JARS = {**CONTROLLER_JARS, "commons-io": "libcommons-io-java",
              "conversant-disruptor": "libconversant-disruptor-java", "zstd-jni": "libzstd-jni-java",
              "lz4-java": "liblz4-java", "jna": "libjna-java"}
LOG_JAR = ("slf4j-simple", "libslf4j-java")  # the binding at run time where RocketMQ's log lines are read
# slf4j-simple's settings: INFO, with time and thread, to the JVM's stderr
LOG_FLAGS = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=info", "-Dorg.slf4j.simpleLogger.showDateTime=true",
             "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS", "-Dorg.slf4j.simpleLogger.logFile=System.err",
             "-Dorg.slf4j.simpleLogger.showThreadName=true"]


def build(name: str, *, modules: list[str], classpath: list[str], sources: Callable[[str, str], list[str]],
          what: str, key_parts: Iterable[str] = (), key_files: Iterable[str] = (), first: Iterable[str] = (),
          last: Iterable[str] = (STANDINS,), generated: Callable[[str], None] | None = None,
          classes: str = "classes", extra: Iterable[str] = (), cache_root: str | None = None) -> str:
    """The cached build ``<cache>/<name>-<key>``: ``fastjson/`` and ``<classes>/``, what javac made
    of ``sources(work, rocketmq)`` (files; ``rocketmq``: where the modules' sources were
    extracted, for RocketMQ's own mains) on the class path ``classpath`` (Debian's jars), the
    source path being ``first``, ``modules``' sources, DLedger's, ``last`` and, if
    ``generated``, the directory it writes stand-ins into. The key: ``name``, the commits, the
    jars, ``key_parts`` (what ``generated`` writes depends on: its fingerprint), ``key_files``
    and java/rocketmq5-standins/. Unavailable naming a missing piece."""
    require_jdk()
    got = commits(REFS)
    fastjson_jars = jars(FASTJSON_JARS)
    key = cache_key([name, *(c for _, c in got.values()), *map(os.path.realpath, [*classpath, *fastjson_jars]),
                     *FASTJSON_STANDINS.values(), *key_parts], [*key_files, *java_files(STANDINS)])

    def build_into(out: str) -> None:
        with tempfile.TemporaryDirectory(prefix=f"{name}-build-") as work:
            build_fastjson(got["fastjson"], os.path.join(out, "fastjson"), fastjson_jars, work, FASTJSON_TAG,
                           debug=True)
            repo, commit = got["rocketmq"]
            src = os.path.join(work, "rocketmq")
            extract(repo, commit, [f"{m}/src/main/java" for m in modules], src)
            repo, commit = got["dledger"]
            dsrc = os.path.join(work, "dledger")
            extract(repo, commit, [DLEDGER_ROOT], dsrc)
            roots = [*first, *(os.path.join(src, m, "src/main/java") for m in modules),
                     os.path.join(dsrc, DLEDGER_ROOT), *last]
            if generated is not None:
                roots.append(os.path.join(work, "standins"))
                generated(roots[-1])
            javac(sources(work, src), os.path.join(out, classes), [*classpath, os.path.join(out, "fastjson")],
                  ["-implicit:class", "-sourcepath", os.pathsep.join(roots), *extra,
                   "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"],
                  f"{what} against {ROCKETMQ_TAG} ({', '.join(modules)}) + {DLEDGER_TAG}", debug=True)

    return cached(name, key, build_into, cache_root)


def log_text(path: str) -> str:
    """A Java process's log (its stderr, RocketMQ's lines as it writes them), "" before it exists."""
    try:
        with open(path, errors="replace") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def log_tail(path: str, n: int = 40) -> str:
    return "\n".join(log_text(path).splitlines()[-n:])
