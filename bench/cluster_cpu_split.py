"""Where the CPU per MB of `quorumlog bench cluster` goes, per process: `perf record` of the
bench process and its three replicas in the middle of a run, each sample sorted by its stack
into kernel copies (page cache, sockets), page faults, CRC32C, the interpreter, numpy, ...,
printed as % of all samples per process (bench, leader = the busiest replica, followers).
Needs perf. Issue 20's CPU-per-MB split in docs/benchmarks.md was made with it.

    python bench/cluster_cpu_split.py OUT_PREFIX [quorumlog bench cluster options...]
    python bench/cluster_cpu_split.py --report OUT_PREFIX      # classify a recorded run again
"""
import collections
import os
import subprocess
import sys
import time

DURATION_S = 16          # the bench's measured phase
SETTLE_S = 6             # after the replicas appear: start-up, election, warm-up produce
RECORD_S = 8
RATE_HZ = 999

# (category, test on the stack's symbols) in order: the first that matches wins
KERNEL = [
    ("k: page-cache write copy", lambda j, leaf: "generic_perform_write" in j and "copy" in leaf),
    ("k: tcp send copy", lambda j, leaf: "tcp_sendmsg" in j and "copy" in leaf),
    ("k: tcp recv copy", lambda j, leaf: "tcp_recvmsg" in j and "copy" in leaf),
    ("k: anon page fault/zero", lambda j, leaf: "do_anonymous_page" in j or "clear_page" in leaf),
    ("k: other page fault", lambda j, leaf: "exc_page_fault" in j),
    ("k: ext4/page-cache other", lambda j, leaf: "generic_perform_write" in j or "ext4" in j),
    ("k: msync/fsync", lambda j, leaf: "msync" in j or "fsync" in j),
    ("k: tcp/net stack", lambda j, leaf: any(s in j for s in (
        "tcp_sendmsg", "tcp_recvmsg", "__dev_queue_xmit", "net_rx", "tcp_v4_rcv", "sock_read"))),
    ("k: epoll/futex/sched", lambda j, leaf: any(s in j for s in (
        "epoll", "futex", "schedule", "nanosleep"))),
]
USER = [("libc memcpy", "libc", ("memmove", "memcpy")), ("libc malloc", "libc", ("malloc", "free")),
        ("libc other", "libc", ()), ("python interp", "libpython", ()),
        ("C crc32c", "_commitlog", ("crc32c",)), ("C commitlog", "_commitlog", ()),
        ("C consumequeue", "_consumequeue", ()), ("C codec/frame", "_wirecodec", ()),
        ("C codec/frame", "_clientframe", ()), ("numpy", "multiarray", ()),
        ("uvloop", "loop.cpython", ())]


def classify(stack) -> str:
    leaf, ldso = stack[0]
    if "kallsyms" in ldso:
        j = " ".join(s for s, _ in stack)
        user = next((s for s, d in stack if "kallsyms" not in d), "")
        if "exc_page_fault" in j and any(x in user for x in ("fold_update", "crc32c",
                                                              "verify_record")):
            # a log page read (and CRC-checked) for the first time through the mapping:
            # the leader reading what it wrote with pwritev, for its APPENDs
            return "k: page fault, log read"
        return next((name for name, test in KERNEL if test(j, leaf)), "k: other")
    for name, dso, leaves in USER:
        if dso in ldso and (not leaves or any(x in leaf for x in leaves)):
            return name
    return "other: " + ldso.rsplit("/", 1)[-1][:24]


