"""Read a quorumlog store directory into a Spark DataFrame, with no broker running.

    spark = quorumlog.spark.session()                     # local session, jar on spark.jars
    df = quorumlog.spark.read_store(spark, "/data/store", topics=["orders"])

Two readers with the same schema and the same rows:

* the JVM reader (default when the jar is on the session's classpath): the Hadoop
  InputFormat/RecordReader in quorumlog-spark.jar (spark/), driven by a DataSource V2 that
  builds columnar batches on the JVM -- records never pass through Python;
* the fallback, a Spark 4 Python Data Source (`spark.read.format("quorumlog")` in a session
  without the jar, `"quorumlog-python"` in any session), which scans segment files with
  numpy (record positions from the raft index, headers gathered and checked as arrays,
  CRC32C computed lane-parallel in numpy) and yields Arrow batches. It needs no jar and no
  native extension, only local (POSIX) paths.

Both stop at the checkpoint's committed position, skip BLANK/NOOP/CONFIG/META records, check
every record's CRC32C and fail with the file and offset of a bad record (or skip and count it
with on_corrupt="skip").

One module per concern, as on the JVM side (spark/README.md):
  read         read_store, the entry point (QuorumlogSpark.java)
  session      sessions with the jar, registration, the JVM reader check
  schema       the DataFrame's columns, for Spark and Arrow (QuorumlogSource.SCHEMA)
  store_meta   checkpoint and numbered files of a store directory (StoreMeta.java)
  splits       split planning (QuorumlogInputFormat.java)
  raft_index   raft-index files as numpy views (RaftIndex.java)
  scan         the numpy scan of one split (QuorumlogRecordReader.java)
  crc          CRC32C of many records (native or numpy lanes)
  columns      column dicts of scanned records; arrow: them as Arrow batches
  datasource   the Python Data Source (QuorumlogSource.java); imports pyspark
"""
from __future__ import annotations

from .arrow import to_arrow
from .crc import crc32c_many
from .crc import native_crc32c as _native_crc32c
from .read import read_store
from .scan import BATCH_MAX_BYTES, BATCH_MAX_RECORDS, scan_split
from .schema import COLUMNS, spark_schema
from .session import (JAR_NAME, JVM_SOURCE, PY_SOURCE_ALIAS, PY_SOURCE_NAME, jar_path, register,
                      session)
from .session import jvm_reader_available as _jvm_reader_available
from .splits import DEFAULT_SPLIT_BYTES, MIN_SPLIT_BYTES, Split, plan_splits
from .store_meta import read_checkpoint as _read_checkpoint

__all__ = ["read_store", "session", "register", "jar_path", "scan_split", "plan_splits",
           "Split", "QuorumlogDataSource", "QuorumlogPythonSource", "spark_schema", "COLUMNS", "crc32c_many",
           "to_arrow", "JAR_NAME", "JVM_SOURCE", "PY_SOURCE_NAME", "PY_SOURCE_ALIAS", "DEFAULT_SPLIT_BYTES",
           "MIN_SPLIT_BYTES", "BATCH_MAX_RECORDS", "BATCH_MAX_BYTES"]


def __getattr__(name):
    # pyspark is an optional extra: import the DataSource class only when it is asked for.
    if name in ("QuorumlogDataSource", "QuorumlogPythonSource"):
        from . import datasource

        return getattr(datasource, name)
    raise AttributeError(name)
