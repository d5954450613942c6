"""Stand-ins for the API surface of two libraries that RocketMQ 5's message store names but
that neither the mirrors nor Debian have: RocksDB's Java API (``org.rocksdb``, rocksdbjni, and
RocketMQ's own fork of it for ``RemoveConsumeQueueCompactionFilter``) and OpenTelemetry's
Java API and SDK (``io.opentelemetry``). tests/support/javarocketmq5store.py writes them as
Java sources (:func:`write_sources`) onto javac's ``-sourcepath`` beside rocketmq-all-5.3.3's
modules, so that ``DefaultMessageStore`` compiles.

They are types and signatures only: every constructor and every method throws
UnsupportedOperationException naming the missing library, so a code path that reaches one
fails loudly instead of pretending. What reaches them in 5.3.3, none of which the tests run:

- RocksDB: the RocksDB consume-queue store (``storeType=defaultRocksDB``), the double write of
  consume queues to RocksDB (``rocksdbCQDoubleWriteEnable``), the RocksDB config storage and
  their metrics. The default store (files under ``consumequeue/``), which the tests use,
  only declares ``RocksDBException`` in its ``throws`` and ``catch`` clauses (the JVM loads
  the class to verify those; nothing constructs it).
- OpenTelemetry: ``DefaultMessageStore.initMetrics``/``getMetricsView`` and the metric
  managers of the store, the timer and remoting, which a broker calls with its meter; the
  store never calls them by itself.

One piece does run, as data: ``MessageStoreConfig``'s field initializers read
``CompressionType.ZSTD_COMPRESSION.getLibraryName()`` and ``LZ4_COMPRESSION``'s, so the enum
carries RocksDB's library names ("zstd", "lz4", ...) and ``SizeUnit`` its constants (javac
inlines those). Both configure only the RocksDB store.
"""

from __future__ import annotations

import os

ROCKSDB_ABSENT = "RocksDB's Java API (rocksdbjni) is not on this class path: a dledgerctl test stand-in"
OTEL_ABSENT = "OpenTelemetry's Java API is not on this class path: a dledgerctl test stand-in"

