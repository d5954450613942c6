import com.beust.jcommander.JCommander;
import io.openmessaging.storage.dledger.DLedgerConfig;
import io.openmessaging.storage.dledger.DLedgerServer;

/**
 * DLedger 0.2.7's server as {@code BossCommand server} starts it (same options), with data files
 * of the size given by {@code -Ddledger.dataFileSize=BYTES}: DLedgerConfig's
 * mappedFileSizeForEntryData, which a RocketMQ broker sets from mappedFileSizeCommitLog and
 * DLedger's command line does not offer. Used by tests/java/test_follower_filesize_java.py.
 */
public class DLedgerFileSize {
    public static void main(String[] args) {
        DLedgerConfig config = new DLedgerConfig();
        JCommander.newBuilder().addObject(config).build().parse(args);
        config.setMappedFileSizeForEntryData(Integer.parseInt(System.getProperty("dledger.dataFileSize")));
        final DLedgerServer server = new DLedgerServer(config);
        server.startup();
        Runtime.getRuntime().addShutdownHook(new Thread(server::shutdown, "ShutdownHook"));
    }
}
