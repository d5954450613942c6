package org.apache.rocketmq.remoting.metrics;

import io.netty.util.concurrent.Future;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.common.AttributesBuilder;
import io.opentelemetry.api.metrics.LongHistogram;
import java.util.function.Supplier;
import org.apache.rocketmq.common.metrics.NopLongHistogram;

/**
 * Stand-in for RocketMQ's remoting metrics (OpenTelemetry's SDK is not here): what the netty
 * remoting classes record into, RocketMQ's no-op histogram, as while metrics are disabled.
 */
public final class RemotingMetricsManager {
    public static LongHistogram rpcLatency = new NopLongHistogram();
    public static Supplier<AttributesBuilder> attributesBuilderSupplier;

    private RemotingMetricsManager() {
    }

    public static AttributesBuilder newAttributesBuilder() {
        return Attributes.builder();
    }

    public static String getWriteAndFlushResult(Future<?> future) {
        if (future.isCancelled()) {
            return RemotingMetricsConstant.RESULT_CANCELED;
        }
        return future.isSuccess() ? RemotingMetricsConstant.RESULT_SUCCESS
            : RemotingMetricsConstant.RESULT_WRITE_CHANNEL_FAILED;
    }
}
