package org.apache.rocketmq.tieredstore.core;

import com.github.benmanes.caffeine.cache.Cache;
import java.util.concurrent.CompletableFuture;
import org.apache.rocketmq.common.BoundaryType;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.MessageFilter;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.tieredstore.MessageStoreConfig;
import org.apache.rocketmq.tieredstore.TieredMessageStore;
import org.apache.rocketmq.tieredstore.common.SelectBufferResult;
import org.apache.rocketmq.tieredstore.file.FlatFileStore;
import org.apache.rocketmq.tieredstore.index.IndexService;

/**
 * Stand-in (dledgerctl tests, tests/support/javarocketmq5broker.py) for the tiered store's fetcher:
 * rocketmq-all-5.3.3's builds a Caffeine cache with {@code Caffeine.scheduler(Scheduler)}, which
 * Debian's caffeine (2.6.2) does not have. Only TieredMessageStore makes one, and a broker makes a
 * TieredMessageStore only when it is configured as a store plugin (messageStorePlugIn), which no
 * test does: the broker names the class in instanceof checks and never loads the fetcher. Every
 * constructor throws, naming this stand-in.
 */
public class MessageStoreFetcherImpl implements MessageStoreFetcher {
    static final String ABSENT = "the tiered store's MessageStoreFetcherImpl needs caffeine >= 2.8 "
        + "(Caffeine.scheduler), not on this class path: a dledgerctl test stand-in";

    public MessageStoreFetcherImpl(TieredMessageStore messageStore) {
        throw new UnsupportedOperationException(ABSENT);
    }

    public MessageStoreFetcherImpl(TieredMessageStore messageStore, MessageStoreConfig storeConfig,
        FlatFileStore flatFileStore, IndexService indexService) {
        throw new UnsupportedOperationException(ABSENT);
    }

    public Cache<String, SelectBufferResult> getFetcherCache() {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<Long> getEarliestMessageTimeAsync(String topic, int queueId) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<Long> getMessageStoreTimeStampAsync(String topic, int queueId, long offset) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public long getOffsetInQueueByTime(String topic, int queueId, long timestamp, BoundaryType type) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<GetMessageResult> getMessageAsync(String group, String topic, int queueId, long offset,
        int maxCount, MessageFilter messageFilter) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<QueryMessageResult> queryMessageAsync(String topic, String key, int maxCount, long begin,
        long end) {
        throw new UnsupportedOperationException(ABSENT);
    }
}
