/*
 * Planner strategy: a complete aggregate the driver answers (the Project Spark puts over a
 * StoreScan that answersOnDriver: one row per queue from each queue's first and last entry
 * and the two records they name, or, in local mode, one row from the records an index
 * selects) is planned as a DriverAnswerExec: a V2CommandExec whose rows are read on the
 * driver when the query runs. Spark collects it without running a job, so a metadata or
 * selective query costs its reads, not a job's scheduling; explain() plans it and reads
 * nothing. The node keeps the scan's own physical plan for explain(): "DriverAnswer [...]
 * +- BatchScan ... PushedAggregation: [...] from consume queues, complete".
 */
package io.quorumlog.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection$;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.SparkStrategy;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampType;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

final class QueueAnswerStrategy extends SparkStrategy {
    private final SparkSession session;

    QueueAnswerStrategy(SparkSession session) { this.session = session; }

    @Override
    public Seq<SparkPlan> apply(LogicalPlan plan) {
        long t0 = OwnTime.enter();
        try {
            QuorumlogSource.StoreScan scan = driverScan(plan);
            if (scan == null) return seq(List.of());
            return seq(List.of(answer((Project) plan, scan)));
        } finally {
            OwnTime.exit(t0);
        }
    }

    /** The scan of a Project over a quorumlog scan the driver answers, or null. */
    private static QuorumlogSource.StoreScan driverScan(LogicalPlan p) {
        if (!(p instanceof Project)) return null;
        LogicalPlan c = ((Project) p).child();
        if (!(c instanceof DataSourceV2ScanRelation)) return null;
        Object s = ((DataSourceV2ScanRelation) c).scan();
        return s instanceof QuorumlogSource.StoreScan
            && ((QuorumlogSource.StoreScan) s).answersOnDriver()
            ? (QuorumlogSource.StoreScan) s : null;
    }

    /** p's rows (the scan's rows through p's projection, as UnsafeRows), read when the
     *  plan runs; the scan shown under them planned now (it reads nothing: an aggregate
     *  scan is row-based, so the planner does not plan its partitions to ask). */
    private SparkPlan answer(Project p, QuorumlogSource.StoreScan scan) {
        DataSourceV2ScanRelation rel = (DataSourceV2ScanRelation) p.child();
        List<Expression> exprs = new ArrayList<>();
        for (NamedExpression e : CollectionConverters.asJava(p.projectList())) exprs.add((Expression) e);
        Seq<Attribute> in = seq(new ArrayList<Attribute>(CollectionConverters.asJava(rel.output())));
        List<Attribute> inList = new ArrayList<>(CollectionConverters.asJava(rel.output()));
        DriverAnswerExec.Answer answer = new DriverAnswerExec.Answer(() -> {
            InternalRow[] rows = scan.driverRows();
            InternalRow[] out = copied(exprs, inList, rows);
            if (out != null) return out;
            UnsafeProjection proj = UnsafeProjection$.MODULE$.create(seq(exprs), in);
            out = new InternalRow[rows.length];
            for (int i = 0; i < rows.length; i++) out[i] = proj.apply(rows[i]).copy();
            return out;
        });
        // the scan Spark would have run, shown by explain() under the answer (the bare
        // scan relation: this strategy matches only the Project over it)
        SparkPlan shown = session.sessionState().planner().plan(rel).next();
        return new DriverAnswerExec(p.output(), shown, answer);
    }

    /**
     * The rows through the Project when its list only names or renames (aliases, nested) scan columns of the
     * types an aggregate answer has (string, int, bigint, timestamp): each value copied by
     * ordinal into an UnsafeRow. Null for any other list (Spark's projection then). Spark's
     * UnsafeProjection generates and compiles a class for the list on every query (its
     * attributes' ids differ), a few per cent of a metadata query's driver CPU and more JIT
     * work for a handful of rows.
     */
    static InternalRow[] copied(List<Expression> exprs, List<Attribute> in, InternalRow[] rows) {
        int n = exprs.size();
        int[] from = new int[n];
        DataType[] types = new DataType[n];
        for (int i = 0; i < n; i++) {
            Expression e = exprs.get(i);
            while (e instanceof Alias) e = ((Alias) e).child();
            if (!(e instanceof Attribute)) return null;
            from[i] = -1;
            for (int k = 0; k < in.size(); k++) {
                if (in.get(k).exprId().equals(((Attribute) e).exprId())) from[i] = k;
            }
            types[i] = e.dataType();
            if (from[i] < 0 || !(types[i] instanceof StringType || types[i] instanceof IntegerType
                    || types[i] instanceof LongType || types[i] instanceof TimestampType)) {
                return null;
            }
        }
        InternalRow[] out = new InternalRow[rows.length];
        UnsafeRowWriter w = new UnsafeRowWriter(n, 64);
        for (int r = 0; r < rows.length; r++) {
            w.reset();
            w.zeroOutNullBytes();
            for (int i = 0; i < n; i++) {
                InternalRow row = rows[r];
                if (row.isNullAt(from[i])) w.setNullAt(i);
                else if (types[i] instanceof StringType) w.write(i, row.getUTF8String(from[i]));
                else if (types[i] instanceof IntegerType) w.write(i, row.getInt(from[i]));
                else w.write(i, row.getLong(from[i]));
            }
            out[r] = w.getRow().copy();
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static <T> Seq<T> seq(List<T> xs) {
        return (Seq<T>) CollectionConverters.asScala(xs).toList();
    }
}