def samples(perf_file: str):
    out = subprocess.run(["perf", "script", "-i", perf_file, "-F", "pid,tid,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    for block in out.split("\n\n"):
        lines = [ln.strip() for ln in block.strip().split("\n") if ln.strip()]
        if len(lines) < 2:
            continue
        pid, tid = lines[0].split()[0].split("/")
        stack = []
        for ln in lines[1:]:
            parts = ln.split(None, 1)
            if len(parts) == 2:
                sym, _, dso = parts[1].rpartition(" (")
                stack.append((sym.split("+")[0], dso.rstrip(")")))
        if stack:
            yield pid, tid, stack


def report(prefix: str) -> None:
    bench = open(prefix + ".pids").readline().split()[1].split(",")[0]
    counts = collections.defaultdict(collections.Counter)
    for pid, tid, stack in samples(prefix + ".perf"):
        cat = classify(stack)
        counts[pid][cat] += 1
        counts[pid]["(other threads)"] += pid != tid
        if pid == tid:
            counts[pid + "/main"][cat] += 1
    tot = {p: sum(v for k, v in c.items() if k != "(other threads)") for p, c in counts.items()
           if "/" not in p}
    order = [bench] + sorted((p for p in tot if p != bench), key=lambda p: -tot[p])
    names = ["bench", "leader"] + [f"follower{i}" for i in range(1, len(order) - 1)]
    n = sum(tot.values())
    cats = sorted({k for p in tot for k in counts[p]}, key=lambda k: -sum(
        counts[p][k] for p in tot))
    print(f"{'% of all samples':26s}" + "".join(f"{x:>10s}" for x in names) + f"{'all':>8s}")
    for k in cats + ["total"]:
        vals = [tot[p] if k == "total" else counts[p][k] for p in order]
        print(f"{k:26s}" + "".join(f"{100 * v / n:10.1f}" for v in vals) +
              f"{100 * sum(vals) / n:8.1f}")
    print(f"samples: {n}")
    _report_threads(counts, order, names, n)


def _report_threads(counts, order, names, n) -> None:
    """Each process's main thread (the event loop) against its other threads (the store's
    timer, the flusher, the segment preparer), % of all samples, with the main thread's
    largest rows: what per-request work on the loop can save at most."""
    for name, p in zip(names, order):
        c = counts[p]
        total = sum(v for k, v in c.items() if k != "(other threads)")
        main = counts.get(p + "/main", collections.Counter())
        top = ", ".join(f"{k} {100 * v / n:.1f}" for k, v in main.most_common(5))
        print(f"{name:10s} main thread {100 * sum(main.values()) / n:5.1f} %, other threads "
              f"{100 * (total - sum(main.values())) / n:5.1f} %; main: {top}")


def record(prefix: str, bench_args: list) -> None:
    cmd = [sys.executable, "-m", "quorumlog", "bench", "--no-references", "--warm-gib", "0",
           "--json", prefix + ".json", "cluster", "--duration", str(DURATION_S), *bench_args]
    with open(prefix + ".log", "w") as log:
        bench = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        replicas = []
        while len(replicas) < 3 and time.monotonic() < deadline and bench.poll() is None:
            time.sleep(0.2)
            replicas = subprocess.run(["pgrep", "-P", str(bench.pid), "-f", "bench.replica"],
                                      capture_output=True, text=True).stdout.split()
        if len(replicas) < 3:
            raise SystemExit(f"the replicas did not start (see {prefix}.log)")
        time.sleep(SETTLE_S)
        pids = ",".join([str(bench.pid)] + replicas)
        with open(prefix + ".pids", "w") as fh:
            fh.write(f"pids {pids}\n")
        subprocess.run(["perf", "record", "-F", str(RATE_HZ), "-g", "-p", pids, "-o",
                        prefix + ".perf", "--", "sleep", str(RECORD_S)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        bench.wait(timeout=DURATION_S + 120)
    finally:
        if bench.poll() is None:
            os.kill(bench.pid, 9)
            bench.wait()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--report":
        report(sys.argv[2])
    elif len(sys.argv) >= 2:
        record(sys.argv[1], sys.argv[2:])
        subprocess.run(["tail", "-4", sys.argv[1] + ".log"])
        report(sys.argv[1])
    else:
        raise SystemExit(__doc__)
