"""The consumer API through Client on three replica processes: a group's committed offset
(replicated through the log) and long-poll get survive a kill -9 of the leader."""
from __future__ import annotations

import threading

from cluster_support import wait_until

from quorumlog.client import Client


def test_client_consumer_offsets_and_long_poll_through_a_leader_kill(make_cluster):
    c = make_cluster(3, flush="sync")
    with c.client(retry_timeout=30) as cl:
        leader = c.wait_leader(client=cl)
        r = cl.produce("orders", [b"a", b"b", b"c"], queue_id=2)
        cl.commit_offset("billing", "orders", 2, r.first_queue_offset + 2)
        assert cl.committed_offset("billing", "orders", 2) == r.first_queue_offset + 2

        c.kill(leader)
        new = c.wait_leader(client=cl, exclude=(leader,), timeout=30)
        assert new != leader
        # the commit was replicated before it was acknowledged: the member the client now
        # reads from applies it once it learns the commit (reads are that member's view)
        wait_until(lambda: cl.committed_offset("billing", "orders", 2) ==
                   r.first_queue_offset + 2, 30, "the commit applied after the failover")
        cl.commit_offset("billing", "orders", 2, r.first_queue_offset + 3)
        assert cl.committed_offset("billing", "orders", 2) == r.first_queue_offset + 3

        # long poll on a surviving follower: it returns the message produced after it began
        follower = next(n for n in c.ids if n not in (leader, new))
        got = []
        with Client([c.clients[follower]], secret=c.secret()) as reader:
            t = threading.Thread(target=lambda: got.extend(
                reader.get("orders", 2, r.first_queue_offset + 3, wait_ms=20_000)))
            t.start()
            cl.produce("orders", [b"d"], queue_id=2)
            t.join(30)
            assert not t.is_alive()
        assert [bytes(m.body) for m in got] == [b"d"]
        c.restart(leader)
        wait_until(lambda: _offset_on(c, leader) == r.first_queue_offset + 3, 30,
                   "the restarted member applying the later commit")


def _offset_on(c, nid):
    """The group's offset as member `nid` applied it (reads are served by the member a
    client is connected to)."""
    with Client([c.clients[nid]], secret=c.secret(), retry_timeout=2) as one:
        return one.committed_offset("billing", "orders", 2)
