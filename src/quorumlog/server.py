"""The replica server: one Node (Raft + store + peer listener) and its client listener
(quorumlog.node.service.ClientService: the client protocol), and `python -m quorumlog.server`
/ `quorumlog serve`.

    python -m quorumlog.server --config node.toml --dir /var/lib/q1 [--node-id n1 ...]

Settings: a TOML file ([node], [raft], [store] tables) < QUORUMLOG_* environment < flags
(quorumlog.node.config). Logs go to stderr; SIGTERM/SIGINT stop the replica cleanly (the
store is flushed and closed, the process exits 0).
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys

from .errors import QuorumlogError
from .node.clock import MonotonicClock
from .node.config import NodeConfig, load_node_config
from .node.driver import Node
from .node.service import ClientService
from .node.wiring import tcp_transport

log = logging.getLogger(__name__)

__all__ = ["ClientService", "run_server", "main"]


# ------------------------------------------------------------------------------------ serve
async def run_server(path, cfg: NodeConfig, raft_cfg, store_cfg, *, stop_event=None,
                     ready_file: str | None = None) -> int:
    """Run one replica until stop_event is set (or SIGTERM/SIGINT); returns an exit code."""
    loop = asyncio.get_running_loop()
    stop_event = stop_event or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop_event.set)
        except (NotImplementedError, RuntimeError):
            pass
    node = Node(path, cfg, raft_cfg, store_cfg=store_cfg, transport=tcp_transport(cfg),
                clock=MonotonicClock())
    await node.start()
    service = None
    try:
        if cfg.client_addr:
            service = ClientService(node, cfg)
            await service.start()
        log.info("replica %s serving: peers on %s, clients on %s, flush=%s", cfg.node_id,
                 node.peer_address, service.address if service else None, store_cfg.flush)
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


def build_parser(prog="quorumlog serve") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run one replica of a quorumlog group.")
    p.add_argument("--dir", required=True, help="the replica's data directory")
    p.add_argument("--config", help="TOML file with [node], [raft], [store] tables")
    p.add_argument("--node-id")
    p.add_argument("--peers", help="id=host:port,... of every voter (this node included)")
    p.add_argument("--client-addr", help="host:port of the client listener")
    p.add_argument("--client-addrs", help="id=host:port,... client listeners of all members")
    p.add_argument("--cluster-id")
    p.add_argument("--secret-file")
    p.add_argument("--insecure", action="store_true", default=None)
    p.add_argument("--flush", choices=("sync", "async"))
    p.add_argument("--segment-size-bytes", type=int)
    p.add_argument("--ready-file", help="written (with the pid) once the listeners are up")
    p.add_argument("--log-level", default=os.environ.get("QUORUMLOG_LOG_LEVEL", "INFO"))
    return p


def config_from_args(a, environ=None):
    store = {}
    if a.flush:
        store["flush"] = a.flush
    if a.segment_size_bytes:
        store["segment_size_bytes"] = a.segment_size_bytes
    return load_node_config(a.config, environ, store=store, node_id=a.node_id, peers=a.peers,
                            client_addr=a.client_addr, client_addrs=a.client_addrs,
                            cluster_id=a.cluster_id, secret_file=a.secret_file,
                            insecure=a.insecure)


def main(argv=None) -> int:
    a = build_parser("python -m quorumlog.server").parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        cfg, rcfg, scfg = config_from_args(a)
    except QuorumlogError as e:
        print(f"quorumlog serve: {e}", file=sys.stderr)
        return 2
    # This process is the replica: everything allocated at start-up lives as long as it, and
    # a full collection of the young generations every 700 allocations costs the event loop
    # pauses under load (profiled: gc was a visible share of the leader's GIL time).
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        import uvloop  # noqa: F401  (optional: faster sockets, see DESIGN.md)
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        return runner(run_server(a.dir, cfg, rcfg, scfg, ready_file=a.ready_file))
    except QuorumlogError as e:
        log.critical("replica %s failed: %s", cfg.node_id, e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
