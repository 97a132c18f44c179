"""A simulated network with PeerTransport's interface, for tests (in-process, asyncio).

    net = SimNetwork(seed=7, delay_ms=(1, 5), drop_rate=0.01, duplicate_rate=0.01)
    a = SimTransport("a", net, on_message); await a.start(); a.add_peer("b", None)
    a.send("b", msg) -> bool;  net.partition({"a"}, {"b", "c"});  net.heal()

Messages are delivered by loop.call_later after a random delay drawn from the network's
seeded random.Random (so a run's faults are reproducible given the same scheduling); drops,
duplicates and partitions are decided when a message is sent and checked again when it is
delivered (a partition that starts while a message is in flight loses it). Each link is FIFO
like a TCP connection unless `reorder=True`. With `wire=True` every message goes through the
real codec (encode, join, decode), so a test over the simulated network also proves that
what the node sends can be put on the wire.

A transport that closes (its node crashed or stopped) is, to every peer that can still
reach it, a connection reset after whatever it sent before (FIFO), then a redial refused:
`on_peer_lost(id, False)`, then `(id, True)` unless it is running again by then -- as the
TCP transport reports a killed process. A partition says nothing (the leak's timeout).

Unlike the real transport, a link has no byte budget; `max_inflight` bounds the number of
undelivered messages per link (past it `send` drops and counts, like backpressure).
"""
from __future__ import annotations

import asyncio
import collections
import copy
import logging
import random
from typing import Callable

from ..errors import ConfigError
from . import codec
from .errors import TransportClosedError
from .framing import FrameDecoder
from .messages import check_node_id
from .seam import report_peer_lost

# the hot Raft frames' C decoders, as the transport's (wire=True)
_RAFT_DECODERS = codec.frame_decoders(codec.RAFT)

log = logging.getLogger(__name__)

__all__ = ["SimNetwork", "SimTransport"]


class _Link:
    __slots__ = ("src", "dst", "drop_rate", "duplicate_rate", "delay_ms", "inflight", "last_due",
                 "fifo")

    def __init__(self, src, dst, drop_rate, duplicate_rate, delay_ms):
        self.src, self.dst = src, dst
        self.drop_rate = drop_rate
        self.duplicate_rate = duplicate_rate
        self.delay_ms = delay_ms
        self.inflight = 0
        self.last_due = 0.0
        # (due, item) in send order: one timer for the head at a time, because the loop's
        # timer heap does not keep equal deadlines in order
        self.fifo: collections.deque = collections.deque()


def _check_rate(name, v):
    if not 0.0 <= v <= 1.0:
        raise ConfigError(f"{name}={v} outside 0..1")
    return float(v)


def _check_delay(delay_ms):
    lo, hi = delay_ms
    if not 0 <= lo <= hi:
        raise ConfigError(f"delay_ms={delay_ms}: need 0 <= min <= max")
    return (lo, hi)


