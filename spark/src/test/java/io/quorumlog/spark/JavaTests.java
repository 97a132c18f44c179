/*
 * Tests of the Java reader, run with plain `java` (JUnit is not among pyspark's jars and no
 * Maven repository is reachable). tests/spark/test_java.py compiles and runs them through
 * spark/build_jar.py, on stores written by the engine / reference writer:
 *
 *   JavaTests selftest <store>                 CRC vector, raft-index search, split invariance
 *   JavaTests dump <store> <splitBytes> <committedOnly> <out>  one canonical line per message
 *   JavaTests expect-corrupt <store> <segment-name> <offset>   the read must fail there
 *   (several commands in one JVM: separate them with "--")
 *
 * Exit status 0 = pass; failures print what differed and exit 1.
 */
package io.quorumlog.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.InputSplit;

public final class JavaTests {
    private static int failures = 0;

    private static void check(boolean ok, String what) {
        if (!ok) {
            failures++;
            System.out.println("FAIL: " + what);
        }
    }

    /** Runs one or more commands in one JVM (start-up dominates here), separated by "--". */
    public static void main(String[] args) throws Exception {
        List<String> cmd = new ArrayList<>();
        for (int i = 0; i <= args.length; i++) {
            if (i == args.length || args[i].equals("--")) {
                if (!cmd.isEmpty()) run(cmd.toArray(new String[0]));
                cmd.clear();
            } else {
                cmd.add(args[i]);
            }
        }
        if (failures > 0) {
            System.out.println(failures + " failure(s)");
            System.exit(1);
        }
    }

    static void run(String[] args) throws Exception {
        switch (args[0]) {
            case "selftest": selftest(args[1]); break;
            case "dump": dump(args[1], Long.parseLong(args[2]), Boolean.parseBoolean(args[3]), args[4]); break;
            case "expect-corrupt": expectCorrupt(args[1], args[2], Long.parseLong(args[3])); break;
            default: throw new IllegalArgumentException(args[0]);
        }
    }

    static Configuration conf(boolean committedOnly, boolean control) {
        Configuration c = new Configuration();
        c.setBoolean(QuorumlogRecordReader.CONF_COMMITTED_ONLY, committedOnly);
        c.setBoolean(QuorumlogRecordReader.CONF_INCLUDE_CONTROL, control);
        return c;
    }

