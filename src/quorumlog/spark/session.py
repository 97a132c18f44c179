"""Spark sessions that can read stores: the jar on spark.jars, the Python data source
registered, and the check whether the session's JVM has the jar's reader."""
from __future__ import annotations

import logging
import os
import pathlib
import sys
import weakref

from .names import JVM_SOURCE, PY_SOURCE_ALIAS, PY_SOURCE_NAME

log = logging.getLogger(__name__)

JAR_NAME = "quorumlog-spark.jar"
PYTHON_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
JVM_READER_VERSION = "4"             # QuorumlogSpark.VERSION: a stale jar is noticed
# length(body) read from the record headers (BodyLengthRule), so sum(length(body)) is pushed
EXTENSIONS = "io.quorumlog.spark.QuorumlogExtensions"


def jar_path() -> pathlib.Path | None:
    """The jar shipped inside the package (built at install time), or None."""
    p = pathlib.Path(__file__).resolve().parent.parent / JAR_NAME
    return p if p.is_file() else None


def session(app_name: str = "quorumlog", *, master: str = "local[*]", conf: dict | None = None,
            jar: bool = True):
    """A SparkSession with the quorumlog jar on spark.jars (and its optimizer rule on
    spark.sql.extensions) and the Python source registered.

    The jar must be on the classpath when the JVM starts: if a session already exists in this
    process it is returned as is (Spark reuses it), with a warning when it lacks the jar."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (the fallback reader) must run this interpreter: it has quorumlog.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.appName(app_name).master(master)
               .config("spark.ui.showConsoleProgress", "false"))
    j = jar_path() if jar else None
    if j is not None:
        builder = (builder.config("spark.jars", str(j))
                   .config("spark.sql.extensions", EXTENSIONS))
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if j is not None and not jvm_reader_available(spark):
        log.warning("quorumlog: the active Spark session was started without %s; "
                    "read_store will use the Python data source", j)
    register(spark)
    return spark


def register(spark) -> None:
    """Makes spark.read.format("quorumlog") work in this session: the JVM source registers
    that name itself (META-INF/services in the jar); without the jar the Python data source
    takes it. The Python source is also "quorumlog-python" in every session."""
    from .datasource import QuorumlogDataSource, QuorumlogPythonSource

    spark.dataSource.register(QuorumlogPythonSource)
    if not jvm_reader_available(spark):
        spark.dataSource.register(QuorumlogDataSource)


# SparkContext -> the py4j method QuorumlogSpark.readStoresJson (None: the jar is not on the
# classpath). A JVM's classpath is fixed when it starts, and resolving a class and a method by
# name costs a py4j round trip per dotted part (each a failed Class.forName over every jar
# for the package parts), so they are looked up once per context, not per read_store.
_entries: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def jvm_entry(spark):
    """The session JVM's QuorumlogSpark.readStoresJson (a py4j member), or None when the jar
    is not on its classpath or is another version."""
    sc = spark.sparkContext
    if sc not in _entries:
        try:
            cls = sc._jvm.io.quorumlog.spark.QuorumlogSpark
            entry = cls.readStoresJson if str(cls.version()) == JVM_READER_VERSION else None
        except Exception:  # py4j raises its own errors for a class that is not there
            entry = None
        _entries[sc] = entry
    return _entries[sc]


def jvm_reader_available(spark) -> bool:
    """True when the session's JVM has the jar's reader (and it is this version)."""
    return jvm_entry(spark) is not None


def python_pushdown_safe(spark) -> bool:
    """Whether the Python data source may take pushed filters in this session.

    Spark 4.1-4.3 keep the read plan of a Python data source on the relation
    (PythonDataSourceV2.setReadInfo), so once a filtered query pushed its filters, every
    other query of the same DataFrame reuses that filtered reader and gets too few rows
    (tests/spark: test_python_reader_pushdown_never_leaks_into_other_queries). There the
    Python reader filters only by its own options; newer Spark keeps the plan per scan."""
    try:
        jvm = spark.sparkContext._jvm
        cls = jvm.java.lang.Class.forName(
            "org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2")
        return not any(m.getName() == "setReadInfo" for m in cls.getMethods())
    except Exception:  # py4j errors: an unknown Spark layout is not known to be safe
        return False
