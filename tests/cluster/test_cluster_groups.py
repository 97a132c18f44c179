"""Many Raft groups per process (node/host.py), on real processes: 3 members hosting 8 groups
each elect a leader in every group, spread the leaders (at most ceil(G/3) + 1 per member:
preferred leaders, node/groups.py), replicate messages spread over every group to every
replica, and keep each group's logs byte-identical up to its commit position; kill -9 of one
member under load: the groups it led elect new leaders, no acknowledged message is lost or
stored twice, the member rejoins every group and takes its preferred groups back."""
from __future__ import annotations

import collections
import math
import re
import time

from cluster_support import (Producers, assert_logs_identical, check_acked_on_every_replica,
                             wait_until)

from quorumlog.client import Client
from quorumlog.node.groups import group_of, preferred_leader

G = 8
TOPIC = "orders"
SMALL = dict(segment_size_bytes=4 << 20, profile="small", groups=G)


def _count_in(prod, groups):
    return sum(len(b) for q, _, b in prod.acked if group_of(TOPIC, q, G) in groups)


def _spread_ok(c, leaders):
    per = collections.Counter(leaders)
    return None not in leaders and max(per.values()) <= math.ceil(G / len(c.ids)) + 1


def _check_every_replica(c, prod):
    acked = check_acked_on_every_replica(c, prod)
    assert {group_of(TOPIC, q, G) for q in acked} == set(range(G)), "not every group used"


# node/driver.py logs each group's role changes ("LEADER in term 3 (leader n1)"), node/host.py
# a quiet stretch of every group once ("every group (8) quiesced for 1000 ms")
_ROLE_LINE = re.compile(r": (LEADER|FOLLOWER|CANDIDATE) in term \d+")
_QUIET_LINE = f"every group ({G}) quiesced for"


def _quiet_after_roles(c, n) -> bool:
    with open(c.log_file(n)) as f:
        lines = f.read().splitlines()
    last = {kind: max((i for i, line in enumerate(lines) if match(line)), default=-1)
            for kind, match in (("quiet", lambda line: _QUIET_LINE in line),
                                ("role", _ROLE_LINE.search))}
    return last["quiet"] > last["role"]


def _log_tail(c, n, lines: int = 6) -> str:
    with open(c.log_file(n)) as f:
        return " | ".join(f.read().splitlines()[-lines:])


def _stop_and_compare_logs(c):
    assert c.stop() == {n: 0 for n in c.ids}
    for g in range(G):
        assert_logs_identical(c, group=g)


def test_eight_groups_elect_spread_and_replicate_to_every_replica(make_cluster):
    c = make_cluster(3, flush="async", **SMALL)
    with c.client(request_timeout=2, retry_timeout=2) as admin:
        leaders = c.wait_group_leaders(timeout=30, client=admin)
        leaders = wait_until(lambda: (lambda ls: ls if _spread_ok(c, ls) else None)(
            c.group_leaders(admin)), 30, f"leaders spread over the members ({leaders})")
        print("leaders:", leaders)
    # 100,000 messages: 4 producers x 250 batches of 100, spread over every group
    prod = Producers(c.client_addresses(), c.secret(), n=4, batch=100, limit=250, topic=TOPIC,
                     groups=G)
    prod.thread.start()
    prod.thread.join(120)
    assert not prod.thread.is_alive()
    assert not prod.errors, prod.errors
    assert prod.count() == 100_000
    _check_every_replica(c, prod)
    _stop_and_compare_logs(c)


def test_kill_minus_9_of_a_member_hosting_eight_groups_under_load(make_cluster):
    c = make_cluster(3, flush="async", **SMALL)
    victim = "n1"
    with c.client(request_timeout=2, retry_timeout=2) as admin:
        c.wait_group_leaders(timeout=30, client=admin)
        preferred = [preferred_leader(g, c.ids) for g in range(G)]
        wait_until(lambda: c.group_leaders(admin) == preferred, 30,
                   "every group led by its preferred leader")
        lost = {g for g in range(G) if preferred[g] == victim}
        prod = Producers(c.client_addresses(), c.secret(), n=3, batch=50, topic=TOPIC, groups=G)
        prod.thread.start()
        try:
            wait_until(lambda: _count_in(prod, lost) > 2000 or prod.errors, 30, "load before")
            c.kill(victim)
            t0 = time.monotonic()
            leaders = c.wait_group_leaders(timeout=20, client=admin, exclude=(victim,))
            elected = time.monotonic() - t0
            assert all(leaders[g] != victim for g in range(G))
            at = _count_in(prod, lost)
            wait_until(lambda: _count_in(prod, lost) > at + 500 or prod.errors, 30,
                       "acknowledgements from the groups that lost their leader")
            print(f"groups {sorted(lost)} re-elected in {elected:.2f} s")
            c.restart(victim)
            # it rejoins every group, and takes its preferred groups back (transfers)
            wait_until(lambda: c.group_leaders(admin) == preferred or prod.errors, 60,
                       f"{victim} leading its preferred groups {sorted(lost)} again")
            at = prod.count()
            wait_until(lambda: prod.count() > at + 1000 or prod.errors, 30, "load after")
        finally:
            prod.stop.set()
            prod.thread.join(90)
        assert not prod.errors, prod.errors
        assert not prod.thread.is_alive()
    _check_every_replica(c, prod)
    _stop_and_compare_logs(c)


def test_kill_minus_9_of_the_leader_of_quiesced_groups(make_cluster):
    # idle groups are quiesced (raft/quiesce.py: no ticks, no per-group heartbeats); kill -9
    # of a member: the groups it led elect new leaders (the others stop hearing its
    # QuietBeats, wake, and time out as usual), and a put to every group commits
    c = make_cluster(3, flush="async", **SMALL)
    victim = "n1"
    with c.client(request_timeout=2, retry_timeout=2) as admin:
        c.wait_group_leaders(timeout=30, client=admin)
        preferred = [preferred_leader(g, c.ids) for g in range(G)]
        wait_until(lambda: c.group_leaders(admin) == preferred, 60,
                   "every group led by its preferred leader")
        # the quiet line is logged once per quiet stretch (node/host.py), maybe before the
        # poll above saw the leaders settle: wait until each member's last quiet line comes
        # after its last role change, then check that the leaders did not move meanwhile
        wait_until(lambda: all(_quiet_after_roles(c, n) for n in c.ids), 30,
                   lambda: "every group quiesced on every member after its last role change: "
                   + "; ".join(f"{n}: {_log_tail(c, n)}" for n in c.ids
                               if not _quiet_after_roles(c, n)))
        assert c.group_leaders(admin) == preferred
        lost = {g for g in range(G) if preferred[g] == victim}
        c.kill(victim)
        leaders = c.wait_group_leaders(timeout=20, client=admin, exclude=(victim,))
        assert all(leaders[g] != victim for g in range(G))
    with Client(c.client_addresses(), secret=c.secret(), groups=G, retry_timeout=20,
                request_timeout=3) as cl:
        for q in range(G):             # (queue q of the topic is in a group of its own)
            r = cl.produce(TOPIC, [b"after the kill %d" % q], queue_id=q)
            assert r.queue_id == q
    assert {group_of(TOPIC, q, G) for q in range(G)} >= lost
