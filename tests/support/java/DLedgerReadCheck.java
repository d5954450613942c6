/*
 * Test harness of dledgerctl (not part of DLedger): opens a node directory with the real
 * DLedger file store (io.openmessaging.storage.dledger.store.file.DLedgerMmapFileStore),
 * compiled from the DLedger sources of a given tag by tests/java/test_dledger_java.py, and prints
 * what DLedger recovered in the format of the reference fixtures' manifest.txt:
 *
 *   END <ledgerEndIndex> <ledgerEndTerm> BEGIN <ledgerBeginIndex> COMMITTED <committedIndex>
 *   <index> <term> <pos> <size> <sha256(body)>      (one line per entry, read with store.get)
 *
 * Usage:
 *   read  <storeBaseDir> <selfId> <dataFileSize> <indexFileSize> [--magic] [--meta]
 *   write <storeBaseDir> <selfId> <dataFileSize> <indexFileSize> <specFile> [--magic] [--meta]
 *
 * "read" does what DLedgerServer startup does to the store (load(), then recover()) and
 * prints the manifest; "--magic" appends each entry's magic as a sixth column; "--meta"
 * adds a last line "CURRTERM <term> VOTEFOR <id or ->" with what MemberState loaded from
 * the currterm file.
 * "write" opens (load + recover) the same way, then appends every entry of specFile through
 * DLedgerMmapFileStore.appendAsLeader (lines "<term> <hex body>", "-" for an empty body;
 * a line "commit <index>" sets the committed index), flushes, writes the checkpoint (DLedger
 * 0.2.x only: what its shutdown() does), records a vote for itself (MemberState persists the
 * currterm file) and prints the manifest of what it wrote.
 *
 * The same source compiles against DLedger 0.2.x and 0.3+/master: the few calls whose names
 * changed between them (ledger begin index, committed index) go through reflection.
 * Log output of DLedger goes to stderr; stdout carries only the manifest.
 */

import io.openmessaging.storage.dledger.DLedgerConfig;
import io.openmessaging.storage.dledger.MemberState;
import io.openmessaging.storage.dledger.entry.DLedgerEntry;
import io.openmessaging.storage.dledger.store.file.DLedgerMmapFileStore;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.List;

public class DLedgerReadCheck {

    static Object call(Object target, String name, Object... args) throws Exception {
        for (Method m : target.getClass().getDeclaredMethods()) {
            if (m.getName().equals(name) && m.getParameterCount() == args.length) {
                m.setAccessible(true);
                try {
                    return m.invoke(target, args);
                } catch (InvocationTargetException e) {
                    Throwable cause = e.getCause();
                    if (cause instanceof Exception) {
                        throw (Exception) cause;
                    }
                    throw e;
                }
            }
        }
        return NO_METHOD;
    }

    static final Object NO_METHOD = new Object();

    static long beginIndex(DLedgerMmapFileStore store) throws Exception {
        Object begin = call(store, "getLedgerBeginIndex");            // DLedger 0.2.x
        if (begin != NO_METHOD) {
            return (Long) begin;
        }
        Object before = call(store, "getLedgerBeforeBeginIndex");     // DLedger 0.3+ / master
        if (before != NO_METHOD) {
            long b = (Long) before;
            // an empty log reports -1 like 0.2.x does
            return store.getLedgerEndIndex() < 0 ? -1 : b + 1;
        }
        throw new IllegalStateException("no ledger begin index getter");
    }

    static long committedIndex(DLedgerMmapFileStore store, MemberState state) throws Exception {
        Object c = call(store, "getCommittedIndex");                  // 0.2.x: the store, from checkpoint
        if (c == NO_METHOD) {
            c = call(state, "getCommittedIndex");                     // 0.3+: volatile, in MemberState
        }
        return (Long) c;
    }

    static void setCommitted(DLedgerMmapFileStore store, MemberState state, long index) throws Exception {
        if (call(store, "updateCommittedIndex", state.currTerm(), index) == NO_METHOD) {
            call(state, "leaderUpdateCommittedIndex", state.currTerm(), index);
        }
    }

