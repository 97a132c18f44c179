"""Three replica processes on loopback elect one leader and replicate 100,000 messages from
several producers; the replicas' commit logs are byte-identical up to the commit position and
every acknowledged message is readable from every replica."""
from __future__ import annotations

import asyncio
import collections

import pytest

from quorumlog.client import AsyncClient, Client
from quorumlog.errors import TopicNotFoundError

from cluster_support import assert_logs_identical, read_queue, wait_all_follow, wait_until

TOPIC = "orders"
PRODUCERS = 4
MESSAGES = 100_000
BATCH = 500


async def _produce_all(addresses, secret, pid):
    """One producer: MESSAGES / PRODUCERS messages in batches, a window of 4 in flight."""
    n = MESSAGES // PRODUCERS
    async with AsyncClient(addresses, secret=secret, retry_timeout=60) as c:
        batches = [[f"p{pid}-{i:06d}-".encode() + b"x" * 64 for i in range(k, min(k + BATCH, n))]
                   for k in range(0, n, BATCH)]
        results = await c.produce_many(TOPIC, batches, window=4)
    return list(zip(batches, results))


async def _producers(addresses, secret):
    return await asyncio.gather(*(_produce_all(addresses, secret, p) for p in range(PRODUCERS)))


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_three_replicas_elect_one_leader_and_replicate_100k_messages(make_cluster, flush):
    c = make_cluster(3, flush=flush)
    secret = c.secret()
    with c.client() as admin:
        leader = c.wait_leader(client=admin)
        # one leader, the others follow it, all in its term
        wait_all_follow(c, admin, leader)
        assert sorted(admin.members()) == c.ids

    per_producer = asyncio.run(_producers(c.client_addresses(), secret))
    # what was acknowledged: queue -> {offset: body}
    acked = collections.defaultdict(dict)
    for results in per_producer:
        for bodies, r in results:
            assert len(r.positions) == len(bodies)
            for k, b in enumerate(bodies):
                acked[r.queue_id][r.first_queue_offset + k] = b
    assert sum(len(v) for v in acked.values()) == MESSAGES

    # every acknowledged message, from every replica, once dispatched there
    for nid in c.ids:
        addr = c.clients[nid]
        with Client([addr], secret=secret) as member:
            for q, offs in acked.items():
                end = max(offs) + 1
                wait_until(lambda: member.offsets(TOPIC, q)[1] >= end, 30,
                           f"{nid} dispatching {TOPIC}/{q} to {end}")
                got = read_queue(member, addr, TOPIC, q, end)
                assert len(got) == end == len(offs)
                bad = [o for o, b in offs.items() if got[o] != b]
                assert not bad, f"{nid}: {TOPIC}/{q} offsets {bad[:5]} differ"

    # stop cleanly (SIGTERM -> exit 0) and compare the logs byte for byte
    assert c.stop() == {n: 0 for n in c.ids}
    upto = assert_logs_identical(c)
    assert upto > MESSAGES * 64


def _count(member, topic):
    """Messages in the topic's 4 queues on one member (0 while it does not know the topic)."""
    try:
        return sum(member.offsets(topic, q)[1] for q in range(4))
    except TopicNotFoundError:
        return 0


def test_followers_hold_the_leaders_topics_and_log_no_warnings(make_cluster):
    c = make_cluster(3)
    with c.client() as cl:
        c.wait_leader(client=cl)
        for t in ("a", "b", "c"):
            cl.produce(t, [b"1", b"2"])
        for nid in c.ids:
            with Client([c.clients[nid]], secret=c.secret()) as m:
                for t in ("a", "b", "c"):
                    wait_until(lambda: _count(m, t) == 2, 20, f"{nid} topic {t}")
    assert c.stop() == {n: 0 for n in c.ids}
    for nid in c.ids:
        bad = [ln for ln in open(c.log_file(nid)).read().splitlines()
               if (" WARNING " in ln or " ERROR " in ln) and _KNOWN_TRANSPORT_RACE not in ln]
        assert not bad, bad


# A known race in quorumlog.net.transport (reported, not this module's): the side that
# dialled parses the responder's AUTH_OK and a Raft frame sent right behind it in one read
# with the handshake's frame types, refuses the Raft frame and redials. Logged as a WARNING;
# the redial succeeds. It is not about topics, so this test ignores exactly that line.
_KNOWN_TRANSPORT_RACE = "not allowed here"
