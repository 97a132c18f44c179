"""Many Raft groups per process (node/host.py), on real processes: 3 members hosting 8 groups
each elect a leader in every group, spread the leaders (at most ceil(G/3) + 1 per member:
preferred leaders, node/groups.py), replicate messages spread over every group to every
replica, and keep each group's logs byte-identical up to its commit position; kill -9 of one
member under load: the groups it led elect new leaders, no acknowledged message is lost or
stored twice, the member rejoins every group and takes its preferred groups back."""
from __future__ import annotations

import asyncio
import collections
import math
import os
import threading
import time

from cluster_support import assert_logs_identical, read_queue, wait_until

from quorumlog.client import AsyncClient, Client
from quorumlog.node.groups import group_of, preferred_leader

G = 8
TOPIC = "orders"
SMALL = dict(segment_size_bytes=4 << 20, profile="small", groups=G)


class Producers:
    """`n` producers (clients routing per group) writing batches to TOPIC, queue chosen by
    the client (round-robin over the topic's G queues: every group), from a thread."""

    def __init__(self, addresses, secret, n=4, batch=100, limit=None):
        self.addresses, self.secret, self.n, self.batch = addresses, secret, n, batch
        self.limit = limit           # batches per producer (None: until stopped)
        self.acked = []              # (queue_id, first_offset, bodies)
        self.errors = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _one(self, pid):
        async with AsyncClient(self.addresses, secret=self.secret, retry_timeout=60,
                               request_timeout=3, groups=G) as c:
            k = 0
            while not self.stop.is_set() and (self.limit is None or k < self.limit):
                bodies = [f"p{pid}-b{k:06d}-m{i:03d}".encode() for i in range(self.batch)]
                try:
                    r = await c.produce(TOPIC, bodies)
                except Exception as e:  # (any failure ends the test with this error)
                    self.errors.append(e)
                    return
                self.acked.append((r.queue_id, r.first_queue_offset, bodies))
                k += 1

    async def _run(self):
        await asyncio.gather(*(self._one(p) for p in range(self.n)))

    def count(self):
        return sum(len(b) for _, _, b in self.acked)

    def count_in(self, groups):
        return sum(len(b) for q, _, b in self.acked if group_of(TOPIC, q, G) in groups)


def _spread_ok(c, leaders):
    per = collections.Counter(leaders)
    return None not in leaders and max(per.values()) <= math.ceil(G / len(c.ids)) + 1


def _check_every_replica(c, prod):
    """Every acknowledged message at its offset on every replica, none stored twice."""
    acked = collections.defaultdict(dict)
    for q, first, bodies in prod.acked:
        for i, b in enumerate(bodies):
            assert first + i not in acked[q], f"offset {q}/{first + i} acknowledged twice"
            acked[q][first + i] = b
    assert {group_of(TOPIC, q, G) for q in acked} == set(range(G)), "not every group used"
    seen = collections.Counter()
    for nid in c.ids:
        addr = c.clients[nid]
        with Client([addr], secret=c.secret(), retry_timeout=30, groups=G) as m:
            for q in sorted(acked):
                end = max(acked[q]) + 1
                wait_until(lambda: m.offsets(TOPIC, q)[1] >= end, 60,
                           f"{nid} catching up {TOPIC}/{q}")
                got = read_queue(m, addr, TOPIC, q, m.offsets(TOPIC, q)[1])
                for off, b in acked[q].items():
                    assert got[off] == b, f"{nid}: {TOPIC}/{q}@{off} is {got[off]!r}, acked {b!r}"
                if nid == c.ids[0]:
                    seen.update(got)
    dups = [b for b, n in seen.items() if n > 1]
    assert not dups, f"{len(dups)} messages stored twice, e.g. {dups[:3]}"
    assert sum(len(v) for v in acked.values()) == prod.count()


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
    prod = Producers(c.client_addresses(), c.secret(), n=4, batch=100, limit=250)
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
        prod = Producers(c.client_addresses(), c.secret(), n=3, batch=50)
        prod.thread.start()
        try:
            wait_until(lambda: prod.count_in(lost) > 2000 or prod.errors, 30, "load before")
            c.kill(victim)
            t0 = time.monotonic()
            leaders = c.wait_group_leaders(timeout=20, client=admin, exclude=(victim,))
            elected = time.monotonic() - t0
            assert all(leaders[g] != victim for g in range(G))
            at = prod.count_in(lost)
            wait_until(lambda: prod.count_in(lost) > at + 500 or prod.errors, 30,
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
    quiet = f"every group ({G}) quiesced for"
    with c.client(request_timeout=2, retry_timeout=2) as admin:
        c.wait_group_leaders(timeout=30, client=admin)
        preferred = [preferred_leader(g, c.ids) for g in range(G)]
        wait_until(lambda: c.group_leaders(admin) == preferred, 60,
                   "every group led by its preferred leader")
        seen = {n: os.path.getsize(c.log_file(n)) for n in c.ids}

        def quiesced_since(n):
            with open(c.log_file(n)) as f:
                f.seek(seen[n])
                return quiet in f.read()
        wait_until(lambda: all(quiesced_since(n) for n in c.ids), 30,
                   "every group quiesced on every member after the leaders settled")
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
