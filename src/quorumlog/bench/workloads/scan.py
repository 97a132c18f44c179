"""The `scan` workload: the Spark queries data engineers run on a message log, each through
`quorumlog.spark.read_store` and through `spark.read.parquet` of the same messages, when
pyspark (and a Java runtime) is installed.

The store is written with put_batch: --count messages of --size random bytes, batches dealt
round-robin over TOPICS topics of QUEUES queues each, message s tagged f"tag{s % TAGS}" and
keyed f"k{s % keys}" (about KEY_MESSAGES messages per key). It is copied to Parquet through
read_store (untimed, Spark's defaults, in log order). The queries (QUERIES), each run
WARMUPS times on each reader untimed (alternating; the JVM compiles each query's paths in
its first runs, on both sides alike), then timed alternately on both readers, REPEATS times
each; latency is per query and the comparison is the ratio of the medians of the timed runs
(each reader's untimed first run is reported beside them):

  a  full scan: count(*) + sum(length(body))
  b  one topic of TOPICS: the same aggregate
  c  a store_timestamp window holding about 1 % of the messages: the same aggregate
  d  one queue's offset range (the middle half of t1/2): the same aggregate
  e  metadata only: groupBy(topic, queue_id).agg(count, min/max(queue_offset),
     min/max(store_timestamp)), every row collected
  f  one key's messages (get(keys, 0) = k: Spark 4.3 offers array_contains to no data source, an
     element of the array it does): the same aggregate
  g  one tag of TAGS (tags = t): the same aggregate

Integrity: every timed result must equal the other reader's; once per query (untimed) both
readers' count and sum of CRC-32 of the selected bodies must agree, and for (a) equal the
acknowledged messages (count and the CRC-32 sum computed here from the payload).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import time
import zlib

from ..latency import LatencyRecorder
from ..measure import Result, pid_cpu_seconds, process_cpu_seconds
from ..options import Resolved
from ..payload import Payload
from . import RunContext, Workload, register
from .log import RECORD_OVERHEAD, SEGMENT_BYTES

REPEATS = 3
QUICK_REPEATS = 1
# untimed runs of each query per reader before its timed ones (none with --quick)
WARMUPS = 2
TOPICS = 10
QUEUES = 8
TAGS = 20
KEY_MESSAGES = 100
QUERIES = ("a full scan", "b one topic", "c 1% time window", "d queue offset range",
           "e metadata groupBy", "f one key", "g one tag")


def _spark_missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return ("pyspark is not installed: install the spark extra "
                "(pip install 'quorumlog[spark]') and a Java runtime to run it")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime found (java on PATH or JAVA_HOME): Spark needs one"
    return None


def _jvm_pid(spark) -> int | None:
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    return getattr(proc, "pid", None)


class _CpuMeter:
    """CPU seconds of this process and of Spark's JVM, accumulated over timed sections."""

    def __init__(self, jvm_pid):
        self.jvm_pid = jvm_pid
        self.totals = {"bench": 0.0}
        if jvm_pid is not None:
            self.totals["spark-jvm"] = 0.0

    def __enter__(self):
        self._p0 = process_cpu_seconds()
        self._j0 = pid_cpu_seconds(self.jvm_pid) if self.jvm_pid else None
        return self

    def __exit__(self, *exc):
        self.totals["bench"] += process_cpu_seconds() - self._p0
        if self._j0 is not None:
            j1 = pid_cpu_seconds(self.jvm_pid)
            if j1 is not None:
                self.totals["spark-jvm"] += j1 - self._j0


def topic_name(i: int) -> str:
    return f"t{i}"


