/*
 * Reads the MESSAGE records whose first byte lies inside one split of one segment file.
 *
 * - The first record is found exactly: a split that starts at byte 0 of a segment starts at
 *   its first record (segments begin with a record); any other split asks the raft index for
 *   the first record at or after its start (binary search, RaftIndex).
 * - A record that starts inside the split is read to its end even past the split's end; a
 *   record never spans segments, so reading never leaves the file.
 * - Nothing at or after the split's limit (the checkpoint's committed position) is returned.
 * - Every record (BLANK included) has its header and CRC32C checked. A bad record before the
 *   committed position fails the task with the file and offset (or, with
 *   quorumlog.on.corrupt=skip, is counted and skipped by resynchronising through the raft
 *   index). A bad record at or after the committed position -- only reachable with
 *   committed_only off -- is a torn tail and ends the segment, the rule recovery applies.
 * - BLANK, NOOP, CONFIG and META records are skipped (quorumlog.include.control=true keeps
 *   NOOP/CONFIG/META); MESSAGE records that fail the RecordFilter (topics, queue ids, store
 *   timestamps: options and pushed-down filters) are skipped on their header and topic bytes
 *   before anything is decoded.
 */
package io.quorumlog.spark;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.Arrays;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.hadoop.mapreduce.RecordReader;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.lib.input.FileSplit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

public class QuorumlogRecordReader extends RecordReader<LongWritable, QuorumlogRecord> {
    private static final Logger LOG = LoggerFactory.getLogger(QuorumlogRecordReader.class);

    public static final String CONF_TOPICS = RecordFilter.CONF_TOPICS;       // '/'-separated
    public static final String CONF_COMMITTED_ONLY = "quorumlog.committed.only";
    public static final String CONF_ON_CORRUPT = "quorumlog.on.corrupt";     // fail | skip
    public static final String CONF_INCLUDE_CONTROL = "quorumlog.include.control";
    public static final String CONF_SPLIT_BYTES = "quorumlog.split.bytes";
    static final int READ_CHUNK = 4 << 20;
    /** Bytes copied at a time out of a memory-mapped segment: no system call per copy, so
     *  a small buffer that stays in the core's cache while its records are checked. */
    static final int MAP_CHUNK = 256 << 10;
    /** One read buffer kept per thread between readers: a task (or a pushed aggregate's
     *  thread) reads split after split, and a new 4 MiB array per split (zeroed when
     *  allocated) was about a tenth of a full scan's CPU. A reader takes it while open. */
    private static final ThreadLocal<byte[]> SPARE = new ThreadLocal<>();

    private final LongWritable key = new LongWritable();
    private final QuorumlogRecord value = new QuorumlogRecord();

    private Configuration conf;
    private Path file;
    private String fileName;
    private FSDataInputStream in;     // other file systems (or a segment that cannot be mapped)
    private PositionedFile local;     // a local segment, read through its shared memory map
    private java.nio.ByteBuffer mapped;
    private File localFile;           // the segment's local file, or null (other file systems)
    private Object openedKey;         // its file key when opened (PositionedFile.open), or null
    private RaftIndex index;          // opened lazily: only splits that start mid-segment need it
    private Path root;
    private long indexFileEntries;

    private long segBase;             // log position of the file's first byte
    private long segEnd;              // log position just past the file
    private long pos;                 // next record's log position
    private long ownedEnd;            // records starting before this belong to the split
    private long committedPosition;
    private long splitStart;

    private byte[] buf = new byte[0];
    private long bufStart;            // log position of buf[0]
    private int bufLen;
    private long streamPos;           // log position the stream will read next

    private RecordFilter filter;      // topics, queue ids, store timestamps
    private boolean skipCorrupt;
    private boolean includeControl;
    private boolean done;

    private long skipped;
    private long returned;
    private long bytesRead;

    public long skippedCorruptRecords() { return skipped; }
    public long recordsReturned() { return returned; }
    public long bytesRead() { return bytesRead; }

    @Override
    public void initialize(InputSplit genericSplit, TaskAttemptContext context) throws IOException {
        initialize(genericSplit, context.getConfiguration());
    }

