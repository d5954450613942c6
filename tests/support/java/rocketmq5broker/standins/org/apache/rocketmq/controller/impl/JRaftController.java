package org.apache.rocketmq.controller.impl;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.apache.rocketmq.common.ControllerConfig;
import org.apache.rocketmq.controller.Controller;
import org.apache.rocketmq.controller.helper.BrokerLifecycleListener;
import org.apache.rocketmq.controller.impl.task.BrokerCloseChannelRequest;
import org.apache.rocketmq.controller.impl.task.CheckNotActiveBrokerRequest;
import org.apache.rocketmq.controller.impl.task.GetBrokerLiveInfoRequest;
import org.apache.rocketmq.controller.impl.task.RaftBrokerHeartBeatEventRequest;
import org.apache.rocketmq.remoting.ChannelEventListener;
import org.apache.rocketmq.remoting.RemotingServer;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.body.SyncStateSet;
import org.apache.rocketmq.remoting.protocol.header.controller.AlterSyncStateSetRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.ElectMasterRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.GetReplicaInfoRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.admin.CleanControllerBrokerDataRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.register.ApplyBrokerIdRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.register.GetNextBrokerIdRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.controller.register.RegisterBrokerToControllerRequestHeader;

/**
 * Stand-in (dledgerctl tests, tests/support/javarocketmq5broker.py) for the JRaft controller:
 * sofa-jraft is neither in the mirrors nor in Debian. ControllerManager makes one only with
 * {@code controllerType=jRaft}; the tests run the DLedger controller (RocketMQ's default,
 * DLedgerController, built from the mirror), so nothing constructs this. Its constructor throws.
 */
public class JRaftController implements Controller {
    static final String ABSENT = "sofa-jraft is not on this class path (the JRaft controller): a dledgerctl "
        + "test stand-in";

    public JRaftController(ControllerConfig controllerConfig, ChannelEventListener channelEventListener)
        throws java.io.IOException {
        throw new UnsupportedOperationException(ABSENT);
    }

    public CompletableFuture<RemotingCommand> getBrokerLiveInfo(GetBrokerLiveInfoRequest request) {
        throw new UnsupportedOperationException(ABSENT);
    }

    public CompletableFuture<RemotingCommand> onBrokerHeartBeat(RaftBrokerHeartBeatEventRequest request) {
        throw new UnsupportedOperationException(ABSENT);
    }

    public CompletableFuture<RemotingCommand> onBrokerCloseChannel(BrokerCloseChannelRequest request) {
        throw new UnsupportedOperationException(ABSENT);
    }

    public CompletableFuture<RemotingCommand> checkNotActiveBroker(CheckNotActiveBrokerRequest request) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public void startup() {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public void shutdown() {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public void startScheduling() {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public void stopScheduling() {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public boolean isLeaderState() {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<RemotingCommand> alterSyncStateSet(AlterSyncStateSetRequestHeader request,
        SyncStateSet syncStateSet) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<RemotingCommand> electMaster(ElectMasterRequestHeader request) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<RemotingCommand> getNextBrokerId(GetNextBrokerIdRequestHeader request) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<RemotingCommand> applyBrokerId(ApplyBrokerIdRequestHeader request) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<RemotingCommand> registerBroker(RegisterBrokerToControllerRequestHeader request) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<RemotingCommand> getReplicaInfo(GetReplicaInfoRequestHeader request) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public RemotingCommand getControllerMetadata() {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<RemotingCommand> getSyncStateData(List<String> brokerNames) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public void registerBrokerLifecycleListener(BrokerLifecycleListener listener) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public RemotingServer getRemotingServer() {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public CompletableFuture<RemotingCommand> cleanBrokerData(CleanControllerBrokerDataRequestHeader request) {
        throw new UnsupportedOperationException(ABSENT);
    }
}
