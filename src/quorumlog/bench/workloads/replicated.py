"""The replicated workloads: `cluster` (a replica group under load) and `failover` (the same
while the leader is SIGKILLed every few seconds). The group, the load generator and the checks
are in bench/cluster.py.

cluster   --replicas replicas started on loopback (ports from the OS; every process stopped
          by pid when the run ends, unless --keep) or running ones (--connect, with
          --secret-file); --producers client connections with --window batches of --batch
          in flight each; a put is acknowledged after majority commit (flush per --flush).
          --keep keeps the directory and leaves the replicas running (restarted after the log
          comparison, which needs a clean stop).
          Latency per message: from the produce call to its acknowledgement (the messages of
          a batch share their batch's). Flushes and appends per replica are read from the
          replicas before and after the phase (SIGUSR1, bench/replica.py), CPU from /proc.
failover  the cluster workload while the leader is SIGKILLed every --kill-every seconds,
          --kills times, and restarted once the group acknowledged again. The gap of a kill:
          from the SIGKILL to the acknowledgement of the first put sent after it (a put the
          old leader had acknowledged says nothing about the new one); per kill and
          p50 / p99 / max (nearest rank: with few kills p99 is the largest).

Integrity (both): every acknowledged message is fetched back from the leader, once, with its
bytes, at the queue offset it was acknowledged at (retries are idempotent -- producer id +
sequence -- so a retried batch must not appear twice); and the replicas' commit logs are
byte-identical up to the smallest committed position, which must cover every acknowledged
message. With --connect the logs are not reachable: only the first check runs (a note says so).
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
import signal
import time

from ...errors import ConfigError
from ...net.messages import MAX_PRODUCER_IN_FLIGHT
from ...node.config import NodeConfig, read_secret
from ...node.groups import group_of
from ..cluster import (SEGMENT_BYTES, START_TIMEOUT_S, TOPIC, BenchCluster, CpuMeter, Load, MAX_BUFFER_BYTES,
                       client_loop_runner, compare_logs, leader_address, read_back, start_local,
                       max_term, wait_converged, wait_following)
from ..goals import cluster_goal, failover_goal
from ..latency import LatencyRecorder
from ..phases import (PHASES, describe, kill_phases, leader_changes, medians, read_events,
                      same_clock, stray_elections)
from ..measure import Result
from ..options import BenchOptionError, Resolved
from ..payload import Payload, Verifier
from . import RunContext, Workload, register

# failover: how long a kill may go unanswered, and load after the last kill's restart
ACK_AFTER_KILL_TIMEOUT_S = 60.0
TAIL_S = 1.0
# the failover's producers: a request to a dead leader gives up after this and is retried
# (same producer id and sequence) on the next member
FAILOVER_CLIENT = {"request_timeout": 2.0, "retry_timeout": 120.0}


def _read_secret(path: str) -> str:
    try:
        return read_secret(NodeConfig(secret_file=path))
    except ConfigError as e:
        raise BenchOptionError(f"--secret-file: {e}") from None


def _check_common(r: Resolved) -> None:
    if r.window > MAX_PRODUCER_IN_FLIGHT:
        raise BenchOptionError(f"--window {r.window}: an idempotent producer keeps at most "
                               f"{MAX_PRODUCER_IN_FLIGHT} batches in flight (what a leader "
                               "remembers per producer; docs/node.md)")
    held = r.producers * r.window * r.batch * r.size
    if held > MAX_BUFFER_BYTES:
        raise BenchOptionError(f"--producers {r.producers} x --window {r.window} x --batch "
                               f"{r.batch} x --size {r.size} = {held} bytes of bodies in "
                               f"flight > {MAX_BUFFER_BYTES}")


def _replica_rows(cluster: BenchCluster, before: dict, after: dict, cpu: dict,
                  leader_id: str | None) -> dict:
    out = {}
    for nid in cluster.ids:
        b, a = before.get(nid), after.get(nid)
        row = {"role": "leader" if nid == leader_id else "follower",
               "cpu_seconds": cpu.get(nid), "flushes": None, "appends": None,
               "duplicates": None}
        if a and b and a["pid"] == b["pid"] and a["commitlog"] and b["commitlog"]:
            row["flushes"] = a["commitlog"]["flushes"] - b["commitlog"]["flushes"]
            row["appends"] = a["commitlog"]["appends"] - b["commitlog"]["appends"]
            row["duplicates"] = a["duplicates"] - b["duplicates"]
            # new segments written into a file retention freed (the --steady shape)
            row["segments_recycled"] = (a["commitlog"].get("segments_recycled", 0)
                                        - b["commitlog"].get("segments_recycled", 0))
        out[nid] = row
    return out


def _compared_end(logs: dict) -> int:
    """The log position the replicas' comparison reached (compare_logs)."""
    return logs["compared_from"] + logs["compared_bytes"]


