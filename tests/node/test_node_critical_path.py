"""The single message's critical path (docs/benchmarks.md, issue 20 branch lat20): what a hop
waits for and in which loop callback it leaves.

* Over TCP (three Nodes in one process, a client service on the leader): a follower writes
  its acknowledgement inside the drain that took the APPEND, the leader its APPENDs inside
  the drain of the proposal and the client's answer inside the drain of the acknowledgement
  -- not in a write callback a loop turn later (transport hold_writes / release_writes).
* Over the simulated network (real Nodes, virtual time): a follower sends its
  acknowledgement before it applies what the leader's commit index brought, and the leader
  completes a put before the store applies (dispatches) its entry.
"""
from __future__ import annotations

import asyncio

import pytest

from nodesim_support import run_scenario, wait_leader
from test_node_inprocess import _group_serving_clients

from quorumlog.client import AsyncClient
from quorumlog.net import transport
from quorumlog.net.messages import Role as ConnRole
from quorumlog.node import driver, pipeline
from quorumlog.raft.messages import Append, AppendResponse


@pytest.fixture
def callbacks(monkeypatch):
    """Records every socket write with the call it happened in (the innermost of those
    wrapped): ("drain", node) for a drain of the node's core, ("read", node) for a
    connection's buffer_updated; None for anything else (the transport's own write turn,
    a call_soon)."""
    stack: list = []
    writes: list = []

    def wrap(cls, name, kind, node_of):
        orig = getattr(cls, name)

        def wrapped(self, *a, **k):
            stack.append((kind, node_of(self)))
            try:
                return orig(self, *a, **k)
            finally:
                stack.pop()
        monkeypatch.setattr(cls, name, wrapped)

    wrap(transport._Conn, "buffer_updated", "read", lambda c: c.owner.node_id)
    wrap(driver.Node, "_drain", "drain", lambda n: n.id)
    orig_write = transport._Conn._write

    def _write(self, parts, n=-1):
        writes.append((self.owner.node_id, self.role, stack[-1] if stack else None))
        return orig_write(self, parts, n)
    monkeypatch.setattr(transport._Conn, "_write", _write)
    return writes


def test_each_hop_writes_inside_the_drain_that_made_its_messages(tmp_path, callbacks):
    async def run():
        nodes, leader, svc, cfg = await _group_serving_clients(tmp_path)
        try:
            async with AsyncClient([cfg.client_addr], secret="s" * 16) as cl:
                for _ in range(5):
                    await cl.produce("t", b"warm-up", queue_id=0)
                callbacks.clear()
                for k in range(30):
                    await cl.produce("t", b"m%d" % k, queue_id=0)
                return leader.id, list(callbacks)
        finally:
            await svc.stop()
            for n in nodes:
                await n.stop()
    lid, writes = asyncio.run(run())
    peer = (ConnRole.PEER, ConnRole.PEER_CONTROL)
    acks = [w for w in writes if w[0] != lid and w[1] in peer]
    appends = [w for w in writes if w[0] == lid and w[1] in peer]
    answers = [w for w in writes if w[0] == lid and w[1] == ConnRole.CLIENT]
    # a follower: each acknowledgement (and heartbeat answer) inside its drain
    assert len(acks) >= 2 * 30, len(acks)
    assert all(w[2] == ("drain", w[0]) for w in acks), [w for w in acks if w[2] != ("drain", w[0])]
    # the leader: the APPENDs (and heartbeats) inside its drains
    assert len(appends) >= 2 * 30, len(appends)
    assert all(w[2] == ("drain", lid) for w in appends), appends
    # ... and each answer inside the drain of the acknowledgement that committed it
    assert len(answers) == 30, answers
    assert all(w[2] == ("drain", lid) for w in answers), answers


async def _order_scenario(sim):
    lead = await wait_leader(sim)
    await lead.node.put("t", b"first")      # (the topic's META: not a message's path)
    events: list = []
    for m in sim.live():
        node = m.node

        def apply_committed(upto, _orig=node.seam.apply_committed, _id=node.id):
            events.append((_id, "apply", upto))
            return _orig(upto)
        node.seam.apply_committed = apply_committed

        def send(dst, msg, _orig=node.transport.send, _id=node.id):
            if type(msg) is AppendResponse:
                events.append((_id, "ack", msg.match_index))
            return _orig(dst, msg)
        node.transport.send = send

        def on_message(src, msg, _orig=node.transport.on_message, _id=node.id):
            if type(msg) is Append and msg.last_index >= msg.first_index:
                events.append((_id, "append", msg.last_index))
            return _orig(src, msg)
        node.transport.on_message = on_message
    loop = asyncio.get_running_loop()
    for k in range(12):
        fut = pipeline.SyncFuture(
            lambda f: events.append((lead.id, "answer", f.result().first_index)), loop=loop)
        got = lead.node.pipeline.put_batch_future("t", [b"m%d" % k], future=fut)
        assert got is fut          # (the direct path: the future given is the one completed)
        await fut
    await asyncio.sleep(0.5)       # (the followers learn the last commit from a heartbeat)
    return lead.id, events


