/*
 * Test harness of dledgerctl (not part of RocketMQ): what RocketMQ 5.3.3's broker does to its
 * message store when the controller changes its role, written by us after the order of
 * broker/.../controller/ReplicasManager.java (changeBrokerRole, changeToMaster, changeToSlave,
 * changeSyncStateSet, checkSyncStateSetAndDoReport, register's broker identity files), calling
 * RocketMQ's own AutoSwitchHAService, DefaultMessageStore and BrokerMetadata. No controller and
 * no broker run here: the test process plays the controller (it says who is master, at which
 * epoch, and which SyncStateSet), and what a broker does beside its store (name server
 * registration, config sync from the master, timer/schedule/transaction services) is left out.
 *
 * In-memory record, as ReplicasManager keeps it (fresh at each process start): masterEpoch,
 * masterBrokerId, masterAddress, syncStateSet and its epoch. Everything is synchronized on this
 * object, as ReplicasManager's methods are.
 */

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.BrokerRole;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.ha.autoswitch.AutoSwitchHAService;
import org.apache.rocketmq.store.ha.autoswitch.BrokerMetadata;
import org.apache.rocketmq.store.ha.autoswitch.TempBrokerMetadata;

public class ReplicaRoles {
    private final DefaultMessageStore store;
    private final AutoSwitchHAService ha;
    private final BrokerConfig brokerConfig;
    private final MessageStoreConfig storeConfig;
    private final long brokerControllerId;
    private final String selfAddress;
    private final ScheduledExecutorService scheduler = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "dledgerctl-ReplicaRoles");
        t.setDaemon(true);
        return t;
    });
    private ScheduledFuture<?> checkTask;

    private int masterEpoch = 0;
    private Long masterBrokerId = null;
    private String masterAddress = "";
    private Set<Long> syncStateSet = new HashSet<>();
    private int syncStateSetEpoch = 0;
    private boolean running = false;  // ReplicasManager's State.RUNNING: fenced lifted

    // what the master reported to "the controller" (alterSyncStateSet requests), newest last
    private final List<Map<String, Object>> reported = new ArrayList<>();
    // true: every report is accepted at once as a controller accepting alterSyncStateSet does
    // (new set, syncStateSetEpoch + 1); false: the test applies them with "syncstateset"
    private boolean autoAccept = false;

    public ReplicaRoles(DefaultMessageStore store, BrokerConfig brokerConfig, MessageStoreConfig storeConfig,
        long brokerControllerId, String selfAddress) {
        this.store = store;
        this.ha = (AutoSwitchHAService) store.getHaService();
        this.brokerConfig = brokerConfig;
        this.storeConfig = storeConfig;
        this.brokerControllerId = brokerControllerId;
        this.selfAddress = selfAddress;
    }

    /**
     * ReplicasManager.register's local part: the broker identity (storePathBrokerIdentity, and the
     * "-temp" file written while the controller is asked to apply the id). A metadata file that
     * is there already names the id (ReplicasManager takes it from there); ours must agree.
     */
    public synchronized Map<String, Object> register() throws Exception {
        String path = storeConfig.getStorePathBrokerIdentity();
        BrokerMetadata metadata = new BrokerMetadata(path);
        TempBrokerMetadata temp = new TempBrokerMetadata(path + "-temp");
        Map<String, Object> out = new LinkedHashMap<>();
        metadata.readFromFile();
        if (metadata.isLoaded()) {
            out.put("identity", "existing");
            if (metadata.getBrokerId() != brokerControllerId) {
                throw new IllegalStateException("the broker identity file " + path + " names broker id "
                    + metadata.getBrokerId() + ", not " + brokerControllerId);
            }
        } else {
            temp.updateAndPersist(brokerConfig.getBrokerClusterName(), brokerConfig.getBrokerName(),
                brokerControllerId, selfAddress + ";" + System.currentTimeMillis());
            metadata.updateAndPersist(brokerConfig.getBrokerClusterName(), brokerConfig.getBrokerName(),
                temp.getBrokerId());
            temp.clear();
            out.put("identity", "written");
        }
        ha.setLocalBrokerId(brokerControllerId);
        ha.registerSyncStateSetChangedListener(this::doReportSyncStateSetChanged);
        out.put("broker_id", brokerControllerId);
        return out;
    }

    /** After the first role change, as startBasicService: State.RUNNING and setFenced(false). */
    private void runningAfterFirstRole() {
        if (!running) {
            running = true;
            store.getRunningFlags().makeFenced(false);
        }
    }

    /** ReplicasManager.changeToMaster(newMasterEpoch, syncStateSetEpoch, syncStateSet). */
    public synchronized Map<String, Object> changeToMaster(int newMasterEpoch, int newSyncStateSetEpoch,
        Set<Long> newSyncStateSet) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        if (newMasterEpoch <= this.masterEpoch) {
            out.put("changed", false);
            out.put("reason", "masterEpoch " + newMasterEpoch + " is not above " + this.masterEpoch);
            return out;
        }
        this.masterEpoch = newMasterEpoch;
        if (this.masterBrokerId != null && this.masterBrokerId.equals(this.brokerControllerId)
            && brokerConfig.getBrokerId() == MixAll.MASTER_ID) {
            changeSyncStateSet(newSyncStateSet, newSyncStateSetEpoch);
            boolean ok = ha.changeToMasterWhenLastRoleIsMaster(newMasterEpoch);
            out.put("changed", true);
            out.put("path", "changeToMasterWhenLastRoleIsMaster");
            out.put("ha_ok", ok);
            scheduler.submit(this::checkSyncStateSetAndDoReport);
            runningAfterFirstRole();
            return out;
        }
        changeSyncStateSet(newSyncStateSet, newSyncStateSetEpoch);
        // (handleSlaveSynchronize(SYNC_MASTER): the broker's config sync, no store effect)
        boolean ok = ha.changeToMaster(newMasterEpoch);
        brokerConfig.setBrokerId(MixAll.MASTER_ID);
        storeConfig.setBrokerRole(BrokerRole.SYNC_MASTER);
        // (changeSpecialServiceStatus(true): the broker's schedule/timer/transaction services)
        this.masterAddress = this.selfAddress;
        this.masterBrokerId = this.brokerControllerId;
        schedulingCheckSyncStateSet();
        scheduler.submit(this::checkSyncStateSetAndDoReport);
        runningAfterFirstRole();
        out.put("changed", true);
        out.put("path", "changeToMaster");
        out.put("ha_ok", ok);
        return out;
    }

    /**
     * ReplicasManager.changeToSlave(newMasterAddress, newMasterEpoch, newMasterBrokerId), then what
     * the broker's registerBrokerWhenRoleChange brings back from the name server in controller mode
     * (updateMasterHAServerAddrPeriodically): the master's HA address and address, given here.
     */
    public synchronized Map<String, Object> changeToSlave(String newMasterHaAddress, int newMasterEpoch,
        long newMasterBrokerId) {
        Map<String, Object> out = new LinkedHashMap<>();
        if (newMasterEpoch <= this.masterEpoch) {
            out.put("changed", false);
            out.put("reason", "masterEpoch " + newMasterEpoch + " is not above " + this.masterEpoch);
            return out;
        }
        this.masterEpoch = newMasterEpoch;
        if (Long.valueOf(newMasterBrokerId).equals(this.masterBrokerId)) {
            boolean ok = ha.changeToSlaveWhenMasterNotChange(newMasterHaAddress, newMasterEpoch);
            out.put("changed", true);
            out.put("path", "changeToSlaveWhenMasterNotChange");
            out.put("ha_ok", ok);
            runningAfterFirstRole();
            return out;
        }
        stopCheckSyncStateSet();
        storeConfig.setBrokerRole(BrokerRole.SLAVE);
        // (changeSpecialServiceStatus(false))
        brokerConfig.setBrokerId(brokerControllerId);
        this.masterAddress = newMasterHaAddress;
        this.masterBrokerId = newMasterBrokerId;
        // (handleSlaveSynchronize(SLAVE))
        boolean ok = ha.changeToSlave(newMasterHaAddress, newMasterEpoch, brokerControllerId);
        // registerBrokerAll's result, in controller mode: the master's HA address and address
        store.updateHaMasterAddress(newMasterHaAddress);
        store.updateMasterAddress(newMasterHaAddress);
        runningAfterFirstRole();
        out.put("changed", true);
        out.put("path", "changeToSlave");
        out.put("ha_ok", ok);
        return out;
    }

    /** ReplicasManager.changeSyncStateSet: applied when its epoch is above the one held. */
    public synchronized boolean changeSyncStateSet(Set<Long> newSyncStateSet, int newSyncStateSetEpoch) {
        if (newSyncStateSetEpoch > this.syncStateSetEpoch) {
            this.syncStateSetEpoch = newSyncStateSetEpoch;
            this.syncStateSet = new HashSet<>(newSyncStateSet);
            ha.setSyncStateSet(newSyncStateSet);
            return true;
        }
        return false;
    }

    private synchronized void schedulingCheckSyncStateSet() {
        if (checkTask != null) {
            checkTask.cancel(false);
        }
        checkTask = scheduler.scheduleAtFixedRate(this::checkSyncStateSetAndDoReport, 3000,
            brokerConfig.getCheckSyncStateSetPeriod(), TimeUnit.MILLISECONDS);
    }

    private synchronized void stopCheckSyncStateSet() {
        if (checkTask != null) {
            checkTask.cancel(false);
            checkTask = null;
        }
    }

    /** ReplicasManager.checkSyncStateSetAndDoReport (the master's periodic shrink check). */
    public void checkSyncStateSetAndDoReport() {
        try {
            Set<Long> newSyncStateSet = ha.maybeShrinkSyncStateSet();
            newSyncStateSet.add(brokerControllerId);
            synchronized (this) {
                if (syncStateSet != null && syncStateSet.size() == newSyncStateSet.size()
                    && syncStateSet.containsAll(newSyncStateSet)) {
                    return;
                }
            }
            doReportSyncStateSetChanged(newSyncStateSet);
        } catch (Throwable t) {
            HaReplica.note("checkSyncStateSetAndDoReport: " + t);
        }
    }

    /** The broker sends alterSyncStateSet to the controller; here it is recorded (and accepted in auto mode). */
    private synchronized void doReportSyncStateSetChanged(Set<Long> newSyncStateSet) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("sync_state_set", new TreeSet<>(newSyncStateSet));
        r.put("master_epoch", masterEpoch);
        r.put("sync_state_set_epoch", syncStateSetEpoch);
        r.put("accepted", autoAccept);
        reported.add(r);
        HaReplica.note("alterSyncStateSet reported: " + r);
        if (autoAccept && Long.valueOf(brokerControllerId).equals(masterBrokerId)
            && newSyncStateSet.contains(brokerControllerId)) {
            changeSyncStateSet(newSyncStateSet, syncStateSetEpoch + 1);
        }
    }

    public synchronized void setAutoAccept(boolean on) {
        this.autoAccept = on;
    }

    public synchronized Map<String, Object> describe() {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("master_epoch", masterEpoch);
        out.put("master_broker_id", masterBrokerId);
        out.put("master_address", masterAddress);
        out.put("sync_state_set", new TreeSet<>(syncStateSet));
        out.put("sync_state_set_epoch", syncStateSetEpoch);
        out.put("auto_accept", autoAccept);
        out.put("reported", new ArrayList<>(reported));
        out.put("running", running);
        return out;
    }

    public void shutdown() {
        scheduler.shutdownNow();
    }
}
