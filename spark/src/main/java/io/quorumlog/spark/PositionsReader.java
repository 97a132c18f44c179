/*
 * The records at log positions an index named: the consume-queue entries of some queues
 * (read here, on the executor, and confirmed against each record's topic, queue id and queue
 * offset), or the positions the key index gave at planning. A local segment is read through
 * its memory map (PositionedFile.map), record by record; on other file systems nearby
 * records are read together in runs. Each record is checked as the segment walk checks it
 * (header, position field, CRC32C, inside the committed position) before the RecordFilter
 * sees it, so an index entry can narrow a read but never add a record the log does not hold.
 */
package io.quorumlog.spark;

import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.NoSuchFileException;
import java.util.Arrays;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.HasPartitionKey;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.unsafe.types.UTF8String;

final class PositionsReader implements RecordSource {

    /** What one task reads: some consume-queue ranges, or explicit positions, of one store. */
    static class Part implements InputPartition, Serializable {
        private static final long serialVersionUID = 1L;
        final String root;
        final long segmentSize, minPos, committed;
        final StoreIndexes.CqRange[] ranges;  // consume-queue mode, or null
        final long[] positions;               // key mode (sorted, distinct), or null
        final String describe;
        /** The consume-queue listing the slices of one plan share when read in its JVM
         *  (IndexPlanner.planQueues; a deserialised copy has none: it lists for itself). */
        transient StoreIndexes.Listing listing;

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

    /** The entries of exactly one queue, keyed by (topic, queue_id): the scan reports its
     *  partitioning by those columns (QuorumlogSource.StoreScan.outputPartitioning), so an
     *  aggregation grouped by them needs no shuffle. */
    static final class QueuePart extends Part implements HasPartitionKey {
        private static final long serialVersionUID = 1L;

        QueuePart(String root, long segmentSize, long minPos, long committed,
                  StoreIndexes.CqRange range) {
            super(root, segmentSize, minPos, committed, new StoreIndexes.CqRange[] { range },
                null, range.topic + "/" + range.queue);
        }

        @Override public InternalRow partitionKey() {
            return new GenericInternalRow(new Object[] {
                UTF8String.fromString(ranges[0].topic), ranges[0].queue });
        }
    }

    /** Records whose gap is at most this many bytes are read with one read (a run). */
    static final int RUN_GAP = 16 << 10;
    /** A run's bytes at most (one record may be longer: it is then read alone). */
    static final int RUN_BYTES = 4 << 20;

    private final Part part;
    private final FileSystem fs;
    private final Path rootPath;
    private final RecordFilter filter;
    private final QuorumlogRecord value = new QuorumlogRecord();
    private byte[] buf = new byte[64 << 10];

    // consume-queue mode: every entry of the task's ranges, sorted by position
    private long[] pos;
    private int[] size;                 // the entry's total_size (0: unknown, key mode)
    private long[] offset;              // queue offset (-1 in key mode)
    private int[] rangeOf;              // index into part.ranges
    private int at;                     // next entry
    private int curRange;
    private byte[][] topicBytes;        // UTF-8 of each range's topic, made when first used

    private long openBase = -1;
    private PositionedFile in;
    private ByteBuffer mapped;          // the open segment memory-mapped (local), or null
    private long openLen;
    private String openFile;
    private long winStart, winEnd;      // log positions buf holds: [winStart, winEnd)

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

    /**
     * The task's entries in log order: a task's queues interleave in the log, so reading
     * them queue after queue would pass over the segments once per queue; sorted, nearby
     * records are read together (runs) in one forward pass.
     */
    private void load() throws IOException {
        if (part.positions != null) {
            pos = part.positions;
            size = new int[pos.length];
            offset = new long[pos.length];
            Arrays.fill(offset, -1);
            rangeOf = new int[pos.length];
            return;
        }
        StoreIndexes.Entries[] es = new StoreIndexes.Entries[part.ranges.length];
        StoreIndexes.Listing listing = part.listing != null ? part.listing
            : new StoreIndexes.Listing();
        int n = 0;
        for (int r = 0; r < es.length; r++) {
            es[r] = StoreIndexes.read(fs, rootPath, part.ranges[r], listing);
            n += es[r].n;
        }
        merge(es, n);
    }

