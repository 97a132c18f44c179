"""An idempotent producer with several batches in flight (window 4 and 8, one connection)
while the leader is killed -9: every produce completes with no error, every acknowledged
message is stored exactly once, and the producer's batches sit in the log in the order it made
them. (Before: the retries reached the new leader out of order and one was refused for good --
"sequence N is not above the last written (M) and not among the 8 batches remembered" -- and
`make bench`'s failover workload died of it.)"""
from __future__ import annotations

import asyncio
import collections
import threading

import pytest
from cluster_support import kill_leaders_under_load, read_queue

from quorumlog.client import AsyncClient, Client
from quorumlog.errors import InvalidQueueError

TOPIC = "pipelined"
KILLS = 2
MAX_QUEUES = 64


class PipelinedProducer:
    """One AsyncClient, `window` lanes producing at once; lane batches are numbered k in the
    order they are made (the client numbers its sequences in the same order)."""

    def __init__(self, addresses, secret, window, batch=20):
        self.addresses, self.secret, self.window, self.batch = addresses, secret, window, batch
        self.acked = []           # (k, queue_id, first_offset, positions, bodies)
        self.errors = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self):
        made = iter(range(1 << 30))
        async with AsyncClient(self.addresses, secret=self.secret, retry_timeout=60,
                               request_timeout=2) as c:
            async def lane():
                while not self.stop.is_set() and not self.errors:
                    k = next(made)
                    bodies = [f"k{k:07d}-m{i:03d}".encode() for i in range(self.batch)]
                    try:
                        r = await c.produce(TOPIC, bodies)
                    except Exception as e:  # (any failure ends the test with this error)
                        self.errors.append(e)
                        return
                    self.acked.append((k, r.queue_id, r.first_queue_offset,
                                       tuple(r.positions), bodies))
            await asyncio.gather(*(lane() for _ in range(self.window)))

    def count(self):
        return len(self.acked)


@pytest.mark.parametrize("window", [4, 8])
def test_pipelined_producer_survives_leader_kills(make_cluster, window):
    c = make_cluster(3, flush="async")
    secret = c.secret()
    with c.client(request_timeout=2, retry_timeout=2) as admin:
        leader = c.wait_leader(client=admin)
        prod = PipelinedProducer(c.client_addresses(), secret, window)
        prod.thread.start()
        try:
            leader = kill_leaders_under_load(c, admin, leader, prod, KILLS, before=200,
                                             after=2 * window)
        finally:
            prod.stop.set()
            prod.thread.join(90)
        assert not prod.errors, prod.errors
        assert not prod.thread.is_alive()

    # per-producer order: the log holds the batches in the order they were made
    by_k = sorted(prod.acked)
    assert [a[0] for a in by_k] == list(range(len(by_k)))      # every batch acknowledged
    firsts = [a[3][0] for a in by_k]
    assert firsts == sorted(firsts), "batches stored out of the producer's order"
    # every acknowledged message exactly once, where it was acknowledged
    acked = collections.defaultdict(dict)
    for _, q, first, _, bodies in prod.acked:
        for i, b in enumerate(bodies):
            assert first + i not in acked[q], f"offset {q}/{first + i} acknowledged twice"
            acked[q][first + i] = b
    addr = c.clients[leader]
    seen = collections.Counter()
    with Client([addr], secret=secret, retry_timeout=30) as m:
        for q in range(MAX_QUEUES):                    # every queue: a duplicate may be anywhere
            try:
                end = m.offsets(TOPIC, q)[1]
            except InvalidQueueError:
                break
            got = read_queue(m, addr, TOPIC, q, end)
            for off, b in acked[q].items():
                assert got[off] == b, f"{TOPIC}/{q}@{off} is {got[off]!r}, acked {b!r}"
            seen.update(got)
    dups = [b for b, n in seen.items() if n > 1]
    assert not dups, f"{len(dups)} messages stored twice, e.g. {dups[:3]}"
    assert sum(len(v) for v in acked.values()) == len(prod.acked) * prod.batch