def _integrity(verifier: Verifier, rb: dict, logs: dict | None, acked) -> dict:
    out = verifier.result()
    out["method"] += ("; each at its acknowledged queue offset, fetched from the leader"
                      + ("; replicas' commit logs byte-identical up to the committed position"
                         if logs is not None else ""))
    out["read_from"] = rb["read_from"]
    out["misplaced"] = rb["misplaced"]
    out["ok"] = out["ok"] and rb["misplaced"] == 0
    if logs is not None and "groups" in logs:
        # many groups: positions are per group's log (the queue says which group)
        covered = all(a.last_position < _compared_end(logs["groups"][group_of(
            TOPIC, a.queue_id, len(logs["groups"]))]) for a in acked)
        out["replica_logs"] = {**logs, "covers_acknowledged": covered}
        out["ok"] = out["ok"] and logs["identical"] and covered
    elif logs is not None:
        last = max((a.last_position for a in acked), default=-1)
        covered = last < _compared_end(logs)
        out["replica_logs"] = {**logs, "covers_acknowledged": covered}
        out["ok"] = out["ok"] and logs["identical"] and covered
    return out


class _Run:
    """One replicated run: the group (started or connected), then measure, check, stop."""

    def __init__(self, workload: Workload, r: Resolved, ctx: RunContext):
        self.w, self.r, self.ctx = workload, r, ctx
        self.cluster: BenchCluster | None = None
        self.path = None
        self.runner, self.loop_name = client_loop_runner()
        if r.connect:
            self.addresses = list(r.connect)
            self.secret = _read_secret(ctx.secret_file) if ctx.secret_file else None
        else:
            self.addresses, self.secret = [], None

    def start(self) -> None:
        if self.r.connect:
            return
        r = self.r
        self.path = self.ctx.new_dir(f"{self.w.name}-{r.flush}-p{r.producers}-b{r.batch}"
                                     f"-w{r.window}")
        # failover: the replicas write their election steps (bench/phases.py); the cluster
        # rows' replicas run the measured path untouched
        self.cluster = start_local(self.path, r.replicas, r.flush, groups=r.groups,
                                   events=self.w.name == "failover",
                                   steady_mib=r.steady_mib)
        self.addresses = self.cluster.client_addresses()
        self.secret = self.cluster.secret()

    def events(self) -> list:
        """Every replica's election steps so far (bench/phases.py)."""
        c = self.cluster
        return read_events(c.events_file(n) for n in c.ids) if c is not None else []

    def node_of(self, address: str) -> str | None:
        if self.cluster is None:
            return None
        return next((n for n, a in self.cluster.clients.items() if a == address), None)

    def check(self, load: Load, verifier: Verifier) -> tuple[dict, str | None]:
        """Read back from the leader, then (started groups) stop and compare the logs."""
        run = self.runner
        leader = run(leader_address(self.addresses, self.secret))
        rb = run(read_back(leader, self.secret, load.acked, verifier))
        logs = None
        if self.cluster is not None:
            run(wait_converged(self.addresses, self.secret))
            # a clean stop writes each replica's final checkpoint (its committed position);
            # running replicas write it only now and then. --keep restarts them (close()).
            self.cluster.stop()
            logs = compare_logs(self.cluster)
        return _integrity(verifier, rb, logs, load.acked), self.node_of(leader)

    def close(self) -> None:
        c = self.cluster
        if c is None:
            return
        if self.ctx.keep:
            for n in c.ids:
                if not c.alive(n):
                    c.start_node(n)
            c.wait_started(timeout=START_TIMEOUT_S)
            pids = ", ".join(f"{n} pid {c.pid(n)} on {c.clients[n]}" for n in c.ids)
            self.ctx.progress.note(f"{self.w.name}: replicas kept running in {c.dir} "
                                   f"(restarted after the log comparison): {pids}")
            return
        c.stop()           # SIGTERM by pid, SIGKILL whoever does not exit in time
        self.ctx.remove(self.path)

    def notes(self, load: Load) -> list:
        n = [f"client event loop: {self.loop_name}; client retries "
             f"{load.client_stats.get('retries', 0)}, redirects "
             f"{load.client_stats.get('redirects', 0)}"]
        if self.r.connect:
            n.append(f"running replicas at {', '.join(self.r.connect)}: no CPU or flush "
                     "counts, and their logs are not compared (not reachable from here)")
        return n