class SimNetwork:
    """The shared medium of a set of SimTransports."""

    def __init__(self, *, seed: int = 0, drop_rate: float = 0.0, duplicate_rate: float = 0.0,
                 delay_ms: tuple = (0, 0), reorder: bool = False, wire: bool = False,
                 max_inflight: int = 100_000):
        self.rng = random.Random(seed)
        self.drop_rate = _check_rate("drop_rate", drop_rate)
        self.duplicate_rate = _check_rate("duplicate_rate", duplicate_rate)
        self.delay_ms = _check_delay(delay_ms)
        self.reorder = reorder
        self.wire = wire
        self.max_inflight = max_inflight
        self.nodes: dict[str, SimTransport] = {}
        self._links: dict[tuple, _Link] = {}
        self._groups: list[set] | None = None
        self._cut: set = set()        # (src, dst) pairs cut one way
        self.delivered = 0
        self.dropped = 0
        self.duplicated = 0

    # -- faults ------------------------------------------------------------------------------

    def link(self, src: str, dst: str) -> _Link:
        ln = self._links.get((src, dst))
        if ln is None:
            ln = self._links[(src, dst)] = _Link(src, dst, self.drop_rate, self.duplicate_rate,
                                                 self.delay_ms)
        return ln

    def set_link(self, src: str, dst: str, *, drop_rate=None, duplicate_rate=None,
                 delay_ms=None, both_ways: bool = True) -> None:
        """Override the faults of one direction (or both) of a link."""
        pairs = [(src, dst), (dst, src)] if both_ways else [(src, dst)]
        for a, b in pairs:
            ln = self.link(a, b)
            if drop_rate is not None:
                ln.drop_rate = _check_rate("drop_rate", drop_rate)
            if duplicate_rate is not None:
                ln.duplicate_rate = _check_rate("duplicate_rate", duplicate_rate)
            if delay_ms is not None:
                ln.delay_ms = _check_delay(delay_ms)

    def partition(self, *groups) -> None:
        """Only nodes in the same group can talk; a node in no group talks to nobody."""
        self._groups = [set(g) for g in groups]
        for t in self.nodes.values():
            t._notify()

    def isolate(self, node_id: str) -> None:
        others = set(self.nodes) - {node_id}
        self.partition({node_id}, others)

    def heal(self) -> None:
        self._groups = None
        self._cut.clear()
        for t in self.nodes.values():
            t._notify()

    def cut(self, src: str, dst: str) -> None:
        """One-way partition: messages from src to dst are lost (dst to src still arrive)
        until heal()."""
        self._cut.add((src, dst))
        for t in self.nodes.values():
            t._notify()

    def stall(self, src: str, dst: str, ms: float) -> None:
        """Hold the link src -> dst for `ms` (a TCP retransmission timeout): what is in
        flight and what is sent meanwhile arrives after it, in order."""
        ln = self.link(src, dst)
        loop = asyncio.get_running_loop()
        ln.last_due = max(ln.last_due, loop.time() + ms / 1000)
        if ln.fifo:                                   # the head waits too
            due, item = ln.fifo[0]
            ln.fifo[0] = (max(due, ln.last_due), item)

    def can_talk(self, a: str, b: str) -> bool:
        """a -> b gets through (both ways for a partition, one way for a cut)."""
        if (a, b) in self._cut:
            return False
        if self._groups is None:
            return True
        return any(a in g and b in g for g in self._groups)

    # -- delivery ----------------------------------------------------------------------------

    def _submit(self, src: "SimTransport", dst_id: str, message, group: int = 0) -> bool:
        dst = self.nodes.get(dst_id)
        st = src._stats[dst_id]
        if dst is None or not dst._running or not self.can_talk(src.node_id, dst_id):
            st["dropped_no_connection"] += 1
            return False
        ln = self.link(src.node_id, dst_id)
        if ln.inflight >= self.max_inflight:
            st["dropped_backpressure"] += 1
            return False
        if self.wire:
            # through the real encoder and frame decoder, as on a socket
            dec = FrameDecoder()
            dec.allow_groups = True
            # (the transport's C decoding of the hot frames too; the rest at delivery)
            dec.codecs = _RAFT_DECODERS
            dec.src, dec.dst = src.node_id, dst_id
            (item,) = dec.feed(b"".join(bytes(p) for p in codec.encode(message, group=group)))
        else:
            item = (group, _sent_copy(message))
        st["sent"] += 1
        rng = self.rng
        if ln.drop_rate and rng.random() < ln.drop_rate:
            self.dropped += 1    # lost in the network: the sender cannot tell
            return True
        copies = 2 if ln.duplicate_rate and rng.random() < ln.duplicate_rate else 1
        if copies == 2:
            self.duplicated += 1
        loop = src._loop
        for _ in range(copies):
            lo, hi = ln.delay_ms
            delay = (lo + rng.random() * (hi - lo)) / 1000 if hi else 0.0
            due = loop.time() + delay
            ln.inflight += 1
            if self.reorder:
                loop.call_at(due, self._deliver, ln, item)
                continue
            due = max(due, ln.last_due)       # FIFO per link, like one TCP connection
            ln.last_due = due
            ln.fifo.append((due, item))
            if len(ln.fifo) == 1:
                loop.call_at(due, self._pump, ln, loop)
        return True

    def _reset_after(self, gone: "SimTransport", peer: "SimTransport") -> None:
        """`gone` closed: `peer` sees the connection reset once what `gone` sent it arrived,
        and its redial refused a delay later (module docstring)."""
        if peer._loop is None or not peer._running or gone.node_id not in peer._peers \
                or not self.can_talk(gone.node_id, peer.node_id):
            return
        ln = self.link(gone.node_id, peer.node_id)
        lo, hi = ln.delay_ms
        now = peer._loop.time()
        due = max(now + (lo + self.rng.random() * (hi - lo)) / 1000 if hi else now,
                  ln.last_due)
        peer._loop.call_at(due, self._refuse, gone.node_id, peer, ln.delay_ms)

    def _refuse(self, gone_id: str, peer: "SimTransport", delay_ms) -> None:
        if not peer._running or self.nodes.get(gone_id) is not None:
            return                       # (closed itself, or the peer is back: no refusal)
        peer._lost(gone_id, False)
        lo, hi = delay_ms
        later = (lo + self.rng.random() * (hi - lo)) / 1000 if hi else 0.0

        def refused():
            if peer._running and self.nodes.get(gone_id) is None:
                peer._lost(gone_id, True)
        peer._loop.call_later(later, refused)

    def _pump(self, ln: _Link, loop) -> None:
        fifo = ln.fifo
        if not fifo:
            return
        if fifo[0][0] > loop.time() + 1e-3:          # stalled after this timer was set
            loop.call_at(fifo[0][0], self._pump, ln, loop)
            return
        self._deliver(ln, fifo.popleft()[1])             # the head this timer was set for
        horizon = loop.time() + 1e-3
        while fifo and fifo[0][0] <= horizon:
            self._deliver(ln, fifo.popleft()[1])
        if fifo:
            loop.call_at(fifo[0][0], self._pump, ln, loop)

    def _deliver(self, ln: _Link, item) -> None:
        ln.inflight -= 1
        src_id, dst_id = ln.src, ln.dst
        dst = self.nodes.get(dst_id)
        if dst is None or not dst._running or not self.can_talk(src_id, dst_id) \
                or src_id not in dst._peers:
            self.dropped += 1
            return
        if self.wire:
            group = item.group
            msg = item.message if item.message is not None else \
                codec.decode_frame(item, src_id, dst_id, channels=(codec.RAFT,))
        else:
            group, msg = item
        self.delivered += 1
        dst._receive(src_id, msg, group)