# (qualified name, declaration, members). A member ending in ";" is written as it is
# (constants, enum constants, abstract methods); any other gets a body that throws.
# "NAME" in a declaration or member is the simple name.
_ROCKSDB: list[tuple[str, str, list[str]]] = [
    ("org.rocksdb.RocksDBException", "public class NAME extends Exception", [
        "public NAME(String message)", "public Status getStatus()"]),
    ("org.rocksdb.Status", "public class NAME", [
        "public Code getCode()", "public SubCode getSubCode()", "public String getState()",
        "public enum Code { Ok, NotFound, Corruption, NotSupported, InvalidArgument, IOError, MergeInProgress, "
        "Incomplete, ShutdownInProgress, TimedOut, Aborted, Busy, Expired, TryAgain, Undefined; }",
        "public enum SubCode { None, MutexTimeout, LockTimeout, LockLimit, NoSpace, Deadlock, StaleFile, "
        "MemoryLimit, Undefined; }"]),
    ("org.rocksdb.RocksObject", "public abstract class NAME implements AutoCloseable", [
        "public void close()"]),
    ("org.rocksdb.RocksDB", "public class NAME extends RocksObject", [
        "public static final byte[] DEFAULT_COLUMN_FAMILY = \"default\".getBytes();",
        "public static void loadLibrary()",
        "public static RocksDB open(DBOptions options, String path, java.util.List<ColumnFamilyDescriptor> "
        "descriptors, java.util.List<ColumnFamilyHandle> handles) throws RocksDBException",
        "public static RocksDB openReadOnly(DBOptions options, String path, java.util.List<ColumnFamilyDescriptor> "
        "descriptors, java.util.List<ColumnFamilyHandle> handles) throws RocksDBException",
        "public void put(ColumnFamilyHandle cf, WriteOptions o, byte[] key, int keyOffset, int keyLength, "
        "byte[] value, "
        "int valueOffset, int valueLength) throws RocksDBException",
        "public void put(ColumnFamilyHandle cf, WriteOptions o, java.nio.ByteBuffer key, java.nio.ByteBuffer value) "
        "throws RocksDBException",
        "public void write(WriteOptions o, WriteBatch batch) throws RocksDBException",
        "public byte[] get(ColumnFamilyHandle cf, ReadOptions o, byte[] key) throws RocksDBException",
        "public int get(ColumnFamilyHandle cf, ReadOptions o, java.nio.ByteBuffer key, java.nio.ByteBuffer value) "
        "throws RocksDBException",
        "public java.util.List<byte[]> multiGetAsList(ReadOptions o, java.util.List<ColumnFamilyHandle> cfs, "
        "java.util.List<byte[]> keys) throws RocksDBException",
        "public void delete(ColumnFamilyHandle cf, WriteOptions o, byte[] key) throws RocksDBException",
        "public void delete(ColumnFamilyHandle cf, WriteOptions o, java.nio.ByteBuffer key) throws RocksDBException",
        "public void deleteRange(ColumnFamilyHandle cf, WriteOptions o, byte[] begin, byte[] end) "
        "throws RocksDBException",
        "public RocksIterator newIterator(ColumnFamilyHandle cf, ReadOptions o)",
        "public void cancelAllBackgroundWork(boolean wait)",
        "public void pauseBackgroundWork() throws RocksDBException",
        "public Env getEnv()", "public void closeE() throws RocksDBException",
        "public void syncWal() throws RocksDBException",
        "public void flush(FlushOptions o, java.util.List<ColumnFamilyHandle> cfs) throws RocksDBException",
        "public void flushWal(boolean sync) throws RocksDBException",
        "public java.util.List<LiveFileMetaData> getLiveFilesMetaData()",
        "public String getProperty(String property) throws RocksDBException",
        "public void compactRange(ColumnFamilyHandle cf, byte[] begin, byte[] end, CompactRangeOptions o) "
        "throws RocksDBException"]),
    ("org.rocksdb.ColumnFamilyHandle", "public class NAME extends RocksObject", []),
    ("org.rocksdb.ColumnFamilyDescriptor", "public class NAME", [
        "public NAME(byte[] name, ColumnFamilyOptions options)"]),
    ("org.rocksdb.WriteBatch", "public class NAME extends RocksObject", [
        "public NAME()",
        "public void put(ColumnFamilyHandle cf, byte[] key, byte[] value) throws RocksDBException",
        "public void put(ColumnFamilyHandle cf, java.nio.ByteBuffer key, java.nio.ByteBuffer value) "
        "throws RocksDBException",
        "public void delete(ColumnFamilyHandle cf, byte[] key) throws RocksDBException",
        "public void deleteRange(ColumnFamilyHandle cf, byte[] begin, byte[] end) throws RocksDBException",
        "public void clear()"]),
    ("org.rocksdb.RocksIterator", "public class NAME extends RocksObject", [
        "public void seekToFirst()", "public boolean isValid()", "public void next()", "public byte[] key()",
        "public byte[] value()", "public int key(java.nio.ByteBuffer key)",
        "public int value(java.nio.ByteBuffer value)"]),
    ("org.rocksdb.LiveFileMetaData", "public class NAME", [
        "public byte[] columnFamilyName()", "public int level()", "public String fileName()", "public long size()",
        "public long numEntries()", "public long numDeletions()", "public long numReadsSampled()",
        "public boolean beingCompacted()"]),
    ("org.rocksdb.WriteOptions", "public class NAME extends RocksObject", [
        "public NAME()", "public NAME setSync(boolean v)", "public NAME setDisableWAL(boolean v)",
        "public NAME setNoSlowdown(boolean v)"]),
    ("org.rocksdb.ReadOptions", "public class NAME extends RocksObject", [
        "public NAME()", "public NAME setPrefixSameAsStart(boolean v)", "public NAME setTotalOrderSeek(boolean v)",
        "public NAME setTailing(boolean v)"]),
    ("org.rocksdb.FlushOptions", "public class NAME extends RocksObject", [
        "public NAME()", "public NAME setWaitForFlush(boolean v)", "public NAME setAllowWriteStall(boolean v)"]),
    ("org.rocksdb.CompactRangeOptions", "public class NAME extends RocksObject", [
        "public NAME()",
        "public NAME setBottommostLevelCompaction(BottommostLevelCompaction v)",
        "public NAME setAllowWriteStall(boolean v)", "public NAME setExclusiveManualCompaction(boolean v)",
        "public NAME setChangeLevel(boolean v)", "public NAME setTargetLevel(int v)",
        "public NAME setMaxSubcompactions(int v)",
        "public enum BottommostLevelCompaction { kSkip, kIfHaveCompactionFilter, kForce, kForceOptimized; }"]),
    ("org.rocksdb.CompactionOptions", "public class NAME extends RocksObject", [
        "public NAME()", "public NAME setCompression(CompressionType v)", "public NAME setMaxSubcompactions(int v)",
        "public NAME setOutputFileSizeLimit(long v)"]),
    ("org.rocksdb.CompactionOptionsUniversal", "public class NAME extends RocksObject", [
        "public NAME()", "public NAME setSizeRatio(int v)", "public NAME setMaxSizeAmplificationPercent(int v)",
        "public NAME setAllowTrivialMove(boolean v)", "public NAME setMinMergeWidth(int v)",
        "public NAME setMaxMergeWidth(int v)", "public NAME setStopStyle(CompactionStopStyle v)",
        "public NAME setCompressionSizePercent(int v)"]),
    ("org.rocksdb.ColumnFamilyOptions", "public class NAME extends RocksObject", [
        "public NAME()", "public NAME setMaxWriteBufferNumber(int v)", "public NAME setWriteBufferSize(long v)",
        "public NAME setMinWriteBufferNumberToMerge(int v)",
        "public NAME setTableFormatConfig(BlockBasedTableConfig v)",
        "public NAME setMemTableConfig(SkipListMemTableConfig v)", "public NAME setCompressionType(CompressionType v)",
        "public NAME setBottommostCompressionType(CompressionType v)", "public NAME setNumLevels(int v)",
        "public NAME setCompactionPriority(CompactionPriority v)", "public NAME setCompactionStyle(CompactionStyle v)",
        "public NAME setCompactionOptionsUniversal(CompactionOptionsUniversal v)",
        "public NAME setMaxCompactionBytes(long v)", "public NAME setSoftPendingCompactionBytesLimit(long v)",
        "public NAME setHardPendingCompactionBytesLimit(long v)",
        "public NAME setLevel0FileNumCompactionTrigger(int v)",
        "public NAME setLevel0SlowdownWritesTrigger(int v)", "public NAME setLevel0StopWritesTrigger(int v)",
        "public NAME setTargetFileSizeBase(long v)", "public NAME setTargetFileSizeMultiplier(int v)",
        "public NAME setMaxBytesForLevelBase(long v)", "public NAME setMaxBytesForLevelMultiplier(double v)",
        "public NAME setMergeOperator(StringAppendOperator v)",
        "public NAME setCompactionFilterFactory(AbstractCompactionFilterFactory<?> v)",
        "public NAME setReportBgIoStats(boolean v)", "public NAME setOptimizeFiltersForHits(boolean v)",
        "public NAME setInplaceUpdateSupport(boolean v)"]),
    ("org.rocksdb.DBOptions", "public class NAME extends RocksObject", [
        "public NAME()", "public NAME setDbLogDir(String v)", "public NAME setInfoLogLevel(InfoLogLevel v)",
        "public NAME setWalRecoveryMode(WALRecoveryMode v)", "public NAME setManualWalFlush(boolean v)",
        "public NAME setDbWriteBufferSize(long v)",
        "public NAME setCreateIfMissing(boolean v)", "public NAME setBytesPerSync(long v)",
        "public NAME setCreateMissingColumnFamilies(boolean v)", "public NAME setMaxOpenFiles(int v)",
        "public NAME setMaxLogFileSize(long v)", "public NAME setKeepLogFileNum(long v)",
        "public NAME setMaxManifestFileSize(long v)", "public NAME setAllowConcurrentMemtableWrite(boolean v)",
        "public NAME setStatistics(Statistics v)", "public NAME setAtomicFlush(boolean v)",
        "public NAME setCompactionReadaheadSize(long v)", "public NAME setMaxBackgroundJobs(int v)",
        "public NAME setMaxSubcompactions(int v)", "public NAME setParanoidChecks(boolean v)",
        "public NAME setDelayedWriteRate(long v)", "public NAME setRateLimiter(RateLimiter v)",
        "public NAME setUseDirectIoForFlushAndCompaction(boolean v)", "public NAME setUseDirectReads(boolean v)",
        "public NAME setStatsDumpPeriodSec(int v)", "public NAME setWalBytesPerSync(long v)",
        "public Statistics statistics()"]),
    ("org.rocksdb.Statistics", "public class NAME extends RocksObject", [
        "public NAME()", "public void setStatsLevel(StatsLevel v)", "public long getTickerCount(TickerType t)"]),
    ("org.rocksdb.BlockBasedTableConfig", "public class NAME", [
        "public NAME()", "public NAME setFormatVersion(int v)", "public NAME setIndexType(IndexType v)",
        "public NAME setDataBlockIndexType(DataBlockIndexType v)",
        "public NAME setDataBlockHashTableUtilRatio(double v)",
        "public NAME setBlockSize(long v)", "public NAME setMetadataBlockSize(long v)",
        "public NAME setFilterPolicy(BloomFilter v)", "public NAME setCacheIndexAndFilterBlocks(boolean v)",
        "public NAME setCacheIndexAndFilterBlocksWithHighPriority(boolean v)",
        "public NAME setPinL0FilterAndIndexBlocksInCache(boolean v)",
        "public NAME setPinTopLevelIndexAndFilter(boolean v)",
        "public NAME setBlockCache(LRUCache v)", "public NAME setWholeKeyFiltering(boolean v)"]),
    ("org.rocksdb.BloomFilter", "public class NAME extends RocksObject", [
        "public NAME(double bitsPerKey, boolean useBlockBasedBuilder)"]),
    ("org.rocksdb.LRUCache", "public class NAME extends RocksObject", [
        "public NAME(long capacity, int numShardBits, boolean strictCapacityLimit)"]),
    ("org.rocksdb.RateLimiter", "public class NAME extends RocksObject", ["public NAME(long bytesPerSecond)"]),
    ("org.rocksdb.SkipListMemTableConfig", "public class NAME", ["public NAME()"]),
    ("org.rocksdb.StringAppendOperator", "public class NAME extends RocksObject", [
        "public NAME()"]),
    ("org.rocksdb.Env", "public abstract class NAME extends RocksObject", [
        "public Env setBackgroundThreads(int number, Priority priority)"]),
    ("org.rocksdb.AbstractCompactionFilter", "public abstract class NAME<T> extends RocksObject", [
        "public static class Context { public Context(boolean fullCompaction, boolean manualCompaction) "
        "{ throw new UnsupportedOperationException(ABSENT); } "
        "public boolean isFullCompaction() { throw new UnsupportedOperationException(ABSENT); } "
        "public boolean isManualCompaction() { throw new UnsupportedOperationException(ABSENT); } }"]),
    ("org.rocksdb.AbstractCompactionFilterFactory",
     "public abstract class NAME<T extends AbstractCompactionFilter<?>> extends RocksObject", [
        "public NAME()",
        "public abstract T createCompactionFilter(AbstractCompactionFilter.Context context);",
        "public abstract String name();"]),
    ("org.rocksdb.RemoveConsumeQueueCompactionFilter",  # (RocketMQ's fork of rocksdbjni)
     "public class NAME extends AbstractCompactionFilter<Object>", ["public NAME(long targetMinPhyOffset)"]),
    ("org.rocksdb.CompressionType", "public enum NAME", [
        "NO_COMPRESSION((byte) 0x0, null), SNAPPY_COMPRESSION((byte) 0x1, \"snappy\"), "
        "ZLIB_COMPRESSION((byte) 0x2, \"z\"), BZLIB2_COMPRESSION((byte) 0x3, \"bzip2\"), "
        "LZ4_COMPRESSION((byte) 0x4, \"lz4\"), LZ4HC_COMPRESSION((byte) 0x5, \"lz4hc\"), "
        "XPRESS_COMPRESSION((byte) 0x6, \"xpress\"), ZSTD_COMPRESSION((byte) 0x7, \"zstd\"), "
        "DISABLE_COMPRESSION_OPTION((byte) 0x7F, null);",
        "private final byte value;", "private final String libraryName;",
        "NAME(byte value, String libraryName) { this.value = value; this.libraryName = libraryName; }",
        "public String getLibraryName() { return libraryName; }",
        "public static CompressionType getCompressionType(String libraryName) { if (libraryName != null) { "
        "for (CompressionType t : values()) { if (libraryName.equals(t.libraryName)) { return t; } } } "
        "return NO_COMPRESSION; }"]),
    ("org.rocksdb.TickerType", "public enum NAME", [
        "BLOCK_CACHE_MISS, BLOCK_CACHE_HIT, BYTES_WRITTEN, BYTES_READ, NUMBER_KEYS_READ, WRITE_DONE_BY_SELF, "
        "WRITE_DONE_BY_OTHER, NUMBER_BLOCK_COMPRESSED, READ_AMP_TOTAL_READ_BYTES;"]),
    ("org.rocksdb.IndexType", "public enum NAME", ["kBinarySearch, kHashSearch, kTwoLevelIndexSearch;"]),
    ("org.rocksdb.DataBlockIndexType", "public enum NAME", ["kDataBlockBinarySearch, kDataBlockBinaryAndHash;"]),
    ("org.rocksdb.CompactionStyle", "public enum NAME", ["LEVEL, UNIVERSAL, FIFO, NONE;"]),
    ("org.rocksdb.CompactionStopStyle", "public enum NAME", [
        "CompactionStopStyleSimilarSize, CompactionStopStyleTotalSize;"]),
    ("org.rocksdb.CompactionPriority", "public enum NAME", [
        "ByCompensatedSize, OldestLargestSeqFirst, OldestSmallestSeqFirst, MinOverlappingRatio, RoundRobin;"]),
    ("org.rocksdb.WALRecoveryMode", "public enum NAME", [
        "TolerateCorruptedTailRecords, AbsoluteConsistency, PointInTimeRecovery, SkipAnyCorruptedRecords;"]),
    ("org.rocksdb.StatsLevel", "public enum NAME", [
        "EXCEPT_DETAILED_TIMERS, EXCEPT_TIME_FOR_MUTEX, EXCEPT_HISTOGRAM_OR_TIMERS, EXCEPT_TIMERS, ALL;"]),
    ("org.rocksdb.InfoLogLevel", "public enum NAME", [
        "DEBUG_LEVEL, INFO_LEVEL, WARN_LEVEL, ERROR_LEVEL, FATAL_LEVEL, HEADER_LEVEL, NUM_INFO_LOG_LEVELS;"]),
    ("org.rocksdb.Priority", "public enum NAME", ["BOTTOM, LOW, HIGH, TOTAL;"]),
    ("org.rocksdb.util.SizeUnit", "public final class NAME", [
        "public static final long KB = 1024L;", "public static final long MB = KB * KB;",
        "public static final long GB = KB * MB;", "public static final long TB = KB * GB;",
        "public static final long PB = KB * TB;"]),
]

