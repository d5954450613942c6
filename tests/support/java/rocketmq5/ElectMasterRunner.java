import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import org.apache.rocketmq.common.ControllerConfig;
import org.apache.rocketmq.controller.elect.impl.DefaultElectPolicy;
import org.apache.rocketmq.controller.impl.event.AlterSyncStateSetEvent;
import org.apache.rocketmq.controller.impl.event.ApplyBrokerIdEvent;
import org.apache.rocketmq.controller.impl.event.ControllerResult;
import org.apache.rocketmq.controller.impl.event.ElectMasterEvent;
import org.apache.rocketmq.controller.impl.event.EventMessage;
import org.apache.rocketmq.controller.impl.heartbeat.BrokerLiveInfo;
import org.apache.rocketmq.controller.impl.manager.ReplicasInfoManager;
import org.apache.rocketmq.remoting.protocol.header.controller.ElectMasterRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.ElectMasterResponseHeader;

/**
 * One election by RocketMQ's own controller code: ReplicasInfoManager.electMaster with a
 * DefaultElectPolicy whose BrokerValidPredicate and BrokerLiveInfoGetter answer from what
 * stdin says (what a controller's heartbeat manager would hold). Stdin, one JSON line each:
 * events as ControllerLogWriter takes them ({"event": "apply"|"elect"|"alter", ...}), applied
 * to the manager in order; then {"elect": {"clusterName", "brokerName", "unclean": bool,
 * "designate": ID or null, "brokerId": ID or null (a broker's own request), "live":
 * [{"brokerId", "epoch", "maxOffset", "priority"}]}} (brokers not listed are not alive).
 * Prints one JSON line: the response code, the master and epoch the response names, and the
 * events the result carries. Used by tests/java/test_controller_elect_plan_java.py.
 */
public class ElectMasterRunner {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        ControllerConfig config = new ControllerConfig();
        ReplicasInfoManager manager = null;
        JSONObject elect = null;
        java.util.List<EventMessage> events = new java.util.ArrayList<>();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.trim().isEmpty()) {
                continue;
            }
            JSONObject spec = JSON.parseObject(line);
            if (spec.containsKey("elect")) {
                elect = spec.getJSONObject("elect");
            } else {
                events.add(event(spec));
            }
        }
        config.setEnableElectUncleanMaster(elect.getBooleanValue("unclean"));
        manager = new ReplicasInfoManager(config);
        for (EventMessage e : events) {
            manager.applyEvent(e);
        }
        final Map<Long, BrokerLiveInfo> live = new HashMap<>();
        JSONArray infos = elect.getJSONArray("live");
        String brokerName = elect.getString("brokerName");
        for (int i = 0; i < infos.size(); i++) {
            JSONObject b = infos.getJSONObject(i);
            long id = b.getLongValue("brokerId");
            live.put(id, new BrokerLiveInfo(brokerName, "127.0.0.1:" + (30000 + id), id, System.currentTimeMillis(),
                10000L, null, b.getIntValue("epoch"), b.getLongValue("maxOffset"), b.getInteger("priority")));
        }
        DefaultElectPolicy policy = new DefaultElectPolicy((cluster, name, id) -> live.containsKey(id),
            (cluster, name, id) -> live.get(id));
        Long designate = elect.getLong("designate");
        Long asking = elect.getLong("brokerId");
        ElectMasterRequestHeader request = designate != null
            ? ElectMasterRequestHeader.ofAdminTrigger(elect.getString("clusterName"), brokerName, designate)
            : asking != null ? ElectMasterRequestHeader.ofBrokerTrigger(elect.getString("clusterName"), brokerName, asking)
            : ElectMasterRequestHeader.ofControllerTrigger(brokerName);
        ControllerResult<ElectMasterResponseHeader> result = manager.electMaster(request, policy);
        JSONObject out = new JSONObject(true);
        out.put("code", result.getResponseCode());
        out.put("remark", result.getRemark());
        out.put("masterBrokerId", result.getResponse().getMasterBrokerId());
        out.put("masterEpoch", result.getResponse().getMasterEpoch());
        JSONArray evs = new JSONArray();
        for (EventMessage e : result.getEvents()) {
            ElectMasterEvent m = (ElectMasterEvent) e;
            JSONObject o = new JSONObject(true);
            o.put("newMasterElected", m.getNewMasterElected());
            o.put("newMasterBrokerId", m.getNewMasterBrokerId());
            evs.add(o);
        }
        out.put("events", evs);
        System.out.println(JSON.toJSONString(out, com.alibaba.fastjson.serializer.SerializerFeature.WriteMapNullValue));
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
            default:
                throw new IllegalArgumentException("no event " + s.getString("event"));
        }
    }
}
