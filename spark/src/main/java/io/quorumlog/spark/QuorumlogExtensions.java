/*
 * The quorumlog session extension (spark.sql.extensions=io.quorumlog.spark.QuorumlogExtensions;
 * quorumlog.spark.session() sets it): adds QueueAnswerStrategy (a complete aggregate from the
 * consume queues answered on the driver, no job) and the BodyLengthRule optimizer rule, so
 * length(body) over a quorumlog scan is read from each record's header instead of from a
 * copied body -- and, being a plain column then, sum(length(body)) can be pushed into the
 * scan (SupportsPushDownAggregates). A session without it reads the same rows, slower.
 */
package io.quorumlog.spark;

import org.apache.spark.sql.SparkSessionExtensions;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

public final class QuorumlogExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    @Override
    public BoxedUnit apply(SparkSessionExtensions ext) {
        ext.injectOptimizerRule(new AbstractFunction1<org.apache.spark.sql.SparkSession,
                org.apache.spark.sql.catalyst.rules.Rule<
                    org.apache.spark.sql.catalyst.plans.logical.LogicalPlan>>() {
            @Override
            public org.apache.spark.sql.catalyst.rules.Rule<
                    org.apache.spark.sql.catalyst.plans.logical.LogicalPlan> apply(
                    org.apache.spark.sql.SparkSession s) {
                return new BodyLengthRule();
            }
        });
        ext.injectPlannerStrategy(new AbstractFunction1<org.apache.spark.sql.SparkSession,
                org.apache.spark.sql.execution.SparkStrategy>() {
            @Override
            public org.apache.spark.sql.execution.SparkStrategy apply(
                    org.apache.spark.sql.SparkSession s) {
                return new QueueAnswerStrategy(s);
            }
        });
        return BoxedUnit.UNIT;
    }
}
