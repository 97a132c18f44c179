/*
 * Hadoop FileInputFormat (new mapreduce API) over a quorumlog store directory: the input paths
 * are store roots; the files are the segment files under <root>/commitlog. Splits are byte
 * ranges of segments (quorumlog.split.bytes, default the usual FileInputFormat split size);
 * the reader finds each split's first record through the raft index. Planning reads the
 * checkpoint once and freezes the committed position into every split.
 *
 *   sc.newAPIHadoopFile(storeDir, QuorumlogInputFormat.class, LongWritable.class,
 *                       QuorumlogRecord.class, conf)   // key: log position of the record
 */
package io.quorumlog.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.BlockLocation;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.RecordReader;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;

public class QuorumlogInputFormat extends FileInputFormat<LongWritable, QuorumlogRecord> {
    /** Smallest split we cut: below this the index lookups cost more than they save. */
    public static final long MIN_SPLIT_BYTES = 4096;

    @Override
    public RecordReader<LongWritable, QuorumlogRecord> createRecordReader(InputSplit split,
            TaskAttemptContext context) {
        return new QuorumlogRecordReader();
    }

    @Override
    protected boolean isSplitable(JobContext context, Path file) {
        return true;
    }

    /** The segment files of every input store root, in log order. */
    @Override
    protected List<FileStatus> listStatus(JobContext job) throws IOException {
        List<FileStatus> out = new ArrayList<>();
        for (Path root : getInputPaths(job)) {
            out.addAll(StoreMeta.listSegments(root, job.getConfiguration()));
        }
        return out;
    }

    @Override
    public List<InputSplit> getSplits(JobContext job) throws IOException {
        return planSplits(job.getConfiguration(), getInputPaths(job), -1);
    }

    /**
     * Splits of the stores at roots. splitBytes <= 0: quorumlog.split.bytes, else the
     * FileInputFormat split size (block size bounded by the min/max split size settings).
     * Splits that cannot hold a record in the configured store-timestamp range are left out
     * (StoreTsPruning).
     */
    public static List<InputSplit> planSplits(Configuration conf, Path[] roots, long splitBytes)
            throws IOException {
        StoreMeta[] metas = new StoreMeta[roots.length];
        for (int i = 0; i < roots.length; i++) metas[i] = StoreMeta.load(roots[i], conf);
        return planSplits(conf, roots, metas, splitBytes);
    }

    /**
     * planSplits with each store's checkpoint already read (metas[i] of roots[i]): the
     * DataSource reads them once per DataFrame, so every action on it reads the same
     * committed prefix while a writer keeps appending.
     */
    public static List<InputSplit> planSplits(Configuration conf, Path[] roots, StoreMeta[] metas,
            long splitBytes) throws IOException {
        if (splitBytes <= 0) splitBytes = conf.getLong(QuorumlogRecordReader.CONF_SPLIT_BYTES, -1);
        RecordFilter filter = RecordFilter.fromConf(conf);
        List<InputSplit> splits = new ArrayList<>();
        for (int i = 0; i < roots.length; i++) {
            Path root = roots[i];
            StoreMeta meta = metas[i];
            List<FileStatus> segments = StoreMeta.listSegments(root, conf);
            splits.addAll(StoreTsPruning.prune(planStore(conf, root, meta, segments, splitBytes),
                root, meta.indexFileEntries, segments, filter, conf));
        }
        return splits;
    }

    private static List<QuorumlogSplit> planStore(Configuration conf, Path root, StoreMeta meta,
            List<FileStatus> segments, long splitBytes) throws IOException {
        boolean committedOnly = conf.getBoolean(QuorumlogRecordReader.CONF_COMMITTED_ONLY, true);
        long minSize = Math.max(1, conf.getLong(SPLIT_MINSIZE, 1));
        long maxSize = conf.getLong(SPLIT_MAXSIZE, Long.MAX_VALUE);
        long committed = meta.hasCheckpoint ? meta.committedPosition : 0;
        long limit = committedOnly ? committed : Long.MAX_VALUE;
        boolean haveIndex = meta.hasCheckpoint && StoreMeta.listIndexFiles(root, conf).length > 0;
        FileSystem fs = root.getFileSystem(conf);
        List<QuorumlogSplit> splits = new ArrayList<>();
        for (FileStatus st : segments) {
            long base = Long.parseLong(st.getPath().getName());
            if (base >= limit) break;
            long len = Math.min(st.getLen(), limit - base);
            if (len <= 0) continue;
            long size = splitBytes > 0 ? splitBytes
                : Math.max(minSize, Math.min(maxSize, st.getBlockSize()));
            // Without a raft index a split can only start where a record surely does.
            if (!haveIndex) size = Long.MAX_VALUE;
            size = Math.max(size, MIN_SPLIT_BYTES);
            BlockLocation[] blocks = fs.getFileBlockLocations(st, 0, st.getLen());
            for (long off = 0; off < len; off += size) {
                long n = Math.min(size, len - off);
                splits.add(new QuorumlogSplit(st.getPath(), off, n, hostsAt(blocks, off),
                    limit, committed, meta.indexFileEntries));
            }
        }
        return splits;
    }

    private static String[] hostsAt(BlockLocation[] blocks, long off) throws IOException {
        for (BlockLocation b : blocks) {
            if (off >= b.getOffset() && off < b.getOffset() + b.getLength()) return b.getHosts();
        }
        return new String[0];
    }
}
