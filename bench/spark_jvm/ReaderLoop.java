/*
 * The reader's own reads of the scan workload's (a) full scan and (g) one-tag query, with no
 * Spark: the parts IndexPlanner plans for them read on 2 threads (as a driver answer reads
 * them), count and sum of body lengths, RUNS times in one JVM. Per run: wall ms and the
 * read threads' CPU ms -- the first runs show what the reads cost before the JIT has
 * compiled them (what a five-run bench sees), the last ones the compiled cost.
 *
 *   CP="$(ls .venv/lib/python3.11/site-packages/pyspark/jars/*.jar | tr '\n' :)src/quorumlog/quorumlog-spark.jar"
 *   javac -cp "$CP" -d /tmp/readerloop bench/spark_jvm/ReaderLoop.java
 *   java -cp "/tmp/readerloop:$CP" io.quorumlog.spark.ReaderLoop STORE a|g RUNS [pass]
 *
 * With a 4th argument `pass` (g only): the consume-queue pass alone, no records read.
 *
 * STORE: a store the workload's write_store wrote (bench/spark_query_phases.py DIR leaves
 * one in DIR/<size>x<count>/store). In the reader's package: it calls package-private code.
 */
package io.quorumlog.spark;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.connector.read.InputPartition;

public class ReaderLoop {
    public static void main(String[] args) throws Exception {
        Path root = new Path(args[0]);
        String q = args[1];
        boolean passOnly = args.length > 3 && args[3].equals("pass");
        int runs = Integer.parseInt(args[2]);
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        Configuration conf = new Configuration();
        RecordFilter f = new RecordFilter();
        if (q.equals("g")) f.andTags(Set.of("tag10"));
        f.writeTo(conf);
        ExecutorService pool = Executors.newFixedThreadPool(2);
        for (int run = 0; run < runs; run++) {
            long t0 = System.nanoTime();
            StoreMeta m = StoreMeta.load(root, conf);
            IndexPlanner.Plan plan = IndexPlanner.plan(conf, new Path[] { root },
                new StoreMeta[] { m }, f, 0, 2, true, false);
            long planNs = System.nanoTime() - t0;
            List<Future<long[]>> fs = new ArrayList<>();
            for (InputPartition p : plan.parts) {
                fs.add(pool.submit(() -> {
                    long c0 = mx.getCurrentThreadCpuTime();
                    long n = 0, bytes = 0;
                    if (passOnly) {      // the consume-queue pass alone (no merge, no records)
                        PositionsReader.Part pp = (PositionsReader.Part) p;
                        org.apache.hadoop.fs.FileSystem lfs = root.getFileSystem(conf);
                        for (StoreIndexes.CqRange r : pp.ranges) {   // the plan's shared listing
                            n += StoreIndexes.read(lfs, root, r, pp.listing).n;
                        }
                        return new long[] { n, 0, mx.getCurrentThreadCpuTime() - c0 };
                    }
                    try (RecordSource s = QuorumlogSource.ReaderFactory.open(p, conf)) {
                        while (s.next()) {
                            n++;
                            bytes += s.current().bodyLength();
                        }
                    }
                    return new long[] { n, bytes, mx.getCurrentThreadCpuTime() - c0 };
                }));
            }
            long n = 0, bytes = 0, cpu = 0;
            for (Future<long[]> x : fs) {
                long[] v = x.get();
                n += v[0];
                bytes += v[1];
                cpu += v[2];
            }
            long wall = System.nanoTime() - t0;
            System.out.printf("run %d: %s parts=%d n=%d bytes=%d plan %.1f ms, wall %.1f ms, "
                + "read threads' CPU %.1f ms%n", run, q, plan.parts.size(), n, bytes,
                planNs / 1e6, wall / 1e6, cpu / 1e6);
        }
        pool.shutdown();
    }
}
