"""RocketMQ 5.3.3's real broker process (``BrokerStartup``) and controller, built at test time
from the mirrors (``ROCKETMQ_MIRROR``, ``DLEDGER_MIRROR``, ``FASTJSON_MIRROR``) and Debian's jars,
as tests/support/javarocketmq5ha.py builds the message store alone.

What javac compiles: our programs (tests/support/java/rocketmq5broker/*.java) and RocketMQ's
``BrokerStartup`` with ``-implicit:class`` and ``-sourcepath`` over rocketmq-all-5.3.3's
``common``, ``remoting``, ``store``, ``client``, ``srvutil``, ``filter``, ``auth``,
``tieredstore``, ``broker`` and ``controller`` modules and DLedger 0.3.1.2: only the
classes reached, about 2,000.

Debian jars beyond the store's (tests/support/javarocketmq5store.JARS): commons-cli,
reflections (RequestHeaderRegistry), snakeyaml (the client's ACL 1.0 files), caffeine (auth's
caches), grpc-api/-context/-core and protobuf (the auth module's gRPC context builders),
javassist, bcpkix/bcprov, jul-to-slf4j.

Stand-ins, where neither the mirrors nor Debian have the library. Each is named where it is
written and said whether a test path runs it:

- metrics (OpenTelemetry's API, SDK and exporters): the API interfaces as no-op classes
  (tests/support/java/rocketmq5-standins/, as for the controller), the SDK and exporters as types
  whose every body throws (:data:`_OTEL_SDK`): a broker with ``metricsExporterType=DISABLE``
  (RocketMQ's default) never builds a meter provider, BrokerMetricsManager.init returns first;
- RocksDB's Java API: javastandins' types plus what the broker's RocksDB config and POP stores
  name (:data:`_ROCKSDB_MORE`), every body throwing: they run only with
  ``storeType=defaultRocksDB``, ``configManagerVersion=v2`` or ``popConsumerKVServiceInit``,
  none of which a test sets;
- fastjson2 (``JSON``, ``JSONObject``, ``JSONField``): throwing; called only for auth's initial
  users and inner credentials (``initAuthenticationUser``, ``innerClientAuthenticationCredentials``),
  the v2 config storage and ColdDataCgCtrService's admin answer, none reached;
- the gRPC API's messages (``apache.rocketmq.v2``, rocketmq-proto): abstract types whose
  getters throw; DefaultAuthorizationContextBuilder, which a broker builds at start, reads them
  only for gRPC requests (the proxy's), never for the broker's remoting requests;
- concurrentlinkedhashmap-lru (java/rocketmq5broker/standins/): PopLongPollingService's two maps
  are built by every broker and stay empty unless a client long-polls with POP: reads answer
  as the empty map, writes throw;
- the tiered store's MessageStoreFetcherImpl: 5.3.3's needs caffeine >= 2.8, Debian has 2.6.2;
  built only by TieredMessageStore (a store plugin no test configures); its constructors throw.

Every stand-in that throws names itself in its message; :func:`standin_failures` finds such a
line in a process's log, so a test proves it ran no stand-in's body.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from tests.support import javastandins
from tests.support.javabuild import JAVA_FLAGS, SWAGGER_STANDIN, Unavailable, commit_of, extract, jar, mirror
from tests.support.javarocketmq import _MONETA_STANDIN
from tests.support.javarocketmq5 import DLEDGER_TAG, FASTJSON_TAG, ROCKETMQ_TAG, STANDINS, _java_files, _javac, \
    build_fastjson
from tests.support.javarocketmq5store import FASTJSON_JARS
from tests.support.javarocketmq5store import JARS as STORE_JARS
from tests.support.ports import HOST, free_port_base

__all__ = ["Unavailable", "JavaBroker", "build", "standin_failures", "ControllerAndBroker", "ProcessError"]

HERE = os.path.dirname(os.path.abspath(__file__))
OURS = os.path.join(HERE, "java", "rocketmq5broker")
OUR_STANDINS = os.path.join(OURS, "standins")
MODULES = ["common", "remoting", "store", "client", "srvutil", "filter", "auth", "tieredstore", "broker",
           "controller"]
# RocketMQ's own mains, compiled as given (javac then compiles what they reach)
MAINS = ["broker/src/main/java/org/apache/rocketmq/broker/BrokerStartup.java",
         "controller/src/main/java/org/apache/rocketmq/controller/ControllerStartup.java"]
JARS = {**STORE_JARS, "commons-cli": "libcommons-cli-java", "reflections": "libreflections-java",
        "snakeyaml": "libyaml-snake-java", "caffeine": "libcaffeine-java", "grpc-api": "libgrpc-java",
        "grpc-context": "libgrpc-java", "grpc-core": "libgrpc-java", "protobuf": "libprotobuf-java",
        "javassist": "libjavassist-java", "bcpkix": "libbcpkix-java", "bcprov": "libbcprov-java",
        "jul-to-slf4j": "libslf4j-java"}
LOG_JAR = ("slf4j-simple", "libslf4j-java")

OTEL_ABSENT = javastandins.OTEL_ABSENT
ROCKSDB_ABSENT = javastandins.ROCKSDB_ABSENT
FASTJSON2_ABSENT = "fastjson2 is not on this class path: a dledgerctl test stand-in"
PROTO_ABSENT = "rocketmq-proto (the gRPC API's messages) is not on this class path: a dledgerctl test stand-in"

# OpenTelemetry's SDK and exporters, as BrokerMetricsManager, PopMetricsManager,
# TieredStoreMetricsManager and RemotingMetricsManager name them (API surface only)
_S = "io.opentelemetry.sdk.metrics."
_OTEL_SDK: list[tuple[str, str, list[str]]] = [
    (_S + "ViewBuilder", "public final class NAME", [
        "public NAME setAggregation(Aggregation a)", "public NAME setDescription(String d)",
        "public NAME setName(String n)", "public View build()"]),
    (_S + "SdkMeterProvider", "public final class NAME", ["public static SdkMeterProviderBuilder builder()"]),
    (_S + "SdkMeterProviderBuilder", "public final class NAME", [
        "public NAME setResource(io.opentelemetry.sdk.resources.Resource r)",
        "public NAME registerMetricReader(" + _S + "export.MetricReader r)",
        "public NAME registerView(InstrumentSelector s, View v)", "public SdkMeterProvider build()"]),
    (_S + "internal.SdkMeterProviderUtil", "public final class NAME", [
        "public static void setCardinalityLimit(" + _S + "ViewBuilder b, int limit)"]),
    (_S + "data.AggregationTemporality", "public enum NAME", ["DELTA, CUMULATIVE;"]),
    (_S + "export.MetricReader", "public interface NAME", []),
    (_S + "export.MetricExporter", "public interface NAME", [
        "default void shutdown() { throw new UnsupportedOperationException(\"" + javastandins.OTEL_ABSENT + "\"); }"]),
    (_S + "export.AggregationTemporalitySelector", "public interface NAME", [
        _S + "data.AggregationTemporality getAggregationTemporality(" + _S + "InstrumentType t);"]),
    (_S + "export.PeriodicMetricReader", "public final class NAME implements MetricReader", [
        "public static PeriodicMetricReaderBuilder builder(MetricExporter e)", "public void forceFlush()",
        "public void shutdown()"]),
    (_S + "export.PeriodicMetricReaderBuilder", "public final class NAME", [
        "public NAME setInterval(long interval, java.util.concurrent.TimeUnit unit)",
        "public PeriodicMetricReader build()"]),
    ("io.opentelemetry.api.metrics.Meter", "public interface NAME", [
        "LongCounterBuilder counterBuilder(String name);", "DoubleGaugeBuilder gaugeBuilder(String name);",
        "DoubleHistogramBuilder histogramBuilder(String name);",
        "LongUpDownCounterBuilder upDownCounterBuilder(String name);"]),
    ("io.opentelemetry.api.metrics.LongUpDownCounterBuilder", "public interface NAME", [
        "LongUpDownCounterBuilder setDescription(String d);", "LongUpDownCounterBuilder setUnit(String u);",
        "LongUpDownCounter build();"]),
    ("io.opentelemetry.api.metrics.LongHistogramBuilder", "public interface NAME", [
        "LongHistogramBuilder setDescription(String d);", "LongHistogramBuilder setUnit(String u);",
        "LongHistogram build();"]),
    ("io.opentelemetry.sdk.resources.Resource", "public abstract class NAME", ["public static Resource empty()"]),
    ("io.opentelemetry.sdk.OpenTelemetrySdk", "public final class NAME", [
        "public static OpenTelemetrySdkBuilder builder()",
        "public io.opentelemetry.api.metrics.Meter getMeter(String name)"]),
    ("io.opentelemetry.sdk.OpenTelemetrySdkBuilder", "public final class NAME", [
        "public NAME setMeterProvider(" + _S + "SdkMeterProvider p)", "public OpenTelemetrySdk build()"]),
    ("io.opentelemetry.exporter.otlp.metrics.OtlpGrpcMetricExporter",
     "public final class NAME implements " + _S + "export.MetricExporter", [
         "public static OtlpGrpcMetricExporterBuilder builder()"]),
    ("io.opentelemetry.exporter.otlp.metrics.OtlpGrpcMetricExporterBuilder", "public final class NAME", [
        "public NAME setEndpoint(String e)", "public NAME setTimeout(long t, java.util.concurrent.TimeUnit u)",
        "public NAME setAggregationTemporalitySelector(" + _S + "export.AggregationTemporalitySelector s)",
        "public NAME addHeader(String k, String v)", "public OtlpGrpcMetricExporter build()"]),
    ("io.opentelemetry.exporter.prometheus.PrometheusHttpServer",
     "public final class NAME implements " + _S + "export.MetricReader", [
         "public static PrometheusHttpServerBuilder builder()", "public void forceFlush()", "public void shutdown()"]),
    ("io.opentelemetry.exporter.prometheus.PrometheusHttpServerBuilder", "public final class NAME", [
        "public NAME setHost(String h)", "public NAME setPort(int p)", "public PrometheusHttpServer build()"]),
    ("io.opentelemetry.exporter.logging.otlp.OtlpJsonLoggingMetricExporter",
     "public final class NAME implements " + _S + "export.MetricExporter", [
         "public static " + _S + "export.MetricExporter create(" + _S + "data.AggregationTemporality t)"]),
]

# what the broker's RocksDB config and POP stores name beyond javastandins' (qualified name ->
# members added; a name javastandins lacks is a new class)
_ROCKSDB_MORE: dict[str, tuple[str, list[str]]] = {
    "org.rocksdb.WriteBatch": ("public class NAME extends RocksObject", [
        "public long getDataSize()", "public void put(byte[] key, byte[] value) throws RocksDBException",
        "public void put(java.nio.ByteBuffer key, java.nio.ByteBuffer value) throws RocksDBException",
        "public void delete(byte[] key) throws RocksDBException",
        "public void delete(java.nio.ByteBuffer key) throws RocksDBException",
        "public void deleteRange(byte[] begin, byte[] end) throws RocksDBException"]),
    "org.rocksdb.ReadOptions": ("public class NAME extends RocksObject", [
        "public NAME setAutoPrefixMode(boolean v)", "public NAME setIterateUpperBound(AbstractSlice<?> v)",
        "public NAME setIterateLowerBound(AbstractSlice<?> v)"]),
    "org.rocksdb.RocksIterator": ("public class NAME extends RocksObject", [
        "public void seek(java.nio.ByteBuffer target)", "public void seek(byte[] target)"]),
    "org.rocksdb.AbstractSlice": ("public abstract class NAME<T> extends RocksObject", []),
    "org.rocksdb.Slice": ("public class NAME extends AbstractSlice<byte[]>", [
        "public NAME(byte[] data)", "public NAME(String s)"]),
}

# fastjson2's classes that the broker, auth and client modules call
_FASTJSON2: list[tuple[str, str, list[str]]] = [
    ("com.alibaba.fastjson2.JSON", "public interface NAME", [
        "static <T> T parseObject(String text, Class<T> clazz)", "static byte[] toJSONBytes(Object o)",
        "static String toJSONString(Object o)"]),
    ("com.alibaba.fastjson2.JSONObject", "public class NAME extends java.util.LinkedHashMap<String, Object>", [
        "public NAME()", "public String toJSONString()", "public String getString(String key)",
        "public JSONObject getJSONObject(String key)"]),
]

_V2 = "apache.rocketmq.v2."
_MESSAGE = "public abstract class NAME extends com.google.protobuf.GeneratedMessageV3"
_RESOURCE = _V2 + "Resource"
# the gRPC API's messages as DefaultAuthorizationContextBuilder reads them
_PROTO: list[tuple[str, str, list[str]]] = [
    (_RESOURCE, "public abstract class NAME", ["public String getName()", "public String getResourceNamespace()"]),
    (_V2 + "Message", "public abstract class NAME", [f"public {_RESOURCE} getTopic()"]),
    (_V2 + "MessageQueue", "public abstract class NAME", [f"public {_RESOURCE} getTopic()"]),
    (_V2 + "ClientType", "public enum NAME", [
        "CLIENT_TYPE_UNSPECIFIED, PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER, PULL_CONSUMER, UNRECOGNIZED;"]),
    (_V2 + "SendMessageRequest", _MESSAGE, ["public int getMessagesCount()", "public Message getMessages(int i)"]),
    (_V2 + "RecallMessageRequest", _MESSAGE, [f"public {_RESOURCE} getTopic()"]),
    (_V2 + "EndTransactionRequest", _MESSAGE, [f"public {_RESOURCE} getTopic()"]),
    (_V2 + "HeartbeatRequest", _MESSAGE, ["public ClientType getClientType()", f"public {_RESOURCE} getGroup()"]),
    (_V2 + "ReceiveMessageRequest", _MESSAGE, [
        "public boolean hasMessageQueue()", f"public {_RESOURCE} getGroup()", "public MessageQueue getMessageQueue()"]),
    (_V2 + "AckMessageRequest", _MESSAGE, [f"public {_RESOURCE} getGroup()", f"public {_RESOURCE} getTopic()"]),
    (_V2 + "ForwardMessageToDeadLetterQueueRequest", _MESSAGE, [
        f"public {_RESOURCE} getGroup()", f"public {_RESOURCE} getTopic()"]),
    (_V2 + "NotifyClientTerminationRequest", _MESSAGE, [f"public {_RESOURCE} getGroup()"]),
    (_V2 + "ChangeInvisibleDurationRequest", _MESSAGE, [
        f"public {_RESOURCE} getGroup()", f"public {_RESOURCE} getTopic()"]),
    (_V2 + "QueryRouteRequest", _MESSAGE, [f"public {_RESOURCE} getTopic()"]),
    (_V2 + "QueryAssignmentRequest", _MESSAGE, [f"public {_RESOURCE} getGroup()", f"public {_RESOURCE} getTopic()"]),
    (_V2 + "TelemetryCommand", _MESSAGE, [
        "public CommandCase getCommandCase()", "public Settings getSettings()",
        "public enum CommandCase { SETTINGS, THREAD_STACK_TRACE, VERIFY_MESSAGE_RESULT, RECOVER_ORPHANED_TRANSACTION_"
        "COMMAND, PRINT_THREAD_STACK_TRACE_COMMAND, VERIFY_MESSAGE_COMMAND, STATUS, COMMAND_NOT_SET; }"]),
    (_V2 + "Settings", "public abstract class NAME", [
        "public boolean hasPublishing()", "public boolean hasSubscription()", "public Publishing getPublishing()",
        "public Subscription getSubscription()"]),
    (_V2 + "Publishing", "public abstract class NAME", [f"public java.util.List<{_RESOURCE}> getTopicsList()"]),
    (_V2 + "Subscription", "public abstract class NAME", [
        f"public {_RESOURCE} getGroup()", "public java.util.List<SubscriptionEntry> getSubscriptionsList()"]),
    (_V2 + "SubscriptionEntry", "public abstract class NAME", [f"public {_RESOURCE} getTopic()"]),
]


def write_standins(root: str) -> None:
    """javastandins' RocksDB and OpenTelemetry types, then ours over them (the same file name
    replaces javastandins' class by ours, a superset)."""
    javastandins.write_sources(root)
    rocksdb = {q: (decl, list(members)) for q, decl, members in javastandins._ROCKSDB}
    for q, (decl, more) in _ROCKSDB_MORE.items():
        old = rocksdb.get(q, (decl, []))[1]
        rocksdb[q] = (decl, old + more)
    tables = [([(q, d, m) for q, (d, m) in rocksdb.items()], ROCKSDB_ABSENT), (_OTEL_SDK, OTEL_ABSENT),
              (_FASTJSON2, FASTJSON2_ABSENT), (_PROTO, PROTO_ABSENT)]
    for table, absent in tables:
        for qualified, declaration, members in table:
            path = os.path.join(root, *qualified.split(".")) + ".java"
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(javastandins._source(qualified, declaration, members, absent))


