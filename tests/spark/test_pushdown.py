"""The JVM reader answering from the store's indexes (issue 22): consume queues for topic /
queue / offset / tag filters and for count/min/max aggregates, the key index for keys[0] = k,
the raft index for store_timestamp windows. Every pushed path is checked against the same
query with option pushdown=false (the plain log walk), its EXPLAIN against what was pushed,
and -- with a corrupt record it must not touch -- that it really reads only what the index
names. Stores whose indexes lag the log (dispatched position, key-index end) must still
return every committed message."""
from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import time

import pytest

import _spark_stores as st
from quorumlog import format as fmt

TOPICS = ("alpha", "beta", "gamma")
QUEUES = 4
N_BATCHES = 40
BATCH = 60


def _jar_or_skip(spark):
    from quorumlog.spark.session import jvm_reader_available

    if not jvm_reader_available(spark):
        pytest.skip("the JVM reader (javac at install time) is needed")


@pytest.fixture(scope="module")
def index_store(tmp_path_factory):
    """Written by MessageStore.put_batch: 3 topics x 4 queues, 2400 messages of 50-300 B in
    64 KiB segments (so many segments), tags tag0..tag5 (every 7th message none), one key per
    message (k0..k99), each batch stamped at a later millisecond than the one before; the
    key index brought up to date (a lookup) before the store is closed."""
    if not st.have_message_store():
        pytest.skip("the native engine is needed to write consume queues")
    import quorumlog

    path = str(tmp_path_factory.mktemp("spark-idx") / "store")
    with quorumlog.open(path, segment_size_bytes=65536, index_file_entries=1024) as ms:
        for t in TOPICS:
            ms.create_topic(t, QUEUES)
        last_ms = 0
        for b in range(N_BATCHES):
            deadline = time.monotonic() + 5
            while time.time_ns() // 1_000_000 <= last_ms:      # the next millisecond
                assert time.monotonic() < deadline
            s0 = b * BATCH
            bodies = [bytes([s % 251]) * (50 + (s * 37) % 250) for s in range(s0, s0 + BATCH)]
            res = ms.put_batch(TOPICS[b % 3], bodies,
                               tags=[None if s % 7 == 0 else f"tag{s % 6}"
                                     for s in range(s0, s0 + BATCH)],
                               keys=[(f"k{s % 100}",) for s in range(s0, s0 + BATCH)])
            last_ms = res.store_timestamp_ms
        # the key index is built behind dispatch, on the store's timer or at a lookup
        assert ms.find_by_key("alpha", "k0", 1)
    assert os.listdir(os.path.join(path, "keyindex"))
    return path


