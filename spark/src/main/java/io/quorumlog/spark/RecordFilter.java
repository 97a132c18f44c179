/*
 * Which MESSAGE records a read returns, decided on the record's header fields and topic
 * bytes before any row is built: topics, queue ids (a set and/or a range), a queue-offset
 * range, tags (the header's tag_hash first, then the tag bytes: exact) and a store timestamp
 * range in milliseconds (the header's unit), and the first key (get(keys, 0) = k: the keys
 * field's first entry, compared as bytes; also what steers the read to the key index).
 * Travels to the tasks in the Hadoop
 * Configuration; FilterPushdown builds it from the filters Spark pushes down.
 */
package io.quorumlog.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.LinkedHashSet;
import java.util.Set;
import java.util.TreeSet;

import org.apache.hadoop.conf.Configuration;

public final class RecordFilter {
    public static final String CONF_TOPICS = "quorumlog.topics";              // '/'-separated
    public static final String CONF_QUEUE_IDS = "quorumlog.filter.queue.ids";  // ','-separated
    public static final String CONF_QUEUE_MIN = "quorumlog.filter.queue.min";
    public static final String CONF_QUEUE_MAX = "quorumlog.filter.queue.max";
    public static final String CONF_STORE_TS_MIN = "quorumlog.filter.store.ts.min.ms";
    public static final String CONF_STORE_TS_MAX = "quorumlog.filter.store.ts.max.ms";
    public static final String CONF_OFFSET_MIN = "quorumlog.filter.offset.min";
    public static final String CONF_OFFSET_MAX = "quorumlog.filter.offset.max";
    public static final String CONF_TAGS_NOT_NULL = "quorumlog.filter.tags.not.null";
    public static final String CONF_TAGS = "quorumlog.filter.tags";  // '/'-separated, escaped
    public static final String CONF_FIRST_KEY = "quorumlog.filter.first.key";  // escaped

    /** null: every topic. */
    Set<String> topics;
    /** null: every queue id. */
    Set<Long> queueIds;
    long queueMin = Long.MIN_VALUE, queueMax = Long.MAX_VALUE;
    /** Inclusive bounds of store_timestamp_ms. */
    long storeTsMin = Long.MIN_VALUE, storeTsMax = Long.MAX_VALUE;
    /** Inclusive bounds of queue_offset. */
    long offsetMin = Long.MIN_VALUE, offsetMax = Long.MAX_VALUE;
    /** null: any tags; else the tag hashes (sorted) a record may carry. */
    long[] tagHashes;
    /** Tags the hashes were made of. */
    Set<String> tags;
    private byte[][] tagBytes;
    /** Only records with tags (isnotnull(tags)). */
    boolean tagsNotNull;
    /** null: no key filter; else every record returned holds one of these keys (planning
     *  uses the key index). */
    Set<String> keys;
    /** null: any; else the record's first key must be this (checked by accepts()). */
    String firstKey;
    private byte[] firstKeyBytes;

    private byte[][] topicBytes;
    private long[] queueIdArray;

    public static RecordFilter fromConf(Configuration conf) {
        RecordFilter f = new RecordFilter();
        f.topics = parseTopics(conf.get(CONF_TOPICS));
        String q = conf.get(CONF_QUEUE_IDS);
        if (q != null) {
            f.queueIds = new TreeSet<>();
            for (String s : q.isEmpty() ? new String[0] : q.split(",")) f.queueIds.add(Long.parseLong(s));
        }
        f.queueMin = conf.getLong(CONF_QUEUE_MIN, Long.MIN_VALUE);
        f.queueMax = conf.getLong(CONF_QUEUE_MAX, Long.MAX_VALUE);
        f.storeTsMin = conf.getLong(CONF_STORE_TS_MIN, Long.MIN_VALUE);
        f.storeTsMax = conf.getLong(CONF_STORE_TS_MAX, Long.MAX_VALUE);
        f.offsetMin = conf.getLong(CONF_OFFSET_MIN, Long.MIN_VALUE);
        f.offsetMax = conf.getLong(CONF_OFFSET_MAX, Long.MAX_VALUE);
        f.tagsNotNull = conf.getBoolean(CONF_TAGS_NOT_NULL, false);
        String tg = conf.get(CONF_TAGS);
        if (tg != null) f.andTags(tg.isEmpty() ? Set.of() : unescape(tg));
        String k = conf.get(CONF_FIRST_KEY);
        if (k != null) f.andFirstKey(unescape(k).iterator().next());
        return f;
    }

