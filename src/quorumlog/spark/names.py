"""The names the Spark sources are registered under (shared by the session helpers and the
Python data source, so neither imports the other for them)."""

JVM_SOURCE = "io.quorumlog.spark.QuorumlogSource"
PY_SOURCE_NAME = "quorumlog"         # the JVM source's short name too, when the jar is there
PY_SOURCE_ALIAS = "quorumlog-python"  # always the Python reader
