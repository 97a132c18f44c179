/*
 * How many store files (segments, consume queues, raft-index and key-index files) this
 * JVM's readers have opened to read records or index entries (or taken to read through a
 * mapping kept from an earlier open: StoreIndexes.CqFile.map): what a test reads to show
 * that a step (explain() of a driver-answered query, say) did no reads. Checkpoint and
 * directory listings, the load's own checks, are not counted.
 */
package io.quorumlog.spark;

import java.util.concurrent.atomic.AtomicLong;

final class ReadCount {
    private ReadCount() {}

    private static final AtomicLong OPENED = new AtomicLong();

    static void opened() { OPENED.incrementAndGet(); }

    static long files() { return OPENED.get(); }
}
