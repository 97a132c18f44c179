"""Three Nodes in one process (one event loop, real TCP on 127.0.0.1): coalesced puts each
get their own slice of the batch's result, a retried (producer, sequence) is answered with
the original and stored once, followers hold the topic (META) and redirect writes; the
client service answers concurrent produces on one connection with one write per loop turn."""
from __future__ import annotations

import asyncio

import pytest

import dataclasses

from quorumlog.client import AsyncClient
from quorumlog.errors import InvalidArgumentError
from quorumlog.localcluster import free_port
from quorumlog.net.messages import LeaderRedirectError
from quorumlog.node import Node, load_node_config
from quorumlog.raft.messages import Role
from quorumlog.node.service import ClientService


async def _group(tmp_path, flush="async"):
    ids = ["n1", "n2", "n3"]
    peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
    clients = {i: f"127.0.0.1:{9000 + k}" for k, i in enumerate(ids)}   # names only
    nodes = []
    for i in ids:
        # These tests are about one leader's answers, not elections: a 3 s lease (not 0.7 s)
        # keeps a loaded machine's loop stalls from moving the leadership mid-test.
        cfg, rcfg, scfg = load_node_config(None, {}, node_id=i, peers=peers, secret="s" * 16,
                                           client_addrs=clients, raft=dict(max_heartbeat_leak=30),
                                           store=dict(segment_size_bytes=1 << 22, flush=flush))
        n = Node(tmp_path / i, cfg, rcfg, store_cfg=scfg)
        await n.start()
        nodes.append(n)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not any(n.role == Role.LEADER and n.ready_to_serve for n in nodes):
        assert loop.time() < deadline, "no leader"
        await asyncio.sleep(0.01)
    return nodes, next(n for n in nodes if n.role == Role.LEADER), clients


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_coalesced_puts_dedupe_meta_and_redirects(tmp_path, flush):
    async def run():
        nodes, leader, clients = await _group(tmp_path, flush)
        try:
            async def producer(p):
                out = []
                for k in range(20):
                    r = await leader.put("t", f"p{p}-{k}".encode(), queue_id=1,
                                         producer_id=p + 1, sequence=k)
                    out.append((r, f"p{p}-{k}".encode()))
                return out
            results = await asyncio.gather(*(producer(p) for p in range(16)))
            assert leader.stats["coalesced_proposals"] > 0
            offsets = [r.queue_offset for rs in results for r, _ in rs]
            assert sorted(offsets) == list(range(16 * 20))      # each its own offset
            # a retry of producer 1's last batch: the original result, nothing appended
            before = leader.store.max_offset("t", 1)
            again = await leader.put("t", b"p0-19", queue_id=1, producer_id=1, sequence=19)
            assert again == results[0][-1][0]
            assert leader.store.max_offset("t", 1) == before
            assert leader.stats["duplicates"] == 1
            # every replica: the topic (from META, 4 queues) and every body at its offset
            for n in nodes:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 10
                while n.store.topics().get("t") != 4 or n.store.max_offset("t", 1) < before:
                    assert loop.time() < deadline, f"{n.id} not caught up"
                    await asyncio.sleep(0.01)
                for rs in results:
                    for r, body in rs:
                        (m,) = n.store.get("t", 1, r.queue_offset, 1)
                        assert bytes(m.body) == body
            # a follower refuses writes, naming the leader and its client address
            f = next(n for n in nodes if n is not leader)
            with pytest.raises(LeaderRedirectError) as ei:
                await f.put("t", b"x")
            assert ei.value.leader_id == leader.id
            assert ei.value.leader_address == clients[leader.id]
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(run())


def test_backpressure_and_transfer_refuse_puts_with_their_errors(tmp_path):
    from quorumlog.raft.errors import BackpressureError, LeaderTransferringError

    async def run():
        nodes, leader, _ = await _group(tmp_path)
        try:
            await leader.put("t", b"warm")
            # more messages awaiting commit than max_pending_puts allows
            leader.cfg = type(leader.cfg)(**{**leader.cfg.__dict__, "max_pending_puts": 8})
            with pytest.raises(BackpressureError, match="max_pending_puts=8"):
                await leader.put_batch("t", [b"x"] * 9, queue_id=0)
            assert leader.pending_puts == 0
            r = await leader.put_batch("t", [b"y"] * 8, queue_id=0)   # within the limit
            assert len(r) == 8
            # during a leadership transfer the leader refuses puts
            target = next(n for n in nodes if n is not leader)
            leader.transfer_leadership(target.id)
            with pytest.raises(LeaderTransferringError):
                await leader.put("t", b"z")
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(run())


async def _group_serving_clients(tmp_path):
    """_group, with a client service on the leader (cfg.client_addr)."""
    nodes, leader, _clients = await _group(tmp_path)
    cfg = dataclasses.replace(leader.cfg, client_addr=f"127.0.0.1:{free_port()}")
    svc = ClientService(leader, cfg)
    await svc.start()
    return nodes, leader, svc, cfg


