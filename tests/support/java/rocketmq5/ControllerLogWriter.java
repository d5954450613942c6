import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import io.openmessaging.storage.dledger.DLedgerConfig;
import io.openmessaging.storage.dledger.MemberState;
import io.openmessaging.storage.dledger.entry.DLedgerEntry;
import io.openmessaging.storage.dledger.store.file.DLedgerMmapFileStore;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.List;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.common.ControllerConfig;
import org.apache.rocketmq.controller.impl.event.AlterSyncStateSetEvent;
import org.apache.rocketmq.controller.impl.event.ApplyBrokerIdEvent;
import org.apache.rocketmq.controller.impl.event.CleanBrokerDataEvent;
import org.apache.rocketmq.controller.impl.event.ElectMasterEvent;
import org.apache.rocketmq.controller.impl.event.EventMessage;
import org.apache.rocketmq.controller.impl.event.EventSerializer;
import org.apache.rocketmq.controller.impl.event.UpdateBrokerAddressEvent;
import org.apache.rocketmq.controller.impl.manager.BrokerReplicaInfo;
import org.apache.rocketmq.controller.impl.manager.ReplicasInfoManager;
import org.apache.rocketmq.controller.impl.manager.SyncStateInfo;

/**
 * A RocketMQ 5 controller's log, written and applied by RocketMQ's and DLedger's own code:
 * each stdin line (JSON) is an entry: {"term": T, "event": "apply"|"elect"|"alter"|"clean"|
 * "update", ...its fields} made into RocketMQ's event class and serialized by its
 * EventSerializer, {"term": T} an empty body (a new leader's proposal), {"term": T, "raw":
 * BASE64} bytes as given. Each is appended by DLedgerMmapFileStore.appendAsLeader (at term T,
 * which never goes down) and applied as DLedgerControllerStateMachine.onApply does (empty
 * bodies skipped; EventSerializer.deserialize, then ReplicasInfoManager.applyEvent). One
 * JSON line out per entry: its index and term, what applying it threw, and the
 * ReplicasInfoManager's tables after it (read by reflection: they are private).
 * Args: storeBaseDir selfId. Used by tests/java/test_rocketmq_controller_java.py.
 */
