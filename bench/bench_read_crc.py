"""What the read path's record checks cost: get() with every record CRC32C-checked (and its
queue, offset and topic compared with the consume-queue entry) against get() with only the old
magic + position pairing check, on the same store in the same process, runs alternating
(checked, unchecked, checked, ...) so machine noise hits both alike, timed in thread CPU time.
Goal: the checks cost <= 10 % of get throughput.

`pytest bench/bench_read_crc.py --benchmark-only -s` (or `python bench/bench_read_crc.py`);
QUORUMLOG_BENCH_READ_MESSAGES (default 1,000,000) and QUORUMLOG_BENCH_READ_ROUNDS (default 7
per mode) change the size. Prints messages/s per run, the medians and the cost.
"""
import os
import shutil
import sys
import statistics
import tempfile
import time

import quorumlog
from quorumlog import _consumequeue

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_store import QUEUES, consume_all  # noqa: E402  (bench/ is not a package)

MESSAGES = int(os.environ.get("QUORUMLOG_BENCH_READ_MESSAGES", 1_000_000))
ROUNDS = int(os.environ.get("QUORUMLOG_BENCH_READ_ROUNDS", 7))
BATCH = 1000
BENCH_DIR = os.environ.get("QUORUMLOG_BENCH_DIR") or None


def consume(s, per_queue):
    """Read every queue from 0 in gets of 32, touching each body -> messages per second of
    this thread's CPU time (on a shared machine wall time mostly measures the neighbours)."""
    t0 = time.thread_time()
    n = consume_all(s, per_queue)
    dt = time.thread_time() - t0
    assert n == per_queue * QUEUES
    return n / dt


def measure(body_bytes, messages=MESSAGES, rounds=ROUNDS):
    """-> {"checked": [msg/s...], "unchecked": [...], "cost": fraction of throughput lost}."""
    d = tempfile.mkdtemp(prefix="quorumlog-bench-readcrc-", dir=BENCH_DIR)
    try:
        s = quorumlog.open(d, background=False, environ={}, segment_size_bytes=1 << 30)
        s.create_topic("bench", QUEUES)
        body = os.urandom(body_bytes)
        for _ in range(messages // BATCH):
            s.put_batch("bench", [body] * BATCH)
        per_queue = (messages // BATCH) * BATCH // QUEUES
        runs = {"checked": [], "unchecked": []}
        try:
            for mode in ("checked", "unchecked"):          # warm-up, not counted
                _consumequeue._read_checks(mode == "checked")
                consume(s, per_queue)
            for _ in range(rounds):
                for mode in ("checked", "unchecked"):
                    _consumequeue._read_checks(mode == "checked")
                    runs[mode].append(consume(s, per_queue))
        finally:
            _consumequeue._read_checks(True)
            s.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    on, off = statistics.median(runs["checked"]), statistics.median(runs["unchecked"])
    runs["cost"] = 1 - on / off
    runs["body_bytes"] = body_bytes
    return runs


def report(r):
    fmt = lambda xs: ", ".join(f"{x / 1e6:.2f}" for x in xs)   # noqa: E731
    print(f"\n[read checks, {r['body_bytes']} B bodies] M msg/CPU-s checked: {fmt(r['checked'])}; "
          f"unchecked: {fmt(r['unchecked'])}; medians {statistics.median(r['checked']) / 1e6:.2f}"
          f" vs {statistics.median(r['unchecked']) / 1e6:.2f}: cost {r['cost']:.1%}")


def test_read_check_cost(benchmark):
    results = []

    def run():
        results[:] = [measure(100), measure(1024)]

    benchmark.pedantic(run, rounds=1, iterations=1)
    for r in results:
        report(r)
        benchmark.extra_info[f"cost_{r['body_bytes']}B"] = r["cost"]
        benchmark.extra_info[f"checked_msgs_per_s_{r['body_bytes']}B"] = \
            statistics.median(r["checked"])
        benchmark.extra_info[f"unchecked_msgs_per_s_{r['body_bytes']}B"] = \
            statistics.median(r["unchecked"])


if __name__ == "__main__":
    for size in (100, 1024):
        report(measure(size))