def _sent_copy(message):
    """The message as it leaves the sender: a payload or chunk that is a view (of the
    sender's mapped log) is copied now, as a socket send copies it into the kernel. Kept as
    a view, it changed in flight when the sender's log was cut or rewritten after the send
    (a power loss zeroes its unflushed tail): the receiver refused "bad magic/version at
    byte 0 of the range" (nodesim seed 15370), which no real network does."""
    for name in ("payload", "chunk"):
        v = getattr(message, name, None)
        if type(v) is memoryview:
            message = copy.copy(message)
            setattr(message, name, bytes(v))
    return message


class SimTransport:
    """PeerTransport's interface over a SimNetwork (see the module docstring)."""

    def __init__(self, node_id: str, network: SimNetwork, on_message: Callable, *,
                 peers: dict | None = None):
        self.node_id = check_node_id(node_id, "node id", ConfigError)
        if node_id in network.nodes:
            raise ConfigError(f"node {node_id!r} is already on this network")
        self.network = network
        self.on_message = on_message
        # a process hosting many Raft groups (node/host.py) sets this: (peer, group, msg)
        self.on_group_message = None
        self.on_peer_lost = None      # (peer, refused): net/seam.py
        self.address = ("sim", node_id)
        self._peers: set = set()
        self._init_peers = dict(peers or {})
        self._stats: dict = collections.defaultdict(lambda: dict(
            sent=0, received=0, dropped_no_connection=0, dropped_backpressure=0))
        self._running = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()
        network.nodes[node_id] = self

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._running = True
        for pid, addr in self._init_peers.items():
            self.add_peer(pid, addr)
        for t in self.network.nodes.values():
            t._notify()

    async def close(self) -> None:
        self._running = False
        self._closed = True
        self.network.nodes.pop(self.node_id, None)
        for t in self.network.nodes.values():
            t._notify()
            self.network._reset_after(self, t)

    @property
    def closed(self) -> bool:
        return self._closed

    def add_peer(self, peer_id: str, address=None) -> None:
        check_node_id(peer_id, "peer id", ConfigError)
        if peer_id == self.node_id:
            raise ConfigError("a node is not its own peer")
        self._peers.add(peer_id)
        self._notify()

    def remove_peer(self, peer_id: str) -> None:
        self._peers.discard(peer_id)

    def peers(self) -> list:
        return sorted(self._peers)

    def is_connected(self, peer_id: str, lane=None) -> bool:
        dst = self.network.nodes.get(peer_id)
        return (self._running and peer_id in self._peers and dst is not None and dst._running
                and self.node_id in dst._peers and self.network.can_talk(self.node_id, peer_id))

    async def wait_connected(self, peer_id: str, timeout: float) -> None:
        deadline = self._loop.time() + timeout
        while not self.is_connected(peer_id):
            left = deadline - self._loop.time()
            if left <= 0:
                raise TimeoutError(f"{self.node_id!r}: no link to {peer_id!r} after {timeout} s")
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass

    def send(self, peer_id: str, message, group: int = 0) -> bool:
        if self._closed:
            raise TransportClosedError("transport is closed")
        if peer_id not in self._peers:
            return False
        return self.network._submit(self, peer_id, message, group)

    def stats(self) -> dict:
        return {"node_id": self.node_id, "address": self.address,
                "peers": {p: dict(self._stats[p], connected=self.is_connected(p))
                          for p in sorted(self._peers)}}

    def _receive(self, src_id: str, msg, group: int = 0) -> None:
        self._stats[src_id]["received"] += 1
        try:
            if self.on_group_message is not None:
                self.on_group_message(src_id, group, msg)
            else:
                self.on_message(src_id, msg)
        except Exception:
            log.exception("on_message failed for a message from %r", src_id)

    def _lost(self, peer_id: str, refused: bool) -> None:
        report_peer_lost(self, peer_id, refused)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
