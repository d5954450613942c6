package org.apache.rocketmq.controller.impl;

import java.io.IOException;
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
 * Stand-in (dledgerctl tests, tests/support/javarocketmq5ctl.py): RocketMQ's JRaft controller
 * needs sofa-jraft, which neither the mirrors nor Debian have. ControllerManager names this
 * class but reaches it only with controllerType=jRaft; the tests run the DLedger controller
 * (the default). Every constructor and method throws, so a path that reaches it fails loudly.
 */
public class JRaftController implements Controller {
    static final String ABSENT = "sofa-jraft is not on this class path: a dledgerctl test stand-in";

    public JRaftController(ControllerConfig controllerConfig, ChannelEventListener channelEventListener)
        throws IOException {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override public void startup() { throw new UnsupportedOperationException(ABSENT); }
    @Override public void shutdown() { throw new UnsupportedOperationException(ABSENT); }
    @Override public void startScheduling() { throw new UnsupportedOperationException(ABSENT); }
    @Override public void stopScheduling() { throw new UnsupportedOperationException(ABSENT); }
    @Override public boolean isLeaderState() { throw new UnsupportedOperationException(ABSENT); }

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

    @Override public RemotingCommand getControllerMetadata() { throw new UnsupportedOperationException(ABSENT); }

    @Override
    public CompletableFuture<RemotingCommand> getSyncStateData(List<String> brokerNames) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override
    public void registerBrokerLifecycleListener(BrokerLifecycleListener listener) {
        throw new UnsupportedOperationException(ABSENT);
    }

    @Override public RemotingServer getRemotingServer() { throw new UnsupportedOperationException(ABSENT); }

    @Override
    public CompletableFuture<RemotingCommand> cleanBrokerData(CleanControllerBrokerDataRequestHeader requestHeader) {
        throw new UnsupportedOperationException(ABSENT);
    }

    public CompletableFuture<RemotingCommand> getBrokerLiveInfo(GetBrokerLiveInfoRequest requestHeader) {
        throw new UnsupportedOperationException(ABSENT);
    }

    public CompletableFuture<RemotingCommand> onBrokerHeartBeat(RaftBrokerHeartBeatEventRequest requestHeader) {
        throw new UnsupportedOperationException(ABSENT);
    }

    public CompletableFuture<RemotingCommand> onBrokerCloseChannel(BrokerCloseChannelRequest requestHeader) {
        throw new UnsupportedOperationException(ABSENT);
    }

    public CompletableFuture<RemotingCommand> checkNotActiveBroker(CheckNotActiveBrokerRequest requestHeader) {
        throw new UnsupportedOperationException(ABSENT);
    }
}
