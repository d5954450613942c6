/*
 * Test harness of dledgerctl (not part of RocketMQ): one member of a RocketMQ broker group in
 * DLedger mode, as a broker runs it, without the broker's network side: RocketMQ's own
 * message store (org.apache.rocketmq.store.DefaultMessageStore, enableDLegerCommitLog) whose
 * DLedger member belongs to a group of several, and a producer inside it that puts a message
 * every few milliseconds whenever this member leads.
 *
 * Usage: RocketMQBrokerMember <spec.json>
 *
 * The spec (written by tests/support/javarocketmq.py BrokerMember):
 *   {"root": dir, "group": "broker-a", "selfId": "n0", "peers": "n0-127.0.0.1:P0;n1-...;n2-...",
 *    "dataFileSize": bytes, "consumeQueueFileSize": bytes, "topic": "T", "queues": 4,
 *    "putIntervalMs": ms, "bodyBytes": n}
 *
 * It prints one JSON object per line on stdout (everything else goes to stderr):
 *   {"event": "started"}
 *   {"event": "role", "role": "LEADER"|"FOLLOWER"|"CANDIDATE", "term": t, "leader": id, "at": ms}
 *     on every change of role, term or leader;
 *   {"event": "ready", "term": t, "at": ms} once, after becoming leader, it takes writes: what
 *     RocketMQ's DLedgerRoleChangeHandler waits for first (ledger end == committed index,
 *     nothing left to dispatch, then recoverTopicQueueTable() and the SYNC_MASTER role);
 *   {"event": "put", "status": PutMessageStatus, "key": k, "msg_id", "queue_id",
 *     "queue_offset", "phy_offset", "term", "at"} for every put (KEYS holds the key, which is
 *     "<selfId>-<term>-<sequence>"; the body repeats it);
 *   {"event": "stopped", "dispatch_behind": bytes} after a "quit".
 * On stdin it takes "pause" (no more puts), "resume", "state" (prints {"event": "state", role,
 * term, leader, ledger_end, committed, dispatch_behind}) and "quit" (stops putting, waits for
 * the dispatch of what is committed, shuts the store down and exits 0). SIGKILL is how a test
 * crashes it.
 */

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import com.alibaba.fastjson.serializer.SerializerFeature;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;

import io.openmessaging.storage.dledger.DLedgerServer;
import io.openmessaging.storage.dledger.MemberState;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.store.AppendMessageResult;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.BrokerRole;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.dledger.DLedgerCommitLog;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

public class RocketMQBrokerMember {

    private static PrintStream out;
    private static volatile boolean paused;
    private static volatile boolean quitting;
    private static volatile boolean stateAsked;

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
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

    static synchronized void emit(Map<String, Object> m) {
        out.println(JSON.toJSONString(m, SerializerFeature.WriteMapNullValue));
        out.flush();
    }

