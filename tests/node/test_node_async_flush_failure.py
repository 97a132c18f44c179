"""A failed flush in async mode stops the node (docs/node.md: a failed flush stops the node's
Raft participation), so the group moves on. In async mode the log's background flush fails
where the driver does not see it; the log then refuses every write, and the first append the
core makes (a put on the leader, the NOOP of a new leader, a follower's APPEND) raises
LogFailedError. Before the fix the driver took that for a refused message (or a failed put)
and went on: a leader with a failed log kept heartbeating and the group stayed without a
writable leader. Real Node drivers and stores over the simulated network, on virtual time
(quorumlog.testing.nodesim)."""
import asyncio

from nodesim_support import run_scenario, wait_leader

from quorumlog.errors import QuorumlogError


async def _scenario(sim):
    lead = await wait_leader(sim)
    await lead.node.put("t", b"before")
    lead.disk.fail_next = True                 # the next background flush: EIO
    await asyncio.sleep(0.2)                   # (it runs every 50 ms)
    refused = None
    try:
        await lead.node.put("t", b"refused")
    except QuorumlogError as e:
        refused = e
    failed = lead.node.status()["failed"]
    new = await wait_leader(sim, exclude=(lead.id,))
    r = await asyncio.wait_for(new.node.put("t", b"after"), 5)
    return lead.id, refused, failed, new.id, r.queue_offset


def test_a_failed_async_flush_on_the_leader_stops_it_and_another_leads():
    old_leader, refused, failed, new_leader, offset = run_scenario(_scenario)
    assert isinstance(refused, QuorumlogError), "a put on a leader with a failed log succeeded"
    assert failed, "the node goes on with a failed log"
    assert new_leader != old_leader
    assert offset >= 0


async def _membership_scenario(sim):
    lead = await wait_leader(sim)
    await lead.node.put("t", b"before")
    lead.disk.fail_next = True                 # the next background flush: EIO
    await asyncio.sleep(0.2)
    other = [i for i in sim.members if i != lead.id][0]
    refused = None
    try:
        lead.node.remove_member(other)         # (the group is idle: no put finds it)
    except QuorumlogError as e:
        refused = e
    return refused, lead.node.status()["failed"]


def test_a_membership_change_on_an_idle_leader_with_a_failed_log_stops_it():
    """Nodesim seed 2929 (async): the last fault failed the leader's background flush while
    the group was idle; the harness's add_member (to give back the member the nemesis had
    removed) raised LogFailedError every time, and the node went on leading an incomplete
    group for good. Now a membership change that finds the failed log stops the node, as a
    put does. Failed before (status failed None)."""
    refused, failed = run_scenario(_membership_scenario)
    assert isinstance(refused, QuorumlogError) and "refuses writes" in str(refused), refused
    assert failed, "the node goes on with a failed log"