    /** The ranges' entries merged into log order: each range's are in log order already
     *  (a queue's positions grow with its offsets), so a heap over the ranges' next
     *  entries does it with no object per entry. */
    private void merge(StoreIndexes.Entries[] es, int n) {
        pos = new long[n];
        size = new int[n];
        offset = new long[n];
        rangeOf = new int[n];
        merge(es, pos, size, offset, rangeOf);
    }

    /** es merged into pos, size, offset and rangeOf (the index into es), by position. A
     *  queue's entries come in runs (a batch of messages is one queue's), so each range at
     *  the heap's top gives every entry below the least next position of the others at
     *  once: one heap step per run, not per entry. */
    static void merge(StoreIndexes.Entries[] es, long[] pos, int[] size, long[] offset,
            int[] rangeOf) {
        int[] heap = new int[es.length], next = new int[es.length];
        long[] head = new long[es.length];    // each range's next position
        int h = 0;
        for (int r = 0; r < es.length; r++) {
            if (es[r].n > 0) {
                head[r] = es[r].positions[0];
                heap[h++] = r;
            }
        }
        for (int i = h / 2 - 1; i >= 0; i--) siftDown(heap, h, i, head);
        int k = 0;
        while (h > 0) {
            int r = heap[0];
            // the least next position of the other ranges: the root's children hold it
            long bound = h > 1 ? head[heap[1]] : Long.MAX_VALUE;
            if (h > 2) bound = Math.min(bound, head[heap[2]]);
            StoreIndexes.Entries e = es[r];
            int j = next[r];
            do {
                pos[k] = e.positions[j];
                size[k] = e.sizes[j];
                offset[k] = e.offsets[j];
                rangeOf[k++] = r;
            } while (++j < e.n && e.positions[j] < bound);
            next[r] = j;
            if (j == e.n) heap[0] = heap[--h];
            else head[r] = e.positions[j];
            if (h > 0) siftDown(heap, h, 0, head);
        }
    }

    private static void siftDown(int[] heap, int h, int i, long[] head) {
        int x = heap[i];
        long key = head[x];
        while (true) {
            int c = 2 * i + 1;
            if (c >= h) break;
            if (c + 1 < h && head[heap[c + 1]] < head[heap[c]]) c++;
            if (head[heap[c]] >= key) break;
            heap[i] = heap[c];
            i = c;
        }
        heap[i] = x;
    }

    @Override
    public boolean next() throws IOException {
        if (pos == null) load();
        while (at < pos.length) {
            int i = at++;
            long p = pos[i];
            if (p < part.minPos || p >= part.committed) continue;
            if (!readRecord(i)) continue;
            if (offset[i] >= 0) {
                curRange = rangeOf[i];
                confirmQueue(p, offset[i]);
            }
            if (filter.accepts(buf, (int) (p - winStart))) return true;
        }
        return false;
    }

    /** Opens the segment holding log position p (when another is open). */
    private void openSegment(long p) throws IOException {
        long base = (p / part.segmentSize) * part.segmentSize;
        if (base == openBase) return;
        mapped = null;
        if (in != null) in.close();
        Path seg = new Path(new Path(rootPath, "commitlog"), Format.segmentName(base));
        in = null;
        try {
            in = PositionedFile.open(fs, seg);
        } catch (FileNotFoundException | NoSuchFileException e) {  // retention, after planning
            throw new SegmentGoneException(seg.toString(), p - base, "no such file");
        }
        openLen = in.length();
        mapped = in.map();
        openBase = base;
        openFile = seg.toString();
        winStart = winEnd = -1;
    }

    /** The end of the run that starts with entry i: the following entries in the same
     *  segment whose gaps are at most RUN_GAP, within RUN_BYTES (entry sizes as given). */
    private long runEnd(int i) {
        long end = pos[i] + Math.max(size[i], Format.HEADER_SIZE);
        long segEnd = openBase + part.segmentSize;
        for (int j = i + 1; j < pos.length; j++) {
            if (size[j] <= 0 || pos[j] >= segEnd || pos[j] - end > RUN_GAP
                    || pos[j] + size[j] - pos[i] > RUN_BYTES) {
                break;
            }
            end = Math.max(end, pos[j] + size[j]);
        }
        return Math.min(end, openBase + openLen);
    }