def standin_failures(text: str) -> list[str]:
    """Lines of a process's log that a stand-in's thrown message is on (none: no stand-in's
    body ran, or its exception was not logged)."""
    marks = ("dledgerctl test stand-in",)
    return [line for line in text.splitlines() if any(m in line for m in marks)]


class JavaBroker:
    """The built classes: class path and java commands."""

    def __init__(self, root: str, jars: list[str]) -> None:
        self.root = root
        self.classpath = os.pathsep.join([os.path.join(root, "classes"), os.path.join(root, "fastjson"), *jars])


def _build_into(out: str, commits: dict, jars: list[str], fastjson_jars: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="rocketmq5-broker-build-") as work:
        build_fastjson(work, os.path.join(out, "fastjson"), commits["fastjson"], fastjson_jars)
        repo, commit = commits["rocketmq"]
        src = os.path.join(work, "rocketmq")
        extract(repo, commit, [f"{m}/src/main/java" for m in MODULES], src)
        repo, commit = commits["dledger"]
        dsrc = os.path.join(work, "dledger")
        extract(repo, commit, ["dledger/src/main/java"], dsrc)
        generated = os.path.join(work, "standins")
        write_standins(generated)
        # ours first (they replace RocketMQ's MessageStoreFetcherImpl and the shared JSONField),
        # RocketMQ's modules before the shared stand-ins (whose RemotingMetricsManager and
        # ControllerMetricsManager would replace RocketMQ's: the SDK stand-ins let the real ones build)
        roots = [OUR_STANDINS] + [os.path.join(src, m, "src/main/java") for m in MODULES] + [
            os.path.join(dsrc, "dledger/src/main/java"), STANDINS, generated]
        files = _java_files(OURS)
        files = [f for f in files if not f.startswith(OUR_STANDINS + os.sep)] + [os.path.join(src, m) for m in MAINS]
        _javac(files, os.path.join(out, "classes"), [*jars, os.path.join(out, "fastjson")],
               ["-implicit:class", "-sourcepath", os.pathsep.join(roots), "-Xmaxerrs", "400",
                "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"],
               f"tests/support/java/rocketmq5broker against {ROCKETMQ_TAG} ({', '.join(MODULES)}) + {DLEDGER_TAG}")


