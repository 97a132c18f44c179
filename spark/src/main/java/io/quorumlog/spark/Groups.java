/*
 * Replica directories of many Raft groups (docs/node.md "Many Raft groups per process"):
 * <dir>/groups.json = {"groups": G} and <dir>/groups/<g>/, a whole store per group with its
 * own checkpoint (its own committed position). A load() expands such a directory into its
 * G stores and the DataFrame gains the `group` column (int, the g of the row's store);
 * a single-group directory (no groups.json) reads as before, without it. Filters on `group`
 * against constants prune whole stores at planning time, so the groups they rule out are
 * never listed, planned or read.
 */
package io.quorumlog.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.sources.AlwaysFalse;
import org.apache.spark.sql.sources.AlwaysTrue;
import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.IsNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.sources.Not;
import org.apache.spark.sql.sources.Or;

final class Groups {
    private Groups() {}

    static final String COLUMN = "group";
    static final String LAYOUT_FILE = "groups.json";
    /** node/groups.py MAX_GROUPS (the frame header's group field allows no more). */
    static final int MAX_GROUPS = 256;
    /** groups.json is a few bytes; a larger file is not one the node wrote. */
    private static final int MAX_LAYOUT_BYTES = 4096;

    /** The stores of a load(): each root and the group it is (0 for a single-group one). */
    static final class Layout {
        final List<Path> roots = new ArrayList<>();
        final List<Integer> groups = new ArrayList<>();
        boolean multiGroup;
    }

    /** Expands every directory with a groups.json into <dir>/groups/0 .. G-1. */
    static Layout expand(Path[] dirs, Configuration conf) throws IOException {
        Layout out = new Layout();
        for (Path dir : dirs) {
            int g = groupsIn(dir, conf);
            if (g <= 1) {           // node/groups.py group_dir: G = 1 is the store at <dir>
                out.roots.add(dir);
                out.groups.add(0);
                continue;
            }
            out.multiGroup = true;
            for (int i = 0; i < g; i++) {
                out.roots.add(new Path(new Path(dir, "groups"), Integer.toString(i)));
                out.groups.add(i);
            }
        }
        return out;
    }

    /** G of <dir>/groups.json; 0 when there is none (a single-group directory). */
    static int groupsIn(Path dir, Configuration conf) throws IOException {
        FileSystem fs = dir.getFileSystem(conf);
        Path layout = new Path(dir, LAYOUT_FILE);
        byte[] b;
        try (InputStream in = fs.open(layout)) {
            b = in.readNBytes(MAX_LAYOUT_BYTES + 1);
        } catch (FileNotFoundException e) {
            return 0;
        }
        JsonNode n;
        try {
            if (b.length > MAX_LAYOUT_BYTES) throw new IOException("over " + MAX_LAYOUT_BYTES + " bytes");
            n = new ObjectMapper().readTree(b).get("groups");
        } catch (IOException e) {
            throw new IllegalArgumentException("quorumlog: " + layout + ": unreadable group "
                + "layout: " + e.getMessage(), e);
        }
        if (n == null || !n.isInt() || n.intValue() < 1 || n.intValue() > MAX_GROUPS) {
            throw new IllegalArgumentException("quorumlog: " + layout + ": \"groups\" must be "
                + "an int in 1.." + MAX_GROUPS + ", got " + n);
        }
        return n.intValue();
    }

    /** Does the filter name the group column and nothing else (so it prunes stores)? */
    static boolean onlyGroup(Filter f) {
        String[] refs = f.references();
        if (refs.length == 0) return false;
        for (String r : refs) if (!r.equals(COLUMN)) return false;
        return eval(f, 0) != null;
    }

    /**
     * The filter's value for the rows of group g (every row of a store has the same group,
     * never null, so the answer holds for the whole store); null when the filter is not one
     * this evaluates (it then stays with Spark). Null literals are left to Spark too (SQL's
     * three-valued logic would need a third answer).
     */
    static Boolean eval(Filter f, int g) {
        if (f instanceof AlwaysTrue) return true;
        if (f instanceof AlwaysFalse) return false;
        if (f instanceof IsNotNull) return true;
        if (f instanceof IsNull) return false;
        if (f instanceof Not) {
            Boolean c = eval(((Not) f).child(), g);
            return c == null ? null : !c;
        }
        if (f instanceof And || f instanceof Or) {
            Filter l = f instanceof And ? ((And) f).left() : ((Or) f).left();
            Filter r = f instanceof And ? ((And) f).right() : ((Or) f).right();
            Boolean a = eval(l, g), b = eval(r, g);
            if (a == null || b == null) return null;
            return f instanceof And ? a && b : a || b;
        }
        if (f instanceof In) {
            boolean any = false;
            for (Object v : ((In) f).values()) {
                Long x = number(v);
                if (x == null) return null;
                any |= x == g;
            }
            return any;
        }
        return compare(f, g);
    }

    private static Boolean compare(Filter f, int g) {
        Long v;
        if (f instanceof EqualTo) v = number(((EqualTo) f).value());
        else if (f instanceof EqualNullSafe) v = number(((EqualNullSafe) f).value());
        else if (f instanceof GreaterThan) v = number(((GreaterThan) f).value());
        else if (f instanceof GreaterThanOrEqual) v = number(((GreaterThanOrEqual) f).value());
        else if (f instanceof LessThan) v = number(((LessThan) f).value());
        else if (f instanceof LessThanOrEqual) v = number(((LessThanOrEqual) f).value());
        else return null;
        if (v == null) return null;
        if (f instanceof EqualTo || f instanceof EqualNullSafe) return g == v;
        if (f instanceof GreaterThan) return g > v;
        if (f instanceof GreaterThanOrEqual) return g >= v;
        if (f instanceof LessThan) return g < v;
        return g <= v;
    }

    /** An integral literal (Spark casts the constant to the int column's type). */
    private static Long number(Object v) {
        if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte) {
            return ((Number) v).longValue();
        }
        return null;
    }
}
