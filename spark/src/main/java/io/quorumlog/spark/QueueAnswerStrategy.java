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
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.SparkStrategy;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

final class QueueAnswerStrategy extends SparkStrategy {
    private final SparkSession session;

    QueueAnswerStrategy(SparkSession session) { this.session = session; }

    @Override
    public Seq<SparkPlan> apply(LogicalPlan plan) {
        QuorumlogSource.StoreScan scan = driverScan(plan);
        if (scan == null) return seq(List.of());
        return seq(List.of(answer((Project) plan, scan)));
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
        DriverAnswerExec.Answer answer = new DriverAnswerExec.Answer(() -> {
            UnsafeProjection proj = UnsafeProjection$.MODULE$.create(seq(exprs), in);
            InternalRow[] rows = scan.driverRows();
            InternalRow[] out = new InternalRow[rows.length];
            for (int i = 0; i < rows.length; i++) out[i] = proj.apply(rows[i]).copy();
            return out;
        });
        // the scan Spark would have run, shown by explain() under the answer (the bare
        // scan relation: this strategy matches only the Project over it)
        SparkPlan shown = session.sessionState().planner().plan(rel).next();
        return new DriverAnswerExec(p.output(), shown, answer);
    }

    @SuppressWarnings("unchecked")
    private static <T> Seq<T> seq(List<T> xs) {
        return (Seq<T>) CollectionConverters.asScala(xs).toList();
    }
}
