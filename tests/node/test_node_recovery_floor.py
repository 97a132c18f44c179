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
import shutil

from quorumlog.node.hardstate import HardStateFile
from quorumlog.raft.messages import Role
from quorumlog.testing.nodesim import NodeSim
from quorumlog.testing.simloop import VirtualTimeLoop


async def _leader(sim, timeout_s=10.0):
    deadline = sim.loop.time() + timeout_s
    while sim.loop.time() < deadline:
        for m in sim.live():
            if m.node.role == Role.LEADER and m.node.ready_to_serve:
                return m
        await asyncio.sleep(0.01)
    raise AssertionError("no leader: " + sim.checker.states())


def _run(after_power_loss):
    """Three real nodes (nodesim seed 5, async): a leader takes five messages, a follower
    loses power, then `after_power_loss(sim, follower)` -> its result (every node stopped
    after)."""
    sim = NodeSim(5, mode="async")

    async def scenario():
        sim.loop = asyncio.get_running_loop()
        for m in sim.members.values():
            await sim.start_member(m)
        try:
            lead = await _leader(sim)
            for k in range(5):
                await asyncio.wait_for(lead.node.put("t", b"m%d" % k), 5)
            f = next(m for m in sim.members.values() if m is not lead)
            await sim.take_down(f, power=True)
            return await after_power_loss(sim, f)
        finally:
            await sim.stop_all()

    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(scenario())
    finally:
        loop.close()
        shutil.rmtree(sim.root, ignore_errors=True)


def test_a_kill_right_after_an_unclean_async_open_keeps_the_recovery_floor():
    async def kill_after_open(sim, f):
        await sim.start_member(f)                  # unclean async open: recovering
        first = f.node.core.recovering_term
        await sim.take_down(f, power=False)        # killed before its first Ready
        on_disk = HardStateFile(f.path).load().recovering_term
        await sim.start_member(f)
        return first, on_disk, (f.node.core.recovering_term, f.node.core.may_campaign())

    first, on_disk, (again, may_campaign) = _run(kill_after_open)
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

    async def start_fails_then_again(sim, f):
        with monkeypatch.context() as mp:
            mp.setattr(HardStateFile, "save", fail)
            await sim.start_member(f)              # the open saw lost writes; the save failed
        failed_start = f.node is None
        await sim.start_member(f)
        return failed_start, f.node.core.recovering_term, f.node.core.may_campaign()

    failed, floor, may_campaign = _run(start_fails_then_again)
    assert failed, "the start with a failing floor save did not fail"
    assert floor > 0, "the floor was lost with the failed start"
    assert not may_campaign