_OTEL: list[tuple[str, str, list[str]]] = [
    ("io.opentelemetry.context.Context", "public interface NAME", []),
    ("io.opentelemetry.api.common.Attributes", "public interface NAME", [
        "static AttributesBuilder builder()"]),
    ("io.opentelemetry.api.common.AttributesBuilder", "public interface NAME", [
        "Attributes build();", "AttributesBuilder put(String key, String value);",
        "AttributesBuilder put(String key, boolean value);"]),
    ("io.opentelemetry.api.metrics.Meter", "public interface NAME", [
        "LongCounterBuilder counterBuilder(String name);", "DoubleGaugeBuilder gaugeBuilder(String name);",
        "DoubleHistogramBuilder histogramBuilder(String name);"]),
    ("io.opentelemetry.api.metrics.LongCounter", "public interface NAME", [
        "void add(long value);", "void add(long value, io.opentelemetry.api.common.Attributes attributes);",
        "void add(long value, io.opentelemetry.api.common.Attributes attributes, "
        "io.opentelemetry.context.Context c);"]),
    ("io.opentelemetry.api.metrics.LongUpDownCounter", "public interface NAME", [
        "void add(long value);", "void add(long value, io.opentelemetry.api.common.Attributes attributes);",
        "void add(long value, io.opentelemetry.api.common.Attributes attributes, "
        "io.opentelemetry.context.Context c);"]),
    ("io.opentelemetry.api.metrics.LongHistogram", "public interface NAME", [
        "void record(long value);", "void record(long value, io.opentelemetry.api.common.Attributes attributes);",
        "void record(long value, io.opentelemetry.api.common.Attributes attributes, "
        "io.opentelemetry.context.Context c);"]),
    ("io.opentelemetry.api.metrics.ObservableLongGauge", "public interface NAME extends AutoCloseable", [
        "default void close() { }"]),
    ("io.opentelemetry.api.metrics.ObservableDoubleGauge", "public interface NAME extends AutoCloseable", [
        "default void close() { }"]),
    ("io.opentelemetry.api.metrics.ObservableLongMeasurement", "public interface NAME", [
        "void record(long value);", "void record(long value, io.opentelemetry.api.common.Attributes attributes);"]),
    ("io.opentelemetry.api.metrics.ObservableDoubleMeasurement", "public interface NAME", [
        "void record(double value);",
        "void record(double value, io.opentelemetry.api.common.Attributes attributes);"]),
    ("io.opentelemetry.api.metrics.LongCounterBuilder", "public interface NAME", [
        "LongCounterBuilder setDescription(String d);", "LongCounter build();"]),
    ("io.opentelemetry.api.metrics.DoubleGaugeBuilder", "public interface NAME", [
        "DoubleGaugeBuilder setDescription(String d);", "DoubleGaugeBuilder setUnit(String u);",
        "LongGaugeBuilder ofLongs();",
        "ObservableDoubleGauge buildWithCallback(java.util.function.Consumer<ObservableDoubleMeasurement> c);"]),
    ("io.opentelemetry.api.metrics.LongGaugeBuilder", "public interface NAME", [
        "ObservableLongGauge buildWithCallback(java.util.function.Consumer<ObservableLongMeasurement> c);"]),
    ("io.opentelemetry.api.metrics.DoubleHistogramBuilder", "public interface NAME", [
        "DoubleHistogramBuilder setDescription(String d);", "DoubleHistogramBuilder setUnit(String u);",
        "LongHistogramBuilder ofLongs();"]),
    ("io.opentelemetry.api.metrics.LongHistogramBuilder", "public interface NAME", [
        "LongHistogram build();"]),
    ("io.opentelemetry.sdk.metrics.InstrumentType", "public enum NAME", [
        "COUNTER, UP_DOWN_COUNTER, HISTOGRAM, OBSERVABLE_COUNTER, OBSERVABLE_UP_DOWN_COUNTER, OBSERVABLE_GAUGE;"]),
    ("io.opentelemetry.sdk.metrics.InstrumentSelector", "public abstract class NAME", [
        "public static InstrumentSelectorBuilder builder()"]),
    ("io.opentelemetry.sdk.metrics.InstrumentSelectorBuilder", "public final class NAME", [
        "public NAME setType(InstrumentType t)", "public NAME setName(String n)", "public InstrumentSelector build()"]),
    ("io.opentelemetry.sdk.metrics.View", "public abstract class NAME", ["public static ViewBuilder builder()"]),
    ("io.opentelemetry.sdk.metrics.ViewBuilder", "public final class NAME", [
        "public NAME setAggregation(Aggregation a)"]),
    ("io.opentelemetry.sdk.metrics.Aggregation", "public interface NAME", [
        "static Aggregation explicitBucketHistogram(java.util.List<Double> bucketBoundaries)"]),
]


