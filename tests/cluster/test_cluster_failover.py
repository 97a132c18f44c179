"""kill -9 of the leader under continuous load, several times: a new leader is elected, no
acknowledged message is lost or duplicated (producer retries included: a retried batch keeps
its producer id and sequence, so a new leader drops the duplicate), and the killed replica
restarts and catches up byte-identically."""
from __future__ import annotations

import collections
import os

from cluster_support import (Producers, assert_logs_identical, kill_leaders_under_load,
                             read_queue, wait_until)

from quorumlog.client import Client

TOPIC = "events"
# `make cluster-soak` sets more (QUORUMLOG_CLUSTER_KILLS=20); make test runs 3
KILLS = int(os.environ.get("QUORUMLOG_CLUSTER_KILLS", "3"))


def test_kill_minus_9_of_the_leader_under_load_loses_and_duplicates_nothing(make_cluster):
    c = make_cluster(3, flush="async")
    secret = c.secret()
    with c.client(request_timeout=2, retry_timeout=2) as admin:
        leader = c.wait_leader(client=admin)
        prod = Producers(c.client_addresses(), secret)
        prod.thread.start()
        try:
            leader = kill_leaders_under_load(c, admin, leader, prod, KILLS, before=500)
            # the last restarted replica catches up while the load goes on
            n0 = prod.count()
            wait_until(lambda: prod.count() >= n0 + 500 or prod.errors, 60,
                       "500 more messages acknowledged after the last restart")
        finally:
            prod.stop.set()
            prod.thread.join(90)
        assert not prod.errors, prod.errors
        assert not prod.thread.is_alive()

    # every acknowledged message where it was acknowledged, on every replica
    acked = collections.defaultdict(dict)
    for q, first, bodies in prod.acked:
        for i, b in enumerate(bodies):
            assert first + i not in acked[q], f"offset {q}/{first + i} acknowledged twice"
            acked[q][first + i] = b
    ids_seen = collections.Counter()
    for nid in c.ids:
        addr = c.clients[nid]
        with Client([addr], secret=secret, retry_timeout=30) as m:
            for q in range(4):
                end = max(acked[q]) + 1 if acked[q] else 0
                wait_until(lambda: m.offsets(TOPIC, q)[1] >= end, 60,
                           f"{nid} catching up {TOPIC}/{q}")
                got = read_queue(m, addr, TOPIC, q, m.offsets(TOPIC, q)[1])
                for off, b in acked[q].items():
                    assert got[off] == b, f"{nid}: {TOPIC}/{q}@{off} is {got[off]!r}, acked {b!r}"
                if nid == c.ids[0]:
                    ids_seen.update(got)
    dups = [b for b, n in ids_seen.items() if n > 1]
    assert not dups, f"{len(dups)} messages stored twice, e.g. {dups[:3]}"
    assert sum(len(v) for v in acked.values()) == prod.count()

    assert c.stop() == {n: 0 for n in c.ids}
    assert_logs_identical(c)
