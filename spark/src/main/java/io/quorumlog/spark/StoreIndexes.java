/*
 * The store layer's indexes, read (never written) on any Hadoop FileSystem: consume queues
 * (<root>/consumequeue/<topic>/<queue>/<20-digit first offset>, 20-byte entries: position
 * i64, size i32, tag hash i64) and the key index (<root>/keyindex/<20-digit begin position>).
 * Layouts in docs/format.md. Both are derived data: an entry only says where to look, the
 * record read there is checked (header, CRC, position) before it is returned, and what the
 * indexes do not cover durably (past the checkpoint's dispatched position, past a key-index
 * file's end position) is read from the log instead.
 */
package io.quorumlog.spark;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

final class StoreIndexes {
    private StoreIndexes() {}

    static final int CQ_ENTRY = 20;
    /** Entries read per positioned read of a consume-queue file. */
    private static final int CQ_CHUNK = 1 << 16;
    static final int KI_HEADER = 64;
    static final int KI_ENTRY = 24;
    static final long KI_MAGIC = 0x494B4C51L;
    /** A queue directory's name (String.matches would compile the pattern per name). */
    private static final java.util.regex.Pattern QUEUE_NAME =
        java.util.regex.Pattern.compile("[0-9]{1,9}");

    /** FNV-1a 64 of the UTF-8 bytes of s, as the store computes tag and key hashes. */
    static long fnv1a64(byte[] b) {
        long h = 0xcbf29ce484222325L;
        for (byte x : b) {
            h ^= (x & 0xFF);
            h *= 0x100000001b3L;
        }
        return h;
    }

    static long tagHash(String tags) { return fnv1a64(tags.getBytes(StandardCharsets.UTF_8)); }

    static long keyHash(String topic, String key) {
        return fnv1a64((topic + "\0" + key).getBytes(StandardCharsets.UTF_8));
    }

    /** Topic directories under consumequeue/ (empty when the store has none). */
    static List<String> topics(FileSystem fs, Path root) throws IOException {
        List<String> out = new ArrayList<>();
        Path dir = new Path(root, "consumequeue");
        File local = PositionedFile.localFile(fs, dir);
        if (local != null) {
            // one directory read and a stat per topic: Hadoop's local listStatus builds a
            // FileStatus (several stats, a URI parse) per entry
            File[] subs = local.listFiles(File::isDirectory);
            if (subs != null) for (File f : subs) out.add(f.getName());
        } else if (fs.exists(dir)) {
            for (FileStatus st : fs.listStatus(dir)) {
                if (st.isDirectory()) out.add(st.getPath().getName());
            }
        }
        out.sort(null);
        return out;
    }

    /** Queue ids of a topic's consume-queue directory, ascending. */
    static int[] queues(FileSystem fs, Path root, String topic) throws IOException {
        Path dir = new Path(new Path(root, "consumequeue"), topic);
        List<Integer> out = new ArrayList<>();
        File local = PositionedFile.localFile(fs, dir);
        if (local != null) {
            File[] subs = local.listFiles(f -> QUEUE_NAME.matcher(f.getName()).matches()
                && f.isDirectory());
            if (subs != null) for (File f : subs) out.add(Integer.parseInt(f.getName()));
        } else {
            FileStatus[] sts;
            try {
                sts = fs.listStatus(dir);
            } catch (FileNotFoundException e) {
                return new int[0];
            }
            for (FileStatus st : sts) {
                String n = st.getPath().getName();
                if (st.isDirectory() && QUEUE_NAME.matcher(n).matches()) out.add(Integer.parseInt(n));
            }
        }
        return out.stream().mapToInt(Integer::intValue).sorted().toArray();
    }

    /** One consume-queue file: its first offset, path (a local file's: file, and the file
     *  key -- device and inode -- its listing read) and length. */
    static final class CqFile {
        final long first;
        final Path path;     // null for a local file
        final File file;     // null on other file systems
        final Object key;    // a local file's key when listed (null: unknown)
        final long len;
        private ByteBuffer mapped;           // the file mapped, once a read has mapped it
        private boolean mapTried;

        CqFile(long first, Path path, File file, Object key, long len) {
            this.first = first;
            this.path = path;
            this.file = file;
            this.key = key;
            this.len = len;
        }

        /** The file opened for positioned reads (a local one without a Hadoop Path). */
        PositionedFile open(FileSystem fs) throws IOException {
            return file != null ? PositionedFile.openLocal(file) : PositionedFile.open(fs, path);
        }

