"""A membership change, then retention deleting the segment of its CONFIG record, then a
restart: the restarted replica keeps the voters the change set. It learns them from
log_head.json (written by retention before the deletion) plus the CONFIG records still in its
log; on main it believed the initial voters again (a wrong quorum: docs/raft.md "Not done")."""
from __future__ import annotations

import time

from nodesim_support import run_scenario, wait_leader

HOUR = 3_600_000


def _at_local_hour(base_ms, hour):
    t = base_ms
    while time.localtime(t / 1000).tm_hour != hour:
        t += HOUR
    return t


async def _scenario(sim):
    lead = await wait_leader(sim)
    gone = [i for i in sim.members if i != lead.id][0]
    kept = [i for i in sim.members if i not in (lead.id, gone)][0]
    idx = lead.node.remove_member(gone)
    # enough messages after the CONFIG record to fill several 256 KiB segments
    for k in range(40):
        await lead.node.put_batch("t", [b"%03d" % k + b"x" * 3000] * 8)
    voters = tuple(lead.node.core.voters)
    member = sim.members[kept]
    store = member.node.store
    when = _at_local_hour(int(time.time() * 1000) + 73 * HOUR, 4)   # 72 h on, at 04:00
    assert store.run_retention(when) > 0
    first = store.commitlog.first_index
    await sim.take_down(member, power=False)
    await sim.start_member(member)
    return idx, first, voters, tuple(member.node.core.voters), gone


def test_a_replica_restarted_after_retention_dropped_its_config_record_keeps_its_voters():
    idx, first, voters, restarted, gone = run_scenario(_scenario)
    assert first > idx                       # the CONFIG record's segment went
    assert gone not in voters
    assert restarted == voters               # on main: the initial three
