"""The workload: idempotent producers on the io loop recording every batch (invoke, then
ok / fail / info) in the history; a retried batch keeps its producer id and sequence."""
from __future__ import annotations

import asyncio
import collections
import logging
import random

from ...errors import InvalidArgumentError
from ...net import messages as m
from ..history import make_body, message_id
from .cluster import Channels, wait_for
from .config import TOPIC, RunConfig
from .harness import Harness

log = logging.getLogger(__name__)

DEFINITE_FAILURES = (InvalidArgumentError,)   # refused before anything was appended


class Workload:
    """`workers` idempotent producers on the io loop, `rate_ops_s` batches per second in
    all. Every batch: invoke, then ok (with the answering node and the acknowledged
    position) / fail (a definite refusal) / info (gave up after op_timeout_s, outcome
    unknown). A retried batch keeps its producer id and sequence."""

    def __init__(self, h: Harness, cfg: RunConfig, seed: int):
        self.h = h
        self.cfg = cfg
        self.seed = seed
        self.stop_event: asyncio.Event | None = None
        self.future = None
        self.counts = collections.Counter()
        self.max_body = cfg.segment_size_bytes     # > max_message_bytes (capped below it)

    def start(self) -> None:
        async def main():
            self.stop_event = asyncio.Event()
            await asyncio.gather(*(self._worker(w) for w in range(self.cfg.workers)))
        self.future = self.h.io.submit(main())
        wait_for(lambda: self.stop_event is not None, 10, 0.01)

    def stop(self, timeout: float) -> None:
        self.h.io.loop.call_soon_threadsafe(self.stop_event.set)
        self.future.result(timeout)

    def _batch(self, rng: random.Random, pid: int, seq: int):
        """-> (bodies, message ids, queue id, expect_failure)."""
        r = rng.random()
        qid = -1
        if r < self.cfg.invalid_ratio:
            n = rng.randint(1, 4)
            mids = [message_id(pid, seq, i) for i in range(n)]
            bodies = [make_body(x, rng.randint(16, 256)) for x in mids]
            if rng.random() < 0.5:
                k = rng.randrange(n)
                bodies[k] = make_body(mids[k], self.max_body)   # over max_message_bytes
            else:
                qid = 60000                                     # no such queue
            return bodies, mids, qid, True
        if r < self.cfg.invalid_ratio + self.cfg.large_ratio:
            n, lo, hi = 135, 8192, 8192                         # > max_batch_bytes (1 MiB)
        else:
            n, lo, hi = rng.randint(1, 8), 16, 400
        mids = [message_id(pid, seq, i) for i in range(n)]
        return [make_body(x, rng.randint(lo, hi)) for x in mids], mids, qid, False

    async def _worker(self, w: int) -> None:
        cfg = self.cfg
        rng = random.Random(f"{self.seed}/worker/{w}")
        pid = rng.getrandbits(63) | 1
        ids = list(self.h.cluster.ids)
        ch = Channels(self.h.cluster.clients, self.h.cluster.secret(), f"jepsen-w{w}",
                      cfg.request_timeout_s)
        hist = self.h.history
        guess = rng.choice(ids)
        interval = cfg.workers / cfg.rate_ops_s
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        seq = 0
        try:
            while not self.stop_event.is_set():
                now = loop.time()
                if next_at > now:
                    try:
                        await asyncio.wait_for(self.stop_event.wait(), next_at - now)
                        break
                    except TimeoutError:
                        pass
                next_at = max(next_at + interval, loop.time() - 1.0)
                seq += 1
                bodies, mids, qid, expect_fail = self._batch(rng, pid, seq)
                base = dict(process=w, producer_id=pid, sequence=seq, topic=TOPIC,
                            message_ids=tuple(mids))
                hist.op("invoke", **base)
                outcome, value, node, guess, attempts = await self._produce(
                    ch, ids, guess, bodies, qid, pid, seq)
                self.counts[outcome] += 1
                if attempts > 1:
                    self.counts["retried"] += 1
                if outcome == "ok":
                    hist.op("ok", **base, queue_id=value.queue_id,
                            first_offset=value.first_queue_offset,
                            positions=tuple(value.positions), node=node)
                    if expect_fail:
                        log.error("batch %x/%d should have been refused but was stored",
                                  pid, seq)
                else:
                    hist.op(outcome, **base, node=node,
                            error=f"{type(value).__name__}: {value}"[:300])
        finally:
            await ch.close()

    async def _produce(self, ch: Channels, ids, guess, bodies, qid, pid, seq):
        """One batch until acknowledged, definitely refused, or op_timeout_s ran out ->
        (outcome, response or error, answering node, next guess, attempts)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.op_timeout_s
        node = guess
        delay = 0.02
        last: BaseException | None = None
        req = m.ProduceRequest(TOPIC, bodies, qid, None, 0, pid, seq)
        attempts = 0
        while True:
            attempts += 1
            try:
                r = await ch.request(node, req)
                return "ok", r, node, node, attempts
            except DEFINITE_FAILURES as e:
                return "fail", e, node, node, attempts
            except Exception as e:     # unknown outcome: retry the same sequence elsewhere
                last = e
                lid = getattr(e, "leader_id", None)
                if lid in ch.addresses and lid != node:
                    node = lid
                else:
                    node = ids[(ids.index(node) + 1) % len(ids)]
            if loop.time() + delay > deadline:
                return "info", last, None, node, attempts
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
