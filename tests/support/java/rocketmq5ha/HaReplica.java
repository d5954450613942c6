/*
 * Test harness of dledgerctl (not part of RocketMQ): one replica of a controller-mode broker set,
 * RocketMQ 5.3.3's own DefaultMessageStore with enableControllerMode=true (the store then makes an
 * AutoSwitchHAService), opened on a store root as a broker opens it (constructed, fenced, load(),
 * start(): the HA service listens on the given port), driven by commands on stdin, one JSON
 * line answered on stdout per command (stdout carries nothing else; RocketMQ's log goes to
 * stderr through slf4j, see tests/support/javarocketmq5ha.py).
 *
 * Usage: HaReplica <storeRoot> <haPort> <brokerId> [name=value ...]
 *   name=value: MessageStoreConfig and BrokerConfig properties (RocketMQ's MixAll.properties2Object),
 *   e.g. mappedFileSizeCommitLog=1048576 allAckInSyncStateSet=true brokerName=broker-a.
 *
 * First line: {"ok":true,"kind":"ready",...state} once the store has started (or ok=false and exit 1).
 * Commands (ReplicaRoles does what ReplicasManager does, in its order):
 *   master <masterEpoch> <syncStateSetEpoch> <brokerId> [id,id,...]   changeToMaster (the set defaults
 *       to this broker alone, as the controller's election gives it); brokerId must be this replica's
 *   slave <masterHaAddress> <masterEpoch> <masterBrokerId>           changeToSlave, then the HA address
 *   syncstateset <epoch> <id,id,...>    changeSyncStateSet (as the controller's answer applies it)
 *   syncstateset auto|manual            accept every alterSyncStateSet report at once (epoch + 1), or not
 *   check                               checkSyncStateSetAndDoReport now (the master's periodic task)
 *   put <topic> <queueId> <count> <bodySize> [keysPrefix]   putMessage, count times; body i is
 *       "<prefix>-<i> " repeated to bodySize bytes (prefix "m" by default), KEYS "<prefix>-<i>"
 *   read <topic> <queueId> <queueOffset> <max>   DefaultMessageStore.getMessage from that queue offset
 *       (at most max messages; RocketMQ caps a read at 32): each message's queue offset, physical
 *       offset, KEYS and body as the store hands them back
 *   state | flush | quit
 */

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializerFeature;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.ConcurrentModificationException;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.remoting.protocol.EpochEntry;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.ha.HAClient;
import org.apache.rocketmq.store.ha.HAConnection;
import org.apache.rocketmq.store.ha.autoswitch.AutoSwitchHAConnection;
import org.apache.rocketmq.store.ha.autoswitch.AutoSwitchHAService;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

public class HaReplica {
    private static PrintStream out;

    private DefaultMessageStore store;
    private AutoSwitchHAService ha;
    private ReplicaRoles roles;
    private final MessageStoreConfig storeConfig = new MessageStoreConfig();
    private final BrokerConfig brokerConfig = new BrokerConfig();
    private long brokerId;
    private int haPort;

    public static void main(String[] args) {
        int status = 1;
        try {
            out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
            System.setOut(System.err);  // stdout is the protocol's
            status = new HaReplica().run(args);
        } catch (Throwable t) {
            t.printStackTrace();
            Map<String, Object> e = new LinkedHashMap<>();
            e.put("ok", false);
            e.put("kind", "fatal");
            e.put("error", String.valueOf(t));
            print(e);
        } finally {
            out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(status);
        }
    }

    static void print(Map<String, Object> rec) {
        synchronized (HaReplica.class) {
            out.println(JSON.toJSONString(rec, SerializerFeature.WriteMapNullValue,
                SerializerFeature.DisableCircularReferenceDetect));
            out.flush();
        }
    }

    /** A harness line in the log (stderr), beside RocketMQ's own. */
    static void note(String text) {
        System.err.println("[dledgerctl-harness] " + text);
        System.err.flush();
    }