def test_client_service_answers_each_concurrent_produce_and_batches_the_writes(tmp_path):
    async def run():
        nodes, leader, svc, cfg = await _group_serving_clients(tmp_path)
        try:
            async with AsyncClient([cfg.client_addr], secret="s" * 16) as cl:
                bodies = [f"m{i}".encode() for i in range(48)]
                acks = await asyncio.gather(*(cl.produce("t", b, queue_id=2) for b in bodies))
                # each ack names its own message: its index, queue offset and position
                assert sorted(a.first_queue_offset for a in acks) == list(range(48))
                for a, b in zip(acks, bodies):
                    (msg,) = leader.store.get("t", 2, a.first_queue_offset, 1)
                    assert bytes(msg.body) == b
                    assert (msg.index, msg.position) == (a.first_index, a.positions[0])
                # 48 concurrent requests on one connection: fewer writes than replies
                # (the handshake's two included)
                assert svc.transport.stats()["client_writes"] < 48
                # a batch still gets one ack with every position
                a = await cl.produce("t", [b"x", b"y", b"z"], queue_id=1)
                assert len(a.positions) == 3
                # a refused produce is answered with its error (the fast path's own reply)
                with pytest.raises(InvalidArgumentError, match="queue_id 99"):
                    await cl.produce("t", b"x", queue_id=99)
                assert svc.stats["errors"] >= 1
        finally:
            await svc.stop()
            for n in nodes:
                await n.stop()
    asyncio.run(run())


def test_client_coalesces_concurrent_single_messages_and_splits_the_acks(tmp_path):
    """Single-message produces issued while others are in flight share one request; each
    caller gets its own message's index, offset and position; an error reaches every caller
    of the batch; coalesce=False sends one request per message."""
    async def run():
        nodes, leader, svc, cfg = await _group_serving_clients(tmp_path)
        try:
            async with AsyncClient([cfg.client_addr], secret="s" * 16) as cl:
                await cl.produce("t", b"first", queue_id=3)
                bodies = [f"c{i}".encode() for i in range(40)]
                before = svc.stats["requests"]
                acks = await asyncio.gather(*(cl.produce("t", b, queue_id=3) for b in bodies))
                assert cl.stats["coalesced_messages"] >= 39
                assert svc.stats["requests"] - before < 40          # fewer requests
                assert len({a.first_index for a in acks}) == 40
                for a, b in zip(acks, bodies):
                    assert len(a.positions) == 1 and a.queue_id == 3
                    (msg,) = leader.store.get("t", 3, a.first_queue_offset, 1)
                    assert bytes(msg.body) == b
                    assert (msg.index, msg.position) == (a.first_index, a.positions[0])
                # a refused batch: every caller gets the error
                results = await asyncio.gather(
                    *(cl.produce("t", b"x", queue_id=99) for _ in range(5)),
                    return_exceptions=True)
                assert all(isinstance(r, InvalidArgumentError) for r in results)
            async with AsyncClient([cfg.client_addr], secret="s" * 16, coalesce=False) as cl:
                await cl.produce("t", b"first", queue_id=3)
                before = svc.stats["requests"]
                await asyncio.gather(*(cl.produce("t", b"n", queue_id=3) for _ in range(10)))
                assert svc.stats["requests"] - before == 10
                assert cl.stats["coalesced_messages"] == 0
        finally:
            await svc.stop()
            for n in nodes:
                await n.stop()
    asyncio.run(run())


def test_status_answer_says_whether_the_member_is_ready_to_serve(tmp_path):
    """The status answer carries ready_to_serve: True from the leader serving, False from a
    follower, and False from the leader once its lease has run out (its followers stopped)."""
    async def run():
        nodes, leader, svc, cfg = await _group_serving_clients(tmp_path)
        follower = next(n for n in nodes if n is not leader)
        fcfg = dataclasses.replace(follower.cfg, client_addr=f"127.0.0.1:{free_port()}")
        fsvc = ClientService(follower, fcfg)
        await fsvc.start()
        try:
            async with AsyncClient([cfg.client_addr], secret="s" * 16) as cl:
                st = await cl.status(cfg.client_addr)
                assert st.node_id == leader.id and st.ready_to_serve is True
                st = await cl.status(fcfg.client_addr)
                assert st.node_id == follower.id and st.ready_to_serve is False
                for n in nodes:
                    if n is not leader:
                        await n.stop()
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 10
                while (await cl.status(cfg.client_addr)).ready_to_serve:
                    assert loop.time() < deadline, "the leader still serving without a quorum"
                    await asyncio.sleep(0.02)
                assert not leader.ready_to_serve
        finally:
            await fsvc.stop()
            await svc.stop()
            for n in nodes:
                await n.stop()
    asyncio.run(run())
