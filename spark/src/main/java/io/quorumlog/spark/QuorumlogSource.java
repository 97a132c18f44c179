/*
 * The JVM-side DataFrame builder: a Spark DataSource V2 whose partitions are the
 * QuorumlogInputFormat's splits and whose reader drives QuorumlogRecordReader straight into
 * columnar batches (OnHeapColumnVector), so no record crosses into Python and only the
 * columns a query needs are filled (count + sum(length(body)) touches just the body).
 *
 *   spark.read().format("quorumlog")           // registered by META-INF/services
 *        .option("topics", "a/b").option("committedOnly", "true")
 *        .option("splitBytes", "67108864").option("onCorrupt", "fail").load(storeDir, ...)
 */
package io.quorumlog.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.spark.SparkContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.AnalysisException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.MetadataColumn;
import org.apache.spark.sql.connector.catalog.SupportsMetadataColumns;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomSumMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.SupportsReportPartitioning;
import org.apache.spark.sql.connector.read.partitioning.KeyGroupedPartitioning;
import org.apache.spark.sql.connector.read.partitioning.Partitioning;
import org.apache.spark.sql.connector.read.partitioning.UnknownPartitioning;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.expressions.GetArrayItem;
import org.apache.spark.sql.connector.expressions.LiteralValue;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownV2Filters;
import org.apache.spark.sql.internal.connector.PredicateUtils;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

