package org.apache.rocketmq.logging.org.slf4j;

/** Stand-in (dledgerctl tests): see Logger; slf4j's own MDC under the shaded name (RocketMQ's
 * AbstractBrokerRunnable sets it for a broker in a broker container). */
public final class MDC {
    private MDC() {
    }

    public static void put(String key, String value) {
        org.slf4j.MDC.put(key, value);
    }

    public static String get(String key) {
        return org.slf4j.MDC.get(key);
    }

    public static void remove(String key) {
        org.slf4j.MDC.remove(key);
    }

    public static void clear() {
        org.slf4j.MDC.clear();
    }
}
