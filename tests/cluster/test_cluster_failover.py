"""kill -9 of the leader under continuous load, several times: a new leader is elected, no
acknowledged message is lost or duplicated (producer retries included: a retried batch keeps
its producer id and sequence, so a new leader drops the duplicate), and the killed replica
restarts and catches up byte-identically."""
from __future__ import annotations

import os

from cluster_support import (Producers, assert_logs_identical, check_acked_on_every_replica,
                             kill_leaders_under_load, wait_until)

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
    check_acked_on_every_replica(c, prod)

    assert c.stop() == {n: 0 for n in c.ids}
    assert_logs_identical(c)
