"""The replicated workloads, registered so that `quorumlog bench --help` lists them and the
default suite names them, but not runnable yet: they need the replicated node (asyncio driver
+ server), which this build does not contain. They exit with code 2 and say so; they never
report numbers they did not measure.

cluster   --replicas N nodes on loopback, --producers P client connections, each message
          acknowledged after a majority has it (flush per --flush), --window batches in
          flight per connection; reference: one loopback TCP stream.
failover  the cluster workload under load while the leader is SIGKILLed every few seconds;
          reports the gap from each kill to the next acknowledgement, and reads back every
          acknowledged message from the survivors.

To implement one: give the class a `run` that starts the nodes as processes (ports from the
OS, every process killed by pid in a `finally`), drives them with measure.run_producers
(a Sender whose send/wait speak the client protocol), reads back through a node with a
payload.Verifier, reports each node's CPU (measure.pid_cpu_seconds) in Result.cpu_seconds,
and make `unavailable` return None.
"""
from __future__ import annotations

from ..options import Resolved
from . import RunContext, Workload, WorkloadUnavailable, register

NOT_BUILT = "not available in this build: the replicated node is not built yet"


class _Replicated(Workload):
    uses = frozenset({"size", "count", "duration_s", "producers", "batch", "window", "flush",
                      "replicas"})

    def unavailable(self) -> str | None:
        return NOT_BUILT

    def run(self, r: Resolved, ctx: RunContext) -> list:
        raise WorkloadUnavailable(f"{self.name}: {NOT_BUILT}")


@register
class ClusterWorkload(_Replicated):
    """--replicas nodes on loopback, --producers client connections with --window batches in
    flight each, every message acknowledged after a majority has it. Not available until the
    replicated node is built."""
    name = "cluster"
    summary = "N replicas on loopback, P producer connections, acked after majority commit"
    defaults = {"duration_s": 10.0, "batch": 1000, "producers": 4, "window": 4,
                "flush": "async", "replicas": 3}


@register
class FailoverWorkload(_Replicated):
    """The cluster workload while the leader is SIGKILLed every few seconds: the gap from each
    kill to the next acknowledgement, and every acknowledged message read back from the
    survivors. Not available until the replicated node is built."""
    name = "failover"
    summary = "the cluster under load with the leader SIGKILLed periodically; gap per kill"
    defaults = {"duration_s": 30.0, "batch": 100, "producers": 4, "window": 4,
                "flush": "sync", "replicas": 3}
