/*
 * The quorumlog on-disk format v1 as the Java reader sees it (docs/format.md is the contract):
 * header layout, record types, little-endian accessors and the checks every record passes.
 */
package io.quorumlog.spark;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.util.zip.CRC32C;

public final class Format {
    private Format() {}

    public static final int HEADER_SIZE = 96;
    public static final int MAGIC = 0x4C51;
    public static final int VERSION = 1;

    public static final int TYPE_MESSAGE = 1;
    public static final int TYPE_NOOP = 2;
    public static final int TYPE_CONFIG = 3;
    public static final int TYPE_META = 4;
    public static final int TYPE_BLANK = 5;

    // Header field offsets (format.md, "Header (96 bytes)").
    public static final int OFF_CRC = 0;
    public static final int OFF_TOTAL_SIZE = 4;
    public static final int OFF_MAGIC = 8;
    public static final int OFF_VERSION = 10;
    public static final int OFF_TYPE = 11;
    public static final int OFF_FLAGS = 12;
    public static final int OFF_RAFT_INDEX = 16;
    public static final int OFF_RAFT_TERM = 24;
    public static final int OFF_POSITION = 32;
    public static final int OFF_QUEUE_OFFSET = 40;
    public static final int OFF_BORN_TS = 48;
    public static final int OFF_STORE_TS = 56;
    public static final int OFF_TAG_HASH = 64;
    public static final int OFF_QUEUE_ID = 72;
    public static final int OFF_TOPIC_LEN = 76;
    public static final int OFF_TAGS_LEN = 78;
    public static final int OFF_KEYS_LEN = 80;
    public static final int OFF_PROPS_LEN = 84;
    public static final int OFF_BODY_LEN = 88;

    // Raft index entry (format.md, "Raft index").
    public static final int INDEX_ENTRY_SIZE = 24;

    // Checkpoint (format.md, "Checkpoint").
    public static final int CHECKPOINT_SIZE = 128;
    public static final int CHECKPOINT_MAGIC = 0x50434C51;

    public static final int MAX_TOPIC_BYTES = 255;

    /**
     * Why a topic name breaks format.md's rule (1..255 bytes of UTF-8, no NUL or '/', not "."
     * or ".." -- a topic is also a directory name), or null when it is valid.
     */
    public static String topicProblem(String topic) {
        int n = topic.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
        if (n < 1 || n > MAX_TOPIC_BYTES) return "must be 1.." + MAX_TOPIC_BYTES + " bytes of UTF-8";
        if (topic.indexOf('/') >= 0 || topic.indexOf('\0') >= 0) return "contains NUL or '/'";
        if (topic.equals(".") || topic.equals("..")) return "is '.' or '..'";
        return null;
    }

    /** Segment and index files are named by a 20-digit decimal number. */
    public static boolean isNumberedName(String name) {
        if (name.length() != 20) return false;
        for (int i = 0; i < 20; i++) {
            char c = name.charAt(i);
            if (c < '0' || c > '9') return false;
        }
        return true;
    }

    // VarHandles compile to plain (intrinsified) loads; a ByteBuffer per record would allocate.
    private static final VarHandle LE_LONG =
        MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    private static final VarHandle LE_INT =
        MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);
    private static final VarHandle LE_SHORT =
        MethodHandles.byteArrayViewVarHandle(short[].class, ByteOrder.LITTLE_ENDIAN);

    public static long i64(byte[] b, int off) { return (long) LE_LONG.get(b, off); }
    public static int i32(byte[] b, int off) { return (int) LE_INT.get(b, off); }
    public static long u32(byte[] b, int off) { return ((int) LE_INT.get(b, off)) & 0xFFFFFFFFL; }
    public static int u16(byte[] b, int off) { return ((short) LE_SHORT.get(b, off)) & 0xFFFF; }
    public static int u8(byte[] b, int off) { return b[off] & 0xFF; }

    public static void putI64(byte[] b, int off, long v) { LE_LONG.set(b, off, v); }
    public static void putI32(byte[] b, int off, int v) { LE_INT.set(b, off, v); }
    public static void putI16(byte[] b, int off, int v) { LE_SHORT.set(b, off, (short) v); }

    /** CRC32C (Castagnoli) of b[off, off+len) -- the JDK's is intrinsified (SSE4.2 / CLMUL). */
    public static long crc32c(byte[] b, int off, int len) {
        CRC32C c = new CRC32C();
        c.update(b, off, len);
        return c.getValue();
    }

    /** True when the 96 header bytes at off are all zero: preallocated, never written space. */
    public static boolean isZeroHeader(byte[] b, int off) {
        for (int i = 0; i < HEADER_SIZE; i += 8) {
            if (i64(b, off + i) != 0) return false;
        }
        return true;
    }

    /**
     * Checks the header at b[off] of a record claimed to sit at log position {@code position}
     * with {@code remaining} bytes left in its segment. Returns null when sane, else the reason.
     * The CRC is checked separately (it needs the whole record in memory).
     */
    public static String checkHeader(byte[] b, int off, long position, long remaining) {
        if (u16(b, off + OFF_MAGIC) != MAGIC) return "bad magic";
        if (u8(b, off + OFF_VERSION) != VERSION) return "unknown version " + u8(b, off + OFF_VERSION);
        int type = u8(b, off + OFF_TYPE);
        if (type < TYPE_MESSAGE || type > TYPE_BLANK) return "invalid record type " + type;
        long total = u32(b, off + OFF_TOTAL_SIZE);
        if (total < HEADER_SIZE || total > remaining) {
            return "total_size " + total + " out of bounds (remaining in segment " + remaining + ")";
        }
        if (i64(b, off + OFF_POSITION) != position) {
            return "position field " + i64(b, off + OFF_POSITION) + " != " + position;
        }
        if (type != TYPE_BLANK) {
            long expect = HEADER_SIZE + u16(b, off + OFF_TOPIC_LEN) + u16(b, off + OFF_TAGS_LEN)
                + u32(b, off + OFF_KEYS_LEN) + u32(b, off + OFF_PROPS_LEN) + u32(b, off + OFF_BODY_LEN);
            if (expect != total) return "field lengths sum to " + expect + ", total_size " + total;
            if (type == TYPE_MESSAGE && u16(b, off + OFF_TOPIC_LEN) == 0) return "message without topic";
        }
        return null;
    }

    /** The bytes the CRC covers: [4, total) for every record, [4, 96) for BLANK. */
    public static int crcCoveredEnd(byte[] b, int off) {
        return u8(b, off + OFF_TYPE) == TYPE_BLANK ? HEADER_SIZE : (int) u32(b, off + OFF_TOTAL_SIZE);
    }

    public static String segmentName(long startPosition) {
        return String.format("%020d", startPosition);
    }
}
