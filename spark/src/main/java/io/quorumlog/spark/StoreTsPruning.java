/*
 * Drops the splits that cannot hold a record in a pushed store_timestamp range. Store
 * timestamps never decrease along the log (a leader stamps max(clock, last stamp)), so every
 * record of a split is stamped between the first record at or after the split's start and
 * the first record at or after its end: one raft-index search and one 96-byte header read per
 * split boundary, at planning time (positioned reads, PositionedFile: Hadoop's checksummed
 * local stream costs an open and a stat per read). Anything unknown (no index, no such record, a header
 * that does not check out) keeps the split.
 */
package io.quorumlog.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

final class StoreTsPruning {
    private StoreTsPruning() {}

    /** The splits of one store (in log order) that may hold a record filter accepts. */
    static List<QuorumlogSplit> prune(List<QuorumlogSplit> splits, Path root, long indexEntries,
            List<FileStatus> segments, RecordFilter filter, Configuration conf) throws IOException {
        if (!filter.hasStoreTs() || splits.isEmpty() || indexEntries <= 0) return splits;
        List<QuorumlogSplit> out = new ArrayList<>();
        try (RaftIndex index = new RaftIndex(root, indexEntries, conf)) {
            if (index.isEmpty()) return splits;
            FileSystem fs = root.getFileSystem(conf);
            for (QuorumlogSplit s : splits) {
                long base = Long.parseLong(s.getPath().getName());
                long lo = stampAtOrAfter(index, fs, segments, base + s.getStart(), Long.MIN_VALUE);
                long hi = stampAtOrAfter(index, fs, segments, base + s.getStart() + s.getLength(),
                    Long.MAX_VALUE);
                if (filter.mayHoldStoreTs(lo, hi)) out.add(s);
            }
        }
        return out;
    }

    /**
     * The log positions [lo, hi) that hold every record stamped inside the filter's store
     * timestamp range: lo = the first record stamped at or after its start, hi = the first
     * stamped after its end (else end). Found by binary search over the raft index, one
     * header read per probe; null when that cannot be done (no index, a header that does not
     * check out), and the caller reads everything.
     */
    static long[] positionRange(Path root, long indexEntries, List<FileStatus> segments,
            RecordFilter filter, Configuration conf, long end) throws IOException {
        if (!filter.hasStoreTs() || indexEntries <= 0 || segments.isEmpty()) return null;
        FileSystem fs = root.getFileSystem(conf);
        try (RaftIndex index = new RaftIndex(root, indexEntries, conf)) {
            if (index.isEmpty()) return null;
            long[] unknown = { 0 };
            RaftIndex.PositionTest atOrAfterMin = p -> {
                long ts = stampAt(fs, segments, p);
                if (ts == Long.MIN_VALUE) unknown[0]++;
                return ts >= filter.storeTsMin;
            };
            RaftIndex.PositionTest afterMax = p -> {
                long ts = stampAt(fs, segments, p);
                if (ts == Long.MIN_VALUE) unknown[0]++;
                return ts > filter.storeTsMax;
            };
            long lo = filter.storeTsMin == Long.MIN_VALUE ? 0 : index.firstPositionWhere(atOrAfterMin);
            long hi = filter.storeTsMax == Long.MAX_VALUE ? -1 : index.firstPositionWhere(afterMax);
            if (unknown[0] > 0) return null;
            if (lo < 0) lo = end;           // nothing stamped late enough
            if (hi < 0) hi = end;
            return new long[] { lo, Math.max(lo, Math.min(hi, end)) };
        }
    }

    /** store_timestamp_ms of the record at p (Long.MIN_VALUE when its header is not one). */
    private static long stampAt(FileSystem fs, List<FileStatus> segments, long p)
            throws IOException {
        FileStatus seg = null;
        for (FileStatus st : segments) {
            if (Long.parseLong(st.getPath().getName()) <= p) seg = st;
        }
        if (seg == null) return Long.MIN_VALUE;
        long off = p - Long.parseLong(seg.getPath().getName());
        if (off + Format.HEADER_SIZE > seg.getLen()) return Long.MIN_VALUE;
        byte[] h = new byte[Format.HEADER_SIZE];
        try (PositionedFile in = PositionedFile.open(fs, seg.getPath())) {
            in.readFully(off, h, 0, h.length);
        }
        if (Format.checkHeader(h, 0, p, seg.getLen() - off) != null) return Long.MIN_VALUE;
        return Format.i64(h, Format.OFF_STORE_TS);
    }

    /** store_timestamp_ms of the first indexed record at or after pos, else unknown. */
    private static long stampAtOrAfter(RaftIndex index, FileSystem fs, List<FileStatus> segments,
            long pos, long unknown) throws IOException {
        long p = index.firstPositionAtOrAfter(pos);
        if (p < 0) return unknown;
        FileStatus seg = null;
        for (FileStatus st : segments) {
            if (Long.parseLong(st.getPath().getName()) <= p) seg = st;
        }
        if (seg == null) return unknown;
        long off = p - Long.parseLong(seg.getPath().getName());
        if (off + Format.HEADER_SIZE > seg.getLen()) return unknown;
        byte[] h = new byte[Format.HEADER_SIZE];
        try (PositionedFile in = PositionedFile.open(fs, seg.getPath())) {
            in.readFully(off, h, 0, h.length);
        }
        if (Format.u16(h, Format.OFF_MAGIC) != Format.MAGIC
                || Format.i64(h, Format.OFF_POSITION) != p) {
            return unknown;
        }
        return Format.i64(h, Format.OFF_STORE_TS);
    }
}
