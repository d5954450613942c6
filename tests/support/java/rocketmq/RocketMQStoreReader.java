/*
 * Test harness of dledgerctl (not part of RocketMQ): opens a broker store root with RocketMQ's
 * own message store (org.apache.rocketmq.store.DefaultMessageStore) in MASTER-SLAVE mode
 * (enableDLegerCommitLog=false), as a broker does at start (load(), which recovers the commit
 * log and the consume queues, then start()), and reads every message through getMessage on
 * every consume queue, from the queue's min offset to its max, as a consumer pulls. Each
 * message read is printed as one JSON object per line on stdout (everything else on stderr),
 * with what lookMessageByOffset finds at its commit-log offset; one "queue" line per queue
 * (min, max) and a last "done" line (the commit log's min and max offset).
 *
 * Usage: RocketMQStoreReader <root> <mappedFileSizeCommitLog> <mappedFileSizeConsumeQueue> <deadlineMillis>
 *        [<maxHashSlotNum> <maxIndexNum>]   (the index files' shape; 1000 and 4000 when not given)
 *        [put:<topic>:<queueId> ...] [dledger:<group>|<selfId>|<peers>]
 *
 * With dledger:... the store is opened in DLEDGER mode instead (enableDLegerCommitLog=true,
 * those dLeger settings; mappedFileSizeCommitLog is then DLedger's data file size too), and
 * before reading it waits, as a broker's DLedgerRoleChangeHandler does, until its member leads,
 * the ledger end is committed and nothing is left to dispatch. The "done" line then also gives
 * "divided" (DLedgerCommitLog.getDividedCommitlogOffset).
 *
 * Each put:<topic>:<queueId> (after the reading): putMessage of one new message to that queue,
 * as the broker stores one after the move, then a bounded wait (until the deadline, at most
 * 20 s) for the store's dispatch to give the queue a unit at the offset the put was given,
 * and getMessage at that offset: one "put" line {"kind": "put", "topic", "queue_id", "status"
 * (the put's), "queue_offset" (the put's logics offset), "phy_offset" (the put's wrote offset),
 * "max_before", "max_after" (getMaxOffsetInQueue before the put and after the wait),
 * "dispatched" (the queue's max passed the put's offset in time), "pulled" (getMessage's status
 * at that offset), "pulled_body" (base64, or null), "pulled_queue_offset",
 * "pulled_phy_offset"}.
 *
 * Message lines: {"kind": "message", "topic", "queue_id", "queue_offset" (the offset it was
 * pulled at), "stored_queue_offset" (the message's own QUEUEOFFSET), "phy_offset"
 * (commitLogOffset), "size", "msg_id", "body" (base64), "tags", "keys", "properties",
 * "born_timestamp", "store_timestamp", "flag", "sys_flag", "body_crc", "look_ok" (lookMessageByOffset
 * at phy_offset gives the same topic, queue, queue offset and body), "index" (for the UNIQ_KEY and
 * each of KEYS split at spaces: the commit-log offsets queryMessage(topic, key, 64, 0, Long.MAX_VALUE)
 * finds, through the store's index/ files)}.
 */

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializerFeature;

import java.io.File;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import io.openmessaging.storage.dledger.DLedgerServer;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.GetMessageStatus;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.dledger.DLedgerCommitLog;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

public class RocketMQStoreReader {

