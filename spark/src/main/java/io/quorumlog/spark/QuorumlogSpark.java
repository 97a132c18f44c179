/*
 * Entry point Python calls through py4j (quorumlog.spark.read_store): builds the store's
 * DataFrame on the JVM with the QuorumlogSource, so records never travel through Python.
 */
package io.quorumlog.spark;

import java.util.Arrays;
import java.util.List;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.sql.DataFrameReader;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

public final class QuorumlogSpark {
    private QuorumlogSpark() {}

    /** Store files this JVM's readers have opened (ReadCount): for tests that show a step
     *  read nothing. */
    public static long filesOpened() { return ReadCount.files(); }

    /** Wall nanoseconds spent in the reader's own code on queries' paths (OwnTime): for
     *  benchmarks that tell the reader's share of a query from Spark's. */
    public static long ownNanos() { return OwnTime.nanos(); }

    /** Version string the Python side checks so a stale jar is noticed, not misused. */
    public static final String VERSION = "4";

    public static String version() { return VERSION; }

    /**
     * DataFrame of the store at path. topics: null for all, else only these topics (filtered
     * in the reader). splitBytes <= 0: the default split size. onCorrupt: "fail" or "skip".
     */
    public static Dataset<Row> readStore(SparkSession spark, String path, List<String> topics,
                                         boolean committedOnly, long splitBytes, String onCorrupt) {
        return readStores(spark, List.of(path), topics, committedOnly, splitBytes, onCorrupt);
    }

    /**
     * readStores with the paths as one JSON array and the topics '/'-joined (null: all):
     * what Python calls, in ONE py4j round trip (building Java lists from Python costs one
     * round trip per element, and each is a wait for a core on a busy machine).
     */
    public static Dataset<Row> readStoresJson(SparkSession spark, String pathsJson,
                                              String topics, boolean committedOnly,
                                              long splitBytes, String onCorrupt) {
        String[] paths;
        try {
            paths = new ObjectMapper().readValue(pathsJson, String[].class);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("quorumlog: paths is not a JSON array of "
                + "strings: " + pathsJson, e);
        }
        return readStores(spark, Arrays.asList(paths),
            topics == null ? null : topics.isEmpty() ? List.of()
                : Arrays.asList(topics.split("/", -1)), committedOnly,
            splitBytes, onCorrupt);
    }

    /** readStore over several stores: one DataFrame, the splits of every store. */
    public static Dataset<Row> readStores(SparkSession spark, List<String> paths,
                                          List<String> topics, boolean committedOnly,
                                          long splitBytes, String onCorrupt) {
        DataFrameReader r = spark.read().format(QuorumlogSource.class.getName())
            .option("committedOnly", committedOnly)
            .option("splitBytes", splitBytes)
            .option("onCorrupt", onCorrupt);
        if (topics != null) {
            for (String t : topics) {
                String why = Format.topicProblem(t);
                if (why != null) {
                    throw new IllegalArgumentException("quorumlog: invalid topic name '" + t
                        + "': " + why);
                }
            }
            r = r.option("topics", String.join("/", topics));
        }
        return r.load(paths.toArray(new String[0]));
    }
}
