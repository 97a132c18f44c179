"""Where the CPU of a replicated produce goes, per replica role and entry point: the in-process
path of bench/node_inprocess_cpu.py (three Nodes, their client services and an AsyncClient
on one uvloop), with the loop's entry points (a connection's read, the drain, the tick) and
the log's hot calls wrapped to add up their thread CPU per request, by the role of the node
they ran on (L leader, F followers). A wrapped call costs ~1 µs more; nested rows overlap
(buffer_updated includes _on_message, which includes step, which includes
append_replicated). Prints µs per request, calls per request and µs per call.

    python bench/node_inprocess_split.py [N=800] [BATCH=256] [WINDOW=8]
"""
import asyncio
import collections
import os
import sys
import tempfile
import time

import uvloop

from node_inprocess_cpu import _start, _stop
from quorumlog.client import AsyncClient
from quorumlog.net import transport
from quorumlog.node import driver, pipeline, storebridge
from quorumlog.raft import core
from quorumlog.raft.messages import Role
from quorumlog.store import nativelog

ACC = collections.Counter()
CALLS = collections.Counter()
NODES: dict = {}
SEAMS: dict = {}


def _wrap(cls, name, key_of) -> None:
    orig = getattr(cls, name)

    def wrapped(self, *a, **k):
        t0 = time.thread_time_ns()
        try:
            return orig(self, *a, **k)
        finally:
            key = f"{key_of(self)} {name}"
            ACC[key] += time.thread_time_ns() - t0
            CALLS[key] += 1
    setattr(cls, name, wrapped)


def _role(node) -> str:
    return "L" if node is not None and node.core.role == Role.LEADER else "F"


def _install() -> None:
    def conn(c):
        if c.role == transport.Role.CLIENT:
            return "client"
        return _role(NODES.get(c.owner.node_id)) + " peer"
    _wrap(transport._Conn, "buffer_updated", conn)
    for name in ("_on_message", "_drain_soon", "_on_tick", "_apply"):
        _wrap(driver.Node, name, _role)
    _wrap(core.RaftCore, "step", lambda c: "L" if c.role == Role.LEADER else "F")
    _wrap(nativelog.NativeRaftLog, "append_replicated", lambda _: "F")
    _wrap(nativelog.NativeRaftLog, "read", lambda _: "L")
    # the single message's critical path: the proposal's loop turn, the APPEND and answer
    # writes, and what an apply does before and after the answers
    _wrap(pipeline.Pipeline, "_propose_queued", lambda _: "L")
    _wrap(pipeline.Pipeline, "on_applied", lambda p: _role(p._node))
    _wrap(storebridge.MetaSeam, "apply_committed", lambda s: _role(SEAMS.get(id(s))))
    _wrap(transport._Conn, "_write", conn)
    _wrap(driver.Node, "_drain", _role)


async def main(tmp, n, batch, window):
    nodes, services, addrs = await _start(tmp)
    NODES.update((x.id, x) for x in nodes)
    SEAMS.update((id(x.seam), x) for x in nodes)
    client = AsyncClient(addrs, secret="s" * 16)
    body = os.urandom(1024)
    one = body if batch == 1 else [body] * batch
    try:
        for _ in range(50):
            await client.produce("t", one)
        ACC.clear()
        CALLS.clear()

        async def producer(k):
            for _ in range(k):
                await client.produce("t", one)
        cpu0 = time.process_time()
        await asyncio.gather(*(producer(n // window) for _ in range(window)))
        cpu = time.process_time() - cpu0
        done = n // window * window
        print(f"{done} requests x {batch}: {cpu / done * 1e6:.0f} µs CPU per request")
        for k in sorted(ACC):
            print(f"  {k:24s} {ACC[k] / done / 1e3:8.1f} µs/request {CALLS[k] / done:6.2f} "
                  f"calls/request {ACC[k] / CALLS[k] / 1e3:7.1f} µs/call")
    finally:
        await _stop(client, services, nodes)


if __name__ == "__main__":
    _install()
    args = [int(a) for a in sys.argv[1:]]
    with tempfile.TemporaryDirectory() as d:
        uvloop.run(main(d, *(args + [800, 256, 8][len(args):])))
