"""The `e2e` workload: produce -> consume on one store, as a broker's producer and consumer
see it: the latency from a message's send to its delivery to a consumer long-polling get().

Producers put into one queue (run_producers, so --rate paces them); each records the send
time of its batch before the put. One consumer thread follows the queue with
get(wait_ms=LONG_POLL_MS) and, for each message returned, takes the time since its batch was
sent (the body's 8-byte sequence stamp names the batch). Every message is read back and
checked afterwards (not timed).
"""
from __future__ import annotations

import threading
import time

from ... import open as open_store
from ..latency import LatencyRecorder
from ..measure import Result, process_cpu_seconds, run_producers
from ..options import Resolved
from ..payload import STAMP, Payload, Verifier
from . import RunContext, Workload, register
from .log import SEGMENT_BYTES
from .store import TOPIC, read_back

LONG_POLL_MS = 100
CONSUME_BATCH = 256
DRAIN_TIMEOUT_S = 60.0     # after the producers: the consumer must have caught up by then


class _TimedSender:
    """put_batch into queue 0, after noting when the batch (its first stamp) was sent."""

    def __init__(self, store, payload: Payload, sent: dict):
        self._store = store
        self._buf = payload.buffer()
        self._sent = sent

    def send(self, s0, n):
        bodies = self._buf.fill(s0, n)
        self._sent[s0] = time.perf_counter_ns()
        self._store.put_batch(TOPIC, bodies, queue_id=0)

    def wait(self, token):
        pass


class _Consumer(threading.Thread):
    """Long-polls queue 0 from offset 0 until `target` messages (set once the producers are
    done) were delivered; records each message's send-to-delivery latency."""

    def __init__(self, store, batch: int, sent: dict, latency: LatencyRecorder):
        super().__init__(name="bench-e2e-consumer", daemon=True)
        self.store, self.batch, self.sent, self.latency = store, batch, sent, latency
        self.target: int | None = None
        self.delivered = 0
        self.error: BaseException | None = None

    def run(self):
        clock, batch, off = time.perf_counter_ns, self.batch, 0
        try:
            while self.target is None or self.delivered < self.target:
                msgs = self.store.get(TOPIC, 0, off, CONSUME_BATCH, wait_ms=LONG_POLL_MS)
                now = clock()
                if msgs:
                    stamps = [STAMP.unpack_from(m.body)[0] for m in msgs]
                    self.latency.record_many([now - self.sent[s - s % batch] for s in stamps])
                    off = msgs[-1].queue_offset + 1
                    self.delivered += len(msgs)
        except BaseException as exc:  # noqa: BLE001 -- re-raised by the workload
            self.error = exc


@register
class EndToEndWorkload(Workload):
    """Produce -> consume on one store (quorumlog.open): --producers threads put_batch (put
    with --batch 1) into one queue while a consumer long-polls it with get(wait_ms=100).
    Latency is per message, from the put call that sent it to the get that delivered it to
    the consumer (with --rate: at a fixed offered load). Every message is read back and
    checked afterwards."""
    name = "e2e"
    summary = "produce -> consume on one store: latency from send to delivery (long-poll get)"
    defaults = {"count": 100_000, "batch": 1, "producers": 1, "flush": "async"}
    uses = frozenset({"size", "count", "duration_s", "producers", "batch", "flush", "rate"})

    def run(self, r: Resolved, ctx: RunContext) -> list:
        path = ctx.new_dir(f"e2e-{r.flush}-b{r.batch}")
        payload = Payload(r.size, r.batch, r.seed)
        latency = LatencyRecorder("message")
        sent: dict = {}
        store = open_store(path, flush=r.flush, segment_size_bytes=SEGMENT_BYTES)
        try:
            store.create_topic(TOPIC, 1)
            consumer = _Consumer(store, r.batch, sent, latency)
            consumer.start()
            cpu0 = process_cpu_seconds()
            with ctx.progress.phase(self.describe(r), r.count, r.duration_s) as ph:
                driven = run_producers(r, lambda k: _TimedSender(store, payload, sent),
                                       latency=LatencyRecorder("put"), phase=ph)
            consumer.target = driven.messages
            consumer.join(DRAIN_TIMEOUT_S)
            cpu = process_cpu_seconds() - cpu0
            if consumer.is_alive():
                raise RuntimeError(f"e2e: the consumer got {consumer.delivered} of "
                                   f"{driven.messages} messages within {DRAIN_TIMEOUT_S} s "
                                   "of the last put")
            if consumer.error is not None:
                raise consumer.error
            verifier = Verifier(payload, driven.acked_ranges)
            read_back(store, verifier)
        finally:
            store.close()
            ctx.remove(path)
        return [Result(workload=self.name, op="produce->consume", options=r.as_dict(),
                       messages=consumer.delivered, payload_bytes=consumer.delivered * r.size,
                       seconds=driven.seconds, latency=latency.summary(),
                       cpu_seconds={"bench": cpu}, integrity=verifier.result(),
                       notes=["e2e latency: from the put that sent a message to the "
                              f"long-poll get (wait_ms={LONG_POLL_MS}) that delivered it"])]