def _result(w, r, load: Load, latency, seconds, bench_cpu, replicas, integrity, notes, **kw):
    messages = sum(a.n for a in load.acked)
    cpu = {"bench": bench_cpu}
    if replicas:
        cpu.update({nid: row["cpu_seconds"] for nid, row in replicas.items()
                    if row["cpu_seconds"] is not None})
    op = "produce" if r.batch == 1 and r.window == 1 else f"produce b{r.batch} w{r.window}"
    return Result(workload=w.name, op=op, options=r.as_dict(), messages=messages,
                  payload_bytes=messages * r.size, seconds=seconds, latency=latency.summary(),
                  cpu_seconds=cpu, integrity=integrity, reference="loopback_tcp",
                  replicas=replicas, notes=notes, **kw)


class _Replicated(Workload):
    segment_bytes = SEGMENT_BYTES

    def check(self, r: Resolved) -> None:
        _check_common(r)

    def describe(self, r):
        where = f"connect={','.join(r.connect)}" if r.connect else f"replicas={r.replicas}"
        return (super().describe(r) + f" producers={r.producers} window={r.window} {where}")


@register
class ClusterWorkload(_Replicated):
    """A replica group under load: --replicas replicas started on loopback (or running ones:
    --connect host:port,... with --secret-file), --producers client connections with --window
    batches of --batch messages in flight each, every message acknowledged after majority
    commit (flush per --flush). Latency per message from the produce call to its
    acknowledgement (a batch's messages share its latency). Reports flushes and CPU per
    replica; afterwards every acknowledged message is fetched from the leader and checked
    at its acknowledged offset, and the replicas' logs compared byte for byte."""
    name = "cluster"
    summary = "N replicas on loopback (or --connect), P producer connections, majority acks"
    defaults = {"duration_s": 10.0, "batch": 256, "producers": 2, "window": 8,
                "flush": "async", "replicas": 3}
    uses = frozenset({"size", "count", "duration_s", "producers", "batch", "window", "flush",
                      "replicas", "connect", "secret_file", "groups", "steady_mib"})

    def run(self, r: Resolved, ctx: RunContext) -> list:
        if r.connect:           # the replicas are the ones named

            r = dataclasses.replace(r, replicas=len(r.connect))
        run = _Run(self, r, ctx)
        payload = Payload(r.size, r.batch, r.seed)
        latency = LatencyRecorder("message")
        try:
            run.start()
            c = run.cluster
            ctx.warm(None if r.count is None else r.count * r.size)
            before = c.all_stats() if c else {}
            cpu = CpuMeter(c) if c else None
            with ctx.progress.phase(self.describe(r), r.count, r.duration_s) as ph:
                load = Load(run.addresses, run.secret, r, payload, latency,
                            ph.use_slots(r.producers), client_kw={"groups": r.groups})
                if cpu:
                    cpu.start()
                term0 = run.runner(max_term(run.addresses, run.secret))
                _, seconds, bench_cpu = run.runner(load.run())
                elections = run.runner(max_term(run.addresses, run.secret)) - term0
                replica_cpu = cpu.stop() if cpu else {}
            after = c.all_stats() if c else {}
            verifier = Verifier(payload, load.acked_ranges())
            integrity, leader_id = run.check(load, verifier)
            replicas = _replica_rows(c, before, after, replica_cpu, leader_id) if c else None
        finally:
            run.close()
        res = _result(self, r, load, latency, seconds, bench_cpu, replicas, integrity,
                      run.notes(load))
        res.notes.append(f"terms begun during the run (elections, spurious ones: no kills "
                         f"here): {elections}")
        if replicas and leader_id in replicas:
            res.flushes = replicas[leader_id]["flushes"]
            res.notes.append("flushes: the leader's; per replica: " + ", ".join(
                f"{n} {row['flushes']}" for n, row in replicas.items()))
        lat = res.latency
        res.goal = cluster_goal(r, MBps=res.MBps, msgs_per_s=res.msgs_per_s,
                                p50_us=lat["p50_us"])
        return [res]


