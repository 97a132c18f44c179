"""The replica server: the groups of one process (node/host.py NodeHost: one Node per Raft
group -- Raft + store -- sharing one peer listener; one group is a plain replica) and its
client listener
(quorumlog.node.service.ClientService: produce, fetch with long-poll, offsets, consumer
offsets, find by key, admin); run_server runs both until SIGTERM/SIGINT. The command is
`quorumlog serve` (quorumlog/cli/node.py):

    quorumlog serve --config node.toml --dir /var/lib/q1 [--node-id n1 ...]

Settings: a TOML file ([node], [raft], [store] tables) < QUORUMLOG_* environment < flags
(quorumlog.node.config). Logs go to stderr; SIGTERM/SIGINT stop the replica cleanly (the
store is flushed and closed, the process exits 0).
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal

from .node.config import NodeConfig
from .node.driver import Node
from .node.host import NodeHost
from .node.service import ClientService

log = logging.getLogger(__name__)

__all__ = ["ClientService", "run_server"]


# ------------------------------------------------------------------------------------ serve
async def run_server(path, cfg: NodeConfig, raft_cfg, store_cfg, *, stop_event=None,
                     ready_file: str | None = None) -> int:
    """Run one replica (cfg.groups Raft groups) until stop_event is set (or SIGTERM/SIGINT);
    returns an exit code."""
    loop = asyncio.get_running_loop()
    stop_event = stop_event or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop_event.set)
        except (NotImplementedError, RuntimeError):
            pass
    # transport and clock left out: the production ones (node/wiring.py); the node builds
    # the TCP transport once its log is open, so the handshake carries the log's geometry
    # (Node by this module's name: the benchmark's replica serves with a subclass)
    node = NodeHost(path, cfg, raft_cfg, store_cfg=store_cfg, node_class=Node)
    await node.start()
    service = None
    try:
        if cfg.client_addr:
            service = ClientService(node, cfg)
            await service.start()
        log.info("replica %s serving: peers on %s, clients on %s, flush=%s, groups=%d",
                 cfg.node_id, node.peer_address, service.address if service else None,
                 store_cfg.flush, node.groups)
        if ready_file:
            tmp = ready_file + ".tmp"
            with open(tmp, "w") as fh:
                fh.write(f"{os.getpid()}\n")
            os.replace(tmp, ready_file)
        await stop_event.wait()
        log.info("replica %s stopping", cfg.node_id)
    finally:
        if service is not None:
            await service.stop()
        await node.stop()
    return 0