    public void initialize(InputSplit genericSplit, Configuration conf) throws IOException {
        this.conf = conf;
        FileSplit split = (FileSplit) genericSplit;
        file = split.getPath();
        fileName = file.toString();
        root = StoreMeta.rootOfSegment(file);
        long limit;
        if (split instanceof QuorumlogSplit) {
            QuorumlogSplit qs = (QuorumlogSplit) split;
            limit = qs.getLimitPosition();
            committedPosition = qs.getCommittedPosition();
            indexFileEntries = qs.getIndexFileEntries();
        } else {  // a plain FileSplit from some other planner: read the checkpoint now
            StoreMeta meta = StoreMeta.load(root, conf);
            committedPosition = meta.hasCheckpoint ? meta.committedPosition : 0;
            limit = conf.getBoolean(CONF_COMMITTED_ONLY, true) ? committedPosition : Long.MAX_VALUE;
            indexFileEntries = meta.indexFileEntries;
        }
        filter = RecordFilter.fromConf(conf);
        skipCorrupt = "skip".equals(conf.get(CONF_ON_CORRUPT, "fail"));
        includeControl = conf.getBoolean(CONF_INCLUDE_CONTROL, false);

        String name = file.getName();
        if (!Format.isNumberedName(name)) {
            throw new IOException("quorumlog: " + fileName + " is not a segment file (20-digit name)");
        }
        segBase = Long.parseLong(name);
        FileSystem fs = file.getFileSystem(conf);
        // Segment files have no Hadoop .crc side files and every record carries its own
        // CRC32C: read local files through the raw file system, not the checksumming wrapper.
        if (fs instanceof LocalFileSystem) fs = ((LocalFileSystem) fs).getRawFileSystem();
        localFile = PositionedFile.localFile(fs, file);
        try {
            segEnd = segBase + fs.getFileStatus(file).getLen();
        } catch (FileNotFoundException e) {  // retention deleted it after planning (or below)
            throw new SegmentGoneException(fileName, split.getStart(), "no such file");
        }
        splitStart = segBase + split.getStart();
        ownedEnd = Math.min(segBase + split.getStart() + split.getLength(), limit);

        if (split.getStart() == 0) {
            pos = segBase;
        } else {
            pos = openIndex().firstPositionAtOrAfter(splitStart);
            if (pos < 0) pos = Long.MAX_VALUE;
        }
        if (pos >= ownedEnd) {
            done = true;
            return;
        }
        if (localFile != null) {
            // a local segment is copied out of its memory map (PositionedFile's shared maps):
            // one copy, no system call, versus a read's two (the kernel's into a native
            // buffer, JNI's into the array) and a 4 MiB buffer that leaves the cache
            try {
                local = PositionedFile.open(fs, file);
            } catch (FileNotFoundException | java.nio.file.NoSuchFileException e) {
                throw new SegmentGoneException(fileName, pos - segBase, "no such file");
            }
            mapped = local.map();
            if (mapped == null) {   // empty, or too long for a buffer: read as a stream
                local.close();
            } else {
                segEnd = Math.min(segEnd, segBase + mapped.limit());
            }
        }
        if (mapped == null) {
            if (local == null) ReadCount.opened();    // (PositionedFile.open counted it)
            local = null;
            Object before = localFile == null ? null : PositionedFile.fileKey(localFile);
            try {
                in = fs.open(file);
            } catch (FileNotFoundException e) {
                throw new SegmentGoneException(fileName, pos - segBase, "no such file");
            }
            // as PositionedFile.open: the file opened, when the path named it before and after
            Object after = localFile == null ? null : PositionedFile.fileKey(localFile);
            openedKey = before != null && before.equals(after) ? before : null;
            in.seek(pos - segBase);
        }
        streamPos = pos;
        bufStart = pos;
        bufLen = 0;
    }

    private RaftIndex openIndex() throws IOException {
        if (index == null) {
            if (indexFileEntries <= 0) {
                StoreMeta meta = StoreMeta.load(root, conf);
                indexFileEntries = meta.indexFileEntries;
            }
            if (indexFileEntries <= 0) {
                throw new IOException("quorumlog: split of " + fileName + " starts inside the "
                    + "segment but the store has no checkpoint giving index_file_entries");
            }
            index = new RaftIndex(root, indexFileEntries, conf);
            if (index.isEmpty()) {
                throw new IOException("quorumlog: split of " + fileName + " starts inside the "
                    + "segment but the store has no raft index files to find a record boundary");
            }
        }
        return index;
    }

    /** Makes buf hold [p, p + n); false when the file ends first. */
    private boolean ensure(long p, int n) throws IOException {
        if (p >= bufStart && p + n <= bufStart + bufLen) return true;
        if (p + n > segEnd) return false;
        if (n > buf.length) {
            int chunk = mapped != null ? MAP_CHUNK : READ_CHUNK;
            int len = Math.max(n, Math.min(chunk, (int) Math.min(Integer.MAX_VALUE - 8,
                segEnd - segBase)));
            byte[] spare = SPARE.get();
            if (spare != null && spare.length >= len && spare.length <= Math.max(len, chunk)) {
                SPARE.remove();
                System.arraycopy(buf, 0, spare, 0, bufLen);
                buf = spare;
            } else {
                buf = Arrays.copyOf(buf, len);
            }
        }
        if (p >= bufStart && p <= bufStart + bufLen) {  // keep the already-read tail
            int keep = (int) (bufStart + bufLen - p);
            System.arraycopy(buf, (int) (p - bufStart), buf, 0, keep);
            bufLen = keep;
        } else {  // a jump (resync after a skipped record): reposition the stream
            if (in != null) in.seek(p - segBase);
            streamPos = p;
            bufLen = 0;
        }
        bufStart = p;
        // Read at least what is needed; read ahead up to the split's end (records starting
        // there may need a little more, asked for by the next ensure()).
        long want = Math.max(p + n, Math.min(segEnd, ownedEnd));
        int target = (int) Math.min(buf.length, want - bufStart);
        if (mapped != null) {    // segEnd is inside the mapping: target is there
            int k = target - bufLen;
            if (k > 0) {
                mapped.get((int) (streamPos - segBase), buf, bufLen, k);
                bufLen += k;
                streamPos += k;
                bytesRead += k;
            }
        }
        while (in != null && (bufLen < n || (bufLen < target && bufLen < buf.length))) {
            int got = in.read(buf, bufLen, target - bufLen);
            if (got < 0) break;
            bufLen += got;
            streamPos += got;
            bytesRead += got;
            if (bufLen >= n && got == 0) break;
        }
        return bufLen >= n;
    }