@register
class FailoverWorkload(_Replicated):
    """The cluster workload while the leader is SIGKILLed every --kill-every seconds, --kills
    times, each time restarted once the group acknowledged again. Reports per kill the gap
    from the SIGKILL to the acknowledgement of the first put sent after it, and p50 / p99 /
    max; afterwards every acknowledged message must be there exactly once (retries keep
    their producer id and sequence), and the replicas' logs byte-identical."""
    name = "failover"
    summary = "the cluster under load, leader SIGKILLed every T s; gap from kill to next ack"
    defaults = {"batch": 64, "producers": 2, "window": 4, "flush": "async", "replicas": 3,
                "kills": 3, "kill_every_s": 4.0}
    uses = frozenset({"size", "producers", "batch", "window", "flush", "replicas", "kills",
                      "kill_every_s"})
    # windows of 64-message batches between kills: ~15 MB/s measured (10 kills, 882,432 acked)
    write_rate_bound = 32 << 20

    def check(self, r: Resolved) -> None:
        super().check(r)
        if r.replicas < 3:
            raise BenchOptionError(f"--replicas {r.replicas}: failover needs at least 3 "
                                   "(a majority must survive the kill)")

    def describe(self, r):
        return (f"failover {r.flush} size={r.size} batch={r.batch} producers={r.producers} "
                f"window={r.window} replicas={r.replicas} kills={r.kills} every "
                f"{r.kill_every_s:g} s")

    def run(self, r: Resolved, ctx: RunContext) -> list:
        run = _Run(self, r, ctx)
        payload = Payload(r.size, r.batch, r.seed)
        latency = LatencyRecorder("message")
        kills: list[dict] = []
        trace: list = []            # the producers' request steps (bench/phases.py)
        try:
            run.start()
            c = run.cluster
            cpu = CpuMeter(c)
            clock = time.perf_counter_ns

            def on_trace(event, address, detail):
                trace.append((clock(), event, address, detail))

            def on_ack(sent_ns, acked_ns):
                k = kills[-1] if kills else None
                if k is not None and k["gap_ns"] is None and sent_ns > k["t_ns"]:
                    k["gap_ns"] = acked_ns - k["t_ns"]

            with ctx.progress.phase(self.describe(r), None,
                                    r.kill_every_s * (r.kills + 1)) as ph:
                load = Load(run.addresses, run.secret, r, payload, latency,
                            ph.use_slots(r.producers),
                            client_kw=dict(FAILOVER_CLIENT, trace=on_trace), on_ack=on_ack)

                async def main():
                    task = asyncio.get_running_loop().create_task(load.run())
                    try:
                        await _kill_loop(run, c, cpu, r, kills, task)
                    finally:
                        load.stop()
                    return await task

                cpu.start()
                t0_ns = clock()
                _, seconds, bench_cpu = run.runner(main())
                t1_ns = clock()
                replica_cpu = cpu.stop()
            verifier = Verifier(payload, load.acked_ranges())
            integrity, leader_id = run.check(load, verifier)
            replicas = _replica_rows(c, {}, {}, replica_cpu, leader_id)
            events = run.events()
        finally:
            run.close()
        phases = [kill_phases(k, events, trace, c.clients) for k in kills]
        gaps = [None if k["gap_ns"] is None else k["gap_ns"] / 1e9 for k in kills]
        summary = _gap_summary(gaps)
        res = _result(self, r, load, latency, seconds, bench_cpu, replicas, integrity,
                      run.notes(load))
        elections = leader_changes(events, t0_ns, t1_ns)
        res.failover = {"kills": [{"node": k["node"], "at_s": k["at_s"],
                                   "gap_s": g, "restart_s": k["restart_s"],
                                   "settle_s": k["settle_s"], "phases_ms": p}
                                  for k, g, p in zip(kills, gaps, phases)], **summary,
                        "phase_medians_ms": medians(phases), "elections": elections}
        res.goal = failover_goal(r, summary["gap_p99_s"])
        res.notes.append("kill -> next ack: " + ", ".join(
            f"{k['node']} {_ms(g)}" for k, g in zip(kills, gaps)) + "; " + ", ".join(
            f"{p} {_ms(summary['gap_' + p + '_s'])}" for p in ("p50", "p99", "max")))
        med = res.failover["phase_medians_ms"]
        res.notes.append("phase medians (ms; bench/phases.py): " + ", ".join(
            f"{p} {med[p]}" for p in PHASES) + f"; pre-vote rounds {med['pre_vote_rounds']}, "
            f"vote rounds {med['vote_rounds']}, client errors {med['client_errors']}, backoff "
            f"sleeps {med['sleeps']} ({med['slept_ms']} ms); leader elections during the run "
            f"{elections} for {len(kills)} kills")
        res.notes.append("phases per kill: " + describe(phases))
        # (session 21: it grew with the log, 0.7 -> 12 s, until a start stopped reading it all)
        res.notes.append("killed replica's restart (s, spawn -> serving): " + ", ".join(
            "-" if k["restart_s"] is None else f"{k['restart_s']:.2f}" for k in kills))
        stray = stray_elections(events, kills, t0_ns, t1_ns)
        if stray:
            res.notes.append("elections outside the kills' gaps (ms after the kill before, "
                             "node, term): " + ", ".join(map(str, stray)))
        if not same_clock():
            res.notes.append("phases: the replicas' and the bench's clocks differ here; "
                             "the phases are not comparable")
        return [res]