def _stamps(path):
    """Distinct store timestamps (ms) of the committed messages, ascending."""
    return sorted({r[7] // 1000 for r in st.expected_messages(path)})


def _queries(F, path):
    ts = _stamps(path)
    lo, hi = ts[len(ts) // 3], ts[len(ts) // 3 + 3]
    tsc = F.col("store_timestamp")
    return {
        "topic": (F.col("topic") == "beta", "ReadVia: consume queues"),
        "queue": ((F.col("topic") == "alpha") & F.col("queue_id").isin(1, 3),
                  "ReadVia: consume queues"),
        "offsets": ((F.col("topic") == "gamma") & (F.col("queue_id") == 2)
                    & (F.col("queue_offset") >= 10) & (F.col("queue_offset") < 40),
                    "ReadVia: consume queues"),
        "offset IN": (F.col("queue_offset").isin(3, 17), "ReadVia: consume queues"),
        "tag": (F.col("tags") == "tag4", "ReadVia: consume queues"),
        "tag IN + topic": (F.col("tags").isin("tag1", "tag2") & (F.col("topic") == "alpha"),
                           "ReadVia: consume queues"),
        "time window": ((tsc >= F.timestamp_millis(F.lit(lo)))
                        & (tsc < F.timestamp_millis(F.lit(hi))),
                        "ReadVia: log walk cut to the store_timestamp range"),
        "key": (F.get("keys", 0) == "k42", "ReadVia: key index"),
        "key + topic": ((F.get("keys", 0) == "k7") & (F.col("topic") == "gamma"),
                        "ReadVia: key index"),
        "time + topic": ((tsc >= F.timestamp_millis(F.lit(lo))) & (F.col("topic") == "beta"),
                         "ReadVia: consume queues"),
    }


def _explain(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def _walk(spark, path):
    return spark.read.format("quorumlog").option("pushdown", "false").load(path)


def _pushed(spark, path):
    return spark.read.format("quorumlog").load(path)


def test_index_reads_equal_the_log_walk_and_explain_says_how(spark, index_store):
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    for name, (cond, via) in _queries(F, index_store).items():
        pushed = _pushed(spark, index_store).where(cond)
        want = st.canon_rows(_walk(spark, index_store).where(cond))
        assert want, name                      # every query selects something
        assert st.canon_rows(pushed) == want, name
        plan = _explain(pushed)
        assert via in plan, (name, plan)
        assert "ReadVia: log walk" in _explain(_walk(spark, index_store).where(cond)), name
    n = len(st.expected_messages(index_store))
    key = [r for r in st.expected_messages(index_store) if r[9] == ("k42",)]
    assert len(key) == n // 100                # the key query found every message of k42


def _agg_queries(F):
    return {
        "per queue": lambda df: df.groupBy("topic", "queue_id").agg(
            F.count(F.lit(1)), F.min("queue_offset"), F.max("queue_offset"),
            F.min("store_timestamp"), F.max("store_timestamp")),
        "per topic": lambda df: df.groupBy("topic").agg(
            F.count("body"), F.max("raft_index"), F.min("position"), F.min("term")),
        "global": lambda df: df.agg(F.count(F.lit(1)), F.min("store_timestamp"),
                                    F.max("queue_offset")),
        "count()": lambda df: df.groupBy().count(),
    }


def test_aggregates_from_consume_queues_equal_spark_aggregating_rows(spark, index_store):
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    for name, q in _agg_queries(F).items():
        pushed = q(_pushed(spark, index_store))
        want = sorted(map(tuple, q(_walk(spark, index_store)).collect()))
        assert sorted(map(tuple, pushed.collect())) == want, name
        plan = _explain(pushed)
        assert "PushedAggregation: [" in plan and "from consume queues" in plan, (name, plan)
    plan = _explain(_agg_queries(F)["per queue"](_pushed(spark, index_store)))
    assert ("PushedAggregation: [COUNT(*), MIN(queue_offset), MAX(queue_offset), "
            "MIN(store_timestamp), MAX(store_timestamp)] PushedGroupBy: [topic, queue_id]") \
        in plan, plan
    assert _pushed(spark, index_store).count() == len(st.expected_messages(index_store))
    # filters the reader answers exactly: aggregated from the headers of the records read
    for cond in (F.col("tags") == "tag3", (F.col("topic") == "beta") & (F.col("queue_id") > 1),
                 F.col("store_timestamp") < F.timestamp_millis(F.lit(_stamps(index_store)[9]))):
        q = lambda df: df.where(cond).groupBy("topic").agg(  # noqa: E731
            F.count(F.lit(1)), F.min("queue_offset"), F.max("born_timestamp"))
        plan = _explain(q(_pushed(spark, index_store)))
        assert "PushedAggregation: [COUNT(*), MIN(queue_offset), MAX(born_timestamp)] " \
               "PushedGroupBy: [topic] from record headers" in plan, plan
        assert sorted(map(tuple, q(_pushed(spark, index_store)).collect())) == \
            sorted(map(tuple, q(_walk(spark, index_store)).collect()))
    # the first key the reader compares itself: pushed too
    keyed = _pushed(spark, index_store).where(F.get("keys", 0) == "k3").groupBy().count()
    assert "PushedAggregation: [COUNT(*)]" in _explain(keyed)
    assert keyed.collect()[0][0] == len(st.expected_messages(index_store)) // 100
    # a filter it does not answer: Spark aggregates rows
    other = _pushed(spark, index_store).where(F.crc32("body") > 0).groupBy().count()
    assert "PushedAggregation" not in _explain(other)
    assert other.collect()[0][0] == _walk(spark, index_store).where(
        F.crc32("body") > 0).count()


def _copy(src, tmp_path, name):
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


def _record_of(path, pick):
    for r in st.all_records(path):
        if r.type == fmt.TYPE_MESSAGE and pick(r):
            return r
    raise AssertionError("no such record")


def _corrupt_body(path, rec):
    S = 65536
    pos = rec.position + rec.size - 1          # last body byte: the CRC no longer matches
    seg = os.path.join(path, "commitlog", fmt.segment_name(pos - pos % S))
    with open(seg, "r+b") as f:
        f.seek(pos % S)
        b = f.read(1)
        f.seek(pos % S)
        f.write(bytes([(b[0] + 1) % 256]))


def test_index_reads_touch_only_the_records_the_index_names(spark, index_store, tmp_path):
    """A corrupt record fails any read that reaches it (the log walk shows it): the index
    reads that do not select it still succeed, so they never read it."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    queries = _queries(F, index_store)
    before = {name: st.canon_rows(_walk(spark, index_store).where(cond))
              for name, (cond, _) in queries.items()}
    agg = _agg_queries(F)["per queue"]
    agg_before = sorted(map(tuple, agg(_walk(spark, index_store)).collect()))
    path = _copy(index_store, tmp_path, "corrupt")
    # a message of alpha/0 (not its first), tag0, no key a query asks for: no query selects
    # it; written in the first batch, so stamped before the time window
    victim = _record_of(path, lambda r: r.topic == "alpha" and r.queue_id == 0
                        and r.queue_offset >= 1 and r.tags == "tag0"
                        and r.keys[0] not in ("k42", "k7"))
    assert victim.index <= BATCH
    _corrupt_body(path, victim)
    with pytest.raises(Exception, match="CRC32C mismatch"):
        _walk(spark, path).where(F.col("topic") == "beta").count()
    for name in ("topic", "offsets", "tag", "time window", "key", "key + topic"):
        cond = queries[name][0]
        assert st.canon_rows(_pushed(spark, path).where(cond)) == before[name], name
    assert sorted(map(tuple, agg(_pushed(spark, path)).collect())) == agg_before


def _rewrite_checkpoint(path, **fields):
    with open(os.path.join(path, "checkpoint"), "rb") as f:
        cp = fmt.decode_checkpoint(f.read())
    cp = dataclasses.replace(cp, **fields)
    with open(os.path.join(path, "checkpoint"), "wb") as f:
        f.write(fmt.encode_checkpoint(cp))


def _cut_key_index(path, end):
    """Makes every key-index file claim to cover only positions before `end`."""
    d = os.path.join(path, "keyindex")
    for name in os.listdir(d):
        with open(os.path.join(d, name), "r+b") as f:
            head = bytearray(f.read(64))
            begin = struct.unpack_from("<q", head, 24)[0]
            struct.pack_into("<q", head, 32, max(begin, min(end, struct.unpack_from(
                "<q", head, 32)[0])))
            struct.pack_into("<I", head, 60, fmt.crc32c(bytes(head[:60])))
            f.seek(0)
            f.write(head)


def test_indexes_behind_the_log_are_completed_from_the_log(spark, index_store, tmp_path):
    """Consume queues durable only to a dispatched position in the middle of the log, and a
    key index ending there too: the records after it come from the log walk, none twice, and
    aggregates are not answered from the incomplete queues."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    path = _copy(index_store, tmp_path, "lagging")
    msgs = st.expected_messages(index_store)
    middle = msgs[len(msgs) // 2][5]
    _rewrite_checkpoint(path, dispatched_position=middle)
    _cut_key_index(path, middle)
    queries = _queries(F, path)
    for name in ("topic", "offsets", "tag", "time window", "key"):
        cond, via = queries[name]
        pushed = _pushed(spark, path).where(cond)
        assert st.canon_rows(pushed) == st.canon_rows(_walk(spark, index_store).where(cond)), name
        assert via in _explain(pushed), name
    agg = _agg_queries(F)["per queue"]
    pushed = agg(_pushed(spark, path))
    plan = _explain(pushed)
    assert "from record headers" in plan and "from consume queues" not in plan, plan
    assert sorted(map(tuple, pushed.collect())) == sorted(map(tuple, agg(
        _walk(spark, index_store)).collect()))


def _sizes(F):
    """count + sum(length(body)) + sum(crc32(body)) would read bodies: the size aggregate
    alone is what BodyLengthRule turns into SUM(_body_length)."""
    return [F.count(F.lit(1)), F.sum(F.length("body"))]


def _size_and_crc(F, df):
    return tuple(df.agg(F.count(F.lit(1)), F.sum(F.length("body")),
                        F.sum(F.crc32("body"))).collect()[0])


def test_body_lengths_are_pushed_and_equal_spark_measuring_the_bodies(spark, index_store):
    """sum(length(body)) over every indexed read (and the full scan) is answered by the scan
    from record headers, as one row (complete push-down: no Spark aggregate, no shuffle);
    count and sum equal Spark measuring the bodies of the plain walk, whose count and CRC-32
    sum of the same selection also agree."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    queries = dict(_queries(F, index_store), **{"all": (None, "")})
    for name, (cond, _) in queries.items():
        exact = name != "offset IN"     # queue_offset IN (3, 17): read as [3, 17], Spark filters
        sel = lambda df: df if cond is None else df.where(cond)  # noqa: E731
        pushed = sel(_pushed(spark, index_store)).agg(*_sizes(F))
        want = _size_and_crc(F, sel(_walk(spark, index_store)))
        assert want[0] > 0, name
        assert tuple(pushed.collect()[0]) == want[:2], name
        plan = _explain(pushed)
        assert "_body_length" in plan, (name, plan)
        if exact:
            assert ("PushedAggregation: [COUNT(*), SUM(_body_length)] PushedGroupBy: [] "
                    "from record headers, complete") in plan, (name, plan)
            assert "Exchange" not in plan and "HashAggregate" not in plan, (name, plan)
        assert _size_and_crc(F, sel(_pushed(spark, index_store))) == want, name
        walk_plan = _explain(sel(_walk(spark, index_store)).agg(*_sizes(F)))
        assert "_body_length" not in walk_plan and "length(body" in walk_plan, walk_plan


def test_first_key_is_compared_by_the_reader(spark, engine_store):
    """get(keys, 0) = k is answered by the reader (not Spark): a record whose SECOND key is
    k, or that has no key, is not returned; rows and counts equal the walk's (Spark
    evaluating the predicate)."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    msgs = st.expected_messages(engine_store)
    two = [r for r in msgs if len(r[9]) == 2]
    assert two and any(len(r[9]) == 0 for r in msgs)
    for k in (two[0][9][0], two[0][9][1], "no-such-key"):
        cond = F.get("keys", 0) == k
        pushed = _pushed(spark, engine_store).where(cond)
        plan = _explain(pushed)
        assert f"keys[0] = {k}" in plan and "Filter" not in plan.split("BatchScan")[0], plan
        assert st.canon_rows(pushed) == st.canon_rows(_walk(spark, engine_store).where(cond))
        assert pushed.count() == sum(1 for r in msgs if r[9][:1] == (k,))


def test_length_of_body_elsewhere_reads_the_header_and_changes_no_column(spark, index_store):
    """length(body) in a projection, a filter and a grouped sum reads the hidden header
    column; the rows equal the walk's (Spark measuring bodies) and select * has no extra
    column."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    shapes = {
        "select": lambda df: df.select("queue_offset", F.length("body").alias("n")),
        "filter": lambda df: df.where(F.length("body") > 200).select("position", "body"),
        "grouped": lambda df: df.groupBy("topic").agg(F.sum(F.length("body")),
                                                      F.max(F.length("body"))),
        "filter *": lambda df: df.where(F.length("body") < 100),
    }
    for name, q in shapes.items():
        pushed = q(_pushed(spark, index_store))
        assert "_body_length" in _explain(pushed), name
        assert "_body_length" not in pushed.columns, name
        assert sorted(map(tuple, pushed.collect())) == sorted(
            map(tuple, q(_walk(spark, index_store)).collect())), name
    assert _pushed(spark, index_store).columns == _walk(spark, index_store).columns


def test_per_queue_metadata_is_complete_from_queue_ends(spark, index_store, tmp_path):
    """groupBy(topic, queue_id) from the consume queues is the answer itself (no Spark
    aggregate); the queue ends are found by binary search, also when the queues hold
    entries past a dispatched position the checkpoint still covers (limit inside a queue)."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    q = _agg_queries(F)["per queue"]
    pushed = q(_pushed(spark, index_store))
    plan = _explain(pushed)
    assert "from consume queues, complete" in plan and "Exchange" not in plan, plan
    # answered on the driver while planning (QueueAnswerStrategy): collected without a job
    assert plan.startswith("DriverAnswer"), plan
    want = sorted(map(tuple, q(_walk(spark, index_store)).collect()))
    sc = spark.sparkContext
    sc.setJobGroup("queue-answer", "per-queue metadata from the queue ends")
    try:
        got = sorted(map(tuple, q(_pushed(spark, index_store)).collect()))
        assert list(sc.statusTracker().getJobIdsForGroup("queue-answer")) == []
        q(_walk(spark, index_store)).collect()        # the check itself can see a job
        assert list(sc.statusTracker().getJobIdsForGroup("queue-answer"))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert got == want
    by_topic = lambda df: df.where(F.col("topic") == "beta").groupBy(  # noqa: E731
        "queue_id", "topic").agg(F.count(F.lit(1)), F.max("queue_offset"), F.min("position"))
    got = by_topic(_pushed(spark, index_store))
    assert "from consume queues, complete" in _explain(got)
    assert sorted(map(tuple, got.collect())) == sorted(
        map(tuple, by_topic(_walk(spark, index_store)).collect()))


def test_consume_queue_reads_report_partitioning_by_topic_and_queue(spark, index_store):
    """A read that is all consume-queue entries has one partition per queue and says so
    (SupportsReportPartitioning, KeyGroupedPartitioning by topic and queue_id): an aggregation
    grouped by (topic, queue_id) that Spark cannot push runs without a shuffle, and equals
    the same aggregation over the log walk (which needs the Exchange)."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    per_queue = lambda df: df.groupBy("topic", "queue_id").agg(  # noqa: E731
        F.sum(F.crc32("body")), F.count(F.lit(1)), F.max("position"))
    for cond in (F.col("topic") == "beta", F.col("tags") == "tag4",
                 (F.col("topic") == "gamma") & (F.col("queue_offset") >= 10)):
        got = per_queue(_pushed(spark, index_store).where(cond))
        plan = _explain(got)
        assert "PartitionedBy: [topic, queue_id]" in plan and "Exchange" not in plan, plan
        assert "PushedAggregation" not in plan, plan     # Spark aggregates the rows itself
        walk = per_queue(_walk(spark, index_store).where(cond))
        assert "Exchange" in _explain(walk)
        want = sorted(map(tuple, walk.collect()))
        assert want and sorted(map(tuple, got.collect())) == want
    # the log walk has a partition per split, each holding every queue: no claim
    whole = per_queue(_pushed(spark, index_store))
    assert "PartitionedBy" not in _explain(whole) and "Exchange" in _explain(whole)
    assert sorted(map(tuple, whole.collect())) == sorted(
        map(tuple, per_queue(_walk(spark, index_store)).collect()))


def test_consume_queue_reads_in_slices_of_the_log_equal_the_log_walk(spark, index_store,
                                                                      tmp_path):
    """Consume-queue reads cut into slices of the log by position (splitBytes small: several
    slices, each queue's entries split between them, the first of a slice found by binary
    search): aggregates and the rows of two stores (no partitioning by queue) equal the log
    walk's, every record once."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    other = _copy(index_store, tmp_path, "other")
    sliced = lambda *ps: spark.read.format("quorumlog").option(  # noqa: E731
        "splitBytes", "8192").load(list(ps))
    walk = lambda *ps: spark.read.format("quorumlog").option(  # noqa: E731
        "pushdown", "false").load(list(ps))
    agg = [F.count(F.lit(1)), F.sum(F.length("body")), F.min("position"), F.max("position")]
    for cond in (F.col("tags") == "tag3", F.col("topic") == "beta",
                 (F.col("topic") == "gamma") & (F.col("queue_offset") >= 30)):
        got = sliced(index_store).where(cond).agg(*agg)
        assert "from record headers, complete" in _explain(got)
        assert got.collect() == walk(index_store).where(cond).agg(*agg).collect()
        rows = sliced(index_store, other).where(cond)
        plan = _explain(rows)
        assert "ReadVia: consume queues" in plan and "PartitionedBy" not in plan, plan
        want = st.canon_rows(walk(index_store, other).where(cond))
        assert want and st.canon_rows(rows) == want


def test_selective_complete_aggregates_are_answered_on_the_driver_without_a_job(spark,
                                                                               index_store):
    """count / sum(length(body)) / min / max over what an index selects (key index, consume
    queues, a time-cut walk) and over the whole log (a full walk) is computed on the driver
    when the query runs, in local mode (QueueAnswerStrategy: a DriverAnswer, no Spark job)
    and equals the log walk's answer; a full walk that skips corrupt records stays a Spark
    job (its skipped-record count is a task metric)."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    agg = [F.count(F.lit(1)), F.sum(F.length("body")), F.min("queue_offset"),
           F.max("store_timestamp")]
    sc = spark.sparkContext
    queries = dict(_queries(F, index_store), **{"all": (None, "")})
    for name, (cond, via) in queries.items():
        sel = lambda df, c=cond: df if c is None else df.where(c)  # noqa: E731
        pushed = sel(_pushed(spark, index_store)).agg(*agg)
        plan = _explain(pushed)
        want = sel(_walk(spark, index_store)).agg(*agg).collect()
        if name == "offset IN":     # not exact (narrowed to a range): Spark aggregates
            assert "PushedAggregation" not in plan and not plan.startswith("DriverAnswer")
            assert pushed.collect() == want
            continue
        assert plan.startswith("DriverAnswer") and "complete" in plan, (name, plan)
        sc.setJobGroup("driver-answer", name)
        try:
            got = sel(_pushed(spark, index_store)).agg(*agg).collect()
            assert list(sc.statusTracker().getJobIdsForGroup("driver-answer")) == [], name
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        assert got == want and want[0][0] > 0, name
    skipping = spark.read.format("quorumlog").option("onCorrupt", "skip").load(index_store)
    plan = _explain(skipping.agg(*agg))
    assert not plan.startswith("DriverAnswer") and "complete" in plan, plan
    assert skipping.agg(*agg).collect() == _walk(spark, index_store).agg(*agg).collect()


def test_a_store_replaced_at_the_same_path_is_read_anew(spark, index_store, tmp_path):
    """Local consume queues and segments are read through memory maps the JVM keeps per
    file (PositionedFile.sharedMap): a store deleted and written again at the same path, its
    files of the same lengths, is read from the new files (each path's file key checked at
    every open), not from the maps of the old ones."""
    _jar_or_skip(spark)
    import quorumlog
    from pyspark.sql import functions as F

    path = _copy(index_store, tmp_path, "swap")
    cond = F.col("tags") == "tag4"
    first = st.canon_rows(_pushed(spark, path).where(cond))
    assert first == st.canon_rows(_walk(spark, index_store).where(cond))
    shutil.rmtree(path)
    with quorumlog.open(path, segment_size_bytes=65536, index_file_entries=1024) as ms:
        for t in TOPICS:
            ms.create_topic(t, QUEUES)
        for b in range(12):
            ms.put_batch(TOPICS[b % 3], [bytes([b]) * (40 + b) for _ in range(BATCH)],
                         tags=["tag4"] * BATCH)
    again = st.canon_rows(_pushed(spark, path).where(cond))
    assert again == st.canon_rows(_walk(spark, path).where(cond))
    assert len(again) == 12 * BATCH and again != first
    agg = _agg_queries(F)["per queue"]
    assert sorted(map(tuple, agg(_pushed(spark, path)).collect())) == sorted(
        map(tuple, agg(_walk(spark, path)).collect()))


def _files_opened(spark) -> int:
    return spark.sparkContext._jvm.io.quorumlog.spark.QuorumlogSpark.filesOpened()


def test_own_time_counts_the_readers_reads(spark, index_store):
    """QuorumlogSpark.ownNanos (what bench/spark_query_phases.py subtracts to tell the
    reader's share of a query from Spark's) grows by the reads of a driver answer and of a
    job's aggregate, and by no more than the query's wall time."""
    _jar_or_skip(spark)
    import time

    from pyspark.sql import functions as F

    own = spark.sparkContext._jvm.io.quorumlog.spark.QuorumlogSpark.ownNanos
    agg = [F.count(F.lit(1)), F.sum(F.length("body"))]
    skipping = spark.read.format("quorumlog").option("onCorrupt", "skip")
    for name, q in (("driver answer", lambda: _pushed(spark, index_store).agg(*agg)),
                    ("job", lambda: skipping.load(index_store).agg(*agg))):
        before = own()
        t0 = time.perf_counter_ns()
        assert q().collect()[0][0] > 0
        took = time.perf_counter_ns() - t0
        assert 0 < own() - before <= took, name


def test_explain_of_a_driver_answer_reads_nothing(spark, index_store):
    """explain() / EXPLAIN of a query the driver answers (DriverAnswerExec) plans it and
    names what was pushed down without reading a store file (the reader's count of files
    opened is unchanged); collecting the same DataFrame then reads, and equals the log walk."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    agg = [F.count(F.lit(1)), F.sum(F.length("body")), F.min("queue_offset")]
    qs = {name: (lambda df, c=cond: df.where(c).agg(*agg))
          for name, (cond, _) in _queries(F, index_store).items() if name != "offset IN"}
    qs["per queue"] = _agg_queries(F)["per queue"]
    for name, q in qs.items():
        pushed = q(_pushed(spark, index_store))
        before = _files_opened(spark)
        plan = _explain(pushed)
        text = pushed._jdf.queryExecution().explainString(
            spark.sparkContext._jvm.org.apache.spark.sql.execution.ExplainMode.fromString(
                "formatted"))
        assert _files_opened(spark) == before, (name, plan)
        assert plan.startswith("DriverAnswer") and "PushedAggregation" in plan, (name, plan)
        assert "complete" in plan and "PushedAggregation" in text, (name, text)
        got = sorted(map(tuple, pushed.collect()))
        assert _files_opened(spark) > before, name          # the reads happen at collect
        assert got == sorted(map(tuple, q(_walk(spark, index_store)).collect())), name
    # the same through SQL's EXPLAIN of a view over the store
    _pushed(spark, index_store).createOrReplaceTempView("qlog_explain")
    before = _files_opened(spark)
    rows = spark.sql("EXPLAIN SELECT topic, queue_id, count(*), max(queue_offset) "
                     "FROM qlog_explain GROUP BY topic, queue_id").collect()
    assert _files_opened(spark) == before
    assert "from consume queues, complete" in rows[0][0], rows[0][0]


def test_driver_answers_through_any_projection_equal_the_log_walk(spark, index_store):
    """A driver answer's rows go through the Project Spark puts over the scan: copied by
    ordinal into UnsafeRows when it only names or renames columns (string, int, bigint,
    timestamp: every aggregate this source answers), through Spark's projection when it
    computes something (arithmetic, casts, literals). Both equal the log walk's rows."""
    _jar_or_skip(spark)
    from pyspark.sql import functions as F

    queries = {
        "renamed (copied)": lambda df: df.groupBy("queue_id", "topic").agg(
            F.max("store_timestamp").alias("last"), F.count(F.lit(1)).alias("n"),
            F.min("queue_offset")),
        "computed (projected)": lambda df: df.groupBy("topic", "queue_id").agg(
            (F.max("queue_offset") - F.min("queue_offset") + 1).alias("span"),
            F.count(F.lit(1)).cast("string"), F.lit("x")),
        "selective, renamed": lambda df: df.where(F.col("tags") == "tag4").agg(
            F.sum(F.length("body")).alias("bytes"), F.count(F.lit(1)).alias("n")),
        "selective, computed": lambda df: df.where(F.col("tags") == "tag4").agg(
            (F.sum(F.length("body")) * 2).alias("twice"), F.max("queue_id").cast("long")),
    }
    for name, q in queries.items():
        pushed = q(_pushed(spark, index_store))
        assert _explain(pushed).startswith("DriverAnswer"), (name, _explain(pushed))
        want = sorted(map(tuple, q(_walk(spark, index_store)).collect()))
        assert want and sorted(map(tuple, pushed.collect())) == want, name
