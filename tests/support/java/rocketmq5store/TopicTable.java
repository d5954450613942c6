/*
 * Test harness of dledgerctl (not part of RocketMQ): the broker's topic config table that RocketMQ
 * 5's DefaultMessageStore takes in its constructor (the store reads a topic's attributes from it,
 * e.g. queue.type=BatchCQ), from the system property dledgerctl.topicAttributes:
 * "TOPIC=key:value,key:value;TOPIC2=..." (empty or absent: no topic configured, as a broker
 * without topics.json).
 */

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

import org.apache.rocketmq.common.TopicConfig;

public final class TopicTable {
    private TopicTable() {
    }

    public static ConcurrentMap<String, TopicConfig> fromProperty() {
        ConcurrentMap<String, TopicConfig> table = new ConcurrentHashMap<>();
        String spec = System.getProperty("dledgerctl.topicAttributes", "");
        for (String topic : spec.split(";")) {
            if (topic.isEmpty()) {
                continue;
            }
            int eq = topic.indexOf('=');
            TopicConfig config = new TopicConfig(topic.substring(0, eq), 8, 8);
            Map<String, String> attributes = new HashMap<>();
            for (String kv : topic.substring(eq + 1).split(",")) {
                int colon = kv.indexOf(':');
                attributes.put(kv.substring(0, colon), kv.substring(colon + 1));
            }
            config.setAttributes(attributes);
            table.put(config.getTopicName(), config);
        }
        return table;
    }
}