def write_store(store, payload: Payload, count: int, batch: int, progress=None) -> dict:
    """Writes the data set; returns what the queries need: the acknowledged count, the sum of
    CRC-32 of every body, and each batch's store timestamp and size (for the time window)."""
    keys = max(1, count // KEY_MESSAGES)
    for t in range(TOPICS):
        store.create_topic(topic_name(t), QUEUES)
    buf = payload.buffer()
    stamps, crc_sum = [], 0
    for b, s0 in enumerate(range(0, count, batch)):
        n = min(batch, count - s0)
        bodies = buf.fill(s0, n)
        res = store.put_batch(topic_name(b % TOPICS), bodies,
                              tags=[f"tag{s % TAGS}" for s in range(s0, s0 + n)],
                              keys=[(f"k{s % keys}",) for s in range(s0, s0 + n)])
        stamps.append((res.store_timestamp_ms, n))
        crc_sum += sum(zlib.crc32(x) for x in bodies)
        if progress is not None:
            progress.add(n)
    # The key index is built behind dispatch (the store's timer, or a lookup): bring it up
    # to date, as a store that has run a while would be.
    store.find_by_key(topic_name(0), "k0", 1)
    return {"count": count, "crc_sum": crc_sum, "stamps": stamps, "keys": keys}


def time_window(stamps, count: int) -> tuple[int, int]:
    """[lo, hi) in ms holding about 1 % of the messages, from the middle of the data set."""
    want_lo, want_hi = count // 2, count // 2 + max(1, count // 100)
    seen, lo, hi = 0, None, None
    for ts, n in stamps:
        if lo is None and seen + n > want_lo:
            lo = ts
        seen += n
        if lo is not None and seen >= want_hi and ts > lo:
            hi = ts
            break
    lo = stamps[0][0] if lo is None else lo
    return lo, (hi if hi is not None else stamps[-1][0] + 1)


def queries(F, data: dict) -> dict:
    """name -> function(DataFrame) -> collected rows (sorted: comparable across readers)."""
    lo, hi = time_window(data["stamps"], data["count"])
    per_queue = data["count"] // (TOPICS * QUEUES)
    o_lo, o_hi = per_queue // 4, per_queue * 3 // 4
    ts = F.col("store_timestamp")
    ms = lambda v: F.timestamp_millis(F.lit(v))  # noqa: E731
    size = [F.count(F.lit(1)).alias("n"), F.sum(F.length("body")).alias("bytes")]
    key = f"k{data['keys'] // 2}"
    sel = {
        "a full scan": None,
        "b one topic": F.col("topic") == topic_name(3),
        "c 1% time window": (ts >= ms(lo)) & (ts < ms(hi)),
        "d queue offset range": ((F.col("topic") == topic_name(1)) & (F.col("queue_id") == 2)
                                 & (F.col("queue_offset") >= o_lo)
                                 & (F.col("queue_offset") < o_hi)),
        "f one key": F.get("keys", 0) == key,
        "g one tag": F.col("tags") == f"tag{TAGS // 2}",
    }
    # Every query's columns are built once, here, and reused by both readers and every
    # repeat: building a column is py4j round trips (3 per function), the same for both
    # readers and no part of either reader's work.
    meta = [F.count(F.lit(1)), F.min("queue_offset"), F.max("queue_offset"),
            F.min("store_timestamp"), F.max("store_timestamp")]
    out = {}
    for name in QUERIES:
        if name.startswith("e "):
            out[name] = lambda df: sorted(tuple(r) for r in df.groupBy("topic", "queue_id")
                                          .agg(*meta).collect())
        else:
            cond = sel[name]
            out[name] = (lambda df, c=cond: [tuple(r) for r in
                                             (df if c is None else df.where(c)).agg(*size)
                                             .collect()])
    out["_selections"] = sel
    return out


def checksum(F, df, cond) -> tuple:
    """(count, sum of CRC-32 of the bodies) of the rows cond selects (None: all)."""
    d = df if cond is None else df.where(cond)
    r = d.agg(F.count(F.lit(1)).alias("n"), F.sum(F.crc32("body")).alias("c")).collect()[0]
    return int(r["n"]), int(r["c"] or 0)


@register
class ScanWorkload(Workload):
    """Spark: the queries in this module's docstring (full scan, one topic, a 1 % time window,
    a queue's offset range, per-queue metadata, one key, one tag), each through
    quorumlog.spark.read_store and spark.read.parquet of the same --count messages (copied to
    Parquet untimed), WARMUPS untimed runs each, then alternating, REPEATS per reader; the
    ratio is of the medians. Results
    are checked across readers (and the full scan against the acknowledged messages). Needs
    pyspark (the spark extra) and a Java runtime."""
    name = "scan"
    summary = "Spark queries: read_store vs spark.read.parquet of the same messages"
    defaults = {"count": 1_000_000, "batch": 1000, "flush": "async"}
    uses = frozenset({"size", "count", "batch"})

    def unavailable(self) -> str | None:
        return _spark_missing()

    def describe(self, r):
        return f"scan: writing {r.count:,} msgs of {r.size} B"

    def run(self, r: Resolved, ctx: RunContext) -> list:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from ... import open as open_store
        from ... import spark as qs

        root = ctx.new_dir("scan")
        store_dir, parquet_dir = os.path.join(root, "store"), os.path.join(root, "parquet")
        payload = Payload(r.size, r.batch, r.seed)
        try:
            ctx.warm(r.count * (r.size + RECORD_OVERHEAD))
            with open_store(store_dir, flush="async", segment_size_bytes=SEGMENT_BYTES) as st:
                with ctx.progress.phase(self.describe(r), r.count) as ph:
                    data = write_store(st, payload, r.count, r.batch, ph)
            ctx.progress.note("scan: starting Spark and writing the Parquet copy")
            # A session this process already runs is used, and left running.
            ours = SparkSession.getActiveSession() is None
            spark = qs.session("quorumlog-bench", master="local[*]",
                               conf={"spark.driver.memory": "2g",
                                     "spark.sql.shuffle.partitions": "2"})
            try:
                spark.sparkContext.setLogLevel("ERROR")
                qs.read_store(spark, store_dir).write.parquet(parquet_dir)
                readers = {"read_store": lambda: qs.read_store(spark, store_dir),
                           "parquet": lambda: spark.read.parquet(parquet_dir)}
                results = self._measure(r, ctx, spark, readers, F, data)
            finally:
                if ours:
                    spark.stop()
        finally:
            ctx.remove(root)
        engine = "jvm" if qs.jar_path() is not None else "python data source"
        results[0].notes.append(f"read_store engine: {engine}")
        return results

    def _measure(self, r, ctx, spark, readers, F, data) -> list:
        repeats = QUICK_REPEATS if ctx.quick else REPEATS
        qs_ = queries(F, data)
        out = []
        with ctx.progress.phase(f"scan: {len(QUERIES)} queries x {repeats} per reader",
                                len(QUERIES) * repeats * len(readers)) as ph:
            for name in QUERIES:
                out.extend(self._one_query(r, spark, readers, F, data, name, qs_, repeats,
                                           0 if ctx.quick else WARMUPS, ph))
        return out

    def _one_query(self, r, spark, readers, F, data, name, qs_, repeats, warmups,
                   ph) -> list:
        lat = {k: LatencyRecorder("query") for k in readers}
        took = {k: [] for k in readers}
        cpu = {k: _CpuMeter(_jvm_pid(spark)) for k in readers}
        got = {}
        cold = {k: [] for k in readers}
        for _ in range(warmups):
            for k, df in readers.items():
                t0 = time.perf_counter_ns()
                got.setdefault(k, []).append(qs_[name](df()))
                cold[k].append((time.perf_counter_ns() - t0) / 1e9)
        for _ in range(repeats):
            for k, df in readers.items():
                with cpu[k]:
                    t0 = time.perf_counter_ns()
                    rows = qs_[name](df())
                    ns = time.perf_counter_ns() - t0
                lat[k].record(ns)
                took[k].append(ns / 1e9)
                got.setdefault(k, []).append(rows)
                ph.add(1)
        integrity = self._check(F, readers, data, name, qs_, got)
        out = []
        for k in readers:
            msgs = data["count"] * repeats
            res = Result(workload=self.name, op=f"{name[0]} {k}", options=r.as_dict(),
                         messages=msgs, payload_bytes=msgs * r.size, seconds=sum(took[k]),
                         latency=lat[k].summary(), cpu_seconds=dict(cpu[k].totals),
                         integrity=integrity, reference="memcpy")
            res.notes.append(f"{name}: median {statistics.median(took[k]) * 1e3:.1f} ms "
                             f"(runs {', '.join(f'{t * 1e3:.0f}' for t in took[k])} ms; "
                             f"untimed first {', '.join(f'{t * 1e3:.0f}' for t in cold[k]) or '-'}"
                             f" ms), result "
                             f"{got[k][0][:1] if not name.startswith('e ') else len(got[k][0])}")
            out.append(res)
        pq, ours = statistics.median(took["parquet"]), statistics.median(took["read_store"])
        if ours > 0:
            out[0].reference, out[0].reference_ratio = "parquet", pq / ours
        return out

    def _check(self, F, readers, data, name, qs_, got) -> dict:
        """Every result equal across readers and repeats; count and CRC-32 sum of the
        selected bodies equal across readers (and, for the full scan, the acknowledged)."""
        first = got["parquet"][0]
        same = all(rows == first for k in readers for rows in got[k])
        if name.startswith("e "):    # metadata only: the rows are the check
            n = sum(row[2] for row in first)
            return {"method": "per-queue rows equal across readers and repeats; their counts "
                              "add up to the acknowledged messages",
                    "acknowledged": data["count"], "read_back": n,
                    "missing": max(0, data["count"] - n), "results_equal": same,
                    "ok": same and n == data["count"]}
        cond = qs_["_selections"].get(name)
        sums = {k: checksum(F, df(), cond) for k, df in readers.items()}
        n, c = sums["parquet"]
        ok = same and sums["read_store"] == sums["parquet"]
        expected = (n, c)
        if name.startswith("a "):
            expected = (data["count"], data["crc_sum"])
            ok = ok and sums["parquet"] == expected
        return {"method": "results equal across readers and repeats; count and sum of CRC-32 "
                          "of the selected bodies (Spark's crc32) equal across readers"
                          + (" and to the acknowledged messages" if name.startswith("a ")
                             else ""),
                "acknowledged": expected[0], "read_back": sums["read_store"][0],
                "missing": max(0, expected[0] - sums["read_store"][0]),
                "checksum_acknowledged": f"{expected[1]:016x}",
                "checksum_read_back": f"{sums['read_store'][1]:016x}",
                "results_equal": same, "ok": ok}
