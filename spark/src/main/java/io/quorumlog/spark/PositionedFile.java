/*
 * A file read at given positions (pread), for the index reads that probe a few bytes here
 * and there: consume-queue entries (binary search), the records an index names. Hadoop's
 * local FSDataInputStream answers a positioned read with seek + a buffered read (64 KiB
 * copied per 20-byte probe) under a lock; a local file is read through a FileChannel
 * instead (one pread each), any other file system through its own stream. A local file
 * can also be read through a memory map (map(), kept per JVM while the file is the same):
 * a reader that picks records or entries scattered over a file then copies only those
 * bytes, with no system call per read.
 */
package io.quorumlog.spark;

import java.io.Closeable;
import java.io.EOFException;
import java.io.IOException;
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.LinkedHashMap;
import java.util.Map;

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

    /** The whole file memory-mapped read-only, little-endian (sharedMap), or null (not a
     *  local file, empty, or longer than a buffer can be). */
    ByteBuffer map() throws IOException { return null; }

    /** True when the path this was opened by no longer names the file opened (it was
     *  removed, renamed away or replaced: a segment retention deleted or recycled); false
     *  when it still does, or when that cannot be told (not a local file). */
    boolean replaced() throws IOException { return false; }

    /** The local file behind p (the file system's own path -> file mapping: a Path's URI is
     *  not escaped, topics may hold any character), or null when fs is not local. */
    static File localFile(FileSystem fs, Path p) {
        if (fs instanceof LocalFileSystem) return ((LocalFileSystem) fs).pathToFile(p);
        if (fs instanceof RawLocalFileSystem) return ((RawLocalFileSystem) fs).pathToFile(p);
        return null;
    }

    static PositionedFile open(FileSystem fs, Path p) throws IOException {
        File f = localFile(fs, p);
        if (f == null) {
            ReadCount.opened();
            return new Stream(fs.open(p), fs.getFileStatus(p).getLen());
        }
        return openLocal(f);
    }

    /** The local file f, read through a FileChannel (and map()). */
    static PositionedFile openLocal(File f) throws IOException {
        ReadCount.opened();
        Object before = fileKey(f);
        FileChannel ch = FileChannel.open(f.toPath(), StandardOpenOption.READ);
        Object after = fileKey(f);
        // The channel's own file key cannot be asked for: the file opened is the one the path
        // named before and after the open when both agree (a store never renames a file back
        // to a name it left), else unknown (null: never cached, never called replaced).
        return new Local(ch, f, before != null && before.equals(after) ? before : null);
    }

    /** The file key (device and inode) of the file f names, or null when f names none. */
    static Object fileKey(File f) throws IOException {
        try {
            return Files.readAttributes(f.toPath(), BasicFileAttributes.class).fileKey();
        } catch (NoSuchFileException e) {
            return null;
        }
    }

    /** Whether f no longer names the file whose key was opened (null: unknown, false). */
    static boolean replaced(File f, Object opened) throws IOException {
        return opened != null && !opened.equals(fileKey(f));
    }

    /**
     * Memory maps shared by every reader of this JVM, by file: a query maps each consume-queue
     * file and segment it reads, and mapping them anew per read (then faulting every page
     * touched into the new mapping) cost more than the reads. A mapping is reused while the
     * file opened is the one mapped (its file key: device and inode, which cannot be
     * reused while the mapping holds the file) of the same length; else the file is mapped
     * again. The key is the opened channel's (see open), never the path's read afterwards:
     * a path that names another file by then (a segment recycled under a new name) must
     * not cache one file's mapping under the other's key. A recycled file keeps its key
     * under its new name; the mapping is shared (MAP_SHARED), so a reader of either name
     * reads the file's current bytes -- the new segment's. Files are read through their mappings only (never written), and the mappings a
     * replaced or evicted entry held are left to the collector, never unmapped under a
     * reader.
     */
    private static final int MAPS_KEPT = 512;
    private static final Map<String, Mapped> MAPS = new LinkedHashMap<String, Mapped>(64, 0.75f,
            true) {
        @Override protected boolean removeEldestEntry(Map.Entry<String, Mapped> e) {
            return size() > MAPS_KEPT;
        }
    };

    private static final class Mapped {
        final Object key;
        final long len;
        final ByteBuffer buf;

        Mapped(Object key, long len, ByteBuffer buf) {
            this.key = key;
            this.len = len;
            this.buf = buf;
        }
    }

    /** f (read through ch) mapped whole, from the shared maps when still valid; null when
     *  it is empty or longer than a buffer can be. A view of its own per call. */
    static ByteBuffer sharedMap(File f, FileChannel ch, Object key) throws IOException {
        long n = ch.size();
        if (n == 0 || n > Integer.MAX_VALUE) return null;
        ByteBuffer kept = cachedMap(f, key, n);
        if (kept != null) return kept;
        Mapped m = new Mapped(key, n, ch.map(FileChannel.MapMode.READ_ONLY, 0, n));
        if (key != null) {
            synchronized (MAPS) {
                MAPS.put(f.getAbsolutePath(), m);
            }
        }
        return m.buf.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    }

    /**
     * The shared mapping of f (a view of its own) when it maps the file of that key and
     * length, else null -- without opening f: a reader that has just read f's attributes
     * (a directory listing: key and length from one stat) names the file the path names now,
     * and a mapping made of that file (its key checked when it was opened, see open) is of
     * that file still (an inode is not reused while a mapping holds its file).
     */
    static ByteBuffer cachedMap(File f, Object key, long len) {
        if (key == null) return null;
        Mapped m;
        synchronized (MAPS) {
            m = MAPS.get(f.getAbsolutePath());
        }
        return m != null && key.equals(m.key) && m.len == len
            ? m.buf.duplicate().order(ByteOrder.LITTLE_ENDIAN) : null;
    }

    private static final class Local extends PositionedFile {
        private final FileChannel ch;
        private final File file;
        private final Object key;     // the opened file's key, or null (unknown)
        private ByteBuffer mapped;

        Local(FileChannel ch, File file, Object key) {
            this.ch = ch;
            this.file = file;
            this.key = key;
        }

        @Override ByteBuffer map() throws IOException {
            if (mapped == null) mapped = sharedMap(file, ch, key);
            return mapped;
        }

        @Override boolean replaced() throws IOException { return replaced(file, key); }

        @Override void readFully(long pos, byte[] b, int off, int len) throws IOException {
            ByteBuffer bb = ByteBuffer.wrap(b, off, len);
            while (bb.hasRemaining()) {
                int n = ch.read(bb, pos + bb.position() - off);
                if (n < 0) throw new EOFException("end of file at " + (pos + bb.position() - off));
            }
        }

        @Override long length() throws IOException { return ch.size(); }
        @Override public void close() throws IOException {
            mapped = null;
            ch.close();
        }
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