    /** The '/'-separated topics option (a topic name never holds '/'); null stays null. */
    static Set<String> parseTopics(String s) {
        if (s == null) return null;
        return new LinkedHashSet<>(s.isEmpty() ? Set.of() : Arrays.asList(s.split("/", -1)));
    }

    public void writeTo(Configuration conf) {
        if (topics != null) conf.set(CONF_TOPICS, String.join("/", topics));
        if (queueIds != null) {
            StringBuilder sb = new StringBuilder();
            for (long id : queueIds) sb.append(sb.length() == 0 ? "" : ",").append(id);
            conf.set(CONF_QUEUE_IDS, sb.toString());
        }
        conf.setLong(CONF_QUEUE_MIN, queueMin);
        conf.setLong(CONF_QUEUE_MAX, queueMax);
        conf.setLong(CONF_STORE_TS_MIN, storeTsMin);
        conf.setLong(CONF_STORE_TS_MAX, storeTsMax);
        conf.setLong(CONF_OFFSET_MIN, offsetMin);
        conf.setLong(CONF_OFFSET_MAX, offsetMax);
        if (tags != null) conf.set(CONF_TAGS, escape(tags));
        conf.setBoolean(CONF_TAGS_NOT_NULL, tagsNotNull);
        if (firstKey != null) conf.set(CONF_FIRST_KEY, escape(Set.of(firstKey)));
    }

