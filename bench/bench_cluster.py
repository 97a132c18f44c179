"""Replicated-node benchmarks: 3 replica processes on loopback and a load generator, all on
this machine, 1 KiB messages, every message acknowledged only after majority commit.

    .venv/bin/python bench/bench_cluster.py [--scenario NAME ...] [--seconds S] [--json F]
                                            [--raft NAME=VALUE] [--dir D]

The scenarios run the `quorumlog bench` workloads (the same code: quorumlog.bench.cluster and
quorumlog.bench.workloads.replicated) in the shapes of the node's goals; `memory` is only here.
docs/benchmarks.md has the goals and the numbers measured.
  async        2 producers of 256-message batches, a window of 8 each, flush = "async"
  sync         the same with flush = "sync" (a replica acknowledges only flushed entries)
  latency      one producer, one message at a time (flush = "async"): p50 / p99
  concurrent   64 producers (one connection each) of single messages, flush = "sync"
  concurrent-async   the same with flush = "async" (what the flush latency costs)
  failover     kill -9 of the leader under load, 5 times: kill -> next acknowledgement
  memory       one follower stopped (SIGSTOP) under load: the leader's peak anonymous RSS

Not a test: nothing here asserts a number. Results print as one JSON line each (and as JSON).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from quorumlog.bench import suite  # noqa: E402
from quorumlog.bench.cluster import Load, client_loop_runner, start_local  # noqa: E402
from quorumlog.bench.latency import LatencyRecorder  # noqa: E402
from quorumlog.bench.options import BenchOptions, resolve  # noqa: E402
from quorumlog.bench.payload import Payload  # noqa: E402
from quorumlog.bench.progress import Phase  # noqa: E402
from quorumlog.bench.workloads.replicated import ClusterWorkload  # noqa: E402

# scenario -> (workload, the step's settings)
WORKLOAD_SCENARIOS = {
    "async": ("cluster", {"flush": "async"}),
    "sync": ("cluster", {"flush": "sync"}),
    "latency": ("cluster", {"flush": "async", "producers": 1, "batch": 1, "window": 1}),
    "concurrent": ("cluster", {"flush": "sync", "producers": 64, "batch": 1, "window": 1}),
    "concurrent-async": ("cluster", {"flush": "async", "producers": 64, "batch": 1,
                                     "window": 1}),
    "failover": ("failover", {"kills": 5}),
}
SCENARIOS = [*WORKLOAD_SCENARIOS, "memory"]


def _rss_kib(pid: int, field: str = "RssAnon:") -> int:
    """Anonymous resident memory (RssAnon): the leader's own allocations. (VmRSS also
    counts the log's mapped file pages, page cache that grows with the log whatever the
    followers do.)"""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def bench_workload(name, tmp, seconds, kills=None) -> list[dict]:
    workload, settings = WORKLOAD_SCENARIOS[name]
    if kills is not None and workload == "failover":
        settings = {**settings, "kills": kills}
    opts = BenchOptions(duration_s=seconds, dir=tmp, references=False, warm_gib=0,
                        progress=False)
    doc = suite.run(opts, [(workload, settings)], strict=False,
                    argv=["bench/bench_cluster.py", "--scenario", name])
    out = []
    for r in doc["results"]:
        lat = r["latency"]
        out.append({"scenario": name, "messages": r["messages"],
                    "seconds": round(r["seconds"], 2), "MB_per_s": round(r["MBps"], 1),
                    "msgs_per_s": round(r["msgs_per_s"]), "p50_ms": lat["p50_us"] / 1e3,
                    "p99_ms": lat["p99_us"] / 1e3, "goal": r["goal"],
                    "failover": r["failover"], "integrity_ok": r["integrity"]["ok"]})
    out += [{"scenario": name, "error": e["error"]} for e in doc["errors"]]
    return out


def bench_memory(tmp, seconds) -> list[dict]:
    c = start_local(os.path.join(tmp, "memory"), 3, "async", raft=RAFT)
    follower = None
    try:
        leader = c.wait_leader()
        follower = next(n for n in c.ids if n != leader)
        r = resolve(BenchOptions(duration_s=seconds), ClusterWorkload.defaults)
        payload = Payload(r.size, r.batch, r.seed)
        load = Load(c.client_addresses(), c.secret(), r, payload, LatencyRecorder("message"),
                    Phase("memory", None, seconds).use_slots(r.producers))
        base = _rss_kib(c.pid(leader))
        c.signal(follower, signal.SIGSTOP)
        peak = [base]

        async def run():
            async def sample():
                while True:
                    peak[0] = max(peak[0], _rss_kib(c.pid(leader)))
                    await asyncio.sleep(0.1)
            s = asyncio.get_running_loop().create_task(sample())
            try:
                return await load.run()
            finally:
                s.cancel()
        n, dt, _ = client_loop_runner()[0](run())
        return [{"scenario": "memory", "stopped_follower": follower, "messages": n,
                 "MB_written": round(n * r.size / 1e6),
                 "leader_rss_anon_before_MiB": base // 1024,
                 "leader_rss_anon_peak_MiB": peak[0] // 1024,
                 "leader_vmrss_end_MiB": _rss_kib(c.pid(leader), "VmRSS:") // 1024}]
    finally:
        if follower is not None:
            c.signal(follower, signal.SIGCONT)
        c.stop()


RAFT: dict = {}      # --raft NAME=VALUE: RaftConfig settings for the replicas


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", action="append", choices=SCENARIOS)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--kills", type=int, default=None, help="failover: leader kills (default 5)")
    p.add_argument("--json")
    p.add_argument("--raft", action="append", default=[], metavar="NAME=VALUE",
                   help="a RaftConfig setting for the replicas (e.g. max_heartbeat_leak=3)")
    p.add_argument("--dir", default=None, help="where the replicas' data goes (default: a "
                   "temporary directory, deleted afterwards)")
    a = p.parse_args(argv)
    for kv in a.raft:
        k, _, v = kv.partition("=")
        RAFT[k] = v
        # replicas started by the workloads read their Raft settings from the environment
        os.environ[f"QUORUMLOG_RAFT_{k.upper()}"] = v
    results = []
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        for sc in a.scenario or SCENARIOS:
            rows = bench_memory(tmp, a.seconds) if sc == "memory" else \
                bench_workload(sc, tmp, a.seconds, a.kills)
            for r in rows:
                r["load_average"] = os.getloadavg()[0]
                if RAFT:
                    r["raft"] = dict(RAFT)
                print(json.dumps(r), flush=True)
                results.append(r)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
