/*
 * Aggregates a quorumlog scan answers itself (SupportsPushDownAggregates, partial push-down:
 * Spark merges the rows, count -> sum, sum -> sum, min -> min, max -> max):
 *
 *   count(*) / count(col not null), min/max of queue_offset, position, store_timestamp,
 *   born_timestamp, raft_index, term, queue_id; sum(_body_length) (what BodyLengthRule makes
 *   of sum(length(body)): Spark 4.3 translates length() of strings only); grouped by nothing,
 *   topic and/or queue_id.
 *
 * Two ways to answer them:
 *  - from the consume queues alone (fromQueues): count, min/max of queue_offset and position
 *    are the queue's first and last entries (found by binary search: StoreIndexes.ends), min/max of store_timestamp, raft_index, term and queue_id
 *    come from the first and last entry's record headers (those fields are constant per
 *    queue or never decrease along the log). No body is read. Taken when the queues cover
 *    every committed record of every store (the checkpoint's dispatched position at or past
 *    its committed position), no filter beyond topic/queue_id narrows the read, and only
 *    those aggregates are asked; one task per group of queues (QueuePart).
 *  - from the records (walk): each task reads its records as a scan would (the same plan,
 *    filters, indexes and checks) and adds up header fields instead of building rows, so a
 *    body is CRC-checked but never copied.
 */
package io.quorumlog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.LiteralValue;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.expressions.aggregate.Sum;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

final class AggregatePushdown implements Serializable {
    private static final long serialVersionUID = 1L;
    static final int COUNT = 0, MIN = 1, MAX = 2, SUM = 3;
    private static final List<String> GROUPABLE = List.of("topic", "queue_id");
    private static final List<String> MIN_MAXABLE = List.of("queue_offset", "position",
        "store_timestamp", "born_timestamp", "raft_index", "term", "queue_id");
    /** What the consume queues (and the first/last record of a queue) answer. */
    private static final List<String> FROM_QUEUES = List.of("queue_offset", "position",
        "store_timestamp", "raft_index", "term", "queue_id");

    final String[] groupBy;     // column names
    final int[] kinds;          // COUNT / MIN / MAX
    final String[] columns;     // MIN/MAX column (null otherwise)
    final StructType schema;
    final String pushed;        // the aggregate functions, as explain() shows them

    private AggregatePushdown(String[] groupBy, int[] kinds, String[] columns, StructType schema,
            String pushed) {
        this.groupBy = groupBy;
        this.kinds = kinds;
        this.columns = columns;
        this.schema = schema;
        this.pushed = pushed;
    }

    /** The push-down of a, or null when this source cannot answer it. */
    static AggregatePushdown of(Aggregation a) {
        List<StructField> fields = new ArrayList<>();
        String[] group = new String[a.groupByExpressions().length];
        for (int i = 0; i < group.length; i++) {
            String c = column(a.groupByExpressions()[i]);
            if (c == null || !GROUPABLE.contains(c)) return null;
            group[i] = c;
            fields.add(QuorumlogSource.SCHEMA.apply(c));
        }
        AggregateFunc[] fs = a.aggregateExpressions();
        int[] kinds = new int[fs.length];
        String[] cols = new String[fs.length];
        StringBuilder d = new StringBuilder();
        for (int i = 0; i < fs.length; i++) {
            int k = kind(fs[i]);
            if (k < 0) return null;
            kinds[i] = k;
            if (k == MIN || k == MAX) {
                cols[i] = column(fs[i] instanceof Min ? ((Min) fs[i]).column()
                    : ((Max) fs[i]).column());
            } else if (k == SUM) {
                cols[i] = BodyLengthRule.COLUMN;
            }
            d.append(i == 0 ? "" : ", ").append(fs[i].describe());
            fields.add(DataTypes.createStructField(fs[i].describe(), k == MIN || k == MAX
                ? QuorumlogSource.SCHEMA.apply(cols[i]).dataType() : DataTypes.LongType, true));
        }
        return new AggregatePushdown(group, kinds, cols,
            new StructType(fields.toArray(new StructField[0])), d.toString());
    }

    private static int kind(AggregateFunc f) {
        if (f instanceof CountStar) return COUNT;
        if (f instanceof Count) {
            Count c = (Count) f;
            if (c.isDistinct()) return -1;
            Expression e = c.column();
            if (e instanceof LiteralValue && ((LiteralValue<?>) e).value() != null) return COUNT;
            String col = column(e);
            // count(col) = count(*) for a column that is never null (all but tags)
            if (col == null || col.equals("tags")
                    || !QuorumlogSource.SCHEMA.getFieldIndex(col).isDefined()) {
                return -1;
            }
            return COUNT;
        }
        if (f instanceof Sum) {
            Sum s = (Sum) f;
            return !s.isDistinct() && BodyLengthRule.COLUMN.equals(column(s.column())) ? SUM : -1;
        }
        if (f instanceof Min || f instanceof Max) {
            String col = column(f instanceof Min ? ((Min) f).column() : ((Max) f).column());
            if (col == null || !MIN_MAXABLE.contains(col)) return -1;
            return f instanceof Min ? MIN : MAX;
        }
        return -1;
    }

