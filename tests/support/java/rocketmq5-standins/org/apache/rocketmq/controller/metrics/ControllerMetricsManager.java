package org.apache.rocketmq.controller.metrics;

import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.common.AttributesBuilder;
import io.opentelemetry.api.metrics.LongCounter;
import io.opentelemetry.api.metrics.LongHistogram;
import io.opentelemetry.api.metrics.LongUpDownCounter;
import io.openmessaging.storage.dledger.MemberState;
import org.apache.rocketmq.common.metrics.NopLongCounter;
import org.apache.rocketmq.common.metrics.NopLongHistogram;
import org.apache.rocketmq.common.metrics.NopLongUpDownCounter;

/**
 * Stand-in for RocketMQ's controller metrics (OpenTelemetry's SDK and exporters are not here):
 * the static instruments DLedgerController records into, all RocketMQ's own no-op ones, which
 * is what the real class holds while metrics are disabled (its default).
 */
public final class ControllerMetricsManager {
    public static LongUpDownCounter role = new NopLongUpDownCounter();
    public static LongCounter requestTotal = new NopLongCounter();
    public static LongCounter dLedgerOpTotal = new NopLongCounter();
    public static LongCounter electionTotal = new NopLongCounter();
    public static LongHistogram requestLatency = new NopLongHistogram();
    public static LongHistogram dLedgerOpLatency = new NopLongHistogram();

    private ControllerMetricsManager() {
    }

    public static AttributesBuilder newAttributesBuilder() {
        return Attributes.builder();
    }

    public static void recordRole(MemberState.Role newRole, MemberState.Role oldRole) {
    }
}
