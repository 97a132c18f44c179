"""The columns of a store's DataFrame, declared once for Spark (both readers) and Arrow.

QuorumlogSource.SCHEMA is the JVM's copy; tests compare the two readers' rows and columns."""
from __future__ import annotations

# name, nullable, Spark type, Arrow type. The types are built lazily: pyspark and pyarrow are
# the optional [spark] extra, and the scan itself needs neither.
_COLUMNS = (
    ("topic", False, lambda T: T.StringType(), lambda pa: pa.string()),
    ("queue_id", False, lambda T: T.IntegerType(), lambda pa: pa.int32()),
    ("queue_offset", False, lambda T: T.LongType(), lambda pa: pa.int64()),
    ("raft_index", False, lambda T: T.LongType(), lambda pa: pa.int64()),
    ("term", False, lambda T: T.LongType(), lambda pa: pa.int64()),
    ("position", False, lambda T: T.LongType(), lambda pa: pa.int64()),
    ("born_timestamp", False, lambda T: T.TimestampType(),
     lambda pa: pa.timestamp("us", tz="UTC")),
    ("store_timestamp", False, lambda T: T.TimestampType(),
     lambda pa: pa.timestamp("us", tz="UTC")),
    ("tags", True, lambda T: T.StringType(), lambda pa: pa.string()),
    ("keys", False, lambda T: T.ArrayType(T.StringType(), False),
     lambda pa: pa.list_(pa.field("element", pa.string(), False))),
    ("properties", False, lambda T: T.MapType(T.StringType(), T.StringType(), False),
     lambda pa: pa.map_(pa.string(), pa.field("value", pa.string(), False))),
    ("body", False, lambda T: T.BinaryType(), lambda pa: pa.binary()),
)

COLUMNS = tuple(name for name, *_ in _COLUMNS)


def spark_schema():
    """The DataFrame schema both readers produce (QuorumlogSource.SCHEMA on the JVM)."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(name, spark_type(T), nullable)
                         for name, nullable, spark_type, _ in _COLUMNS])


def arrow_schema():
    """The same schema as Arrow (what the Python data source yields)."""
    import pyarrow as pa

    return pa.schema([pa.field(name, arrow_type(pa), nullable)
                      for name, nullable, _, arrow_type in _COLUMNS])
