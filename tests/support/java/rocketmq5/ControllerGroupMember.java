import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.common.ControllerConfig;
import org.apache.rocketmq.controller.impl.DLedgerController;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.header.controller.ElectMasterRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.ElectMasterResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.register.ApplyBrokerIdRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.register.GetNextBrokerIdRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.register.GetNextBrokerIdResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.register.RegisterBrokerToControllerRequestHeader;

/**
 * One member of a RocketMQ 5 DLedger controller group: RocketMQ's own DLedgerController (its
 * DLedger 0.3.1.2 server, state machine and role handler), configured as a controller's
 * ControllerConfig configures it. Args: storePath selfId group peers (DLedger's
 * "n0-127.0.0.1:P0;n1-..." form). Prints "READY" once started. Stdin commands, one a line:
 * "register CLUSTER BROKER ADDRESS" does what a broker in controller mode does to join
 * (getNextBrokerId, applyBrokerId, registerBroker, electMaster) and prints one JSON line
 * (the broker id and the elected master's id, address and epoch, or the failing step's
 * code and remark, or {"error": the exception's class} when a step threw or did not answer
 * within 10 s); "nextid CLUSTER BROKER" prints what getNextBrokerId answers (a read of the
 * controller's applied state: {"nextBrokerId": N}); "quit" shuts the controller down. A register on a member that is not
 * the leader gets the controller's own refusal (CONTROLLER_NOT_LEADER). Used by
 * tests/java/test_controller_group_java.py.
 */
public class ControllerGroupMember {
    public static void main(String[] args) throws Exception {
        ControllerConfig config = new ControllerConfig();
        config.setControllerStorePath(args[0]);
        config.setControllerDLegerSelfId(args[1]);
        config.setControllerDLegerGroup(args[2]);
        config.setControllerDLegerPeers(args[3]);
        config.setMappedFileSize(4 << 20);
        DLedgerController controller = new DLedgerController(config, (cluster, broker, id) -> true);
        controller.startup();
        System.out.println("READY");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        try {
            while ((line = in.readLine()) != null) {
                String[] w = line.trim().split("\\s+");
                if (w[0].equals("quit")) {
                    break;
                }
                if (w[0].equals("register") && w.length == 4) {
                    String out;
                    try {
                        out = register(controller, w[1], w[2], w[3]);
                    } catch (Exception e) {  // (a step whose event is never applied times out or is cancelled)
                        out = "{\"error\":\"" + e.getClass().getSimpleName() + "\"}";
                    }
                    System.out.println(out);
                } else if (w[0].equals("nextid") && w.length == 3) {
                    RemotingCommand r = call(controller.getNextBrokerId(new GetNextBrokerIdRequestHeader(w[1], w[2])));
                    System.out.println(r.getCode() != 0 ? failed("getNextBrokerId", r) : "{\"nextBrokerId\":"
                        + ((GetNextBrokerIdResponseHeader) r.readCustomHeader()).getNextBrokerId() + "}");
                } else if (!w[0].isEmpty()) {
                    System.out.println("{\"error\":\"unknown command\"}");
                }
                System.out.flush();
            }
        } finally {
            controller.shutdown();
        }
        System.exit(0);
    }

    private static RemotingCommand call(java.util.concurrent.CompletableFuture<RemotingCommand> f) throws Exception {
        return f.get(10, TimeUnit.SECONDS);
    }

    private static String failed(String step, RemotingCommand r) {
        String remark = r.getRemark() == null ? "" : r.getRemark().replace("\\", "/").replace("\"", "'");
        return "{\"step\":\"" + step + "\",\"code\":" + r.getCode() + ",\"remark\":\"" + remark + "\"}";
    }

    private static String register(DLedgerController c, String cluster, String broker, String address)
        throws Exception {
        RemotingCommand r = call(c.getNextBrokerId(new GetNextBrokerIdRequestHeader(cluster, broker)));
        if (r.getCode() != 0) {
            return failed("getNextBrokerId", r);
        }
        Long id = ((GetNextBrokerIdResponseHeader) r.readCustomHeader()).getNextBrokerId();
        r = call(c.applyBrokerId(new ApplyBrokerIdRequestHeader(cluster, broker, id,
            address + ";" + System.currentTimeMillis())));
        if (r.getCode() != 0) {
            return failed("applyBrokerId", r);
        }
        r = call(c.registerBroker(new RegisterBrokerToControllerRequestHeader(cluster, broker, id, address)));
        if (r.getCode() != 0) {
            return failed("registerBroker", r);
        }
        r = call(c.electMaster(ElectMasterRequestHeader.ofBrokerTrigger(cluster, broker, id)));
        if (r.getCode() != 0) {
            return failed("electMaster", r);
        }
        ElectMasterResponseHeader h = (ElectMasterResponseHeader) r.readCustomHeader();
        return "{\"brokerId\":" + id + ",\"masterBrokerId\":" + h.getMasterBrokerId() + ",\"masterAddress\":\""
            + h.getMasterAddress() + "\",\"masterEpoch\":" + h.getMasterEpoch() + "}";
    }
}
