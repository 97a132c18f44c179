"""The production parts a Node is built from: the TCP transport, the monotonic clock and the
flush thread (`quorumlog serve`, `open_replica`). The deterministic simulator passes its own
(quorumlog.testing.nodesim); the driver codes against the seams only (net/seam.py Transport,
node/clock.py Clock, node/flusher.py FlushService).
"""
from __future__ import annotations

import random

from ..net.auth import AuthConfig
from ..net.transport import PeerTransport, TransportConfig
from .clock import MonotonicClock
from .config import NodeConfig, parse_address, read_secret
from .flusher import Flusher

__all__ = ["tcp_transport", "thread_flusher", "MonotonicClock"]


def tcp_transport(cfg: NodeConfig, *, transport_config: TransportConfig | None = None,
                  rng: random.Random | None = None,
                  segment_size_bytes: int | None = None) -> PeerTransport:
    """The authenticated TCP transport to cfg.peers, listening on peers[node_id]; its
    on_message is set by the Node that uses it. segment_size_bytes: this replica's log
    geometry, which the handshake compares with the peer's (GeometryMismatchError)."""
    nid = cfg.node_id
    auth = AuthConfig(cfg.cluster_id, nid, read_secret(cfg),
                      peers=[p for p in cfg.peers if p != nid], insecure=cfg.insecure,
                      segment_size_bytes=segment_size_bytes or 0)
    host, port = parse_address(cfg.peers[nid], f"peers[{nid!r}]")
    tcfg = transport_config or TransportConfig(
        max_frame_bytes=cfg.max_frame_bytes,
        handshake_timeout_ms=cfg.handshake_timeout_ms,
        max_send_queue_bytes=max(64 << 20, cfg.max_frame_bytes),
        control_lane=cfg.control_lane)
    peers = {p: parse_address(a, f"peers[{p!r}]") for p, a in cfg.peers.items() if p != nid}
    return PeerTransport(nid, auth, None, listen=(host, port), peers=peers, config=tcfg,
                         rng=rng)


def thread_flusher(store_flush_mode: str, in_flight: int = 1) -> Flusher | None:
    """Group commit on `in_flight` threads for flush = "sync"; None for "async" (the driver
    reports a flush at once: the log's own thread flushes in the background)."""
    return Flusher(in_flight=in_flight) if store_flush_mode == "sync" else None