    static Map<String, Object> event(String name) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("event", name);
        m.put("at", System.currentTimeMillis());
        return m;
    }

    static int run(String[] args) throws Exception {
        if (args.length != 1) {
            throw new IllegalArgumentException("usage: RocketMQBrokerMember <spec.json>");
        }
        JSONObject spec = JSON.parseObject(new String(Files.readAllBytes(Paths.get(args[0])), StandardCharsets.UTF_8));
        String selfId = spec.getString("selfId");
        String topic = spec.getString("topic");
        int queues = spec.getIntValue("queues");
        long interval = spec.getLongValue("putIntervalMs");
        byte[] pad = new byte[Math.max(0, spec.getIntValue("bodyBytes"))];
        Arrays.fill(pad, (byte) 'x');

        MessageStoreConfig config = new MessageStoreConfig();
        config.setStorePathRootDir(spec.getString("root"));
        config.setStorePathCommitLog(Paths.get(spec.getString("root"), "commitlog").toString());
        config.setEnableDLegerCommitLog(true);
        config.setdLegerGroup(spec.getString("group"));
        config.setdLegerPeers(spec.getString("peers"));
        config.setdLegerSelfId(selfId);
        config.setMappedFileSizeCommitLog(spec.getIntValue("dataFileSize"));
        config.setMappedFileSizeConsumeQueue(spec.getIntValue("consumeQueueFileSize"));
        config.setMaxHashSlotNum(1000);
        config.setMaxIndexNum(4000);
        config.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        config.setBrokerRole(BrokerRole.SLAVE); // a broker in DLedger mode starts as a slave

        DefaultMessageStore store = new DefaultMessageStore(config, new BrokerStatsManager("dledgerctl-test", true),
            null, new BrokerConfig());
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed");
        }
        store.start();
        DLedgerServer server = ((DLedgerCommitLog) store.getCommitLog()).getdLedgerServer();
        emit(event("started"));

        Thread commands = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    line = line.trim();
                    if (line.equals("pause")) {
                        paused = true;
                    } else if (line.equals("resume")) {
                        paused = false;
                    } else if (line.equals("state")) {
                        stateAsked = true;
                    } else if (line.equals("quit")) {
                        break;
                    }
                }
            } catch (Exception e) {
                e.printStackTrace();
            }
            quitting = true; // "quit", or stdin closed: the test has gone
        }, "commands");
        commands.setDaemon(true);
        commands.start();

        String said = "";
        long readyTerm = -1;
        long seq = 0;
        long nextPut = 0;
        while (!quitting) {
            MemberState ms = server.getMemberState();
            MemberState.Role role = ms.getRole();
            long term = ms.currTerm();
            String now = role + "/" + term + "/" + ms.getLeaderId();
            if (!now.equals(said)) {
                said = now;
                Map<String, Object> e = event("role");
                e.put("role", String.valueOf(role));
                e.put("term", term);
                e.put("leader", ms.getLeaderId());
                emit(e);
            }
            if (stateAsked) {
                stateAsked = false;
                Map<String, Object> e = event("state");
                e.put("role", String.valueOf(role));
                e.put("term", term);
                e.put("leader", ms.getLeaderId());
                e.put("ledger_end", server.getdLedgerStore().getLedgerEndIndex());
                e.put("committed", server.getdLedgerStore().getCommittedIndex());
                e.put("dispatch_behind", store.dispatchBehindBytes());
                emit(e);
            }
            if (role != MemberState.Role.LEADER) {
                if (config.getBrokerRole() != BrokerRole.SLAVE) {
                    config.setBrokerRole(BrokerRole.SLAVE); // BrokerController.changeToSlave
                }
                readyTerm = -1;
                Thread.sleep(5);
                continue;
            }
            if (readyTerm != term) { // what DLedgerRoleChangeHandler waits for before taking writes
                long end = server.getdLedgerStore().getLedgerEndIndex();
                if (end != -1 && (end != server.getdLedgerStore().getCommittedIndex() || store.dispatchBehindBytes() != 0)) {
                    Thread.sleep(20);
                    continue;
                }
                store.recoverTopicQueueTable();
                config.setBrokerRole(BrokerRole.SYNC_MASTER); // BrokerController.changeToMaster
                readyTerm = term;
                Map<String, Object> e = event("ready");
                e.put("term", term);
                emit(e);
            }
            long t = System.currentTimeMillis();
            if (paused || t < nextPut) {
                Thread.sleep(Math.max(1, Math.min(5, nextPut - t)));
                continue;
            }
            nextPut = t + interval;
            String key = selfId + "-" + term + "-" + (seq++);
            int queueId = (int) (seq % queues);
            byte[] body = (key + ":").getBytes(StandardCharsets.UTF_8);
            byte[] full = Arrays.copyOf(body, body.length + pad.length);
            System.arraycopy(pad, 0, full, body.length, pad.length);
            Message msg = new Message(topic, "tag" + queueId, key, full);
            MessageClientIDSetter.setUniqID(msg);
            MessageExtBrokerInner inner = new MessageExtBrokerInner();
            inner.setTopic(topic);
            inner.setQueueId(queueId);
            inner.setBody(full);
            inner.setFlag(msg.getFlag());
            MessageAccessor.setProperties(inner, msg.getProperties());
            inner.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));
            inner.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(inner.getTags()));
            inner.setBornTimestamp(t);
            inner.setBornHost(new InetSocketAddress("127.0.0.1", 50000));
            inner.setStoreHost(new InetSocketAddress("127.0.0.1", 10911));
            PutMessageResult result = store.putMessage(inner);
            Map<String, Object> e = event("put");
            e.put("status", result == null ? "NULL" : String.valueOf(result.getPutMessageStatus()));
            e.put("key", key);
            e.put("term", term);
            e.put("queue_id", queueId);
            AppendMessageResult a = result == null ? null : result.getAppendMessageResult();
            if (result != null && result.isOk() && a != null) {
                e.put("msg_id", a.getMsgId());
                e.put("queue_offset", a.getLogicsOffset());
                e.put("phy_offset", a.getWroteOffset());
            }
            emit(e);
        }
        // what is committed is dispatched (consume queues) before the store goes
        long until = System.currentTimeMillis() + 20000;
        while (store.dispatchBehindBytes() != 0 && System.currentTimeMillis() < until) {
            Thread.sleep(20);
        }
        Map<String, Object> e = event("stopped");
        e.put("dispatch_behind", store.dispatchBehindBytes());
        store.shutdown();
        emit(e);
        return 0;
    }
}