    int run(String[] args) throws Exception {
        if (args.length < 3) {
            throw new IllegalArgumentException("usage: HaReplica <storeRoot> <haPort> <brokerId> [name=value ...]");
        }
        String root = new File(args[0]).getAbsolutePath();
        haPort = Integer.parseInt(args[1]);
        brokerId = Long.parseLong(args[2]);

        brokerConfig.setEnableControllerMode(true);
        brokerConfig.setBrokerClusterName("DefaultCluster");
        brokerConfig.setBrokerName("broker-a");
        storeConfig.setStorePathRootDir(root);
        storeConfig.setStorePathCommitLog(new File(root, "commitlog").getPath());
        storeConfig.setHaListenPort(haPort);
        storeConfig.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        Properties p = new Properties();
        for (int i = 3; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("not name=value: " + args[i]);
            }
            p.setProperty(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        MixAll.properties2Object(p, storeConfig);
        MixAll.properties2Object(p, brokerConfig);
        brokerConfig.setEnableControllerMode(true);
        storeConfig.setEnableDLegerCommitLog(false);

        ConcurrentMap<String, TopicConfig> topics = new ConcurrentHashMap<>();
        store = new DefaultMessageStore(storeConfig, new BrokerStatsManager(brokerConfig.getBrokerName(), true),
            null, brokerConfig, topics);
        ha = (AutoSwitchHAService) store.getHaService();
        if (ha == null) {
            throw new IllegalStateException("the store made no AutoSwitchHAService");
        }
        roles = new ReplicaRoles(store, brokerConfig, storeConfig, brokerId, "127.0.0.1:" + haPort);
        // BrokerController.recoverAndInitService: ReplicasManager made, setFenced(true), then load()
        store.getRunningFlags().makeFenced(true);
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() failed");
        }
        store.start();
        Map<String, Object> ready = new LinkedHashMap<>();
        ready.put("ok", true);
        ready.put("kind", "ready");
        ready.putAll(roles.register());
        ready.putAll(state());
        print(ready);

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            String[] w = line.split("\\s+");
            Map<String, Object> reply = new LinkedHashMap<>();
            reply.put("ok", true);
            reply.put("kind", w[0]);
            try {
                if (command(w, reply)) {
                    print(reply);
                    return 0;
                }
            } catch (Throwable t) {
                t.printStackTrace();
                reply.put("ok", false);
                reply.put("error", String.valueOf(t));
            }
            print(reply);
        }
        shutdown();  // stdin closed: as quit
        return 0;
    }

    private static Set<Long> ids(String csv) {
        Set<Long> s = new HashSet<>();
        for (String x : csv.split(",")) {
            if (!x.isEmpty()) {
                s.add(Long.parseLong(x));
            }
        }
        return s;
    }

    /** One command into reply; true when the process is to end. */
    private boolean command(String[] w, Map<String, Object> reply) throws Exception {
        switch (w[0]) {
            case "master": {
                long id = Long.parseLong(w[3]);
                if (id != brokerId) {
                    throw new IllegalArgumentException("master " + id + " is not this replica (" + brokerId + ")");
                }
                Set<Long> set = w.length > 4 ? ids(w[4]) : new HashSet<>(java.util.Collections.singleton(id));
                reply.putAll(roles.changeToMaster(Integer.parseInt(w[1]), Integer.parseInt(w[2]), set));
                reply.putAll(state());
                return false;
            }
            case "slave":
                reply.putAll(roles.changeToSlave(w[1], Integer.parseInt(w[2]), Long.parseLong(w[3])));
                reply.putAll(state());
                return false;
            case "syncstateset":
                if (w[1].equals("auto") || w[1].equals("manual")) {
                    roles.setAutoAccept(w[1].equals("auto"));
                } else {
                    reply.put("changed", roles.changeSyncStateSet(ids(w[2]), Integer.parseInt(w[1])));
                }
                reply.putAll(state());
                return false;
            case "check":
                roles.checkSyncStateSetAndDoReport();
                reply.putAll(state());
                return false;
            case "put":
                put(w[1], Integer.parseInt(w[2]), Integer.parseInt(w[3]), Integer.parseInt(w[4]),
                    w.length > 5 ? w[5] : "m", reply);
                return false;
            case "read":
                read(w[1], Integer.parseInt(w[2]), Long.parseLong(w[3]), Integer.parseInt(w[4]), reply);
                return false;
            case "state":
                reply.putAll(state());
                return false;
            case "flush":
                reply.put("flushed_where", store.flush());
                store.getStoreCheckpoint().flush();
                reply.putAll(state());
                return false;
            case "quit":
                shutdown();
                return true;
            default:
                throw new IllegalArgumentException("unknown command " + w[0]);
        }
    }

    private void shutdown() {
        roles.shutdown();
        store.shutdown();
        note("store shut down");
    }

    private void put(String topic, int queueId, int count, int bodySize, String prefix, Map<String, Object> reply) {
        List<String> statuses = new ArrayList<>();
        List<Long> offsets = new ArrayList<>();
        List<Integer> sizes = new ArrayList<>();
        List<Long> queueOffsets = new ArrayList<>();
        Map<String, Integer> counts = new TreeMap<>();
        for (int i = 0; i < count; i++) {
            String key = prefix + "-" + i;
            byte[] unit = (key + " ").getBytes(StandardCharsets.UTF_8);
            byte[] body = new byte[bodySize];
            for (int k = 0; k < bodySize; k++) {
                body[k] = unit[k % unit.length];
            }
            Message msg = new Message(topic, "ha", key, body);
            MessageClientIDSetter.setUniqID(msg);
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
            inner.setStoreHost(new InetSocketAddress("127.0.0.1", haPort));
            PutMessageResult r = store.putMessage(inner);
            String status = r == null ? "NULL" : String.valueOf(r.getPutMessageStatus());
            statuses.add(status);
            counts.merge(status, 1, Integer::sum);
            if (r != null && r.getAppendMessageResult() != null && r.getAppendMessageResult().isOk()) {
                offsets.add(r.getAppendMessageResult().getWroteOffset());
                sizes.add(r.getAppendMessageResult().getWroteBytes());
                queueOffsets.add(r.getAppendMessageResult().getLogicsOffset());
            } else {
                offsets.add(-1L);
                sizes.add(0);
                queueOffsets.add(-1L);
            }
        }
        reply.put("counts", counts);
        reply.put("statuses", statuses);
        reply.put("offsets", offsets);
        reply.put("sizes", sizes);
        reply.put("queue_offsets", queueOffsets);
        reply.put("max_phy_offset", store.getMaxPhyOffset());
        reply.put("confirm_offset", store.getConfirmOffset());
    }

    private void read(String topic, int queueId, long from, int max, Map<String, Object> reply) {
        GetMessageResult r = store.getMessage("dledgerctl-harness", topic, queueId, from, max, null);
        List<Map<String, Object>> messages = new ArrayList<>();
        try {
            reply.put("status", String.valueOf(r.getStatus()));
            reply.put("next_begin_offset", r.getNextBeginOffset());
            reply.put("queue_min_offset", r.getMinOffset());
            reply.put("queue_max_offset", r.getMaxOffset());
            for (ByteBuffer bb : r.getMessageBufferList()) {
                MessageExt m = MessageDecoder.decode(bb, true, false);
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("queue_offset", m.getQueueOffset());
                o.put("phy_offset", m.getCommitLogOffset());
                o.put("size", m.getStoreSize());
                o.put("keys", m.getKeys());
                o.put("body", m.getBody() == null ? null : new String(m.getBody(), StandardCharsets.UTF_8));
                messages.add(o);
            }
        } finally {
            r.release();
        }
        reply.put("messages", messages);
    }

    private Map<String, Object> state() throws Exception {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("broker_id", brokerId);
        s.put("ha_port", haPort);
        s.put("role", String.valueOf(storeConfig.getBrokerRole()));
        s.put("config_broker_id", brokerConfig.getBrokerId());
        s.put("fenced", store.getRunningFlags().isFenced());
        s.put("min_phy_offset", store.getMinPhyOffset());
        s.put("max_phy_offset", store.getMaxPhyOffset());
        s.put("confirm_offset", store.getConfirmOffset());
        s.put("dispatch_behind", store.dispatchBehindBytes());
        s.put("state_machine_version", store.getStateMachineVersion());
        List<Map<String, Object>> epochs = new ArrayList<>();
        for (EpochEntry e : ha.getEpochEntries()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("epoch", e.getEpoch());
            m.put("start", e.getStartOffset());
            m.put("end", e.getEndOffset());
            epochs.add(m);
        }
        s.put("epochs", epochs);
        s.put("last_epoch", ha.getLastEpoch());
        s.put("local_sync_state_set", new java.util.TreeSet<>(ha.getLocalSyncStateSet()));
        s.put("sync_state_set_union", new java.util.TreeSet<>(ha.getSyncStateSet()));
        HAClient client = ha.getHAClient();
        if (client != null) {
            Map<String, Object> c = new LinkedHashMap<>();
            c.put("state", String.valueOf(client.getCurrentState()));
            c.put("master_ha_address", client.getHaMasterAddress());
            c.put("master_address", client.getMasterAddress());
            s.put("client", c);
        } else {
            s.put("client", null);
        }
        List<Map<String, Object>> conns = new ArrayList<>();
        for (int attempt = 0; attempt < 10; attempt++) {
            try {
                conns.clear();
                for (HAConnection conn : new ArrayList<>(ha.getConnectionList())) {
                    Map<String, Object> c = new LinkedHashMap<>();
                    c.put("slave_id", ((AutoSwitchHAConnection) conn).getSlaveId());
                    c.put("state", String.valueOf(conn.getCurrentState()));
                    c.put("ack_offset", conn.getSlaveAckOffset());
                    c.put("transfer_from", conn.getTransferFromWhere());
                    c.put("client_address", conn.getClientAddress());
                    conns.add(c);
                }
                break;
            } catch (ConcurrentModificationException again) {
                // the HA service's LinkedList changed under the copy: copy again
            }
        }
        s.put("connections", conns);
        Map<String, Object> queues = new TreeMap<>();
        for (Map.Entry<String, ConcurrentMap<Integer, ConsumeQueueInterface>> t : store.getConsumeQueueTable().entrySet()) {
            for (Integer q : t.getValue().keySet()) {
                queues.put(t.getKey() + "/" + q, store.getMaxOffsetInQueue(t.getKey(), q));
            }
        }
        s.put("queues", queues);
        s.put("roles", roles.describe());
        return s;
    }
}
