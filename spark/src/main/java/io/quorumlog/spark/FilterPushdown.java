/*
 * The filters Spark pushes into a quorumlog scan, as a RecordFilter: topic = / IN, queue_id
 * = / IN / ranges, store_timestamp = / ranges, each compared with a constant. Any other
 * filter stays with Spark. exact() says whether the reader then returns exactly the rows the
 * filter keeps (header fields, topic and tag bytes compared; timestamp bounds converted
 * exactly from microseconds to the header's milliseconds): those Spark need not evaluate
 * again, which is also what lets it push an aggregate on top. A pushed filter that is not
 * exact (queue_offset IN several values, which narrows to their range) only has to be exact
 * in one direction: never drop a record that matches.
 */
package io.quorumlog.spark;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.HashSet;
import java.util.Set;

import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

final class FilterPushdown {
    private FilterPushdown() {}

    /** Is filter answered exactly by the RecordFilter push() narrowed with it? */
    static boolean exact(Filter filter) {
        if (filter instanceof IsNotNull) return true;
        String col = attribute(filter);
        if (col == null) return false;
        if (col.equals("queue_offset")) return !(filter instanceof In) || values(filter).length <= 1;
        return col.equals("topic") || col.equals("queue_id") || col.equals("store_timestamp")
            || col.equals("tags");
    }

    /** Narrows f by filter and returns true, or returns false (f unchanged) when the filter
     *  is not one a record's header can answer. */
    static boolean push(RecordFilter f, Filter filter) {
        if (filter instanceof IsNotNull) {
            // only tags can be null; Spark adds isnotnull(c) next to every c = v
            if (((IsNotNull) filter).attribute().equals("tags")) f.tagsNotNull = true;
            else if (!QuorumlogSource.SCHEMA.getFieldIndex(((IsNotNull) filter).attribute())
                    .isDefined()) {
                return false;
            }
            return true;
        }
        String col = attribute(filter);
        Object[] values = values(filter);
        if (col == null || values == null) return false;
        switch (col) {
            case "topic": return pushTopic(f, filter, values);
            case "queue_id": return pushQueue(f, filter, values);
            case "store_timestamp": return pushStoreTs(f, filter, values);
            case "queue_offset": return pushOffset(f, filter, values);
            case "tags": return pushTags(f, filter, values);
            default: return false;
        }
    }

    private static boolean isEquality(Filter filter) {
        return filter instanceof EqualTo || filter instanceof EqualNullSafe || filter instanceof In;
    }

    private static boolean pushTopic(RecordFilter f, Filter filter, Object[] values) {
        if (!isEquality(filter)) return false;
        Set<String> ts = new HashSet<>();
        for (Object v : values) {
            if (!(v instanceof String)) return false;
            ts.add((String) v);
        }
        f.andTopics(ts);
        return true;
    }

    private static boolean pushQueue(RecordFilter f, Filter filter, Object[] values) {
        Set<Long> ids = new HashSet<>();
        for (Object v : values) {
            if (!(v instanceof Integer)) return false;
            ids.add(((Integer) v).longValue());
        }
        if (isEquality(filter)) {
            f.andQueueIds(ids);
            return true;
        }
        long v = ((Integer) values[0]).longValue();
        if (filter instanceof GreaterThan) f.queueMin = Math.max(f.queueMin, v + 1);
        else if (filter instanceof GreaterThanOrEqual) f.queueMin = Math.max(f.queueMin, v);
        else if (filter instanceof LessThan) f.queueMax = Math.min(f.queueMax, v - 1);
        else if (filter instanceof LessThanOrEqual) f.queueMax = Math.min(f.queueMax, v);
        else return false;
        return true;
    }

    /** tags = / IN constants (a null tags value never equals anything). */
    private static boolean pushTags(RecordFilter f, Filter filter, Object[] values) {
        if (!(filter instanceof EqualTo || filter instanceof In)) return false;
        Set<String> ts = new HashSet<>();
        for (Object v : values) {
            if (v == null) continue;
            if (!(v instanceof String) || ((String) v).isEmpty()) return false;
            ts.add((String) v);
        }
        f.andTags(ts);
        return true;
    }

