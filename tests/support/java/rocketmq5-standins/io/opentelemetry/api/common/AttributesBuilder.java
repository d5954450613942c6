package io.opentelemetry.api.common;

/** Stand-in: puts are dropped; build gives an empty Attributes. */
public interface AttributesBuilder {
    default AttributesBuilder put(String key, String value) {
        return this;
    }

    default AttributesBuilder put(String key, long value) {
        return this;
    }

    default AttributesBuilder put(String key, boolean value) {
        return this;
    }

    default Attributes build() {
        return new Attributes() {
        };
    }
}