def _source(qualified: str, declaration: str, members: list[str], absent: str) -> str:
    package, simple = qualified.rsplit(".", 1)
    body = []
    for m in members:
        m = m.replace("NAME", simple)
        if m.endswith(";") or m.endswith("}"):
            body.append(f"    {m}")
        else:
            body.append(f"    {m} {{\n        throw new UnsupportedOperationException(ABSENT);\n    }}")
    constant = "String ABSENT = " + repr_java(absent) + ";"
    if " enum " in declaration or " interface " in declaration:
        holder = f"final class {simple}Absent {{\n    static final {constant}\n}}\n"
        text = "\n".join(body).replace("(ABSENT)", f"({simple}Absent.ABSENT)")
        out = f"{declaration.replace('NAME', simple)} {{\n{text}\n}}\n\n{holder}"
    else:
        out = f"{declaration.replace('NAME', simple)} {{\n    static final {constant}\n\n" + "\n\n".join(body) + "\n}\n"
    return (f"package {package};\n\n/** Stand-in (dledgerctl tests, tests/support/javastandins.py): the API surface "
            f"only; {absent.split(':')[0]}. */\n{out}")


def repr_java(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_sources(root: str) -> None:
    """Write every stand-in as ``root/<package path>/<Name>.java``."""
    for table, absent in ((_ROCKSDB, ROCKSDB_ABSENT), (_OTEL, OTEL_ABSENT)):
        for qualified, declaration, members in table:
            path = os.path.join(root, *qualified.split(".")) + ".java"
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(_source(qualified, declaration, members, absent))


def fingerprint() -> str:
    """What the written sources depend on (for the build cache's key)."""
    return repr((_ROCKSDB, _OTEL, ROCKSDB_ABSENT, OTEL_ABSENT))
