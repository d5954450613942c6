package io.opentelemetry.api.metrics;

/** Stand-in: named by RocketMQ's no-op gauge. */
public interface ObservableLongGauge extends AutoCloseable {
    @Override
    default void close() {
    }
}