def build(cache_root: str | None = None) -> JavaBroker:
    """Build (or take from the cache) RocketMQ 5.3.3's broker and our programs; Unavailable
    naming what is missing."""
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
    log_jar = jar(*LOG_JAR)
    h = hashlib.sha256()
    javac_version = subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout.strip()
    for part in ["rocketmq5broker", *(c for _, c in commits.values()), *map(os.path.realpath, jars + fastjson_jars),
                 javac_version, SWAGGER_STANDIN, _MONETA_STANDIN, javastandins.fingerprint(),
                 repr((_OTEL_SDK, _ROCKSDB_MORE, _FASTJSON2, _PROTO, MODULES, MAINS))]:
        h.update(part.encode() + b"\0")
    for path in _java_files(OURS) + _java_files(STANDINS):
        with open(path, "rb") as fh:
            h.update(path.encode() + b"\0" + fh.read() + b"\0")
    root = cache_root or os.environ.get("DLEDGERCTL_JAVA_CACHE") or os.path.expanduser("~/.cache/dledgerctl-java")
    os.makedirs(root, exist_ok=True)
    out = os.path.join(root, f"rocketmq5broker-{h.hexdigest()[:16]}")
    with open(os.path.join(root, ".rocketmq5broker-build.lock"), "w") as lock:
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
    return JavaBroker(out, jars + [log_jar])


