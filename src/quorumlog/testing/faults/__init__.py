"""Jepsen-style fault testing of a replica group: real `python -m quorumlog serve` processes
on loopback, their peer links through the fault proxy, idempotent producers recording every
operation, nemeses injecting faults, then a heal, final reads from every replica, a byte
comparison of the logs and the history checker (quorumlog.testing.history).

    python -m quorumlog.testing.faults --seed 7 --duration 300 --kills 20 --partitions 5
    python -m quorumlog.testing.faults --seed 7 --flush sync --kills 500 --all-nemeses

The seed fixes the nemesis plan (which fault, in which order, on which node, in which mode)
and the workload's choices; the interleaving of real processes is not reproducible, so a
failing seed is a lead, not a replay. Exit status: 0 valid, 1 findings, 2 harness failure.
Everything a run produced (replica logs, history.jsonl, summary.json) stays in its
directory when it fails or with --keep.

Replicas are started by ProxiedCluster, a LocalCluster whose command gives each replica its
own view of the peers: itself at its real address, every other node at the proxy listener
of the link (self -> other). Clients talk to the replicas directly.

The package, by concern: config (RunConfig), cluster (the proxied replicas, client
channels, the io loop), harness (what the nemeses act on), tracing (msync strace), workload
(the producers), endstate (final reads, the stopped logs), volume (the full-disk victim's
file system), run (the phases, the summary), cli. The nemeses are in
quorumlog.testing.nemesis, the proxy in quorumlog.testing.faultproxy, the checker in
quorumlog.testing.history.
"""
from .cluster import Channels, IoThread, ProxiedCluster, wait_for
from .config import COUNTERS, RunConfig
from .harness import Harness
from .run import Report, build_plan, run
from .volume import DiskVolume
from .workload import Workload

__all__ = ["RunConfig", "ProxiedCluster", "Channels", "IoThread", "Harness", "Workload",
           "DiskVolume", "Report", "COUNTERS", "build_plan", "run", "wait_for"]