    static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            sb.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
        }
        return sb.toString();
    }

    static byte[] unhex(String s) {
        if (s.equals("-")) {
            return new byte[0];
        }
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    static void printManifest(DLedgerMmapFileStore store, MemberState state, boolean withMagic) throws Exception {
        StringBuilder out = new StringBuilder();
        long begin = beginIndex(store);
        long end = store.getLedgerEndIndex();
        out.append("END ").append(end).append(' ').append(store.getLedgerEndTerm())
            .append(" BEGIN ").append(begin).append(" COMMITTED ").append(committedIndex(store, state)).append('\n');
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        for (long i = Math.max(begin, 0); i <= end; i++) {
            DLedgerEntry e = store.get(i);
            byte[] body = e.getBody() == null ? new byte[0] : e.getBody();
            out.append(e.getIndex()).append(' ').append(e.getTerm()).append(' ').append(e.getPos()).append(' ')
                .append(e.getSize()).append(' ').append(hex(sha.digest(body)));
            if (withMagic) {
                out.append(' ').append(e.getMagic());
            }
            out.append('\n');
        }
        System.out.print(out);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5 || !(args[0].equals("read") || args[0].equals("write") || args[0].equals("purge"))) {
            System.err.println("usage: read|write|purge <storeBaseDir> <selfId> <dataFileSize> <indexFileSize> [specFile|reservedMs] [--magic]");
            System.exit(2);
        }
        String mode = args[0];
        boolean withMagic = false;
        boolean withMeta = false;
        for (String a : args) {
            withMagic |= a.equals("--magic");
            withMeta |= a.equals("--meta");
        }
        String selfId = args[2];
        DLedgerConfig config = new DLedgerConfig();
        config.setStoreBaseDir(args[1]);
        config.setSelfId(selfId);
        config.setGroup("default");
        config.setPeers(selfId + "-localhost:20911");
        config.setMappedFileSizeForEntryData(Integer.parseInt(args[3]));
        config.setMappedFileSizeForEntryIndex(Integer.parseInt(args[4]));

        MemberState state = new MemberState(config);   // reads currterm like DLedgerServer does
        DLedgerMmapFileStore store = new DLedgerMmapFileStore(config, state);
        // What DLedgerMmapFileStore.startup() does before it starts its flush and
        // clean-space threads (which would only get in the way of a one-shot check).
        store.load();
        store.recover();

        if (mode.equals("write")) {
            List<String> lines = Files.readAllLines(Paths.get(args[5]), StandardCharsets.US_ASCII);
            for (String line : lines) {
                line = line.trim();
                if (line.isEmpty()) {
                    continue;
                }
                String[] parts = line.split(" ");
                if (parts[0].equals("commit")) {
                    setCommitted(store, state, Long.parseLong(parts[1]));
                    continue;
                }
                long term = Long.parseLong(parts[0]);
                if (term != state.currTerm() || !state.isLeader()) {
                    state.setCurrTermForTest(term);
                    state.changeToLeader(term);
                }
                DLedgerEntry entry = new DLedgerEntry();
                entry.setBody(unhex(parts[1]));
                store.appendAsLeader(entry);
            }
            store.flush();
            call(store, "persistCheckPoint");    // what 0.2.x shutdown() does last; 0.3+ has no checkpoint
            state.setCurrVoteFor(selfId);         // persists currterm (currTerm, voteLeader)
        }
        if (mode.equals("purge")) {
            // What the clean-space service does once it is time to delete: data files (never
            // the last) last modified more than reservedMs ago go, oldest first, then the
            // ledger begin index moves to the new first file (0.2.x reviseLedgerBeginIndex,
            // 0.3+ reviseLedgerBeforeBeginIndex), which also drops the index files below it.
            int count = store.getDataFileList().deleteExpiredFileByTime(Long.parseLong(args[5]), 0, 0, false);
            if (count > 0) {
                Object r = call(store, "reviseLedgerBeginIndex");
                if (r == NO_METHOD) {
                    call(store, "reviseLedgerBeforeBeginIndex");
                }
            }
            System.err.println("purge deleted " + count + " data files");
        }
        printManifest(store, state, withMagic);
        if (withMeta) {
            String vote = state.currVoteFor();
            System.out.println("CURRTERM " + state.currTerm() + " VOTEFOR " + (vote == null ? "-" : vote));
            System.out.flush();
        }
        System.exit(0);   // no shutdown(): a reader must not change what it checks
    }
}
