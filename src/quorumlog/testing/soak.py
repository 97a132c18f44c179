"""Soak the Raft core in deterministic simulation: `python -m quorumlog.testing.soak --seeds N`.

Runs seeds start..start+N-1 of the standard mix (sim.sim_options), in parallel worker
processes, and reports violations with the command that replays each one. `--seed S -v`
replays one seed with its full trace. Exit status 1 if any seed failed.

`--bench elections` runs N benign 60 s runs (3 nodes, the core's defaults, TCP-like links with
`--stall` of the messages stalled 200-800 ms, `--lanes` connections per peer pair) and reports
spurious elections and the time without commits per minute; `--bench failover` crashes the
leader in N benign runs and reports crash -> next commit p50/p99 (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import sys
import time

from .sim import (Simulator, benign_faults, failover_run, lagging_power_loss_run, run_seed,
                  silent_ms)


def _one(s, a):
    if a.mix == "lagging-power-loss":
        return lagging_power_loss_run(s, a.flush, recovery=not a.no_recovery,
                                      lying_flush=a.lying_flush, flush_fail=a.flush_fail)
    return run_seed(s, recovery=not a.no_recovery)


def _run_range(args):
    lo, hi, a = args
    # (the cores log recovery at WARNING: thousands of lines over a soak)
    logging.getLogger("quorumlog").setLevel(logging.ERROR)
    bad = []
    events = elections = acked = 0
    mix = {}
    for s in range(lo, hi):
        try:
            r = _one(s, a)
        except Exception as e:   # (a crash of the simulator or the core is a finding too)
            bad.append((s, f"exception: {e!r}"))
            continue
        events += r.events
        elections += r.elections
        acked += r.acked
        for k, v in r.mix.items():
            mix[k] = mix.get(k, 0) + v
        if not r.ok:
            bad.append((s, r.violation))
    return hi - lo, bad, events, elections, acked, mix


def _bench(kind: str, seeds: int, start: int, stall: float, lanes: int) -> int:
    from ..raft.core import RaftConfig
    t0 = time.monotonic()
    bad = 0
    if kind == "elections":
        elections, silent = [], []
        for s in range(start, start + seeds):
            f = benign_faults(stall)
            f.lanes = lanes
            r = Simulator(s, 3, faults=f, config=RaftConfig(), fault_ms=60000, liveness_ms=2000).run()
            bad += not r.ok
            elections.append(r.elections - 1)
            first = r.leader_times[0][0] if r.leader_times else 0
            # from 1 s after the first election to the end of the 60 s: scaled to a minute
            silent.append(silent_ms(r.ack_times, first + 1000, 60000) * 60000 / (59000 - first))
        silent.sort()
        print(f"elections: {seeds} benign runs of 60 s (3 nodes, stall={stall}, lanes={lanes}): "
              f"{sum(elections)} spurious elections ({sum(elections) / seeds:.2f} per minute; "
              f"per run {elections}); seconds without commits per minute: "
              f"mean {sum(silent) / seeds / 1000:.1f}, max {silent[-1] / 1000:.1f}"
              f"{'; VIOLATIONS ' + str(bad) if bad else ''} ({time.monotonic() - t0:.0f}s)")
    else:
        took = []
        for s in range(start, start + seeds):
            f = failover_run(s, stall=stall)
            bad += not f.ok
            took.append(f.failover_ms if f.failover_ms >= 0 else 1 << 30)
        took.sort()
        pct = lambda p: took[min(len(took) - 1, int(len(took) * p))]  # noqa: E731
        print(f"failover: {seeds} leader crashes (3 nodes, stall={stall}): crash -> next commit "
              f"p50 {pct(0.5)} ms, p99 {pct(0.99)} ms, max {took[-1]} ms"
              f"{'; VIOLATIONS ' + str(bad) if bad else ''} ({time.monotonic() - t0:.0f}s)")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m quorumlog.testing.soak", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=1000, help="how many seeds to run")
    p.add_argument("--start", type=int, default=0, help="first seed")
    p.add_argument("--seed", type=int, default=None, help="replay one seed")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("-v", "--verbose", action="store_true", help="with --seed: print the trace")
    p.add_argument("--chunk", type=int, default=200)
    p.add_argument("--bench", choices=("elections", "failover"), default=None,
                   help="measure elections / fail-over in benign runs instead of soaking")
    p.add_argument("--stall", type=float, default=0.01, help="--bench: stalled message share")
    p.add_argument("--lanes", type=int, default=1, help="--bench elections: connections per pair")
    p.add_argument("--no-recovery", action="store_true",
                   help="the driver does not report power losses to the core (shows what the "
                        "checker finds without raft/recovery.py)")
    p.add_argument("--mix", choices=("standard", "lagging-power-loss"), default="standard",
                   help="lagging-power-loss: sim.lagging_power_loss_run (docs/reliability.md, "
                        "finding 4) in --flush mode")
    p.add_argument("--flush", choices=("sync", "async"), default="sync")
    p.add_argument("--lying-flush", type=float, default=0.0,
                   help="--mix lagging-power-loss: share of flushes that report 1-3 entries "
                        "more than they made durable")
    p.add_argument("--flush-fail", type=float, default=0.0,
                   help="--mix lagging-power-loss: share of flushes that fail (the node stops)")
    a = p.parse_args(argv)
    if a.bench:
        return _bench(a.bench, a.seeds, a.start, a.stall, a.lanes)
    if a.seed is not None:
        r = (_one(a.seed, a) if a.mix != "standard" or not a.verbose
             else run_seed(a.seed, trace=True, recovery=not a.no_recovery))
        if a.verbose:
            print("\n".join(r.trace))
        print(f"seed {a.seed}: {'ok' if r.ok else 'VIOLATION'} events={r.events} sim_ms={r.sim_ms} "
              f"elections={r.elections} committed={r.committed} acked={r.acked} "
              f"liveness_after_heal_ms={r.liveness_ms} {r.stats}")
        if not r.ok:
            print(r.violation)
        return 0 if r.ok else 1
    t0 = time.monotonic()
    ranges = [(s, min(s + a.chunk, a.start + a.seeds), a)
              for s in range(a.start, a.start + a.seeds, a.chunk)]
    done = 0
    failures = []
    tot_events = tot_elections = tot_acked = 0
    mix: dict = {}
    with mp.Pool(a.jobs) as pool:
        for n, bad, ev, el, ac, mx in pool.imap_unordered(_run_range, ranges):
            done += n
            tot_events += ev
            tot_elections += el
            tot_acked += ac
            for k, v in mx.items():
                mix[k] = mix.get(k, 0) + v
            for s, v in bad:
                failures.append(s)
                print(f"VIOLATION seed {s}: {v}\n  replay: python -m quorumlog.testing.soak --seed {s} -v",
                      flush=True)
            if done % max(a.chunk * 10, 1) == 0 or done == a.seeds:
                print(f"{done}/{a.seeds} seeds, {len(failures)} violations, "
                      f"{time.monotonic() - t0:.0f}s", flush=True)
    dt = time.monotonic() - t0
    print(f"soak: {a.seeds} seeds from {a.start} in {dt:.1f}s: {len(failures)} violations; "
          f"{tot_events} events, {tot_elections} elections, {tot_acked} acknowledged proposals; "
          + ", ".join(f"{k} {v}" for k, v in sorted(mix.items()))
          + (f"; failing seeds {sorted(failures)[:50]}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
