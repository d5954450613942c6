"""RocketMQ 5.3.3's message store (``DefaultMessageStore``), in DLedger mode with DLedger
0.3.1.2 and in master-slave mode, built from sources at test time, with the same harness
programs tests/support/javarocketmq.py builds for 4.9.x (``RocketMQStoreWriter``,
``RocketMQStoreReader``); :func:`build` gives a :class:`~tests.support.javarocketmq.JavaRocketMQ`
of version "5.3.3" that :func:`tests.support.javarocketmq.write_store` and the readers of
tests/java/test_mq_migrate_java.py take as they take the 4.9.x ones.

What is built, from the mirrors (``ROCKETMQ_MIRROR``, ``DLEDGER_MIRROR``, ``FASTJSON_MIRROR``):

- fastjson 1.2.83 (what rocketmq-all-5.3.3's pom names), as tests/support/javarocketmq5.py
  builds it;
- the two harness programs of tests/support/java/rocketmq/, adapted to 5.x as they are
  copied (two textual changes, each checked: ``MessageExtBrokerInner`` moved from the store
  to ``org.apache.rocketmq.common.message``, and ``DefaultMessageStore``'s constructor takes
  the broker's topic config table: tests/support/java/rocketmq5store/TopicTable.java makes it
  from ``-Ddledgerctl.topicAttributes=TOPIC=key:value,...;...``, e.g. ``queue.type:BatchCQ``,
  empty without), compiled with javac's ``-sourcepath``
  over rocketmq-all-5.3.3's ``common``, ``remoting`` and ``store`` modules and DLedger
  0.3.1.2's ``dledger`` module (``dledger-all-0.3.1.2``): javac compiles only what the
  programs reach, about 640 classes, not the modules whole.

Debian jars (/usr/share/java): netty (with netty-codec-haproxy, -handler-proxy, -codec-socks:
remoting's proxy protocol and SOCKS support), slf4j-api (slf4j-nop to run), commons-lang3,
commons-validator, commons-collections3, commons-io, commons-codec, guava, jsr305
(``javax.annotation.Nonnull``), conversant-disruptor (``DisruptorBlockingQueue``, remoting's
executors), zstd-jni, lz4-java, jna; joda-time for fastjson's compile.

Stand-ins, for what neither the mirrors nor Debian have (none of it is on a code path the
tests run, except the two constants said in tests/support/javastandins.py):

- RocketMQ's shaded slf4j (``org.apache.rocketmq.logging.org.slf4j``: Logger, LoggerFactory,
  MDC): slf4j's own under that name (tests/support/java/rocketmq5-standins/);
- fastjson2's ``JSONField`` annotation (two enums of ``common``), same directory; Hessian is
  there too but nothing here reaches it;
- RocksDB's Java API (``org.rocksdb``, about forty types: the RocksDB consume-queue store,
  ``storeType=defaultRocksDB``, and the RocksDB config storage) and OpenTelemetry's API and SDK
  (``io.opentelemetry``: the store's, timer's and remoting's metrics, which only a broker
  starts): types and signatures whose every body throws, written by
  tests/support/javastandins.py at build time. The default store (files under
  ``consumequeue/``) only declares ``RocksDBException`` in throws and catch clauses, and
  ``MessageStoreConfig``'s field initializers read two RocksDB compression names.

A missing piece raises :class:`Unavailable` naming it; the tests skip with that reason.
Cached under ``~/.cache/dledgerctl-java`` (``DLEDGERCTL_JAVA_CACHE``) as
``rocketmq-5.3.3-<key>``, keyed by the three commits, the jars, the javac version, our
programs and the stand-ins.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile

from tests.support import javastandins
from tests.support.javabuild import SWAGGER_STANDIN, Unavailable, commit_of, extract, jar, mirror
from tests.support.javarocketmq import _MONETA_STANDIN, NETTY, OUR_SOURCES, QUIET_JAR, JavaRocketMQ
from tests.support.javarocketmq5 import DLEDGER_TAG, FASTJSON_TAG, ROCKETMQ_TAG, STANDINS, _javac, _java_files, \
    build_fastjson

VERSION = "5.3.3"
MODULES = ["common", "remoting", "store"]
PROGRAMS = ["RocketMQStoreWriter.java", "RocketMQStoreReader.java"]
JARS = {**{j: "libnetty-java" for j in NETTY + ["netty-codec-haproxy", "netty-handler-proxy", "netty-codec-socks"]},
        "slf4j-api": "libslf4j-java", "commons-lang3": "libcommons-lang3-java",
        "commons-validator": "libcommons-validator-java", "commons-collections3": "libcommons-collections3-java",
        "commons-io": "libcommons-io-java", "commons-codec": "libcommons-codec-java", "guava": "libguava-java",
        "jsr305": "libjsr305-java", "conversant-disruptor": "libconversant-disruptor-java",
        "zstd-jni": "libzstd-jni-java", "lz4-java": "liblz4-java", "jna": "libjna-java"}
FASTJSON_JARS = {"guava": "libguava-java", "joda-time": "libjoda-time-java"}

# what 5.x moved or added, in our 4.9 programs: (text in them, its 5.x replacement)
ADAPTATIONS = [
    ("import org.apache.rocketmq.store.MessageExtBrokerInner;",
     "import org.apache.rocketmq.common.message.MessageExtBrokerInner;"),
    ("null, new BrokerConfig());", "null, new BrokerConfig(), TopicTable.fromProperty());"),
]
# ours for 5.x only: the topic config table from -Ddledgerctl.topicAttributes (TopicTable.java)
OURS5 = os.path.join(os.path.dirname(OUR_SOURCES), "rocketmq5store")


def _adapted(work: str) -> list[str]:
    """Our 4.9 programs with ADAPTATIONS applied, written under ``work``; their paths."""
    out = []
    for name in PROGRAMS:
        with open(os.path.join(OUR_SOURCES, name)) as fh:
            text = fh.read()
        for old, new in ADAPTATIONS:
            if old not in text:
                raise RuntimeError(f"{name}: {old!r} is not in it (the 5.x adaptation no longer applies)")
            text = text.replace(old, new)
        path = os.path.join(work, "ours", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
        out.append(path)
    return out


def _build_into(out: str, commits: dict, jars: list[str], fastjson_jars: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="rocketmq5-store-build-") as work:
        build_fastjson(work, os.path.join(out, "fastjson"), commits["fastjson"], fastjson_jars)
        repo, commit = commits["rocketmq"]
        src = os.path.join(work, "rocketmq")
        extract(repo, commit, [f"{m}/src/main/java" for m in MODULES], src)
        repo, commit = commits["dledger"]
        dsrc = os.path.join(work, "dledger")
        extract(repo, commit, ["dledger/src/main/java"], dsrc)
        generated = os.path.join(work, "standins")
        javastandins.write_sources(generated)
        roots = [os.path.join(src, m, "src/main/java") for m in MODULES] + [
            os.path.join(dsrc, "dledger/src/main/java"), STANDINS, generated]
        _javac(_adapted(work) + _java_files(OURS5), os.path.join(out, "rocketmq"),
               [*jars, os.path.join(out, "fastjson")],
               ["-implicit:class", "-sourcepath", os.pathsep.join(roots),
                "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"],
               f"the store harness against {ROCKETMQ_TAG} ({', '.join(MODULES)}) + {DLEDGER_TAG}")


def build(cache_root: str | None = None) -> JavaRocketMQ:
    """Build (or take from the cache) RocketMQ 5.3.3's store with our programs; Unavailable
    when a piece is missing."""
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
        quiet = [jar(*QUIET_JAR)]
    except Unavailable:
        quiet = []
    h = hashlib.sha256()
    javac_version = subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout.strip()
    for part in [VERSION, *(c for _, c in commits.values()), *map(os.path.realpath, jars + fastjson_jars),
                 javac_version, SWAGGER_STANDIN, _MONETA_STANDIN, repr(ADAPTATIONS), javastandins.fingerprint()]:
        h.update(part.encode() + b"\0")
    for path in [os.path.join(OUR_SOURCES, n) for n in PROGRAMS] + _java_files(OURS5) + _java_files(STANDINS):
        with open(path, "rb") as fh:
            h.update(path.encode() + b"\0" + fh.read() + b"\0")
    root = cache_root or os.environ.get("DLEDGERCTL_JAVA_CACHE") or os.path.expanduser("~/.cache/dledgerctl-java")
    os.makedirs(root, exist_ok=True)
    out = os.path.join(root, f"rocketmq-{VERSION}-{h.hexdigest()[:16]}")
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
    # JavaRocketMQ's class path: ours (here in rocketmq/, with RocketMQ's classes), rocketmq/, fastjson/, jars
    return JavaRocketMQ(VERSION, out, os.path.join(out, "rocketmq"), jars + quiet)
