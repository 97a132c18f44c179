"""Many Raft groups per process (node/host.py): 3 replica processes on loopback hosting G
groups each. Measured after every group elected and the leaders spread:

  * idle CPU of each process over --seconds: the run time of every thread from
    /proc/<pid>/task/*/schedstat (exact, in ns; /proc/<pid>/stat's clock ticks under-count
    short periodic wake-ups), split into the event-loop thread and the others, and the
    times they were scheduled (wake-ups) per second;
  * frames per second between two processes (the control and data connections of n1 to n2,
    as n1's transport counts them -- G = 1: of the leader to a follower; heartbeats and
    their answers are nearly all of it), read in-process from three NodeHosts in one event
    loop (--frames);
  * --kills N: kill -9 of n1 (no load), N times: seconds until every group it led has a
    leader again (polled every 20 ms), then n1 restarted and its groups given back.

    .venv/bin/python bench/bench_groups.py --groups 1 64 [--seconds 20] [--frames]
        [--quiesce on off]      (off: QUORUMLOG_QUIESCE=false, every group ticks)
        [--src DIR]             (the source tree the replica processes run: A/B of a copy)
    .venv/bin/python bench/bench_groups.py --groups 16 --kills 5 --seconds 0

Not a test: nothing here asserts a number. docs/benchmarks.md has the figures measured.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from quorumlog.localcluster import LocalCluster, free_port  # noqa: E402
from quorumlog.node import load_node_config  # noqa: E402
from quorumlog.node.groups import preferred_leader  # noqa: E402
from quorumlog.node.host import NodeHost  # noqa: E402
from quorumlog.raft.messages import Role  # noqa: E402


def thread_times(pid: int) -> dict:
    """tid -> (run time s, times scheduled) of every thread of `pid` (schedstat)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, _wait_ns, slices = f.read().split()[:3]
        except OSError:         # (a thread that ended meanwhile)
            continue
        out[int(tid)] = (int(run_ns) / 1e9, int(slices))
    return out


def _per_second(before: dict, after: dict, pid: int, wall: float) -> dict:
    """CPU % of one core and wake-ups/s, event-loop thread (tid == pid) and the others."""
    loop = [0.0, 0]
    rest = [0.0, 0]
    for tid, (run, n) in after.items():
        run0, n0 = before.get(tid, (0.0, 0))
        acc = loop if tid == pid else rest
        acc[0] += run - run0
        acc[1] += n - n0
    return {"cpu_percent": round((loop[0] + rest[0]) / wall * 100, 2),
            "loop_thread_percent": round(loop[0] / wall * 100, 2),
            "other_threads_percent": round(rest[0] / wall * 100, 2),
            "loop_wakeups_per_s": round(loop[1] / wall), "other_wakeups_per_s": round(rest[1] / wall),
            "threads": len(after)}


def idle_cpu(groups: int, seconds: float, base: str, quiesce: str = "on",
             src: str | None = None) -> dict:
    env = {"QUORUMLOG_QUIESCE": "false"} if quiesce == "off" else {}
    if src is not None:
        env["PYTHONPATH"] = src
    c = LocalCluster(os.path.join(base, f"cpu-g{groups}-{quiesce}"), 3, profile="small",
                     groups=groups, env=env)
    try:
        c.start()
        c.wait_started(timeout=120)
        if groups > 1:
            c.wait_group_leaders(timeout=120)
            with c.client(request_timeout=2, retry_timeout=2) as admin:
                # the balancer has moved every leader to its preferred member (a transfer
                # per member every 500 ms: G = 64 takes ~15 s), so no election is measured
                _wait(lambda: c.group_leaders(admin) == [preferred_leader(g, c.ids)
                                                         for g in range(groups)], 180)
        else:
            c.wait_leader(timeout=60)
        time.sleep(3)
        pids = {n: c.pid(n) for n in c.ids}
        load = os.getloadavg()[0]
        before = {n: thread_times(p) for n, p in pids.items()}
        t0 = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        per = {n: _per_second(before[n], thread_times(p), p, wall) for n, p in pids.items()}
    finally:
        c.stop()
    return {"groups": groups, "quiesce": quiesce, "src": src or "this checkout",
            "cluster_cpu_percent_of_one_core": round(sum(x["cpu_percent"]
                                                         for x in per.values()), 2),
            "per_process": per, "seconds": round(wall, 1),
            "load_average_1m": [round(load, 2), round(os.getloadavg()[0], 2)]}


