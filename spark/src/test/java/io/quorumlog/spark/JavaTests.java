/*
 * Tests of the Java reader, run with plain `java` (JUnit is not among pyspark's jars and no
 * Maven repository is reachable). tests/spark/test_java.py compiles and runs them through
 * spark/build_jar.py, on stores written by the engine / reference writer:
 *
 *   JavaTests selftest <store>                 CRC vector, raft-index search, split invariance
 *   JavaTests dump <store> <splitBytes> <committedOnly> <out>  one canonical line per message
 *   JavaTests expect-corrupt <store> <segment-name> <offset>   the read must fail there
 *   JavaTests cq-ends <dir>                    StoreIndexes.ends (binary search) == read()
 *   JavaTests positions-gone <store-copy>      segment 0 recycled under a PositionsReader
 *   JavaTests cq-reuse <dir>                   a listing shared by slices; kept mappings
 *                                              revalidated (file rewritten, replaced, added)
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
            case "cq-ends": cqEnds(args[1]); break;
            case "cq-reuse": cqReuse(args[1]); break;
            case "positions-gone": positionsGone(args[1]); break;
            case "cq-tags": cqTags(args[1], Long.parseLong(args[2])); break;
            case "merge": merge(Long.parseLong(args[1])); break;
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

    /**
     * Segment 0 of a store (a copy: it is changed) recycled under a PositionsReader reading
     * its records through the shared mapping, done as the store does it: the file renamed to
     * <start>.free, then into place as the next new segment and overwritten (here with
     * segment 1's bytes: records of other positions). The read must fail with
     * SegmentGoneException naming segment 0; the new name must map the current bytes.
     */
    static void positionsGone(String store) throws Exception {
        Configuration c = conf(true, false);
        StoreMeta meta = StoreMeta.load(new Path(store), c);
        long size = meta.segmentSizeBytes, committed = meta.committedPosition;
        java.nio.file.Path dir = java.nio.file.Paths.get(store, "commitlog");
        java.nio.file.Path seg0 = dir.resolve(Format.segmentName(0));
        List<Long> ps = new ArrayList<>();
        QuorumlogRecordReader rr = new QuorumlogRecordReader();
        rr.initialize(new QuorumlogSplit(new Path(seg0.toString()), 0, size, new String[0],
            committed, committed, meta.indexFileEntries), c);
        while (rr.nextKeyValue()) ps.add(rr.getCurrentKey().get());
        rr.close();
        PositionsReader r = new PositionsReader(new PositionsReader.Part(store, size, 0,
            committed, null, ps.stream().mapToLong(Long::longValue).toArray(), "gone"), c);
        check(ps.size() > 2 && r.next(), "positions-gone: segment 0's first record read");
        long next = 0;
        for (java.io.File f : dir.toFile().listFiles()) {
            if (Format.isNumberedName(f.getName())) next = Math.max(next, Long.parseLong(f.getName()) + size);
        }
        java.nio.file.Path free = dir.resolve(Format.segmentName(0) + ".free");
        java.nio.file.Path reused = dir.resolve(Format.segmentName(next));
        java.nio.file.Files.move(seg0, free);
        java.nio.file.Files.move(free, reused);
        byte[] now = java.nio.file.Files.readAllBytes(dir.resolve(Format.segmentName(size)));
        try (java.nio.channels.FileChannel ch = java.nio.channels.FileChannel.open(reused,
                java.nio.file.StandardOpenOption.WRITE)) {
            ch.write(java.nio.ByteBuffer.wrap(now), 0);
        }
        try {
            while (r.next()) { }
            check(false, "positions-gone: reading a recycled segment succeeded");
        } catch (SegmentGoneException e) {
            check(e.file.endsWith("/commitlog/" + Format.segmentName(0))
                && e.getMessage().contains("deleted or reused"), "positions-gone: " + e.getMessage());
            System.out.println("positions-gone: " + e.getMessage());
        }
        r.close();
        PositionedFile pf = PositionedFile.open(
            org.apache.hadoop.fs.FileSystem.getLocal(c).getRawFileSystem(), new Path(reused.toString()));
        java.nio.ByteBuffer m = pf.map();
        byte[] got = new byte[now.length];
        m.get(got);
        pf.close();
        check(java.util.Arrays.equals(got, now), "positions-gone: the reused name maps its current bytes");
    }

    /** One consume-queue file of `entries` 20-byte slots whose offsets [used0, used1) hold
     *  entries (position 1000 + 100 * offset, size 100); the rest zero. */
    private static void cqFile(java.nio.file.Path dir, long first, int entries, long used0,
            long used1) throws java.io.IOException {
        java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(entries * StoreIndexes.CQ_ENTRY)
            .order(java.nio.ByteOrder.LITTLE_ENDIAN);
        for (long o = Math.max(first, used0); o < Math.min(first + entries, used1); o++) {
            int at = (int) (o - first) * StoreIndexes.CQ_ENTRY;
            b.putLong(at, 1000 + 100 * o);
            b.putInt(at + 8, 100);
            b.putLong(at + 12, 7);
        }
        java.nio.file.Files.createDirectories(dir);
        java.nio.file.Files.write(dir.resolve(Format.segmentName(first)), b.array());
    }

    /**
     * StoreIndexes.ends (binary search over single entries) against StoreIndexes.read (every
     * entry) on queues of one and of three files, starting at offset 0 or after holes, for a
     * grid of limits, first positions and offset ranges: same count, first and last.
     */
    static void cqEnds(String tmp) throws Exception {
        java.nio.file.Path root = java.nio.file.Paths.get(tmp, "cq-ends");
        java.nio.file.Path cq = root.resolve("consumequeue").resolve("t");
        cqFile(cq.resolve("0"), 0, 200, 0, 100);                  // one file, used [0, 100)
        cqFile(cq.resolve("1"), 0, 64, 0, 150);                   // three files, [0, 150)
        cqFile(cq.resolve("1"), 64, 64, 0, 150);
        cqFile(cq.resolve("1"), 128, 64, 0, 150);
        cqFile(cq.resolve("2"), 0, 64, 70, 150);                  // holes first: [70, 150)
        cqFile(cq.resolve("2"), 64, 64, 70, 150);
        cqFile(cq.resolve("2"), 128, 64, 70, 150);
        cqFile(cq.resolve("3"), 0, 64, 0, 0);                     // empty
        Path r = new Path(root.toUri());
        org.apache.hadoop.fs.FileSystem fs = r.getFileSystem(new Configuration());
        long[] poss = { 0, 1000, 1001, 1100, 5000, 7900, 8000, 8100, 15900, 16000, 99999 };
        long[][] offs = { { 0, Long.MAX_VALUE }, { 10, 60 }, { 65, 140 }, { 120, 300 } };
        int cases = 0;
        for (int q = 0; q < 4; q++) {
            for (long minPos : poss) {
                for (long limit : poss) {
                    for (long[] o : offs) {
                        StoreIndexes.CqRange cr = new StoreIndexes.CqRange("t", q, o[0], o[1],
                            minPos, limit, null);
                        StoreIndexes.Entries e = StoreIndexes.read(fs, r, cr);
                        StoreIndexes.Ends got = StoreIndexes.ends(fs, r, cr);
                        String what = "cq-ends q" + q + " minPos " + minPos + " limit " + limit
                            + " offsets " + o[0] + ".." + o[1];
                        check(got.count == e.n, what + ": count " + got.count + " != " + e.n);
                        if (e.n > 0 && got.count == e.n) {
                            check(got.offsets[0] == e.offsets[0]
                                && got.offsets[1] == e.offsets[e.n - 1]
                                && got.positions[0] == e.positions[0]
                                && got.positions[1] == e.positions[e.n - 1], what + ": ends");
                        }
                        cases++;
                    }
                }
            }
        }
        check(cases == 4 * poss.length * poss.length * offs.length, "cq-ends ran every case");
    }

    /** Offsets, count and first/last position of the entries of queue t/0 in [a, b). */
    private static String cqRead(org.apache.hadoop.fs.FileSystem fs, Path r, long a, long b,
            StoreIndexes.Listing l) throws Exception {
        StoreIndexes.Entries e = StoreIndexes.read(fs, r,
            new StoreIndexes.CqRange("t", 0, 0, Long.MAX_VALUE, a, b, null), l);
        return e.n == 0 ? "0" : e.n + " " + e.positions[0] + ".." + e.positions[e.n - 1];
    }

    /**
     * The consume-queue files a plan's slices share (StoreIndexes.Listing: listed once, one
     * mapping) and the JVM's kept mappings (PositionedFile.cachedMap): the slices' entries
     * add up to the whole queue's; a kept mapping is used only for the file (key) and length
     * a new listing reads, so a file rewritten in place, replaced by a rename, grown, or a
     * file added are all seen by the next read, never a stale copy.
     */
    static void cqReuse(String tmp) throws Exception {
        java.nio.file.Path root = java.nio.file.Paths.get(tmp, "cq-reuse");
        java.nio.file.Path dir = root.resolve("consumequeue").resolve("t").resolve("0");
        cqFile(dir, 0, 64, 0, 40);                      // positions 1000 + 100 o, o < 40
        Path r = new Path(root.toUri());
        org.apache.hadoop.fs.FileSystem fs = r.getFileSystem(new Configuration());
        StoreIndexes.CqRange all = new StoreIndexes.CqRange("t", 0, 0, Long.MAX_VALUE, 0,
            Long.MAX_VALUE, null);
        check(cqRead(fs, r, 0, Long.MAX_VALUE, new StoreIndexes.Listing()).equals("40 1000..4900"),
            "cq-reuse: the whole queue");
        StoreIndexes.Listing shared = new StoreIndexes.Listing();
        int n = 0;
        for (long a = 0; a < 6000; a += 1500) {          // four slices, one listing
            String got = cqRead(fs, r, a, a + 1500, shared);
            n += Integer.parseInt(got.split(" ")[0]);
        }
        check(n == 40, "cq-reuse: slices sharing a listing hold " + n + " entries, not 40");
        check(shared.files(fs, r, all) == shared.files(fs, r, all),
            "cq-reuse: a listing lists a queue once");
        StoreIndexes.CqFile f = new StoreIndexes.Listing().files(fs, r, all).get(0);
        check(f.key != null && PositionedFile.cachedMap(f.file, f.key, f.len) != null,
            "cq-reuse: a new listing of an unchanged file finds its kept mapping");

        cqFile(dir, 0, 64, 0, 50);                      // rewritten in place: same file
        check(cqRead(fs, r, 0, Long.MAX_VALUE, new StoreIndexes.Listing()).equals("50 1000..5900"),
            "cq-reuse: a file rewritten in place is read anew");

        java.nio.file.Path side = root.resolve("side");
        cqFile(side, 0, 64, 0, 64);                     // replaced by a rename: another file
        java.nio.file.Files.move(side.resolve(Format.segmentName(0)),
            dir.resolve(Format.segmentName(0)), java.nio.file.StandardCopyOption.ATOMIC_MOVE,
            java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        StoreIndexes.CqFile g = new StoreIndexes.Listing().files(fs, r, all).get(0);
        check(!g.key.equals(f.key) && PositionedFile.cachedMap(g.file, g.key, g.len) == null,
            "cq-reuse: a replaced file has no kept mapping");
        check(cqRead(fs, r, 0, Long.MAX_VALUE, new StoreIndexes.Listing()).equals("64 1000..7300"),
            "cq-reuse: a replaced file is read anew");

        cqFile(dir, 64, 64, 0, 100);                    // a file added
        check(cqRead(fs, r, 0, Long.MAX_VALUE, new StoreIndexes.Listing()).equals("100 1000..10900"),
            "cq-reuse: an added file is read");

        java.nio.file.Files.delete(dir.resolve(Format.segmentName(64)));
        cqFile(dir, 0, 128, 0, 110);                    // grown in place: another length
        check(cqRead(fs, r, 0, Long.MAX_VALUE, new StoreIndexes.Listing()).equals("110 1000..11900"),
            "cq-reuse: a grown file is read anew");
        System.out.println("cq-reuse: done");
    }

    /**
     * StoreIndexes.read against a model of the entries written, on seeded random queues:
     * one to three files each (a file's entries cross scanOneTag's chunks of
     * StoreIndexes.TAG_CHUNK), some with holes first (the entry-by-entry scanAll) or unused
     * slots after the last entry, tags from a few hashes; for random offset and position
     * ranges and one tag (the chunked one-tag pass), two tags (the per-entry pass) or none:
     * the same entries, in order (every other read through one Listing of the queues, as
     * the slices of a plan read them).
     */
    static void cqTags(String tmp, long seed) throws Exception {
        java.util.Random rnd = new java.util.Random(seed);
        java.nio.file.Path root = java.nio.file.Paths.get(tmp, "cq-tags-" + seed);
        java.nio.file.Path cq = root.resolve("consumequeue").resolve("t");
        int queues = 6, cases = 0, chunked = 0;
        long[][] modelPos = new long[queues][];
        int[][] modelTag = new int[queues][];
        long[] tagHash = { 0x1111L, -7L, 0x7FFF_FFFF_FFFF_FFFFL, 42L };
        long nextPos = 1000;
        for (int q = 0; q < queues; q++) {
            int files = 1 + rnd.nextInt(3);
            int per = StoreIndexes.TAG_CHUNK / 2 + rnd.nextInt(3 * StoreIndexes.TAG_CHUNK);
            int slots = files * per;
            int holes = q % 3 == 2 ? 1 + rnd.nextInt(per + 10) : 0;     // holes first
            int used = Math.max(holes, slots - rnd.nextInt(per));         // unused tail
            modelPos[q] = new long[slots];
            modelTag[q] = new int[slots];
            java.nio.ByteBuffer[] bufs = new java.nio.ByteBuffer[files];
            for (int f = 0; f < files; f++) {
                bufs[f] = java.nio.ByteBuffer.allocate(per * StoreIndexes.CQ_ENTRY)
                    .order(java.nio.ByteOrder.LITTLE_ENDIAN);
            }
            for (int o = holes; o < used; o++) {
                nextPos += 1 + rnd.nextInt(300);
                modelPos[q][o] = nextPos;
                modelTag[q][o] = rnd.nextInt(tagHash.length);
                java.nio.ByteBuffer b = bufs[o / per];
                int at = (o % per) * StoreIndexes.CQ_ENTRY;
                b.putLong(at, nextPos);
                b.putInt(at + 8, 100 + o % 7);
                b.putLong(at + 12, tagHash[modelTag[q][o]]);
            }
            java.nio.file.Path dir = cq.resolve(Integer.toString(q));
            java.nio.file.Files.createDirectories(dir);
            for (int f = 0; f < files; f++) {
                java.nio.file.Files.write(dir.resolve(Format.segmentName((long) f * per)),
                    bufs[f].array());
            }
        }
        Path r = new Path(root.toUri());
        org.apache.hadoop.fs.FileSystem fs = r.getFileSystem(new Configuration());
        StoreIndexes.Listing shared = new StoreIndexes.Listing();
        for (int i = 0; i < 300; i++) {
            int q = rnd.nextInt(queues);
            long a = 900 + (long) (rnd.nextDouble() * (nextPos - 800));
            long b = rnd.nextInt(4) == 0 ? Long.MAX_VALUE : a + (long) (rnd.nextDouble() * (nextPos - a + 200));
            long offLo = rnd.nextInt(3) == 0 ? rnd.nextInt(modelPos[q].length + 5) : 0;
            long offHi = rnd.nextInt(3) == 0 ? offLo + rnd.nextInt(modelPos[q].length + 5) : Long.MAX_VALUE;
            int kind = rnd.nextInt(3);          // 0: one tag, 1: two tags, 2: any tag
            int t0 = rnd.nextInt(tagHash.length), t1 = (t0 + 1) % tagHash.length;
            long[] tags = kind == 0 ? new long[] { tagHash[t0] } : kind == 1
                ? new long[] { Math.min(tagHash[t0], tagHash[t1]), Math.max(tagHash[t0], tagHash[t1]) }
                : null;
            // every other case through one listing of the seed's queues (as a plan's slices)
            StoreIndexes.CqRange range = new StoreIndexes.CqRange("t", q, offLo, offHi, a, b, tags);
            StoreIndexes.Entries got = i % 2 == 0 ? StoreIndexes.read(fs, r, range)
                : StoreIndexes.read(fs, r, range, shared);
            List<long[]> want = new ArrayList<>();
            for (int o = 0; o < modelPos[q].length; o++) {
                long p = modelPos[q][o];
                if (p == 0 || o < offLo || o > offHi || p < a || p >= b) continue;
                if (kind != 2 && modelTag[q][o] != t0 && (kind == 0 || modelTag[q][o] != t1)) continue;
                want.add(new long[] { p, 100 + o % 7, o });
            }
            String what = "cq-tags seed " + seed + " case " + i + " q" + q + " kind " + kind
                + " positions [" + a + ", " + b + ") offsets " + offLo + ".." + offHi;
            boolean same = got.n == want.size();
            for (int k = 0; same && k < got.n; k++) {
                same = got.positions[k] == want.get(k)[0] && got.sizes[k] == want.get(k)[1]
                    && got.offsets[k] == want.get(k)[2];
            }
            check(same, what + ": " + got.n + " entries, expected " + want.size());
            if (kind == 0 && want.size() > StoreIndexes.TAG_CHUNK / tagHash.length) chunked++;
            cases++;
        }
        check(cases == 300 && chunked > 0, "cq-tags ran every case (" + chunked
            + " one-tag reads over more than one chunk)");
        System.out.println("cq-tags: seed " + seed + ", " + cases + " cases");
    }

    /**
     * PositionsReader.merge against a sort by position, on seeded random ranges whose
     * positions interleave in runs (as a batch per queue writes them) or one by one.
     */
    static void merge(long seed) {
        java.util.Random rnd = new java.util.Random(seed);
        for (int c = 0; c < 200; c++) {
            int ranges = rnd.nextInt(12);
            StoreIndexes.Entries[] es = new StoreIndexes.Entries[ranges];
            for (int r = 0; r < ranges; r++) es[r] = new StoreIndexes.Entries();
            int total = rnd.nextInt(4000), run = 1 + rnd.nextInt(60);
            long p = rnd.nextInt(1000);
            int r = 0;
            List<long[]> all = new ArrayList<>();
            for (int i = 0; ranges > 0 && i < total; i++) {
                if (i % run == 0) r = rnd.nextInt(ranges);
                p += 1 + rnd.nextInt(500);
                es[r].add(p, 96 + rnd.nextInt(200), es[r].n);
                all.add(new long[] { p, es[r].sizes[es[r].n - 1], es[r].n - 1, r });
            }
            int n = all.size();
            long[] pos = new long[n], off = new long[n];
            int[] size = new int[n], of = new int[n];
            PositionsReader.merge(es, pos, size, off, of);
            boolean same = true;
            for (int k = 0; same && k < n; k++) {
                long[] w = all.get(k);   // written in position order
                same = pos[k] == w[0] && size[k] == w[1] && off[k] == w[2] && of[k] == w[3];
            }
            check(same, "merge seed " + seed + " case " + c + " (" + ranges + " ranges, "
                + n + " entries, runs of " + run + ")");
        }
        System.out.println("merge: seed " + seed + ", 200 cases");
    }
}
