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
import dataclasses

from nodesim_support import run_scenario, wait_leader

from quorumlog.node.hardstate import HardStateFile


async def _follower_after_power_loss(sim):
    """Five messages through the leader, then a follower loses power (it is down)."""
    lead = await wait_leader(sim)
    for k in range(5):
        await asyncio.wait_for(lead.node.put("t", b"m%d" % k), 5)
    f = next(m for m in sim.members.values() if m is not lead)
    await sim.take_down(f, power=True)
    return f


async def _scenario(sim):
    f = await _follower_after_power_loss(sim)
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


def test_a_start_that_fails_before_the_floor_is_saved_keeps_the_lost_writes(monkeypatch):
    """The window left by the test above: the store's open rewrites the abort marker a few
    milliseconds before the floor is saved. A start that fails in between (here the floor's
    save; a SIGKILL there is the same, tests/commitlog/test_power_cut.py) closed the store
    cleanly, which removed the marker: the next open was clean, no floor. The commit log now
    keeps a lost-writes mark until the driver settles it after the floor is durable."""
    def fail(self, hs):
        raise OSError(28, "No space left on device (the floor's save)")

    async def scenario(sim):
        f = await _follower_after_power_loss(sim)
        with monkeypatch.context() as mp:
            mp.setattr(HardStateFile, "save", fail)
            await sim.start_member(f)          # the open saw lost writes; the save failed
        failed_start = f.node is None
        await sim.start_member(f)
        return failed_start, f.node.core.recovering_term, f.node.core.may_campaign()

    failed, floor, may_campaign = run_scenario(scenario)
    assert failed, "the start with a failing floor save did not fail"
    assert floor > 0, "the floor was lost with the failed start"
    assert not may_campaign


async def _mode_change_scenario(sim):
    f = await _follower_after_power_loss(sim)
    # the operator restarts it with flush = "sync" (every other member stays async)
    async_cfg, sim.store_cfg = sim.store_cfg, dataclasses.replace(sim.store_cfg, flush="sync")
    try:
        await sim.start_member(f)
    finally:
        sim.store_cfg = async_cfg
    return f.node.core.recovering_term, f.node.core.may_campaign()


def test_a_replica_restarted_in_sync_mode_after_an_async_power_loss_still_recovers():
    """It acknowledged entries before flushing them in the async run that lost power: the
    run that wrote the log decides (the abort marker's flush line), not the restart's mode.
    Before, the sync restart skipped recovery and could vote and lead with a short log."""
    floor, may_campaign = run_scenario(_mode_change_scenario)
    assert floor > 0, "the sync restart after an async power loss did not enter recovery"
    assert not may_campaign
