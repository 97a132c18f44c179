"""Many Raft groups per process: the placement rule, the limit on groups, the directory
layout, and three NodeHosts of six groups each in one process (real TCP): both groups elect,
a frame naming a group the receiver does not host is refused and counted and changes
nothing, the groups' heartbeats to a peer share frames (one host timer, aligned heartbeats),
the client learns the group count and routes by it, and an unknown group in a request is a
specific error."""
from __future__ import annotations

import asyncio
import json
import os
import urllib.request

import pytest

from quorumlog.client import AsyncClient
from quorumlog.errors import ConfigError
from quorumlog.format import fnv1a64
from quorumlog.localcluster import free_port
from quorumlog.net import codec
from quorumlog.net import messages as m
from quorumlog.net.errors import CodecError, EncodeError, FrameError
from quorumlog.net.framing import FrameDecoder, encode_frame, encode_header
from quorumlog.node import load_node_config
from quorumlog.node.groups import (MAX_GROUPS, check_layout, group_dir, group_of,
                                   preferred_leader)
from quorumlog.node.host import NodeHost
from quorumlog.node.service import ClientService
from quorumlog.raft.core import RoleChanged
from quorumlog.raft.messages import Heartbeat, Role


def test_placement_is_the_documented_rule_and_uses_every_group():
    # (fnv1a64(topic) + queue) mod G, with the reference (pure Python) FNV-1a
    for topic in ("orders", "t", "ünïcode"):
        h = fnv1a64(topic.encode())
        for q in range(20):
            assert group_of(topic, q, 8) == (h + q) % 8
        assert {group_of(topic, q, 8) for q in range(8)} == set(range(8))
    assert all(group_of("orders", q, 1) == 0 for q in range(10))


def test_preferred_leaders_spread_evenly():
    voters = ("n3", "n1", "n2")
    prefs = [preferred_leader(g, voters) for g in range(9)]
    assert prefs == ["n1", "n2", "n3"] * 3


def test_group_count_is_limited(tmp_path):
    peers = {"n1": "127.0.0.1:1"}
    for bad in (0, MAX_GROUPS + 1):
        with pytest.raises(ConfigError, match="groups"):
            load_node_config(None, {}, node_id="n1", peers=peers, insecure=True, groups=bad)
        with pytest.raises(ConfigError, match="MAX_GROUPS"):
            NodeHost(tmp_path, load_node_config(None, {}, node_id="n1", peers=peers,
                                                insecure=True)[0], groups=bad)
    cfg = load_node_config(None, {}, node_id="n1", peers=peers, insecure=True,
                           groups=MAX_GROUPS)[0]
    assert cfg.groups == MAX_GROUPS
    # the client protocol names groups 0..MAX_GROUPS-1 only, both ways
    with pytest.raises(EncodeError, match="group"):
        codec.encode(m.GroupAdminRequest(MAX_GROUPS, m.AdminOp.STATUS))
    code, parts = codec.encode_payload(m.GroupAdminRequest(MAX_GROUPS - 1, m.AdminOp.STATUS))
    raw = bytearray(b"".join(bytes(p) for p in parts))
    raw[0:2] = MAX_GROUPS.to_bytes(2, "little")
    with pytest.raises(CodecError, match="group"):
        codec.decode(code, bytes(raw))
    with pytest.raises(FrameError, match="group"):
        encode_header(0x12, 0, group=1 << 16)


def test_frame_group_field_is_refused_unless_the_connection_allows_groups():
    frame = encode_frame(0x12, b"x" * 24, group=7)
    with pytest.raises(FrameError, match="group field is 0x7"):
        FrameDecoder().feed(frame)
    d = FrameDecoder()
    d.allow_groups = True
    (fr,) = d.feed(frame)
    assert (fr.type, fr.group, bytes(fr.payload)) == (0x12, 7, b"x" * 24)
    # group 0 is today's frame, byte for byte
    assert encode_frame(0x12, b"hello", 0x0102030405060708, group=0) == \
        encode_frame(0x12, b"hello", 0x0102030405060708)


def test_layout_single_group_directory_and_group_count_checked(tmp_path):
    single = tmp_path / "single"
    (single / "commitlog").mkdir(parents=True)
    check_layout(single, 1)                           # today's directory: group 0
    assert group_dir(single, 0, 1) == os.fspath(single)
    with pytest.raises(ConfigError, match="single-group store"):
        check_layout(single, 8)
    assert not (single / "groups.json").exists()      # nothing changed
    multi = tmp_path / "multi"
    check_layout(multi, 8)
    assert json.loads((multi / "groups.json").read_text()) == {"groups": 8}
    assert group_dir(multi, 3, 8) == os.path.join(multi, "groups", "3")
    check_layout(multi, 8)
    for other in (1, 4):
        with pytest.raises(ConfigError, match="holds 8 Raft groups"):
            check_layout(multi, other)


