/*
 * Plans a scan's partitions from what the store's indexes know, per store:
 *
 *  - key equality (keys[0] = k) -> the key index's positions for k in each topic the filter
 *    allows, for the stretch of log the key index covers; the rest of the committed log
 *    (before the first key-index file, after the last one's end position) is walked.
 *  - topic / queue_id / queue_offset / tags -> the consume-queue entries of the matching
 *    queues (offset range and tag hashes applied to the 20-byte entries; read by the tasks),
 *    below the checkpoint's dispatched position; the committed log after it is walked.
 *  - store_timestamp ranges -> the walk is cut to the positions between the first record
 *    stamped at or after the start and the first stamped after the end (raft-index search).
 *
 * Every walk is the segment RecordReader with the RecordFilter, clipped to log ranges, so an
 * index only ever narrows what is read; committed-only reads use the indexes, a read with
 * committedOnly=false walks the log as before.
 */
package io.quorumlog.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.spark.sql.connector.read.InputPartition;

final class IndexPlanner {
    private IndexPlanner() {}

    /** A consume-queue read is cut into slices of the log of at least this many bytes (or
     *  of the read's splitBytes option when it has one). */
    static final long MIN_SLICE_BYTES = 16L << 20;

    /** How the last plan read each store (tests and explain). */
    static final class Plan {
        final List<InputPartition> parts = new ArrayList<>();
        final List<String> how = new ArrayList<>();
    }

    /** perQueue: one partition per queue (PositionsReader.QueuePart, keyed by topic and
     *  queue) for the stores read through their consume queues. */
    static Plan plan(Configuration conf, Path[] roots, StoreMeta[] metas, RecordFilter filter,
            long splitBytes, int parallelism, boolean useIndexes, boolean perQueue)
            throws IOException {
        Plan plan = new Plan();
        for (int i = 0; i < roots.length; i++) {
            StoreMeta m = metas[i];
            boolean indexed = useIndexes && m.hasCheckpoint
                && StoreMeta.listIndexFiles(roots[i], conf).length > 0;
            if (indexed && filter.keys != null && planKeys(plan, conf, roots[i], m, filter,
                    splitBytes, parallelism)) {
                continue;
            } else if (indexed && filter.narrowsQueues() && m.dispatchedPosition > m.minPosition
                    && planQueues(plan, conf, roots[i], m, filter, splitBytes, parallelism,
                        perQueue)) {
                continue;
            } else {
                walk(plan, conf, roots[i], m, splitBytes, 0, Long.MAX_VALUE,
                    useIndexes);
                plan.how.add(roots[i] + ": log walk");
            }
        }
        return plan;
    }

    /** The consume-queue ranges of the queues the filter allows, positions in [from, limit). */
    private static List<StoreIndexes.CqRange> ranges(FileSystem fs, Path root, RecordFilter filter,
            long from, long limit, boolean withTags) throws IOException {
        List<StoreIndexes.CqRange> out = new ArrayList<>();
        for (String t : StoreIndexes.topics(fs, root)) {
            if (!filter.acceptsTopic(t)) continue;
            for (int q : StoreIndexes.queues(fs, root, t)) {
                if (!filter.acceptsQueue(q)) continue;
                out.add(new StoreIndexes.CqRange(t, q, Math.max(0, filter.offsetMin),
                    filter.offsetMax, from, limit, withTags ? filter.tagHashes : null));
            }
        }
        return out;
    }

    /** rs cut to positions [a, b). */
    private static StoreIndexes.CqRange[] within(List<StoreIndexes.CqRange> rs, long a, long b) {
        StoreIndexes.CqRange[] out = new StoreIndexes.CqRange[rs.size()];
        for (int i = 0; i < out.length; i++) {
            StoreIndexes.CqRange r = rs.get(i);
            out[i] = new StoreIndexes.CqRange(r.topic, r.queue, r.offLo, r.offHi, a, b,
                r.tagHashes);
        }
        return out;
    }

    private static boolean planQueues(Plan plan, Configuration conf, Path root, StoreMeta m,
            RecordFilter filter, long splitBytes, int parallelism, boolean perQueue)
            throws IOException {
        FileSystem fs = root.getFileSystem(conf);
        long limit = Math.min(m.dispatchedPosition, m.committedPosition);
        List<StoreIndexes.CqRange> rs = ranges(fs, root, filter, m.minPosition, limit, true);
        if (rs.isEmpty() && StoreIndexes.topics(fs, root).isEmpty()) return false;
        if (perQueue) {
            for (StoreIndexes.CqRange r : rs) {
                plan.parts.add(new PositionsReader.QueuePart(root.toString(),
                    m.segmentSizeBytes, m.minPosition, m.committedPosition, r));
            }
        } else if (!rs.isEmpty()) {
            // Each task takes every queue's entries in one slice of the log, not some queues
            // over all of it: the queues interleave in the log, so tasks split by queue would
            // each read (in runs) most of the same bytes; split by position, the log is read
            // once.
            // The slices share one listing of the queues' files (read in this JVM: a
            // driver answer), so each queue's files are listed and mapped once, not per slice.
            long lo = m.minPosition, span = Math.max(0, limit - lo);
            long least = splitBytes > 0 ? splitBytes : MIN_SLICE_BYTES;
            int n = (int) Math.max(1, Math.min(2L * parallelism, span / least));
            StoreIndexes.Listing listing = new StoreIndexes.Listing();
            for (int k = 0; k < n; k++) {
                long a = lo + span * k / n, b = lo + span * (k + 1) / n;
                PositionsReader.Part p = new PositionsReader.Part(root.toString(),
                    m.segmentSizeBytes, m.minPosition, m.committedPosition, within(rs, a, b),
                    null, rs.size() + " queues in [" + a + ", " + b + ")");
                p.listing = listing;
                plan.parts.add(p);
            }
        }
        walk(plan, conf, root, m, splitBytes, Math.max(limit, m.minPosition), Long.MAX_VALUE, true);
        plan.how.add(root + ": consume queues of " + rs.size() + " queue(s) below " + limit
            + ", log walk from there");
        return true;
    }

