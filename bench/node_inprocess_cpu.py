"""CPU per produce request of a whole replicated path in one process: three Nodes, their
client services and an AsyncClient on one uvloop (real TCP on 127.0.0.1, ports from the OS),
so `time.process_time()` counts every replica's and the client's Python and syscalls and
nothing of other processes. Prints CPU µs per request over N requests after 50 warm-up ones;
with PROFILE, also writes a cProfile (thread CPU time) there.

    python bench/node_inprocess_cpu.py [N=3000] [BATCH=1] [WINDOW=1] [PROFILE]

Compare two trees by running it with PYTHONPATH=<tree>/src, alternating.
"""
import asyncio
import cProfile
import os
import pathlib
import sys
import tempfile
import time

import uvloop

from quorumlog.client import AsyncClient
from quorumlog.localcluster import free_port
from quorumlog.node import Node, load_node_config
from quorumlog.node.service import ClientService
from quorumlog.raft.messages import Role


async def _start(tmp, flush: str = "async"):
    ids = ["n1", "n2", "n3"]
    peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
    clients = {i: f"127.0.0.1:{free_port()}" for i in ids}
    nodes, services = [], []
    for i in ids:
        cfg, rcfg, scfg = load_node_config(
            None, {}, node_id=i, peers=peers, secret="s" * 16, client_addr=clients[i],
            client_addrs=clients, raft=dict(max_heartbeat_leak=30),
            store=dict(segment_size_bytes=1 << 28, flush=flush))
        n = Node(pathlib.Path(tmp) / i, cfg, rcfg, store_cfg=scfg)
        await n.start()
        nodes.append(n)
        s = ClientService(n, cfg)
        await s.start()
        services.append(s)
    deadline = time.monotonic() + 30
    while not any(n.role == Role.LEADER and n.ready_to_serve for n in nodes):
        if time.monotonic() > deadline:
            raise SystemExit("no leader within 30 s")
        await asyncio.sleep(0.01)
    return nodes, services, list(clients.values())


async def _stop(client, services, nodes) -> None:
    """Close the client, then the services, then the nodes _start made."""
    await client.close()
    for s in services:
        await s.stop()
    for node in nodes:
        await node.stop()


async def main(tmp, n, batch, window, profile):
    nodes, services, addrs = await _start(tmp)
    client = AsyncClient(addrs, secret="s" * 16)
    body = os.urandom(1024)
    one = body if batch == 1 else [body] * batch
    try:
        for _ in range(50):
            await client.produce("t", one)

        async def producer(k):
            for _ in range(k):
                await client.produce("t", one)
        prof = cProfile.Profile(time.thread_time) if profile else None
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if prof:
            prof.enable()
        await asyncio.gather(*(producer(n // window) for _ in range(window)))
        if prof:
            prof.disable()
            prof.dump_stats(profile)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        done = n // window * window
        print(f"{done} requests x {batch}: wall {wall:.2f} s, CPU {cpu:.2f} s, "
              f"{cpu / done * 1e6:.0f} µs CPU per request (3 replicas + client)")
    finally:
        await _stop(client, services, nodes)


if __name__ == "__main__":
    args = sys.argv[1:]
    with tempfile.TemporaryDirectory() as d:
        uvloop.run(main(d, int(args[0]) if args else 3000, int(args[1]) if len(args) > 1 else 1,
                        int(args[2]) if len(args) > 2 else 1, args[3] if len(args) > 3 else None))
