"""Issue 18 §1.2 on real processes (flush = "async"): follower C lags (SIGSTOP), leader A
loses its power (kill -9, its log cut back to the checkpoint's flushed position, a new boot
in its abort marker) and at the same moment follower B is killed. Before raft/recovery.py, A
and C elected a leader on A's (or C's) short log and B was truncated to it when it returned:
acknowledged messages gone on every replica, their offsets reused. Now A starts recovering
(no vote, no campaign), so A and C elect nobody until B is back; then B leads, A is repaired
from it, and every acknowledged message is read back at its offset."""
from __future__ import annotations

import signal
import time

from cluster_support import checkpoint, wait_until

from quorumlog.client import Client
from quorumlog.testing.nemesis import lose_unflushed_tail

TOPIC = "events"
# the async log flushes and checkpoints only at open during the test: a power loss then
# takes everything the replica wrote since (the checkpoint model of docs/reliability.md)
ENV = {"QUORUMLOG_FLUSH_INTERVAL_MS": "600000", "QUORUMLOG_CHECKPOINT_INTERVAL_MS": "600000"}


def _leaders(c, admin, among):
    st = c.statuses(admin)
    return [n for n in among if not isinstance(st[n], Exception) and st[n].role == 2]


def test_async_power_loss_with_a_crash_and_a_lagging_follower_stops_then_loses_nothing(
        make_cluster):
    c = make_cluster(3, flush="async", env=ENV)
    secret = c.secret()
    acked = []
    with c.client(request_timeout=2, retry_timeout=2) as admin:
        a = c.wait_leader(client=admin, timeout=30)
        b, lag = [n for n in c.ids if n != a]
        with Client([c.clients[a]], secret=secret, request_timeout=5, retry_timeout=5) as p:
            for k in range(10):     # every replica holds these
                bodies = [f"all-{k:03d}-{i}".encode() for i in range(8)]
                r = p.produce(TOPIC, bodies)
                acked.append((r.queue_id, r.first_queue_offset, bodies))
            wait_until(lambda: all(admin.status(c.clients[n]).commit_index
                                   >= admin.status(c.clients[a]).commit_index
                                   for n in (b, lag)), 20, "followers caught up")
            c.signal(lag, signal.SIGSTOP)
            try:
                for k in range(40):  # acknowledged by A and B only
                    bodies = [f"ab-{k:03d}-{i}".encode() for i in range(8)]
                    r = p.produce(TOPIC, bodies)
                    acked.append((r.queue_id, r.first_queue_offset, bodies))
                committed = admin.status(c.clients[a]).commit_index
                c.kill(b)
                c.kill(a)
                lost = lose_unflushed_tail(c.data_dir(a), "checkpoint")
            finally:
                c.signal(lag, signal.SIGCONT)
        assert checkpoint(c, a).flushed_index < committed and lost["log_bytes_zeroed"] > 0, lost
        c.restart(a)
        # A may have lost what it acknowledged: A and C must elect nobody while B is down
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            assert _leaders(c, admin, (a, lag)) == [], "a leader was elected without B"
            time.sleep(0.1)
        assert "recovering (floor term" in open(c.log_file(a)).read()
        c.restart(b)
        leader = c.wait_leader(client=admin, timeout=30)
        assert leader == b
        wait_until(lambda: all(admin.status(c.clients[n]).commit_index
                               >= admin.status(c.clients[b]).commit_index
                               for n in (a, lag)), 30, "A and C caught up with B")
    for n in c.ids:
        with Client([c.clients[n]], secret=secret) as m:
            for q, first, bodies in acked:
                r = m.fetch(TOPIC, q, first, max_messages=len(bodies))
                assert [bytes(x.body) for x in r.messages] == bodies, (n, q, first)
    assert "recovered: its log holds entries of term" in open(c.log_file(a)).read()
