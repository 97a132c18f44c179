/*
 * A record (or checkpoint / index entry) that fails validation: carries the file and the byte
 * offset inside that file so the failing task names exactly what is damaged.
 */
package io.quorumlog.spark;

import java.io.IOException;

public class CorruptRecordException extends IOException {
    private static final long serialVersionUID = 1L;
    public final String file;
    public final long offset;
    public final String reason;

    public CorruptRecordException(String reason, String file, long offset) {
        super("quorumlog: corrupt data in " + file + " at offset " + offset + ": " + reason);
        this.reason = reason;
        this.file = file;
        this.offset = offset;
    }
}