    private static boolean pushOffset(RecordFilter f, Filter filter, Object[] values) {
        long lo = Long.MAX_VALUE, hi = Long.MIN_VALUE;
        for (Object v : values) {
            if (!(v instanceof Long) && !(v instanceof Integer)) return false;
            long x = ((Number) v).longValue();
            lo = Math.min(lo, x);
            hi = Math.max(hi, x);
        }
        if (isEquality(filter)) {   // IN: the range its values span (Spark checks each)
            if (values.length == 0) { lo = 0; hi = -1; }
        } else if (filter instanceof GreaterThan) { lo = hi == Long.MAX_VALUE ? hi : hi + 1; hi = Long.MAX_VALUE; }
        else if (filter instanceof GreaterThanOrEqual) { lo = hi; hi = Long.MAX_VALUE; }
        else if (filter instanceof LessThan) { hi = lo == Long.MIN_VALUE ? lo : lo - 1; lo = Long.MIN_VALUE; }
        else if (filter instanceof LessThanOrEqual) { hi = lo; lo = Long.MIN_VALUE; }
        else return false;
        f.offsetMin = Math.max(f.offsetMin, lo);
        f.offsetMax = Math.min(f.offsetMax, hi);
        return true;
    }

    /** store_timestamp is microseconds, the header milliseconds: m * 1000 <op> us. */
    private static boolean pushStoreTs(RecordFilter f, Filter filter, Object[] values) {
        if (filter instanceof In || values.length != 1) return false;
        Long us = micros(values[0]);
        if (us == null) return false;
        long floorMs = Math.floorDiv(us, 1000L), ceilMs = -Math.floorDiv(-us, 1000L);
        long lo = Long.MIN_VALUE, hi = Long.MAX_VALUE;
        if (filter instanceof EqualTo || filter instanceof EqualNullSafe) { lo = ceilMs; hi = floorMs; }
        else if (filter instanceof GreaterThan) lo = floorMs + 1;
        else if (filter instanceof GreaterThanOrEqual) lo = ceilMs;
        else if (filter instanceof LessThan) hi = ceilMs - 1;
        else if (filter instanceof LessThanOrEqual) hi = floorMs;
        else return false;
        f.storeTsMin = Math.max(f.storeTsMin, lo);
        f.storeTsMax = Math.min(f.storeTsMax, hi);
        return true;
    }

    /** Microseconds since the epoch of a timestamp literal (java.sql.Timestamp, or Instant
     *  with spark.sql.datetime.java8API.enabled); null for anything else. */
    private static Long micros(Object v) {
        if (v instanceof Timestamp) {
            Timestamp t = (Timestamp) v;
            return Math.floorDiv(t.getTime(), 1000L) * 1_000_000L + t.getNanos() / 1000;
        }
        if (v instanceof Instant) {
            Instant i = (Instant) v;
            return i.getEpochSecond() * 1_000_000L + i.getNano() / 1000;
        }
        return null;
    }

    private static String attribute(Filter f) {
        if (f instanceof EqualTo) return ((EqualTo) f).attribute();
        if (f instanceof EqualNullSafe) return ((EqualNullSafe) f).attribute();
        if (f instanceof In) return ((In) f).attribute();
        if (f instanceof GreaterThan) return ((GreaterThan) f).attribute();
        if (f instanceof GreaterThanOrEqual) return ((GreaterThanOrEqual) f).attribute();
        if (f instanceof LessThan) return ((LessThan) f).attribute();
        if (f instanceof LessThanOrEqual) return ((LessThanOrEqual) f).attribute();
        return null;
    }

    private static Object[] values(Filter f) {
        if (f instanceof EqualTo) return new Object[] { ((EqualTo) f).value() };
        if (f instanceof EqualNullSafe) return new Object[] { ((EqualNullSafe) f).value() };
        if (f instanceof In) return ((In) f).values();
        if (f instanceof GreaterThan) return new Object[] { ((GreaterThan) f).value() };
        if (f instanceof GreaterThanOrEqual) return new Object[] { ((GreaterThanOrEqual) f).value() };
        if (f instanceof LessThan) return new Object[] { ((LessThan) f).value() };
        if (f instanceof LessThanOrEqual) return new Object[] { ((LessThanOrEqual) f).value() };
        return null;
    }
}
