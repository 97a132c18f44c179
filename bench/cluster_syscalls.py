"""Syscalls and context switches per produce request, summed over the replicas of a local
3-replica cluster (`quorumlog cluster start`, async flush): one AsyncClient produces for
SECONDS (after a 2 s warm-up) while `strace -c -f` counts every replica's syscalls; a second
phase without strace counts context switches (/proc/<pid>/task/*/status). Needs strace.

    python bench/cluster_syscalls.py [SECONDS=4] [BATCH=1] [WINDOW=1]
"""
import asyncio
import collections
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from quorumlog.client import AsyncClient

CALLS = ["write", "writev", "read", "epoll_pwait", "futex", "pwritev"]


async def produce(d, seconds, batch, window) -> int:
    cfg = json.load(open(os.path.join(d, "cluster.json")))
    secret = open(os.path.join(d, "secret")).readline().strip()
    body = os.urandom(1024)
    one = body if batch == 1 else [body] * batch
    n = 0
    async with AsyncClient(list(cfg["clients"].values()), secret=secret) as c:
        end = time.perf_counter() + seconds

        async def loop():
            nonlocal n
            while time.perf_counter() < end:
                await c.produce("t", one)
                n += 1
        await asyncio.gather(*(loop() for _ in range(window)))
    return n


def ctx_switches(pids) -> int:
    total = 0
    for p in pids:
        for f in glob.glob(f"/proc/{p}/task/*/status"):
            for line in open(f):
                if "ctxt_switches" in line:
                    total += int(line.split()[1])
    return total


def strace_counts(path) -> collections.Counter:
    out = collections.Counter()
    for line in open(path):
        f = line.split()
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            out[f[-1]] += int(f[3])
    return out


def main(seconds, batch, window):
    with tempfile.TemporaryDirectory() as d:
        exe = [sys.executable, "-m", "quorumlog", "cluster"]
        subprocess.run(exe + ["start", "--dir", d, "--segment-size-bytes", str(256 << 20)],
                       check=True, stdout=subprocess.DEVNULL)
        try:
            pids = [int(open(p).read()) for p in sorted(glob.glob(f"{d}/n*.pid"))]
            asyncio.run(produce(d, 2, batch, window))                  # warm-up
            tracers = [subprocess.Popen(["strace", "-c", "-f", "-p", str(p), "-o",
                                         f"{d}/strace.{p}"], stderr=subprocess.DEVNULL)
                       for p in pids]
            try:
                time.sleep(0.5)
                traced = asyncio.run(produce(d, seconds, batch, window))
            finally:
                for t in tracers:
                    t.send_signal(signal.SIGINT)
                for t in tracers:
                    t.wait(timeout=30)
            per = {p: strace_counts(f"{d}/strace.{p}") for p in pids}
            calls = sum(per.values(), collections.Counter())
            c0 = ctx_switches(pids)
            plain = asyncio.run(produce(d, seconds, batch, window))
            cs = ctx_switches(pids) - c0
        finally:
            subprocess.run(exe + ["stop", "--dir", d], stdout=subprocess.DEVNULL)
    print(f"per request of {batch} message(s), 3 replicas (strace phase: {traced} requests): "
          + ", ".join(f"{k} {calls[k] / traced:.2f}" for k in CALLS)
          + f"; context switches {cs / plain:.2f} ({plain} requests without strace)")
    for k, (p, c) in enumerate(per.items()):       # (the leader: the one with the most reads)
        print(f"  replica {k + 1}: " + ", ".join(f"{n} {c[n] / traced:.2f}" for n in CALLS))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(float(a[0]) if a else 4.0, int(a[1]) if len(a) > 1 else 1, int(a[2]) if len(a) > 2 else 1)