    private static String column(Expression e) {
        if (!(e instanceof NamedReference)) return null;
        String[] names = ((NamedReference) e).fieldNames();
        return names.length == 1 ? names[0] : null;
    }

    /** Can the consume queues alone answer every aggregate? */
    boolean fromQueues() {
        for (int i = 0; i < kinds.length; i++) {
            if (kinds[i] == SUM
                    || (kinds[i] == MIN || kinds[i] == MAX) && !FROM_QUEUES.contains(columns[i])) {
                return false;
            }
        }
        return true;
    }

    String describe(boolean queues) {
        return "PushedAggregation: [" + pushed + "] PushedGroupBy: [" + String.join(", ", groupBy)
            + "] " + (queues ? "from consume queues" : "from record headers");
    }

    // ---- from the records -----------------------------------------------------------

    /** Scan partitions whose records are aggregated instead of returned: one, or (a
     *  complete push-down of an ungrouped aggregate, local mode) all of a scan's, read on
     *  up to `threads` threads and merged into the one row Spark takes as the answer. */
    static final class WalkPart implements InputPartition {
        private static final long serialVersionUID = 1L;
        final InputPartition[] inners;
        final AggregatePushdown agg;
        final int threads;

        WalkPart(InputPartition inner, AggregatePushdown agg) {
            this(new InputPartition[] { inner }, agg, 1);
        }

        WalkPart(InputPartition[] inners, AggregatePushdown agg, int threads) {
            this.inners = inners;
            this.agg = agg;
            this.threads = threads;
        }

        @Override public String[] preferredLocations() {
            return inners.length == 1 ? inners[0].preferredLocations() : new String[0];
        }
    }

