/*
 * The physical node of a query the driver answers (QueueAnswerStrategy): its rows are read
 * on the driver when the query runs, not when it is planned, so explain() shows the plan
 * without doing the reads. Spark's CommandResultExec (what this replaced) takes its rows in
 * hand and prints whether they are empty; this node holds an Answer (the reads, done once,
 * by the first action that needs the rows) and shows only its output and the scan it stands
 * for: "DriverAnswer [...] +- BatchScan ... PushedAggregation: [...] ..., complete". A
 * V2CommandExec: Spark collects its rows without a job (no codegen stage, no adaptive plan).
 */
package io.quorumlog.spark;

import java.util.Arrays;
import java.util.List;
import java.util.function.Supplier;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.v2.V2CommandExec;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

public final class DriverAnswerExec extends V2CommandExec {
    private static final long serialVersionUID = 1L;
    private final Seq<Attribute> output;
    private final transient SparkPlan shown;
    private final transient Answer answer;

    /** The rows of a driver answer, read by the first caller of rows() (then kept): copies
     *  of the node Spark makes (makeCopy, canonicalisation) share one Answer. */
    public static final class Answer {
        private final Supplier<InternalRow[]> read;
        private InternalRow[] rows;

        Answer(Supplier<InternalRow[]> read) { this.read = read; }

        synchronized InternalRow[] rows() {
            if (rows == null) rows = read.get();
            return rows;
        }

        @Override public String toString() { return "driver answer"; }
    }

    /** Public, its arguments the node's product elements: TreeNode.makeCopy finds it by
     *  reflection when Spark copies the node with new arguments. */
    public DriverAnswerExec(Seq<Attribute> output, SparkPlan shown, Answer answer) {
        this.output = output;
        this.shown = shown;
        this.answer = answer;
    }

    @Override public Seq<Attribute> output() { return output; }

    @Override public Seq<InternalRow> run() { return seq(Arrays.asList(answer.rows())); }

    @Override public Seq<SparkPlan> children() { return seq(List.of()); }

    @Override public SparkPlan withNewChildrenInternal(IndexedSeq<SparkPlan> children) {
        return this;
    }

    /** explain() prints the scan this answer stands for under it. */
    // (raw: Scala narrows TreeNode's Seq[TreeNode[_]] to Seq[QueryPlan[_]], javac sees both)
    @SuppressWarnings("rawtypes")
    @Override public Seq innerChildren() { return seq(List.of(shown)); }

    // explain(): the output only (the scan is printed as the inner child)
    @Override public scala.collection.Iterator<Object> stringArgs() {
        return CollectionConverters.asScala(List.<Object>of(output).iterator());
    }

    @Override public int productArity() { return 3; }

    @Override public Object productElement(int n) {
        switch (n) {
            case 0: return output;
            case 1: return shown;
            case 2: return answer;
            default: throw new IndexOutOfBoundsException(Integer.toString(n));
        }
    }

    @Override public boolean canEqual(Object o) { return o instanceof DriverAnswerExec; }

    // one node per planning: equal only to itself
    @Override public boolean equals(Object o) { return this == o; }
    @Override public int hashCode() { return System.identityHashCode(this); }

    @SuppressWarnings("unchecked")
    private static <T> Seq<T> seq(List<T> xs) {
        return (Seq<T>) CollectionConverters.asScala(xs).toList();
    }
}
