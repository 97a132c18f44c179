"""Where a `quorumlog bench scan` query's time goes, per phase, read_store against Parquet:
building the DataFrame (read_store / spark.read.parquet), building the query (Spark analyses
it then), collect() (optimisation, planning, execution, the rows served to Python), with
Spark's own analysis / optimization / planning durations (QueryPlanningTracker) and the
py4j round trips of one query, and for read_store the wall time spent in the reader's own
code (QuorumlogSpark.ownNanos: opening the store, push-down, planning the reads, the
driver answer's or the job's reads) and the JVM's CPU time per query, with the ratio the query would have with that at zero
(Parquet's total / read_store's total less its own code). Same data, queries and session settings as the scan
workload; the store and its Parquet copy are kept in DIR between runs (written once).

    python bench/spark_query_phases.py DIR [--size 100] [--count 3000000] [--queries eg]
                                           [--rounds 7]

Rounds alternate the readers; the first two of each reader are left out of the medians
(warm-up, as the workload's WARMUPS).
"""
import argparse
import json
import os
import statistics
import time

import py4j.clientserver
import py4j.protocol

from quorumlog import open as open_store
from quorumlog import spark as qs
from quorumlog.bench.measure import pid_cpu_seconds
from quorumlog.bench.payload import Payload
from quorumlog.bench.workloads import scan as W
from quorumlog.bench.workloads.log import SEGMENT_BYTES

PHASES = ("analysis", "optimization", "planning")


def data_set(root: str, size: int, count: int) -> dict:
    meta = os.path.join(root, "data.json")
    if not os.path.exists(meta):
        os.makedirs(root, exist_ok=True)
        with open_store(os.path.join(root, "store"), flush="async",
                        segment_size_bytes=SEGMENT_BYTES) as st:
            data = W.write_store(st, Payload(size, 1000, 1), count, 1000)
        with open(meta + ".tmp", "w") as f:
            json.dump(data, f)
        os.rename(meta + ".tmp", meta)
    with open(meta) as f:
        return json.load(f)


def builders(F, data: dict) -> dict:
    """letter -> function(DataFrame) -> the query's DataFrame (the workload's columns)."""
    sel = W.queries(F, data)["_selections"]
    meta = [F.count(F.lit(1)), F.min("queue_offset"), F.max("queue_offset"),
            F.min("store_timestamp"), F.max("store_timestamp")]
    size = [F.count(F.lit(1)).alias("n"), F.sum(F.length("body")).alias("bytes")]
    out = {}
    for name in W.QUERIES:
        if name.startswith("e "):
            out[name[0]] = lambda df: df.groupBy("topic", "queue_id").agg(*meta)
        else:
            c = sel[name]
            out[name[0]] = lambda df, c=c: (df if c is None else df.where(c)).agg(*size)
    return out


class Py4jCalls:
    """Counts the py4j commands this process sends (one round trip each)."""

    def __init__(self):
        self.n = 0
        orig = py4j.clientserver.ClientServerConnection.send_command

        def counted(conn, command, _orig=orig):
            self.n += 1
            return _orig(conn, command)
        py4j.clientserver.ClientServerConnection.send_command = counted


def timed(runs: list) -> list:
    """The runs after the two warm-up ones (all of them when there are no more)."""
    return runs[2:] if len(runs) > 2 else runs


def one(mk, build, own, jvm_cpu) -> tuple:
    n0 = own()
    c0 = jvm_cpu()
    t0 = time.perf_counter()
    df = mk()
    t1 = time.perf_counter()
    q = build(df)
    t2 = time.perf_counter()
    q.collect()
    t3 = time.perf_counter()
    own_ms = (own() - n0) / 1e6
    cpu_ms = (jvm_cpu() - c0) * 1e3
    ph = q._jdf.queryExecution().tracker().phases()
    jvm = {p: ph.apply(p).durationMs() for p in PHASES if ph.contains(p)}
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t3 - t0) * 1e3, jvm, own_ms, \
        cpu_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--count", type=int, default=3_000_000)
    ap.add_argument("--queries", default="eg")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    root = os.path.join(a.dir, f"{a.size}x{a.count}")
    data = data_set(root, a.size, a.count)
    from pyspark.sql import functions as F
    spark = qs.session("quorumlog-phases", master="local[*]",
                       conf={"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    store, pq = os.path.join(root, "store"), os.path.join(root, "parquet")
    if not os.path.exists(os.path.join(pq, "_SUCCESS")):
        qs.read_store(spark, store).write.mode("overwrite").parquet(pq)
    readers = {"read_store": lambda: qs.read_store(spark, store),
               "parquet": lambda: spark.read.parquet(pq)}
    entry = spark._jvm.io.quorumlog.spark.QuorumlogSpark
    try:
        entry.ownNanos()
        own = entry.ownNanos
    except py4j.protocol.Py4JError:     # a jar from before the counter: no split
        own = lambda: 0                 # noqa: E731
    calls = Py4jCalls()
    pid = W._jvm_pid(spark)
    jvm_cpu = (lambda: pid_cpu_seconds(pid) or 0.0) if pid else (lambda: 0.0)
    for letter, build in builders(F, data).items():
        if letter not in a.queries:
            continue
        runs = {k: [] for k in readers}
        for _ in range(a.rounds):
            for k, mk in readers.items():
                before = calls.n
                runs[k].append(one(mk, build, own if k == "read_store" else lambda: 0,
                                   jvm_cpu) + (calls.n - before,))
        print(f"query {letter}, load average {os.getloadavg()[0]:.1f}")
        for k, v in runs.items():
            v = timed(v)
            med = [statistics.median(x[j] for x in v) for j in range(4)]
            jvm = {p: statistics.median(x[4].get(p, 0) for x in v) for p in PHASES}
            print(f"  {k:10s} DataFrame {med[0]:7.1f}  query {med[1]:7.1f}  collect "
                  f"{med[2]:7.1f}  total {med[3]:7.1f} ms  Spark's {jvm} ms  "
                  f"py4j calls {v[-1][7]}  reader's own code "
                  f"{statistics.median(x[5] for x in v):.1f} ms  JVM CPU "
                  f"{statistics.median(x[6] for x in v):.0f} ms")
        pq_ms, ours_ms = (statistics.median(x[3] for x in timed(runs[k]))
                          for k in ("parquet", "read_store"))
        own_ms = statistics.median(x[3] - x[5] for x in timed(runs["read_store"]))
        print(f"  Parquet / read_store: {pq_ms / ours_ms:.2f}x; with the reader's own code "
              f"at zero: {pq_ms / own_ms:.2f}x")
    spark.stop()


if __name__ == "__main__":
    main()