def test_a_follower_acknowledges_before_it_applies_and_the_leader_answers_before_the_store():
    lid, events = run_scenario(_order_scenario, members=3)
    # a follower: the APPEND of entry k carries the commit of k-1; its acknowledgement of k
    # goes out before the apply of k-1
    pairs = 0
    for fid in {e[0] for e in events if e[0] != lid}:
        mine = [e for e in events if e[0] == fid]
        starts = [i for i, e in enumerate(mine) if e[1] == "append"]
        for s, end in zip(starts, starts[1:] + [len(mine)]):
            k = mine[s][2]
            seg = mine[s + 1:end]
            ack = next((i for i, e in enumerate(seg) if e[1] == "ack" and e[2] == k), None)
            app = next((i for i, e in enumerate(seg) if e[1] == "apply"), None)
            if ack is not None and app is not None:
                pairs += 1
                assert ack < app, (fid, k, seg)
    assert pairs >= 12, events        # (two followers, 12 puts: most hops have both)
    # the leader: each put completed before the store applied its entry
    mine = [e for e in events if e[0] == lid]
    answers = [(i, e[2]) for i, e in enumerate(mine) if e[1] == "answer"]
    assert len(answers) == 12
    for i, index in answers:
        assert not any(e[1] == "apply" and e[2] >= index for e in mine[:i]), (index, mine)
        assert any(e[1] == "apply" and e[2] >= index for e in mine[i:]), (index, mine)


async def _follower_apply_scenario(sim):
    lead = await wait_leader(sim)
    await lead.node.put("t", b"first")      # (the topic's META)
    followers = [m.node for m in sim.live() if m.id != lead.id]
    applies = {n.id: [] for n in followers}
    appends = {n.id: 0 for n in followers}
    for node in followers:
        def apply_committed(upto, _orig=node.seam.apply_committed, _n=node):
            applies[_n.id].append((_n.clock.now_ms(), upto))
            return _orig(upto)
        node.seam.apply_committed = apply_committed

        def on_message(src, msg, _orig=node.transport.on_message, _id=node.id):
            if type(msg) is Append and msg.last_index >= msg.first_index:
                appends[_id] += 1
            return _orig(src, msg)
        node.transport.on_message = on_message
    # a put every virtual millisecond, none awaited: APPENDs (each with a newer commit
    # index) reach the followers far more often than every FOLLOWER_APPLY_DELAY_MS
    futs = []
    for k in range(60):
        futs.append(lead.node.put_batch_future("t", [b"m%d" % k]))
        await asyncio.sleep(0.001)
    await asyncio.gather(*futs)
    # someone waiting for a follower's apply gets it at once, not after the delay
    lead_commit = lead.node.core.commit_index
    waited = []
    for node in followers:
        t0 = sim.loop.time()
        await node.wait_applied(node._commit_target, 5.0)
        waited.append((node._commit_target, node.applied_index, sim.loop.time() - t0))
    await asyncio.sleep(0.5)       # (the followers learn the last commit from a heartbeat)
    settled = [(n.applied_index, n.core.commit_index) for n in followers]
    return lead_commit, applies, appends, waited, settled


def test_a_follower_applies_once_per_delay_not_per_append():
    lead_commit, applies, appends, waited, settled = run_scenario(
        _follower_apply_scenario, members=3)
    for fid, got in applies.items():
        assert appends[fid] >= 20, (fid, appends)
        # far fewer applies than APPENDs that moved its commit index ...
        assert 1 <= len(got) < appends[fid] / 2, (fid, len(got), appends[fid])
        # ... each at least the delay after the one before (the node's clock; ms rounding)
        gaps = [b[0] - a[0] for a, b in zip(got, got[1:])]
        assert all(g >= driver.FOLLOWER_APPLY_DELAY_MS - 1 for g in gaps), (fid, gaps)
    for target, applied, took in waited:
        assert applied >= target and took < driver.FOLLOWER_APPLY_DELAY_MS / 1000 / 2, waited
    for applied, commit in settled:
        assert applied == commit >= lead_commit, settled
