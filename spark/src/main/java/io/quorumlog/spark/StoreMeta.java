/*
 * What a reader needs to know about a store directory before reading records: the checkpoint
 * (committed position, segment size, index file size) and the raft index files. Works on any
 * Hadoop FileSystem; read-only (a broker may have the store open).
 */
package io.quorumlog.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.QueryContext;
import org.apache.spark.sql.AnalysisException;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

public final class StoreMeta implements Serializable {
    private static final long serialVersionUID = 1L;

    /** Store root (the directory that holds commitlog/, index/, checkpoint). */
    public final String root;
    public final boolean hasCheckpoint;
    public final long flushedPosition;
    public final long committedIndex;
    public final long committedPosition;
    public final long minPosition;
    public final long segmentSizeBytes;
    public final long indexFileEntries;
    /** How far the store layer's consume queues and key index are durable (checkpoint
     *  offset 40); 0 for a log written without a MessageStore. */
    public final long dispatchedPosition;

    private StoreMeta(String root, boolean has, long flushedPos, long committedIndex,
                      long committedPos, long minPos, long segSize, long idxEntries,
                      long dispatchedPos) {
        this.root = root;
        this.hasCheckpoint = has;
        this.flushedPosition = flushedPos;
        this.committedIndex = committedIndex;
        this.committedPosition = committedPos;
        this.minPosition = minPos;
        this.segmentSizeBytes = segSize;
        this.indexFileEntries = idxEntries;
        this.dispatchedPosition = dispatchedPos;
    }

    /** Files a store directory holds from the moment it is opened (an empty directory is a
     *  store with nothing written yet). */
    static final String[] STORE_MARKERS = { "checkpoint", "commitlog" };

    /**
     * Fails unless root is a store directory, as Spark's file sources fail at load():
     * [PATH_NOT_FOUND] when nothing is there, "not a quorumlog store" for a file or a
     * non-empty directory with neither a checkpoint nor commitlog/.
     */
    public static void checkRoot(Path root, Configuration conf)
            throws IOException, AnalysisException {
        FileSystem fs = root.getFileSystem(conf);
        Path q = fs.makeQualified(root);
        FileStatus st;
        try {
            st = fs.getFileStatus(root);
        } catch (FileNotFoundException e) {
            throw new AnalysisException("PATH_NOT_FOUND", scalaMap("path", q.toString()));
        }
        if (!st.isDirectory()) throw notAStore(q, "a file, not a store directory");
        FileStatus[] names = fs.listStatus(root);
        if (names.length == 0) return;
        for (String m : STORE_MARKERS) {
            if (fs.exists(new Path(root, m))) return;
        }
        throw notAStore(q, "no " + String.join(" or ", STORE_MARKERS));
    }

    private static AnalysisException notAStore(Path q, String why) {
        // No Spark error condition says this; a message-only AnalysisException is what a
        // caller catching analysis errors (as for a missing path) expects.
        return new AnalysisException("[QUORUMLOG_NOT_A_STORE] not a quorumlog store: " + q
            + " (" + why + ")", Option.empty(), Option.empty(), Option.empty(), Option.empty(),
            scalaMap(), new QueryContext[0]);
    }

    private static scala.collection.immutable.Map<String, String> scalaMap(String... kv) {
        java.util.Map<String, String> m = new java.util.LinkedHashMap<>();
        for (int i = 0; i + 1 < kv.length; i += 2) m.put(kv[i], kv[i + 1]);
        return scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(m));
    }

    /**
     * Throws t unchecked. Spark's AnalysisException is a checked exception to javac but the
     * DataSource V2 interfaces (written in Scala) cannot declare it; Scala sources throw it
     * the same way.
     */
    @SuppressWarnings("unchecked")
    static <E extends Throwable> RuntimeException sneakyThrow(Throwable t) throws E {
        throw (E) t;
    }

    /** The store root of a segment file: <root>/commitlog/<20 digits>. */
    public static Path rootOfSegment(Path segment) {
        return segment.getParent().getParent();
    }

    /** Reads and verifies <root>/checkpoint; a missing checkpoint is an empty/unknown log. */
    public static StoreMeta load(Path root, Configuration conf) throws IOException {
        FileSystem fs = root.getFileSystem(conf);
        Path cp = new Path(root, "checkpoint");
        byte[] b = new byte[Format.CHECKPOINT_SIZE];
        FSDataInputStream in;
        try {
            in = fs.open(cp);
        } catch (FileNotFoundException e) {
            return new StoreMeta(root.toString(), false, 0, 0, 0, 0, 0, 0, 0);
        }
        try {
            in.readFully(0, b);
        } catch (java.io.EOFException e) {
            throw new CorruptRecordException("checkpoint shorter than " + Format.CHECKPOINT_SIZE
                + " bytes", cp.toString(), 0);
        } finally {
            in.close();
        }
        if (Format.u32(b, 0) != (Format.CHECKPOINT_MAGIC & 0xFFFFFFFFL)) {
            throw new CorruptRecordException("checkpoint has a bad magic", cp.toString(), 0);
        }
        if (Format.u16(b, 4) != 1) {
            throw new CorruptRecordException("checkpoint version " + Format.u16(b, 4)
                + " not supported", cp.toString(), 4);
        }
        if (Format.crc32c(b, 0, 124) != Format.u32(b, 124)) {
            throw new CorruptRecordException("checkpoint CRC mismatch", cp.toString(), 124);
        }
        long committedPos = Format.i64(b, 32);
        long flushedPos = Format.i64(b, 8);
        long segSize = Format.i64(b, 56);
        long entries = Format.i64(b, 64);
        if (segSize < 65536 || segSize % 4096 != 0 || entries <= 0 || committedPos < 0
                || flushedPos < 0) {
            throw new CorruptRecordException("checkpoint fields out of range (segment size "
                + segSize + ", index entries " + entries + ")", cp.toString(), 32);
        }
        return new StoreMeta(root.toString(), true, flushedPos, Format.i64(b, 24), committedPos,
            Format.i64(b, 48), segSize, entries, Math.max(0, Format.i64(b, 40)));
    }

    /** Sorted start positions/paths of the segment files under <root>/commitlog. */
    public static List<FileStatus> listSegments(Path root, Configuration conf) throws IOException {
        FileSystem fs = root.getFileSystem(conf);
        Path dir = new Path(root, "commitlog");
        List<FileStatus> out = new ArrayList<>();
        if (!fs.exists(dir)) return out;
        for (FileStatus st : fs.listStatus(dir)) {
            if (st.isFile() && Format.isNumberedName(st.getPath().getName())) out.add(st);
        }
        out.sort((a, c) -> Long.compare(Long.parseLong(a.getPath().getName()),
            Long.parseLong(c.getPath().getName())));
        return out;
    }

    /** Start positions of the raft index files, sorted (first raft index of each file). */
    public static long[] listIndexFiles(Path root, Configuration conf) throws IOException {
        FileSystem fs = root.getFileSystem(conf);
        Path dir = new Path(root, "index");
        if (!fs.exists(dir)) return new long[0];
        List<Long> firsts = new ArrayList<>();
        for (FileStatus st : fs.listStatus(dir)) {
            if (st.isFile() && Format.isNumberedName(st.getPath().getName())) {
                firsts.add(Long.parseLong(st.getPath().getName()));
            }
        }
        long[] a = new long[firsts.size()];
        for (int i = 0; i < a.length; i++) a[i] = firsts.get(i);
        Arrays.sort(a);
        return a;
    }
}