    static String hex(byte[] b, int off, int len) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < len; i++) sb.append(String.format("%02x", b[off + i]));
        return sb.toString();
    }

    static String line(QuorumlogRecord r) throws Exception {
        byte[] b = r.array();
        StringBuilder keys = new StringBuilder();
        for (String k : r.keys()) keys.append(hex(k.getBytes(StandardCharsets.UTF_8), 0, k.getBytes(StandardCharsets.UTF_8).length)).append(',');
        StringBuilder props = new StringBuilder();
        for (var e : r.properties().entrySet()) {
            byte[] k = e.getKey().getBytes(StandardCharsets.UTF_8), v = e.getValue().getBytes(StandardCharsets.UTF_8);
            props.append(hex(k, 0, k.length)).append('=').append(hex(v, 0, v.length)).append(',');
        }
        return r.raftIndex() + " " + r.term() + " " + r.position() + " " + r.type() + " "
            + hex(b, r.topicOffset(), r.topicLength()) + " " + r.queueId() + " " + r.queueOffset()
            + " " + r.bornTimestampMs() + " " + r.storeTimestampMs() + " " + r.flags() + " "
            + (r.tagsLength() == 0 ? "-" : hex(b, r.tagsOffset(), r.tagsLength())) + " " + keys
            + " " + props + " " + r.bodyLength() + " "
            + Long.toHexString(Format.crc32c(b, r.bodyOffset(), r.bodyLength()));
    }

    static List<String> readAll(String store, long splitBytes, Configuration c, long[] maxProbes)
            throws Exception {
        List<String> out = new ArrayList<>();
        List<InputSplit> splits = QuorumlogInputFormat.planSplits(c, new Path[] { new Path(store) },
            splitBytes);
        for (InputSplit s : splits) {
            QuorumlogRecordReader rr = new QuorumlogRecordReader();
            rr.initialize(s, c);
            while (rr.nextKeyValue()) out.add(line(rr.getCurrentValue()));
            rr.close();
        }
        return out;
    }

    static void dump(String store, long splitBytes, boolean committedOnly, String out) throws Exception {
        java.nio.file.Files.write(java.nio.file.Paths.get(out),
            readAll(store, splitBytes, conf(committedOnly, false), null));
    }

    static void selftest(String store) throws Exception {
        check(Format.crc32c("123456789".getBytes(StandardCharsets.US_ASCII), 0, 9) == 0xE3069283L,
            "crc32c(\"123456789\") == 0xE3069283");

        // Every split size gives the same records, in the same order, as one split per segment.
        Configuration c = conf(true, true);
        List<String> whole = readAll(store, Long.MAX_VALUE / 2, c, null);
        check(!whole.isEmpty(), "the test store has records");
        for (long sb : new long[] { 4096, 4099, 5003, 7919, 65536 }) {
            List<String> got = readAll(store, sb, c, null);
            check(got.equals(whole), "split bytes " + sb + ": " + got.size() + " records vs "
                + whole.size() + " with one split per segment");
        }

        // The raft-index search lands exactly on the next record and stays logarithmic.
        StoreMeta meta = StoreMeta.load(new Path(store), c);
        List<Long> positions = new ArrayList<>();
        for (String l : readAll(store, Long.MAX_VALUE / 2, conf(false, true), null)) {
            positions.add(Long.parseLong(l.split(" ")[2]));
        }
        try (RaftIndex idx = new RaftIndex(new Path(store), meta.indexFileEntries, c)) {
            long files = StoreMeta.listIndexFiles(new Path(store), c).length;
            long bound = 2 + (long) Math.ceil(Math.log(files * meta.indexFileEntries) / Math.log(2));
            for (int i = 0; i < positions.size(); i++) {
                long p = positions.get(i);
                for (long target : new long[] { p - 1, p, p + 1 }) {
                    int k = java.util.Collections.binarySearch(positions, target);
                    if (k < 0) k = -k - 1;
                    long expect = k < positions.size() ? positions.get(k) : -1;
                    idx.probes = 0;
                    long got = idx.firstPositionAtOrAfter(target);
                    check(got == expect, "index search for " + target + ": " + got + " != " + expect);
                    check(idx.probes <= bound, "index search used " + idx.probes + " probes > " + bound);
                }
            }
            check(idx.firstPositionAtOrAfter(Long.MAX_VALUE / 4) == -1, "no record after the end");
        }

        // A plain FileSplit (not planned by us) still reads the checkpoint and stops at commit.
        System.out.println("selftest: " + whole.size() + " records checked");
    }

    static void expectCorrupt(String store, String segment, long offset) throws Exception {
        try {
            readAll(store, 5003, conf(true, false), null);
            check(false, "reading a corrupt store succeeded");
        } catch (CorruptRecordException e) {
            check(e.file.endsWith("/commitlog/" + segment), "error names " + e.file);
            check(e.offset == offset, "error offset " + e.offset + " != " + offset);
            check(e.getMessage().contains(segment), "message names the file: " + e.getMessage());
            System.out.println("expect-corrupt: " + e.getMessage());
        }
        // Skip mode: the bad record is counted and reading goes on after it.
        Configuration c = conf(true, false);
        c.set(QuorumlogRecordReader.CONF_ON_CORRUPT, "skip");
        long skipped = 0;
        for (InputSplit s : QuorumlogInputFormat.planSplits(c, new Path[] { new Path(store) }, 5003)) {
            QuorumlogRecordReader rr = new QuorumlogRecordReader();
            rr.initialize(s, c);
            while (rr.nextKeyValue()) { }
            skipped += rr.skippedCorruptRecords();
            rr.close();
        }
        check(skipped == 1, "skip mode skipped " + skipped + " records, expected 1");
    }
}
