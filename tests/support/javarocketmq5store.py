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

import os

from tests.support import javarocketmq5build, javastandins
from tests.support.javabuild import Unavailable, jars, java_files, optional_jar  # noqa: F401 (tests catch it here)
from tests.support.javarocketmq import OUR_SOURCES, QUIET_JAR, JavaRocketMQ
from tests.support.javarocketmq5build import STANDINS

VERSION = "5.3.3"
MODULES = ["common", "remoting", "store"]
PROGRAMS = ["RocketMQStoreWriter.java", "RocketMQStoreReader.java"]
JARS = javarocketmq5build.STORE_JARS

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


def build(cache_root: str | None = None) -> JavaRocketMQ:
    """Build (or take from the cache) RocketMQ 5.3.3's store with our programs; Unavailable
    when a piece is missing."""
    classpath = jars(JARS)
    ours = [os.path.join(OUR_SOURCES, n) for n in PROGRAMS] + java_files(OURS5)
    out = javarocketmq5build.build(
        f"rocketmq-{VERSION}", modules=MODULES, classpath=classpath,
        sources=lambda work, src: _adapted(work) + java_files(OURS5),
        key_parts=[repr(ADAPTATIONS), javastandins.fingerprint()], key_files=ours, last=[STANDINS],
        generated=javastandins.write_sources, classes="rocketmq",
        what="the store harness", cache_root=cache_root)
    # JavaRocketMQ's class path: ours (here in rocketmq/, with RocketMQ's classes), rocketmq/, fastjson/, jars
    return JavaRocketMQ(VERSION, out, os.path.join(out, "rocketmq"), classpath + optional_jar(*QUIET_JAR))