async def _hosts(tmp_path, groups=2, flush="async", quiesce=True):
    ids = ["n1", "n2", "n3"]
    peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
    clients = {i: f"127.0.0.1:{free_port()}" for i in ids}
    hosts = []
    for i in ids:
        cfg, rcfg, scfg = load_node_config(None, {}, node_id=i, peers=peers, secret="s" * 16,
                                           client_addrs=clients, client_addr=clients[i],
                                           groups=groups,
                                           store=dict(profile="small", flush=flush),
                                           metrics_addr="127.0.0.1:0")
        h = NodeHost(tmp_path / i, cfg, rcfg, store_cfg=scfg, quiesce=quiesce)
        h.events = []
        h.add_listener(lambda g, ev, h=h: h.events.append((g, ev)))
        await h.start()
        hosts.append(h)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not all(any(h.nodes[g].role == Role.LEADER and h.nodes[g].ready_to_serve
                      for h in hosts) for g in range(groups)):
        assert loop.time() < deadline, "not every group elected a leader"
        await asyncio.sleep(0.01)
    return hosts, clients


def _scrape(address) -> str:
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics", timeout=10) as r:
        return r.read().decode()


def test_hosts_share_one_transport_and_refuse_unknown_groups(tmp_path):
    async def run():
        # (not quiesced: the groups' heartbeats are counted below)
        hosts, clients = await _hosts(tmp_path, groups=6, quiesce=False)
        svcs = []
        try:
            h1, h2 = hosts[0], hosts[1]
            assert all(n.transport.stats() is not None for n in h1.nodes)
            assert os.path.isdir(tmp_path / "n1" / "groups" / "5" / "commitlog")
            # a frame for group 9 from n2 (n1 hosts 0..5): refused, counted, nothing changed
            assert h2.transport.send("n1", Heartbeat(999, "n2", "n1", 10_000, 1), 9)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while h1.stats["unknown_group"]["n2"] < 1:
                assert loop.time() < deadline, "the frame never arrived"
                await asyncio.sleep(0.01)
            # (no group took the frame's term; its roles are not compared with a snapshot:
            # the groups are not quiesced, a real election may run in between on a slow host)
            assert all(n.core.term < 999 for n in h1.nodes)
            assert h1.status()["unknown_group"] == {"n2": 1}
            # one /metrics for every group, each sample labelled with its group
            text = await loop.run_in_executor(None, _scrape, h1.metrics_address)
            for g in range(6):
                roles = [ln for ln in text.splitlines() if ln.startswith("quorumlog_raft_role{")
                         and f'group="{g}"' in ln and ln.endswith(" 1.0")]
                assert len(roles) == 1, (g, roles)          # one role per group
                assert f'quorumlog_raft_term{{group="{g}"}}' in text
            assert 'group="6"' not in text
            # heartbeats: once each member leads its 2 preferred groups, both groups' go to a
            # peer in one frame (one timer ticks every group; aligned heartbeats)
            assert all(n._ticker is None for n in h1.nodes)    # (the host's timer ticks)
            # role events name their group: every group's leader announced its role
            won = {(h.cfg.node_id, g) for h in hosts for g, ev in h.events
                   if type(ev) is RoleChanged and ev.role == Role.LEADER}
            assert {g for _, g in won} == set(range(6))
            deadline = loop.time() + 30
            while [h.leaders().count(h.cfg.node_id) for h in hosts] != [2, 2, 2]:
                assert loop.time() < deadline, [h.leaders() for h in hosts]
                await asyncio.sleep(0.02)
            b0, n0 = h1.stats["heartbeat_batches"], h1.stats["batched_heartbeats"]
            while h1.stats["heartbeat_batches"] < b0 + 40:
                assert loop.time() < deadline + 30, "no heartbeats"
                await asyncio.sleep(0.02)
            per_frame = (h1.stats["batched_heartbeats"] - n0) / (h1.stats["heartbeat_batches"] - b0)
            assert per_frame > 1.5, per_frame
            # the client learns the group count and routes; an unknown group is refused
            for h in hosts:          # (a redirect may name any member)
                svcs.append(ClientService(h, h.cfg))
                await svcs[-1].start()
            async with AsyncClient([clients["n1"]], secret="s" * 16, groups=None,
                                   retry_timeout=20) as c:
                for q in range(4):
                    r = await c.produce("t", [b"a%d" % q, b"b"], queue_id=q)
                    assert r.queue_id == q
                    f = await c.fetch("t", q, r.first_queue_offset, wait_ms=5000)
                    assert [bytes(x.body) for x in f.messages] == [b"a%d" % q, b"b"]
                assert c.groups == 6
                assert set(c._subs) == {group_of("t", q, 6) for q in range(4)}
                st = await c.group_status(1)
                assert (st.groups, st.group) == (6, 1)
                with pytest.raises(m.UnknownGroupError, match="hosts groups 0..5"):
                    await c.group_status(9)
        finally:
            for svc in svcs:
                await svc.stop()
            for h in hosts:
                await h.stop()
    asyncio.run(run())


