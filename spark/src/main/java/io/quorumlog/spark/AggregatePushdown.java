/*
 * Aggregates answered from the consume queues without reading a body: count(*) (and count of
 * a non-null column), min/max of queue_offset and position (the entries themselves), and
 * min/max of store_timestamp, raft_index, term and queue_id (constant per queue, or never
 * decreasing along the log: the first and last entry's record headers), grouped by nothing,
 * topic and/or queue_id. One row per queue (per task when not grouped); Spark merges them
 * (count -> sum, min -> min, max -> max): SupportsPushDownAggregates' partial push-down.
 *
 * Taken only when the consume queues cover every committed record of every store (the
 * checkpoint's dispatched position at or past its committed position), the read is of
 * committed data, and no filter beyond topic/queue_id narrows the read: anything else is
 * refused and Spark aggregates the scanned rows.
 */
package io.quorumlog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

final class AggregatePushdown implements Serializable {
    private static final long serialVersionUID = 1L;
    static final int COUNT = 0, MIN = 1, MAX = 2;
    private static final List<String> GROUPABLE = List.of("topic", "queue_id");
    private static final List<String> MIN_MAXABLE = List.of("queue_offset", "position",
        "store_timestamp", "raft_index", "term", "queue_id");

    final String[] groupBy;     // column names
    final int[] kinds;          // COUNT / MIN / MAX
    final String[] columns;     // MIN/MAX column (null for COUNT)
    final StructType schema;
    final String describe;

    private AggregatePushdown(String[] groupBy, int[] kinds, String[] columns, StructType schema,
            String describe) {
        this.groupBy = groupBy;
        this.kinds = kinds;
        this.columns = columns;
        this.schema = schema;
        this.describe = describe;
    }

