"""Elections on real processes: 3 replica processes on loopback (default Raft timings), their
peer links through the fault proxy (quorumlog.testing.faultproxy), a steady moderate write
load, and optionally the data connections stalled from time to time; counts term changes
(every election that raised a term) and leader changes per minute.

    .venv/bin/python bench/bench_elections.py --minutes 4 [--stalls] [--no-control-lane]

Stalls (--stalls): each of the 6 directed links, independently, waits 2-10 s, then stalls
its *data* connections for 200-1500 ms (the proxy stops forwarding that direction, as a TCP
retransmission stall would; nothing is lost), and again. Stalls of several links overlap by
chance. With the control lane (the node's default) votes and heartbeats travel on their own
connection and are not stalled; --no-control-lane puts everything on the one connection,
which the same stalls then hold up.

Not a test: nothing here asserts a number. One JSON line per run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from quorumlog.client import AsyncClient  # noqa: E402
from quorumlog.testing.faultproxy import FaultProxy  # noqa: E402
from quorumlog.testing.jepsen import ProxiedCluster  # noqa: E402

BODY = b"x" * 1024
TOPIC = "bench"


class Stalls:
    """One thread per directed link: wait 2-10 s, stall the link's data lane 200-1500 ms."""

    def __init__(self, proxy: FaultProxy, ids, seed: int):
        self.proxy = proxy
        self.links = [(s, d) for s in ids for d in ids if s != d]
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.count = 0
        self.stalled_s = 0.0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(s, d, self.rng.random()),
                                         daemon=True) for s, d in self.links]

    def _run(self, src, dst, seed):
        rng = random.Random(seed)
        while not self.stop.wait(rng.uniform(2.0, 10.0)):
            dur = rng.uniform(0.2, 1.5)
            self.proxy.set_faults(src, dst, lane="data", mode="stall")
            self.stop.wait(dur)
            self.proxy.set_faults(src, dst, lane="data")
            with self.lock:
                self.count += 1
                self.stalled_s += dur

    def start(self):
        for t in self.threads:
            t.start()

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(5)


def _terms(c) -> tuple[int, str | None]:
    """(highest term any member reports, the leader a member names)."""
    best, leader = 0, None
    for s in c.statuses().values():
        if isinstance(s, Exception):
            continue
        best = max(best, s.term)
        if s.role == 2:
            leader = s.node_id
    return best, leader


async def _load(c, seconds, producers, batch, per_s):
    """`producers` producers, each a batch of `batch` messages every 1/per_s s."""
    acked = [0]
    errors = []

    async def one():
        async with AsyncClient(c.client_addresses(), secret=c.secret(),
                               request_timeout=5.0, retry_timeout=60) as cl:
            t = time.monotonic()
            end = t + seconds
            while t < end:
                try:
                    await cl.produce(TOPIC, [BODY] * batch)
                    acked[0] += batch
                except Exception as e:   # counted, the run goes on
                    errors.append(repr(e))
                t += 1 / per_s
                delay = t - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                else:
                    t = time.monotonic()
    await asyncio.gather(*(one() for _ in range(producers)))
    return acked[0], errors


def run(a) -> dict:
    proxy = FaultProxy(seed=a.seed)
    env = {"QUORUMLOG_CONTROL_LANE": "1" if a.control_lane else "0"}
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        c = ProxiedCluster(os.path.join(tmp, "c"), 3, proxy=proxy, flush="async",
                           segment_size_bytes=1 << 30, env=env, log_level="INFO")
        stalls = None
        try:
            c.start()
            c.wait_started(timeout=60)
            c.wait_leader(timeout=30)
            time.sleep(2.0)                       # the first election and connections settle
            term0, leader0 = _terms(c)
            samples = [(time.monotonic(), term0, leader0)]
            done = threading.Event()

            def watch():
                while not done.wait(1.0):
                    try:
                        samples.append((time.monotonic(), *_terms(c)))
                    except Exception:   # (a status round failed: the next one counts)
                        pass
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            if a.stalls:
                stalls = Stalls(proxy, c.ids, a.seed)
                stalls.start()
            t0 = time.monotonic()
            load0 = os.getloadavg()[0]
            acked, errors = asyncio.run(_load(c, a.minutes * 60, a.producers, a.batch, a.rate))
            elapsed = time.monotonic() - t0
            if stalls is not None:
                stalls.close()
            done.set()
            watcher.join(10)
            term1, leader1 = _terms(c)
            leaders = [ld for _, _, ld in samples if ld is not None] + [leader1]
            changes = sum(1 for x, y in zip(leaders, leaders[1:]) if x != y)
            stalled_loops = 0
            for nid in c.ids:
                with open(c.log_file(nid), errors="replace") as fh:
                    stalled_loops += sum(1 for line in fh if "event loop stalled" in line)
            minutes = elapsed / 60
            return {"control_lane": a.control_lane, "stalls": a.stalls,
                    "minutes": round(minutes, 2),
                    "term_changes": term1 - term0,
                    "elections_per_min": round((term1 - term0) / minutes, 3),
                    "leader_changes": changes,
                    "stall_events": stalls.count if stalls else 0,
                    "stalled_link_seconds": round(stalls.stalled_s, 1) if stalls else 0,
                    "acked_messages": acked, "msg_per_s": round(acked / elapsed),
                    "produce_errors": len(errors), "first_errors": errors[:3],
                    "event_loop_stalls_logged": stalled_loops,
                    "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)]}
        finally:
            if stalls is not None:
                stalls.close()
            c.stop()
            proxy.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=4.0)
    p.add_argument("--stalls", action="store_true", help="stall data connections now and then")
    p.add_argument("--no-control-lane", dest="control_lane", action="store_false")
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--batch", type=int, default=10, help="messages (1 KiB) per produce")
    p.add_argument("--rate", type=float, default=50.0, help="produces per second per producer")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dir", default=None)
    a = p.parse_args(argv)
    print(json.dumps(run(a)), flush=True)


if __name__ == "__main__":
    main()
