"""flush = "sync": a put is acknowledged only once its entry is msync'd on a majority --
checked at the moment the leader completes the puts (Pipeline.on_applied, synchronous with
the acknowledgements), against every replica's commit log's flushed position, while 32
producers of single messages keep overlapping flushes busy (node/flusher.py,
commitlog_flush.pxi). Three Nodes in one process over real TCP, each with the production
Flusher. The check is shown able to fail: a Flusher that reports before it flushes (what
an acknowledgement before durability looks like) must be caught.

The majority is any one (docs/raft.md deviation 19): with the leader's own flushes held
back, two followers' durable copies commit and acknowledge; with the leader's and one
follower's held back, nothing is acknowledged on the third replica's copy alone."""
from __future__ import annotations

import asyncio

import pytest

from quorumlog.localcluster import free_port
from quorumlog.node import Node, load_node_config
from quorumlog.node.driver import PRODUCTION_FLUSHER
from quorumlog.node.flusher import Flusher
from quorumlog.raft.messages import Role

PRODUCERS = 32
PUTS_EACH = 12
DEADLINE_S = 60.0
LATE_FLUSH_S = 0.05


class ReportsFirstFlusher(Flusher):
    """Broken on purpose: reports an index, then flushes it LATE_FLUSH_S later."""

    def request(self, index: int, gen: int) -> None:
        self._post(self.on_flushed, index, gen)
        self.loop.call_soon_threadsafe(self.loop.call_later, LATE_FLUSH_S,
                                       super().request, index, gen)


class HeldBackFlusher(Flusher):
    """The production Flusher whose flushes start `delay_s` after they are asked for once
    the test sets it (a slow disk on one replica)."""

    delay_s = 0.0

    def request(self, index: int, gen: int) -> None:
        if self.delay_s:
            self.loop.call_later(self.delay_s, super().request, index, gen)
        else:
            super().request(index, gen)


async def _group(tmp_path, flusher_for, in_flight=1):
    ids = ["n1", "n2", "n3"]
    peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
    clients = {i: f"127.0.0.1:{9000 + k}" for k, i in enumerate(ids)}   # names only
    nodes = []
    try:
        for i in ids:
            cfg, rcfg, scfg = load_node_config(
                None, {}, node_id=i, peers=peers, secret="s" * 16, client_addrs=clients,
                raft=dict(max_heartbeat_leak=30), flushes_in_flight=in_flight,
                store=dict(segment_size_bytes=1 << 22, flush="sync"))
            n = Node(tmp_path / i, cfg, rcfg, store_cfg=scfg, flusher=flusher_for())
            await n.start()
            nodes.append(n)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        while not any(n.role == Role.LEADER and n.ready_to_serve for n in nodes):
            assert loop.time() < deadline, "no leader"
            await asyncio.sleep(0.01)
    except BaseException:
        for n in nodes:
            await n.stop()
        raise
    return nodes, next(n for n in nodes if n.role == Role.LEADER)


def _watch_acks(leader, nodes, violations: list, acked: list) -> None:
    """Wrap the leader's Pipeline.on_applied: before it completes the puts up to `index`,
    the entry at `index` (and so every one before it) must be flushed on a majority.
    `acked` gets (index, whether the leader's own copy was flushed then)."""
    pipeline = leader.pipeline
    original = pipeline.on_applied

    def on_applied(index):
        cl = leader.store.commitlog
        own = True
        if index >= cl.first_index:
            end = cl.position_of(index) + cl.size_of(index)
            holders = [n.id for n in nodes if n.store.commitlog.flushed_position >= end]
            if len(holders) * 2 <= len(nodes):
                violations.append(f"entry {index} acknowledged, flushed on {holders} only")
            own = leader.id in holders
        acked.append((index, own))
        return original(index)

    pipeline.on_applied = on_applied


async def _produce(tmp_path, flusher_for, in_flight=1, held_back=lambda nodes, leader: ()):
    """32 producers put on the leader; `held_back(nodes, leader)` names the replicas whose
    flushes are held back (HeldBackFlusher) once the leader is known."""
    nodes, leader = await _group(tmp_path, flusher_for, in_flight)
    violations, acked = [], []
    try:
        for n in held_back(nodes, leader):
            n.flusher.delay_s = LATE_FLUSH_S
        _watch_acks(leader, nodes, violations, acked)

        async def producer(p):
            for k in range(PUTS_EACH):
                await asyncio.wait_for(leader.put("t", f"p{p}-{k}".encode()), DEADLINE_S)

        await asyncio.gather(*(producer(p) for p in range(PRODUCERS)))
        return violations, acked, leader
    finally:
        for n in nodes:
            await n.stop()


@pytest.mark.parametrize("in_flight", [1, 2])
def test_sync_puts_are_acknowledged_only_once_flushed_on_a_majority(tmp_path, in_flight):
    violations, acked, leader = asyncio.run(
        _produce(tmp_path, lambda: PRODUCTION_FLUSHER, in_flight))
    assert acked and not violations, violations[:5]
    assert isinstance(leader.flusher, Flusher) and leader.flusher.in_flight == in_flight
    assert leader.flusher.flushes > 0


@pytest.mark.parametrize("broken", [ReportsFirstFlusher])
def test_the_check_catches_an_acknowledgement_before_the_flush(tmp_path, broken):
    violations, acked, _ = asyncio.run(_produce(tmp_path, broken))
    assert acked and violations


def test_two_followers_durable_copies_acknowledge_before_the_leaders_own_flush(tmp_path):
    # Failed before (deviation 19 capped the leader's commit at its own flushed index: no
    # put was acknowledged ahead of the leader's flush, every ack waited LATE_FLUSH_S).
    violations, acked, leader = asyncio.run(_produce(
        tmp_path, HeldBackFlusher, held_back=lambda nodes, leader: [leader]))
    assert acked and not violations, violations[:5]
    assert any(not own for _, own in acked), "every ack waited for the leader's own flush"


def test_no_ack_counts_a_copy_that_is_not_durable(tmp_path):
    # The leader's and one follower's flushes held back: the third replica's durable copy
    # alone is no majority, whatever the leader and the slow follower hold in the page
    # cache. A rule that counted the leader's log end (or an unflushed follower append)
    # would acknowledge here and the check would record violations.
    def slow(nodes, leader):
        return [leader, next(n for n in nodes if n is not leader)]

    violations, acked, _ = asyncio.run(_produce(tmp_path, HeldBackFlusher, held_back=slow))
    assert acked and not violations, violations[:5]
