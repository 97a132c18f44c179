"""The `log` workload: the native commit log alone (CommitLog.append_batch, or append() with
--batch 1), one writer, async or sync flush.

Latency is per batch (per message with --batch 1), from the call to its acknowledgement: in
async mode the append returning (the bytes are in the page cache); in sync mode the flush that
covers the batch (`wait_flushed`), with up to --window batches appended before the producer
waits for the oldest one, so several batches share one flush.
"""
from __future__ import annotations

from ...commitlog import MESSAGE, CommitLog
from ..latency import LatencyRecorder
from ..measure import Result, run_producers
from ..options import BenchOptionError, Resolved
from ..payload import Payload, Verifier
from . import RunContext, Workload, register

TOPIC = "bench"
SEGMENT_BYTES = 1 << 30
FLUSH_WAIT_S = 120.0
READ_CHUNK_BYTES = 16 << 20
# 96-byte header + the topic: bytes a record takes besides its body (for sizing the warm-up)
RECORD_OVERHEAD = 96 + len(TOPIC)


class _LogSender:
    def __init__(self, log: CommitLog, payload: Payload, sync: bool):
        self._log = log
        self._buf = payload.buffer()
        self._sync = sync

    def send(self, s0, n):
        bodies = self._buf.fill(s0, n)
        if n == 1:
            _, pos, _ = self._log.append(TOPIC, bodies[0], queue_offset=s0, term=1)
            return pos + 1
        _, positions, _ = self._log.append_batch(TOPIC, bodies, queue_ids=0, queue_offsets=s0,
                                                 term=1)
        return int(positions[-1]) + 1

    def wait(self, end):
        if self._sync and not self._log.wait_flushed(end, timeout=FLUSH_WAIT_S):
            raise TimeoutError(f"commit log flush did not reach position {end} "
                               f"within {FLUSH_WAIT_S:.0f} s")


def read_back(log: CommitLog, verifier: Verifier) -> None:
    """Feed every MESSAGE body of the log to `verifier`, in log order (read() + scan())."""
    i, last = log.first_index, log.last_index
    if last == 0:
        return
    while i <= last:
        view, count = log.read(i, last + 1, READ_CHUNK_BYTES)
        base = log.position_of(i)
        infos, _ = log.scan(base, base + len(view), count)
        msgs = infos[infos["type"] == MESSAGE]
        for start, n in zip((msgs["position"] - base + msgs["body_offset"]).tolist(),
                            msgs["body_len"].tolist()):
            verifier.feed(view[start:start + n])
        i += count


@register
class LogWorkload(Workload):
    """The native commit log alone: CommitLog.append_batch of --batch messages (append() per
    message with --batch 1), one writer, then every record read back and checked.

    Latency is per batch (per message with --batch 1) from the call to the acknowledgement:
    async, the call returning (bytes in the page cache); sync, the flush covering the batch,
    with up to --window batches appended before waiting for the oldest."""
    name = "log"
    summary = "native CommitLog.append_batch (append with --batch 1), one writer"
    defaults = {"count": 2_000_000, "batch": 1000, "flush": "async", "window": 1}
    uses = frozenset({"size", "count", "duration_s", "batch", "window", "flush", "rate"})

    def check(self, r: Resolved) -> None:
        if r.window > 1 and r.flush != "sync":
            raise BenchOptionError("--window applies to the log with --flush sync (an async "
                                   "append is acknowledged when it returns)")

    def run(self, r: Resolved, ctx: RunContext) -> list:
        path = ctx.new_dir(f"log-{r.flush}")
        payload = Payload(r.size, r.batch, r.seed)
        unit = "message" if r.batch == 1 else f"batch of {r.batch}"
        latency = LatencyRecorder(unit)
        log = CommitLog(path, segment_size_bytes=SEGMENT_BYTES, flush=r.flush)
        try:
            ctx.warm(None if r.count is None else r.count * (r.size + RECORD_OVERHEAD))
            flushes0 = log.stats()["flushes"]
            with ctx.progress.phase(self.describe(r), r.count, r.duration_s) as ph:
                driven = run_producers(r, lambda k: _LogSender(log, payload, r.flush == "sync"),
                                       latency, ph)
            flushes = log.stats()["flushes"] - flushes0
            verifier = Verifier(payload, driven.acked_ranges)
            read_back(log, verifier)
        finally:
            log.close()
            ctx.remove(path)
        op = "append" if r.batch == 1 else "append_batch"
        return [Result(workload=self.name, op=op, options=r.as_dict(),
                       messages=driven.messages, payload_bytes=driven.messages * r.size,
                       seconds=driven.seconds, latency=latency.summary(),
                       cpu_seconds={"bench": driven.cpu_seconds}, flushes=flushes,
                       integrity=verifier.result(),
                       reference="page_cache_write" if r.flush == "async" else "fdatasync")]
