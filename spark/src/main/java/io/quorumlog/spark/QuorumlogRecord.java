/*
 * One MESSAGE record as the RecordReader hands it out: decoded header fields plus offsets into
 * the reader's buffer for the variable part. Like every Hadoop value it is reused between
 * nextKeyValue() calls: copy what you keep (body() copies; bodyArray()/bodyOffset() do not).
 */
package io.quorumlog.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

public final class QuorumlogRecord {
    int type;
    long flags;
    long raftIndex;
    long term;
    long position;
    long queueOffset;
    long bornTimestampMs;
    long storeTimestampMs;
    long tagHash;
    long queueId;
    int totalSize;

    byte[] buf;
    int recOff;  // offset of the record's first byte in buf
    int topicLen, tagsLen, keysLen, propsLen, bodyLen;
    String file;  // segment file, for error messages
    long fileOffset;

    public int type() { return type; }
    public long flags() { return flags; }
    public long raftIndex() { return raftIndex; }
    public long term() { return term; }
    public long position() { return position; }
    public long queueOffset() { return queueOffset; }
    public long bornTimestampMs() { return bornTimestampMs; }
    public long storeTimestampMs() { return storeTimestampMs; }
    public long tagHash() { return tagHash; }
    public long queueId() { return queueId; }
    public int totalSize() { return totalSize; }
    public String file() { return file; }
    public long fileOffset() { return fileOffset; }

    /** Points this record at the one whose header starts at b[off] (already checked). */
    void load(byte[] b, int off, long recPos, int type, int total, String fileName, long fileOff) {
        buf = b;
        recOff = off;
        this.type = type;
        totalSize = total;
        flags = Format.u32(b, off + Format.OFF_FLAGS);
        raftIndex = Format.i64(b, off + Format.OFF_RAFT_INDEX);
        term = Format.i64(b, off + Format.OFF_RAFT_TERM);
        position = recPos;
        queueOffset = Format.i64(b, off + Format.OFF_QUEUE_OFFSET);
        bornTimestampMs = Format.i64(b, off + Format.OFF_BORN_TS);
        storeTimestampMs = Format.i64(b, off + Format.OFF_STORE_TS);
        tagHash = Format.i64(b, off + Format.OFF_TAG_HASH);
        queueId = Format.u32(b, off + Format.OFF_QUEUE_ID);
        topicLen = Format.u16(b, off + Format.OFF_TOPIC_LEN);
        tagsLen = Format.u16(b, off + Format.OFF_TAGS_LEN);
        keysLen = (int) Format.u32(b, off + Format.OFF_KEYS_LEN);
        propsLen = (int) Format.u32(b, off + Format.OFF_PROPS_LEN);
        bodyLen = (int) Format.u32(b, off + Format.OFF_BODY_LEN);
        file = fileName;
        fileOffset = fileOff;
    }

    public byte[] array() { return buf; }
    public int topicOffset() { return recOff + Format.HEADER_SIZE; }
    public int topicLength() { return topicLen; }
    public int tagsOffset() { return topicOffset() + topicLen; }
    public int tagsLength() { return tagsLen; }
    public int keysOffset() { return tagsOffset() + tagsLen; }
    public int keysLength() { return keysLen; }
    public int propsOffset() { return keysOffset() + keysLen; }
    public int propsLength() { return propsLen; }
    public int bodyOffset() { return propsOffset() + propsLen; }
    public int bodyLength() { return bodyLen; }

    public String topic() {
        return new String(buf, topicOffset(), topicLen, StandardCharsets.UTF_8);
    }

    /** Tags, or null when the record has none (the store's API has tags=None then). */
    public String tags() {
        return tagsLen == 0 ? null : new String(buf, tagsOffset(), tagsLen, StandardCharsets.UTF_8);
    }

    public byte[] body() {
        byte[] b = new byte[bodyLen];
        System.arraycopy(buf, bodyOffset(), b, 0, bodyLen);
        return b;
    }

    /**
     * Calls sink.item(array, off, len) for each key. Throws when the keys field is malformed
     * (an entry runs past the field): the CRC matched, so the writer produced bad bytes.
     */
    public void forEachKey(Sink sink) throws CorruptRecordException {
        int p = keysOffset(), end = p + keysLen;
        while (p < end) {
            if (p + 2 > end) throw malformed("keys", p);
            int n = Format.u16(buf, p);
            if (p + 2 + n > end) throw malformed("keys", p);
            sink.item(buf, p + 2, n);
            p += 2 + n;
        }
    }

    /** Calls sink.item for key, value, key, value, ... of the properties field. */
    public void forEachProperty(Sink sink) throws CorruptRecordException {
        int p = propsOffset(), end = p + propsLen;
        while (p < end) {
            for (int kv = 0; kv < 2; kv++) {
                if (p + 2 > end) throw malformed("properties", p);
                int n = Format.u16(buf, p);
                if (p + 2 + n > end) throw malformed("properties", p);
                sink.item(buf, p + 2, n);
                p += 2 + n;
            }
        }
    }

    public List<String> keys() throws CorruptRecordException {
        List<String> out = new ArrayList<>();
        forEachKey((b, o, n) -> out.add(new String(b, o, n, StandardCharsets.UTF_8)));
        return out;
    }

    public Map<String, String> properties() throws CorruptRecordException {
        List<String> flat = new ArrayList<>();
        forEachProperty((b, o, n) -> flat.add(new String(b, o, n, StandardCharsets.UTF_8)));
        Map<String, String> out = new LinkedHashMap<>();
        for (int i = 0; i < flat.size(); i += 2) out.put(flat.get(i), flat.get(i + 1));
        return out;
    }

    private CorruptRecordException malformed(String field, int p) {
        return new CorruptRecordException("malformed " + field + " field (entry runs past it)",
            file, fileOffset + (p - recOff));
    }

    public interface Sink {
        void item(byte[] b, int off, int len);
    }
}
