"""Connections that must not reach Raft -- a wrong secret, an unknown node id, a wrong
cluster id, an oversized length prefix, garbage bytes -- are each refused with a clear log
line on the replica they target, change no Raft state (term, leader, votes), and do not stop
the cluster from committing."""
from __future__ import annotations

import asyncio
import os
import socket

from cluster_support import Producers, wait_all_follow, wait_until

from quorumlog.net.auth import AuthConfig
from quorumlog.net.framing import encode_header
from quorumlog.net.transport import PeerTransport


async def _fake_peer(node_id, cluster_id, secret, target, address, seconds=0.5):
    """Dial `target` as `node_id` for a while (it redials after each refusal)."""
    auth = AuthConfig(cluster_id, node_id, secret, peers=[target])
    t = PeerTransport(node_id, auth, lambda p, m: None, listen=None, peers={target: address})
    await t.start()
    try:
        await asyncio.sleep(seconds)
        return t.is_connected(target)
    finally:
        await t.close()


def _raw(address, data: bytes) -> bytes:
    """Send raw bytes to a peer port; return what came back before it closed (<= 5 s)."""
    with socket.create_connection(address, timeout=5) as s:
        s.sendall(data)
        s.settimeout(5)
        got = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return got


def test_bad_connections_are_refused_and_change_no_raft_state(make_cluster):
    c = make_cluster(3, flush="async")
    secret = c.secret()
    with c.client(request_timeout=2, retry_timeout=2) as admin:
        leader = c.wait_leader(client=admin)
        follower = next(n for n in c.ids if n != leader)
        other = next(n for n in c.ids if n not in (leader, follower))
        before = wait_all_follow(c, admin, leader)
        prod = Producers(c.client_addresses(), secret, n=1, batch=20)
        prod.thread.start()
        try:
            wait_until(lambda: prod.count() > 200 or prod.errors, 30, "load")
            for target in (leader, follower):
                host, port = c.peers[target].rsplit(":", 1)
                addr = (host, int(port))
                n0 = prod.count()
                # a wrong secret, an unknown node id, a wrong cluster id: the handshake fails
                assert not asyncio.run(_fake_peer(other, "quorumlog", "w" * 32, target, addr))
                assert not asyncio.run(_fake_peer("n9", "quorumlog", secret, target, addr))
                assert not asyncio.run(_fake_peer(other, "other-cluster", secret, target, addr))
                # a length prefix far over any limit, then garbage: refused after the header
                _raw(addr, encode_header(0x01, 1 << 31))
                _raw(addr, os.urandom(4096))
                # the group kept committing through all of it
                wait_until(lambda: prod.count() > n0 + 100 or prod.errors, 30,
                           f"commits while {target} was attacked")
        finally:
            prod.stop.set()
            prod.thread.join(60)
        assert not prod.errors, prod.errors
        after = c.statuses(admin)
    for nid in c.ids:
        assert after[nid].term == before[nid].term, (nid, before[nid], after[nid])
        assert after[nid].leader_id == before[nid].leader_id == leader
    assert c.stop() == {n: 0 for n in c.ids}
    for target in (leader, follower):
        text = open(c.log_file(target)).read()
        refused = [ln for ln in text.splitlines() if "refused connection from" in ln]
        for what in ("BadProofError", "UnknownNodeError", "WrongClusterError",
                     "FrameTooLargeError", "bad frame magic"):
            assert any(what in ln for ln in refused), (target, what, refused[-10:])
