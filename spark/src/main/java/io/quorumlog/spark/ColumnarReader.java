/*
 * Fills Spark column vectors from a QuorumlogRecordReader: one ColumnarBatch per at most
 * MAX_ROWS records or MAX_BATCH_BYTES of variable-length data (bodies can be MiBs each),
 * reusing the vectors between batches (the body column is a BodyVector: one copy per body).
 * Only the required (pruned) columns are written.
 */
package io.quorumlog.spark;

import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

final class ColumnarReader implements PartitionReader<ColumnarBatch> {
    static final int MAX_ROWS = 4096;
    static final long MAX_BATCH_BYTES = 8L << 20;

    private static final int C_TOPIC = 0, C_QUEUE_ID = 1, C_QUEUE_OFFSET = 2, C_RAFT_INDEX = 3,
        C_TERM = 4, C_POSITION = 5, C_BORN = 6, C_STORE = 7, C_TAGS = 8, C_KEYS = 9, C_PROPS = 10,
        C_BODY = 11, C_BODY_LENGTH = 12, C_GROUP = 13;

    private final RecordSource reader;
    private final int[] codes;
    private final OnHeapColumnVector[] vectors;   // null where the column is the body
    private final BodyVector body;
    private final ColumnarBatch batch;
    private final int group;
    private boolean exhausted;

    ColumnarReader(QuorumlogSplit split, Configuration conf, StructType required) throws IOException {
        this(segmentWalk(split, conf), required, 0);
    }

    private static RecordSource segmentWalk(QuorumlogSplit split, Configuration conf)
            throws IOException {
        QuorumlogRecordReader r = new QuorumlogRecordReader();
        r.initialize(split, conf);
        return RecordSource.of(r);
    }

    /** group: the value of the `group` column (Groups), the same for every row of a store. */
    ColumnarReader(RecordSource source, StructType required, int group) {
        reader = source;
        this.group = group;
        codes = new int[required.fields().length];
        for (int i = 0; i < codes.length; i++) {
            String name = required.fields()[i].name();
            codes[i] = name.equals(QuorumlogSource.BODY_LENGTH.name()) ? C_BODY_LENGTH
                : name.equals(Groups.COLUMN) ? C_GROUP
                : QuorumlogSource.SCHEMA.fieldIndex(name);
        }
        vectors = OnHeapColumnVector.allocateColumns(MAX_ROWS, required);
        ColumnVector[] cols = new ColumnVector[codes.length];
        BodyVector bv = null;
        for (int i = 0; i < codes.length; i++) {
            if (codes[i] == C_BODY) {
                vectors[i].close();
                vectors[i] = null;
                cols[i] = bv = new BodyVector(MAX_ROWS);
            } else {
                cols[i] = vectors[i];
            }
        }
        body = bv;
        batch = new ColumnarBatch(cols);
    }

    @Override
    public boolean next() throws IOException {
        if (exhausted) return false;
        for (OnHeapColumnVector v : vectors) if (v != null) v.reset();
        int rows = 0;
        long bytes = 0;
        while (rows < MAX_ROWS && bytes < MAX_BATCH_BYTES) {
            if (!reader.next()) {
                exhausted = true;
                break;
            }
            QuorumlogRecord r = reader.current();
            put(rows, r);
            bytes += r.totalSize();
            rows++;
        }
        for (int c = 0; c < codes.length; c++) {
            if (codes[c] == C_GROUP) vectors[c].putInts(0, rows, group);
        }
        batch.setNumRows(rows);
        return rows > 0;
    }

    private void put(int row, QuorumlogRecord r) throws IOException {
        byte[] b = r.array();
        for (int c = 0; c < codes.length; c++) {
            WritableColumnVector v = vectors[c];
            switch (codes[c]) {
                case C_TOPIC: v.putByteArray(row, b, r.topicOffset(), r.topicLength()); break;
                case C_QUEUE_ID: v.putInt(row, (int) r.queueId()); break;
                case C_QUEUE_OFFSET: v.putLong(row, r.queueOffset()); break;
                case C_RAFT_INDEX: v.putLong(row, r.raftIndex()); break;
                case C_TERM: v.putLong(row, r.term()); break;
                case C_POSITION: v.putLong(row, r.position()); break;
                // Spark timestamps are microseconds since the epoch.
                case C_BORN: v.putLong(row, r.bornTimestampMs() * 1000L); break;
                case C_STORE: v.putLong(row, r.storeTimestampMs() * 1000L); break;
                case C_TAGS:
                    if (r.tagsLength() == 0) v.putNull(row);
                    else v.putByteArray(row, b, r.tagsOffset(), r.tagsLength());
                    break;
                case C_KEYS: {
                    WritableColumnVector child = (WritableColumnVector) v.getChild(0);
                    int first = child.getElementsAppended();
                    r.forEachKey(child::appendByteArray);
                    v.putArray(row, first, child.getElementsAppended() - first);
                    break;
                }
                case C_PROPS: {
                    WritableColumnVector ks = (WritableColumnVector) v.getChild(0);
                    WritableColumnVector vs = (WritableColumnVector) v.getChild(1);
                    int first = ks.getElementsAppended();
                    int[] which = {0};
                    r.forEachProperty((a, o, n) -> {
                        if ((which[0]++ & 1) == 0) ks.appendByteArray(a, o, n);
                        else vs.appendByteArray(a, o, n);
                    });
                    v.putArray(row, first, ks.getElementsAppended() - first);
                    break;
                }
                case C_BODY: body.put(row, b, r.bodyOffset(), r.bodyLength()); break;
                case C_BODY_LENGTH: v.putInt(row, r.bodyLength()); break;
                case C_GROUP: break;   // filled for the whole batch in next()
                default: throw new IllegalStateException("unknown column " + codes[c]);
            }
        }
    }

    @Override
    public ColumnarBatch get() { return batch; }

    @Override
    public CustomTaskMetric[] currentMetricsValues() {
        long skipped = reader.skipped();
        return new CustomTaskMetric[] { new CustomTaskMetric() {
            @Override public String name() { return "skippedCorruptRecords"; }
            @Override public long value() { return skipped; }
        } };
    }

    @Override
    public void close() throws IOException {
        reader.close();
        batch.close();
    }
}
