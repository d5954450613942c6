/*
 * Test harness of dledgerctl (not part of RocketMQ): writes messages through RocketMQ's own
 * message store (org.apache.rocketmq.store.DefaultMessageStore) in DLedger mode, compiled
 * from RocketMQ's sources by tests/support/javarocketmq.py, and prints what RocketMQ reported and
 * stored for each message, one JSON object per line on stdout (everything else goes to stderr).
 *
 * Usage: RocketMQStoreWriter <spec.json>
 *
 * The spec (written by tests/support/javarocketmq.py write_store):
 *   {"root": dir, "group": "broker-a", "selfId": "n0", "peers": "n0-127.0.0.1:PORT",
 *    "dataFileSize": bytes, "consumeQueueFileSize": bytes, "deadlineMillis": ms,
 *    "dledger": true|false (false: master-slave mode, the commit log in root/commitlog),
 *    "puts": [{"batch": false|true, "messages": [{"index", "topic", "queueId", "body" (base64),
 *              "tags", "keys", "properties", "flag", "bornHost", "storeHost", "sysFlag",
 *              "reconsumeTimes", "delayLevel", "bornTimestamp" (-1: now), "uniqKey",
 *              "waitStoreMsgOK"}, ...]}, ...]}
 *
 * What it does, in the order a broker would: configure the store (enableDLegerCommitLog,
 * dLegerGroup/Peers/SelfId, storePathRootDir, small mapped files), load() and start(); wait
 * until its DLedger member leads, then what RocketMQ's DLedgerRoleChangeHandler does before a
 * new leader takes writes (ledger end == committed index, nothing left to dispatch, then
 * recoverTopicQueueTable()). Each put builds the message as a producer does (Message with
 * tags, keys and WAIT; a UNIQ_KEY from MessageClientIDSetter; a batch through
 * MessageBatch.generateFromList and its encode()), then hands it to the store as the broker
 * does (MessageExtBrokerInner with the property string and tags code; MessageExtBatch with the
 * encoded batch as its body). After the puts: wait until dispatchBehindBytes() is 0 (consume
 * queues and index written), read every message back with lookMessageByOffset, print, and
 * shut the store down. Every wait is bounded by the spec's deadline; on failure the exit
 * status is not 0.
 *
 * With "dledger": false the store runs in master-slave mode (enableDLegerCommitLog=false; the
 * dLeger settings unused, no leadership to wait for). A root written so and then opened with
 * "dledger": true is what a broker switching to DLedger mode with data leaves: DLedgerCommitLog
 * keeps the old commit log and starts the DLedger log at its divided offset. The "done" line
 * printed last gives the store's min and max commit-log offsets and, in DLedger mode, the
 * divided offset (DLedgerCommitLog.getDividedCommitlogOffset, -1 when there is no old log).
 */

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import com.alibaba.fastjson.serializer.SerializerFeature;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import io.openmessaging.storage.dledger.DLedgerServer;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageBatch;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.store.AppendMessageResult;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.dledger.DLedgerCommitLog;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

public class RocketMQStoreWriter {

