package io.opentelemetry.api.metrics;

import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.context.Context;

/** Stand-in: the three methods RocketMQ's no-op instruments define. */
public interface LongCounter {
    void add(long value);

    void add(long value, Attributes attributes);

    void add(long value, Attributes attributes, Context context);
}
