"""A replica is ticked only when its core's next deadline is due (RaftCore.next_tick_ms: a
follower's leak timeout, a leader's next heartbeat, check-quorum, lease end or time-out), at
most a heartbeat interval apart, instead of every tick_ms: an idle replica's wake-ups are most
of its idle CPU (docs/benchmarks.md, issue 20 branch single20). What must not change: a
follower noting a heartbeat at the time it arrived and a leader checking its lease at the
time it acts (RaftCore.set_clock before every input), a dead leader replaced within the leak
timeout plus a vote, and an isolated leader that stops serving before another is elected.
Real Node drivers over the simulated network, on virtual time (quorumlog.testing.nodesim)."""
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
    t0 = sim.loop.time()
    await sim.take_down(lead, power=False)
    new = await wait_leader(sim, exclude=(lead.id,), timeout_s=5.0)
    return lead.id, ticks, roles, new.id, sim.loop.time() - t0


def test_idle_replicas_tick_at_the_heartbeat_interval_and_still_replace_a_dead_leader():
    lead, ticks, roles, new, took_s = run_scenario(_ticks_scenario, members=3)
    assert roles[lead] == Role.LEADER
    assert sorted(roles.values()) == [Role.FOLLOWER, Role.FOLLOWER, Role.LEADER], roles
    # every heartbeat interval (100 ms) of ~2 s, not every tick_ms (10 ms: ~200)
    for i in roles:
        assert 10 <= ticks[i] <= 30, ticks
    assert new != lead
    # leak (7 x 100 ms) + a pre-vote and vote round (< 250 ms jitter + answers)
    assert took_s < 1.5, took_s


async def _isolation_scenario(sim):
    lead = await wait_leader(sim)
    await lead.node.put("t", b"x")
    await asyncio.sleep(0.5)
    sim.net.isolate(lead.id)
    t0 = sim.loop.time()
    stopped = elected = None
    while sim.loop.time() - t0 < 5.0 and (stopped is None or elected is None):
        now = sim.loop.time() - t0
        if stopped is None and not lead.node.ready_to_serve:
            stopped = now
        if elected is None and any(m.id != lead.id and m.node.role == Role.LEADER
                                   for m in sim.live()):
            elected = now
        await asyncio.sleep(0.001)
    sim.net.heal()
    return stopped, elected


def test_an_isolated_leader_stops_serving_before_another_is_elected():
    """The lease (raft.md): with the leader's ticks at its deadlines, its lease's end is one
    of them, and ready_to_serve goes False before the others can elect (clock rates of the
    simulated members differ by up to 4 %)."""
    stopped, elected = run_scenario(_isolation_scenario, members=3)
    assert stopped is not None and elected is not None, (stopped, elected)
    assert stopped < elected, (stopped, elected)
