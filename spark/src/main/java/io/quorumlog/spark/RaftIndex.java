/*
 * Binary search over a store's raft index files (<root>/index/<20-digit first index>, 24-byte
 * entries: position u64, term u64, size u32, type u8) for the first record at or after a log
 * position. This is how a split that starts in the middle of a segment finds its first record
 * boundary exactly -- O(log n) positioned reads, never a walk from the start of the file.
 */
package io.quorumlog.spark;

import java.io.Closeable;
import java.io.IOException;
import java.util.HashMap;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public final class RaftIndex implements Closeable {
    private final FileSystem fs;
    private final Path dir;
    private final long entriesPerFile;
    private final long[] fileFirsts;
    // positioned reads (one pread each): Hadoop's checksummed local stream opens a new
    // checker, and stats the file, for every positioned read
    private final Map<Long, PositionedFile> open = new HashMap<>();
    private final Map<Long, Long> fileLengths = new HashMap<>();
    private final byte[] entry = new byte[Format.INDEX_ENTRY_SIZE];
    /** Number of entries read so far (tests assert the search stays logarithmic). */
    public long probes;

    public RaftIndex(Path root, long entriesPerFile, Configuration conf) throws IOException {
        this.fs = root.getFileSystem(conf);
        this.dir = new Path(root, "index");
        this.entriesPerFile = entriesPerFile;
        this.fileFirsts = StoreMeta.listIndexFiles(root, conf);
    }

    public boolean isEmpty() { return fileFirsts.length == 0; }

    /**
     * Position of the record with the smallest raft index whose position is >= target, or -1
     * when no indexed record lies at or after target. Unused (all-zero) entries sort last: they
     * only ever form the suffix after the log's last record.
     */
    public long firstPositionAtOrAfter(long target) throws IOException {
        if (fileFirsts.length == 0) return -1;
        long lo = fileFirsts[0];
        long hi = fileFirsts[fileFirsts.length - 1] + entriesPerFile - 1;  // inclusive
        long found = -1;
        while (lo <= hi) {
            long mid = lo + ((hi - lo) >>> 1);
            long pos = positionOf(mid);
            if (pos >= target) {  // unused entries read as Long.MAX_VALUE
                if (pos != Long.MAX_VALUE) found = pos;
                hi = mid - 1;
            } else {
                lo = mid + 1;
            }
        }
        return found;
    }

    /** A test of a record position that may read the record (and fail). */
    interface PositionTest {
        boolean test(long position) throws IOException;
    }

    /**
     * Position of the first indexed record for which t holds, or -1 when none does; t must be
     * false for a prefix of the log's records and true for the rest (a monotone test, like
     * "stamped at or after T": store timestamps never decrease along the log).
     */
    public long firstPositionWhere(PositionTest t) throws IOException {
        if (fileFirsts.length == 0) return -1;
        long lo = fileFirsts[0];
        long hi = fileFirsts[fileFirsts.length - 1] + entriesPerFile - 1;
        long found = -1;
        while (lo <= hi) {
            long mid = lo + ((hi - lo) >>> 1);
            long pos = positionOf(mid);
            if (pos == Long.MAX_VALUE || t.test(pos)) {
                if (pos != Long.MAX_VALUE) found = pos;
                hi = mid - 1;
            } else {
                lo = mid + 1;
            }
        }
        return found;
    }

    /** Position of raft index i, or Long.MAX_VALUE when its entry is unused or missing. */
    long positionOf(long i) throws IOException {
        long first = ((i - 1) / entriesPerFile) * entriesPerFile + 1;
        PositionedFile in = open.get(first);
        if (in == null) {
            Path p = new Path(dir, Format.segmentName(first));
            if (!fs.exists(p)) return Long.MAX_VALUE;
            in = PositionedFile.open(fs, p);
            open.put(first, in);
            fileLengths.put(first, in.length());
        }
        long off = ((i - 1) % entriesPerFile) * Format.INDEX_ENTRY_SIZE;
        if (off + Format.INDEX_ENTRY_SIZE > fileLengths.get(first)) return Long.MAX_VALUE;
        probes++;
        in.readFully(off, entry, 0, Format.INDEX_ENTRY_SIZE);
        long size = Format.u32(entry, 16);
        if (size == 0) return Long.MAX_VALUE;
        long pos = Format.i64(entry, 0);
        if (pos < 0) {
            throw new CorruptRecordException("raft index entry " + i + " has a negative position",
                new Path(dir, Format.segmentName(first)).toString(), off);
        }
        return pos;
    }

    @Override
    public void close() throws IOException {
        for (PositionedFile in : open.values()) in.close();
        open.clear();
    }
}
