"""The measuring loop shared by the write workloads, and the Result every phase produces.

`run_producers` starts `producers` threads. Each takes the next batch number from a shared
counter (batch b covers sequence numbers b*batch .. b*batch+n-1, so bodies are stamped without
coordination), sends it, and keeps at most `window` sent batches waiting for their
acknowledgement; latency is measured from just before the send to the return of the ack.
The phase ends after `count` messages or `duration_s` seconds (no new batch starts after the
deadline; batches in flight are acknowledged). With a rate (--rate), batches are sent on a
fixed schedule and latency counts from each batch's scheduled time.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import resource
import threading
import time
from typing import Callable, Protocol

from .latency import LatencyRecorder
from .options import Resolved


def process_cpu_seconds() -> float:
    """User + system CPU of this process, all threads."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def pid_cpu_seconds(pid: int) -> float | None:
    """User + system CPU of another process from /proc (None when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class Result:
    """One measured phase: a row of the summary table and an entry of the JSON `results`.

    reference: which machine limit the throughput is compared with: "page_cache_write" and
    "memcpy" (MB/s against GB/s), "fdatasync" (messages/s against one fdatasync per message),
    "loopback_tcp" (MB/s against one TCP stream), "parquet" (a workload's own comparison, with
    reference_ratio set), or None."""
    workload: str
    op: str
    options: dict
    messages: int
    payload_bytes: int
    seconds: float
    latency: dict
    cpu_seconds: dict
    flushes: int | None = None
    integrity: dict | None = None
    reference: str | None = None
    reference_ratio: float | None = None     # set by the workload when it compares two rows
    notes: list = dataclasses.field(default_factory=list)
    # replicated workloads: the node's goal for a run of this shape (goals.py), per replica
    # {role, flushes, appends, duplicates, cpu_seconds}, and failover's kills and gaps
    goal: dict | None = None
    replicas: dict | None = None
    failover: dict | None = None

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def MBps(self) -> float:
        return self.payload_bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    @property
    def msgs_per_flush(self) -> float | None:
        if not self.flushes:
            return None
        return self.messages / self.flushes

    @property
    def ok(self) -> bool:
        return self.integrity is None or bool(self.integrity.get("ok"))


class Sender(Protocol):
    """One producer's connection to the engine.

    send(s0, n) writes sequence numbers s0..s0+n-1 and returns a token; wait(token) returns
    when that batch is acknowledged (for engines whose send already waits: a no-op)."""

    def send(self, s0: int, n: int): ...

    def wait(self, token) -> None: ...


@dataclasses.dataclass
class Driven:
    """What run_producers measured."""
    acked_ranges: list
    messages: int
    seconds: float
    cpu_seconds: float


def next_batch(batches, batch: int, count: int | None) -> tuple[int, int] | None:
    """(first sequence number, messages) of the next batch from the shared counter `batches`,
    or None once `count` messages are handed out."""
    s0 = next(batches) * batch
    if count is None:
        return s0, batch
    if s0 >= count:
        return None
    return s0, min(batch, count - s0)


def run_producers(r: Resolved, make_sender: Callable[[int], Sender],
                  latency: LatencyRecorder, phase) -> Driven:
    """Drive `r.producers` senders as described in the module docstring. The progress
    `phase` gets one counter per producer, raised after each acknowledgement.

    The loop is kept lean (no lock, no allocation per batch beyond the engine call): with
    single-message batches its own cost is part of every measured message."""
    batches = itertools.count()
    stop = threading.Event()
    errors = []
    acked = [[] for _ in range(r.producers)]
    senders = [make_sender(k) for k in range(r.producers)]
    slots = phase.use_slots(r.producers)
    deadline = [float("inf")]
    start_ns = [0]
    count, batch, window = r.count, r.batch, r.window
    # --rate: batch b is due at start + b * batch / rate; its latency counts from then, so a
    # send held up behind a slow acknowledgement shows in the percentiles (no coordinated
    # omission, as wrk2 / OpenMessaging Benchmark measure at a fixed rate)
    ns_per_batch = None if r.rate is None else batch * 1e9 / r.rate

    def produce(k):
        send, wait = senders[k].send, senders[k].wait
        mine = acked[k]
        record = latency.local()
        clock, now = time.perf_counter_ns, time.perf_counter
        inflight = collections.deque()
        try:
            while not stop.is_set() and now() < deadline[0]:
                got = next_batch(batches, batch, count)
                if got is None:
                    break
                s0, n = got
                if ns_per_batch is None:
                    t0 = clock()
                else:
                    t0 = start_ns[0] + int(s0 // batch * ns_per_batch)
                    wait_s = (t0 - clock()) / 1e9
                    if wait_s > 0:
                        time.sleep(wait_s)
                token = send(s0, n)
                if window == 1:
                    wait(token)
                    record.record(clock() - t0)
                    mine.append((s0, n))
                    slots[k] += n
                    continue
                inflight.append((t0, s0, n, token))
                if len(inflight) >= window:
                    t0, s0, n, token = inflight.popleft()
                    wait(token)
                    record.record(clock() - t0)
                    mine.append((s0, n))
                    slots[k] += n
            while inflight:
                t0, s0, n, token = inflight.popleft()
                wait(token)
                record.record(clock() - t0)
                mine.append((s0, n))
                slots[k] += n
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
            errors.append(exc)
            stop.set()
        finally:
            record.flush()

    threads = [threading.Thread(target=produce, args=(k,), name=f"bench-producer-{k}",
                                daemon=True) for k in range(r.producers)]
    cpu0 = process_cpu_seconds()
    t_start = time.perf_counter()
    start_ns[0] = time.perf_counter_ns()
    if r.duration_s is not None:
        deadline[0] = t_start + r.duration_s
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        # Ctrl-C: let every producer finish its call before the store is closed under it
        stop.set()
        for t in threads:
            t.join()
        raise
    seconds = time.perf_counter() - t_start
    cpu = process_cpu_seconds() - cpu0
    if errors:
        raise errors[0]
    ranges = sorted(itertools.chain.from_iterable(acked))
    return Driven(acked_ranges=ranges, messages=sum(n for _, n in ranges), seconds=seconds,
                  cpu_seconds=cpu)
