"""End-to-end: read_store on engine-written stores, through the JVM reader (jar) and the
Python data source fallback, against the reference decoder (and MessageStore.get when the
store layer is built). Few tests on purpose: they share one Spark session."""
from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

import _spark_stores as st
from quorumlog import format as fmt
from quorumlog import spark as qs

pytestmark = pytest.mark.spark
ENGINES = ["jvm", "python"]


def _jvm_ok(spark):
    assert qs._jvm_reader_available(spark), (
        "the JVM reader is not on the session's classpath (jar not built?)")


def test_read_store_equals_store_for_one_and_many_splits(spark, engine_store):
    _jvm_ok(spark)
    expected = st.expected_messages(engine_store)
    if st.have_message_store():  # what the broker's API returns, message for message
        assert st.message_store_rows(engine_store) == expected
    recs = st.all_records(engine_store)
    assert len({r.position // st.SEGMENT_SIZE for r in recs}) >= 3      # several segments
    assert any(len(r.body) == 1 << 20 for r in recs) and any(len(r.body) == 0 for r in recs)
    assert len({t[0] for t in expected}) == 3
    # 150001-byte splits: boundaries fall inside records (most records are longer than that
    # or straddle a multiple of it).
    split = 150001
    inside = [r for r in recs if (r.position % st.SEGMENT_SIZE) // split
              != ((r.position + r.size - 1) % st.SEGMENT_SIZE) // split]
    assert len(inside) > 20
    results = {}
    for engine in ENGINES:
        for sb in (None, split):
            df = qs.read_store(spark, engine_store, engine=engine, split_bytes=sb)
            if sb == split:
                assert df.rdd.getNumPartitions() > 3 * st.SEGMENT_SIZE // split
            results[engine, sb] = st.canon_rows(df)
            assert results[engine, sb] == expected, (engine, sb)
    # The Java reader and the Python fallback give identical rows.
    assert results["jvm", split] == results["python", split]


def test_uncommitted_tail_and_torn_record_never_returned(spark, torn_store):
    path, committed, intact = torn_store
    for engine in ENGINES:
        assert st.canon_rows(qs.read_store(spark, path, engine=engine, split_bytes=50000)) \
            == committed, engine
        # Reading past the commit point still stops before the torn record.
        assert st.canon_rows(qs.read_store(spark, path, engine=engine,
                                           committed_only=False)) == intact, engine


def test_topic_filter_and_empty_store(spark, engine_store, tmp_path):
    empty = tmp_path / "empty"
    fmt.ReferenceWriter(segment_size_bytes=st.SEGMENT_SIZE).write(empty, written_at_ms=0)
    bare = tmp_path / "bare"       # no checkpoint, no segments yet
    bare.mkdir()
    for engine in ENGINES:
        want = st.expected_messages(engine_store, topics={"payments", "tö_pic"})
        got = st.canon_rows(qs.read_store(spark, engine_store, topics=["payments", "tö_pic"],
                                          engine=engine))
        assert got == want and len(want) > 100, engine
        assert qs.read_store(spark, engine_store, topics=[], engine=engine).count() == 0
        for p in (empty, bare):
            df = qs.read_store(spark, p, engine=engine)
            assert df.count() == 0 and df.columns == list(qs.COLUMNS), (engine, p)


def test_corrupt_middle_record_fails_naming_the_file(spark, engine_store, tmp_path):
    path = str(tmp_path / "corrupt")
    shutil.copytree(engine_store, path)
    msgs = [r for r in st.all_records(path) if r.type == fmt.TYPE_MESSAGE and len(r.body) > 10]
    victim = msgs[len(msgs) // 2]
    seg, off = st.corrupt_byte(path, victim.position + victim.size - 3)
    rec_off = victim.position % st.SEGMENT_SIZE
    expected = [t for t in st.expected_messages(engine_store) if t[5] != victim.position]
    from pyspark.sql import functions as F

    for engine in ENGINES:
        with pytest.raises(Exception) as ei:
            # reads every body (count() alone is answered from the consume queues)
            qs.read_store(spark, path, engine=engine).agg(F.sum(F.length("body"))).collect()
        msg = str(ei.value)
        assert os.path.basename(seg) in msg and f"offset {rec_off}" in msg, (engine, msg[:2000])
        got = st.canon_rows(qs.read_store(spark, path, engine=engine, on_corrupt="skip"))
        assert got == expected, engine
        # skip mode walks every record: a count skips what the rows skip
        assert qs.read_store(spark, path, engine=engine, on_corrupt="skip").count() == \
            len(expected), engine


def test_missing_path_or_not_a_store_fails_at_load_like_parquet(spark, engine_store, tmp_path):
    from pyspark.errors import AnalysisException

    missing = tmp_path / "nope"
    other = tmp_path / "other"          # a directory of something else
    other.mkdir()
    (other / "part-00000.parquet").write_bytes(b"PAR1")
    a_file = tmp_path / "a-file"
    a_file.write_bytes(b"x")
    n = len(st.expected_messages(engine_store))
    for engine in ENGINES:
        # load() itself fails (as spark.read.parquet does), before any action
        with pytest.raises(AnalysisException, match=r"PATH_NOT_FOUND.*Path does not exist: "
                           + re.escape(f"file:{missing}")):
            qs.read_store(spark, missing, engine=engine)
        for p in (other, a_file):
            with pytest.raises(AnalysisException,
                               match="not a quorumlog store: " + re.escape(f"file:{p}")):
                qs.read_store(spark, p, engine=engine)
        # a file: URI is the local path to both readers
        for uri in (f"file://{engine_store}", f"file:{engine_store}"):
            assert qs.read_store(spark, uri, engine=engine).count() == n, (engine, uri)
    # the Python reader opens local files only: another scheme is refused, not read as empty
    with pytest.raises(AnalysisException, match="local paths only"):
        qs.read_store(spark, "hdfs://namenode:8020/data/store", engine="python")


def _multiset(rows):
    return collections.Counter(rows)


def test_format_quorumlog_by_short_name_with_several_paths(spark, engine_store, log_store):
    both = _multiset(st.expected_messages(engine_store) + st.expected_messages(log_store))
    one = _multiset(st.expected_messages(engine_store))
    # "quorumlog" is the JVM source (META-INF/services in the jar) in a session with the jar;
    # "quorumlog-python" is the Python reader in any session.
    for name in ("quorumlog", "quorumlog-python"):
        assert _multiset(st.canon_rows(spark.read.format(name).load(engine_store))) == one, name
        df = spark.read.format(name).load([engine_store, log_store])
        assert _multiset(st.canon_rows(df)) == both, name
    assert "BatchScan quorumlog:" in _explain(spark.read.format("quorumlog").load(engine_store))
    for engine in ENGINES:
        df = qs.read_store(spark, [engine_store, log_store], engine=engine)
        assert _multiset(st.canon_rows(df)) == both, engine


def _explain(df) -> str:
    return df._jdf.queryExecution().explainString(
        df.sparkSession._jvm.org.apache.spark.sql.execution.ExplainMode.fromString("simple"))


def test_format_quorumlog_without_the_jar_is_the_python_reader(engine_store, log_store,
                                                               tmp_path):
    """A session started without the jar (its own process: a JVM's classpath is fixed at
    start) registers the Python source under the short name."""
    script = tmp_path / "nojar.py"
    script.write_text(textwrap.dedent(f"""
        import json
        from quorumlog import spark as qs
        s = qs.session("quorumlog-nojar", master="local[1]", jar=False)
        s.sparkContext.setLogLevel("ERROR")
        assert not qs._jvm_reader_available(s)
        one = s.read.format("quorumlog").load({engine_store!r}).count()
        both = s.read.format("quorumlog").load([{engine_store!r}, {log_store!r}]).count()
        print("COUNTS", json.dumps([one, both]))
        s.stop()
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)   # python and the JVM it started
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    counts = json.loads(out.split("COUNTS", 1)[1])
    n1, n2 = len(st.expected_messages(engine_store)), len(st.expected_messages(log_store))
    assert counts == [n1, n1 + n2]


def _utc(ms):
    import datetime
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


def test_filters_pushed_into_the_jvm_reader_show_in_explain_and_skip_splits(spark, ts_store):
    from pyspark.sql import functions as F

    lo, hi = st.TS0 + 100, st.TS0 + 300
    want = [t for t in st.expected_messages(ts_store)
            if t[0] == "orders" and t[1] in (1, 3) and lo * 1000 <= t[7] < hi * 1000]
    assert len(want) > 5
    for engine in ENGINES:
        df = qs.read_store(spark, ts_store, engine=engine, split_bytes=65536)
        f = (df.filter("topic = 'orders'").filter(F.col("queue_id").isin(1, 3))
             .filter(F.col("store_timestamp") >= F.lit(_utc(lo)))
             .filter(F.col("store_timestamp") < F.lit(_utc(hi))))
        assert st.canon_rows(f) == want, engine
        if engine == "jvm":
            plan = _explain(f)
            assert "PushedFilters: [EqualTo(topic,orders), In(queue_id, [1,3]), " \
                   "GreaterThanOrEqual(store_timestamp," in plan, plan
            assert (f"RecordFilter: [topic IN [orders], queue_id IN [1, 3], "
                    f"store_timestamp_ms >= {lo}, store_timestamp_ms <= {hi - 1}]") in plan, plan
            # splits whose records are all stamped outside [lo, hi) are not even planned
            assert f.rdd.getNumPartitions() < df.rdd.getNumPartitions() // 2
        # the filtered query left the DataFrame itself whole
        assert df.count() == len(st.expected_messages(ts_store)), engine


def test_python_reader_pushdown_never_leaks_into_other_queries(spark, ts_store):
    """Spark 4.1-4.3 keep a Python data source's read plan on the relation: after a filtered
    query pushed its filters, the unfiltered DataFrame reuses that reader. read_store turns
    the Python reader's pushdown on only where python_pushdown_safe says Spark does not; this
    checks that the check matches what Spark does."""
    from quorumlog.spark.session import PYTHON_PUSHDOWN_CONF, python_pushdown_safe

    n = len(st.expected_messages(ts_store))
    k = sum(t[0] == "orders" for t in st.expected_messages(ts_store))
    df = qs.read_store(spark, ts_store, engine="python")
    assert df.filter("topic = 'orders'").count() == k and df.count() == n
    old = spark.conf.get(PYTHON_PUSHDOWN_CONF, None)
    spark.conf.set(PYTHON_PUSHDOWN_CONF, "true")
    try:
        forced = spark.read.format("quorumlog-python").option("pushdown", "true").load(ts_store)
        assert forced.filter("topic = 'orders'").count() == k
        leaked = forced.count() != n
    finally:
        if old is None:
            spark.conf.unset(PYTHON_PUSHDOWN_CONF)
        else:
            spark.conf.set(PYTHON_PUSHDOWN_CONF, old)
    assert leaked == (not python_pushdown_safe(spark))


def test_one_dataframe_reads_one_snapshot_while_a_writer_appends(spark, tmp_path):
    """The committed position is read once, when the DataFrame is created: count() and agg()
    of the same DataFrame agree however much a writer commits between them."""
    if st.CommitLog is None:
        pytest.skip("needs the native CommitLog to append to an existing store")
    from pyspark.sql import functions as F

    more = [p for p in st.message_plan(seed=22, n=40) if p[0] == "message"]
    for engine in ENGINES:
        path = str(tmp_path / f"live-{engine}")
        st.write_store(path, st.message_plan(seed=21, n=80), engine="native")
        df = qs.read_store(spark, path, engine=engine, split_bytes=65536)
        n1 = df.count()
        before = st.expected_messages(path)   # decoded now, before the writer appends
        assert n1 == len(before)
        st.write_store(path, more, engine="native")  # appends and commits, checkpoint written
        cp = qs._read_checkpoint(path)
        assert cp.committed_position > max(t[5] for t in before)
        r = df.agg(F.count(F.lit(1)).alias("n"), F.max("raft_index").alias("last")).collect()[0]
        assert (r["n"], r["last"]) == (n1, max(t[3] for t in before)), engine
        assert len(st.canon_rows(df)) == n1, engine
        # a new DataFrame sees what was committed since
        assert qs.read_store(spark, path, engine=engine).count() == n1 + len(more), engine


def test_java_format_declares_the_header_and_topic_rule_format_py_declares(spark):
    """Format.java is the Java declaration of what quorumlog.format declares in Python: the
    header field offsets and the topic-name rule agree field by field and name by name."""
    from quorumlog.errors import InvalidTopicError

    jfmt = spark.sparkContext._jvm.io.quorumlog.spark.Format
    java_name = {"born_timestamp_ms": "BORN_TS", "store_timestamp_ms": "STORE_TS"}
    fields = [f for f in fmt.HEADER_OFFSETS if f != "reserved"]   # Java never reads it
    got = {f: getattr(jfmt, "OFF_" + java_name.get(f, f.upper())) for f in fields}
    assert got == {f: fmt.HEADER_OFFSETS[f] for f in fields}
    assert jfmt.HEADER_SIZE == fmt.HEADER_SIZE == fmt.HEADER_STRUCT.size
    for name in ("orders", "tö_pic", "", ".", "..", "...", "a/b", "a\0b", "x" * 255,
                 "x" * 256, "é" * 127, "é" * 128):
        try:
            fmt.check_topic_name(name)
            py_ok = True
        except InvalidTopicError:
            py_ok = False
        assert (jfmt.topicProblem(name) is None) == py_ok, name