    /** Makes buf hold [p, p + n) (reads the run from p when it does not). */
    private void ensure(long p, int n, int entry) throws IOException {
        if (p >= winStart && p + n <= winEnd) return;
        if (mapped != null) {
            // a mapped segment: copy this record only (its entry's size when known), no
            // run -- the bytes between the records an index names are never touched
            long want = Math.max(p + n, entry >= 0 && size[entry] > 0 ? p + size[entry] : 0);
            long end = Math.min(want, openBase + mapped.limit());
            if (end < p + n) throw new EOFException("end of file at " + (p - openBase));
            int len = (int) (end - p);
            if (len > buf.length) buf = Arrays.copyOf(buf, Math.max(len, buf.length * 2));
            mapped.get((int) (p - openBase), buf, 0, len);
            winStart = p;
            winEnd = end;
            return;
        }
        long end = Math.max(p + n, entry >= 0 ? runEnd(entry) : p + n);
        int len = (int) (end - p);
        if (len > buf.length) buf = Arrays.copyOf(buf, Math.max(len, buf.length * 2));
        in.readFully(p - openBase, buf, 0, len);
        winStart = p;
        winEnd = end;
    }

    /** Reads and checks the record of entry i into buf; false when it is not a MESSAGE. A
     *  record that fails in a segment file its path no longer names was not damaged: the
     *  store deleted or reused the file under this read (SegmentGoneException). */
    private boolean readRecord(int i) throws IOException {
        openSegment(pos[i]);
        try {
            return checkRecord(i);
        } catch (CorruptRecordException e) {
            if (in.replaced()) throw new SegmentGoneException(openFile, e.offset, e.reason);
            throw e;
        }
    }

    private boolean checkRecord(int i) throws IOException {
        long p = pos[i];
        long off = p - openBase;
        if (off + Format.HEADER_SIZE > openLen) {
            throw new CorruptRecordException("an index points past the end of the file",
                openFile, off);
        }
        ensure(p, Format.HEADER_SIZE, size[i] > 0 ? i : -1);
        int at0 = (int) (p - winStart);
        String why = Format.checkHeader(buf, at0, p, openLen - off);
        if (why != null) throw new CorruptRecordException("index entry: " + why, openFile, off);
        int type = Format.u8(buf, at0 + Format.OFF_TYPE);
        if (type == Format.TYPE_BLANK) return false;
        int total = (int) Format.u32(buf, at0 + Format.OFF_TOTAL_SIZE);
        if (p + total > part.committed) {
            throw new CorruptRecordException("record crosses the committed position "
                + part.committed, openFile, off);
        }
        ensure(p, total, -1);
        at0 = (int) (p - winStart);
        if (Format.crc32c(buf, at0 + 4, total - 4) != Format.u32(buf, at0)) {
            throw new CorruptRecordException("CRC32C mismatch", openFile, off);
        }
        if (type != Format.TYPE_MESSAGE) return false;
        value.load(buf, at0, p, type, total, openFile, off);
        return true;
    }

    /** A consume-queue entry must name a record of its own topic, queue and offset (the
     *  topic compared as bytes: no String per record). */
    private void confirmQueue(long pos, long offset) throws IOException {
        StoreIndexes.CqRange r = part.ranges[curRange];
        if (topicBytes == null) topicBytes = new byte[part.ranges.length][];
        if (topicBytes[curRange] == null) {
            topicBytes[curRange] = r.topic.getBytes(StandardCharsets.UTF_8);
        }
        byte[] t = topicBytes[curRange];
        int at = value.topicOffset();
        if (value.queueId() != r.queue || value.queueOffset() != offset
                || value.topicLength() != t.length
                || !Arrays.equals(value.buf, at, at + t.length, t, 0, t.length)) {
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
        mapped = null;
        if (in != null) in.close();
        in = null;
    }
}
