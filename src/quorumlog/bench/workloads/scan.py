"""The `scan` workload: Spark reading a store with `quorumlog.spark.read_store` against
`spark.read.parquet` of the same messages, when pyspark (and a Java runtime) is installed.

The store is written with put_batch (--count messages of --size random bytes), then copied to
Parquet through read_store (not timed). Each timed query is count(*) + sum(length(body)) over
the whole data set, alternating read_store and Parquet, REPEATS times each; latency is per
query. Integrity: both readers must return the acknowledged count and the sum of CRC-32 of
every body (Spark's crc32 is zlib's CRC-32).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import time
import zlib

from ..latency import LatencyRecorder
from ..measure import Result, pid_cpu_seconds, process_cpu_seconds, run_producers
from ..options import Resolved
from ..payload import Payload
from . import RunContext, Workload, register
from .store import QUEUES, TOPIC, _StoreSender
from .log import RECORD_OVERHEAD, SEGMENT_BYTES

REPEATS = 3
QUICK_REPEATS = 1


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


def _expected_crc_sum(payload: Payload, ranges) -> int:
    total = 0
    for s0, n in ranges:
        for s in range(s0, s0 + n):
            total += zlib.crc32(payload.body(s))
    return total


@register
class ScanWorkload(Workload):
    """Spark: quorumlog.spark.read_store against spark.read.parquet of the same --count
    messages (written with put_batch, copied to Parquet untimed). Each timed query is
    count(*) + sum(length(body)); 3 per reader, alternating; latency is per query. Both
    readers must return every message (count and sum of CRC-32 of the bodies). Needs pyspark
    (the spark extra) and a Java runtime."""
    name = "scan"
    summary = "Spark read_store vs spark.read.parquet of the same messages (needs pyspark)"
    defaults = {"count": 1_000_000, "batch": 1000, "flush": "async"}
    uses = frozenset({"size", "count", "batch"})

    def unavailable(self) -> str | None:
        return _spark_missing()

    def describe(self, r):
        return f"scan: writing {r.count:,} msgs of {r.size} B"

    def run(self, r: Resolved, ctx: RunContext) -> list:
        from pyspark.sql import functions as F

        from ... import open as open_store
        from ... import spark as qs

        root = ctx.new_dir("scan")
        store_dir, parquet_dir = os.path.join(root, "store"), os.path.join(root, "parquet")
        payload = Payload(r.size, r.batch, r.seed)
        try:
            ctx.warm(r.count * (r.size + RECORD_OVERHEAD))
            with open_store(store_dir, flush="async", segment_size_bytes=SEGMENT_BYTES) as st:
                st.create_topic(TOPIC, QUEUES)
                with ctx.progress.phase(self.describe(r), r.count) as ph:
                    driven = run_producers(r, lambda k: _StoreSender(st, payload, r.batch),
                                           LatencyRecorder("unused"), ph)
            expected = {"count": driven.messages,
                        "crc_sum": _expected_crc_sum(payload, driven.acked_ranges)}
            ctx.progress.note("scan: starting Spark and writing the Parquet copy")
            from pyspark.sql import SparkSession
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
                results = self._measure(r, ctx, spark, readers, F, expected)
            finally:
                if ours:
                    spark.stop()
        finally:
            ctx.remove(root)
        engine = "jvm" if qs.jar_path() is not None else "python data source"
        results[0].notes.append(f"read_store engine: {engine}")
        return results

    def _measure(self, r, ctx, spark, readers, F, expected) -> list:
        repeats = QUICK_REPEATS if ctx.quick else REPEATS
        lat = {name: LatencyRecorder("query") for name in readers}
        took = {name: 0.0 for name in readers}
        cpu = {name: _CpuMeter(_jvm_pid(spark)) for name in readers}
        with ctx.progress.phase(f"scan: {repeats} x count + sum(length(body)) per reader",
                                repeats * len(readers) * expected["count"]) as ph:
            for _ in range(repeats):
                for name, df in readers.items():
                    with cpu[name]:
                        t0 = time.perf_counter_ns()
                        row = df().agg(F.count(F.lit(1)).alias("n"),
                                       F.sum(F.length("body")).alias("b")).collect()[0]
                        ns = time.perf_counter_ns() - t0
                    lat[name].record(ns)
                    took[name] += ns / 1e9
                    ph.add(int(row["n"]))
                    if row["n"] != expected["count"] or row["b"] != expected["count"] * r.size:
                        ctx.progress.note(f"scan: {name} returned {row['n']} messages / "
                                          f"{row['b']} body bytes, expected "
                                          f"{expected['count']} / {expected['count'] * r.size}")
        out = []
        for name, df in readers.items():
            got = df().agg(F.count(F.lit(1)).alias("n"),
                           F.sum(F.crc32("body")).alias("c")).collect()[0]
            n, c = int(got["n"]), int(got["c"] or 0)
            integrity = {
                "method": "count and sum of CRC-32 of the bodies, computed by Spark",
                "acknowledged": expected["count"], "read_back": n,
                "missing": max(0, expected["count"] - n),
                "checksum_acknowledged": f"{expected['crc_sum']:016x}",
                "checksum_read_back": f"{c:016x}",
                "ok": n == expected["count"] and c == expected["crc_sum"]}
            msgs = expected["count"] * repeats
            out.append(Result(workload=self.name, op=name, options=r.as_dict(), messages=msgs,
                              payload_bytes=msgs * r.size, seconds=took[name],
                              latency=lat[name].summary(), cpu_seconds=dict(cpu[name].totals),
                              integrity=integrity, reference="memcpy"))
        pq = out[1].msgs_per_s
        if pq > 0:
            out[0].reference, out[0].reference_ratio = "parquet", out[0].msgs_per_s / pq
        return out
