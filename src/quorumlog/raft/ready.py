"""The Ready loop, once: what a driver does with each Ready the core hands out, in the order
the core's contract gives (core.py, "THE DRIVER'S DUTIES"; docs/raft.md). A driver supplies
the duties (`Duties`) and calls `run_readies(core, duties)` after its inputs; the loop itself
is here and nowhere else -- the node (node/driver.py), the deterministic core simulator
(testing/sim.py) and the hand-driven test cluster (testing/cluster.py) all run this one.
etcd-io/raft's doc.go lists the same duties for its Ready.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

__all__ = ["Duties", "run_readies"]


class Duties(NamedTuple):
    """A driver's side of each duty (plain callables, bound once)."""
    save_hard_state: Callable   # (HardState) -> None: durable BEFORE any message of the Ready leaves
    send: Callable              # (Message) -> None: never blocks; a lost message is tolerated
    flush: Callable             # (flush_to, flush_gen) -> None: durable, then core.on_persisted
    apply: Callable             # (commit_index) -> None: commit, dispatch, reply; on_dispatched
    events: Callable            # (events) -> None: role changes and the rest, to the broker


def run_readies(core, duties: Duties, persisted: bool = False) -> int:
    """Drain every Ready of `core` through `duties` (duty 1 to 5, in order); returns how
    many Readies there were. persisted: the driver's flush reports at once (async mode, no
    flush thread): core.ready(persisted=True), no flush duty."""
    n = 0
    while core.has_ready():
        r = core.ready(persisted=persisted)
        n += 1
        if r.hard_state is not None:                       # 1. persist the hard state
            duties.save_hard_state(r.hard_state)
        if r.messages:                                     # 2. send
            send = duties.send
            for m in r.messages:
                send(m)
        if r.flush_to is not None:                         # 3. flush (and report)
            duties.flush(r.flush_to, r.flush_gen)
        if r.commit_index is not None:                     # 4. apply what is committed
            duties.apply(r.commit_index)
        if r.events:                                       # 5. events
            duties.events(r.events)
    return n
