package org.apache.rocketmq.logging.org.slf4j;

/** Stand-in (dledgerctl tests) for RocketMQ's shaded slf4j (rocketmq-shaded-slf4j-api-bridge,
 * not in the mirror): slf4j's own Logger under the shaded name. */
public interface Logger extends org.slf4j.Logger {
}
