/*
 * Test and benchmark harness of dledgerctl (not part of RocketMQ): RocketMQ's own message
 * decoder (org.apache.rocketmq.common.message.MessageDecoder, compiled from RocketMQ's sources
 * by tests/support/javarocketmq.py) over every entry of a DLedger node directory: the reference side
 * of "decode a DLedger commit log".
 *
 * Usage: RocketMQDecodeAll <nodeDir> [warmupPasses=1] [timedPasses=1]
 *
 * <nodeDir>/data holds DLedger's data files, each named by the offset of its first byte (all
 * digits); an entry never spans two files. Entry layout (big-endian): magic i32, size i32
 * (header and body), index i64, term i64, pos i64, channel i32, chainCrc i32, bodyCrc i32,
 * bodySize i32, then the body: one RocketMQ message. Magic -1 marks the padding at a file's
 * end; magic 0 with size 0 is space never written.
 *
 * The files are mapped read-only and paged in before anything is timed; then the warm-up
 * passes, then the timed passes. A pass walks the entry headers of every file and hands each
 * body to MessageDecoder.decode(buffer, readBody=true, deCompressBody=false); only the pass is
 * inside System.nanoTime. Prints one JSON line: messages, failed (bodies decode gave up on),
 * bytes (entry bytes walked), body_bytes, files, seconds (fastest timed pass), passes (each
 * timed pass), checksum (queue offsets + physical offsets + body lengths of what was decoded,
 * so the work cannot be dropped).
 */

import java.io.File;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;

public class RocketMQDecodeAll {

    static final int HEADER = 48;
    static final int BLANK_MAGIC = -1;

    static final class Pass {
        long messages;
        long failed;
        long bytes;
        long bodyBytes;
        long checksum;
    }

    static Pass pass(List<ByteBuffer> files) {
        Pass p = new Pass();
        for (ByteBuffer file : files) {
            ByteBuffer buf = file.duplicate().order(ByteOrder.BIG_ENDIAN);
            int limit = buf.capacity();
            int pos = 0;
            while (pos + HEADER <= limit) {
                int magic = buf.getInt(pos);
                int size = buf.getInt(pos + 4);
                if (magic == BLANK_MAGIC || (magic == 0 && size == 0)) {
                    break; // padding to the file's end, or never written
                }
                if (size < HEADER || pos + size > limit) {
                    throw new IllegalStateException("bad entry at file offset " + pos + ": magic=" + magic
                        + " size=" + size);
                }
                int bodySize = buf.getInt(pos + 44);
                buf.limit(pos + HEADER + bodySize);
                buf.position(pos + HEADER);
                MessageExt m = MessageDecoder.decode(buf, true, false);
                buf.limit(limit);
                if (m == null) {
                    p.failed++;
                } else {
                    p.messages++;
                    p.checksum += m.getQueueOffset() + m.getCommitLogOffset() + (m.getBody() == null ? 0
                        : m.getBody().length);
                }
                p.bytes += size;
                p.bodyBytes += bodySize;
                pos += size;
            }
        }
        return p;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: RocketMQDecodeAll <nodeDir> [warmupPasses] [timedPasses]");
            System.exit(2);
        }
        int warmup = args.length > 1 ? Integer.parseInt(args[1]) : 1;
        int timed = Math.max(1, args.length > 2 ? Integer.parseInt(args[2]) : 1);
        File dataDir = new File(args[0], "data");
        File[] names = dataDir.listFiles((d, n) -> n.matches("\\d+"));
        if (names == null) {
            System.err.println("no data directory: " + dataDir);
            System.exit(2);
        }
        Arrays.sort(names, (a, b) -> Long.compare(Long.parseLong(a.getName()), Long.parseLong(b.getName())));
        List<ByteBuffer> files = new ArrayList<>();
        for (File f : names) {
            try (RandomAccessFile raf = new RandomAccessFile(f, "r"); FileChannel ch = raf.getChannel()) {
                MappedByteBuffer map = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size());
                map.load();
                files.add(map);
            }
        }
        Pass last = null;
        for (int i = 0; i < warmup; i++) {
            last = pass(files);
        }
        double[] seconds = new double[timed];
        long checksum = 0;
        for (int i = 0; i < timed; i++) {
            long t0 = System.nanoTime();
            Pass p = pass(files);
            seconds[i] = (System.nanoTime() - t0) / 1e9;
            if (last != null && (p.messages != last.messages || p.checksum != last.checksum)) {
                throw new IllegalStateException("passes disagree");
            }
            last = p;
            checksum += p.checksum;
        }
        double best = Arrays.stream(seconds).min().getAsDouble();
        StringBuilder sb = new StringBuilder();
        sb.append("{\"messages\": ").append(last.messages)
            .append(", \"failed\": ").append(last.failed)
            .append(", \"bytes\": ").append(last.bytes)
            .append(", \"body_bytes\": ").append(last.bodyBytes)
            .append(", \"files\": ").append(files.size())
            .append(", \"seconds\": ").append(best)
            .append(", \"passes\": ").append(Arrays.toString(seconds))
            .append(", \"checksum\": ").append(last.checksum)
            .append(", \"checksum_all_passes\": ").append(checksum)
            .append("}");
        System.out.println(sb);
        System.out.flush();
    }
}
