"""The node's sync-mode Flusher alone: how long an appended entry waits until a flush report
covers it, with 1 or 2 flushes in flight (node/flusher.py FLUSHES_IN_FLIGHT), no Raft and
no network -- the part of a sync put's latency that overlapping flushes change.

    python bench/sync_flush_overlap.py [--procs 3] [--rate 4000] [--seconds 4] [--rounds 3]

Each round runs `procs` processes at once (a 3-replica group's disks are one disk here), each
a CommitLog in a temporary directory under --dir (default /tmp, the disk the benches use) fed
`rate` 1 KiB appends a second by its event loop (a few per loop turn, as a leader's drained
puts), asking its Flusher for a flush after each turn like the driver's duty 3. Prints, per
setting, the medians over processes of append -> report p50 / p90 / mean and flushes per
second; settings alternate within a round (1 2 / 2 1).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import tempfile
import time

from quorumlog.commitlog import CommitLog
from quorumlog.node.flusher import Flusher

BODY = b"x" * 1024
SEGMENT_BYTES = 256 << 20


async def _feed(in_flight: int, rate: float, seconds: float, d: str) -> dict:
    cl = CommitLog(d, segment_size_bytes=SEGMENT_BYTES, flush="sync",
                   flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000)
    loop = asyncio.get_running_loop()
    appended: list[tuple[int, float]] = []      # (index, time) in order
    lat: list[float] = []
    covered = [0]

    def on_flushed(index, gen):
        now = time.perf_counter()
        k = covered[0]
        while k < len(appended) and appended[k][0] <= index:
            lat.append(now - appended[k][1])
            k += 1
        covered[0] = k

    fl = Flusher(in_flight=in_flight)
    fl.start(cl, loop, on_flushed, lambda e: None)
    try:
        t0 = time.perf_counter()
        sent = 0
        while time.perf_counter() - t0 < seconds:
            due = int((time.perf_counter() - t0) * rate)
            if due > sent:
                now = time.perf_counter()
                for _ in range(due - sent):
                    index = cl.append("t", BODY, term=1)[0]
                    appended.append((index, now))
                sent = due
                fl.request(cl.last_index, 0)
            await asyncio.sleep(0.0005)
        deadline = time.monotonic() + 10
        while covered[0] < len(appended) and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
    finally:
        await fl.close()
        cl.close()
    lat.sort()
    n = len(lat)
    return {"p50_ms": lat[n // 2] * 1e3, "p90_ms": lat[int(n * 0.9)] * 1e3,
            "mean_ms": statistics.mean(lat) * 1e3, "flushes_per_s": fl.flushes / seconds,
            "overlapped": fl.overlapped, "entries": n}


def _one(args):
    in_flight, rate, seconds, base = args
    with tempfile.TemporaryDirectory(dir=base) as d:
        return asyncio.run(_feed(in_flight, rate, seconds, d + "/log"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--rate", type=float, default=4000)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    a = ap.parse_args()
    out: dict[int, list[dict]] = {1: [], 2: []}
    for r in range(a.rounds):
        for n in ((1, 2) if r % 2 == 0 else (2, 1)):
            with mp.get_context("spawn").Pool(a.procs) as pool:
                res = pool.map(_one, [(n, a.rate, a.seconds, a.dir)] * a.procs)
            out[n].append({k: statistics.median(x[k] for x in res) for k in res[0]})
            print(f"round {r} in_flight={n}", json.dumps(out[n][-1]), flush=True)
    for n, rows in out.items():
        print(f"in_flight={n}: median over rounds",
              {k: round(statistics.median(x[k] for x in rows), 2) for k in rows[0]})


if __name__ == "__main__":
    main()