    /** The push-down of a, or null when the consume queues cannot answer it. */
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
        for (int i = 0; i < fs.length; i++) {
            AggregateFunc f = fs[i];
            if (f instanceof CountStar) {
                kinds[i] = COUNT;
            } else if (f instanceof Count) {
                Count c = (Count) f;
                String col = column(c.column());
                // count(col) = count(*) for a column that is never null (all but tags)
                if (c.isDistinct() || col == null || col.equals("tags")
                        || !QuorumlogSource.SCHEMA.getFieldIndex(col).isDefined()) {
                    return null;
                }
                kinds[i] = COUNT;
            } else if (f instanceof Min || f instanceof Max) {
                String col = column(f instanceof Min ? ((Min) f).column() : ((Max) f).column());
                if (col == null || !MIN_MAXABLE.contains(col)) return null;
                kinds[i] = f instanceof Min ? MIN : MAX;
                cols[i] = col;
            } else {
                return null;
            }
            fields.add(DataTypes.createStructField("agg" + i, kinds[i] == COUNT
                ? DataTypes.LongType : QuorumlogSource.SCHEMA.apply(cols[i]).dataType(), true));
        }
        StringBuilder d = new StringBuilder("PushedAggregation: [");
        for (int i = 0; i < fs.length; i++) d.append(i == 0 ? "" : ", ").append(fs[i].describe());
        d.append("] PushedGroupBy: [").append(String.join(", ", group))
            .append("] from consume queues");
        return new AggregatePushdown(group, kinds, cols, new StructType(
            fields.toArray(new StructField[0])), d.toString());
    }

    private static String column(Expression e) {
        if (!(e instanceof NamedReference)) return null;
        String[] names = ((NamedReference) e).fieldNames();
        return names.length == 1 ? names[0] : null;
    }

    /** One task's queues of one store. */
    static final class Part implements InputPartition {
        private static final long serialVersionUID = 1L;
        final PositionsReader.Part store;   // root, segment size, positions bounds; ranges
        final AggregatePushdown agg;

        Part(PositionsReader.Part store, AggregatePushdown agg) {
            this.store = store;
            this.agg = agg;
        }
    }

    /** Rows of one Part: one per non-empty queue, or (not grouped) exactly one. */
    static PartitionReader<InternalRow> reader(Part p, Configuration conf) throws IOException {
        List<InternalRow> rows = new ArrayList<>();
        FileSystem fs = new Path(p.store.root).getFileSystem(conf);
        Object[] total = p.agg.groupBy.length == 0 ? p.agg.empty() : null;
        for (StoreIndexes.CqRange r : p.store.ranges) {
            StoreIndexes.Entries e = StoreIndexes.read(fs, new Path(p.store.root), r);
            if (e.n == 0) continue;
            QuorumlogRecord[] ends = firstAndLast(p.store, r, e, conf);
            Object[] row = p.agg.row(r, e, ends);
            if (total == null) rows.add(new GenericInternalRow(row));
            else p.agg.merge(total, row);
        }
        if (total != null) rows.add(new GenericInternalRow(total));
        return new PartitionReader<InternalRow>() {
            int i = -1;
            @Override public boolean next() { return ++i < rows.size(); }
            @Override public InternalRow get() { return rows.get(i); }
            @Override public void close() {}
        };
    }

    /** The records of a queue's first and last entries, read and checked. */
    private static QuorumlogRecord[] firstAndLast(PositionsReader.Part s, StoreIndexes.CqRange r,
            StoreIndexes.Entries e, Configuration conf) throws IOException {
        QuorumlogRecord[] out = new QuorumlogRecord[2];
        int[] which = { 0, e.n - 1 };
        for (int k = 0; k < 2; k++) {
            StoreIndexes.CqRange one = new StoreIndexes.CqRange(r.topic, r.queue,
                e.offsets[which[k]], e.offsets[which[k]], r.minPos, r.limit, null);
            PositionsReader.Part q = new PositionsReader.Part(s.root, s.segmentSize, s.minPos,
                s.committed, new StoreIndexes.CqRange[] { one }, null, "aggregate");
            try (PositionsReader rd = new PositionsReader(q, new Configuration(conf), true)) {
                if (!rd.next()) {
                    throw new CorruptRecordException("consume queue " + r.topic + "/" + r.queue
                        + " entry at offset " + e.offsets[which[k]] + " names no message",
                        s.root, e.positions[which[k]]);
                }
                out[k] = rd.current();   // each reader has its own buffer
            }
        }
        return out;
    }

    private Object[] empty() {
        Object[] v = new Object[kinds.length];
        for (int i = 0; i < kinds.length; i++) v[i] = kinds[i] == COUNT ? (Object) 0L : null;
        return v;
    }

    private Object[] row(StoreIndexes.CqRange r, StoreIndexes.Entries e, QuorumlogRecord[] ends) {
        Object[] v = new Object[groupBy.length + kinds.length];
        for (int g = 0; g < groupBy.length; g++) {
            v[g] = groupBy[g].equals("topic") ? (Object) UTF8String.fromString(r.topic) : r.queue;
        }
        for (int i = 0; i < kinds.length; i++) {
            Object x;
            if (kinds[i] == COUNT) {
                x = (long) e.n;
            } else {
                int end = kinds[i] == MIN ? 0 : 1;
                QuorumlogRecord rec = ends[end];
                switch (columns[i]) {
                    case "queue_offset": x = e.offsets[end == 0 ? 0 : e.n - 1]; break;
                    case "position": x = e.positions[end == 0 ? 0 : e.n - 1]; break;
                    case "store_timestamp": x = rec.storeTimestampMs() * 1000L; break;
                    case "raft_index": x = rec.raftIndex(); break;
                    case "term": x = rec.term(); break;
                    case "queue_id": x = r.queue; break;
                    default: throw new IllegalStateException(columns[i]);
                }
            }
            v[groupBy.length + i] = x;
        }
        return v;
    }

    /** total (no group-by) combined with one queue's row. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private void merge(Object[] total, Object[] row) {
        for (int i = 0; i < kinds.length; i++) {
            Object a = total[i], b = row[i];
            if (kinds[i] == COUNT) total[i] = (Long) a + (Long) b;
            else if (a == null) total[i] = b;
            else if (kinds[i] == MIN) total[i] = ((Comparable) b).compareTo(a) < 0 ? b : a;
            else total[i] = ((Comparable) b).compareTo(a) > 0 ? b : a;
        }
    }
}
