"""The `store` and `commit` workloads: the single-node MessageStore (quorumlog.open) as a broker
embeds it.

store   put_batch (put with --batch 1) from --producers threads, async or sync flush, then
        every queue read back with get() (batches of GET_BATCH), timed as its own row.
commit  sync group commit: --producers threads (default 8) each doing single puts that return
        only once a flush covers them; the flush count shows how many puts shared each flush.

Latency is per put_batch call ("batch of N") or per put ("message"), from the call to its
return (async: in the page cache and dispatched; sync: flushed). get latency is per get() call.
"""
from __future__ import annotations

import time

from ... import open as open_store
from ..latency import LatencyRecorder
from ..measure import Result, process_cpu_seconds, run_producers
from ..options import BenchOptionError, Resolved
from ..payload import Payload, Verifier
from . import RunContext, Workload, register
from .log import RECORD_OVERHEAD, SEGMENT_BYTES

TOPIC = "bench"
QUEUES = 8
GET_BATCH = 32


class _StoreSender:
    def __init__(self, store, payload: Payload, batch: int):
        self._store = store
        self._buf = payload.buffer()
        self._single = batch == 1

    def send(self, s0, n):
        bodies = self._buf.fill(s0, n)
        if self._single:
            self._store.put(TOPIC, bodies[0])
        else:
            self._store.put_batch(TOPIC, bodies)

    def wait(self, token):
        pass          # put and put_batch return acknowledged


def read_back(store, verifier: Verifier, latency: LatencyRecorder | None = None) -> tuple:
    """get() every queue of the topic from its first offset and feed each body to `verifier`.
    Returns (messages, seconds spent in get calls and body copies); verification is not
    timed."""
    n = 0
    timed = 0.0
    clock = time.perf_counter_ns
    for q in range(store.topics()[TOPIC]):
        off, end = store.min_offset(TOPIC, q), store.max_offset(TOPIC, q)
        while off < end:
            t0 = clock()
            bodies = [m.body for m in store.get(TOPIC, q, off, GET_BATCH)]
            took = clock() - t0
            if not bodies:
                raise RuntimeError(f"get({TOPIC!r}, {q}, {off}) returned nothing before the "
                                   f"queue's end {end}")
            timed += took
            if latency is not None:
                latency.record(took)
            for b in bodies:
                verifier.feed(b)
            off += len(bodies)
            n += len(bodies)
    return n, timed / 1e9


def _run_store(workload: Workload, r: Resolved, ctx: RunContext, *, with_get: bool) -> list:
    path = ctx.new_dir(f"{workload.name}-{r.flush}-b{r.batch}")
    payload = Payload(r.size, r.batch, r.seed)
    latency = LatencyRecorder("message" if r.batch == 1 else f"batch of {r.batch}")
    store = open_store(path, flush=r.flush, segment_size_bytes=SEGMENT_BYTES)
    results = []
    try:
        store.create_topic(TOPIC, QUEUES)
        ctx.warm(None if r.count is None else r.count * (r.size + RECORD_OVERHEAD))
        flushes0 = store.commitlog.stats()["flushes"]
        with ctx.progress.phase(workload.describe(r), r.count, r.duration_s) as ph:
            driven = run_producers(r, lambda k: _StoreSender(store, payload, r.batch),
                                   latency, ph)
        flushes = store.commitlog.stats()["flushes"] - flushes0
        verifier = Verifier(payload, driven.acked_ranges)
        get_latency = LatencyRecorder(f"get of up to {GET_BATCH}") if with_get else None
        cpu0 = process_cpu_seconds()
        read, get_s = read_back(store, verifier, get_latency)
        get_cpu = process_cpu_seconds() - cpu0
    finally:
        store.close()
        ctx.remove(path)
    op = "put" if r.batch == 1 else "put_batch"
    results.append(Result(workload=workload.name, op=op, options=r.as_dict(),
                          messages=driven.messages, payload_bytes=driven.messages * r.size,
                          seconds=driven.seconds, latency=latency.summary(),
                          cpu_seconds={"bench": driven.cpu_seconds}, flushes=flushes,
                          integrity=verifier.result(),
                          reference="page_cache_write" if r.flush == "async" else "fdatasync"))
    if with_get:
        results.append(Result(workload=workload.name, op="get", options=r.as_dict(),
                              messages=read, payload_bytes=read * r.size, seconds=get_s,
                              latency=get_latency.summary(),
                              cpu_seconds={"bench": get_cpu}, reference="memcpy",
                              notes=["CPU includes the (untimed) verification of each body"]))
    return results


@register
class StoreWorkload(Workload):
    """The single-node MessageStore (quorumlog.open): --producers threads doing put_batch of
    --batch messages (put with --batch 1) into 8 queues, then every queue read back with get()
    in batches of 32 (a row of its own) and every message checked.

    Latency is per put_batch call or per put, from the call to its return (async: in the page
    cache and dispatched; sync: flushed), and per get() call for the read."""
    name = "store"
    summary = "MessageStore put_batch (put with --batch 1) then get, single node"
    defaults = {"count": 1_000_000, "batch": 1000, "producers": 1, "flush": "async"}
    uses = frozenset({"size", "count", "duration_s", "producers", "batch", "flush", "rate"})

    def describe(self, r):
        return super().describe(r) + f" producers={r.producers}"

    def run(self, r: Resolved, ctx: RunContext) -> list:
        return _run_store(self, r, ctx, with_get=True)


@register
class CommitWorkload(Workload):
    """Sync group commit: --producers threads (default 8) each doing single puts into a store
    with flush=sync; a put returns only once a flush covers it, so concurrent puts share
    flushes (msg/flush). Latency is per message, from the put to its return. Every message
    is read back and checked afterwards (not timed)."""
    name = "commit"
    summary = "sync group commit: concurrent producers doing single puts, each waits for a flush"
    defaults = {"duration_s": 5.0, "batch": 1, "producers": 8, "flush": "sync"}
    uses = frozenset({"size", "count", "duration_s", "producers", "batch", "flush", "rate"})

    def check(self, r: Resolved) -> None:
        if r.flush != "sync":
            raise BenchOptionError("commit measures sync group commit: --flush must be sync "
                                   "(use the store workload for async)")

    def describe(self, r):
        return super().describe(r) + f" producers={r.producers}"

    def run(self, r: Resolved, ctx: RunContext) -> list:
        return _run_store(self, r, ctx, with_get=False)
