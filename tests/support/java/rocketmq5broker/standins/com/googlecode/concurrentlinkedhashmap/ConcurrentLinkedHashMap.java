package com.googlecode.concurrentlinkedhashmap;

import java.util.AbstractMap;
import java.util.Collections;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentMap;

/**
 * Stand-in (dledgerctl tests, tests/support/javarocketmq5broker.py): concurrentlinkedhashmap-lru is
 * neither in the mirrors nor in Debian. RocketMQ 5.3.3's broker builds two of these in
 * PopLongPollingService's constructor (every broker does) and fills them only when a client
 * long-polls with POP (PopMessageProcessor, NotificationProcessor): a map that stays empty.
 * Reads answer as an empty map does, which is what the broker's own map answers until a POP
 * request comes; every write throws, naming this stand-in, so a test that reached POP long
 * polling would fail loudly instead of running on a map that is not the real one.
 */
public final class ConcurrentLinkedHashMap<K, V> extends AbstractMap<K, V> implements ConcurrentMap<K, V> {
    static final String ABSENT = "concurrentlinkedhashmap-lru is not on this class path: a dledgerctl test "
        + "stand-in (POP long polling is not built here)";

    private ConcurrentLinkedHashMap() {
    }

    @Override
    public Set<Map.Entry<K, V>> entrySet() {
        return Collections.emptySet();
    }

    @Override
    public V get(Object key) {
        return null;
    }

    @Override
    public V put(K key, V value) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public V putIfAbsent(K key, V value) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public boolean remove(Object key, Object value) {
        return false;
    }

    @Override
    public V remove(Object key) {
        return null;
    }

    @Override
    public boolean replace(K key, V oldValue, V newValue) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public V replace(K key, V value) {
        throw new UnsupportedOperationException(ABSENT);
    }

    /** What PopLongPollingService calls: capacity and build. */
    public static final class Builder<K, V> {
        public Builder<K, V> maximumWeightedCapacity(long capacity) {
            return this;
        }

        public Builder<K, V> initialCapacity(int initialCapacity) {
            return this;
        }

        public Builder<K, V> concurrencyLevel(int concurrencyLevel) {
            return this;
        }

        public ConcurrentLinkedHashMap<K, V> build() {
            return new ConcurrentLinkedHashMap<>();
        }
    }
}
