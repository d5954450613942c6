import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.impl.ClientRemotingProcessor;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.consumer.PullResultExt;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.PullSysFlag;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;

/**
 * dledgerctl tests (tests/support/javarocketmq5broker.py): every message of the queues named,
 * pulled from a running broker through RocketMQ's own client (MQClientAPIImpl.pullMessage, the
 * PULL_MESSAGE request a consumer sends), from queue offset 0 until the broker answers
 * NO_NEW_MSG. Usage: QueuePuller BROKER_ADDR GROUP TOPIC/QUEUE_ID... One JSON line per message
 * (topic, queue_id, queue_offset, keys, tags, body in base64 as a consumer gets it, properties), then one
 * line per queue: {"queue": ..., "status": ..., "next": ..., "min": ..., "max": ...}.
 */
public final class QueuePuller {
    private QueuePuller() {
    }

    public static void main(String[] args) throws Exception {
        String addr = args[0];
        String group = args[1];
        MQClientAPIImpl api = new MQClientAPIImpl(new NettyClientConfig(), new ClientRemotingProcessor(null), null,
            new ClientConfig());
        api.start();
        try {
            for (int a = 2; a < args.length; a++) {
                String topic = args[a].substring(0, args[a].lastIndexOf('/'));
                int queueId = Integer.parseInt(args[a].substring(args[a].lastIndexOf('/') + 1));
                pullQueue(api, addr, group, topic, queueId);
            }
        } finally {
            api.shutdown();
        }
        System.out.flush();
        System.exit(0);
    }

    private static void pullQueue(MQClientAPIImpl api, String addr, String group, String topic, int queueId)
        throws Exception {
        long offset = 0;
        PullResult result;
        while (true) {
            PullMessageRequestHeader h = new PullMessageRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(topic);
            h.setQueueId(queueId);
            h.setQueueOffset(offset);
            h.setMaxMsgNums(32);
            h.setSysFlag(PullSysFlag.buildSysFlag(false, false, true, false));
            h.setCommitOffset(0L);
            h.setSuspendTimeoutMillis(0L);
            h.setSubscription("*");
            h.setSubVersion(0L);
            h.setExpressionType("TAG");
            result = api.pullMessage(addr, h, 10_000, CommunicationMode.SYNC, null);
            if (result.getPullStatus() != PullStatus.FOUND) {
                break;
            }
            ByteBuffer buf = ByteBuffer.wrap(((PullResultExt) result).getMessageBinary());
            while (buf.hasRemaining()) {
                // the body decompressed, as a consumer gets it (and dledgerctl's mq messages shows it)
                MessageExt m = MessageDecoder.decode(buf, true, true, false);
                print(m);
            }
            if (result.getNextBeginOffset() <= offset) {
                break;
            }
            offset = result.getNextBeginOffset();
        }
        System.out.println("{\"queue\":" + quote(topic + "/" + queueId) + ",\"status\":" + quote(
            result.getPullStatus().name()) + ",\"next\":" + result.getNextBeginOffset() + ",\"min\":"
            + result.getMinOffset() + ",\"max\":" + result.getMaxOffset() + "}");
    }

    private static void print(MessageExt m) {
        StringBuilder s = new StringBuilder();
        s.append("{\"topic\":").append(quote(m.getTopic())).append(",\"queue_id\":").append(m.getQueueId())
            .append(",\"queue_offset\":").append(m.getQueueOffset())
            .append(",\"keys\":").append(m.getKeys() == null ? "null" : quote(m.getKeys()))
            .append(",\"tags\":").append(m.getTags() == null ? "null" : quote(m.getTags()))
            .append(",\"body\":").append(quote(Base64.getEncoder().encodeToString(
                m.getBody() == null ? new byte[0] : m.getBody())))
            .append(",\"properties\":{");
        boolean first = true;
        for (Map.Entry<String, String> e : new TreeMap<>(m.getProperties()).entrySet()) {
            s.append(first ? "" : ",").append(quote(e.getKey())).append(':').append(quote(e.getValue()));
            first = false;
        }
        System.out.println(s.append("}}"));
    }

    private static String quote(String text) {
        StringBuilder s = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                s.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                s.append(String.format("\\u%04x", (int) c));
            } else {
                s.append(c);
            }
        }
        return s.append('"').toString();
    }
}