    @Override
    public boolean nextKeyValue() throws IOException {
        if (done) return false;
        while (pos < ownedEnd) {
            long remaining = segEnd - pos;
            if (remaining < Format.HEADER_SIZE || !ensure(pos, Format.HEADER_SIZE)) break;
            int off = (int) (pos - bufStart);
            String why = Format.checkHeader(buf, off, pos, remaining);
            if (why != null && Format.isZeroHeader(buf, off)) {
                if (pos < committedPosition) {
                    if (!bad("unwritten (zero) bytes before the committed position")) break;
                    continue;
                }
                break;  // end of the written log in this segment
            }
            if (why != null) {
                if (!bad(why)) break;
                continue;
            }
            int type = Format.u8(buf, off + Format.OFF_TYPE);
            int total = (int) Format.u32(buf, off + Format.OFF_TOTAL_SIZE);
            int covered = type == Format.TYPE_BLANK ? Format.HEADER_SIZE : total;
            if (!ensure(pos, covered)) {
                if (!bad("record runs past the end of the file")) break;
                continue;
            }
            off = (int) (pos - bufStart);
            if (Format.crc32c(buf, off + 4, covered - 4) != Format.u32(buf, off)) {
                if (!bad("CRC32C mismatch")) break;
                continue;
            }
            if (type != Format.TYPE_BLANK && pos < committedPosition && pos + total > committedPosition) {
                if (!bad("record crosses the committed position " + committedPosition)) break;
                continue;
            }
            long recPos = pos;
            pos += total;
            if (type == Format.TYPE_BLANK) continue;
            if (type != Format.TYPE_MESSAGE && !includeControl) continue;
            // Filtered on the header (and topic bytes) before any field is decoded.
            if (type == Format.TYPE_MESSAGE && !filter.accepts(buf, off)) continue;
            fill(off, recPos, type, total);
            returned++;
            return true;
        }
        done = true;
        return false;
    }

    private void fill(int off, long recPos, int type, int total) {
        value.load(buf, off, recPos, type, total, fileName, recPos - segBase);
        key.set(recPos);
    }

    /**
     * A record at pos failed validation. Returns true when reading continues at a new pos
     * (skip mode), false when this segment's records end here (torn tail); throws otherwise.
     */
    private boolean bad(String why) throws IOException {
        long offset = pos - segBase;
        if (pos >= committedPosition) {
            LOG.info("quorumlog: {} at offset {} ({}) is past the committed position: torn tail, "
                + "reading of this segment ends there", fileName, offset, why);
            return false;
        }
        // A segment whose path no longer names the file opened was deleted or reused by
        // retention under this read: its bytes are another segment's now, not damage. Raised
        // even with skip: skipping would drop the rest of the segment as "corrupt" records
        // and return a partial answer as if it were whole; those records are no longer in
        // the log, and a re-run reads the log as it is.
        if (local != null ? local.replaced() : PositionedFile.replaced(localFile, openedKey)) {
            throw new SegmentGoneException(fileName, offset, why);
        }
        if (!skipCorrupt) throw new CorruptRecordException(why, fileName, offset);
        skipped++;
        LOG.warn("quorumlog: skipping corrupt record in {} at offset {}: {}", fileName, offset, why);
        long next = -1;
        if (indexFileEntries > 0) {
            try {
                next = openIndex().firstPositionAtOrAfter(pos + 1);
            } catch (IOException e) {
                LOG.warn("quorumlog: cannot resynchronise after {} offset {}: {}", fileName, offset,
                    e.getMessage());
            }
        }
        if (next < 0 || next >= segEnd) return false;
        pos = next;
        return true;
    }

    @Override
    public LongWritable getCurrentKey() { return key; }

    @Override
    public QuorumlogRecord getCurrentValue() { return value; }

    @Override
    public float getProgress() {
        if (done) return 1.0f;
        long span = ownedEnd - splitStart;
        return span <= 0 ? 1.0f : Math.min(1.0f, Math.max(0f, (pos - splitStart) / (float) span));
    }

    @Override
    public void close() throws IOException {
        if (skipped > 0) {
            LOG.warn("quorumlog: skipped {} corrupt record(s) in {}", skipped, fileName);
        }
        if (in != null) in.close();
        if (local != null) local.close();
        if (index != null) index.close();
        in = null;
        local = null;
        mapped = null;
        index = null;
        // the buffer for this thread's next reader (value's bytes are not read after close)
        if (buf.length > 0 && buf.length <= READ_CHUNK) SPARE.set(buf);
        buf = new byte[0];
        bufLen = 0;
    }
}
