/*
 * A segment file the reader had open no longer holds the records it was reading: the store's
 * retention deleted it, or recycled the file (renamed it to <start>.free and then into place
 * as a new segment, overwriting it) while the query read it. Not corruption: those records
 * are no longer in the log, and a re-run (or a read from a later position) reads what is.
 */
package io.quorumlog.spark;

import java.io.IOException;

public class SegmentGoneException extends IOException {
    private static final long serialVersionUID = 1L;
    public final String file;
    public final long offset;

    public SegmentGoneException(String file, long offset, String seen) {
        super("quorumlog: segment " + file + " was deleted or reused by the store's retention "
            + "while the query read it (at offset " + offset + ": " + seen + "); its records "
            + "are no longer in the log: re-run the query, or read from a later position");
        this.file = file;
        this.offset = offset;
    }
}