    private static PrintStream out;

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, "UTF-8");
        System.setOut(System.err);
        int status = 1;
        try {
            status = run(args);
        } catch (Throwable t) {
            t.printStackTrace();
        } finally {
            out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(status);
        }
    }

    static void print(Map<String, Object> rec) {
        out.println(JSON.toJSONString(rec, SerializerFeature.WriteMapNullValue,
            SerializerFeature.DisableCircularReferenceDetect));
    }

    static int run(String[] all) throws Exception {
        List<String> puts = new ArrayList<>();
        List<String> positional = new ArrayList<>();
        String[] dledger = null;
        for (String a : all) {
            if (a.startsWith("dledger:")) {
                dledger = a.substring(8).split("\\|", 3);
                continue;
            }
            (a.startsWith("put:") ? puts : positional).add(a);
        }
        String[] args = positional.toArray(new String[0]);
        if (args.length != 4 && args.length != 6) {
            throw new IllegalArgumentException("usage: RocketMQStoreReader <root> <commitLogFileSize> <cqFileSize> <deadlineMillis>");
        }
        String root = args[0];
        long deadline = System.currentTimeMillis() + Long.parseLong(args[3]);
        MessageStoreConfig config = new MessageStoreConfig();
        config.setStorePathRootDir(root);
        config.setStorePathCommitLog(new File(root, "commitlog").getPath());
        config.setEnableDLegerCommitLog(dledger != null);
        if (dledger == null) {
            config.setHaListenPort(freePort()); // a master's HAService listens (10912 may be another run's)
        } else {
            config.setdLegerGroup(dledger[0]);
            config.setdLegerSelfId(dledger[1]);
            config.setdLegerPeers(dledger[2]);
        }
        config.setMappedFileSizeCommitLog(Integer.parseInt(args[1]));
        config.setMappedFileSizeConsumeQueue(Integer.parseInt(args[2]));
        config.setMaxHashSlotNum(args.length == 6 ? Integer.parseInt(args[4]) : 1000);
        config.setMaxIndexNum(args.length == 6 ? Integer.parseInt(args[5]) : 4000);
        config.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);

        DefaultMessageStore store = new DefaultMessageStore(config, new BrokerStatsManager("dledgerctl-test", true),
            null, new BrokerConfig());
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed");
        }
        store.start();
        try {
            if (dledger != null) {
                DLedgerServer server = ((DLedgerCommitLog) store.getCommitLog()).getdLedgerServer();
                waitFor(deadline, "the DLedger member to lead", () -> server.getMemberState().isLeader());
                waitFor(deadline, "committed index to reach the ledger end",
                    () -> server.getdLedgerStore().getLedgerEndIndex() == server.getdLedgerStore().getCommittedIndex());
                waitFor(deadline, "dispatch to catch up", () -> store.dispatchBehindBytes() == 0);
                store.recoverTopicQueueTable();
            }
            List<String> topics = new ArrayList<>(store.getConsumeQueueTable().keySet());
            java.util.Collections.sort(topics);
            for (String topic : topics) {
                List<Integer> ids = new ArrayList<>(store.getConsumeQueueTable().get(topic).keySet());
                java.util.Collections.sort(ids);
                for (int queueId : ids) {
                    long min = store.getMinOffsetInQueue(topic, queueId);
                    long max = store.getMaxOffsetInQueue(topic, queueId);
                    Map<String, Object> q = new LinkedHashMap<>();
                    q.put("kind", "queue");
                    q.put("topic", topic);
                    q.put("queue_id", queueId);
                    q.put("min", min);
                    q.put("max", max);
                    print(q);
                    long offset = min;
                    while (offset < max) {
                        if (System.currentTimeMillis() > deadline) {
                            throw new IllegalStateException("deadline passed reading " + topic + "/" + queueId);
                        }
                        GetMessageResult r = store.getMessage("dledgerctl-test", topic, queueId, offset, 32, null);
                        if (r == null || r.getStatus() != GetMessageStatus.FOUND) {
                            Map<String, Object> e = new LinkedHashMap<>();
                            e.put("kind", "miss");
                            e.put("topic", topic);
                            e.put("queue_id", queueId);
                            e.put("queue_offset", offset);
                            e.put("status", r == null ? "NULL" : String.valueOf(r.getStatus()));
                            print(e);
                            if (r == null || r.getNextBeginOffset() <= offset) {
                                break;
                            }
                            offset = r.getNextBeginOffset();
                            continue;
                        }
                        long at = offset;
                        try {
                            for (ByteBuffer buf : r.getMessageBufferList()) {
                                int start = buf.position();
                                MessageExt m = MessageDecoder.decode(buf, true, false);
                                if (m == null) {
                                    Map<String, Object> e = new LinkedHashMap<>();
                                    e.put("kind", "undecodable");
                                    e.put("topic", topic);
                                    e.put("queue_id", queueId);
                                    e.put("queue_offset", at);
                                    e.put("bytes", buf.limit() - start);
                                    e.put("phy_offset", store.getCommitLogOffsetInQueue(topic, queueId, at));
                                    print(e);
                                } else {
                                    print(record(store, m, topic, queueId, at));
                                }
                                at++;
                            }
                        } finally {
                            r.release();
                        }
                        offset = r.getNextBeginOffset();
                    }
                }
            }
            int n = 0;
            for (String p : puts) {
                int colon = p.lastIndexOf(':');
                put(store, p.substring(4, colon), Integer.parseInt(p.substring(colon + 1)), n++, deadline);
            }
            Map<String, Object> done = new LinkedHashMap<>();
            done.put("kind", "done");
            done.put("min_phy_offset", store.getMinPhyOffset());
            done.put("max_phy_offset", store.getMaxPhyOffset());
            done.put("divided", dledger != null ? ((DLedgerCommitLog) store.getCommitLog()).getDividedCommitlogOffset()
                : -1L);
            print(done);
        } finally {
            store.shutdown();
        }
        return 0;
    }

    static int freePort() throws java.io.IOException {
        String given = System.getProperty("dledgerctl.haPort"); // (the tests hand out ports: javarocketmq.py)
        if (given != null) {
            return Integer.parseInt(given);
        }
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    /** Waits until cond holds, at most until the deadline (polling the store's state). */
    static void waitFor(long deadline, String what, java.util.function.BooleanSupplier cond) throws InterruptedException {
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("timed out waiting for " + what);
            }
            Thread.sleep(20);
        }
    }

    static void put(DefaultMessageStore store, String topic, int queueId, int n, long deadline) throws Exception {
        long maxBefore = store.getMaxOffsetInQueue(topic, queueId);
        byte[] body = ("new " + n + " " + topic + "/" + queueId).getBytes(StandardCharsets.UTF_8);
        Message msg = new Message(topic, "new", "new-" + n, body);
        MessageExtBrokerInner inner = new MessageExtBrokerInner();
        inner.setTopic(topic);
        inner.setQueueId(queueId);
        inner.setBody(body);
        inner.setFlag(msg.getFlag());
        MessageAccessor.setProperties(inner, msg.getProperties());
        inner.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));
        inner.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(inner.getTags()));
        inner.setBornTimestamp(System.currentTimeMillis());
        inner.setBornHost(new InetSocketAddress("127.0.0.1", 50000));
        inner.setStoreHost(new InetSocketAddress("127.0.0.1", 10911));
        PutMessageResult result = store.putMessage(inner);
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("kind", "put");
        e.put("topic", topic);
        e.put("queue_id", queueId);
        e.put("status", result == null ? "NULL" : String.valueOf(result.getPutMessageStatus()));
        e.put("max_before", maxBefore);
        long qoff = -1;
        if (result != null && result.isOk() && result.getAppendMessageResult() != null) {
            qoff = result.getAppendMessageResult().getLogicsOffset();
            e.put("queue_offset", qoff);
            e.put("phy_offset", result.getAppendMessageResult().getWroteOffset());
        }
        // the store's dispatch (ReputMessageService) gives the queue its unit; wait for it, bounded
        long until = Math.min(deadline, System.currentTimeMillis() + 20000);
        boolean dispatched = false;
        while (qoff >= 0 && System.currentTimeMillis() < until) {
            if (store.getMaxOffsetInQueue(topic, queueId) > qoff) {
                dispatched = true;
                break;
            }
            Thread.sleep(20);  // (polling the store's state; the wait's bound is `until`)
        }
        e.put("max_after", store.getMaxOffsetInQueue(topic, queueId));
        e.put("dispatched", dispatched);
        e.put("pulled", null);
        e.put("pulled_body", null);
        e.put("pulled_queue_offset", null);
        e.put("pulled_phy_offset", null);
        if (qoff >= 0) {
            GetMessageResult r = store.getMessage("dledgerctl-test", topic, queueId, qoff, 1, null);
            e.put("pulled", r == null ? "NULL" : String.valueOf(r.getStatus()));
            if (r != null && r.getStatus() == GetMessageStatus.FOUND) {
                try {
                    MessageExt m = MessageDecoder.decode(r.getMessageBufferList().get(0), true, false);
                    if (m != null) {
                        e.put("pulled_body", Base64.getEncoder().encodeToString(m.getBody()));
                        e.put("pulled_queue_offset", m.getQueueOffset());
                        e.put("pulled_phy_offset", m.getCommitLogOffset());
                    }
                } finally {
                    r.release();
                }
            }
        }
        print(e);
    }

    static Map<String, Object> record(DefaultMessageStore store, MessageExt m, String topic, int queueId, long at) {
        Map<String, Object> rec = new LinkedHashMap<>();
        rec.put("kind", "message");
        rec.put("topic", topic);
        rec.put("queue_id", queueId);
        rec.put("queue_offset", at);
        rec.put("msg_topic", m.getTopic());
        rec.put("msg_queue_id", m.getQueueId());
        rec.put("stored_queue_offset", m.getQueueOffset());
        rec.put("phy_offset", m.getCommitLogOffset());
        rec.put("size", m.getStoreSize());
        rec.put("msg_id", m.getMsgId());
        rec.put("body", m.getBody() == null ? "" : Base64.getEncoder().encodeToString(m.getBody()));
        rec.put("tags", m.getTags());
        rec.put("keys", m.getKeys());
        rec.put("properties", m.getProperties() == null ? null : new TreeMap<>(m.getProperties()));
        rec.put("born_timestamp", m.getBornTimestamp());
        rec.put("store_timestamp", m.getStoreTimestamp());
        rec.put("flag", m.getFlag());
        rec.put("sys_flag", m.getSysFlag());
        rec.put("body_crc", m.getBodyCRC());
        Map<String, Object> index = new TreeMap<>();
        List<String> keys = new ArrayList<>();
        if (m.getProperty("UNIQ_KEY") != null) {
            keys.add(m.getProperty("UNIQ_KEY"));
        }
        if (m.getKeys() != null) {
            for (String k : m.getKeys().split(" ")) {
                if (k.length() > 0) {
                    keys.add(k);
                }
            }
        }
        for (String k : keys) {
            List<Long> found = new ArrayList<>();
            QueryMessageResult q = store.queryMessage(m.getTopic(), k, 64, 0, Long.MAX_VALUE);
            if (q != null) {
                try {
                    for (ByteBuffer b : q.getMessageBufferList()) {
                        MessageExt x = MessageDecoder.decode(b, false, false);
                        found.add(x == null ? -1L : x.getCommitLogOffset());
                    }
                } finally {
                    q.release();
                }
            }
            index.put(k, found);
        }
        rec.put("index", index);
        MessageExt look = store.lookMessageByOffset(m.getCommitLogOffset());
        rec.put("look_ok", look != null && look.getTopic().equals(m.getTopic()) && look.getQueueId() == m.getQueueId()
            && look.getQueueOffset() == m.getQueueOffset() && look.getCommitLogOffset() == m.getCommitLogOffset()
            && Arrays.equals(look.getBody() == null ? new byte[0] : look.getBody(),
                m.getBody() == null ? new byte[0] : m.getBody()));
        return rec;
    }
}
