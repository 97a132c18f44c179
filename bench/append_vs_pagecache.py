"""append_batch against a plain page-cache write of the same bytes, alternating in one run.

Each round writes NBYTES twice into new files in DIR: once with os.write of 4 MiB blocks
(the fresh page-cache reference) and once as CommitLog.append_batch calls of --batch
records of --size bytes (async flush: nothing waits for the disk). It prints per round the
throughput of both and the log's fraction of the reference, then the medians, plus the CPU
seconds per GB of this process (all threads: the log's preparer and flusher included).
The order alternates between rounds, so a drift of the machine's speed hits both sides, and
each phase first faults in (and frees) twice the memory it will write, as `quorumlog bench`
does: on this VM freed guest memory goes back to the host within seconds and its first touch
again costs ~5x (whichever side ran second would otherwise get the memory the first freed).

    python bench/append_vs_pagecache.py --size 4096 --rounds 5 --mib 512 [--dir DIR]

Any venv's quorumlog can run it (A/B of two builds: run it with each venv's python).

--steady RETAIN_MIB: the steady state of a log whose retention runs, instead of a fresh log
per round: two logs of 64 MiB segments live through all rounds, each trimmed after every
call to its newest RETAIN_MIB (delete_segments_before), one reusing the freed segment files
(recycle_segments=2, the default) and one creating every segment (recycle_segments=0, as
before segment recycling); both are first filled past RETAIN_MIB + 2 segments, and each
round runs the reference and both logs in a rotating order.
"""
import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time

from quorumlog.bench.references import touch_memory
from quorumlog.commitlog import CommitLog

MiB = 1 << 20


def _cpu():
    # getrusage, not os.times: the latter counts in 10 ms ticks, a tenth of a 256 MiB phase
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def page_cache_write(directory, nbytes):
    """Seconds and CPU seconds of writing nbytes with 4 MiB os.write calls into a new file."""
    buf = os.urandom(4 * MiB)
    path = os.path.join(directory, "ref")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        c, t = _cpu(), time.perf_counter()
        for _ in range(nbytes // len(buf)):
            os.write(fd, buf)
        return time.perf_counter() - t, _cpu() - c
    finally:
        os.close(fd)
        os.unlink(path)


def log_append(directory, nbytes, size, batch):
    """Seconds and CPU seconds of append_batch calls writing nbytes of bodies."""
    bodies = [os.urandom(size) for _ in range(batch)]
    path = os.path.join(directory, "log")
    log = CommitLog(path, segment_size_bytes=1 << 30, flush="async")
    calls = max(1, nbytes // (size * batch))
    try:
        c, t = _cpu(), time.perf_counter()
        for k in range(calls):
            log.append_batch("bench", bodies, queue_ids=0, queue_offsets=k * batch, term=1)
        return time.perf_counter() - t, _cpu() - c
    finally:
        log.close()
        shutil.rmtree(path)


STEADY_SEGMENT = 64 * MiB


class SteadyLog:
    """A log of 64 MiB segments kept at its newest `retain` bytes by retention."""

    def __init__(self, directory, name, recycle, retain, size, batch):
        self.log = CommitLog(os.path.join(directory, name), segment_size_bytes=STEADY_SEGMENT,
                             flush="async", recycle_segments=recycle)
        self.retain, self.batch, self.k = retain, batch, 0
        self.bodies = [os.urandom(size) for _ in range(batch)]
        self.per_call = size * batch

    def write(self, nbytes):
        """Seconds and CPU seconds of append_batch calls (and retention) writing nbytes."""
        log = self.log
        c, t = _cpu(), time.perf_counter()
        for _ in range(max(1, nbytes // self.per_call)):
            log.append_batch("bench", self.bodies, queue_ids=0, queue_offsets=self.k, term=1)
            self.k += self.batch
            if log.end_position - log.min_position > self.retain + STEADY_SEGMENT:
                log.delete_segments_before(log.end_position - self.retain)
        return time.perf_counter() - t, _cpu() - c

    def close(self):
        st = self.log.stats()
        self.log.close()
        return st


def steady(a, d, nbytes):
    retain = a.steady * MiB
    logs = {"recycle": SteadyLog(d, "recycle", 2, retain, a.size, a.batch),
            "fresh": SteadyLog(d, "fresh", 0, retain, a.size, a.batch)}
    for lg in logs.values():        # warm up: retention running, the pool filled
        lg.write(retain + 3 * STEADY_SEGMENT)
    cpu = {k: [] for k in ("ref", "recycle", "fresh")}
    gbps = {k: [] for k in cpu}
    names = list(cpu)
    try:
        for r in range(a.rounds):
            order = names[r % 3:] + names[:r % 3]
            for what in order:
                touch_memory(2 * nbytes)
                secs, c = (page_cache_write(d, nbytes) if what == "ref"
                           else logs[what].write(nbytes))
                gbps[what].append(nbytes / secs / 1e9)
                cpu[what].append(c / (nbytes / 1e9))
            print(f"round {r}: " + ", ".join(
                f"{k} {gbps[k][-1]:.2f} GB/s {cpu[k][-1]:.2f} CPU s/GB" for k in names),
                flush=True)
    finally:
        stats = {k: lg.close() for k, lg in logs.items()}
    print("median: " + ", ".join(
        f"{k} {statistics.median(gbps[k]):.2f} GB/s {statistics.median(cpu[k]):.2f} CPU s/GB"
        for k in names) + f"; segments reused {stats['recycle']['segments_recycled']} of "
        f"{stats['recycle']['segments_created']} (fresh log: "
        f"{stats['fresh']['segments_recycled']}); load {os.getloadavg()[0]:.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--steady", type=int, default=0, metavar="RETAIN_MIB")
    a = ap.parse_args()
    nbytes = a.mib * MiB
    d = tempfile.mkdtemp(prefix="append-vs-pc-", dir=a.dir)
    if a.steady:
        try:
            steady(a, d, nbytes)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        return
    ratios, refs, logs, ref_cpu, log_cpu = [], [], [], [], []
    try:
        for r in range(a.rounds):
            order = ("ref", "log") if r % 2 == 0 else ("log", "ref")
            got = {}
            for what in order:
                touch_memory(2 * nbytes)
                if what == "ref":
                    got[what] = page_cache_write(d, nbytes)
                else:
                    got[what] = log_append(d, nbytes, a.size, a.batch)
            ref_gbps = nbytes / got["ref"][0] / 1e9
            log_gbps = nbytes / got["log"][0] / 1e9
            refs.append(ref_gbps)
            logs.append(log_gbps)
            ratios.append(log_gbps / ref_gbps)
            ref_cpu.append(got["ref"][1] / (nbytes / 1e9))
            log_cpu.append(got["log"][1] / (nbytes / 1e9))
            print(f"round {r}: page-cache write {ref_gbps:.2f} GB/s, append_batch "
                  f"{log_gbps:.2f} GB/s of bodies ({a.size} B x {a.batch}) = "
                  f"{ratios[-1]:.0%}; CPU s/GB {ref_cpu[-1]:.2f} vs {log_cpu[-1]:.2f}",
                  flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"median: page-cache write {statistics.median(refs):.2f} GB/s, append_batch "
          f"{statistics.median(logs):.2f} GB/s, ratio {statistics.median(ratios):.0%} "
          f"(rounds {', '.join(f'{x:.0%}' for x in ratios)}); CPU s/GB "
          f"{statistics.median(ref_cpu):.2f} vs {statistics.median(log_cpu):.2f}; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
