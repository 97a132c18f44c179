"""A follower is ticked only when its leak timeout is due (RaftCore.next_tick_ms), at most a
heartbeat interval apart, instead of every tick_ms: an idle replica's wake-ups are most of its
idle CPU (docs/benchmarks.md, issue 20 branch single20). What must not change: the leader's
pace, a follower noting a heartbeat at the time it arrived (the lease: RaftCore.set_clock),
and a dead leader replaced within the leak timeout plus a vote. Real Node drivers over the
simulated network, on virtual time (quorumlog.testing.nodesim)."""
import asyncio

from nodesim_support import run_scenario, wait_leader

from quorumlog.raft.messages import Role


async def _ticks_scenario(sim):
    lead = await wait_leader(sim)
    await lead.node.put("t", b"x")
    before = {m.id: m.node.stats["ticks"] for m in sim.live()}
    await asyncio.sleep(2.0)                       # two virtual seconds, idle
    ticks = {m.id: m.node.stats["ticks"] - before[m.id] for m in sim.live()}
    roles = {m.id: m.node.role for m in sim.live()}
    sim.stop_new = True
    t0 = sim.loop.time()
    await sim.take_down(lead, power=False)
    new = await wait_leader(sim, exclude=(lead.id,), timeout_s=5.0)
    return lead.id, ticks, roles, new.id, sim.loop.time() - t0


def test_an_idle_follower_ticks_at_the_heartbeat_interval_and_still_replaces_a_dead_leader():
    lead, ticks, roles, new, took_s = run_scenario(_ticks_scenario, members=3)
    followers = [i for i, r in roles.items() if r == Role.FOLLOWER]
    assert len(followers) == 2, roles
    # the leader: every tick_ms (10 ms) of ~2 s; a follower: every heartbeat interval (100 ms)
    assert ticks[lead] >= 150, ticks
    for f in followers:
        assert 10 <= ticks[f] <= 30, ticks
    assert new != lead
    # leak (7 x 100 ms) + a pre-vote and vote round (< 250 ms jitter + answers); at tick_ms
    # ticks the followers noticed the leak within a tick, now within a ms of the deadline
    assert took_s < 1.5, took_s