    /** The rows of w: each inner partition's records aggregated (on w.threads threads),
     *  ungrouped rows merged into one. */
    List<InternalRow> aggregate(WalkPart w, Opener open) throws IOException {
        if (w.inners.length == 1) return aggregate(open.open(w.inners[0]));
        if (groupBy.length > 0) throw new IllegalStateException("grouped rows are not merged");
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, Math.min(w.threads,
            w.inners.length)), r -> {
                Thread t = new Thread(r, "quorumlog-aggregate");
                t.setDaemon(true);
                return t;
            });
        try {
            List<Future<List<InternalRow>>> fs = new ArrayList<>();
            for (InputPartition p : w.inners) fs.add(pool.submit(() -> aggregate(open.open(p))));
            Object[] total = empty();
            for (Future<List<InternalRow>> f : fs) {
                Object[] row = ((GenericInternalRow) f.get().get(0)).values();
                merge(total, row);
            }
            return List.of(new GenericInternalRow(total));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("quorumlog: aggregate interrupted", e);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof IOException) throw (IOException) c;
            if (c instanceof RuntimeException) throw (RuntimeException) c;
            throw new IOException(c);
        } finally {
            pool.shutdownNow();
        }
    }

    /** Opens the records of a scan partition (QuorumlogSource.ReaderFactory.open). */
    interface Opener {
        RecordSource open(InputPartition p) throws IOException;
    }

    /** Aggregates of one group, as the output row's aggregate values. */
    private Object[] empty() {
        Object[] v = new Object[kinds.length];
        for (int i = 0; i < kinds.length; i++) {
            v[i] = kinds[i] == COUNT ? (Object) 0L : null;   // sum/min/max of none: null
        }
        return v;
    }

    /** The value of a MIN/MAX column in the record (Spark's units: timestamps in us). */
    private static long field(QuorumlogRecord r, String col) {
        switch (col) {
            case "queue_offset": return r.queueOffset();
            case "position": return r.position();
            case "store_timestamp": return r.storeTimestampMs() * 1000L;
            case "born_timestamp": return r.bornTimestampMs() * 1000L;
            case "raft_index": return r.raftIndex();
            case "term": return r.term();
            case "queue_id": return r.queueId();
            case BodyLengthRule.COLUMN: return r.bodyLength();
            default: throw new IllegalStateException(col);
        }
    }

    private void add(long[] acc, boolean[] seen, QuorumlogRecord r) {
        for (int i = 0; i < kinds.length; i++) {
            switch (kinds[i]) {
                case COUNT: acc[i]++; break;
                case SUM: acc[i] += field(r, columns[i]); break;
                case MIN: {
                    long v = field(r, columns[i]);
                    if (!seen[0] || v < acc[i]) acc[i] = v;
                    break;
                }
                default: {
                    long v = field(r, columns[i]);
                    if (!seen[0] || v > acc[i]) acc[i] = v;
                }
            }
        }
        seen[0] = true;
    }

    private Object value(int i, long v) {
        return columns[i] != null && columns[i].equals("queue_id") ? (Object) (int) v : (Object) v;
    }

    /** Reads every record of source and returns one row per group (one row in all when not
     *  grouped, also for no record: Spark sums the counts). */
    List<InternalRow> aggregate(RecordSource source) throws IOException {
        Map<String, long[]> accs = new LinkedHashMap<>();
        Map<String, boolean[]> seen = new LinkedHashMap<>();
        Map<String, Object[]> keys = new LinkedHashMap<>();
        String lastKey = "";
        long[] acc = null;
        boolean[] sn = null;
        if (groupBy.length == 0) {
            acc = new long[kinds.length];
            sn = new boolean[1];
            accs.put("", acc);
            seen.put("", sn);
            keys.put("", new Object[0]);
        }
        try (RecordSource src = source) {
            while (src.next()) {
                QuorumlogRecord r = src.current();
                if (groupBy.length > 0) {
                    String k = r.queueId() + "/" + r.topic();
                    if (acc == null || !k.equals(lastKey)) {
                        lastKey = k;
                        acc = accs.computeIfAbsent(k, x -> new long[kinds.length]);
                        sn = seen.computeIfAbsent(k, x -> new boolean[1]);
                        keys.computeIfAbsent(k, x -> groupValues(r.topic(), (int) r.queueId()));
                    }
                }
                add(acc, sn, r);
            }
        }
        List<InternalRow> rows = new ArrayList<>();
        for (Map.Entry<String, long[]> e : accs.entrySet()) {
            Object[] g = keys.get(e.getKey());
            Object[] v = new Object[g.length + kinds.length];
            System.arraycopy(g, 0, v, 0, g.length);
            boolean any = seen.get(e.getKey())[0];
            for (int i = 0; i < kinds.length; i++) {
                // min / max / sum of no record is null (count is 0)
                v[g.length + i] = kinds[i] != COUNT && !any ? null : value(i, e.getValue()[i]);
            }
            rows.add(new GenericInternalRow(v));
        }
        return rows;
    }

    private Object[] groupValues(String topic, int queue) {
        Object[] g = new Object[groupBy.length];
        for (int i = 0; i < g.length; i++) {
            g[i] = groupBy[i].equals("topic") ? (Object) UTF8String.fromString(topic) : queue;
        }
        return g;
    }

    static PartitionReader<InternalRow> rowsReader(List<InternalRow> rows) {
        return new PartitionReader<InternalRow>() {
            int i = -1;
            @Override public boolean next() { return ++i < rows.size(); }
            @Override public InternalRow get() { return rows.get(i); }
            @Override public void close() {}
        };
    }

    // ---- from the consume queues ------------------------------------------------------

    /** Some queues of one store, aggregated from their consume-queue entries by a task. */
    static final class QueuePart implements InputPartition {
        private static final long serialVersionUID = 1L;
        final AggregatePushdown agg;
        final String root;
        final StoreMeta meta;
        final StoreIndexes.CqRange[] ranges;

        QueuePart(AggregatePushdown agg, String root, StoreMeta meta,
                  StoreIndexes.CqRange[] ranges) {
            this.agg = agg;
            this.root = root;
            this.meta = meta;
            this.ranges = ranges;
        }

        /** The queues dealt into at most n tasks (one task, and so one row, when none). */
        static List<QueuePart> plan(AggregatePushdown agg, String root, StoreMeta m,
                List<StoreIndexes.CqRange> ranges, int n) {
            List<QueuePart> out = new ArrayList<>();
            for (StoreIndexes.CqRange[] g : IndexPlanner.spread(ranges, n)) {
                out.add(new QueuePart(agg, root, m, g));
            }
            if (out.isEmpty()) out.add(new QueuePart(agg, root, m, new StoreIndexes.CqRange[0]));
            return out;
        }
    }

    /** The rows of the queues of one store that the filter allows (one per non-empty queue;
     *  not grouped: one in all). */
    List<InternalRow> fromQueues(Configuration conf, String root, StoreMeta m,
            List<StoreIndexes.CqRange> ranges) throws IOException {
        List<InternalRow> rows = new ArrayList<>();
        FileSystem fs = new Path(root).getFileSystem(conf);
        Object[] total = groupBy.length == 0 ? empty() : null;
        List<StoreIndexes.CqRange> used = new ArrayList<>();
        List<StoreIndexes.Ends> ends = new ArrayList<>();
        TreeSet<Long> positions = new TreeSet<>();
        for (StoreIndexes.CqRange r : ranges) {
            StoreIndexes.Ends e = StoreIndexes.ends(fs, new Path(root), r);
            if (e.count == 0) continue;
            used.add(r);
            ends.add(e);
            positions.add(e.positions[0]);
            positions.add(e.positions[1]);
        }
        Map<Long, String> topics = new HashMap<>();
        Map<Long, long[]> recs = headers(conf, root, m, positions, topics);
        for (int q = 0; q < used.size(); q++) {
            StoreIndexes.CqRange r = used.get(q);
            StoreIndexes.Ends e = ends.get(q);
            long[][] both = new long[2][];
            for (int k = 0; k < 2; k++) {
                both[k] = recs.get(e.positions[k]);
                if (both[k] == null || !r.topic.equals(topics.get(e.positions[k]))
                        || both[k][QUEUE] != r.queue || both[k][OFFSET] != e.offsets[k]) {
                    throw new CorruptRecordException("consume queue " + r.topic + "/" + r.queue
                        + " entry at offset " + e.offsets[k] + " names no message of it",
                        root, e.positions[k]);
                }
            }
            Object[] row = queueRow(r, e, both);
            if (total == null) rows.add(new GenericInternalRow(row));
            else merge(total, row);
        }
        if (total != null) rows.add(new GenericInternalRow(total));
        return rows;
    }

    private static final int QUEUE = FROM_QUEUES.size(), OFFSET = QUEUE + 1;

    /**
     * The FROM_QUEUES fields (then queue id, queue offset) of the MESSAGE records at the given
     * positions, and their topics, read in log order by one reader (each record checked:
     * header, CRC); a position holding no MESSAGE is missing from the maps.
     */
    private static Map<Long, long[]> headers(Configuration conf, String root, StoreMeta m,
            TreeSet<Long> positions, Map<Long, String> topics) throws IOException {
        Map<Long, long[]> out = new HashMap<>();
        if (positions.isEmpty()) return out;
        long[] ps = positions.stream().mapToLong(Long::longValue).toArray();
        PositionsReader.Part q = new PositionsReader.Part(root, m.segmentSizeBytes,
            m.minPosition, m.committedPosition, null, ps, "aggregate");
        try (PositionsReader rd = new PositionsReader(q, conf, true)) {
            while (rd.next()) {
                QuorumlogRecord r = rd.current();
                long[] v = new long[OFFSET + 1];
                for (int i = 0; i < FROM_QUEUES.size(); i++) v[i] = field(r, FROM_QUEUES.get(i));
                topics.put(r.position(), r.topic());
                v[QUEUE] = r.queueId();
                v[OFFSET] = r.queueOffset();
                out.put(r.position(), v);
            }
        }
        return out;
    }

    private Object[] queueRow(StoreIndexes.CqRange r, StoreIndexes.Ends e, long[][] ends) {
        Object[] g = groupValues(r.topic, r.queue);
        Object[] v = new Object[groupBy.length + kinds.length];
        System.arraycopy(g, 0, v, 0, g.length);
        for (int i = 0; i < kinds.length; i++) {
            long x;
            if (kinds[i] == COUNT) {
                x = e.count;
            } else {
                int end = kinds[i] == MIN ? 0 : 1;
                int at = end;
                switch (columns[i]) {
                    case "queue_offset": x = e.offsets[at]; break;
                    case "position": x = e.positions[at]; break;
                    default: x = ends[end][FROM_QUEUES.indexOf(columns[i])];
                }
            }
            v[groupBy.length + i] = value(i, x);
        }
        return v;
    }

    /** total (no group-by) combined with one queue's row. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private void merge(Object[] total, Object[] row) {
        for (int i = 0; i < kinds.length; i++) {
            Object a = total[i], b = row[groupBy.length + i];
            if (kinds[i] == COUNT) total[i] = (Long) a + (Long) b;
            else if (a == null || b == null) total[i] = a == null ? b : a;
            else if (kinds[i] == SUM) total[i] = (Long) a + (Long) b;
            else if (kinds[i] == MIN) total[i] = ((Comparable) b).compareTo(a) < 0 ? b : a;
            else total[i] = ((Comparable) b).compareTo(a) > 0 ? b : a;
        }
    }
}
