"""quorumlog.open_replica from plain threads and from asyncio: three replicas in one process,
role-change callbacks (LEADER / FOLLOWER / READY_TO_SERVE), puts that return once committed,
reads from every replica, a clean close."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

import quorumlog
from quorumlog.errors import LogClosedError
from quorumlog.localcluster import free_port
from quorumlog.net.messages import LeaderRedirectError


def test_open_replica_threads_asyncio_callbacks_and_close(tmp_path):
    ids = ["n1", "n2", "n3"]
    peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
    changes = {i: [] for i in ids}
    lock = threading.Lock()
    reps = []
    try:
        for i in ids:
            def cb(ch, i=i):
                with lock:
                    changes[i].append(ch)
            reps.append(quorumlog.open_replica(tmp_path / i, i, peers, secret="s" * 16,
                                               flush="sync", on_role_change=cb,
                                               segment_size_bytes=1 << 22))
        deadline = time.monotonic() + 20
        while not any(r.is_ready_to_serve for r in reps):
            assert time.monotonic() < deadline, "no leader ready to serve"
            time.sleep(0.01)
        leader = next(r for r in reps if r.is_ready_to_serve)
        assert leader.wait_ready_to_serve(0) and leader.role == "LEADER"
        r = leader.put("orders", b"from a thread")
        rb = asyncio.run(leader.aput_batch("orders", [b"from", b"asyncio"], queue_id=r.queue_id))
        assert rb.first_index > r.index
        for rep in reps:
            deadline = time.monotonic() + 10
            while rep.topics().get("orders") is None or \
                    rep.max_offset("orders", r.queue_id) < r.queue_offset + 3:
                assert time.monotonic() < deadline, f"{rep} not caught up"
                time.sleep(0.01)
            got = [bytes(m.body) for m in rep.get("orders", r.queue_id, r.queue_offset, 10)]
            assert got == [b"from a thread", b"from", b"asyncio"]
            assert rep.offsets("orders", r.queue_id)[1] == r.queue_offset + 3
        follower = next(rep for rep in reps if rep is not leader)
        with pytest.raises(LeaderRedirectError):
            follower.put("orders", b"x")
        with lock:
            lead_changes = [c.role for c in changes[leader.node.id]]
            fol_changes = [c.role for c in changes[follower.node.id]]
        assert lead_changes[-2:] == ["LEADER", "READY_TO_SERVE"]
        assert fol_changes[-1] == "FOLLOWER"
        assert {c.leader_id for c in changes[follower.node.id][-1:]} == {leader.node.id}
    finally:
        for rep in reps:
            rep.close()
    assert all(rep.closed for rep in reps)
    with pytest.raises(LogClosedError):
        reps[0].put("orders", b"closed")
