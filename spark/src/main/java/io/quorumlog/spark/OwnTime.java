/*
 * Wall nanoseconds this JVM has spent in the reader's own code on a query's path: opening
 * the stores of a load (StoreTable), the push-down calls, planning the reads, the planner
 * strategy, the driver answers' reads, and a job's aggregate reads (summed over tasks).
 * What bench/spark_query_phases.py subtracts from a query's time to tell the reader's share
 * from Spark's fixed cost of a query; nothing in the reader depends on it. Nested calls on
 * one thread are counted once (the outermost).
 */
package io.quorumlog.spark;

import java.util.concurrent.atomic.AtomicLong;

final class OwnTime {
    private OwnTime() {}

    private static final AtomicLong NANOS = new AtomicLong();
    private static final ThreadLocal<int[]> DEPTH = ThreadLocal.withInitial(() -> new int[1]);

    /** Starts a section: its start time, or -1 inside another section of this thread. */
    static long enter() {
        int[] d = DEPTH.get();
        return d[0]++ == 0 ? System.nanoTime() : -1;
    }

    /** Ends the section enter() returned t0 for. */
    static void exit(long t0) {
        DEPTH.get()[0]--;
        if (t0 >= 0) NANOS.addAndGet(System.nanoTime() - t0);
    }

    static long nanos() { return NANOS.get(); }
}
