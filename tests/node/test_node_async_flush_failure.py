"""A failed flush in async mode stops the node (docs/node.md: a failed flush stops the node's
Raft participation), so the group moves on. In async mode the log's background flush fails
where the driver does not see it; the log then refuses every write, and the first append the
core makes (a put on the leader, the NOOP of a new leader, a follower's APPEND) raises
LogFailedError. Before the fix the driver took that for a refused message (or a failed put)
and went on: a leader with a failed log kept heartbeating and the group stayed without a
writable leader. Real Node drivers and stores over the simulated network, on virtual time
(quorumlog.testing.nodesim)."""
import asyncio
import shutil

from quorumlog.errors import QuorumlogError
from quorumlog.raft.messages import Role
from quorumlog.testing.nodesim import NodeSim
from quorumlog.testing.simloop import VirtualTimeLoop


async def _leader(sim, exclude=(), timeout_s=10.0):
    deadline = sim.loop.time() + timeout_s
    while sim.loop.time() < deadline:
        for m in sim.live():
            if m.id not in exclude and m.node.role == Role.LEADER and m.node.ready_to_serve:
                return m
        await asyncio.sleep(0.01)
    raise AssertionError("no leader: " + sim.checker.states())


async def _scenario(sim):
    sim.loop = asyncio.get_running_loop()
    for m in sim.members.values():
        await sim.start_member(m)
    try:
        lead = await _leader(sim)
        await lead.node.put("t", b"before")
        lead.disk.fail_next = True                 # the next background flush: EIO
        await asyncio.sleep(0.2)                   # (it runs every 50 ms)
        refused = None
        try:
            await lead.node.put("t", b"refused")
        except QuorumlogError as e:
            refused = e
        failed = lead.node.status()["failed"]
        new = await _leader(sim, exclude=(lead.id,))
        r = await asyncio.wait_for(new.node.put("t", b"after"), 5)
        return lead.id, refused, failed, new.id, r.queue_offset
    finally:
        await sim.stop_all()


def test_a_failed_async_flush_on_the_leader_stops_it_and_another_leads():
    sim = NodeSim(5, mode="async")
    loop = VirtualTimeLoop()
    try:
        old_leader, refused, failed, new_leader, offset = loop.run_until_complete(_scenario(sim))
    finally:
        loop.close()
        shutil.rmtree(sim.root, ignore_errors=True)
    assert isinstance(refused, QuorumlogError), "a put on a leader with a failed log succeeded"
    assert failed, "the node goes on with a failed log"
    assert new_leader != old_leader
    assert offset >= 0


async def _membership_scenario(sim):
    sim.loop = asyncio.get_running_loop()
    for m in sim.members.values():
        await sim.start_member(m)
    try:
        lead = await _leader(sim)
        await lead.node.put("t", b"before")
        lead.disk.fail_next = True                 # the next background flush: EIO
        await asyncio.sleep(0.2)
        other = [i for i in sim.members if i != lead.id][0]
        refused = None
        try:
            lead.node.remove_member(other)         # (the group is idle: no put finds it)
        except QuorumlogError as e:
            refused = e
        failed = lead.node.status()["failed"]
        return lead.id, refused, failed
    finally:
        await sim.stop_all()


def test_a_membership_change_on_an_idle_leader_with_a_failed_log_stops_it():
    """Nodesim seed 2929 (async): the last fault failed the leader's background flush while
    the group was idle; the harness's add_member (to give back the member the nemesis had
    removed) raised LogFailedError every time, and the node went on leading an incomplete
    group for good. Now a membership change that finds the failed log stops the node, as a
    put does. Failed before (status failed None)."""
    sim = NodeSim(5, mode="async")
    loop = VirtualTimeLoop()
    try:
        _, refused, failed = loop.run_until_complete(_membership_scenario(sim))
    finally:
        loop.close()
        shutil.rmtree(sim.root, ignore_errors=True)
    assert isinstance(refused, QuorumlogError) and "refuses writes" in str(refused), refused
    assert failed, "the node goes on with a failed log"