    /** Tags may hold any character: each is written as its UTF-8 bytes in hex. */
    private static Set<String> unescape(String s) {
        Set<String> out = new TreeSet<>();
        for (String hex : s.split("/", -1)) {
            byte[] b = new byte[hex.length() / 2];
            for (int i = 0; i < b.length; i++) {
                b[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
            }
            out.add(new String(b, StandardCharsets.UTF_8));
        }
        return out;
    }

    /** Never holds an empty tag (FilterPushdown does not push one), so "" is no tag. */
    private static String escape(Set<String> ts) {
        List<String> hex = new ArrayList<>();
        for (String t : ts) {
            StringBuilder sb = new StringBuilder();
            for (byte x : t.getBytes(StandardCharsets.UTF_8)) sb.append(String.format("%02x", x));
            hex.add(sb.toString());
        }
        return String.join("/", hex);
    }

    /** This filter AND tags in ts. */
    void andTags(Set<String> ts) {
        if (tags == null) tags = new TreeSet<>(ts);
        else tags.retainAll(ts);
        tagHashes = tags.stream().mapToLong(StoreIndexes::tagHash).sorted().toArray();
        tagBytes = tags.stream().map(t -> t.getBytes(StandardCharsets.UTF_8))
            .toArray(byte[][]::new);
    }

    /** This filter AND (keys holds one of ks). Two key filters: keep the first (either
     *  narrows the read correctly; Spark checks both). */
    void andKeys(Set<String> ks) {
        if (keys == null) keys = new TreeSet<>(ks);
    }

    /** This filter AND get(keys, 0) = k; false (nothing changed) when it has a first key
     *  already (Spark then checks the second). */
    boolean andFirstKey(String k) {
        if (firstKey != null) return false;
        firstKey = k;
        firstKeyBytes = k.getBytes(StandardCharsets.UTF_8);
        andKeys(Set.of(k));
        return true;
    }

    /** Does anything beyond topics and queue ids narrow this filter? */
    boolean onlyTopicsAndQueues() {
        return !hasStoreTs() && !tagsNotNull && offsetMin == Long.MIN_VALUE && offsetMax == Long.MAX_VALUE
            && tagHashes == null && keys == null;
    }

    /** Does the filter name queues the consume queues can list (topic, queue, offsets, tags)? */
    boolean narrowsQueues() {
        return topics != null || queueIds != null || queueMin != Long.MIN_VALUE
            || queueMax != Long.MAX_VALUE || offsetMin != Long.MIN_VALUE
            || offsetMax != Long.MAX_VALUE || tagHashes != null;
    }

    boolean acceptsTopic(String t) { return topics == null || topics.contains(t); }

    boolean acceptsQueue(long q) {
        return q >= queueMin && q <= queueMax && (queueIds == null || queueIds.contains(q));
    }

    /** This filter AND topic in ts. */
    void andTopics(Set<String> ts) {
        if (topics == null) topics = new LinkedHashSet<>(ts);
        else topics.retainAll(ts);
    }

    /** This filter AND queue_id in ids. */
    void andQueueIds(Set<Long> ids) {
        if (queueIds == null) queueIds = new TreeSet<>(ids);
        else queueIds.retainAll(ids);
    }

    public boolean hasStoreTs() {
        return storeTsMin != Long.MIN_VALUE || storeTsMax != Long.MAX_VALUE;
    }

    /** Can a record with a store timestamp in [lo, hi] (ms) pass? */
    public boolean mayHoldStoreTs(long lo, long hi) {
        return lo <= storeTsMax && hi >= storeTsMin;
    }

    /** Does the MESSAGE record whose header starts at b[off] pass? Reads the header fields
     *  first and the topic bytes (right after the header) only when they do. */
    public boolean accepts(byte[] b, int off) {
        long q = Format.u32(b, off + Format.OFF_QUEUE_ID);
        if (q < queueMin || q > queueMax) return false;
        if (queueIdArray == null && queueIds != null) {
            queueIdArray = queueIds.stream().mapToLong(Long::longValue).sorted().toArray();
        }
        if (queueIdArray != null && Arrays.binarySearch(queueIdArray, q) < 0) return false;
        long ts = Format.i64(b, off + Format.OFF_STORE_TS);
        if (ts < storeTsMin || ts > storeTsMax) return false;
        long qo = Format.i64(b, off + Format.OFF_QUEUE_OFFSET);
        if (qo < offsetMin || qo > offsetMax) return false;
        if (tagHashes != null && !acceptsTags(b, off)) return false;
        if (tagsNotNull && Format.u16(b, off + Format.OFF_TAGS_LEN) == 0) return false;
        if (firstKeyBytes != null && !acceptsFirstKey(b, off)) return false;
        if (topics == null) return true;
        if (topicBytes == null) {
            topicBytes = topics.stream().map(t -> t.getBytes(StandardCharsets.UTF_8))
                .toArray(byte[][]::new);
        }
        int len = Format.u16(b, off + Format.OFF_TOPIC_LEN);
        int at = off + Format.HEADER_SIZE;
        for (byte[] t : topicBytes) {
            if (t.length == len && Arrays.equals(b, at, at + len, t, 0, len)) return true;
        }
        return false;
    }

    /** The keys field's first entry (u16 length, bytes) equals firstKey; no key: no match. */
    private boolean acceptsFirstKey(byte[] b, int off) {
        long keysLen = Format.u32(b, off + Format.OFF_KEYS_LEN);
        int at = off + Format.HEADER_SIZE + Format.u16(b, off + Format.OFF_TOPIC_LEN)
            + Format.u16(b, off + Format.OFF_TAGS_LEN);
        if (keysLen < 2) return false;
        int n = Format.u16(b, at);
        return n == firstKeyBytes.length && 2 + n <= keysLen
            && Arrays.equals(b, at + 2, at + 2 + n, firstKeyBytes, 0, n);
    }

    /** The tag hash first (cheap), then the bytes (a hash collision is not a match). */
    private boolean acceptsTags(byte[] b, int off) {
        if (Arrays.binarySearch(tagHashes, Format.i64(b, off + Format.OFF_TAG_HASH)) < 0) {
            return false;
        }
        int len = Format.u16(b, off + Format.OFF_TAGS_LEN);
        int at = off + Format.HEADER_SIZE + Format.u16(b, off + Format.OFF_TOPIC_LEN);
        for (byte[] t : tagBytes) {
            if (t.length == len && Arrays.equals(b, at, at + len, t, 0, len)) return true;
        }
        return false;
    }

    /** What explain() shows. */
    public String describe() {
        StringBuilder sb = new StringBuilder();
        if (topics != null) sb.append("topic IN ").append(topics).append(", ");
        if (queueIds != null) sb.append("queue_id IN ").append(queueIds).append(", ");
        if (queueMin != Long.MIN_VALUE) sb.append("queue_id >= ").append(queueMin).append(", ");
        if (queueMax != Long.MAX_VALUE) sb.append("queue_id <= ").append(queueMax).append(", ");
        if (storeTsMin != Long.MIN_VALUE) sb.append("store_timestamp_ms >= ").append(storeTsMin).append(", ");
        if (storeTsMax != Long.MAX_VALUE) sb.append("store_timestamp_ms <= ").append(storeTsMax).append(", ");
        if (offsetMin != Long.MIN_VALUE) sb.append("queue_offset >= ").append(offsetMin).append(", ");
        if (offsetMax != Long.MAX_VALUE) sb.append("queue_offset <= ").append(offsetMax).append(", ");
        if (tags != null) sb.append("tags IN ").append(tags).append(", ");
        if (tagsNotNull) sb.append("tags IS NOT NULL, ");
        if (firstKey != null) sb.append("keys[0] = ").append(firstKey).append(", ");
        else if (keys != null) sb.append("keys CONTAIN ANY OF ").append(keys).append(", ");
        return sb.length() == 0 ? "" : sb.substring(0, sb.length() - 2);
    }
}
