package io.opentelemetry.context;

/** Stand-in: only named by RocketMQ's no-op instruments. */
public interface Context {
}
