"""Replica groups for the replicated workloads (`cluster`, `failover`) and bench/bench_cluster.py:
starting replicas on loopback, the load generator that drives them, and the checks afterwards.

BenchCluster   a LocalCluster whose replicas run quorumlog.bench.replica (the unchanged server
               plus counters written on SIGUSR1), so flushes per replica can be read before
               and after a phase without touching the measured path.
start_local    a started group with a leader, killed by pid if it fails to come up.
CpuMeter       user + system CPU of every replica process (from /proc), across restarts.
Load           P producers, one AsyncClient connection each, `window` batches in flight per
               producer; latency per message from the produce call to its acknowledgement
               (majority commit); every acknowledgement recorded with its queue and offset.
read_back      every message of the topic fetched from one member (the leader): each
               acknowledged stamp seen once, with the right bytes, at its acknowledged offset.
compare_logs   the replicas' commit logs byte-identical up to the smallest committed position
               (after a clean stop: the positions come from the checkpoints).
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import json
import os
import signal
import time

import numpy as np

from ..client import AsyncClient
from ..errors import (InvalidQueueError, OffsetOutOfRangeError, QuorumlogError,
                      TopicNotFoundError)
from ..format import decode_checkpoint
from ..localcluster import LocalCluster
from ..node.groups import group_dir
from ..raft.messages import Role
from .measure import next_batch, pid_cpu_seconds, process_cpu_seconds
from .payload import STAMP, Payload, Verifier

TOPIC = "bench"
WARMUP_TOPIC = "bench-warmup"   # connections are made with a message here, not in TOPIC
SEGMENT_BYTES = 256 << 20    # preallocated per replica: small enough for a shared disk
START_TIMEOUT_S = 60.0
LEADER_TIMEOUT_S = 30.0
STATS_TIMEOUT_S = 10.0
CONVERGE_TIMEOUT_S = 60.0
FETCH_MAX_MESSAGES = 4096
FETCH_MAX_BYTES = 8 << 20
MAX_QUEUES = 1024               # read_back probes queues 0, 1, ... up to this many
COMPARE_CHUNK_BYTES = 8 << 20
# The steady-state shape's retention (--steady): every hour is a deletion hour, a segment
# expires a moment after its last write, and retention runs twice a second; it still never
# deletes what is not committed and dispatched (store/retention.py).
STEADY_ENV = {"QUORUMLOG_FILE_RESERVED_HOURS": "0.0003",          # ~1 s
              "QUORUMLOG_DELETE_WHEN": ";".join(f"{h:02d}" for h in range(24)),
              "QUORUMLOG_RETENTION_INTERVAL_MS": "500"}
# the load generator's bodies in memory: producers x window x batch x size
MAX_BUFFER_BYTES = 1 << 30


class BenchCluster(LocalCluster):
    """LocalCluster with replicas that write their counters on SIGUSR1 (bench/replica.py),
    and with `events` set their election steps as they happen (bench/phases.py)."""

    events = False

    def stats_file(self, nid) -> str:
        return os.path.join(self.dir, f"{nid}.stats.json")

    def events_file(self, nid) -> str:
        return os.path.join(self.dir, f"{nid}.events.jsonl")

    def command(self, nid) -> list[str]:
        cmd = super().command(nid)          # [python, -m, quorumlog, serve, ...]
        i = cmd.index("serve")
        extra = ["--events-file", self.events_file(nid)] if self.events else []
        return cmd[:i - 1] + ["quorumlog.bench.replica", "--stats-file", self.stats_file(nid)] \
            + extra + cmd[i + 1:]

    def read_stats(self, nid, timeout: float = STATS_TIMEOUT_S) -> dict | None:
        """Ask a running replica for its counters; None if it is down or does not answer."""
        path = self.stats_file(nid)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        if not self.alive(nid):
            return None
        self.signal(nid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() > deadline or not self.alive(nid):
                return None
            time.sleep(0.01)
        with open(path) as fh:
            return json.load(fh)

    def all_stats(self) -> dict:
        return {nid: self.read_stats(nid) for nid in self.ids}

    def store_dir(self, nid, group: int = 0) -> str:
        """A replica's store directory (group_dir: the replica's own with one group)."""
        return group_dir(self.data_dir(nid), group, self.groups)

    def committed_positions(self, group: int = 0) -> dict:
        """{node id: committed position} from the checkpoints (stopped replicas)."""
        out = {}
        for nid in self.ids:
            with open(os.path.join(self.store_dir(nid, group), "checkpoint"), "rb") as fh:
                out[nid] = decode_checkpoint(fh.read()).committed_position
        return out


def start_local(directory: str, replicas: int, flush: str, *, raft: dict | None = None,
                log_level: str = "INFO", groups: int = 1, events: bool = False,
                steady_mib: int | None = None) -> BenchCluster:
    """Start `replicas` replicas on loopback (ports from the OS) and wait for a leader (of
    every group). On any failure every process started is killed by pid before the error
    propagates. events: the replicas write their election steps (BenchCluster.events).
    steady_mib: the steady-state shape (segments of that size deleted by retention during
    the run, their files reused: STEADY_ENV), instead of a fresh log."""
    # (many groups: one segment each per replica, preallocated: keep the disk use flat)
    seg = max(SEGMENT_BYTES // groups, 16 << 20) if steady_mib is None else steady_mib << 20
    c = BenchCluster(directory, replicas, flush=flush, segment_size_bytes=seg,
                     env=STEADY_ENV if steady_mib is not None else None,
                     raft=raft, log_level=log_level, groups=groups)
    c.events = events
    try:
        c.start()
        c.wait_started(timeout=START_TIMEOUT_S)
        if groups > 1:
            c.wait_group_leaders(timeout=LEADER_TIMEOUT_S)
        else:
            c.wait_leader(timeout=LEADER_TIMEOUT_S)
    except BaseException:
        c.kill_all()
        raise
    return c


class CpuMeter:
    """CPU seconds of each replica over a phase; a killed replica's CPU up to its kill is kept
    and its restarted process counted from the restart."""

    def __init__(self, cluster: BenchCluster):
        self.c = cluster
        self.totals = {nid: 0.0 for nid in cluster.ids}
        self._base: dict = {}

    def _read(self, nid):
        pid = self.c.pid(nid)
        return (pid, pid_cpu_seconds(pid)) if pid is not None else (None, None)

    def start(self) -> None:
        for nid in self.c.ids:
            self.resume(nid)

    def resume(self, nid) -> None:
        self._base[nid] = self._read(nid)

    def pause(self, nid) -> None:
        """Before a kill (or at the end): add what the process used since start/resume."""
        pid0, cpu0 = self._base.pop(nid, (None, None))
        pid1, cpu1 = self._read(nid)
        if pid0 is not None and pid0 == pid1 and cpu0 is not None and cpu1 is not None:
            self.totals[nid] += cpu1 - cpu0

    def stop(self) -> dict:
        for nid in list(self._base):
            self.pause(nid)
        return dict(self.totals)


def client_loop_runner():
    """uvloop.run when uvloop is installed (the replicas use it too), else asyncio.run."""
    try:
        import uvloop
        return uvloop.run, "uvloop"
    except ImportError:
        return asyncio.run, "asyncio"


@dataclasses.dataclass
class Acked:
    """One acknowledged batch: sequence numbers s0 .. s0+n-1 at offsets first_offset .. of
    queue_id; last_position: the commit-log position of its last message."""
    s0: int
    n: int
    queue_id: int
    first_offset: int
    last_position: int


class Load:
    """The load generator: `r.producers` producers, each one AsyncClient (one connection) with
    `r.window` lanes; a lane takes the next batch number from a counter shared by everyone
    (batch b holds sequence numbers b*batch ..), produces it and waits for its
    acknowledgement, so a producer has at most `window` batches in flight. A lane's body
    buffer is rewritten only after its produce returned (the client frames the bodies before
    its first await). The phase ends after `r.count` messages, after `r.duration_s`, or when
    `stop()` is called; batches in flight are acknowledged first.

    on_ack(sent_ns, acked_ns), if given, is called after each acknowledgement (perf_counter_ns
    clock)."""

    def __init__(self, addresses, secret, r, payload: Payload, latency, slots, *,
                 client_kw: dict | None = None, on_ack=None):
        self.addresses = list(addresses)
        self.secret = secret
        self.r = r
        self.payload = payload
        self.latency = latency
        self.slots = slots
        self.client_kw = dict(client_kw or {})
        self.on_ack = on_ack
        self.acked: list[Acked] = []
        self.client_stats = collections.Counter()
        self._stop = False

    def stop(self) -> None:
        self._stop = True

    async def run(self) -> tuple[int, float, float]:
        """-> (messages acknowledged, seconds, CPU seconds of this process)."""
        r = self.r
        clients = [AsyncClient(self.addresses, secret=self.secret, **self.client_kw)
                   for _ in range(r.producers)]
        try:
            # connect every producer to the leader outside the measured phase
            await asyncio.gather(*(c.produce(WARMUP_TOPIC, b"warm-up") for c in clients))
            batches = itertools.count()
            clock = time.perf_counter_ns
            deadline = None if r.duration_s is None else clock() + int(r.duration_s * 1e9)
            count, batch = r.count, r.batch

            async def lane(k):
                c = clients[k]
                buf = self.payload.buffer()
                rec = self.latency.local()
                record = rec.record if batch == 1 else None
                slots, acked, on_ack = self.slots, self.acked, self.on_ack
                try:
                    while not self._stop:
                        if deadline is not None and clock() >= deadline:
                            break
                        got = next_batch(batches, batch, count)
                        if got is None:
                            break
                        s0, n = got
                        bodies = buf.fill(s0, n)
                        t0 = clock()
                        resp = await c.produce(TOPIC, bodies)
                        t1 = clock()
                        if record is not None:
                            record(t1 - t0)
                        else:
                            rec.record_n(t1 - t0, n)
                        acked.append(Acked(s0, n, resp.queue_id, resp.first_queue_offset,
                                           resp.positions[-1] if resp.positions else -1))
                        slots[k] += n
                        if on_ack is not None:
                            on_ack(t0, t1)
                finally:
                    rec.flush()

            cpu0 = process_cpu_seconds()
            t_start = time.perf_counter()
            async with asyncio.TaskGroup() as tg:
                for k in range(r.producers):
                    for _ in range(r.window):
                        tg.create_task(lane(k))
            seconds = time.perf_counter() - t_start
            cpu = process_cpu_seconds() - cpu0
        finally:
            for c in clients:
                self.client_stats.update(c.stats)
                await c.close()
        return sum(a.n for a in self.acked), seconds, cpu

    def acked_ranges(self) -> list:
        return sorted((a.s0, a.n) for a in self.acked)


async def leader_address(addresses, secret, timeout: float = LEADER_TIMEOUT_S) -> str:
    """The client address of the one member that says it leads (polled until `timeout`)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        for a in addresses:
            c = AsyncClient([a], secret=secret, request_timeout=2.0, retry_timeout=2.0)
            try:
                st = await c.status(a)
                if st.role == int(Role.LEADER) and st.leader_id == st.node_id:
                    return a
                last = st
            except Exception as e:  # noqa: BLE001 -- a member down: ask the next one
                last = e
            finally:
                await c.close()
        if time.monotonic() > deadline:
            raise TimeoutError(f"no leader among {addresses} within {timeout} s (last: {last})")
        await asyncio.sleep(0.05)