async def _frames(groups: int, seconds: float, base: str, quiesce: str = "on") -> dict:
    ids = ["n1", "n2", "n3"]
    peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
    hosts = []
    try:
        for i in ids:
            off = {"quiesce": False} if quiesce == "off" else {}
            cfg, rcfg, scfg = load_node_config(None, {}, node_id=i, peers=peers,
                                               secret="s" * 16, groups=groups,
                                               store=dict(profile="small"), **off)
            h = NodeHost(os.path.join(base, f"frames-g{groups}-{quiesce}", i), cfg, rcfg,
                         store_cfg=scfg)
            await h.start()
            hosts.append(h)
        deadline = time.monotonic() + 120
        want = [preferred_leader(g, ids) for g in range(groups)] if groups > 1 else None
        while (hosts[0].leaders() != want if want else None in hosts[0].leaders()):
            assert time.monotonic() < deadline, "leaders not on their preferred members"
            await asyncio.sleep(0.05)
        await asyncio.sleep(3)

        # (G = 1: the leader's link to a follower -- two followers exchange nothing)
        a, b = ("n1", "n2") if groups > 1 else (hosts[0].leaders()[0],
                                                 "n2" if hosts[0].leaders()[0] != "n2" else "n1")
        here = next(h for h in hosts if h.cfg.node_id == a)

        def count():
            st = here.transport.stats()["peers"][b]
            lanes = [st] + ([st["control"]] if st.get("control") else [])
            return sum(x["sent"] + x["received"] for x in lanes)
        n0, t0 = count(), time.monotonic()
        await asyncio.sleep(seconds)
        rate = (count() - n0) / (time.monotonic() - t0)
    finally:
        for h in hosts:
            await h.stop()
    return {"groups": groups, "quiesce": quiesce,
            "link": f"{a}-{b}",
            "frames_per_s_both_ways": round(rate, 1)}


def failover(groups: int, kills: int, base: str) -> dict:
    c = LocalCluster(os.path.join(base, f"kill-g{groups}"), 3, profile="small", groups=groups)
    gaps = []
    try:
        c.start()
        c.wait_started(timeout=120)
        with c.client(request_timeout=2, retry_timeout=2) as admin:
            for _ in range(kills):
                _wait(lambda: c.group_leaders(admin) == [preferred_leader(g, c.ids)
                                                         for g in range(groups)], 120)
                lost = [g for g, x in enumerate(c.group_leaders(admin)) if x == "n1"]
                c.kill("n1")
                t0 = time.monotonic()
                _wait(lambda: all(x not in (None, "n1") for x in c.group_leaders(admin)), 60)
                gaps.append(time.monotonic() - t0)
                print(json.dumps({"groups": groups, "lost": lost,
                                  "reelected_s": round(gaps[-1], 3)}), flush=True)
                c.restart("n1")
    finally:
        c.stop()
    gaps.sort()
    return {"groups": groups, "kills": kills, "reelected_s_median": gaps[len(gaps) // 2],
            "reelected_s_max": gaps[-1]}


def _wait(cond, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.02)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--frames", action="store_true", help="also frames/s (in-process hosts)")
    ap.add_argument("--kills", type=int, default=0, help="kill -9 of n1 this many times")
    ap.add_argument("--quiesce", nargs="+", default=["on"], choices=["on", "off"])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--src", default=None,
                    help="source tree the replica processes import (PYTHONPATH), for A/B")
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="ql-groups-idle-", dir=a.dir)
    for g in a.groups:
        if a.kills:
            print(json.dumps(failover(g, a.kills, base)), flush=True)
        if not a.seconds:
            continue
        for q in a.quiesce if g > 1 else ["on"]:
            print(json.dumps(idle_cpu(g, a.seconds, base, q, a.src)), flush=True)
            if a.frames:
                print(json.dumps(asyncio.run(_frames(g, a.seconds, base, q))), flush=True)
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
