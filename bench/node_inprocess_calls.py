"""Python calls per produce request, by party: the in-process path of
bench/node_inprocess_cpu.py (three Nodes, their client services and an AsyncClient on one
uvloop), traced with sys.setprofile over N requests after 100 warm-up ones. Each call (a
Python function, or a C function called from Python) is charged to the leader (L), a
follower (F) or the client (?) by the nearest frame up its stack whose `self` is a Node, a
Pipeline, a ClientService, a PeerTransport or one of its connections. A count, not a time:
it does not move with the machine's load, so two trees compare on a busy machine.

    python bench/node_inprocess_calls.py [N=20] [BATCH=1] [TOP=40] [PRODUCERS=1] [FLUSH=async]

PRODUCERS > 1: that many AsyncClients (one connection each), each with one request in flight,
as `quorumlog bench cluster --producers P --window 1` drives the leader (N requests in all);
FLUSH sync: the replicas flush before they acknowledge (`--flush sync`).

Compare two trees by running it with PYTHONPATH=<tree>/src.
"""
import asyncio
import collections
import os
import sys
import tempfile

import uvloop

from node_inprocess_cpu import _start, _stop
from quorumlog.client import AsyncClient
from quorumlog.net import transport
from quorumlog.node.driver import Node
from quorumlog.node.pipeline import Pipeline
from quorumlog.node.service import ClientService
from quorumlog.raft.messages import Role

_MAX_DEPTH = 40


def _party_of(leader, leader_transports):
    def party(frame) -> str:
        depth = 0
        while frame is not None and depth < _MAX_DEPTH:
            s = frame.f_locals.get("self")
            if isinstance(s, Node):
                return "L" if s is leader else "F"
            if isinstance(s, (Pipeline, ClientService)):
                return "L" if s._node is leader else "F"
            if isinstance(s, transport.PeerTransport):
                return "L" if id(s) in leader_transports else "F"
            if isinstance(s, transport._Conn):
                if not isinstance(s.owner, transport.PeerTransport):
                    return "?"      # the client's own connection (a client-side owner)
                return "L" if id(s.owner) in leader_transports else "F"
            frame = frame.f_back
            depth += 1
        return "?"
    return party


async def main(tmp, n, batch, top, producers=1, flush="async"):
    nodes, services, addrs = await _start(tmp, flush)
    clients = [AsyncClient(addrs, secret="s" * 16) for _ in range(producers)]
    client = clients[0]
    one = os.urandom(1024) if batch == 1 else [os.urandom(1024)] * batch

    async def produce_all(k):
        """k requests, spread over the producers, each with one in flight"""
        async def one_producer(c, m):
            for _ in range(m):
                await c.produce("t", one)
        await asyncio.gather(*(one_producer(c, k // producers) for c in clients))
    try:
        await produce_all(100 * producers)
        leader = next(x for x in nodes if x.role == Role.LEADER)
        ltr = {id(leader.transport)} | {id(s.transport) for s in services if s._node is leader}
        party = _party_of(leader, ltr)
        calls = collections.Counter()

        def prof(frame, event, arg):
            if event == "call":
                co = frame.f_code
                where = co.co_filename.split("src/")[-1].split("python3.11/")[-1]
                calls[(party(frame), f"{where}:{co.co_firstlineno} {co.co_name}")] += 1
            elif event == "c_call":
                calls[(party(frame), "C " + getattr(arg, "__qualname__", str(arg)))] += 1
        n = n // producers * producers
        sys.setprofile(prof)
        await produce_all(n)
        sys.setprofile(None)
        by = collections.Counter()
        for (p, name), k in calls.items():
            by[p, name.startswith("C ")] += k
        print(f"{n} requests x {batch}, {producers} producers, {flush}: calls per request (Python functions + C functions "
              "called from Python)")
        for p, label in (("L", "leader"), ("F", "followers"), ("?", "client")):
            print(f"  {label:10s} {by[p, False] / n:7.1f} + {by[p, True] / n:6.1f}")
        for p, label in (("L", "leader"), ("F", "followers"), ("?", "client")):
            print(f"{label}, top {top}:")
            rows = sorted(((k, name) for (q, name), k in calls.items() if q == p),
                          reverse=True)
            for k, name in rows[:top]:
                print(f"  {k / n:6.1f} {name}")
    finally:
        for c in clients[1:]:
            await c.close()
        await _stop(client, services, nodes)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:5]] + sys.argv[5:6]
    with tempfile.TemporaryDirectory() as d:
        uvloop.run(main(d, *(args + [20, 1, 40, 1, "async"][len(args):])))
