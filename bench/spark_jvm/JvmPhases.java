/*
 * The scan workload's (e) and (g) queries run from Java in one plain JVM (no py4j, no
 * Python), local[*] with the quorumlog extension: per query, wall time and main-thread CPU
 * of each phase (the DataFrame, the query -- Spark analyses it --, executedPlan --
 * optimisation and planning --, collect), the process's CPU, and CPU ticks per thread name
 * (/proc/self/task: JIT compiler threads, GC) over the last two thirds of the runs, whose
 * medians are printed. For a JFR profile add -XX:StartFlightRecording=... to the java line.
 *
 *   CP="$(ls .venv/lib/python3.11/site-packages/pyspark/jars/*.jar | tr '\n' :)src/quorumlog/quorumlog-spark.jar"
 *   javac -cp "$CP" -d /tmp/jvmphases bench/spark_jvm/JvmPhases.java
 *   java -Xmx2g --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED \
 *        --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/sun.util.calendar=ALL-UNNAMED \
 *        -cp "/tmp/jvmphases:$CP" JvmPhases STORE PARQUET e|g RUNS [read_store|both]
 *
 * STORE and PARQUET: a store the workload's write_store wrote and its Parquet copy (as
 * bench/spark_query_phases.py DIR leaves them in DIR/<size>x<count>/).
 */
import java.io.File;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Supplier;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.count;
import static org.apache.spark.sql.functions.length;
import static org.apache.spark.sql.functions.lit;
import static org.apache.spark.sql.functions.max;
import static org.apache.spark.sql.functions.min;
import static org.apache.spark.sql.functions.sum;

public class JvmPhases {
    static final ThreadMXBean MX = ManagementFactory.getThreadMXBean();
    static final com.sun.management.OperatingSystemMXBean OS =
        (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    static final String[] NAMES = { "DataFrame", "query", "plan", "collect", "total" };

    /** CPU ticks (utime + stime) of this process's threads, summed by name (digits as N). */
    static Map<String, Long> ticks() {
        Map<String, Long> m = new TreeMap<>();
        File[] tasks = new File("/proc/self/task").listFiles();
        for (File t : tasks == null ? new File[0] : tasks) {
            String st;
            try {
                st = new String(Files.readAllBytes(new File(t, "stat").toPath()));
            } catch (IOException e) {
                continue;                  // the thread ended meanwhile
            }
            String name = st.substring(st.indexOf('(') + 1, st.lastIndexOf(')'))
                .replaceAll("[0-9]+", "N");
            String[] f = st.substring(st.lastIndexOf(')') + 2).split(" ");
            m.merge(name, Long.parseLong(f[11]) + Long.parseLong(f[12]), Long::sum);
        }
        return m;
    }

    static Dataset<Row> query(Dataset<Row> df, String letter) {
        if (letter.equals("e")) {
            return df.groupBy("topic", "queue_id").agg(count(lit(1)), min("queue_offset"),
                max("queue_offset"), min("store_timestamp"), max("store_timestamp"));
        }
        return df.where(col("tags").equalTo("tag10"))
            .agg(count(lit(1)).alias("n"), sum(length(col("body"))).alias("bytes"));
    }

    /** Wall ns of each phase (the DataFrame, the query, executedPlan, collect) and of all,
     *  then the main thread's CPU ns of the same, then the process's CPU ns. */
    static long[] run(Supplier<Dataset<Row>> reader, String letter) {
        long[] w = new long[5], c = new long[5];
        long p0 = OS.getProcessCpuTime();
        w[0] = System.nanoTime();
        c[0] = MX.getCurrentThreadCpuTime();
        Dataset<Row> df = reader.get();
        w[1] = System.nanoTime();
        c[1] = MX.getCurrentThreadCpuTime();
        Dataset<Row> q = query(df, letter);
        w[2] = System.nanoTime();
        c[2] = MX.getCurrentThreadCpuTime();
        q.queryExecution().executedPlan();
        w[3] = System.nanoTime();
        c[3] = MX.getCurrentThreadCpuTime();
        q.collect();
        w[4] = System.nanoTime();
        c[4] = MX.getCurrentThreadCpuTime();
        long p1 = OS.getProcessCpuTime();
        long[] out = new long[11];
        for (int i = 0; i < 4; i++) {
            out[i] = w[i + 1] - w[i];
            out[5 + i] = c[i + 1] - c[i];
        }
        out[4] = w[4] - w[0];
        out[9] = c[4] - c[0];
        out[10] = p1 - p0;
        return out;
    }

    public static void main(String[] a) {
        String store = a[0], pq = a[1], letter = a[2];
        int n = Integer.parseInt(a[3]);
        boolean both = a.length < 5 || a[4].equals("both");
        SparkSession s = SparkSession.builder().master("local[*]").appName("jvm-phases")
            .config("spark.sql.extensions", "io.quorumlog.spark.QuorumlogExtensions")
            .config("spark.sql.shuffle.partitions", "2").getOrCreate();
        s.sparkContext().setLogLevel("ERROR");
        Map<String, Supplier<Dataset<Row>>> readers = new LinkedHashMap<>();
        readers.put("read_store", () -> io.quorumlog.spark.QuorumlogSpark.readStore(s, store,
            null, true, 0, "fail"));
        if (both) readers.put("parquet", () -> s.read().parquet(pq));
        Map<String, List<long[]>> res = new LinkedHashMap<>();
        Map<String, Long> before = null;
        for (int i = 0; i < n; i++) {
            if (i == n / 3) before = ticks();
            for (Map.Entry<String, Supplier<Dataset<Row>>> r : readers.entrySet()) {
                res.computeIfAbsent(r.getKey(), k -> new ArrayList<>())
                    .add(run(r.getValue(), letter));
            }
        }
        Map<String, Long> after = ticks();
        int runs = n - n / 3;
        for (Map.Entry<String, Long> t : after.entrySet()) {
            long d = t.getValue() - (before == null ? 0 : before.getOrDefault(t.getKey(), 0L));
            if (d > 0) System.out.printf("thread %s: %.1f ms CPU a query%n", t.getKey(),
                d * 10.0 / (runs * readers.size()));
        }
        for (Map.Entry<String, List<long[]>> r : res.entrySet()) {
            List<long[]> v = r.getValue().subList(n / 3, n);
            StringBuilder sb = new StringBuilder(r.getKey() + ": median ms");
            String[] labels = new String[11];
            for (int j = 0; j < 5; j++) {
                labels[j] = NAMES[j] + " wall";
                labels[5 + j] = NAMES[j] + " main-thread CPU";
            }
            labels[10] = "process CPU";
            for (int j = 0; j < labels.length; j++) {
                final int k = j;
                long[] x = v.stream().mapToLong(y -> y[k]).sorted().toArray();
                sb.append(String.format(" %s %.1f,", labels[j], x[x.length / 2] / 1e6));
            }
            System.out.println(sb);
        }
        s.stop();
    }
}
