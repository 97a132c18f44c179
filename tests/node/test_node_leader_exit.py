"""A follower whose leader's process exits campaigns at once (raft/election.py on_peer_down:
the transport's redial is refused), so a kill -9 of the leader costs an election, not the
leak's 700 ms; a partition (or a stalled leader) says nothing and keeps the leak's timeout.
Real Node drivers and stores over the simulated network, on virtual time
(quorumlog.testing.nodesim; net/simnet.py reports a closed node as the TCP transport
reports a killed process: reset, then refused)."""
import asyncio

import pytest
from nodesim_support import wait_leader

from quorumlog.raft.messages import Role
from quorumlog.raft.state import NEVER
from quorumlog.testing import nodesim
from quorumlog.testing.nodesim import NodeSim

LEAK_S = 0.7        # RaftConfig's heartbeat_interval_ms x max_heartbeat_leak


def _run(scenario, *, exit_hint: bool = True):
    sim = NodeSim(11, mode="async")
    sim.raft_cfg.campaign_on_leader_exit = exit_hint
    return nodesim.run_scenario(sim, scenario)


async def _kill_leader(sim):
    lead = await wait_leader(sim)
    await lead.node.put("t", b"before")
    t0 = sim.loop.time()
    await sim.take_down(sim.members[lead.id], power=False)      # the process is gone
    new = await wait_leader(sim, exclude=(lead.id,))
    elapsed = sim.loop.time() - t0
    r = await asyncio.wait_for(new.node.put("t", b"after"), 5)
    return elapsed, r.queue_offset


def test_followers_elect_a_new_leader_at_once_when_the_leaders_process_exits():
    # before: the survivors waited out the leak (>= 700 ms of silence) and a vote interval
    elapsed, offset = _run(_kill_leader)
    assert elapsed < LEAK_S / 2, f"new leader after {elapsed * 1000:.0f} ms"
    assert offset == 1


def test_without_the_exit_hint_a_kill_waits_for_the_leak():
    # RaftConfig.campaign_on_leader_exit=False: the timeout path alone, as before
    elapsed, _ = _run(_kill_leader, exit_hint=False)
    assert elapsed >= LEAK_S


async def _partition_leader(sim):
    lead = await wait_leader(sim)
    others = [i for i in sim.members if i != lead.id]
    sim.net.partition({lead.id}, set(others))
    t0 = sim.loop.time()
    # the leader is cut off but alive: nothing may campaign before the leak has passed
    while sim.loop.time() - t0 < LEAK_S * 0.9:
        for i in others:
            n = sim.members[i].node
            assert n.role != Role.LEADER and n.core.role == Role.FOLLOWER, (
                f"{i} left its live leader {sim.loop.time() - t0:.3f} s into a partition: "
                + sim.checker.states())
        await asyncio.sleep(0.01)
    new = await wait_leader(sim, exclude=(lead.id,))
    return sim.loop.time() - t0, new.id


def test_a_partitioned_leader_is_given_up_only_after_the_leak():
    elapsed, new = _run(_partition_leader)
    assert elapsed >= LEAK_S and new is not None


@pytest.mark.parametrize("exit_hint", [True, False])
def test_a_stopped_follower_changes_nothing_for_the_others(exit_hint):
    async def scenario(sim):
        lead = await wait_leader(sim)
        follower = next(i for i in sim.members if i != lead.id)
        await sim.take_down(sim.members[follower], power=False)
        t0 = sim.loop.time()
        while sim.loop.time() - t0 < LEAK_S * 1.5:
            assert lead.node.role == Role.LEADER, sim.checker.states()
            await asyncio.sleep(0.05)
        return lead.node.core.term
    _run(scenario, exit_hint=exit_hint)



def test_the_exit_is_noted_when_it_is_reported_not_at_the_last_sparse_tick():
    # a follower's ticks are sparse (node/driver.py _tick_delay_ms): the driver sets the
    # core's clock before on_peer_down, so the exit is stamped when the refusal came, not
    # at the follower's last heartbeat or tick (before: the stamp predated the kill)
    async def scenario(sim):
        lead = await wait_leader(sim)
        await lead.node.put("t", b"before")
        survivors = [sim.members[i].node for i in sim.members if i != lead.id]
        kill_ms = [n.clock.now_ms() for n in survivors]      # (each node's own clock)
        await sim.take_down(sim.members[lead.id], power=False)
        await wait_leader(sim, exclude=(lead.id,))
        return [(n.core._leader_exit_ms, k) for n, k in zip(survivors, kill_ms)]

    stamps = _run(scenario)
    noted = [(s, k) for s, k in stamps if s != NEVER]
    assert noted, f"no survivor noted the exit: {stamps}"
    assert all(s >= k for s, k in noted), f"exit stamped before the kill: {noted}"