def _heartbeat_times(align: bool) -> list:
    """When n1, elected at an odd time and ticked every 7 ms, sends heartbeats to n2."""
    from quorumlog.raft import RaftConfig
    from quorumlog.testing.cluster import ManualCluster
    cl = ManualCluster(config=RaftConfig(align_heartbeats=align))
    cl.elect("n1", start_ms=1234)
    times = []
    for _ in range(200):
        cl.tick(cl.now + 7)
        times += [cl.now for x in cl.queue if type(x) is Heartbeat and x.dst == "n2"]
        cl.deliver()
    return times[1:]


def test_aligned_heartbeats_go_at_multiples_of_the_interval():
    # RaftConfig.align_heartbeats (what a NodeHost's groups use): every heartbeat in the
    # first tick of a heartbeat_interval_ms slot of the clock, one per slot -- so the groups
    # of a process, ticked together, send theirs in the same tick (one frame per peer)
    aligned = _heartbeat_times(True)
    assert len(aligned) > 10
    assert all(t % 100 < 7 for t in aligned), aligned
    assert [t // 100 for t in aligned] == list(range(aligned[0] // 100,
                                                     aligned[0] // 100 + len(aligned)))
    # (the default: interval after the last one, at any phase)
    assert not all(t % 100 < 7 for t in _heartbeat_times(False))


def test_sync_mode_one_flush_thread_for_every_group(tmp_path):
    """flush = "sync": one flush thread per process whose rounds cover every group's log
    (a round flushes each log with a waiting request), and every put still returns only
    once a majority flushed it."""
    import threading

    async def run():
        hosts, clients = await _hosts(tmp_path, groups=4, flush="sync")
        try:
            names = [t.name for t in threading.enumerate()]
            assert names.count("quorumlog-group-flusher") == 3      # one per process
            assert not [n for n in names if n.startswith("quorumlog-flusher")]  # none per group
            puts = []
            for q in range(4):                     # every group (consecutive queues)
                node = hosts[0].node_for("t", q)
                leader = next(h.node_for("t", q) for h in hosts
                              if h.node_for("t", q).role == Role.LEADER)
                puts.append(leader.put_batch("t", [b"x%d" % q] * 5, queue_id=q))
                assert node is hosts[0].nodes[group_of("t", q, 4)]
            results = await asyncio.gather(*puts)
            assert [len(r.positions) for r in results] == [5] * 4
            for h in hosts:
                f = h.flusher
                assert f.flushes >= 4 and f.rounds >= 1
                for n in h.nodes:          # every group's log flushed to its end
                    cl = n.store.commitlog
                    assert cl.flushed_position > 0
        finally:
            for h in hosts:
                await h.stop()
        assert not [t for t in threading.enumerate() if t.name == "quorumlog-group-flusher"
                    and t.is_alive()]
    asyncio.run(run())


def test_idle_groups_quiesce_a_put_wakes_one_and_a_stopped_leader_is_replaced(tmp_path):
    # raft/quiesce.py + node/host.py: idle groups stop ticking and heartbeating; one
    # QuietBeat per peer per interval keeps them led; a put to a quiesced group commits; when
    # a process stops, the groups it led elect new leaders among the others
    async def run():
        groups = 4
        hosts, _ = await _hosts(tmp_path, groups=groups)
        loop = asyncio.get_running_loop()

        async def until(cond, what, timeout=30):
            deadline = loop.time() + timeout
            while not cond():
                assert loop.time() < deadline, what
                await asyncio.sleep(0.02)
        stopped = []
        try:
            # (the balancer's transfers first: each wakes its group and moves its leader)
            want = [preferred_leader(g, [h.cfg.node_id for h in hosts]) for g in range(groups)]
            await until(lambda: all(h.leaders() == want for h in hosts), "leaders not spread")
            await until(lambda: all(len(h.quiesced()) == groups for h in hosts),
                        [h.quiesced() for h in hosts])
            h1 = hosts[0]
            hb0, q0 = h1.stats["heartbeat_batches"], h1.stats["quiet_beats"]
            await until(lambda: h1.stats["quiet_beats"] >= q0 + 20, "no quiet beats")
            # (awake, each peer would get a heartbeat batch and an answer batch per interval
            # for every QuietBeat; a loaded machine may wake a group for a round or two)
            assert (h1.stats["heartbeat_batches"] - hb0) * 2 < h1.stats["quiet_beats"] - q0
            leaders = hosts[0].leaders()
            g = 1
            lh = next(h for h in hosts if h.cfg.node_id == leaders[g])
            assert g in lh.quiesced()
            term = lh.nodes[g].core.term
            r = await asyncio.wait_for(lh.nodes[g].put("t", b"quiet"), 10)
            assert r.index > 0
            await until(lambda: all(h.nodes[g].applied_index >= r.index for h in hosts),
                        "the put did not reach every replica")
            await until(lambda: all(g in h.quiesced() for h in hosts), "not quiet again")
            assert lh.nodes[g].core.term == term      # no election on the way
            # the leader's process stops: every group it led elects a new leader
            lost = [x for x, leader in enumerate(leaders) if leader == lh.cfg.node_id]
            old_terms = {x: lh.nodes[x].core.term for x in lost}
            await lh.stop()
            stopped.append(lh)
            rest = [h for h in hosts if h is not lh]
            await until(lambda: all(any(h.nodes[x].role == Role.LEADER for h in rest)
                                    for x in lost), [h.leaders() for h in rest])
            for x in lost:
                new = next(h for h in rest if h.nodes[x].role == Role.LEADER)
                assert new.nodes[x].core.term > old_terms[x]
            assert rest[0].stats["woken"] >= len(lost)
        finally:
            for h in hosts:
                if h not in stopped:
                    await h.stop()
    asyncio.run(run())


def test_batched_heartbeats_carry_the_incarnations(tmp_path):
    # a HeartbeatBatch entry dropped the heartbeat's boot / boot_end and an answer's boot /
    # floor: a multi-group leader never learned its followers' incarnations nor that one is
    # recovering (raft/recovery.py R3b; membership's healthy-quorum check reads the floor)
    async def run():
        hosts, _ = await _hosts(tmp_path, groups=3, quiesce=False)
        by_id = {h.cfg.node_id: h for h in hosts}
        loop = asyncio.get_running_loop()

        def known():
            for g in range(3):
                leader = [h for h in hosts if h.nodes[g].role == Role.LEADER]
                if len(leader) != 1:
                    return False
                for peer, pr in leader[0].nodes[g].core.progress.items():
                    if pr.boot != by_id[peer].nodes[g].core.boot:
                        return False
            return True
        try:
            deadline = loop.time() + 20
            while not known():
                assert loop.time() < deadline, [
                    (g, p, pr.boot) for h in hosts for g, n in enumerate(h.nodes)
                    if n.role == Role.LEADER for p, pr in n.core.progress.items()]
                await asyncio.sleep(0.02)
            assert all(n.core.boot for h in hosts for n in h.nodes)
        finally:
            for h in hosts:
                await h.stop()
    asyncio.run(run())


def test_clients_start_their_round_robin_on_queues_of_their_own():
    # every client began at queue 0 and moved on every 32 small produces: concurrent
    # clients wrote in step to one queue, one group, one leader at a time
    firsts = {AsyncClient(["127.0.0.1:1"], client_id=f"producer-{i}", groups=8,
                          insecure=True)._choose_queue("t", True) for i in range(16)}
    assert len(firsts) >= 4, firsts
    c = AsyncClient(["127.0.0.1:1"], client_id="p", groups=8, insecure=True)
    small = [c._choose_queue("t", True) for _ in range(64)]
    assert small[:32] == [small[0]] * 32 and small[32:] == [(small[0] + 1) % 8] * 32
    big = [c._choose_queue("u", False) for _ in range(8)]
    assert sorted(big) == list(range(8))        # still every queue in turn
