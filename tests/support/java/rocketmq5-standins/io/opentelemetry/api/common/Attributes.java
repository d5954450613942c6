package io.opentelemetry.api.common;

/** Stand-in: metric labels, kept by nobody (the controller's metrics are not exported here). */
public interface Attributes {
    static AttributesBuilder builder() {
        return new AttributesBuilder() {
        };
    }
}
