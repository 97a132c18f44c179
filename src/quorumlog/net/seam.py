"""The transport seam: what a Raft driver needs of the network between replicas.

Two implementations: `PeerTransport` (TCP, net/transport.py) and `SimTransport` (the simulated
network, net/simnet.py). The node (quorumlog.node.driver) is written against this protocol
only, so `quorumlog serve` and the deterministic simulator (quorumlog.testing.nodesim) run the
same driver code. hashicorp/raft's `Transport` / `InmemTransport` pair is the model.
"""
from __future__ import annotations

import logging
from typing import Callable, Protocol, runtime_checkable

__all__ = ["Transport", "report_peer_lost"]

log = logging.getLogger(__name__)


@runtime_checkable
class Transport(Protocol):
    """Messages between the replicas of one group. `send` never blocks: False (or a message
    lost later) is a lost message, which Raft tolerates. Incoming messages go to
    `on_message(peer_id, message)`, an attribute the driver sets before `start()`; so is
    `on_peer_lost(peer_id, refused)`: a connection to the peer closed (refused False), or a
    new one was refused (True: nothing listens at its address, its process is gone -- a
    partition, a stalled process or a dead host never says so).

    Optional (a driver looks for them; PeerTransport has them, SimTransport and the host's
    GroupLink not): `hold_writes()` -> bool and `release_writes()`: what is sent in between
    is written at the release, not at the end of the loop turn."""

    on_message: Callable
    on_peer_lost: Callable | None
    address: object

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def send(self, peer_id: str, message) -> bool: ...

    def add_peer(self, peer_id: str, address) -> None: ...

    def remove_peer(self, peer_id: str) -> None: ...

    def is_connected(self, peer_id: str) -> bool: ...

    def stats(self) -> dict: ...


def report_peer_lost(transport: Transport, peer_id: str, refused: bool) -> None:
    """Tell the transport's `on_peer_lost` listener, if any, of a lost peer. Both
    implementations call this: a failing listener is logged, never raised into the
    transport's own connection handling."""
    if transport.on_peer_lost is not None:
        try:
            transport.on_peer_lost(peer_id, refused)
        except Exception:
            log.exception("on_peer_lost failed for peer %r", peer_id)
