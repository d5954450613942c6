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
import org.apache.rocketmq.controller.ControllerManager;

/**
 * Stand-in for RocketMQ's controller metrics (OpenTelemetry's SDK and exporters are not here),
 * for the whole controller (ControllerManager, tests/support/javarocketmq5ctl.py): what
 * tests/support/java/rocketmq5-standins/ has for DLedgerController alone (RocketMQ's no-op
 * instruments, what the real class holds while metrics are disabled, its default) plus
 * ``getInstance``, which ControllerManager.initialize calls. It comes before that one on the
 * source path.
 */
public final class ControllerMetricsManager {
    private static volatile ControllerMetricsManager instance;

    public static LongUpDownCounter role = new NopLongUpDownCounter();
    public static LongCounter requestTotal = new NopLongCounter();
    public static LongCounter dLedgerOpTotal = new NopLongCounter();
    public static LongCounter electionTotal = new NopLongCounter();
    public static LongHistogram requestLatency = new NopLongHistogram();
    public static LongHistogram dLedgerOpLatency = new NopLongHistogram();

    private ControllerMetricsManager() {
    }

    public static ControllerMetricsManager getInstance(ControllerManager controllerManager) {
        if (instance == null) {
            synchronized (ControllerMetricsManager.class) {
                if (instance == null) {
                    instance = new ControllerMetricsManager();
                }
            }
        }
        return instance;
    }

    public static AttributesBuilder newAttributesBuilder() {
        return Attributes.builder();
    }

    public static void recordRole(MemberState.Role newRole, MemberState.Role oldRole) {
    }
}
