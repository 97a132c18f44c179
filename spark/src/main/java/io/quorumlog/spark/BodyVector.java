/*
 * The body column of a batch: one byte[] per row, handed to Spark as it is. Spark's row
 * conversion reads a binary value with getBinary(row), which on an OnHeapColumnVector copies
 * the bytes out of the vector's buffer into a new array; here the body is copied once, from
 * the read buffer into its own array, and getBinary returns that array (never reused, so
 * Spark may keep it).
 */
package io.quorumlog.spark;

import java.util.Arrays;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

final class BodyVector extends ColumnVector {
    private final byte[][] bodies;

    BodyVector(int rows) {
        super(DataTypes.BinaryType);
        bodies = new byte[rows][];
    }

    void put(int row, byte[] b, int off, int len) {
        bodies[row] = Arrays.copyOfRange(b, off, off + len);
    }

    @Override public byte[] getBinary(int rowId) { return bodies[rowId]; }
    @Override public boolean hasNull() { return false; }
    @Override public int numNulls() { return 0; }
    @Override public boolean isNullAt(int rowId) { return false; }
    @Override public void close() { Arrays.fill(bodies, null); }

    private static UnsupportedOperationException notBinary() {
        return new UnsupportedOperationException("quorumlog body column is binary");
    }

    @Override public boolean getBoolean(int rowId) { throw notBinary(); }
    @Override public byte getByte(int rowId) { throw notBinary(); }
    @Override public short getShort(int rowId) { throw notBinary(); }
    @Override public int getInt(int rowId) { throw notBinary(); }
    @Override public long getLong(int rowId) { throw notBinary(); }
    @Override public float getFloat(int rowId) { throw notBinary(); }
    @Override public double getDouble(int rowId) { throw notBinary(); }
    @Override public ColumnarArray getArray(int rowId) { throw notBinary(); }
    @Override public ColumnarMap getMap(int ordinal) { throw notBinary(); }
    @Override public Decimal getDecimal(int rowId, int precision, int scale) { throw notBinary(); }
    @Override public UTF8String getUTF8String(int rowId) { throw notBinary(); }
    @Override public ColumnVector getChild(int ordinal) { throw notBinary(); }
}
