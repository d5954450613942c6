/*
 * Test harness of dledgerctl (not part of RocketMQ): what a broker makes of its
 * config/consumerOffset.json, by RocketMQ's own ConfigManager.load (the file; its .bak when the
 * file is empty or decode throws an Exception) with decode as ConsumerOffsetManager.decode does
 * it: RemotingSerializable.fromJson (fastjson) into a class holding ConsumerOffsetManager's
 * offsetTable (ConcurrentMap<String, ConcurrentMap<Integer, Long>>), whose table is then kept.
 * ConsumerOffsetManager itself is in RocketMQ's broker module, which this harness does not build;
 * its decode is these four lines. Compiled from RocketMQ's sources by tests/support/javarocketmq.py.
 *
 * Usage: RocketMQOffsetsRead <consumerOffset.json>...
 *
 * Prints one JSON line per file: path, loaded (what load() returned), offsetTable (null when
 * nothing was loaded), and thrown (the class of what load() let through: an Error such as
 * StackOverflowError, which its catch of Exception does not take), else null.
 */

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializerFeature;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.common.ConfigManager;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;

public class RocketMQOffsetsRead extends ConfigManager {
    private final String path;
    private ConcurrentMap<String, ConcurrentMap<Integer, Long>> offsetTable;

    RocketMQOffsetsRead(String path) {
        this.path = path;
    }

    /** The shape ConsumerOffsetManager has for fastjson: a bean with offsetTable. */
    public static class Offsets extends RemotingSerializable {
        private ConcurrentMap<String, ConcurrentMap<Integer, Long>> offsetTable =
            new ConcurrentHashMap<String, ConcurrentMap<Integer, Long>>(512);

        public ConcurrentMap<String, ConcurrentMap<Integer, Long>> getOffsetTable() {
            return offsetTable;
        }

        public void setOffsetTable(ConcurrentMap<String, ConcurrentMap<Integer, Long>> offsetTable) {
            this.offsetTable = offsetTable;
        }
    }

    @Override
    public String encode() {
        return encode(false);
    }

    @Override
    public String configFilePath() {
        return path;
    }

    @Override
    public void decode(String jsonString) {  // ConsumerOffsetManager.decode
        if (jsonString != null) {
            Offsets obj = RemotingSerializable.fromJson(jsonString, Offsets.class);
            if (obj != null) {
                this.offsetTable = obj.offsetTable;
            }
        }
    }

    @Override
    public String encode(boolean prettyFormat) {
        return "";
    }

    public static void main(String[] args) {
        for (String path : args) {
            RocketMQOffsetsRead r = new RocketMQOffsetsRead(path);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("path", path);
            try {
                out.put("loaded", r.load());
                out.put("thrown", null);
            } catch (Throwable t) {
                out.put("loaded", false);
                out.put("thrown", t.getClass().getSimpleName());
            }
            out.put("offsetTable", r.offsetTable);
            System.out.println(JSON.toJSONString(out, SerializerFeature.WriteMapNullValue,
                SerializerFeature.WriteNonStringKeyAsString));
        }
    }
}
