"""Running one scenario against real Node drivers and stores over the simulated network, on
virtual time (quorumlog.testing.nodesim): start every member, run the scenario, stop every
node and its flush task, remove the directories."""
from __future__ import annotations

import asyncio
import shutil

from quorumlog.raft.messages import Role
from quorumlog.testing.nodesim import NodeSim
from quorumlog.testing.simloop import VirtualTimeLoop


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
    sim = NodeSim(members, mode=mode)

    async def run():
        sim.loop = asyncio.get_running_loop()
        for m in sim.members.values():
            await sim.start_member(m)
        try:
            return await scenario(sim)
        finally:
            for m in sim.live():
                await m.node.stop()
            for m in sim.members.values():
                if m.flush_task is not None:
                    m.flush_task.cancel()

    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()
        shutil.rmtree(sim.root, ignore_errors=True)
