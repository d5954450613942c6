import org.apache.rocketmq.remoting.protocol.EpochEntry;
import org.apache.rocketmq.store.ha.autoswitch.EpochFileCache;

/**
 * A broker's epochFileCheckpoint written by RocketMQ's own EpochFileCache (through its
 * CheckpointFile), as AutoSwitchHAService.changeToMaster appends to it. Args: the file's
 * path, then EPOCH-STARTOFFSET pairs; prints, per pair, whether appendEntry took it.
 * Used by tests/java/test_rocketmq_controller_java.py.
 */
public class EpochFileWriter {
    public static void main(String[] args) {
        EpochFileCache cache = new EpochFileCache(args[0]);
        cache.initCacheFromFile();
        for (int i = 1; i < args.length; i++) {
            String[] pair = args[i].split("-");
            System.out.println(cache.appendEntry(new EpochEntry(Integer.parseInt(pair[0]), Long.parseLong(pair[1]))));
        }
    }
}
