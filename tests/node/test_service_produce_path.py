"""The client service's produce path (docs/benchmarks.md, issue 20 branch node20c): each
answer leaves inside the apply that completed it with no write turn of its own left behind,
and a produce that lets the server choose goes to one queue 32 requests in a row."""
from __future__ import annotations

import asyncio

import pytest
from test_node_inprocess import _group_serving_clients

from quorumlog.client import AsyncClient
from quorumlog.net import transport
from quorumlog.errors import InvalidArgumentError
from quorumlog.net import messages as m
from quorumlog.net.messages import Role as ConnRole
from quorumlog.node.service import ClientService


def test_answers_leave_no_write_turn_behind(tmp_path, monkeypatch):
    """8 producers on their own connections, one message in flight each: every call of a
    leader client connection's write turn writes something (main scheduled one per answered
    connection at the end of the loop turn, after the answers had been written: a loop
    callback that wrote nothing)."""
    turns = {"empty": 0, "written": 0}
    orig = transport._Conn._flush_turn

    def _flush_turn(self):
        if self.role == ConnRole.CLIENT and not self.outbound:
            turns["written" if self._turn else "empty"] += 1
        return orig(self)
    monkeypatch.setattr(transport._Conn, "_flush_turn", _flush_turn)

    async def run():
        nodes, leader, svc, cfg = await _group_serving_clients(tmp_path)
        clients = [AsyncClient([cfg.client_addr], secret="s" * 16) for _ in range(8)]
        try:
            for c in clients:
                await c.produce("t", b"warm-up", queue_id=0)
            turns["empty"] = turns["written"] = 0

            async def producer(c, k):
                for i in range(20):
                    a = await c.produce("t", b"p%d-%d" % (k, i), queue_id=0)
                    assert len(a.positions) == 1
            await asyncio.gather(*(producer(c, k) for k, c in enumerate(clients)))
            return dict(turns)      # (before the connections' close flushes their turns)
        finally:
            for c in clients:
                await c.close()
            await svc.stop()
            for n in nodes:
                await n.stop()
    seen = asyncio.run(run())
    assert seen["written"] >= 160, seen       # (one write per answer at most)
    assert seen["empty"] == 0, seen


def test_server_chosen_queue_runs_of_32(tmp_path):
    """queue_id -1: 32 requests in a row to one queue, then the next queue (round-robin over
    the topic's queues), with the queue remembered between the lookups of the topic."""
    async def run():
        nodes, leader, svc, cfg = await _group_serving_clients(tmp_path)
        try:
            await leader.create_topic("rr", 3)
            async with AsyncClient([cfg.client_addr], secret="s" * 16) as cl:
                qs = [(await cl.produce("rr", b"m%d" % i)).queue_id for i in range(100)]
                return qs, leader.store.queue_count("rr")
        finally:
            await svc.stop()
            for n in nodes:
                await n.stop()
    qs, nq = asyncio.run(run())
    assert nq == 3
    assert qs == [(i >> 5) % 3 for i in range(100)], qs


def test_delay_level_refused_inside_a_server_chosen_run(tmp_path):
    """A produce with a delay level is refused with its reason (nothing appended) also when
    it lets the server choose the queue while a run of that topic is under way (the run's
    queue is taken without _produce_args, which says why delay levels are refused)."""
    async def run():
        nodes, leader, svc, cfg = await _group_serving_clients(tmp_path)
        try:
            async with AsyncClient([cfg.client_addr], secret="s" * 16) as cl:
                first = await cl.produce("t", b"starts the run")     # queue -1: a run
                with pytest.raises(InvalidArgumentError, match="delay levels"):
                    await cl._request(m.ProduceRequest("t", [b"delayed"], -1, None, 3))
                after = await cl.produce("t", b"same run")
                return first, after, svc.stats["errors"]
        finally:
            await svc.stop()
            for n in nodes:
                await n.stop()
    first, after, errors = asyncio.run(run())
    assert errors == 1
    assert after.queue_id == first.queue_id
    assert after.first_queue_offset == first.first_queue_offset + 1    # nothing in between


class _Transport:
    """The client listener's transport as the service's hold/release uses it: hold_writes()
    is False while a hold is on already (PeerTransport.hold_writes)."""

    def __init__(self):
        self.held = False
        self.releases = 0

    def hold_writes(self) -> bool:
        if self.held:
            return False
        self.held = True
        return True

    def release_writes(self) -> None:
        self.held = False
        self.releases += 1


def test_answers_release_only_the_hold_they_took():
    """A hold already on when the pipeline completes proposals is its taker's: the service's
    on_completing / on_completed pair leaves it on (main released it); nested pairs release
    once, at the outer pair's end."""
    svc = ClientService(object(), cfg=None)
    svc.transport = t = _Transport()
    assert t.hold_writes()                 # someone else's hold
    svc._hold_answers()
    svc._write_answers()
    assert t.held and t.releases == 0
    t.release_writes()
    svc._hold_answers()                    # the service's own, with a nested pair inside
    svc._hold_answers()
    svc._write_answers()
    assert t.held and t.releases == 1     # (the nested pair took no hold)
    svc._write_answers()
    assert not t.held and t.releases == 2