def _ms(seconds) -> str:
    return "none" if seconds is None else f"{seconds * 1e3:,.0f} ms"


async def _kill_loop(run: _Run, c: BenchCluster, cpu: CpuMeter, r: Resolved, kills: list,
                     load_task: asyncio.Task) -> None:
    """Kill the leader every r.kill_every_s seconds (r.kills times), each time waiting for the
    next acknowledgement and restarting the killed replica; then TAIL_S more of load."""
    clock = time.perf_counter_ns
    t0 = time.monotonic()
    next_kill = t0
    for i in range(r.kills):
        # kill_every_s after the last kill, and only once the group is whole again (the
        # replica killed last restarted, follows the leader and caught up: on a loaded
        # machine that can take seconds, and a kill before is a second fault -- the new
        # leader's first commit would wait for it to catch up)
        t_settle = time.monotonic()
        await wait_following(run.addresses, run.secret)
        settle_s = time.monotonic() - t_settle
        next_kill = max(next_kill + r.kill_every_s, time.monotonic())
        await _sleep_until(next_kill, load_task)
        leader = await leader_address(run.addresses, run.secret)
        nid = run.node_of(leader)
        cpu.pause(nid)
        k = {"node": nid, "t_ns": clock(), "at_s": time.monotonic() - t0, "gap_ns": None,
             "restart_s": None, "settle_s": settle_s}
        kills.append(k)
        c.signal(nid, signal.SIGKILL)         # now; reaped off the loop below
        await asyncio.to_thread(c.kill, nid)
        deadline = time.monotonic() + ACK_AFTER_KILL_TIMEOUT_S
        while k["gap_ns"] is None and time.monotonic() < deadline and not load_task.done():
            await asyncio.sleep(0.005)
        t_restart = time.monotonic()
        await asyncio.to_thread(c.restart, nid)
        k["restart_s"] = time.monotonic() - t_restart
        cpu.resume(nid)
    await _sleep_until(time.monotonic() + TAIL_S, load_task)


async def _sleep_until(when: float, load_task: asyncio.Task) -> None:
    while time.monotonic() < when and not load_task.done():
        await asyncio.sleep(min(0.05, max(0.0, when - time.monotonic())))
    if load_task.done():
        load_task.result()        # the load failed: raise its error here


def _nearest_rank(values: list, p: float):
    if not values or any(v is None for v in values):
        return None            # a kill never answered: no finite percentile
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def _gap_summary(gaps: list) -> dict:
    return {"gap_p50_s": _nearest_rank(gaps, 50), "gap_p99_s": _nearest_rank(gaps, 99),
            "gap_max_s": _nearest_rank(gaps, 100)}
