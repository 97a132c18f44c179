/*
 * A file read at given positions (pread), for the index reads that probe a few bytes here
 * and there: consume-queue entries (binary search), the records an index names. Hadoop's
 * local FSDataInputStream answers a positioned read with seek + a buffered read (64 KiB
 * copied per 20-byte probe) under a lock; a local file is read through a FileChannel
 * instead (one pread each), any other file system through its own stream.
 */
package io.quorumlog.spark;

import java.io.Closeable;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.StandardOpenOption;

import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

abstract class PositionedFile implements Closeable {
    /** Reads exactly len bytes at pos into b[off..]; EOFException when the file ends first. */
    abstract void readFully(long pos, byte[] b, int off, int len) throws IOException;

    /** The file's length in bytes. */
    abstract long length() throws IOException;

    static PositionedFile open(FileSystem fs, Path p) throws IOException {
        // the file system's own path -> file mapping (a Path's URI is not escaped: topics
        // may hold any character)
        if (fs instanceof LocalFileSystem) {
            return new Local(FileChannel.open(((LocalFileSystem) fs).pathToFile(p).toPath(),
                StandardOpenOption.READ));
        }
        if (fs instanceof RawLocalFileSystem) {
            return new Local(FileChannel.open(((RawLocalFileSystem) fs).pathToFile(p).toPath(),
                StandardOpenOption.READ));
        }
        return new Stream(fs.open(p), fs.getFileStatus(p).getLen());
    }

    private static final class Local extends PositionedFile {
        private final FileChannel ch;

        Local(FileChannel ch) { this.ch = ch; }

        @Override void readFully(long pos, byte[] b, int off, int len) throws IOException {
            ByteBuffer bb = ByteBuffer.wrap(b, off, len);
            while (bb.hasRemaining()) {
                int n = ch.read(bb, pos + bb.position() - off);
                if (n < 0) throw new EOFException("end of file at " + (pos + bb.position() - off));
            }
        }

        @Override long length() throws IOException { return ch.size(); }
        @Override public void close() throws IOException { ch.close(); }
    }

    private static final class Stream extends PositionedFile {
        private final FSDataInputStream in;
        private final long len;

        Stream(FSDataInputStream in, long len) {
            this.in = in;
            this.len = len;
        }

        @Override void readFully(long pos, byte[] b, int off, int n) throws IOException {
            in.readFully(pos, b, off, n);
        }

        @Override long length() { return len; }
        @Override public void close() throws IOException { in.close(); }
    }
}