        /**
         * The whole file memory-mapped (a view of its own), or null (not local, empty, or too
         * long): the reads of one listing (the slices of one query) share one mapping, and a
         * local file whose key and length the listing read are those of the JVM's shared
         * mapping of it (PositionedFile.cachedMap) is not opened at all.
         */
        synchronized ByteBuffer map(FileSystem fs) throws IOException {
            if (file == null) return null;       // only a local file is mapped
            if (!mapTried) {
                mapTried = true;
                mapped = PositionedFile.cachedMap(file, key, len);
                if (mapped != null) {
                    ReadCount.opened();          // read, if not opened anew
                } else {
                    try (PositionedFile in = open(fs)) {
                        mapped = in.map();
                    }
                }
            }
            return mapped == null ? null : mapped.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        }

        @Override public String toString() { return file != null ? file.toString() : path.toString(); }
    }

    /**
     * The consume-queue files of the queues one plan reads, each queue's listed once: the
     * slices of a tag or queue filter (IndexPlanner.planQueues cuts the log into slices, each
     * reading every selected queue's entries in its stretch) share one Listing when they are
     * read in one JVM (a driver answer), so a queue's directory is listed, and each file's
     * attributes read and the file mapped, once per query, not once per slice. Made per plan
     * (never kept between queries: a new query lists anew and sees files added, removed or
     * replaced since); a task's deserialised partition has none and lists for itself.
     */
    static final class Listing {
        private final java.util.concurrent.ConcurrentHashMap<List<Object>, List<CqFile>> queues =
            new java.util.concurrent.ConcurrentHashMap<>();
        private volatile Object cqDir;     // consumequeue/ as a local File, or its Path

        /** The numbered files of r's queue directory by first offset (empty when none). */
        List<CqFile> files(FileSystem fs, Path root, CqRange r) throws IOException {
            try {
                return queues.computeIfAbsent(List.of(r.topic, r.queue), k -> {
                    try {
                        return queueFiles(fs, root, r, cqDir(fs, root));
                    } catch (IOException e) {
                        throw new java.io.UncheckedIOException(e);
                    }
                });
            } catch (java.io.UncheckedIOException e) {
                throw e.getCause();
            }
        }

        private Object cqDir(FileSystem fs, Path root) {
            Object d = cqDir;
            if (d == null) {
                Path p = new Path(root, "consumequeue");
                File local = PositionedFile.localFile(fs, p);
                cqDir = d = local != null ? local : p;
            }
            return d;
        }
    }

    /** queueFiles under cq: the consume-queue directory as a local File (listed with one
     *  stat per file for its type, length and key; no Path per queue or file, each a URI
     *  parse and a normalising regex), or as a Path (any other file system). */
    private static List<CqFile> queueFiles(FileSystem fs, Path root, CqRange r, Object cq)
            throws IOException {
        List<CqFile> out = new ArrayList<>();
        if (cq instanceof File) {
            File local = new File(new File((File) cq, r.topic), Integer.toString(r.queue));
            String[] names = local.list();
            for (String n : names == null ? new String[0] : names) {
                if (!Format.isNumberedName(n)) continue;
                File f = new File(local, n);
                java.nio.file.attribute.BasicFileAttributes a;
                try {
                    a = java.nio.file.Files.readAttributes(f.toPath(),
                        java.nio.file.attribute.BasicFileAttributes.class);
                } catch (java.nio.file.NoSuchFileException e) {
                    continue;                    // removed since the listing
                }
                if (a.isRegularFile()) {
                    out.add(new CqFile(Long.parseLong(n), null, f, a.fileKey(), a.size()));
                }
            }
        } else {
            Path dir = new Path(new Path((Path) cq, r.topic), Integer.toString(r.queue));
            FileStatus[] sts;
            try {
                sts = fs.listStatus(dir);
            } catch (FileNotFoundException e) {
                return out;
            }
            for (FileStatus st : sts) {
                String n = st.getPath().getName();
                if (st.isFile() && Format.isNumberedName(n)) {
                    out.add(new CqFile(Long.parseLong(n), st.getPath(), null, null, st.getLen()));
                }
            }
        }
        out.sort((a, b) -> Long.compare(a.first, b.first));
        return out;
    }

    /** Consume-queue entries of one queue, in offset order (so in log order). */
    static final class Entries {
        long[] positions = new long[64];
        int[] sizes = new int[64];
        long[] offsets = new long[64];
        int n;