    private static boolean planKeys(Plan plan, Configuration conf, Path root, StoreMeta m,
            RecordFilter filter, long splitBytes, int parallelism) throws IOException {
        FileSystem fs = root.getFileSystem(conf);
        List<StoreIndexes.KeyFile> files = StoreIndexes.keyFiles(fs, root);
        if (files.isEmpty()) return false;
        long[] cov = StoreIndexes.keyCoverage(files);
        long lo = Math.max(cov[0], m.minPosition), hi = Math.min(cov[1], m.committedPosition);
        if (lo >= hi) return false;
        List<String> topics = new ArrayList<>();
        for (String t : StoreIndexes.topics(fs, root)) if (filter.acceptsTopic(t)) topics.add(t);
        List<Long> found = new ArrayList<>();
        for (String t : topics) {
            for (String k : filter.keys) {
                StoreIndexes.keyPositions(fs, files, StoreIndexes.keyHash(t, k), lo, hi, found);
            }
        }
        long[] ps = new TreeSet<>(found).stream().mapToLong(Long::longValue).toArray();
        plan.parts.add(new PositionsReader.Part(root.toString(), m.segmentSizeBytes, m.minPosition,
            m.committedPosition, null, ps, ps.length + " key-index positions"));
        walk(plan, conf, root, m, splitBytes, m.minPosition, lo, true);
        walk(plan, conf, root, m, splitBytes, hi, Long.MAX_VALUE, true);
        plan.how.add(root + ": key index [" + lo + ", " + hi + "), " + ps.length
            + " position(s), log walk outside");
        return true;
    }

    /** The consume-queue ranges (every entry) of the queues the filter allows, for the
     *  aggregates answered from the queues. */
    static List<StoreIndexes.CqRange> aggregateRanges(Configuration conf, Path root,
            StoreMeta m, RecordFilter filter) throws IOException {
        long limit = Math.min(m.dispatchedPosition, m.committedPosition);
        return ranges(root.getFileSystem(conf), root, filter, m.minPosition, limit, false);
    }

    /** rs dealt round-robin into at most n groups (queues of similar size share tasks). */
    static List<StoreIndexes.CqRange[]> spread(List<StoreIndexes.CqRange> rs, int n) {
        int k = Math.max(1, Math.min(n, rs.size()));
        List<List<StoreIndexes.CqRange>> gs = new ArrayList<>();
        for (int i = 0; i < k; i++) gs.add(new ArrayList<>());
        for (int i = 0; i < rs.size(); i++) gs.get(i % k).add(rs.get(i));
        List<StoreIndexes.CqRange[]> out = new ArrayList<>();
        for (List<StoreIndexes.CqRange> g : gs) {
            if (!g.isEmpty()) out.add(g.toArray(new StoreIndexes.CqRange[0]));
        }
        return out;
    }

    /**
     * The segment walk of [lo, hi) (log positions; the committed position bounds it anyway),
     * cut further to the filter's store-timestamp range when the raft index can find it.
     */
    private static void walk(Plan plan, Configuration conf, Path root, StoreMeta m,
            long splitBytes, long lo, long hi, boolean useIndexes) throws IOException {
        long end = m.hasCheckpoint ? m.committedPosition : Long.MAX_VALUE;
        // an index read (committed only) whose index covered the log to its committed end:
        // nothing left to walk, no listing
        if (useIndexes && lo >= Math.min(hi, end)) return;
        RecordFilter filter = RecordFilter.fromConf(conf);
        List<FileStatus> segments = StoreMeta.listSegments(root, conf);
        if (useIndexes && m.hasCheckpoint) {
            long[] r = StoreTsPruning.positionRange(root, m.indexFileEntries, segments, filter,
                conf, end);
            if (r != null) {
                lo = Math.max(lo, r[0]);
                hi = Math.min(hi, r[1]);
            }
        }
        if (lo >= hi) return;
        List<InputSplit> splits = QuorumlogInputFormat.planSplits(conf, new Path[] { root },
            new StoreMeta[] { m }, splitBytes);
        for (InputSplit is : splits) {
            QuorumlogSplit s = (QuorumlogSplit) is;
            long base = Long.parseLong(s.getPath().getName());
            long a = Math.max(base + s.getStart(), lo);
            long b = Math.min(base + s.getStart() + s.getLength(), hi);
            if (a >= b) continue;
            boolean whole = a == base + s.getStart() && b == base + s.getStart() + s.getLength();
            // Cutting a split needs the raft index to find its first record (checked above).
            if (!whole && !(useIndexes && m.hasCheckpoint)) {
                throw new IllegalStateException("quorumlog: cannot cut a split without an index");
            }
            QuorumlogSplit cut = whole ? s : new QuorumlogSplit(s.getPath(), a - base, b - a,
                s.getLocations(), s.getLimitPosition(), s.getCommittedPosition(),
                s.getIndexFileEntries());
            plan.parts.add(new QuorumlogSource.SplitPartition(cut));
        }
    }
}