    private static PrintStream out;
    private static long deadline;

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, "UTF-8");
        System.setOut(System.err); // anything RocketMQ prints stays off the JSON
        int status = 1;
        try {
            status = run(args);
        } catch (Throwable t) {
            t.printStackTrace();
        } finally {
            out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(status); // no lingering non-daemon thread keeps the JVM up
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException(what);
        }
    }

    /** Waits until cond holds, at most until the deadline. */
    static void await(String what, java.util.function.BooleanSupplier cond) throws InterruptedException {
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("timed out waiting for " + what);
            }
            Thread.sleep(20);
        }
    }

    static int run(String[] args) throws Exception {
        check(args.length == 1, "usage: RocketMQStoreWriter <spec.json>");
        JSONObject spec = JSON.parseObject(new String(Files.readAllBytes(Paths.get(args[0])), StandardCharsets.UTF_8));
        deadline = System.currentTimeMillis() + spec.getLongValue("deadlineMillis");

        MessageStoreConfig config = new MessageStoreConfig();
        config.setStorePathRootDir(spec.getString("root"));
        config.setStorePathCommitLog(Paths.get(spec.getString("root"), "commitlog").toString());
        boolean dledger = !spec.containsKey("dledger") || spec.getBooleanValue("dledger");
        config.setEnableDLegerCommitLog(dledger);
        if (!dledger) {
            config.setHaListenPort(RocketMQStoreReader.freePort()); // a master's HAService listens (10912 may be another run's)
        }
        config.setdLegerGroup(spec.getString("group"));
        config.setdLegerPeers(spec.getString("peers"));
        config.setdLegerSelfId(spec.getString("selfId"));
        config.setMappedFileSizeCommitLog(spec.getIntValue("dataFileSize"));
        config.setMappedFileSizeConsumeQueue(spec.getIntValue("consumeQueueFileSize"));
        config.setMaxHashSlotNum(1000);
        config.setMaxIndexNum(4000);
        config.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);

        DefaultMessageStore store = new DefaultMessageStore(config, new BrokerStatsManager("dledgerctl-test", true),
            null, new BrokerConfig());
        check(store.load(), "DefaultMessageStore.load() failed");
        store.start();
        boolean clean = false;
        try {
            if (dledger) {
                DLedgerServer server = ((DLedgerCommitLog) store.getCommitLog()).getdLedgerServer();
                await("the DLedger member to lead", () -> server.getMemberState().isLeader());
                // what DLedgerRoleChangeHandler does before a new leader takes writes
                await("committed index to reach the ledger end",
                    () -> server.getdLedgerStore().getLedgerEndIndex() == server.getdLedgerStore().getCommittedIndex());
                await("dispatch to catch up", () -> store.dispatchBehindBytes() == 0);
                store.recoverTopicQueueTable();
            } else {
                await("dispatch to catch up", () -> store.dispatchBehindBytes() == 0);
            }

            List<Map<String, Object>> records = new ArrayList<>();
            for (Object p : spec.getJSONArray("puts")) {
                JSONObject put = (JSONObject) p;
                JSONArray msgs = put.getJSONArray("messages");
                if (put.getBooleanValue("batch")) {
                    records.addAll(putBatch(store, msgs));
                } else {
                    records.add(putOne(store, msgs.getJSONObject(0)));
                }
            }
            await("dispatch of the puts (consume queues, index)", () -> store.dispatchBehindBytes() == 0);
            for (Map<String, Object> rec : records) {
                readBack(store, rec);
                out.println(JSON.toJSONString(rec, SerializerFeature.WriteMapNullValue,
                    SerializerFeature.DisableCircularReferenceDetect));
            }
            Map<String, Object> done = new LinkedHashMap<>();
            done.put("kind", "done");
            done.put("min_phy_offset", store.getMinPhyOffset());
            done.put("max_phy_offset", store.getMaxPhyOffset());
            done.put("divided", dledger ? ((DLedgerCommitLog) store.getCommitLog()).getDividedCommitlogOffset() : -1L);
            out.println(JSON.toJSONString(done));
            out.flush();
            clean = true;
        } finally {
            store.shutdown();
        }
        return clean ? 0 : 1;
    }

    static InetSocketAddress address(String text) throws Exception {
        int colon = text.lastIndexOf(':');
        String host = text.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        return new InetSocketAddress(InetAddress.getByName(host), Integer.parseInt(text.substring(colon + 1)));
    }

    static String address(SocketAddress sa) {
        if (!(sa instanceof InetSocketAddress)) {
            return sa == null ? null : sa.toString();
        }
        InetSocketAddress isa = (InetSocketAddress) sa;
        InetAddress a = isa.getAddress();
        String ip = a.getHostAddress();
        return (a instanceof Inet6Address ? "[" + ip + "]" : ip) + ":" + isa.getPort();
    }

    /** A message as a producer makes it. */
    static Message producerMessage(JSONObject m) {
        byte[] body = Base64.getDecoder().decode(m.getString("body"));
        Message msg = new Message(m.getString("topic"), m.getString("tags"), m.getString("keys"), m.getIntValue("flag"),
            body, m.getBooleanValue("waitStoreMsgOK"));
        JSONObject props = m.getJSONObject("properties");
        if (props != null) {
            for (Map.Entry<String, Object> e : props.entrySet()) {
                MessageAccessor.putProperty(msg, e.getKey(), String.valueOf(e.getValue()));
            }
        }
        if (m.getIntValue("delayLevel") > 0) {
            msg.setDelayTimeLevel(m.getIntValue("delayLevel"));
        }
        if (m.getBooleanValue("uniqKey")) {
            MessageClientIDSetter.setUniqID(msg); // leaves one given in the properties
        }
        return msg;
    }

    /** The broker's part, common to single messages and batches. */
    static void brokerFields(MessageExt inner, JSONObject m) throws Exception {
        inner.setTopic(m.getString("topic"));
        inner.setQueueId(m.getIntValue("queueId"));
        long born = m.getLongValue("bornTimestamp");
        inner.setBornTimestamp(born < 0 ? System.currentTimeMillis() : born);
        inner.setBornHost(address(m.getString("bornHost")));
        inner.setStoreHost(address(m.getString("storeHost")));
        inner.setReconsumeTimes(m.getIntValue("reconsumeTimes"));
        inner.setSysFlag(m.getIntValue("sysFlag"));
        if (((InetSocketAddress) inner.getBornHost()).getAddress() instanceof Inet6Address) {
            inner.setBornHostV6Flag();
        }
        if (((InetSocketAddress) inner.getStoreHost()).getAddress() instanceof Inet6Address) {
            inner.setStoreHostAddressV6Flag();
        }
    }

    static Map<String, Object> record(JSONObject m, PutMessageResult result, boolean batch) {
        Map<String, Object> rec = new LinkedHashMap<>();
        rec.put("index", m.getIntValue("index"));
        rec.put("status", result == null ? "NULL" : String.valueOf(result.getPutMessageStatus()));
        rec.put("batch", batch);
        return rec;
    }

    static Map<String, Object> putOne(DefaultMessageStore store, JSONObject m) throws Exception {
        Message msg = producerMessage(m);
        MessageExtBrokerInner inner = new MessageExtBrokerInner();
        brokerFields(inner, m);
        inner.setBody(msg.getBody());
        inner.setFlag(msg.getFlag());
        MessageAccessor.setProperties(inner, msg.getProperties());
        inner.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));
        inner.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(inner.getTags()));
        PutMessageResult result = store.putMessage(inner);
        Map<String, Object> rec = record(m, result, false);
        AppendMessageResult a = result == null ? null : result.getAppendMessageResult();
        if (result != null && result.isOk() && a != null) {
            rec.put("msg_id", a.getMsgId());
            rec.put("queue_offset", a.getLogicsOffset());
            rec.put("phy_offset", a.getWroteOffset());
            rec.put("size", a.getWroteBytes());
        }
        return rec;
    }

    static List<Map<String, Object>> putBatch(DefaultMessageStore store, JSONArray msgs) throws Exception {
        List<Message> list = new ArrayList<>();
        for (int i = 0; i < msgs.size(); i++) {
            list.add(producerMessage(msgs.getJSONObject(i)));
        }
        JSONObject first = msgs.getJSONObject(0);
        List<Map<String, Object>> recs = new ArrayList<>();
        MessageBatch batch;
        try {
            batch = MessageBatch.generateFromList(list);
        } catch (UnsupportedOperationException e) { // what a producer's batch() refuses
            for (int i = 0; i < msgs.size(); i++) {
                Map<String, Object> rec = record(msgs.getJSONObject(i), null, true);
                rec.put("status", "REFUSED_BY_MESSAGE_BATCH");
                rec.put("error", e.getMessage());
                recs.add(rec);
            }
            return recs;
        }
        batch.setBody(batch.encode());

        MessageExtBatch ext = new MessageExtBatch();
        brokerFields(ext, first);
        ext.setBody(batch.getBody());
        ext.setFlag(batch.getFlag());
        MessageAccessor.setProperties(ext, batch.getProperties());
        PutMessageResult result = store.putMessages(ext);
        AppendMessageResult a = result == null ? null : result.getAppendMessageResult();
        String[] ids = a == null || a.getMsgId() == null ? new String[0] : a.getMsgId().split(",");
        for (int i = 0; i < msgs.size(); i++) {
            Map<String, Object> rec = record(msgs.getJSONObject(i), result, true);
            if (result != null && result.isOk() && a != null) {
                check(ids.length == msgs.size(), "batch of " + msgs.size() + " got " + ids.length + " message ids");
                rec.put("msg_id", ids[i]);
                rec.put("queue_offset", a.getLogicsOffset() + i);
                rec.put("phy_offset", MessageDecoder.decodeMessageId(ids[i]).getOffset());
                rec.put("size", null); // the result has the batch's total only: filled from the stored message
                rec.put("batch_wrote_offset", a.getWroteOffset());
                rec.put("batch_wrote_bytes", a.getWroteBytes());
                rec.put("batch_msg_num", a.getMsgNum());
            }
            recs.add(rec);
        }
        return recs;
    }

    static void readBack(DefaultMessageStore store, Map<String, Object> rec) {
        Object phy = rec.get("phy_offset");
        if (!(phy instanceof Long)) {
            return;
        }
        long offset = (Long) phy;
        MessageExt m = store.lookMessageByOffset(offset);
        if (m == null) {
            rec.put("status", rec.get("status") + "_BUT_NOT_READABLE");
            return;
        }
        if (rec.get("size") == null) {
            rec.put("size", m.getStoreSize());
        } else if (((Integer) rec.get("size")) != m.getStoreSize()) {
            rec.put("stored_size", m.getStoreSize());
        }
        if (m.getCommitLogOffset() != offset) {
            rec.put("stored_phy_offset", m.getCommitLogOffset());
        }
        if (m.getQueueOffset() != (Long) rec.get("queue_offset")) {
            rec.put("stored_queue_offset", m.getQueueOffset());
        }
        rec.put("store_timestamp", m.getStoreTimestamp());
        rec.put("born_timestamp", m.getBornTimestamp());
        rec.put("topic", m.getTopic());
        rec.put("queue_id", m.getQueueId());
        rec.put("flag", m.getFlag());
        rec.put("sys_flag", m.getSysFlag());
        rec.put("tags", m.getTags());
        rec.put("keys", m.getKeys());
        rec.put("properties", m.getProperties() == null ? null : new TreeMap<>(m.getProperties()));
        rec.put("body", m.getBody() == null ? null : Base64.getEncoder().encodeToString(m.getBody()));
        rec.put("body_crc", m.getBodyCRC());
        rec.put("reconsume_times", m.getReconsumeTimes());
        rec.put("born_host", address(m.getBornHost()));
        rec.put("store_host", address(m.getStoreHost()));
        rec.put("prepared_transaction_offset", m.getPreparedTransactionOffset());
        rec.put("cq_phy_offset", store.getCommitLogOffsetInQueue(m.getTopic(), m.getQueueId(), m.getQueueOffset()));
    }
}