        void add(long pos, int size, long off) {
            if (n == positions.length) {
                positions = Arrays.copyOf(positions, n * 2);
                sizes = Arrays.copyOf(sizes, n * 2);
                offsets = Arrays.copyOf(offsets, n * 2);
            }
            positions[n] = pos;
            sizes[n] = size;
            offsets[n++] = off;
        }
    }

    /** What to take from a consume queue: offsets in [offLo, offHi], positions in
     *  [minPos, limit), tag hash in tagHashes (null: any). */
    static final class CqRange implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final String topic;
        final int queue;
        final long offLo, offHi, minPos, limit;
        final long[] tagHashes;  // sorted, or null

        CqRange(String topic, int queue, long offLo, long offHi, long minPos, long limit,
                long[] tagHashes) {
            this.topic = topic;
            this.queue = queue;
            this.offLo = offLo;
            this.offHi = offHi;
            this.minPos = minPos;
            this.limit = limit;
            this.tagHashes = tagHashes;
        }
    }

    /**
     * The entries r selects. A queue's entries are contiguous (holes only before its first
     * entry, unused space after its last) and their positions grow with their offsets, so
     * the stretch of offsets whose positions lie in [r.minPos, r.limit) is found by binary
     * search (span) and only the tag hashes are compared inside it, in one pass over the
     * mapped (or read) entries. Files that leave a gap, or a queue that starts with holes,
     * are scanned entry by entry instead (scanAll).
     */
    static Entries read(FileSystem fs, Path root, CqRange r) throws IOException {
        return read(fs, root, r, new Listing());
    }

    /** read(), the queue's files from listing (shared by the reads of one plan). */
    static Entries read(FileSystem fs, Path root, CqRange r, Listing listing) throws IOException {
        List<CqFile> files = listing.files(fs, root, r);
        try (EntryProbe e = EntryProbe.open(fs, files)) {
            long[] s = e == null ? null : span(e, r);
            if (s != null) {
                Entries out = new Entries();
                if (s[0] <= s[1]) scanSpan(e, r, s[0], s[1], out);
                return out;
            }
        }
        return scanAll(fs, files, r);
    }

    /** The entries of offsets [a, b] (all used, their positions inside r's) whose tag hash
     *  r allows, file by file over the probe's buffers. */
    private static void scanSpan(EntryProbe e, CqRange r, long a, long b, Entries out)
            throws IOException {
        long[] tags = r.tagHashes;
        boolean one = tags != null && tags.length == 1;
        byte[] chunk = null;
        long tag = one ? tags[0] : 0;
        for (int i = 0; i < e.files.size(); i++) {
            CqFile f = e.files.get(i);
            long hi = Math.min(b, f.first + f.len / CQ_ENTRY - 1);
            for (long o = Math.max(a, f.first); o <= hi; ) {
                ByteBuffer bb = e.entries(i, o, hi);   // holds offsets [e.bufFirst, ...]
                long base = e.bufFirst;
                long end = Math.min(hi, base + bb.limit() / CQ_ENTRY - 1);
                if (end < o) {
                    throw new java.io.EOFException("consume queue file " + f
                        + " is shorter than listed");
                }
                if (one) {      // one tag (a tag filter): a stride over the tag hashes
                    if (chunk == null) chunk = new byte[TAG_CHUNK * CQ_ENTRY];
                    scanOneTag(bb, base, o, end, tag, r, out, chunk);
                    o = end + 1;
                    continue;
                }
                for (; o <= end; o++) {
                    int at = (int) (o - base) * CQ_ENTRY;
                    if (tags != null) {
                        long h = bb.getLong(at + 12);
                        if (one ? h != tag : Arrays.binarySearch(tags, h) < 0) continue;
                    }
                    long pos = bb.getLong(at);
                    int size = bb.getInt(at + 8);
                    // (cannot happen inside a span; checked so an entry is never taken blind)
                    if (size <= 0 || pos < r.minPos || pos >= r.limit) continue;
                    out.add(pos, size, o);
                }
            }
        }
    }

    /** Entries scanOneTag copies out of a buffer at a time (64 KiB: stays in the cache). */
    static final int TAG_CHUNK = 3276;

    /** scanSpan's loop for one tag hash: entries [o, end] of bb (offset base at index 0),
     *  compared on the tag hash alone. A tag of 20 matches one entry in 20: this loop is
     *  the consume-queue read of a tag filter. The entries are copied a chunk at a time
     *  into a heap array (one bulk copy, no index or scope check per entry as a direct
     *  buffer's getLong has) and compared there, by byte index. */
    static void scanOneTag(ByteBuffer bb, long base, long o, long end, long tag,
            CqRange r, Entries out, byte[] chunk) {
        int per = chunk.length / CQ_ENTRY;
        for (long c = o; c <= end; c += per) {
            int k = (int) Math.min(per, end - c + 1), stop = k * CQ_ENTRY;
            bb.get((int) (c - base) * CQ_ENTRY, chunk, 0, stop);
            matchTag(chunk, stop, tag, c, r, out);
        }
    }

    /** The entries of chunk[0, stop) (the first is offset first) with tag hash tag. A
     *  method of its own, called per chunk: the JIT compiles a small method called often
     *  sooner than a long loop inside a larger one (on-stack replacement). */
    private static void matchTag(byte[] chunk, int stop, long tag, long first, CqRange r,
            Entries out) {
        for (int at = 0; at < stop; at += CQ_ENTRY) {
            if (Format.i64(chunk, at + 12) != tag) continue;
            long pos = Format.i64(chunk, at);
            int size = Format.i32(chunk, at + 8);
            // (cannot happen inside a span; checked so an entry is never taken blind)
            if (size <= 0 || pos < r.minPos || pos >= r.limit) continue;
            out.add(pos, size, first + at / CQ_ENTRY);
        }
    }

    /**
     * Every entry of the files from r.offLo on, one by one: an entry whose size is 0 is a
     * hole (unused, or before a rebuilt queue's start); positions grow with offsets, so the
     * first entry at or past r.limit ends the read.
     */
    private static Entries scanAll(FileSystem fs, List<CqFile> files, CqRange r)
            throws IOException {
        Entries out = new Entries();
        byte[] buf = new byte[CQ_CHUNK * CQ_ENTRY];
        boolean seen = false;
        for (CqFile st : files) {
            long first = st.first;
            long lo = Math.max(first, r.offLo), hi = Math.min(first + st.len / CQ_ENTRY - 1,
                r.offHi);
            if (lo > hi) continue;
            try (PositionedFile in = st.open(fs)) {
                int reads = 0;
                for (long o = lo; o <= hi; ) {
                    // small reads first: a queue's used entries usually end early in its
                    // last file, which is preallocated to its full size
                    int k = (int) Math.min(Math.min(CQ_CHUNK, 1024L << Math.min(6, reads++)),
                        hi - o + 1);
                    in.readFully((o - first) * CQ_ENTRY, buf, 0, k * CQ_ENTRY);
                    for (int i = 0; i < k; i++, o++) {
                        int at = i * CQ_ENTRY;
                        int size = Format.i32(buf, at + 8);
                        if (size <= 0) {
                            // holes only come before a queue's first entry: after one, an
                            // empty entry is the end of what the queue holds
                            if (seen) return out;
                            continue;
                        }
                        seen = true;
                        long pos = Format.i64(buf, at);
                        if (pos >= r.limit) return out;
                        if (pos < r.minPos) continue;
                        if (r.tagHashes != null
                                && Arrays.binarySearch(r.tagHashes, Format.i64(buf, at + 12)) < 0) {
                            continue;
                        }
                        out.add(pos, size, o);
                    }
                }
            }
        }
        return out;
    }

    /** A queue's first and last entries (index 0 and 1) and how many lie between. */
    static final class Ends {
        long count;
        final long[] offsets = new long[2];
        final long[] positions = new long[2];
    }

    /**
     * The first and last entries r selects, without reading the ones between: a queue's
     * entries are contiguous (holes only before its first entry, unused space after its
     * last) and their positions grow with their offsets, so the last entry below r.limit and
     * the first at or after r.minPos are found by binary search, 20 bytes per probe. Falls
     * back to read() when the files are not contiguous or the queue starts with holes.
     */
    static Ends ends(FileSystem fs, Path root, CqRange r) throws IOException {
        List<CqFile> files = new Listing().files(fs, root, r);
        try (EntryProbe e = EntryProbe.open(fs, files)) {
            long[] s = e == null ? null : span(e, r);
            if (s != null) {
                Ends out = new Ends();
                if (s[0] > s[1]) return out;
                out.count = s[1] - s[0] + 1;
                out.offsets[0] = s[0];
                out.offsets[1] = s[1];
                out.positions[0] = e.position(s[0]);
                out.positions[1] = e.position(s[1]);
                return out;
            }
        }
        return fromEntries(scanAll(fs, files, r));
    }

    /**
     * The first and last offsets of r's entries ({1, 0} when it has none) by binary search:
     * the last used entry below r.limit, then the first at or after r.minPos. Null when
     * the queue has holes where r starts (scanAll reads those).
     */
    private static long[] span(EntryProbe e, CqRange r) throws IOException {
        long lo = Math.max(e.first, r.offLo);
        if (lo > r.offHi) return new long[] { 1, 0 };
        if (!e.used(lo, r.limit)) {   // past the limit already, or holes: read them
            return e.size(lo) > 0 ? new long[] { 1, 0 } : null;
        }
        long a = lo, b = Math.min(e.end - 1, r.offHi);    // last used in [a, b]
        while (a < b) {
            long m = a + (b - a + 1) / 2;
            if (e.used(m, r.limit)) a = m; else b = m - 1;
        }
        long last = a;
        a = lo;
        b = e.position(lo) >= r.minPos ? lo : last + 1;    // first with pos >= minPos
        while (a < b) {
            long m = a + (b - a) / 2;
            if (e.position(m) >= r.minPos) b = m; else a = m + 1;
        }
        return new long[] { a, last };
    }

    private static Ends fromEntries(Entries e) {
        Ends out = new Ends();
        out.count = e.n;
        if (e.n > 0) {
            out.offsets[0] = e.offsets[0];
            out.offsets[1] = e.offsets[e.n - 1];
            out.positions[0] = e.positions[0];
            out.positions[1] = e.positions[e.n - 1];
        }
        return out;
    }

    /** Entries of a queue whose files are contiguous, by queue offset: straight from the
     *  memory-mapped files (local), else through positioned reads. */
    private static final class EntryProbe implements java.io.Closeable {
        final List<CqFile> files;
        final FileSystem fs;
        private final PositionedFile[] ins;
        private final ByteBuffer[] maps;
        private final boolean[] mapTried;
        long first, end;                 // offsets the files hold: [first, end)
        long bufFirst;                   // the offset at index 0 of entries()'s last buffer
        private final byte[] b = new byte[CQ_ENTRY];
        private final ByteBuffer one = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
        private byte[] chunk;
        private int idx;                 // where locate()'s entry starts in its buffer

        private EntryProbe(FileSystem fs, List<CqFile> files) {
            this.fs = fs;
            this.files = files;
            ins = new PositionedFile[files.size()];
            maps = new ByteBuffer[files.size()];
            mapTried = new boolean[files.size()];
        }

        /** null when the queue has no files or they leave a gap. */
        static EntryProbe open(FileSystem fs, List<CqFile> files) {
            if (files.isEmpty()) return null;
            EntryProbe e = new EntryProbe(fs, files);
            e.first = files.get(0).first;
            e.end = e.first;
            for (CqFile f : files) {
                if (f.first != e.end) return null;
                e.end += f.len / CQ_ENTRY;
            }
            return e;
        }

        private PositionedFile in(int i) throws IOException {
            if (ins[i] == null) ins[i] = files.get(i).open(fs);
            return ins[i];
        }

        private ByteBuffer map(int i) throws IOException {
            if (!mapTried[i]) {
                mapTried[i] = true;
                maps[i] = files.get(i).map(fs);
            }
            return maps[i];
        }

        /** The buffer holding entry o, which starts at idx. */
        private ByteBuffer locate(long o) throws IOException {
            int i = files.size() - 1;
            while (files.get(i).first > o) i--;
            long rel = (o - files.get(i).first) * CQ_ENTRY;
            ByteBuffer m = map(i);
            if (m != null && rel + CQ_ENTRY <= m.limit()) {
                idx = (int) rel;
                return m;
            }
            in(i).readFully(rel, b, 0, CQ_ENTRY);
            idx = 0;
            return one;
        }

        /** Entries of file i from offset o on (at most to hi): the mapped file, or a chunk
         *  read into a buffer; bufFirst is the offset of its index 0. */
        ByteBuffer entries(int i, long o, long hi) throws IOException {
            CqFile f = files.get(i);
            ByteBuffer m = map(i);
            if (m != null) {
                bufFirst = f.first;
                return m;
            }
            int k = (int) Math.min(CQ_CHUNK, hi - o + 1);
            if (chunk == null) chunk = new byte[CQ_CHUNK * CQ_ENTRY];
            in(i).readFully((o - f.first) * CQ_ENTRY, chunk, 0, k * CQ_ENTRY);
            bufFirst = o;
            return ByteBuffer.wrap(chunk, 0, k * CQ_ENTRY).order(ByteOrder.LITTLE_ENDIAN);
        }

        boolean used(long o, long limit) throws IOException {
            if (o < first || o >= end) return false;
            ByteBuffer x = locate(o);
            return x.getInt(idx + 8) > 0 && x.getLong(idx) < limit;
        }

        int size(long o) throws IOException {
            if (o < first || o >= end) return 0;
            ByteBuffer x = locate(o);
            return x.getInt(idx + 8);
        }

        long position(long o) throws IOException {
            ByteBuffer x = locate(o);
            return x.getLong(idx);
        }

        @Override public void close() throws IOException {
            for (PositionedFile in : ins) if (in != null) in.close();
        }
    }

    /** One key-index file's header fields (null when the header does not check out). */
    static final class KeyFile {
        Path path;
        long slots, capacity, count, begin, end;
    }

    /** The key-index files whose headers check out, by begin position. */
    static List<KeyFile> keyFiles(FileSystem fs, Path root) throws IOException {
        List<KeyFile> out = new ArrayList<>();
        Path dir = new Path(root, "keyindex");
        if (!fs.exists(dir)) return out;
        byte[] h = new byte[KI_HEADER];
        for (FileStatus st : fs.listStatus(dir)) {
            if (!st.isFile() || !Format.isNumberedName(st.getPath().getName())) continue;
            if (st.getLen() < KI_HEADER) continue;
            ReadCount.opened();
            try (FSDataInputStream in = fs.open(st.getPath())) {
                in.readFully(0, h, 0, KI_HEADER);
            }
            if (Format.u32(h, 0) != KI_MAGIC || Format.u16(h, 4) != 1
                    || Format.crc32c(h, 0, 60) != Format.u32(h, 60)) {
                continue;
            }
            KeyFile f = new KeyFile();
            f.path = st.getPath();
            f.slots = Format.u32(h, 8);
            f.capacity = Format.u32(h, 12);
            f.count = Math.min(Format.u32(h, 16), f.capacity);
            f.begin = Format.i64(h, 24);
            f.end = Format.i64(h, 32);
            long need = KI_HEADER + 4 * f.slots + KI_ENTRY * f.capacity;
            if (f.slots == 0 || st.getLen() < need || f.end < f.begin) continue;
            out.add(f);
        }
        out.sort((a, b) -> Long.compare(a.begin, b.begin));
        return out;
    }

    /**
     * The contiguous stretch of the log the files cover, as [begin, end): from the first
     * file's begin while each next file begins where the previous ended. {0, 0} for none.
     */
    static long[] keyCoverage(List<KeyFile> files) {
        if (files.isEmpty()) return new long[] { 0, 0 };
        long begin = files.get(0).begin, end = files.get(0).end;
        for (int i = 1; i < files.size(); i++) {
            if (files.get(i).begin > end) break;
            end = Math.max(end, files.get(i).end);
        }
        return new long[] { begin, end };
    }

    /**
     * Log positions in [lo, hi) the key index holds for hash h (candidates: a hash collision
     * or a record of another topic is possible, the caller's filter decides). Walks each
     * file's bucket chain; entries past a file's count are not trusted (their number is
     * larger than count) but their chain links only ever point at older entries.
     */
    static void keyPositions(FileSystem fs, List<KeyFile> files, long h, long lo, long hi,
            List<Long> out) throws IOException {
        byte[] e = new byte[KI_ENTRY];
        byte[] s = new byte[4];
        for (KeyFile f : files) {
            if (f.end <= lo || f.begin >= hi) continue;
            try (PositionedFile in = PositionedFile.open(fs, f.path)) {
                long slot = Long.remainderUnsigned(h, f.slots);
                in.readFully(KI_HEADER + 4 * slot, s, 0, 4);
                long v = Format.u32(s, 0);
                long guard = f.capacity + 1;
                while (v != 0 && guard-- > 0) {
                    long num = v - 1;
                    if (num >= f.capacity) break;
                    in.readFully(KI_HEADER + 4 * f.slots + KI_ENTRY * num, e, 0, KI_ENTRY);
                    long pos = Format.i64(e, 8);
                    if (num < f.count && Format.i64(e, 0) == h && pos >= lo && pos < hi
                            && pos < f.end) {
                        out.add(pos);
                    }
                    long prev = Format.u32(e, 16);
                    if (prev >= v) break;  // links go to older entries only
                    v = prev;
                }
            }
        }
    }
}