public class ControllerLogWriter {
    public static void main(String[] args) throws Exception {
        DLedgerConfig config = new DLedgerConfig();
        config.setStoreBaseDir(args[0]);
        config.setSelfId(args[1]);
        config.setGroup("controller");
        config.setPeers(args[1] + "-127.0.0.1:1");
        config.setMappedFileSizeForEntryData(1 << 20);
        config.setMappedFileSizeForEntryIndex(DLedgerMmapFileStore.INDEX_UNIT_SIZE * 4096);
        MemberState member = new MemberState(config);
        DLedgerMmapFileStore store = new DLedgerMmapFileStore(config, member);
        store.startup();
        EventSerializer serializer = new EventSerializer();
        ReplicasInfoManager manager = new ReplicasInfoManager(new ControllerConfig());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.trim().isEmpty()) {
                continue;
            }
            JSONObject spec = JSON.parseObject(line);
            long term = spec.getLongValue("term");
            if (member.currTerm() != term || !member.isLeader()) {
                member.changeToCandidate(term);
                if (member.currTerm() < term) {
                    member.nextTerm();
                }
                member.changeToLeader(member.currTerm());
            }
            byte[] body;
            if (spec.containsKey("raw")) {
                body = Base64.getDecoder().decode(spec.getString("raw"));
            } else if (spec.containsKey("event")) {
                body = serializer.serialize(event(spec));
            } else {
                body = new byte[0];
            }
            DLedgerEntry entry = new DLedgerEntry();
            entry.setBody(body);
            DLedgerEntry appended = store.appendAsLeader(entry);
            String error = null;
            if (body != null && body.length > 0) {  // DLedgerControllerStateMachine.onApply
                try {
                    manager.applyEvent(serializer.deserialize(body));
                } catch (Throwable t) {
                    error = t.getClass().getSimpleName();
                }
            }
            JSONObject out = new JSONObject(true);
            out.put("index", appended.getIndex());
            out.put("term", appended.getTerm());
            out.put("error", error);
            out.put("state", state(manager));
            System.out.println(JSON.toJSONString(out, com.alibaba.fastjson.serializer.SerializerFeature.WriteMapNullValue));
        }
        store.updateCommittedIndex(member.currTerm(), store.getLedgerEndIndex());
        store.flush();
        store.shutdown();
    }

    private static Set<Long> ids(JSONObject spec, String key) {
        JSONArray a = spec.getJSONArray(key);
        Set<Long> out = new HashSet<>();
        for (int i = 0; a != null && i < a.size(); i++) {
            out.add(a.getLong(i));
        }
        return out;
    }

    private static EventMessage event(JSONObject s) {
        String broker = s.getString("brokerName");
        switch (s.getString("event")) {
            case "apply":
                return new ApplyBrokerIdEvent(s.getString("clusterName"), broker, s.getString("brokerAddress"),
                    s.getLongValue("newBrokerId"), s.getString("registerCheckCode"));
            case "elect":
                return new ElectMasterEvent(s.getBooleanValue("newMasterElected"), broker, s.getLong("newMasterBrokerId"));
            case "alter":
                return new AlterSyncStateSetEvent(broker, ids(s, "newSyncStateSet"));
            case "clean":
                return new CleanBrokerDataEvent(broker, ids(s, "brokerIdSetToClean"));
            case "update":
                return new UpdateBrokerAddressEvent(s.getString("clusterName"), broker, s.getString("brokerAddress"),
                    s.getLong("brokerId"));
            default:
                throw new IllegalArgumentException("no event " + s.getString("event"));
        }
    }

    @SuppressWarnings("unchecked")
    private static <T> T field(Object o, String name) throws Exception {
        Field f = o.getClass().getDeclaredField(name);
        f.setAccessible(true);
        return (T) f.get(o);
    }

    private static Map<String, Object> state(ReplicasInfoManager m) throws Exception {
        Map<String, BrokerReplicaInfo> replicas = field(m, "replicaInfoTable");
        Map<String, SyncStateInfo> sync = field(m, "syncStateSetInfoTable");
        Map<String, Object> out = new TreeMap<>();
        Set<String> names = new TreeSet<>(replicas.keySet());
        names.addAll(sync.keySet());
        for (String name : names) {
            JSONObject row = new JSONObject(true);
            BrokerReplicaInfo r = replicas.get(name);
            SyncStateInfo s = sync.get(name);
            row.put("inReplicaInfoTable", r != null);
            row.put("inSyncStateSetInfoTable", s != null);
            if (r != null) {
                row.put("clusterName", r.getClusterName());
                row.put("nextAssignBrokerId", r.getNextAssignBrokerId());
                JSONArray brokers = new JSONArray();
                for (Map.Entry<Long, String> e : new TreeMap<>(r.getBrokerIdTable()).entrySet()) {
                    JSONObject b = new JSONObject(true);
                    b.put("brokerId", e.getKey());
                    b.put("address", e.getValue());
                    b.put("registerCheckCode", r.getBrokerRegisterCheckCode(e.getKey()));
                    brokers.add(b);
                }
                row.put("brokers", brokers);
            }
            if (s != null) {
                row.put("clusterName", s.getClusterName());
                row.put("masterBrokerId", s.getMasterBrokerId());
                row.put("masterEpoch", s.getMasterEpoch());
                // (sorted, a null id last: an event may put one in, and Java's HashSet keeps it)
                List<Long> ids = new ArrayList<>(s.getSyncStateSet());
                ids.sort(Comparator.nullsLast(Comparator.naturalOrder()));
                row.put("syncStateSet", ids);
                row.put("syncStateSetEpoch", s.getSyncStateSetEpoch());
            }
            out.put(name, row);
        }
        return out;
    }
}
