/*
 * Test harness of dledgerctl (not part of RocketMQ): what a broker makes of a configuration file,
 * by RocketMQ's own code as BrokerStartup reads "-c FILE": java.util.Properties.load of the
 * file's bytes, then MixAll.properties2Object onto a MessageStoreConfig (compiled from
 * RocketMQ's sources by tests/support/javarocketmq.py).
 *
 * Usage: RocketMQConfigRead <file>...
 *
 * Prints one JSON line per file: path, loaded (false when Properties.load refused it, with
 * error), the raw value of mappedFileSizeConsumeQueue as loaded (null when absent), and
 * cq_file_size: MessageStoreConfig.getMappedFileSizeConsumeQueue() afterwards.
 */

import com.alibaba.fastjson.JSON;
import java.io.BufferedInputStream;
import java.io.FileInputStream;
import java.io.InputStream;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.store.config.MessageStoreConfig;

public class RocketMQConfigRead {
    public static void main(String[] args) throws Exception {
        for (String path : args) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("path", path);
            Properties properties = new Properties();
            try (InputStream in = new BufferedInputStream(new FileInputStream(path))) {
                properties.load(in);
                out.put("loaded", true);
            } catch (Exception e) {
                out.put("loaded", false);
                out.put("error", e.toString());
                System.out.println(JSON.toJSONString(out));
                continue;
            }
            MessageStoreConfig config = new MessageStoreConfig();
            MixAll.properties2Object(properties, config);
            out.put("raw", properties.getProperty("mappedFileSizeConsumeQueue"));
            out.put("cq_file_size", config.getMappedFileSizeConsumeQueue());
            System.out.println(JSON.toJSONString(out));
        }
    }
}
