"""Running one scenario against real Node drivers and stores over the simulated network, on
virtual time (quorumlog.testing.nodesim): start every member, run the scenario, stop every
node and its flush task, remove the directories."""
from __future__ import annotations

import asyncio

from quorumlog.raft.messages import Role
from quorumlog.testing import nodesim
from quorumlog.testing.nodesim import NodeSim


async def wait_leader(sim, exclude=(), timeout_s=10.0):
    """A member leading and ready to serve (not one of `exclude`), in virtual seconds."""
    deadline = sim.loop.time() + timeout_s
    while sim.loop.time() < deadline:
        for m in sim.live():
            if m.id not in exclude and m.node.role == Role.LEADER and m.node.ready_to_serve:
                return m
        await asyncio.sleep(0.01)
    raise AssertionError("no leader: " + sim.checker.states())


def run_scenario(scenario, members=5, mode="async"):
    """scenario(sim) -> its result, with every member started first and stopped after."""
    return nodesim.run_scenario(NodeSim(members, mode=mode), scenario)