public class QuorumlogSource implements TableProvider, DataSourceRegister {
    public static final StructType SCHEMA = new StructType(new StructField[] {
        DataTypes.createStructField("topic", DataTypes.StringType, false),
        DataTypes.createStructField("queue_id", DataTypes.IntegerType, false),
        DataTypes.createStructField("queue_offset", DataTypes.LongType, false),
        DataTypes.createStructField("raft_index", DataTypes.LongType, false),
        DataTypes.createStructField("term", DataTypes.LongType, false),
        DataTypes.createStructField("position", DataTypes.LongType, false),
        DataTypes.createStructField("born_timestamp", DataTypes.TimestampType, false),
        DataTypes.createStructField("store_timestamp", DataTypes.TimestampType, false),
        DataTypes.createStructField("tags", DataTypes.StringType, true),
        DataTypes.createStructField("keys",
            DataTypes.createArrayType(DataTypes.StringType, false), false),
        DataTypes.createStructField("properties",
            DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType, false), false),
        DataTypes.createStructField("body", DataTypes.BinaryType, false),
    });

    /** SCHEMA and, last, the group of a row's store: the schema of a load() that includes a
     *  directory of many Raft groups (Groups). */
    public static final StructType GROUP_SCHEMA = SCHEMA.add(
        DataTypes.createStructField(Groups.COLUMN, DataTypes.IntegerType, false));

    /** Hidden column (SupportsMetadataColumns): the body's length from the record header,
     *  what BodyLengthRule turns length(body) into. Not in select *. */
    public static final StructField BODY_LENGTH = DataTypes.createStructField(
        BodyLengthRule.COLUMN, DataTypes.IntegerType, false);

    /** The field of a column a scan may be asked for (the schema's or the hidden one). */
    static StructField field(String name) {
        return name.equals(BODY_LENGTH.name()) ? BODY_LENGTH : SCHEMA.apply(name);
    }

    /** spark.read.format("quorumlog"): registered through META-INF/services, so the name
     *  works in any session whose classpath has the jar. */
    @Override
    public String shortName() { return "quorumlog"; }

    /** The same source under the name it had first ("quorumlog-jvm"). */
    public static final class JvmAlias extends QuorumlogSource {
        @Override
        public String shortName() { return "quorumlog-jvm"; }
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) { return SCHEMA; }

    @Override
    public boolean supportsExternalMetadata() { return false; }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
        return new StoreTable(new CaseInsensitiveStringMap(props));
    }

    /**
     * The store roots of a load: "path" (load(p)) and/or "paths" (load(p1, p2, ...): Spark
     * passes them as a JSON array).
     */
    static Path[] storeRoots(CaseInsensitiveStringMap options) {
        List<String> out = new ArrayList<>();
        if (options.get("path") != null) out.add(options.get("path"));
        if (options.get("paths") != null) {
            try {
                out.addAll(Arrays.asList(new ObjectMapper().readValue(options.get("paths"),
                    String[].class)));
            } catch (JsonProcessingException e) {
                throw new IllegalArgumentException("quorumlog: option 'paths' is not a JSON "
                    + "array of strings: " + options.get("paths"), e);
            }
        }
        if (out.isEmpty()) {
            throw new IllegalArgumentException("quorumlog: no store path given (load(path))");
        }
        Path[] roots = new Path[out.size()];
        for (int i = 0; i < roots.length; i++) roots[i] = new Path(out.get(i));
        return roots;
    }

    static String joined(Path[] roots) {
        StringBuilder sb = new StringBuilder();
        for (Path p : roots) sb.append(sb.length() == 0 ? "" : ",").append(p);
        return sb.toString();
    }

    /**
     * One load() of one or more stores. The stores are checked and their checkpoints read
     * here, once: the Table lives as long as the DataFrame (and those derived from it), so
     * every action on it plans its scan from the same committed positions -- count() and
     * agg() agree while a writer appends; a new load() sees the new records.
     */
    static final class StoreTable implements Table, SupportsRead, SupportsMetadataColumns {
        private final Path[] dirs;
        private final Path[] roots;
        private final StoreMeta[] metas;
        private final int[] groups;
        private final boolean multiGroup;

        StoreTable(CaseInsensitiveStringMap options) {
            long t0 = OwnTime.enter();
            dirs = storeRoots(options);
            Configuration conf = SparkSession.active().sparkContext().hadoopConfiguration();
            try {
                Groups.Layout layout = Groups.expand(dirs, conf);
                roots = layout.roots.toArray(new Path[0]);
                groups = layout.groups.stream().mapToInt(Integer::intValue).toArray();
                multiGroup = layout.multiGroup;
                metas = new StoreMeta[roots.length];
                for (int i = 0; i < roots.length; i++) {
                    StoreMeta.checkRoot(roots[i], conf);
                    metas[i] = StoreMeta.load(roots[i], conf);
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            } catch (AnalysisException e) {
                throw StoreMeta.<RuntimeException>sneakyThrow(e);
            } finally {
                OwnTime.exit(t0);
            }
        }

        @Override public String name() { return "quorumlog:" + joined(dirs); }
        @Override public StructType schema() { return multiGroup ? GROUP_SCHEMA : SCHEMA; }
        @Override public MetadataColumn[] metadataColumns() {
            return new MetadataColumn[] { new MetadataColumn() {
                @Override public String name() { return BODY_LENGTH.name(); }
                @Override public DataType dataType() { return BODY_LENGTH.dataType(); }
                @Override public boolean isNullable() { return false; }
                @Override public String comment() { return "length of body, from the header"; }
            } };
        }
        @Override public Set<TableCapability> capabilities() {
            return Collections.singleton(TableCapability.BATCH_READ);
        }
        @Override public ScanBuilder newScanBuilder(CaseInsensitiveStringMap opts) {
            return new StoreScan(opts, roots, metas, groups, multiGroup);
        }
    }

    static final class StoreScan implements ScanBuilder, SupportsPushDownRequiredColumns,
            SupportsPushDownV2Filters, SupportsPushDownAggregates, SupportsReportPartitioning,
            Scan, Batch {
        private final CaseInsensitiveStringMap options;
        // the stores this scan reads: a filter on `group` drops those it rules out
        private Path[] roots;
        private StoreMeta[] metas;
        private int[] groups;
        private final boolean multiGroup;
        private final int storeCount;
        private final RecordFilter filter = new RecordFilter();
        private Filter[] pushed = new Filter[0];
        private Predicate[] pushedPredicates = new Predicate[0];
        private String pushedKeys = "";
        private AggregatePushdown agg;
        private boolean aggFromQueues;
        private boolean aggComplete;
        private String planned = "";
        private StructType required;
        // the rows QueueAnswerStrategy read on the driver (driverRows), or null
        private InternalRow[] answered;
        private transient Configuration conf;

        StoreScan(CaseInsensitiveStringMap options, Path[] roots, StoreMeta[] metas,
                  int[] groups, boolean multiGroup) {
            this.options = options;
            this.roots = roots;
            this.metas = metas;
            this.groups = groups;
            this.multiGroup = multiGroup;
            this.storeCount = roots.length;
            this.required = multiGroup ? GROUP_SCHEMA : SCHEMA;
            Set<String> topics = RecordFilter.parseTopics(options.get("topics"));
            if (topics != null) filter.andTopics(topics);
        }

        @Override public void pruneColumns(StructType requiredSchema) { required = requiredSchema; }

        /**
         * Takes the predicates a record's header or an index answers (FilterPushdown, and
         * get(keys, 0) = 'k' for the key index) into the reader's RecordFilter and returns
         * those Spark must still evaluate: the ones the reader does not answer exactly
         * (FilterPushdown.exact). Spark 4.3 offers array_contains to no source, so the first
         * key is the key lookup it can push (get(): no error for a message without keys);
         * the reader compares it (RecordFilter.firstKey), so it is exact too.
         */
        @Override public Predicate[] pushPredicates(Predicate[] predicates) {
            long t0 = OwnTime.enter();
            try {
                return pushV2(predicates);
            } finally {
                OwnTime.exit(t0);
            }
        }

        private Predicate[] pushV2(Predicate[] predicates) {
            List<Filter> used = new ArrayList<>();
            List<Predicate> usedV2 = new ArrayList<>();
            List<Predicate> left = new ArrayList<>();
            // option pushdown=false: the reader sees no filter (to measure what pushdown saves)
            for (Predicate p : pushdown() ? predicates : new Predicate[0]) {
                String key = firstKeyEquality(p);
                if (key != null) {
                    // the reader checks the first key (exact); a second one Spark checks
                    if (filter.andFirstKey(key)) {
                        usedV2.add(p);
                        pushedKeys += (pushedKeys.isEmpty() ? "" : ", ") + p.describe();
                    } else {
                        left.add(p);
                    }
                    continue;
                }
                scala.Option<Filter> v1 = PredicateUtils.toV1(p);
                if (multiGroup && v1.isDefined() && Groups.onlyGroup(v1.get())) {
                    pruneGroups(v1.get());   // exact: a store's rows share their group
                    used.add(v1.get());
                    usedV2.add(p);
                } else if (v1.isDefined() && FilterPushdown.push(filter, v1.get())) {
                    used.add(v1.get());
                    usedV2.add(p);
                    if (!FilterPushdown.exact(v1.get())) left.add(p);
                } else {
                    left.add(p);
                }
            }
            if (!pushdown()) left.addAll(Arrays.asList(predicates));
            pushed = used.toArray(new Filter[0]);
            pushedPredicates = usedV2.toArray(new Predicate[0]);
            return left.toArray(new Predicate[0]);
        }

        @Override public Predicate[] pushedPredicates() { return pushedPredicates; }

        /** Keeps the stores whose group the filter (on `group` only) keeps. */
        private void pruneGroups(Filter f) {
            List<Integer> keep = new ArrayList<>();
            for (int i = 0; i < roots.length; i++) {
                if (Boolean.TRUE.equals(Groups.eval(f, groups[i]))) keep.add(i);
            }
            Path[] r = new Path[keep.size()];
            StoreMeta[] m = new StoreMeta[keep.size()];
            int[] g = new int[keep.size()];
            for (int k = 0; k < r.length; k++) {
                r[k] = roots[keep.get(k)];
                m[k] = metas[keep.get(k)];
                g[k] = groups[keep.get(k)];
            }
            roots = r;
            metas = m;
            groups = g;
        }

        /** "Groups: [0, 2] of 3 stores" for explain() when the load has a multi-group directory. */
        private String describeGroups() {
            if (!multiGroup) return "";
            return " Groups: " + Arrays.toString(groups) + " of " + storeCount + " stores";
        }

        /** k of the predicate keys[0] = 'k' (string literal), else null. */
        private static String firstKeyEquality(Predicate p) {
            if (!p.name().equals("=") || p.children().length != 2) return null;
            if (!(p.children()[0] instanceof GetArrayItem)
                    || !(p.children()[1] instanceof LiteralValue)) {
                return null;
            }
            GetArrayItem g = (GetArrayItem) p.children()[0];
            Object v = ((LiteralValue<?>) p.children()[1]).value();
            if (!(g.childArray() instanceof NamedReference)
                    || !Arrays.equals(((NamedReference) g.childArray()).fieldNames(),
                        new String[] { "keys" })
                    || !(g.ordinal() instanceof LiteralValue)
                    || !Integer.valueOf(0).equals(((LiteralValue<?>) g.ordinal()).value())
                    || g.failOnError() || v == null) {
                return null;
            }
            return v.toString();
        }

        private boolean pushdown() { return options.getBoolean("pushdown", true); }

        private boolean committedOnly() { return options.getBoolean("committedOnly", true); }

        /** Indexes are used for committed reads that fail on a corrupt record: with
         *  onCorrupt=skip every record is walked, so the ones skipped are the same for a
         *  count as for the rows (an index knows nothing of a record's damage). */
        private boolean useIndexes() {
            return pushdown() && committedOnly()
                && options.getOrDefault("onCorrupt", "fail").equals("fail");
        }

        /**
         * Count / sum(length(body)) / min / max grouped by nothing, topic and/or queue_id
         * (AggregatePushdown): from the consume queues when they can answer it, else from
         * the record headers of the planned read. Spark asks only when every filter was
         * answered exactly (pushPredicates returned none).
         */
        @Override public boolean pushAggregation(Aggregation aggregation) {
            // every store pruned: Spark's own aggregate gives the empty input's answer
            if (!pushdown() || roots.length == 0) return false;
            long t0 = OwnTime.enter();
            try {
                agg = AggregatePushdown.of(aggregation);
                if (agg == null) return false;
                aggFromQueues = queuesAnswer(agg);
                aggComplete = supportCompletePushDown(aggregation);
                return true;
            } finally {
                OwnTime.exit(t0);
            }
        }

        /** Can the consume queues alone answer a (every store's queues cover its log)? */
        private boolean queuesAnswer(AggregatePushdown a) {
            boolean ok = useIndexes() && filter.onlyTopicsAndQueues() && a.fromQueues();
            for (StoreMeta m : metas) {
                if (!m.hasCheckpoint || m.dispatchedPosition < m.committedPosition) ok = false;
            }
            return ok;
        }

        /**
         * Are this scan's rows the aggregate's answer, one per group (Spark then drops its
         * own aggregation and the shuffle before it)? Grouped by topic and queue_id from the
         * consume queues of one store: each queue is read by one task, one row each.
         * Ungrouped in local mode: one task reads every split on defaultParallelism threads
         * and returns the one row (on a cluster the splits stay tasks and Spark merges).
         */
        @Override public boolean supportCompletePushDown(Aggregation aggregation) {
            AggregatePushdown a = pushdown() ? AggregatePushdown.of(aggregation) : null;
            if (a == null) return false;
            if (a.groupBy.length == 0) {   // (from the queues: one row per store)
                return SparkSession.active().sparkContext().isLocal()
                    && (metas.length == 1 || !queuesAnswer(a));
            }
            return metas.length == 1 && queuesAnswer(a)
                && new java.util.HashSet<>(Arrays.asList(a.groupBy)).equals(
                    Set.of("topic", "queue_id"));
        }

        public Filter[] pushedFilters() { return pushed; }

        /**
         * A complete aggregate QueueAnswerStrategy computes on the driver when the query
         * runs (driverRows; explain() plans it and reads nothing), so Spark runs no job for it: from the consume queues of one
         * store; or, ungrouped in local mode, from the records an index selects (key index,
         * consume queues, a walk cut to a time range). In local mode that aggregate is one
         * task on defaultParallelism threads in this JVM anyway: on the driver it is the same
         * reads without a job's fixed cost (broadcasting the Hadoop configuration, scheduling,
         * a task's round trip), most of a selective query's time. A full walk too (its
         * reads are the task's, on the same threads): only a read that skips corrupt
         * records or reads past the committed position stays a task (its skipped-record
         * count is a task metric).
         */
        boolean answersOnDriver() {
            if (agg == null || !aggComplete) return false;
            if (aggFromQueues) return metas.length == 1;
            return agg.groupBy.length == 0 && useIndexes()
                && SparkSession.active().sparkContext().isLocal();
        }

        /** The rows of that aggregate: each queue's first and last entry (binary search) and
         *  the two records they name, or the planned reads aggregated on this JVM's threads. */
        InternalRow[] driverRows() {
            long t0 = OwnTime.enter();
            try {
                if (aggFromQueues) {
                    answered = agg.fromQueues(conf(), roots[0].toString(), metas[0],
                        IndexPlanner.aggregateRanges(conf(), roots[0], metas[0], filter))
                        .toArray(new InternalRow[0]);
                    return answered;
                }
                int parallelism = SparkSession.active().sparkContext().defaultParallelism();
                Configuration c = conf();
                answered = agg.aggregate(new AggregatePushdown.WalkPart(planReads(parallelism),
                    agg, parallelism), p -> ReaderFactory.open(p, c)).toArray(new InternalRow[0]);
                return answered;
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            } finally {
                OwnTime.exit(t0);
            }
        }

        /**
         * A read that is all consume-queue entries (one store, a filter naming queues, the
         * queues covering every committed record, no aggregate pushed) has one partition per
         * queue, keyed by (topic, queue_id): Spark then groups by those columns, or joins on
         * them, without a shuffle. Any other read reports no partitioning.
         */
        boolean byQueue() {
            if (agg != null || !useIndexes() || metas.length != 1 || filter.keys != null
                    || !filter.narrowsQueues()) {
                return false;
            }
            StoreMeta m = metas[0];
            try {
                return m.hasCheckpoint && m.dispatchedPosition >= m.committedPosition
                    && m.dispatchedPosition > m.minPosition
                    && StoreMeta.listIndexFiles(roots[0], conf()).length > 0;
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        @Override public Partitioning outputPartitioning() {
            if (!byQueue()) return new UnknownPartitioning(0);
            try {
                int n = IndexPlanner.aggregateRanges(conf(), roots[0], metas[0], filter).size();
                return new KeyGroupedPartitioning(new Expression[] {
                    Expressions.column("topic"), Expressions.column("queue_id") }, n);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        @Override public Scan build() { return this; }

        /** An aggregate's partitions are all row-based (WalkPart, QueuePart, AnsweredPart):
         *  said here, the planner does not plan the partitions to ask them (for a query the
         *  driver answers that planning would be its reads, done by explain() too). */
        @Override public ColumnarSupportMode columnarSupportMode() {
            return agg != null ? ColumnarSupportMode.UNSUPPORTED
                : ColumnarSupportMode.PARTITION_DEFINED;
        }
        @Override public StructType readSchema() { return agg != null ? agg.schema : required; }

        /** What explain() prints after "BatchScan quorumlog:<roots>[columns]". */
        @Override public String description() {
            String read;
            if (agg != null) read = agg.describe(aggFromQueues) + (aggComplete ? ", complete" : "");
            else if (!useIndexes()) read = "ReadVia: log walk";
            else if (filter.keys != null) read = "ReadVia: key index (" + pushedKeys + ")";
            else if (filter.narrowsQueues()) read = "ReadVia: consume queues";
            else if (filter.hasStoreTs()) read = "ReadVia: log walk cut to the store_timestamp range";
            else read = "ReadVia: log walk";
            return "quorumlog store " + joined(roots) + " PushedFilters: "
                + Arrays.toString(pushed) + describeGroups() + " RecordFilter: ["
                + filter.describe() + "] " + read
                + (byQueue() ? " PartitionedBy: [topic, queue_id]" : "");
        }
        @Override public Batch toBatch() { return this; }

        @Override public CustomMetric[] supportedCustomMetrics() {
            return new CustomMetric[] { new SkippedMetric() };
        }

        /** The session's Hadoop configuration with this scan's settings on top. */
        private Configuration conf() {
            if (conf == null) {
                SparkContext sc = SparkSession.active().sparkContext();
                conf = new Configuration(sc.hadoopConfiguration());
                for (Map.Entry<String, String> e : settings()) conf.set(e.getKey(), e.getValue());
            }
            return conf;
        }

        /** This scan's own settings (filter, committed-only, on-corrupt) and nothing else:
         *  what the reader factory carries to the tasks next to the shared configuration. */
        private Configuration settings() {
            Configuration c = new Configuration(false);
            filter.writeTo(c);
            c.setBoolean(QuorumlogRecordReader.CONF_COMMITTED_ONLY,
                options.getBoolean("committedOnly", true));
            String onCorrupt = options.getOrDefault("onCorrupt", "fail");
            if (!onCorrupt.equals("fail") && !onCorrupt.equals("skip")) {
                throw new IllegalArgumentException("quorumlog: onCorrupt must be 'fail' or "
                    + "'skip', got '" + onCorrupt + "'");
            }
            c.set(QuorumlogRecordReader.CONF_ON_CORRUPT, onCorrupt);
            c.setBoolean(QuorumlogRecordReader.CONF_INCLUDE_CONTROL, false);
            return c;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            long t0 = OwnTime.enter();
            try {
                return planParts();
            } finally {
                OwnTime.exit(t0);
            }
        }

        private InputPartition[] planParts() {
            // answered on the driver already: the scan under the DriverAnswer (planned for
            // explain()) is its rows, not a second planning of the reads
            if (answered != null) return new InputPartition[] { new AnsweredPart(answered) };
            try {
                int parallelism = SparkSession.active().sparkContext().defaultParallelism();
                if (agg != null && aggFromQueues) {
                    List<InputPartition> parts = new ArrayList<>();
                    // ungrouped and complete: one task, one row (queues are read cheaply)
                    int tasks = aggComplete && agg.groupBy.length == 0 ? 1 : parallelism;
                    for (int i = 0; i < roots.length; i++) {
                        parts.addAll(AggregatePushdown.QueuePart.plan(agg, roots[i].toString(),
                            metas[i], IndexPlanner.aggregateRanges(conf(), roots[i], metas[i],
                                filter), tasks));
                    }
                    planned = "aggregate from consume queues";
                    return parts.toArray(new InputPartition[0]);
                }
                InputPartition[] parts = planReads(parallelism);
                if (agg != null && aggComplete && agg.groupBy.length == 0) {
                    return new InputPartition[] {
                        new AggregatePushdown.WalkPart(parts, agg, parallelism) };
                }
                if (agg != null) {   // aggregated from the record headers, one row set per task
                    for (int i = 0; i < parts.length; i++) {
                        parts[i] = new AggregatePushdown.WalkPart(parts[i], agg);
                    }
                    if (parts.length == 0 && agg.groupBy.length == 0) {
                        // no record to read: still one (empty) row, so count is 0, not null
                        parts = new InputPartition[] { new AggregatePushdown.WalkPart(
                            new PositionsReader.Part("/", 1, 0, 0, null, new long[0], "none"),
                            agg) };
                    }
                }
                return parts;
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        /** The read partitions of every store; with the `group` column each store's are
         *  planned on their own and carry their group (GroupPart). */
        private InputPartition[] planReads(int parallelism) throws IOException {
            long splitBytes = options.getLong("splitBytes", -1);
            if (!multiGroup || agg != null) {
                IndexPlanner.Plan plan = IndexPlanner.plan(conf(), roots, metas, filter,
                    splitBytes, parallelism, useIndexes(), byQueue());
                planned = String.join("; ", plan.how);
                return plan.parts.toArray(new InputPartition[0]);
            }
            List<InputPartition> parts = new ArrayList<>();
            List<String> how = new ArrayList<>();
            for (int i = 0; i < roots.length; i++) {
                IndexPlanner.Plan plan = IndexPlanner.plan(conf(), new Path[] { roots[i] },
                    new StoreMeta[] { metas[i] }, filter, splitBytes, parallelism, useIndexes(),
                    byQueue());
                for (InputPartition p : plan.parts) parts.add(new GroupPart(p, groups[i]));
                how.addAll(plan.how);
            }
            planned = String.join("; ", how);
            return parts.toArray(new InputPartition[0]);
        }

        /** How the last planInputPartitions() read each store (for tests). */
        public String plannedReads() { return planned; }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            // rows in hand: no configuration to broadcast (nor to hash to find the shared one)
            if (answered != null) return new ReaderFactory(null, new String[0], required);
            List<String> kv = new ArrayList<>();
            for (Map.Entry<String, String> e : settings()) {
                kv.add(e.getKey());
                kv.add(e.getValue());
            }
            return new ReaderFactory(SharedConf.of(SparkSession.active().sparkContext()),
                kv.toArray(new String[0]), required);
        }
    }

    /** One split, carried to the executor as plain fields (FileSplit is Writable, not Serializable). */
    static final class SplitPartition implements InputPartition {
        private static final long serialVersionUID = 1L;
        final String path;
        final long start, length, limit, committed, indexEntries;
        final String[] hosts;

        SplitPartition(QuorumlogSplit s) {
            path = s.getPath().toString();
            start = s.getStart();
            length = s.getLength();
            limit = s.getLimitPosition();
            committed = s.getCommittedPosition();
            indexEntries = s.getIndexFileEntries();
            String[] h;
            try { h = s.getLocations(); } catch (IOException e) { h = new String[0]; }
            hosts = h;
        }

        QuorumlogSplit toSplit() {
            return new QuorumlogSplit(new Path(path), start, length, hosts, limit, committed,
                indexEntries);
        }

        @Override public String[] preferredLocations() { return hosts; }
    }

    /** The rows of a scan the driver answered while the query was planned
     *  (QueueAnswerStrategy): what the scan stands for under the DriverAnswer. */
    static final class AnsweredPart implements InputPartition {
        private static final long serialVersionUID = 1L;
        final InternalRow[] rows;

        AnsweredPart(InternalRow[] rows) { this.rows = rows; }
    }

    /** A read partition of one store of a multi-group directory, and that store's group
     *  (the value of every row's `group` column). */
    static final class GroupPart implements InputPartition {
        private static final long serialVersionUID = 1L;
        final InputPartition part;
        final int group;

        GroupPart(InputPartition part, int group) {
            this.part = part;
            this.group = group;
        }

        @Override public String[] preferredLocations() { return part.preferredLocations(); }
    }

    /**
     * The session's Hadoop configuration, broadcast once and shared by every query while it
     * is unchanged (an order-free hash of its entries; another SparkContext, a new
     * broadcast). Broadcasting it per query (as a FileScan does) serialised and compressed
     * its ~1,000 entries each time: about a tenth of a selective query's driver CPU here.
     */
    static final class SharedConf {
        private static SparkContext owner;
        private static long hash;
        private static Broadcast<SerializableConfiguration> shared;

        private SharedConf() {}

        static synchronized Broadcast<SerializableConfiguration> of(SparkContext sc) {
            Configuration c = sc.hadoopConfiguration();
            long h = c.size();
            for (Map.Entry<String, String> e : c) {
                long x = e.getKey().hashCode() * 0x9E3779B97F4A7C15L + e.getValue().hashCode();
                x ^= x >>> 31;
                h += x * 0xBF58476D1CE4E5B9L;
            }
            if (shared == null || owner != sc || hash != h) {
                shared = JavaSparkContext.fromSparkContext(sc)
                    .broadcast(new SerializableConfiguration(new Configuration(c)));
                owner = sc;
                hash = h;
            }
            return shared;
        }
    }

    static final class ReaderFactory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final Broadcast<SerializableConfiguration> shared;
        private final String[] settings;     // key, value, key, value...: the scan's own
        private final StructType required;
        private transient Configuration conf;

        ReaderFactory(Broadcast<SerializableConfiguration> shared, String[] settings,
                      StructType required) {
            this.shared = shared;
            this.settings = settings;
            this.required = required;
        }

        /** The shared configuration with the scan's settings, made once per task's copy
         *  of the factory. */
        private synchronized Configuration conf() {
            if (conf == null) {
                Configuration c = new Configuration(shared.value().value());
                for (int i = 0; i + 1 < settings.length; i += 2) c.set(settings[i], settings[i + 1]);
                conf = c;
            }
            return conf;
        }

        @Override public boolean supportColumnarReads(InputPartition p) {
            return !(p instanceof AggregatePushdown.WalkPart
                || p instanceof AggregatePushdown.QueuePart || p instanceof AnsweredPart);
        }

        /** The records of a scan partition. */
        static RecordSource open(InputPartition p, Configuration conf) throws IOException {
            if (p instanceof PositionsReader.Part) {
                return new PositionsReader((PositionsReader.Part) p, conf);
            }
            QuorumlogRecordReader r = new QuorumlogRecordReader();
            r.initialize(((SplitPartition) p).toSplit(), conf);
            return RecordSource.of(r);
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition p) {
            int group = 0;
            if (p instanceof GroupPart) {
                group = ((GroupPart) p).group;
                p = ((GroupPart) p).part;
            }
            try {
                return new ColumnarReader(open(p, conf()), required, group);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition p) {
            if (p instanceof AnsweredPart) {
                return AggregatePushdown.rowsReader(Arrays.asList(((AnsweredPart) p).rows));
            }
            if (p instanceof AggregatePushdown.QueuePart) {
                AggregatePushdown.QueuePart q = (AggregatePushdown.QueuePart) p;
                long t0 = OwnTime.enter();
                try {
                    return AggregatePushdown.rowsReader(q.agg.fromQueues(conf(),
                        q.root, q.meta, Arrays.asList(q.ranges)));
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                } finally {
                    OwnTime.exit(t0);
                }
            }
            if (p instanceof AggregatePushdown.WalkPart) {
                AggregatePushdown.WalkPart w = (AggregatePushdown.WalkPart) p;
                long t0 = OwnTime.enter();
                try {
                    Configuration c = conf();
                    return AggregatePushdown.rowsReader(w.agg.aggregate(w, x -> open(x, c)));
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                } finally {
                    OwnTime.exit(t0);
                }
            }
            PartitionReader<ColumnarBatch> batches = createColumnarReader(p);
            return new PartitionReader<InternalRow>() {
                private ColumnarBatch batch;
                private int row = -1;

                @Override public boolean next() throws IOException {
                    while (batch == null || ++row >= batch.numRows()) {
                        if (!batches.next()) return false;
                        batch = batches.get();
                        row = -1;
                    }
                    return true;
                }
                @Override public InternalRow get() { return batch.getRow(row); }
                @Override public void close() throws IOException { batches.close(); }
                @Override public CustomTaskMetric[] currentMetricsValues() {
                    return batches.currentMetricsValues();
                }
            };
        }
    }

    public static final class SkippedMetric extends CustomSumMetric {
        @Override public String name() { return "skippedCorruptRecords"; }
        @Override public String description() { return "corrupt records skipped (onCorrupt=skip)"; }
    }
}
