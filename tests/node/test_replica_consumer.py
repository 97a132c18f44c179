"""The store's consumer API on a replicated group, in-process (open_replica): commit / read a
group's offset (a META record through the Raft core, applied on every replica), find by key,
long-poll get -- on every replica, and still there after the leader is closed and another
one is elected. Also Replica.put(keys=...) as store.put, and Client's consumer calls served
by a replica's client listener."""
from __future__ import annotations

import threading
import time

import pytest

import quorumlog
from quorumlog.client import Client
from quorumlog.localcluster import free_port
from quorumlog.net.messages import LeaderRedirectError

SECRET = "s" * 16


def _wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.01)


def _leader(reps, timeout=60):
    _wait(lambda: any(r.is_ready_to_serve for r in reps if not r.closed), timeout,
          "a leader ready to serve")
    return next(r for r in reps if not r.closed and r.is_ready_to_serve)


@pytest.fixture
def group(tmp_path):
    ids = ["n1", "n2", "n3"]
    peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
    reps = []
    try:
        for i in ids:
            reps.append(quorumlog.open_replica(tmp_path / i, i, peers, secret=SECRET,
                                               flush="sync", client_addr="127.0.0.1:0",
                                               segment_size_bytes=1 << 22))
        yield reps
    finally:
        for r in reps:
            r.close()


def test_consumer_api_on_replicas_survives_a_leader_change(group):
    leader = _leader(group)
    r = leader.put("orders", b"paid", keys=("order-42",), queue_id=1)
    leader.put("orders", b"shipped", keys=("order-42", "ship-7"), queue_id=1)
    leader.commit_offset("billing", "orders", 1, 1)
    assert leader.committed_offset("billing", "orders", 1) == 1
    for rep in group:          # replicated: every replica applies the commit and the keys
        _wait(lambda: rep.committed_offset("billing", "orders", 1) == 1, 10,
              f"{rep} applying the offset commit")
        hits = rep.find_by_key("orders", "order-42")
        assert [bytes(m.body) for m in hits] == [b"shipped", b"paid"]
        assert [bytes(m.body) for m in rep.find_by_key("orders", "ship-7")] == [b"shipped"]
    follower = next(x for x in group if x is not leader)
    with pytest.raises(LeaderRedirectError):
        follower.commit_offset("billing", "orders", 1, 2)

    leader.close()             # the leader goes away; the others elect a new one
    new = _leader(group)
    assert new is not leader
    assert new.committed_offset("billing", "orders", 1) == 1
    new.commit_offset("billing", "orders", 1, 2)
    assert new.consumer_offsets("billing") == {"orders": {1: 2}}

    # long-poll get: a reader on a follower waits for a message put after it started
    other = next(x for x in group if x is not new and not x.closed)
    got = []
    t = threading.Thread(target=lambda: got.extend(other.get("orders", 1, r.queue_offset + 2,
                                                             wait_ms=10_000)))
    t.start()
    time.sleep(0.05)           # (the reader is waiting; the put below wakes it)
    new.put("orders", b"late", queue_id=1)
    t.join(15)
    assert not t.is_alive() and [bytes(m.body) for m in got] == [b"late"]


def test_client_consumer_api_against_replica_listeners(group):
    leader = _leader(group)
    leader.put("orders", b"paid", keys=("order-42",), queue_id=0)
    addrs = [f"127.0.0.1:{r.client_address[1]}" for r in group]
    with Client(addrs, secret=SECRET, retry_timeout=20) as c:
        assert c.committed_offset("g1", "orders", 0) is None
        c.commit_offset("g1", "orders", 0, 1)
        assert c.committed_offset("g1", "orders", 0) == 1
        hits = c.find_by_key("orders", "order-42")
        assert [bytes(m.body) for m in hits] == [b"paid"] and hits[0].keys == ("order-42",)
        assert c.find_by_key("orders", "nobody") == []
        assert [bytes(m.body) for m in c.get("orders", 0, 0)] == [b"paid"]
        t0 = time.monotonic()
        assert c.get("orders", 0, 1, wait_ms=200) == []       # long poll, nothing arrives
        assert time.monotonic() - t0 >= 0.15
    for rep in group:
        _wait(lambda: rep.committed_offset("g1", "orders", 0) == 1, 10, "replicated commit")
