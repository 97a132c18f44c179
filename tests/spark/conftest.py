"""Fixtures of the Spark reader tests: ONE Spark session for the whole run (the jar must be
on spark.jars before the first getOrCreate in the process; start-up costs 4-14 s here), and
engine-written stores shared read-only between tests."""
from __future__ import annotations

import os
import pytest

import _spark_stores as st

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark(spark_jar):
    pytest.importorskip("pyspark", reason="pyspark is the optional [spark] extra")
    from quorumlog import spark as qs

    s = qs.session("quorumlog-tests", master="local[2]",
                   conf={"spark.sql.shuffle.partitions": "2",
                         "spark.driver.memory": "1g"})
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def engine_store(tmp_path_factory):
    """Written by the engine's MessageStore (put) when it is built, else through the commit
    log: several segments with BLANK tails, 3 topics, bodies 0 B .. 1 MiB, tags, keys,
    properties."""
    path = str(tmp_path_factory.mktemp("spark-store") / "store")
    plan = st.message_plan()
    if st.have_message_store():
        st.write_message_store(path, plan)
    else:
        st.write_store(path, plan)
    return path


@pytest.fixture(scope="session")
def log_store(tmp_path_factory):
    """Written through the commit log (native CommitLog when built): messages and
    NOOP/CONFIG/META records, several raft index files; all committed but the last 4."""
    path = str(tmp_path_factory.mktemp("spark-log") / "store")
    plan = st.message_plan(seed=11, n=300)
    st.write_store(path, plan, commit_upto=len(plan) - 4)  # one raft index per plan entry
    return path


@pytest.fixture(scope="session")
def ts_store(tmp_path_factory):
    """Written by the reference writer, whose caller gives every store timestamp: record i
    (controls included) is stamped TS0 + i ms, so timestamp ranges select known records."""
    path = str(tmp_path_factory.mktemp("spark-ts") / "store")
    st.write_store(path, st.message_plan(seed=5, n=400), engine="reference")
    return path


@pytest.fixture(scope="session")
def torn_store(tmp_path_factory):
    """Committed prefix, then appended-but-uncommitted records whose last one is torn."""
    path = str(tmp_path_factory.mktemp("spark-torn") / "store")
    plan = st.message_plan(seed=3, n=60)
    st.write_store(path, plan, commit_upto=50)
    committed = st.expected_messages(path, committed_only=True)
    intact = st.expected_messages(path, committed_only=False)[:-1]
    assert len(committed) == sum(k == "message" for k, _ in plan[:50])
    assert len(intact) == sum(k == "message" for k, _ in plan) - 1
    tail = st.all_records(path)[-1]
    # A torn write: the last record's final bytes never reached the disk.
    st.corrupt_byte(path, tail.position + tail.size - 1, delta=17)
    return path, committed, intact



@pytest.fixture(scope="session", autouse=True)
def spark_jar():
    """Make sure quorumlog-spark.jar is built and current BEFORE any JVM starts (the jar must
    be on spark.jars at the first getOrCreate). A fresh `pip install -e .[spark]` builds the
    package before pyspark is installed, so the install alone cannot always compile it; here
    a compile error raises (JarBuildError) and fails the tests instead of skipping them.
    Returns the jar's path, or None without javac/pyspark."""
    import pathlib
    import sys

    import quorumlog

    root = pathlib.Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "spark"))
    import build_jar

    return build_jar.ensure_jar(pathlib.Path(quorumlog.__file__).resolve().parent)
