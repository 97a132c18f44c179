"""A replica's defaults and what it reports: pre-vote on (the codec carries it) unless the
settings turn it off, votes and heartbeats on the control lane, and /metrics of a running
node showing its live role, term, commit index and per-lane peer connections. Three Nodes in
one process (one event loop, real TCP on 127.0.0.1, ports from the OS)."""
from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest

from quorumlog.errors import ConfigError
from quorumlog.localcluster import free_port
from quorumlog.node import Node, load_node_config
from quorumlog.raft.messages import Role, VoteRequest, VoteResponse

PEERS = {"n1": "127.0.0.1:7001", "n2": "127.0.0.1:7002"}


def test_pre_vote_and_the_control_lane_are_on_by_default(tmp_path):
    cfg, rcfg, _ = load_node_config(None, {}, node_id="n1", peers=PEERS, insecure=True)
    assert rcfg.pre_vote is True and cfg.control_lane is True and cfg.metrics_addr is None
    # the settings may still turn either off: argument, file, environment
    _, rcfg, _ = load_node_config(None, {}, raft={"pre_vote": False}, node_id="n1",
                                  peers=PEERS, insecure=True)
    assert rcfg.pre_vote is False
    f = tmp_path / "node.toml"
    f.write_text('[node]\ncontrol_lane = false\nmetrics_addr = "127.0.0.1:9108"\n'
                 '[raft]\npre_vote = false\n')
    cfg, rcfg, _ = load_node_config(f, {}, node_id="n1", peers=PEERS, insecure=True)
    assert (cfg.control_lane, cfg.metrics_addr, rcfg.pre_vote) == \
        (False, "127.0.0.1:9108", False)
    _, rcfg, _ = load_node_config(None, {"QUORUMLOG_RAFT_PRE_VOTE": "0"}, node_id="n1",
                                  peers=PEERS, insecure=True)
    assert rcfg.pre_vote is False
    with pytest.raises(ConfigError, match="metrics_addr"):
        load_node_config(None, {}, node_id="n1", peers=PEERS, insecure=True,
                         metrics_addr="nowhere")


def _scrape(address) -> dict:
    """/metrics -> {(name, labels text): value}."""
    host, port = address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        mt = re.match(r"^([a-z_]+)(\{[^}]*\})? (\S+)$", line)
        if mt:
            out[(mt.group(1), mt.group(2) or "")] = float(mt.group(3))
    return out


async def _scrape_until(node, cond, what, timeout=10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        m = await loop.run_in_executor(None, _scrape, node.metrics_address)
        if cond(m):
            return m
        assert loop.time() < deadline, f"/metrics of {node.id}: timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def _wait(cond, what, timeout=20.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_metrics_of_running_nodes_and_pre_votes_on_the_wire(tmp_path):
    async def run():
        ids = ["n1", "n2", "n3"]
        peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
        nodes = []
        seen = []          # (receiver, message) of every vote message that crossed TCP
        try:
            for i in ids:
                cfg, rcfg, scfg = load_node_config(
                    None, {}, node_id=i, peers=peers, secret="s" * 16,
                    metrics_addr="127.0.0.1:0",
                    store=dict(segment_size_bytes=1 << 22, flush="async"))
                n = Node(tmp_path / i, cfg, rcfg, store_cfg=scfg)
                await n.start()
                deliver = n.transport.on_message

                def spy(peer, msg, deliver=deliver, me=i):
                    if isinstance(msg, (VoteRequest, VoteResponse)):
                        seen.append((me, msg))
                    deliver(peer, msg)
                n.transport.on_message = spy
                nodes.append(n)
            await _wait(lambda: any(n.role == Role.LEADER and n.ready_to_serve
                                    for n in nodes), "a leader")
            leader = next(n for n in nodes if n.role == Role.LEADER)
            for k in range(20):
                await leader.put("t", b"m%d" % k)
            # every lane to every follower: under load a follower's data lane can connect
            # after the first 20 puts were acknowledged by the other follower
            lanes = [f'{{lane="{lane}",peer="{p}"}}' for p in ids if p != leader.id
                     for lane in ("data", "control")]
            m = await _scrape_until(
                leader, lambda m: all(m.get(("quorumlog_peer_connected", k)) == 1
                                      for k in lanes),
                "every lane to every follower")
            assert m[("quorumlog_raft_role", '{role="leader"}')] == 1
            assert m[("quorumlog_raft_role", '{role="follower"}')] == 0
            assert m[("quorumlog_raft_term", "")] == leader.term >= 1
            assert m[("quorumlog_raft_commit_index", "")] >= 20
            assert m[("quorumlog_raft_term_changes_total", "")] >= 1
            for p in ids:
                if p != leader.id:
                    for lane in ("data", "control"):
                        assert m[("quorumlog_peer_connected",
                                  f'{{lane="{lane}",peer="{p}"}}')] == 1
                        assert m[("quorumlog_peer_connects_total",
                                  f'{{lane="{lane}",peer="{p}"}}')] >= 1
            # heartbeats went on the control connections
            st = leader.transport.stats()["peers"]
            assert all(st[p]["control"]["sent"] > 0 for p in st)
            # a follower reports itself as one, with the leader's term and commit
            f = next(n for n in nodes if n is not leader)
            fm = await _scrape_until(f, lambda m: m[("quorumlog_raft_commit_index", "")] >= 20,
                                     "the follower's commit index")
            assert fm[("quorumlog_raft_role", '{role="follower"}')] == 1
            assert fm[("quorumlog_raft_term", "")] == leader.term
            # the leader stops: the survivors pre-vote over TCP, then elect a new leader
            old_term = leader.term
            await leader.stop()
            rest = [n for n in nodes if n is not leader]
            await _wait(lambda: any(n.role == Role.LEADER and n.ready_to_serve
                                    for n in rest), "a new leader")
            new = next(n for n in rest if n.role == Role.LEADER)
            assert new.term > old_term
            # (a pre-vote asks for the term its sender would take; the answer carries the
            # voter's own term and that asked term as req_term)
            pre = [x for _, x in seen if x.pre and
                   (x.term if isinstance(x, VoteRequest) else x.req_term) > old_term]
            assert any(isinstance(x, VoteRequest) for x in pre)
            assert any(isinstance(x, VoteResponse) for x in pre)
            nm = await _scrape_until(new, lambda m: m[("quorumlog_raft_role",
                                                       '{role="leader"}')] == 1, "new leader")
            assert nm[("quorumlog_raft_term", "")] == new.term
            assert nm[("quorumlog_raft_elections_total", "")] >= 1
            await _scrape_until(new, lambda m: m.get(
                ("quorumlog_peer_connected", f'{{lane="control",peer="{leader.id}"}}')) == 0,
                "the lost peer's control connection")
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(run())
