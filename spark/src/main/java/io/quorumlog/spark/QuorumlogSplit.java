/*
 * A byte range of one segment file plus the store facts frozen when the job was planned: the
 * read limit (the checkpoint's committed position, so every task of one job sees the same
 * committed prefix even while a broker keeps appending) and the index geometry.
 */
package io.quorumlog.spark;

import java.io.DataInput;
import java.io.DataOutput;
import java.io.IOException;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.lib.input.FileSplit;

public class QuorumlogSplit extends FileSplit {
    /** Records starting at or after this log position are not read (Long.MAX_VALUE: no limit). */
    private long limitPosition;
    /** The checkpoint's committed position: a bad record before it is corruption, after it a torn tail. */
    private long committedPosition;
    private long indexFileEntries;

    public QuorumlogSplit() { super(); }  // for Writable deserialisation

    public QuorumlogSplit(Path file, long start, long length, String[] hosts, long limitPosition,
                          long committedPosition, long indexFileEntries) {
        super(file, start, length, hosts);
        this.limitPosition = limitPosition;
        this.committedPosition = committedPosition;
        this.indexFileEntries = indexFileEntries;
    }

    public long getLimitPosition() { return limitPosition; }
    public long getCommittedPosition() { return committedPosition; }
    public long getIndexFileEntries() { return indexFileEntries; }

    @Override
    public void write(DataOutput out) throws IOException {
        super.write(out);
        out.writeLong(limitPosition);
        out.writeLong(committedPosition);
        out.writeLong(indexFileEntries);
    }

    @Override
    public void readFields(DataInput in) throws IOException {
        super.readFields(in);
        limitPosition = in.readLong();
        committedPosition = in.readLong();
        indexFileEntries = in.readLong();
    }

    @Override
    public String toString() {
        return super.toString() + " limit=" + limitPosition;
    }
}
