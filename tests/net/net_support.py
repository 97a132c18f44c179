"""Helpers shared by the network tests: event loops (asyncio and uvloop), bounded waits,
transports wired to each other, raw sockets that speak (or break) the protocol."""
from __future__ import annotations

import asyncio
import socket
import time

from quorumlog.net import codec
from quorumlog.net.auth import AuthConfig, Handshake
from quorumlog.net.framing import FrameDecoder
from quorumlog.net.transport import PeerTransport, TransportConfig

CLUSTER = "cluster-1"
SECRET = b"0123456789abcdef-cluster-secret!"
CLIENT_SECRET = b"client-secret-0123456789abcdef!!"


def run(loop_factory, coro_fn, timeout: float = 30.0):
    """Run coro_fn() on a fresh loop of the given kind, bounded by `timeout` seconds."""
    async def bounded():
        return await asyncio.wait_for(coro_fn(), timeout)
    with asyncio.Runner(loop_factory=loop_factory) as r:
        return r.run(bounded())


async def wait_until(cond, timeout: float = 10.0, what: str = "condition"):
    """Poll `cond()` until true; fail after `timeout` seconds (never an unbounded wait)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)


def auth(node_id, peers, secret=SECRET, cluster=CLUSTER, **kw) -> AuthConfig:
    return AuthConfig(cluster, node_id, secret, peers=[p for p in peers if p != node_id], **kw)


class Node:
    """A PeerTransport and the messages it received, in order."""

    def __init__(self, node_id, peers, *, secret=SECRET, config=None, listen=("127.0.0.1", 0),
                 **kw):
        self.id = node_id
        self.inbox: list = []
        self.t = PeerTransport(node_id, auth(node_id, peers, secret), self._on, listen=listen,
                               config=config or fast_config(), **kw)

    def _on(self, peer, msg):
        self.inbox.append((peer, msg))

    def from_peer(self, peer):
        return [m for p, m in self.inbox if p == peer]


def fast_config(**kw) -> TransportConfig:
    d = dict(handshake_timeout_ms=2000, reconnect_initial_ms=10, reconnect_max_ms=200,
             connect_timeout_ms=1000)
    d.update(kw)
    return TransportConfig(**d)


async def start_mesh(nodes):
    for n in nodes:
        await n.t.start()
    for n in nodes:
        for o in nodes:
            if o is not n:
                n.t.add_peer(o.id, o.t.address)
    for n in nodes:
        for o in nodes:
            if o is not n:
                await n.t.wait_connected(o.id, 10)


async def close_all(nodes):
    for n in nodes:
        await n.t.close()


def same(a, b) -> bool:
    """Raft messages have no __eq__: equal description and payload bytes."""
    if a.describe() != b.describe():
        return False
    pa, pb = getattr(a, "payload", None), getattr(b, "payload", None)
    if pa is None or pb is None:
        return pa is pb
    return bytes(pa) == bytes(pb)


class RawPeer:
    """A blocking socket that can run the real handshake by hand and then send anything."""

    def __init__(self, address, timeout=5.0):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.settimeout(timeout)
        self.decoder = FrameDecoder()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_msg(self, msg, request_id=0) -> None:
        self.send(b"".join(bytes(p) for p in codec.encode(msg, request_id)))

    def recv_msg(self):
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the peer")
            frames = self.decoder.feed(data)
            if frames:
                return codec.decode_frame(frames[0], "peer", "raw")

    def closed_by_peer(self, timeout=5.0) -> bool:
        """True once the other side closed the connection (bounded by `timeout`)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def handshake(self, cfg: AuthConfig, target: str):
        hs = Handshake.initiator(cfg, target)
        for m in hs.start():
            self.send_msg(m)
        while not hs.done:
            for m in hs.receive(self.recv_msg()):
                self.send_msg(m)
        return hs

    def close(self):
        self.sock.close()
