/*
 * What ColumnarReader fills its batches from: a sequence of MESSAGE records. Two kinds exist:
 * a walk over a byte range of one segment (QuorumlogRecordReader) and the records at the log
 * positions an index named (PositionsReader).
 */
package io.quorumlog.spark;

import java.io.Closeable;
import java.io.IOException;

interface RecordSource extends Closeable {
    /** Moves to the next record; false at the end. */
    boolean next() throws IOException;

    /** The current record (reused: valid until the next call to next()). */
    QuorumlogRecord current();

    /** Corrupt records skipped so far (onCorrupt=skip). */
    long skipped();

    /** A segment walk as a RecordSource. */
    static RecordSource of(QuorumlogRecordReader r) {
        return new RecordSource() {
            @Override public boolean next() throws IOException { return r.nextKeyValue(); }
            @Override public QuorumlogRecord current() { return r.getCurrentValue(); }
            @Override public long skipped() { return r.skippedCorruptRecords(); }
            @Override public void close() throws IOException { r.close(); }
        };
    }
}
