"""Replicated-node benchmarks: 3 replica processes on loopback and a load generator, all on
this machine, 1 KiB messages, every message acknowledged only after majority commit.

    .venv/bin/python bench/bench_cluster.py [--scenario NAME ...] [--seconds S] [--json F]

Scenarios (docs/benchmarks.md has the goals and the numbers measured):
  async        producers of 256-message batches, a window of 8 each, flush = "async"
  sync         the same with flush = "sync" (a replica acknowledges only flushed entries)
  latency      one producer, one message at a time (flush = "async"): p50 / p99
  concurrent   64 concurrent producers of single messages, flush = "sync": messages/s
  concurrent-async   the same with flush = "async" (what the flush latency costs)
  failover     kill -9 of the leader under load, repeated: kill -> next acknowledgement
  memory       one follower stopped (SIGSTOP) under load: the leader's peak anonymous RSS

Not a test: nothing here asserts a number. Results print as one line each (and as JSON).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from quorumlog.client import AsyncClient  # noqa: E402
from quorumlog.localcluster import LocalCluster  # noqa: E402

BODY = b"x" * 1024
TOPIC = "bench"


def _rss_kib(pid: int, field: str = "RssAnon:") -> int:
    """Anonymous resident memory (RssAnon): the leader's own allocations. (VmRSS also
    counts the log's mapped file pages, page cache that grows with the log whatever the
    followers do.)"""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


RAFT: dict = {}      # --raft NAME=VALUE: RaftConfig settings for the replicas
_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads) from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rpartition(")")[2].split()
    return (int(f[11]) + int(f[12])) / _TICKS


class _Cpu:
    """CPU seconds used by each replica (leader / follower) and by this load generator over
    the measured phase -> per 100,000 acknowledged messages: where the cycles go."""

    def __init__(self, c):
        leader = c.wait_leader()
        self.roles = {"leader": c.pid(leader)}
        for i, nid in enumerate(n for n in c.ids if n != leader):
            self.roles[f"follower{i + 1}"] = c.pid(nid)
        self.start = {r: _proc_cpu_s(p) for r, p in self.roles.items()}
        self.client0 = time.process_time()

    def per_100k(self, messages: int) -> dict:
        used = {r: _proc_cpu_s(p) - self.start[r] for r, p in self.roles.items()}
        used["client"] = time.process_time() - self.client0
        k = 100_000 / max(messages, 1)
        return {r: round(v * k, 3) for r, v in used.items()}


def _cluster(tmp, flush):
    c = LocalCluster(os.path.join(tmp, f"c-{flush}-{time.monotonic_ns()}"), 3, flush=flush,
                     segment_size_bytes=1 << 30, log_level="INFO", raft=RAFT)
    c.start()
    c.wait_started(timeout=60)
    c.wait_leader(timeout=30)
    return c


async def _batches(c, seconds, producers=2, batch=256, window=8):
    """Producers of `batch`-message batches with `window` in flight -> (messages, seconds)."""
    done = [0]
    stop = time.monotonic() + seconds

    async def one():
        async with AsyncClient(c.client_addresses(), secret=c.secret()) as cl:
            sem = asyncio.Semaphore(window)

            async def send():
                try:
                    await cl.produce(TOPIC, [BODY] * batch)
                    done[0] += batch
                finally:
                    sem.release()
            tasks = set()
            while time.monotonic() < stop:
                await sem.acquire()
                t = asyncio.get_running_loop().create_task(send())
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks)
    t0 = time.monotonic()
    await asyncio.gather(*(one() for _ in range(producers)))
    return done[0], time.monotonic() - t0


def bench_throughput(tmp, flush, seconds):
    c = _cluster(tmp, flush)
    try:
        asyncio.run(_batches(c, 1.0))                 # warm up (topic, connections, pages)
        cpu = _Cpu(c)
        n, dt = asyncio.run(_batches(c, seconds))
        return {"scenario": flush, "messages": n, "seconds": round(dt, 2),
                "MB_per_s": round(n * len(BODY) / dt / 1e6, 1),
                "msgs_per_s": round(n / dt), "cpu_s_per_100k": cpu.per_100k(n)}
    finally:
        c.stop()


def bench_latency(tmp, seconds):
    c = _cluster(tmp, "async")
    cpu = [None]

    async def run():
        async with AsyncClient(c.client_addresses(), secret=c.secret()) as cl:
            await cl.produce(TOPIC, BODY)
            cpu[0] = _Cpu(c)
            lat = []
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                await cl.produce(TOPIC, BODY)
                lat.append(time.perf_counter() - t0)
            return lat
    try:
        lat = sorted(asyncio.run(run()))
        return {"scenario": "latency", "messages": len(lat),
                "p50_ms": round(lat[len(lat) // 2] * 1000, 3),
                "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3),
                "cpu_s_per_100k": cpu[0].per_100k(len(lat))}
    finally:
        c.stop()


def bench_concurrent(tmp, seconds, producers=64, connections=4, flush="sync"):
    c = _cluster(tmp, flush)
    cpu = [None]

    async def run():
        clients = [AsyncClient(c.client_addresses(), secret=c.secret())
                   for _ in range(connections)]
        await clients[0].produce(TOPIC, BODY)
        cpu[0] = _Cpu(c)
        done = [0]
        stop = time.monotonic() + seconds

        async def producer(cl):
            while time.monotonic() < stop:
                await cl.produce(TOPIC, BODY)
                done[0] += 1
        t0 = time.monotonic()
        await asyncio.gather(*(producer(clients[i % connections]) for i in range(producers)))
        dt = time.monotonic() - t0
        for cl in clients:
            await cl.close()
        return done[0], dt
    try:
        n, dt = asyncio.run(run())
        return {"scenario": "concurrent", "flush": flush, "producers": producers, "messages": n,
                "msgs_per_s": round(n / dt), "MB_per_s": round(n * len(BODY) / dt / 1e6, 1),
                "cpu_s_per_100k": cpu[0].per_100k(n)}
    finally:
        c.stop()


def bench_failover(tmp, kills=5):
    c = _cluster(tmp, "async")
    samples = []

    async def run():
        acked = [time.monotonic()]
        t_kill = [0.0]
        stop = asyncio.Event()

        async def producer():
            # acked[0]: when the last produce *started after* the latest kill was
            # acknowledged (a reply to a request the old leader had already committed
            # would say nothing about the failover)
            async with AsyncClient(c.client_addresses(), secret=c.secret(),
                                   request_timeout=1.0, retry_timeout=60) as cl:
                while not stop.is_set():
                    started = time.monotonic()
                    await cl.produce(TOPIC, [BODY] * 16)
                    if started > t_kill[0]:
                        acked[0] = time.monotonic()
        tasks = [asyncio.get_running_loop().create_task(producer()) for _ in range(2)]
        await asyncio.sleep(1.0)
        for _ in range(kills):
            leader = await asyncio.to_thread(c.wait_leader, 30)
            await asyncio.sleep(0.5)
            t_kill[0] = time.monotonic()
            await asyncio.to_thread(c.kill, leader)
            while acked[0] <= t_kill[0]:
                await asyncio.sleep(0.005)
            samples.append(acked[0] - t_kill[0])
            await asyncio.to_thread(c.restart, leader)
            await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*tasks)
    try:
        asyncio.run(run())
        s = sorted(samples)
        return {"scenario": "failover", "kills": len(s),
                "kill_to_next_ack_ms": [round(x * 1000) for x in s],
                "median_ms": round(statistics.median(s) * 1000), "max_ms": round(s[-1] * 1000)}
    finally:
        c.stop()


def bench_memory(tmp, seconds):
    c = _cluster(tmp, "async")
    try:
        leader = c.wait_leader()
        follower = next(n for n in c.ids if n != leader)
        asyncio.run(_batches(c, 1.0))
        base = _rss_kib(c.pid(leader))
        c.signal(follower, signal.SIGSTOP)
        peak = [base]

        async def run():
            async def sample():
                while True:
                    peak[0] = max(peak[0], _rss_kib(c.pid(leader)))
                    await asyncio.sleep(0.1)
            s = asyncio.get_running_loop().create_task(sample())
            r = await _batches(c, seconds)
            s.cancel()
            return r
        n, dt = asyncio.run(run())
        c.signal(follower, signal.SIGCONT)
        return {"scenario": "memory", "stopped_follower": follower, "messages": n,
                "MB_written": round(n * len(BODY) / 1e6),
                "leader_rss_anon_before_MiB": base // 1024,
                "leader_rss_anon_peak_MiB": peak[0] // 1024,
                "leader_vmrss_end_MiB": _rss_kib(c.pid(leader), "VmRSS:") // 1024}
    finally:
        c.signal(follower, signal.SIGCONT)
        c.stop()


SCENARIOS = ["async", "sync", "latency", "concurrent", "concurrent-async", "failover", "memory"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", action="append", choices=SCENARIOS)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--json")
    p.add_argument("--raft", action="append", default=[], metavar="NAME=VALUE",
                   help="a RaftConfig setting for the replicas (e.g. max_heartbeat_leak=3)")
    p.add_argument("--dir", default=None, help="where the replicas' data goes (default: a "
                   "temporary directory, deleted afterwards)")
    a = p.parse_args(argv)
    for kv in a.raft:
        k, _, v = kv.partition("=")
        RAFT[k] = v
    results = []
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        for sc in a.scenario or SCENARIOS:
            if sc in ("async", "sync"):
                r = bench_throughput(tmp, sc, a.seconds)
            elif sc == "latency":
                r = bench_latency(tmp, a.seconds)
            elif sc == "concurrent":
                r = bench_concurrent(tmp, a.seconds)
            elif sc == "concurrent-async":
                r = bench_concurrent(tmp, a.seconds, flush="async")
            elif sc == "failover":
                r = bench_failover(tmp)
            else:
                r = bench_memory(tmp, a.seconds)
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
