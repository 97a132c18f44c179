/*
 * The records at log positions an index named: the consume-queue entries of some queues
 * (read here, on the executor, and confirmed against each record's topic, queue id and queue
 * offset), or the positions the key index gave at planning. Each record is read with one or
 * two positioned reads and checked as the segment walk checks it (header, position field,
 * CRC32C, inside the committed position) before the RecordFilter sees it, so an index entry
 * can narrow a read but never add a record the log does not hold.
 */
package io.quorumlog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.Arrays;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.connector.read.InputPartition;

final class PositionsReader implements RecordSource {

    /** What one task reads: some consume-queue ranges, or explicit positions, of one store. */
    static final class Part implements InputPartition, Serializable {
        private static final long serialVersionUID = 1L;
        final String root;
        final long segmentSize, minPos, committed;
        final StoreIndexes.CqRange[] ranges;  // consume-queue mode, or null
        final long[] positions;               // key mode (sorted, distinct), or null
        final String describe;

        Part(String root, long segmentSize, long minPos, long committed,
             StoreIndexes.CqRange[] ranges, long[] positions, String describe) {
            this.root = root;
            this.segmentSize = segmentSize;
            this.minPos = minPos;
            this.committed = committed;
            this.ranges = ranges;
            this.positions = positions;
            this.describe = describe;
        }

        @Override public String toString() { return "PositionsReader.Part(" + describe + ")"; }
    }

    private final Part part;
    private final FileSystem fs;
    private final Path rootPath;
    private final RecordFilter filter;
    private final QuorumlogRecord value = new QuorumlogRecord();
    private byte[] buf = new byte[64 << 10];

    private int range = -1;             // consume-queue mode: current range
    private StoreIndexes.Entries entries;
    private int at;                     // next entry / position
    private long openBase = -1;
    private FSDataInputStream in;
    private long openLen;

    PositionsReader(Part part, Configuration conf) throws IOException {
        this(part, conf, false);
    }

    /** unfiltered: every MESSAGE the index names (the aggregate push-down's reads). */
    PositionsReader(Part part, Configuration conf, boolean unfiltered) throws IOException {
        this.part = part;
        rootPath = new Path(part.root);
        FileSystem f = rootPath.getFileSystem(conf);
        // Segment files carry their own CRC32C per record: no Hadoop checksum wrapper.
        fs = f instanceof LocalFileSystem ? ((LocalFileSystem) f).getRawFileSystem() : f;
        filter = unfiltered ? new RecordFilter() : RecordFilter.fromConf(conf);
    }

    @Override
    public boolean next() throws IOException {
        while (true) {
            long pos;
            long expectOffset = -1;
            if (part.positions != null) {
                if (at >= part.positions.length) return false;
                pos = part.positions[at++];
            } else {
                while (entries == null || at >= entries.n) {
                    if (++range >= part.ranges.length) return false;
                    entries = StoreIndexes.read(fs, rootPath, part.ranges[range]);
                    at = 0;
                }
                pos = entries.positions[at];
                expectOffset = entries.offsets[at++];
            }
            if (pos < part.minPos || pos >= part.committed) continue;
            if (!readRecord(pos)) continue;
            if (expectOffset >= 0) confirmQueue(pos, expectOffset);
            if (filter.accepts(buf, 0)) return true;
        }
    }

    /** Reads and checks the record at pos into buf; false when it is not a MESSAGE. */
    private boolean readRecord(long pos) throws IOException {
        long base = (pos / part.segmentSize) * part.segmentSize;
        if (base != openBase) {
            if (in != null) in.close();
            Path seg = new Path(new Path(rootPath, "commitlog"), Format.segmentName(base));
            in = fs.open(seg);
            openLen = fs.getFileStatus(seg).getLen();
            openBase = base;
        }
        long off = pos - base;
        String file = new Path(new Path(rootPath, "commitlog"), Format.segmentName(base)).toString();
        if (off + Format.HEADER_SIZE > openLen) {
            throw new CorruptRecordException("an index points past the end of the file", file, off);
        }
        in.readFully(off, buf, 0, Format.HEADER_SIZE);
        String why = Format.checkHeader(buf, 0, pos, openLen - off);
        if (why != null) throw new CorruptRecordException("index entry: " + why, file, off);
        int type = Format.u8(buf, Format.OFF_TYPE);
        if (type == Format.TYPE_BLANK) return false;
        int total = (int) Format.u32(buf, Format.OFF_TOTAL_SIZE);
        if (pos + total > part.committed) {
            throw new CorruptRecordException("record crosses the committed position "
                + part.committed, file, off);
        }
        if (total > buf.length) buf = Arrays.copyOf(buf, Math.max(total, buf.length * 2));
        in.readFully(off + Format.HEADER_SIZE, buf, Format.HEADER_SIZE, total - Format.HEADER_SIZE);
        if (Format.crc32c(buf, 4, total - 4) != Format.u32(buf, 0)) {
            throw new CorruptRecordException("CRC32C mismatch", file, off);
        }
        if (type != Format.TYPE_MESSAGE) return false;
        value.load(buf, 0, pos, type, total, file, off);
        return true;
    }

    /** A consume-queue entry must name a record of its own topic, queue and offset. */
    private void confirmQueue(long pos, long offset) throws IOException {
        StoreIndexes.CqRange r = part.ranges[range];
        if (value.queueId() != r.queue || value.queueOffset() != offset
                || !value.topic().equals(r.topic)) {
            throw new CorruptRecordException("consume queue " + r.topic + "/" + r.queue
                + " offset " + offset + " points at a record of " + value.topic() + "/"
                + value.queueId() + " offset " + value.queueOffset(), value.file(),
                value.fileOffset());
        }
    }

    @Override public QuorumlogRecord current() { return value; }
    @Override public long skipped() { return 0; }

    @Override
    public void close() throws IOException {
        if (in != null) in.close();
        in = null;
    }
}