# -- running them ------------------------------------------------------------------------------

BOOTED = re.compile(r"The broker\[[^\]]*\] boot success")
MASTER = re.compile(r"Change broker \[id:(\d+)\]\[address:[^\]]*\] to SYNC_MASTER.*newMasterEpoch:(\d+)")
LOG_FLAGS = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=info", "-Dorg.slf4j.simpleLogger.showDateTime=true",
             "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS", "-Dorg.slf4j.simpleLogger.logFile=System.err"]


class ProcessError(RuntimeError):
    """A process died, or what was awaited did not show in its log in time."""


class Proc:
    """One JVM: its command, its log file (stdout and stderr), started by :meth:`start`."""

    def __init__(self, java: JavaBroker, name: str, main: str, args: list[str], log_path: str, home: str) -> None:
        self.java, self.name, self.main, self.args, self.log_path, self.home = java, name, main, args, log_path, home
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        cmd = ["java", *JAVA_FLAGS, *LOG_FLAGS, "-Xmx256m", f"-Duser.home={self.home}",
               f"-Drocketmq.home.dir={self.home}", "-cp", self.java.classpath, self.main, *self.args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.home)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return fh.read()
        except FileNotFoundError:
            return ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def wait_for(self, pattern: re.Pattern, what: str, timeout: float = 90.0) -> re.Match:
        """The first match of ``pattern`` in the log, polled until ``timeout``; ProcessError if
        the process ends first or the deadline passes."""
        deadline = time.monotonic() + timeout
        while True:
            m = pattern.search(self.log_text())
            if m:
                return m
            if not self.alive():
                raise ProcessError(f"{self.name} ended (exit {self.proc.returncode if self.proc else None}) before "
                                   f"{what}; log tail:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ProcessError(f"{self.name}: {what} not seen in {timeout} s; log tail:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (RocketMQ's shutdown hooks run), SIGKILL after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _conf(path: str, settings: dict) -> str:
    with open(path, "w") as fh:
        fh.write("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


class ControllerAndBroker:
    """RocketMQ's controller (ControllerStartup: a one-member DLedger controller group, whose
    DLedger address is also the controller's remoting address, as RocketMQ's deploy guide has
    it) and one broker (BrokerStartup, ``enableControllerMode=true``, ``controllerAddr`` that
    address) on ``store_root``. A context manager: every process it started is stopped at the
    end, killed if it does not stop."""

    def __init__(self, java: JavaBroker, base: str, store_root: str, broker: dict | None = None) -> None:
        self.java, self.base, self.store_root = java, base, store_root
        os.makedirs(base, exist_ok=True)
        # the broker listens on its port, on port - 2 (fastListenPort) and port + 1 (haListenPort)
        base_port = free_port_base(5)
        ctl_port, self.broker_port = base_port, base_port + 3
        self.controller_addr = f"{HOST}:{ctl_port}"
        self.broker_addr = f"{HOST}:{self.broker_port}"
        ctl_conf = _conf(os.path.join(base, "controller.conf"), {
            "controllerDLegerGroup": "dledgerctl-test", "controllerDLegerPeers": f"n0-{self.controller_addr}",
            "controllerDLegerSelfId": "n0", "controllerStorePath": os.path.join(base, "controller-store"),
            "listenPort": ctl_port, "rocketmqHome": base})
        settings = {"brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerIP1": HOST,
                    "listenPort": self.broker_port, "storePathRootDir": store_root,
                    "storePathCommitLog": os.path.join(store_root, "commitlog"), "enableControllerMode": "true",
                    "controllerAddr": self.controller_addr, "rocketmqHome": base, **(broker or {})}
        broker_conf = _conf(os.path.join(base, "broker.conf"), settings)
        self.controller = Proc(java, "controller", "org.apache.rocketmq.controller.ControllerStartup",
                               ["-c", ctl_conf], os.path.join(base, "controller.log"), base)
        self.broker = Proc(java, "broker", "org.apache.rocketmq.broker.BrokerStartup", ["-c", broker_conf],
                           os.path.join(base, "broker.log"), base)

    def __enter__(self) -> "ControllerAndBroker":
        return self

    def __exit__(self, *exc) -> None:
        for p in (self.broker, self.controller):
            p.stop()

    def start(self, timeout: float = 120.0) -> tuple[int, int]:
        """Both started; until the broker has booted and the controller made it the master:
        (its broker id, the master epoch), from RocketMQ's own log line."""
        self.controller.start()
        self.broker.start()
        self.broker.wait_for(BOOTED, "boot success", timeout)
        m = self.broker.wait_for(MASTER, "SYNC_MASTER from the controller", timeout)
        return int(m.group(1)), int(m.group(2))

    def pull(self, queues: list[tuple[str, int]], group: str = "dledgerctl_pull_check",
             timeout: float = 120.0) -> tuple[list[dict], dict]:
        """Every message of ``queues`` pulled through RocketMQ's client (QueuePuller): the
        message rows, and per queue its last answer (status, next, min, max)."""
        cmd = ["java", *JAVA_FLAGS, "-Xmx128m", "-cp", self.java.classpath, "QueuePuller", self.broker_addr, group,
               *(f"{t}/{q}" for t, q in queues)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.base)
        if proc.returncode != 0:
            raise ProcessError(f"QueuePuller exit {proc.returncode}: {proc.stderr[-3000:]}")
        rows, ends = [], {}
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            if "queue" in row:
                ends[row["queue"]] = row
            else:
                rows.append(row)
        return rows, ends
