"""RocketMQ 5.3.3's real broker (``BrokerStartup``) and controller (``ControllerStartup``), one
build of both, made at test time from the mirrors (``ROCKETMQ_MIRROR``, ``DLEDGER_MIRROR``,
``FASTJSON_MIRROR``) and Debian's jars by tests/support/javarocketmq5build.py, as
tests/support/javarocketmq5ha.py builds the message store alone. Its processes are run by
tests/support/javarocketmq5procs.py: a controller group (``controller watch``'s tests) and a
controller with a broker on a moved store.

What javac compiles: our programs (tests/support/java/rocketmq5broker/*.java) and RocketMQ's
``BrokerStartup`` and ``ControllerStartup`` with ``-implicit:class`` and ``-sourcepath`` over
rocketmq-all-5.3.3's ``common``, ``remoting``, ``store``, ``client``, ``srvutil``, ``filter``,
``auth``, ``tieredstore``, ``broker`` and ``controller`` modules and DLedger 0.3.1.2: only the
classes reached, about 2,000. RocketMQ's own ``ControllerMetricsManager`` and
``RemotingMetricsManager`` are built (the OpenTelemetry stand-ins below let them compile) and
run with metrics disabled, RocketMQ's default: the no-op versions of
java/rocketmq5-standins/ come after RocketMQ's modules on the source path, so they fill in
nothing here.

Debian jars beyond the store's (tests/support/javarocketmq5build.STORE_JARS): commons-cli,
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
- the JRaft controller (java/rocketmq5broker/standins/): sofa-jraft is neither in the mirrors
  nor in Debian; ControllerManager makes one only with ``controllerType=jRaft`` (the DLedger
  controller is RocketMQ's default, and what runs); every body throws;
- the tiered store's MessageStoreFetcherImpl: 5.3.3's needs caffeine >= 2.8, Debian has 2.6.2;
  built only by TieredMessageStore (a store plugin no test configures); its constructors throw.

Every stand-in that throws names itself in its message; :func:`standin_failures` finds such a
line in a process's log, so a test proves it ran no stand-in's body.
"""

from __future__ import annotations

import os

from tests.support import javarocketmq5build, javastandins
from tests.support.javabuild import JAVA_FLAGS, Unavailable, jar, jars, java_files
from tests.support.javarocketmq5build import LOG_FLAGS, LOG_JAR, STANDINS

__all__ = ["Unavailable", "JavaBroker", "build", "standin_failures"]

HERE = os.path.dirname(os.path.abspath(__file__))
OURS = os.path.join(HERE, "java", "rocketmq5broker")
OUR_STANDINS = os.path.join(OURS, "standins")
MODULES = ["common", "remoting", "store", "client", "srvutil", "filter", "auth", "tieredstore", "broker",
           "controller"]
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
CONTROLLER_MAIN = "org.apache.rocketmq.controller.ControllerStartup"
# RocketMQ's own mains, compiled as given (javac then compiles what they reach)
MAINS = [f"{module}/src/main/java/{main.replace('.', '/')}.java"
         for module, main in (("broker", BROKER_MAIN), ("controller", CONTROLLER_MAIN))]
JARS = {**javarocketmq5build.STORE_JARS, "commons-cli": "libcommons-cli-java", "reflections": "libreflections-java",
        "snakeyaml": "libyaml-snake-java", "caffeine": "libcaffeine-java", "grpc-api": "libgrpc-java",
        "grpc-context": "libgrpc-java", "grpc-core": "libgrpc-java", "protobuf": "libprotobuf-java",
        "javassist": "libjavassist-java", "bcpkix": "libbcpkix-java", "bcprov": "libbcprov-java",
        "jul-to-slf4j": "libslf4j-java"}

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
    """The built classes: their class path and the java command of one process."""

    def __init__(self, root: str, jars: list[str]) -> None:
        self.root = root
        self.classpath = os.pathsep.join([os.path.join(root, "classes"), os.path.join(root, "fastjson"), *jars])

    def command(self, main: str, *args: str, heap: str = "256m", home: str | None = None) -> list[str]:
        """``main`` with ``args`` in a JVM of ``heap``; ``home``: RocketMQ's home and the JVM's
        user.home (a process's defaults under it, not under the real home), with
        RocketMQ's log (slf4j-simple, INFO) on stderr; without, no log settings."""
        where = [*LOG_FLAGS, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}"] if home else []
        return ["java", *JAVA_FLAGS, *where, f"-Xmx{heap}", "-cp", self.classpath, main, *args]


def build(cache_root: str | None = None) -> JavaBroker:
    """Build (or take from the cache) RocketMQ 5.3.3's broker and controller and our programs;
    Unavailable naming what is missing."""
    classpath = jars(JARS)
    ours = [f for f in java_files(OURS) if not f.startswith(OUR_STANDINS + os.sep)]
    # ours first (they replace RocketMQ's MessageStoreFetcherImpl and the shared JSONField),
    # RocketMQ's modules before the shared stand-ins (whose RemotingMetricsManager and
    # ControllerMetricsManager would replace RocketMQ's: the SDK stand-ins let the real ones build)
    out = javarocketmq5build.build(
        "rocketmq5broker", modules=MODULES, classpath=classpath,
        sources=lambda work, src: ours + [os.path.join(src, m) for m in MAINS],
        key_parts=[javastandins.fingerprint(), repr((_OTEL_SDK, _ROCKSDB_MORE, _FASTJSON2, _PROTO, MODULES, MAINS))],
        key_files=java_files(OURS), first=[OUR_STANDINS], last=[STANDINS], generated=write_standins,
        extra=["-Xmaxerrs", "400"], what="tests/support/java/rocketmq5broker", cache_root=cache_root)
    return JavaBroker(out, classpath + [jar(*LOG_JAR)])
