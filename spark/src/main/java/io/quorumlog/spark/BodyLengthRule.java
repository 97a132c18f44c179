/*
 * Optimizer rule: length(body) over a quorumlog scan -> the scan's hidden metadata column
 * _body_length (the body_len field of each record's header; StoreTable.metadataColumns).
 *
 * Spark translates length() of strings only into a data-source expression, so without this a
 * query asking only for body lengths (count(*) + sum(length(body))) has every body copied
 * into a row; with it the scan returns an int per record, and sum(_body_length) is an
 * aggregate the scan answers itself (AggregatePushdown).
 *
 * Matched shape: a node N whose child is a chain of Project / Filter nodes ending in a
 * quorumlog DataSourceV2Relation, N's expressions holding length(b) where b is that
 * relation's body attribute, passed through every Project of the chain as is. The relation
 * gets the column, each Project of the chain passes it on, length(b) in N becomes it; when
 * that changes N's output (N a Filter), N is wrapped in a Project of its old output. Runs in
 * the operator-optimisation batch, before the V2 scan push-down.
 */
package io.quorumlog.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Length;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

final class BodyLengthRule extends Rule<LogicalPlan> {
    static final String COLUMN = "_body_length";

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        List<LogicalPlan> kids = new ArrayList<>();
        boolean changed = false;
        for (LogicalPlan c : CollectionConverters.asJava(plan.children())) {
            LogicalPlan r = apply(c);
            changed |= r != c;
            kids.add(r);
        }
        LogicalPlan p = changed ? plan.withNewChildren(seq(kids)) : plan;
        for (int i = 0; i < kids.size(); i++) {
            LogicalPlan rewritten = rewriteAbove(p, i);
            if (rewritten != null) return rewritten;
        }
        return p;
    }

    @SuppressWarnings("unchecked")
    private static <T> Seq<T> seq(List<T> xs) {
        return (Seq<T>) CollectionConverters.asScala(xs).toList();
    }

    /** The quorumlog relation at the end of a Project/Filter chain, or null. */
    private static DataSourceV2Relation chainEnd(LogicalPlan p) {
        while (p instanceof Project || p instanceof Filter) p = p.children().head();
        // option pushdown=false: the plain walk, bodies measured by Spark (the tests' reference)
        if (p instanceof DataSourceV2Relation
                && ((DataSourceV2Relation) p).table() instanceof QuorumlogSource.StoreTable
                && ((DataSourceV2Relation) p).options().getBoolean("pushdown", true)) {
            return (DataSourceV2Relation) p;
        }
        return null;
    }

    private static AttributeReference find(Seq<AttributeReference> attrs, String name) {
        for (AttributeReference a : CollectionConverters.asJava(attrs)) {
            if (a.name().equals(name)) return a;
        }
        return null;
    }

    /** node with length(body) over its child i rewritten, or null when it has none. */
    private static LogicalPlan rewriteAbove(LogicalPlan node, int i) {
        LogicalPlan child = node.children().apply(i);
        DataSourceV2Relation rel = chainEnd(child);
        if (rel == null) return null;
        AttributeReference body = find(rel.output(), "body");
        if (body == null || !passesBody(child, body) || !usesLength(node, body)) return null;
        AttributeReference len = find(rel.output(), COLUMN);
        if (len == null) len = find(rel.metadataOutput(), COLUMN);
        if (len == null) return null;
        LogicalPlan newChild = withColumn(child, body, len);
        List<LogicalPlan> kids = new ArrayList<>(CollectionConverters.asJava(node.children()));
        kids.set(i, newChild);
        final AttributeReference l = len;
        LogicalPlan out = node.withNewChildren(seq(kids)).transformExpressions(
            new LengthOf(body, l));
        if (!out.output().equals(node.output())) {
            List<NamedExpression> keep = new ArrayList<>();
            for (Attribute a : CollectionConverters.asJava(node.output())) keep.add(a);
            out = new Project(seq(keep), out);
        }
        return out;
    }

    /** Does every Project of the chain pass the body attribute on unchanged? */
    private static boolean passesBody(LogicalPlan p, AttributeReference body) {
        while (p instanceof Project || p instanceof Filter) {
            if (p instanceof Project && !((Project) p).outputSet().contains(body)) return false;
            p = p.children().head();
        }
        return true;
    }

    private static boolean usesLength(LogicalPlan node, AttributeReference body) {
        for (Expression e : CollectionConverters.asJava(node.expressions())) {
            if (e.find(new AbstractFunction1<Expression, Object>() {
                @Override public Object apply(Expression x) { return isLengthOf(x, body); }
            }).isDefined()) {
                return true;
            }
        }
        return false;
    }

    private static boolean isLengthOf(Expression x, AttributeReference body) {
        return x instanceof Length && ((Length) x).child() instanceof AttributeReference
            && ((AttributeReference) ((Length) x).child()).exprId().equals(body.exprId());
    }

    /** The chain with the length column added to its relation and passed by its Projects. */
    private static LogicalPlan withColumn(LogicalPlan p, AttributeReference body,
            AttributeReference len) {
        if (p instanceof DataSourceV2Relation) {
            DataSourceV2Relation r = (DataSourceV2Relation) p;
            if (find(r.output(), COLUMN) != null) return r;
            List<AttributeReference> out = new ArrayList<>(CollectionConverters.asJava(r.output()));
            out.add(len);
            return r.copy(r.table(), seq(out), r.catalog(), r.identifier(), r.options(),
                r.timeTravelSpec());
        }
        LogicalPlan c = withColumn(p.children().head(), body, len);
        if (p instanceof Filter) return new Filter(((Filter) p).condition(), c);
        Project pr = (Project) p;
        List<NamedExpression> list = new ArrayList<>(CollectionConverters.asJava(pr.projectList()));
        if (!pr.outputSet().contains(len)) list.add(len);
        return new Project(seq(list), c);
    }

    /** length(body) -> the length column (transformExpressions' partial function). */
    private static final class LengthOf
            extends scala.runtime.AbstractPartialFunction<Expression, Expression> {
        private final AttributeReference body, len;

        LengthOf(AttributeReference body, AttributeReference len) {
            this.body = body;
            this.len = len;
        }

        @Override public boolean isDefinedAt(Expression x) { return isLengthOf(x, body); }

        @Override public Expression apply(Expression x) {
            return isLengthOf(x, body) ? len : x;
        }
    }
}
