"""The recovery floor (raft/recovery.py R1, R4) survives a kill right after the reopen that
set it. nodesim seed 7476 (eb5350d, async): n3 lost power (its log cut from 118 to 107,
entries a quorum had committed with it), came up -- its commit log said lost writes were
possible, so the core entered recovery with floor term 2 -- and was killed before its first
Ready: the floor lived only in the core's memory (the hard state is written by the Ready
loop). That reopen had already rewritten the commit log's abort marker with this page
cache's identity, so the next open was an ordinary unclean one (lost_writes_possible False)
and the hard state had no floor: n3 campaigned with its short log, won term 3 with the vote
of a lagging n2, and overwrote the acknowledged entries 108..118 (95 violations). Real Node
drivers and stores over the simulated network, on virtual time (quorumlog.testing.nodesim)."""
import asyncio

from nodesim_support import run_scenario, wait_leader

from quorumlog.node.hardstate import HardStateFile


async def _scenario(sim):
    lead = await wait_leader(sim)
    for k in range(5):
        await asyncio.wait_for(lead.node.put("t", b"m%d" % k), 5)
    f = next(m for m in sim.members.values() if m is not lead)
    await sim.take_down(f, power=True)
    await sim.start_member(f)                  # unclean async open: recovering
    first = f.node.core.recovering_term
    await sim.take_down(f, power=False)        # killed before its first Ready
    on_disk = HardStateFile(f.path).load().recovering_term
    await sim.start_member(f)
    again = f.node.core.recovering_term, f.node.core.may_campaign()
    return first, on_disk, again


def test_a_kill_right_after_an_unclean_async_open_keeps_the_recovery_floor():
    first, on_disk, (again, may_campaign) = run_scenario(_scenario)
    assert first > 0, "the open after the power loss did not enter recovery"
    assert on_disk == first, f"the floor {first} was not durable when the node came up"
    assert again == first, f"the floor {first} was lost to a kill (now {again})"
    assert not may_campaign