async def _statuses(addresses, secret) -> list:
    """Each member's AdminResponse, or None for one that does not answer."""
    out = []
    for a in addresses:
        c = AsyncClient([a], secret=secret, request_timeout=2.0, retry_timeout=2.0)
        try:
            out.append(await c.status(a))
        except Exception:  # noqa: BLE001 -- a member down (or starting): None
            out.append(None)
        finally:
            await c.close()
    return out


def _one_leader(sts) -> tuple | None:
    """(term, leader id) when every member answered and follows (or is) one leader."""
    roles = (int(Role.LEADER), int(Role.FOLLOWER))
    if any(s is None or s.role not in roles for s in sts):
        return None
    seen = {(s.term, s.leader_id) for s in sts}
    return seen.pop() if len(seen) == 1 and sts[0].leader_id is not None else None


async def wait_following(addresses, secret, timeout: float = CONVERGE_TIMEOUT_S) -> str:
    """Until every member follows one leader (or is it), in one term, and holds what that
    leader had committed a moment before -> the leader's id: a group whose restarted member
    has rejoined and caught up. A kill before that is a second fault, not a failover: the
    survivors' next commit waits for the lagging one to catch up from the new leader."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        sts = await _statuses(addresses, secret)
        one = _one_leader(sts)
        if one is not None:
            lead = next(s for s in sts if s.node_id == one[1])
            again = await _statuses(addresses, secret)      # (read after the leader's)
            if _one_leader(again) == one and all(
                    s.last_index >= lead.commit_index for s in again):
                return one[1]
        last = [(s.node_id, s.role, s.term, s.leader_id, s.commit_index, s.last_index)
                if s is not None else None for s in sts]
        if time.monotonic() > deadline:
            raise TimeoutError(f"the members did not all follow one leader and hold its "
                               f"commits within {timeout} s: {last}")
        await asyncio.sleep(0.05)


async def max_term(addresses, secret) -> int:
    """The highest Raft term any reachable member reports (elections between two readings:
    the difference; a pre-vote raises no term)."""
    return max([0] + [s.term for s in await _statuses(addresses, secret) if s is not None])


async def wait_converged(addresses, secret, timeout: float = CONVERGE_TIMEOUT_S) -> int:
    """Until every member reports the same commit index (the followers learned the leader's
    commit) -> that index."""
    deadline = time.monotonic() + timeout
    while True:
        idx = set()
        for a in addresses:
            c = AsyncClient([a], secret=secret, request_timeout=2.0, retry_timeout=2.0)
            try:
                idx.add((await c.status(a)).commit_index)
            except Exception:  # noqa: BLE001 -- a member down: not converged yet
                idx.add(None)
            finally:
                await c.close()
        if len(idx) == 1 and None not in idx:
            return idx.pop()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the members' commit indexes did not converge within {timeout} "
                               f"s: {sorted(idx, key=str)}")
        await asyncio.sleep(0.05)


def _expected_offsets(acked: list[Acked]) -> dict:
    """{queue id: array of the sequence number acknowledged at each offset, -1 for none}."""
    top: dict = {}
    for a in acked:
        top[a.queue_id] = max(top.get(a.queue_id, 0), a.first_offset + a.n)
    out = {q: np.full(n, -1, dtype=np.int64) for q, n in top.items()}
    for a in acked:
        out[a.queue_id][a.first_offset:a.first_offset + a.n] = np.arange(a.s0, a.s0 + a.n)
    return out


async def read_back(address, secret, acked: list[Acked], verifier: Verifier) -> dict:
    """Fetch every message of TOPIC from `address`, feed each body to `verifier` and check it
    sits at the offset its batch was acknowledged at -> {"read_from", "misplaced", "queues"}.
    A stamp at an offset where another (or none) was acknowledged counts as misplaced."""
    expected = _expected_offsets(acked)
    misplaced = 0
    queues = 0
    c = AsyncClient([address], secret=secret, request_timeout=30.0, retry_timeout=30.0)
    try:
        for q in range(MAX_QUEUES):
            try:
                lo, hi = await c.offsets(TOPIC, q)
            except (InvalidQueueError, TopicNotFoundError):
                break
            queues += 1
            exp = expected.get(q, np.empty(0, dtype=np.int64))
            # below the queue's min offset: deleted by retention (--steady), not missing
            gone = exp[:lo]
            verifier.retire(gone[gone >= 0])
            off = lo
            while off < hi:
                try:
                    res = await c.fetch(TOPIC, q, off, max_messages=FETCH_MAX_MESSAGES,
                                        max_bytes=FETCH_MAX_BYTES)
                except OffsetOutOfRangeError:
                    # retention (--steady) deleted past `off` meanwhile: go on from its min
                    lo, _ = await c.offsets(TOPIC, q)
                    if lo <= off:
                        raise
                    gone = exp[off:lo]
                    verifier.retire(gone[gone >= 0])
                    off = lo
                    continue
                if not res.messages:
                    raise QuorumlogError(f"{address}: fetch of {TOPIC}/{q} at {off} returned "
                                         f"nothing before the queue's end {hi}")
                for msg in res.messages:
                    body = msg.body
                    verifier.feed(body)
                    o = msg.queue_offset
                    want = int(exp[o]) if o < len(exp) else -1
                    if len(body) < 8 or STAMP.unpack_from(body)[0] != want:
                        misplaced += 1
                off = res.next_offset
    finally:
        await c.close()
    return {"read_from": address, "misplaced": misplaced, "queues": queues}


def compare_logs(cluster: BenchCluster) -> dict:
    """The stopped replicas' commit logs, byte for byte up to the smallest committed position
    (of each group: "groups" lists each one's result, the totals sum them).
    -> {"compared_bytes", "compared_from" (the first position all still hold), "identical",
    "first_difference" (None or "n2 at byte 123")}."""
    if cluster.groups == 1:
        return _compare_group(cluster, 0)
    per = [_compare_group(cluster, g) for g in range(cluster.groups)]
    bad = [f"group {g}: {x['first_difference']}" for g, x in enumerate(per)
           if not x["identical"]]
    return {"compared_bytes": sum(x["compared_bytes"] for x in per), "identical": not bad,
            "first_difference": bad[0] if bad else None, "groups": per,
            "compared_from": min(x["compared_from"] for x in per)}


def _compare_group(cluster: BenchCluster, group: int) -> dict:
    """From the first position every replica still holds: a store on a nearly full disk
    deletes its oldest segments (the 85 % force-clean), each replica at its own moment, and
    a byte no longer held is not a difference (a run on a shared disk at 94 % reported
    "differs at byte 0" for that)."""
    upto = min(cluster.committed_positions(group).values())
    ids = cluster.ids
    files = {nid: _segments(cluster, nid, group) for nid in ids}
    pos = start = max((f[0][0] if f else 0) for f in files.values())
    diff = None
    while pos < upto and diff is None:
        n = min(COMPARE_CHUNK_BYTES, upto - pos)
        ref = _read_at(files[ids[0]], pos, n)
        for nid in ids[1:]:
            other = _read_at(files[nid], pos, n)
            if other != ref:
                k = next((i for i in range(min(len(ref), len(other))) if ref[i] != other[i]),
                         min(len(ref), len(other)))
                diff = f"{nid} differs from {ids[0]} at byte {pos + k}"
                break
        pos += n
    return {"compared_bytes": max(upto - start, 0), "compared_from": start,
            "identical": diff is None, "first_difference": diff}


def _segments(cluster, nid, group: int = 0) -> list:
    d = os.path.join(cluster.store_dir(nid, group), "commitlog")
    return sorted((int(name), os.path.join(d, name)) for name in os.listdir(d)
                  if name.isdigit())


def _read_at(segments, pos: int, n: int) -> bytes:
    """n bytes of the log from `pos` (segments named by their first position); short when the
    log ends sooner."""
    out = bytearray()
    for start, path in segments:
        if len(out) >= n:
            break
        at = pos + len(out)
        size = os.path.getsize(path)
        if not start <= at < start + size:
            continue
        with open(path, "rb") as fh:
            fh.seek(at - start)
            out += fh.read(n - len(out))
    return bytes(out)
