"""Deterministic simulation of the REAL replica: groups of three `Node` drivers with real
stores, over the simulated network, on virtual time, with a simulated disk.

    python -m quorumlog.testing.nodesim --seeds N [--start S] [-j J] [--groups G] [-v]

Per seed: three `quorumlog.node.driver.Node`s -- the driver `quorumlog serve` runs, its
proposal pipeline, coalescing and producer table -- each over a real MessageStore on a
`SimDisk` (testing/simdisk.py: what a crash or power loss keeps; flushes that fail), talking
over `SimNetwork` (net/simnet.py), on a `VirtualTimeLoop` (testing/simloop.py: asyncio on
virtual time, no wall clock, no socket), each node's clock at its own rate. The flush mode
(sync / async), the producers' window and the nemeses are drawn from the seed.

Clients: pipelined idempotent producers (a producer id, sequences, up to `window` batches in
flight, each retried to whichever node the client believes leads until acknowledged) and
consumers reading random ranges of any replica. Nemeses: kill and restart, power loss (a
kill plus the loss of every unflushed byte), symmetric partitions, one-way cuts, link stalls
(a TCP retransmission timeout: the link holds everything for 200-800 ms), a failing flush,
leadership transfer; clock-rate skew is there from the start.

The history checker (testing/nodesim_check.py): every acknowledged message is in the log exactly once, at
its acknowledged (queue, offset); no message of a batch whose every attempt was refused
before it reached the log; offsets dense per queue; a (queue, offset) never read or
acknowledged with two bodies; replicas byte-identical up to the commit index; an
acknowledgement only when a majority holds the entry (a minority never acknowledges); and,
after the last heal, the group converges (one leader, every replica applied to the same end,
the producers' batches resolved); with G > 1, the idle cluster then quiesces every group on
every member. A failing seed prints its violations and the command that
replays it exactly (same seed: same run; PYTHONHASHSEED is pinned to 0).

--groups G > 1: each member is a `NodeHost` of G groups (node/host.py, as `quorumlog serve
--groups G` runs it: one shared simulated transport carrying the frames' group field, one
timer, batched heartbeats, QuietBeats and quiescence, leader balance) on the same simulated
network, disk and clock; a producer per group (at least two) on its group's queue; the
nemeses act on the processes (kill, power loss, partitions) or on one group (transfer,
membership); one HistoryChecker per group checks every rule above for that group
(`_GroupView`). G = 1 is the run above, unchanged (same seed: same draws, same history).

The last line of a run reads `nodesim: seeds N, violations V, acknowledged A, nemeses K`.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import random
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ..client import _ProducerWindow
from ..config import load_config
from ..errors import InvalidArgumentError, QuorumlogError
from ..net.simnet import SimNetwork, SimTransport
from ..node.clock import LoopClock
from ..node.config import NodeConfig
from ..node.driver import Node
from ..node.groups import group_dir, group_of
from ..node.host import NodeHost
from ..raft.core import RaftConfig
from ..raft.messages import Role
from .nodesim_check import STOPPED_FOR_RECOVERY, HistoryChecker
from .simdisk import SIM_STORE_SETTINGS, SimDisk, SimFlusher
from .simloop import VirtualTimeLoop

__all__ = ["SeedResult", "run_seed", "main"]

TOPIC = "sim"
QUEUES = 2
IDS = ("n1", "n2", "n3")
PUT_TIMEOUT_S = 2.0
MAX_ATTEMPTS = 60
_HOST_STATS = ("quiesced", "woken", "quiet_beats", "heartbeat_batches", "transfers_asked")


@dataclass
class SeedResult:
    seed: int
    mode: str = ""
    window: int = 0
    groups: int = 1
    violations: list = field(default_factory=list)
    acknowledged: int = 0          # messages
    nemeses: int = 0
    stats: dict = field(default_factory=dict)
    trace: list = field(default_factory=list)
    # The group's documented stop after power losses in async mode (docs/raft.md "Recovery
    # after power loss", "What it costs"): no quorum of non-recovering voters, so no leader
    # until an operator runs end_recovery -- the engine refusing to guess what was lost, not
    # a violation. Why, or "" (nodesim_check.HistoryChecker.converge decides).
    stopped: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations


class _Batch:
    __slots__ = ("pid", "seq", "bodies", "reached", "state", "window", "group", "queue")

    def __init__(self, pid, seq, bodies, window, group=0, queue=None):
        self.pid, self.seq, self.bodies = pid, seq, bodies
        self.group, self.queue = group, queue       # (G > 1: the producer's group, queue)
        self.window = window       # the producer's unresolved sequences (the real client's)
        self.reached = False       # an attempt got past the node's checks: maybe written
        self.state = "open"        # open | acked | refused | abandoned


class _Member:
    """One replica's slot: its directory, disk, clock rate, and the Node while it runs."""

    def __init__(self, nid, path, disk, rate):
        self.id, self.path, self.disk, self.rate = nid, path, disk, rate
        self.node: Node | None = None
        self.host: NodeHost | None = None      # G > 1: the process's groups
        self.flush_tasks: list = []
        self.held: dict = {}       # index -> term of its log when it last went down
        self.restart_at = None

    @property
    def up(self) -> bool:
        return self.node is not None or self.host is not None

    def nodes(self) -> list:
        """Its running Nodes (one per group), or [] while down."""
        if self.host is not None:
            return self.host.nodes
        return [self.node] if self.node is not None else []


class _GroupSlot:
    """One member as one Raft group's checker sees it (G > 1): its id, that group's Node
    while the member runs, that group's log when it last went down."""

    def __init__(self, member: _Member, group: int):
        self.member, self.group, self.id = member, group, member.id
        self.held: dict = {}

    @property
    def node(self):
        h = self.member.host
        return h.nodes[self.group] if h is not None else None


class _GroupView:
    """What a HistoryChecker reads of the run, for one Raft group of a G > 1 run: the
    members' slots of that group, that group's batches; the rest is the run's."""

    def __init__(self, sim: "NodeSim", group: int):
        self.sim, self.group = sim, group
        self.members = {i: _GroupSlot(m, group) for i, m in sim.members.items()}
        self.res, self.mode, self.stats = sim.res, sim.mode, sim.stats

    @property
    def loop(self):
        return self.sim.loop

    @property
    def batches(self) -> list:
        return [b for b in self.sim.batches if b.group == self.group]

    def live(self) -> list:
        return [s for s in self.members.values() if s.node is not None]

    def change_members(self) -> bool:
        return self.sim.change_members(self.group)

    async def reap_failed(self) -> None:
        await self.sim.reap_failed()

    async def restart_due(self, now: float, force: bool = False) -> None:
        await self.sim.restart_due(now, force)


def _store_cfg(mode: str):
    return load_config(None, {}, **dict(
        SIM_STORE_SETTINGS, flush=mode, segment_size_bytes=256 << 10,
        index_file_entries=1024, consume_queue_file_entries=1024, key_index=False,
        default_topic_queues=QUEUES, max_message_bytes=4096))


def _why_awake(node) -> str:
    """What keeps a group's core from quiescing (raft/quiesce.py Q1's inputs, the node's)."""
    core = node.core
    if core.role != Role.LEADER:
        return f"{core.role.name} of {core.leader_id} in term {core.term}"
    st = node.status()
    return (f"{core.quiet_inputs()}, applied {st['applied_index']}, pending puts "
            f"{st['pending_puts']} (followers: state, match, in flight, ms since answer)")


SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_ROOT_NAME = re.compile(r"nodesim-\d+-p(\d+)-")


def sweep_stale_roots(scratch: str = SCRATCH) -> int:
    """Remove the seed directories of nodesim processes that are gone: a killed run (SIGKILL,
    a session's end) leaves its members' stores behind, on /dev/shm that is memory. Returns
    how many were removed."""
    removed = 0
    for name in os.listdir(scratch):
        m = _ROOT_NAME.match(name)
        if m is None:
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue                      # alive (its own or another run's)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue                      # alive, another user's
        shutil.rmtree(os.path.join(scratch, name), ignore_errors=True)
        removed += 1
    return removed


class NodeSim:
    """One seed's run (see the module docstring)."""

    def __init__(self, seed: int, *, fault_ms: int = 3000, settle_ms: int = 20000,
                 mode: str | None = None, window: int | None = None, groups: int = 1):
        self.seed = seed
        # G > 1: each member is a NodeHost of G groups (quiescence, batched heartbeats,
        # leader balance), one checker per group (G = 1: the Node alone, as ever)
        self.groups = groups
        rng = self.rng = random.Random(seed)
        self.mode = mode or rng.choice(("sync", "async"))
        self.window = window or rng.choice((1, 2, 4, 8))
        self.fault_ms, self.settle_ms = fault_ms, settle_ms
        self.max_down = rng.choice((1, 1, 2))
        self.kinds = self._pick_kinds(rng)
        self.res = SeedResult(seed, self.mode, self.window, groups=groups)
        self.stats = self.res.stats
        self.net = SimNetwork(seed=rng.getrandbits(32), delay_ms=(1, rng.choice((3, 10))))
        # (the pid in the name: sweep_stale_roots removes what a killed run left behind)
        self.root = tempfile.mkdtemp(prefix=f"nodesim-{seed}-p{os.getpid()}-", dir=SCRATCH)
        self.members = {i: _Member(i, os.path.join(self.root, i), SimDisk(
            random.Random(rng.getrandbits(32)), flush_ms=(0, rng.choice((1, 3, 10)))),
            1.0 + rng.uniform(-0.02, 0.02)) for i in IDS}
        self.peers = {i: f"127.0.0.1:{7001 + k}" for k, i in enumerate(IDS)}
        self.raft_cfg = RaftConfig()
        self.store_cfg = _store_cfg(self.mode)
        self.leader_guess = {g: IDS[0] for g in range(groups)}     # group -> member id
        self.stop_new = False
        self.deadline = float("inf")
        self.batches: list[_Batch] = []
        self.trace: list = []       # what the nemeses did, for a failing seed's report
        self.checkers = [HistoryChecker(self)] if groups == 1 else \
            [HistoryChecker(_GroupView(self, g), f"group {g}: ") for g in range(groups)]
        self.checker = self.checkers[0]
        self.loop: VirtualTimeLoop | None = None

    @staticmethod
    def _pick_kinds(rng) -> list:
        every = ["kill", "power", "partition", "oneway", "stall", "transfer", "flushfail",
                 "member"]
        kinds = [k for k in every if rng.random() < 0.6]
        return kinds or [rng.choice(every)]

    # ------------------------------------------------------------------------- members
    async def start_member(self, m: _Member) -> None:
        if self.groups > 1:
            await self._start_host(m)
            return
        loop = self.loop
        cfg = NodeConfig(node_id=m.id, peers=self.peers, insecure=True, put_timeout_ms=5000)
        transport = SimTransport(m.id, self.net, None, peers={p: None for p in IDS if p != m.id})
        flusher = SimFlusher(m.disk) if self.mode == "sync" else None
        node = Node(m.path, cfg, self.raft_cfg, store_cfg=self.store_cfg,
                    rng=random.Random(self.rng.getrandbits(32)), transport=transport,
                    clock=LoopClock(loop, m.rate, self.rng.randrange(1 << 20)), flusher=flusher)
        if not await self._started(m, node, transport, "store"):
            return
        m.node = node
        self.note(f"{m.id} up: log {node.store.commitlog.last_index}")
        if self.mode == "async":
            m.flush_tasks = [loop.create_task(m.disk.flush_loop(node))]

    async def _started(self, m: _Member, node, transport, what: str) -> bool:
        """Start a member's Node or NodeHost; a failure to reopen is a violation (the member
        stays down, its transport closed)."""
        try:
            await node.start()
        except Exception as e:
            self.checker.violation(f"{m.id} failed to reopen its {what}: {e!r}")
            if transport.network.nodes.get(m.id) is transport:
                await transport.close()
            return False
        return True

    async def _start_host(self, m: _Member) -> None:
        """G > 1: the member as `quorumlog serve --groups G` runs it, a NodeHost (one
        transport, one timer, quiescence, leader balance) on the simulated network, disk
        (a SimFlusher per group: the shared flush thread is a real thread) and clock."""
        loop = self.loop
        cfg = NodeConfig(node_id=m.id, peers=self.peers, insecure=True, put_timeout_ms=5000,
                         groups=self.groups)
        transport = SimTransport(m.id, self.net, None, peers={p: None for p in IDS if p != m.id})
        host = NodeHost(m.path, cfg, self.raft_cfg, store_cfg=self.store_cfg,
                        rng=random.Random(self.rng.getrandbits(32)), transport=transport,
                        clock=LoopClock(loop, m.rate, self.rng.randrange(1 << 20)),
                        flushers=(lambda g: SimFlusher(m.disk)) if self.mode == "sync"
                        else None)
        if not await self._started(m, host, transport, "stores"):
            return
        m.host = host
        self.note(f"{m.id} up: logs {[n.store.commitlog.last_index for n in host.nodes]}")
        if self.mode == "async":
            m.flush_tasks = [loop.create_task(m.disk.flush_loop(n)) for n in host.nodes]

    async def take_down(self, m: _Member, power: bool) -> None:
        node, m.node = m.node, None
        host, m.host = m.host, None
        if node is None and host is None:
            return
        if host is not None:
            for c in self.checkers:
                slot = c.sim.members[m.id]
                slot.held = c.log_terms(host.nodes[slot.group])
            self._count_host(host)
            await host.crash_for_testing()
        else:
            m.held = self.checker.log_terms(node)
            await node.crash_for_testing()
        for t in m.flush_tasks:
            t.cancel()
        m.flush_tasks = []
        if power:
            cut = [SimDisk.power_loss(group_dir(m.path, g, self.groups))["flushed_index"]
                   for g in range(self.groups)]
            self.note(f"{m.id} lost power: log cut to {cut[0] if len(cut) == 1 else cut}")
        self.stats["power_losses" if power else "kills"] = \
            self.stats.get("power_losses" if power else "kills", 0) + 1

    def _count_host(self, host) -> None:
        """G > 1: what the host did (quiescence, leader balance) into the run's stats."""
        for k in _HOST_STATS:
            if host.stats[k]:
                self.stats[k] = self.stats.get(k, 0) + host.stats[k]

    def states(self) -> str:
        if self.groups == 1:
            return self.checker.states()
        return " | ".join(f"g{g}: {c.states()}" for g, c in enumerate(self.checkers))

    def note(self, text: str) -> None:
        self.trace.append(f"t={int(self.loop.time() * 1000)}ms {text}")

    def down(self) -> list:
        return [m for m in self.members.values() if not m.up]

    def live(self) -> list:
        return [m for m in self.members.values() if m.up]

    def group_node(self, m: _Member, group: int):
        """Member m's Node of `group` (None while m is down)."""
        if self.groups == 1:
            return m.node
        return m.host.nodes[group] if m.host is not None else None

    async def restart_due(self, now: float, force: bool = False) -> None:
        for m in self.down():
            if force or (m.restart_at is not None and now >= m.restart_at):
                m.restart_at = None
                await self.start_member(m)

    async def reap_failed(self) -> None:
        """A node whose flush failed stopped its Raft participation: restart it after a
        power loss (the failed write-back's bytes are not known to be on the disk)."""
        for m in self.live():
            if any(n.status()["failed"] for n in m.nodes()):
                await self.take_down(m, power=True)
                m.restart_at = self.loop.time() + 0.2

    # ------------------------------------------------------------------------- nemeses
    async def nemesis_loop(self) -> None:
        rng = self.rng
        while True:
            await asyncio.sleep(rng.uniform(0.1, 0.5))
            await self.reap_failed()
            await self.restart_due(self.loop.time())
            kind = rng.choice(self.kinds)
            if await self.inject(kind):
                self.note(f"{kind} ({self.states()})")
                self.res.nemeses += 1
                self.stats[kind] = self.stats.get(kind, 0) + 1

    async def inject(self, kind: str) -> bool:
        rng, net, now = self.rng, self.net, self.loop.time()
        live = self.live()
        if kind in ("kill", "power"):
            if len(self.down()) >= self.max_down or not live:
                return False
            m = self._pick_target(live)
            await self.take_down(m, power=kind == "power")
            m.restart_at = now + rng.uniform(0.05, 1.5)
        elif kind == "partition":
            net.isolate(rng.choice(IDS))
            self.loop.call_later(rng.uniform(0.2, 1.5), net.heal)
        elif kind == "oneway":
            a, b = rng.sample(IDS, 2)
            net.cut(a, b)
            self.loop.call_later(rng.uniform(0.2, 1.5), net.heal)
        elif kind == "stall":
            a, b = rng.sample(IDS, 2)
            net.stall(a, b, rng.uniform(200, 800))
        elif kind == "transfer":
            g = rng.randrange(self.groups) if self.groups > 1 else 0
            lead = [m for m in live if self.group_node(m, g).role == Role.LEADER]
            if not lead:
                return False
            to = rng.choice([i for i in IDS if i != lead[0].id])
            try:
                self.group_node(lead[0], g).transfer_leadership(to)
            except QuorumlogError:
                return False
        elif kind == "member":
            return self.change_members(rng.randrange(self.groups) if self.groups > 1 else 0)
        elif kind == "flushfail":       # (sync: the group commit's; async: the background one)
            if not live:
                return False
            self._pick_target(live).disk.fail_next = True
        return True

    def _ready_leader(self, group: int = 0):
        for m in self.live():
            n = self.group_node(m, group)
            if n.role == Role.LEADER and n.ready_to_serve:
                return m, n
        return None, None

    def change_members(self, group: int = 0) -> bool:
        """Remove a follower from the voters, or add back one that is not a voter (it comes
        back as a learner and is promoted once caught up); G > 1: in one group."""
        lead, node = self._ready_leader(group)
        if lead is None:
            return False
        core = node.core
        out = [i for i in IDS if i not in core.voters and i != core.learner]
        try:
            if out:
                node.add_member(out[0], self.peers[out[0]])
            elif core.learner is None and len(core.voters) == len(IDS):
                node.remove_member(self.rng.choice([i for i in IDS if i != lead.id]))
            else:
                return False
        except QuorumlogError:
            return False
        return True

    def _pick_target(self, live) -> _Member:
        lead = [m for m in live if any(n.role == Role.LEADER for n in m.nodes())]
        if lead and self.rng.random() < 0.5:
            return lead[0]
        return self.rng.choice(live)

    # ------------------------------------------------------------------------- clients
    async def producer(self, k: int) -> None:
        rng = random.Random(self.rng.getrandbits(32))
        pid = rng.getrandbits(62) | 1
        # The real client's window (client.py): a new sequence only while it is less than
        # `window` above the lowest unresolved one, so a retry is always among the batches the
        # leader remembers; after a failure the batches are resent oldest first (turn).
        w = _ProducerWindow(self.window)
        inflight: set = set()
        # G > 1: producer k writes to group k mod G, on that group's queue of the topic
        # (the topic has G queues there: one per group, node/groups.py)
        group = k % self.groups
        queue = None if self.groups == 1 else \
            next(q for q in range(self.groups) if group_of(TOPIC, q, self.groups) == group)
        while not self.stop_new:
            if len(inflight) >= self.window:
                await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                inflight = {t for t in inflight if not t.done()}
                continue
            seq = await w.acquire()
            if self.stop_new:
                w.release(seq)           # (numbered, never sent: given up)
                break
            n = rng.choice((1, 1, 2, 3, 5))
            b = _Batch(pid, seq, [f"p{k}-{pid:x}-s{seq}-m{i}-".encode() + b"x" * rng.randrange(64)
                                  for i in range(n)], w, group, queue)
            self.batches.append(b)
            inflight.add(self.loop.create_task(self.send_batch(b, rng)))
            await asyncio.sleep(rng.uniform(0.0, 0.03))
        if inflight:
            await asyncio.wait(inflight)

    async def send_batch(self, b: _Batch, rng) -> None:
        try:
            await self._send_batch(b, rng)
        finally:
            b.window.release(b.seq)

    async def _send_batch(self, b: _Batch, rng) -> None:
        for _ in range(MAX_ATTEMPTS):
            if self.loop.time() > self.deadline:
                break
            m = self.members[self.leader_guess[b.group]]
            node = self.group_node(m, b.group)
            if node is None:
                self._rotate(b.group)
                await asyncio.sleep(rng.uniform(0.02, 0.1))
                continue
            try:     # (no batch goes while an older one of the producer waits to be resent)
                await b.window.turn(b.seq, min(self.deadline, self.loop.time() + 5))
            except TimeoutError:
                continue
            outcome = await self._attempt(b, node, self.checkers[b.group])
            if outcome is True:
                return
            if outcome == "refused":
                b.state = "refused"
                self.stats["refused"] = self.stats.get("refused", 0) + 1
                return
            try:     # the real client's rule: an older failed batch leads the way
                if await b.window.after_error(b.seq, outcome,
                                              min(self.deadline, self.loop.time() + 5)):
                    continue
            except (QuorumlogError, TimeoutError):
                pass                     # (the older batch did not move in time: go anyway)
            await asyncio.sleep(rng.uniform(0.01, 0.08))
        b.state = "abandoned"

    async def _attempt(self, b: _Batch, node: Node, checker: HistoryChecker):
        where = {} if b.queue is None else {"queue_id": b.queue}
        try:
            # base_sequence: the producer's lowest unresolved sequence, as the client sends
            fut = node.put_batch_future(TOPIC, list(b.bodies), producer_id=b.pid,
                                        sequence=b.seq, base_sequence=b.window.base(), **where)
        except InvalidArgumentError as e:
            return self._refused(e)   # (a sequence the table refuses: outcome unknown)
        except QuorumlogError as e:
            self._redirect(e, b.group)
            return e
        b.reached = True
        try:
            res = await asyncio.wait_for(asyncio.shield(fut), PUT_TIMEOUT_S)
        except InvalidArgumentError as e:
            return self._refused(e)
        except (QuorumlogError, TimeoutError) as e:
            self._redirect(e, b.group)
            return e
        b.state = "acked"
        checker.acknowledged(b, node, res)
        return True

    def _refused(self, e) -> str:
        key = f"refused_{type(e).__name__}"
        self.stats[key] = self.stats.get(key, 0) + 1
        return "refused"

    def _redirect(self, e, group: int) -> None:
        lid = getattr(e, "leader_id", None)
        if lid in self.members and lid != self.leader_guess[group]:
            self.leader_guess[group] = lid
        else:
            self._rotate(group)

    def _rotate(self, group: int) -> None:
        self.leader_guess[group] = IDS[(IDS.index(self.leader_guess[group]) + 1) % len(IDS)]

    async def consumer(self) -> None:
        rng = random.Random(self.rng.getrandbits(32))
        while True:
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            live = self.live()
            if not live:
                continue
            if self.groups == 1:
                self.checker.consume(rng.choice(live), rng.randrange(QUEUES), rng)
                continue
            m, q = rng.choice(live), rng.randrange(self.groups)     # (one queue per group)
            c = self.checkers[group_of(TOPIC, q, self.groups)]
            c.consume(c.sim.members[m.id], q, rng)

    # ------------------------------------------------------------------------- the run
    async def main(self) -> None:
        self.loop = asyncio.get_running_loop()
        for m in self.members.values():
            await self.start_member(m)
        tasks = [self.loop.create_task(self.producer(k))
                 for k in range(max(2, self.groups))]
        side = [self.loop.create_task(self.nemesis_loop()), self.loop.create_task(self.consumer())]
        try:
            await asyncio.sleep(self.fault_ms / 1000)
            side[0].cancel()
            await self.heal()
            self.stop_new = True
            self.deadline = self.loop.time() + self.settle_ms / 1000
            await asyncio.wait(tasks)
            # every group converges at once: one that stops for recovery (the documented
            # stop) holds the others up to the deadline otherwise, and they get no time
            deadline = self.loop.time() + self.settle_ms / 1000
            if len(self.checkers) == 1:
                await self.checker.converge(deadline)
            elif all(await asyncio.gather(*(c.converge(deadline) for c in self.checkers))):
                await self._quiesces(self.loop.time() + self.settle_ms / 1000)
            side[1].cancel()
            self._check_tasks(tasks + side)
            for c in self.checkers:
                c.final()
        finally:
            for t in tasks + side:
                t.cancel()
            await self.stop_all()

    async def _quiesces(self, deadline: float) -> None:
        """G > 1, liveness: a healed, converged, idle cluster quiesces every group on every
        member before the deadline (raft/quiesce.py: an idle group costs nothing)."""
        while True:
            awake = {m.id: [g for g in range(self.groups) if g not in m.host.quiesced()]
                     for m in self.live()}
            if not any(awake.values()):
                return
            if self.loop.time() > deadline:
                self.checker.violation("idle groups never quiesced: " + "; ".join(
                    f"{i} g{g}: {_why_awake(self.members[i].host.node(g))}"
                    for i, gs in awake.items() for g in gs))
                return
            await asyncio.sleep(0.05)

    async def stop_all(self) -> None:
        """Stop every live node and every async flush loop (the end of a run or a test)."""
        for m in self.live():
            if m.host is not None:
                self._count_host(m.host)
            await (m.host or m.node).stop()
        for m in self.members.values():
            for t in m.flush_tasks:
                t.cancel()

    def _check_tasks(self, tasks) -> None:
        """A client or nemesis that raised is a broken run, not a passing one."""
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                self.checker.violation(f"harness task failed: {t.exception()!r}")

    async def heal(self) -> None:
        self.net.heal()
        for m in self.members.values():
            m.disk.fail_next = False
        await self.reap_failed()
        await self.restart_due(0, force=True)

    def run(self) -> SeedResult:
        loop = VirtualTimeLoop()
        try:
            loop.run_until_complete(self.main())
        except Exception as e:           # the harness or the node broke: a finding too
            self.checker.violation(f"run raised {e!r}")
        finally:
            loop.close()
            shutil.rmtree(self.root, ignore_errors=True)
        self.res.acknowledged = sum(c.acked_messages for c in self.checkers)
        self.res.trace = self.trace
        self.stats["sim_ms"] = int(loop.time() * 1000)
        return self.res


def run_seed(seed: int, **kw) -> SeedResult:
    return NodeSim(seed, **kw).run()


def run_scenario(sim: NodeSim, scenario):
    """A test's own scenario instead of the seed's nemeses: start every member of `sim`,
    await scenario(sim) on virtual time, stop every member, remove the directories."""
    async def run():
        sim.loop = asyncio.get_running_loop()
        for m in sim.members.values():
            await sim.start_member(m)
        try:
            return await scenario(sim)
        finally:
            await sim.stop_all()

    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()
        shutil.rmtree(sim.root, ignore_errors=True)


def replay_command(seed: int, groups: int = 1) -> str:
    g = f" --groups {groups}" if groups > 1 else ""
    return f"python -m quorumlog.testing.nodesim --seeds 1 --start {seed}{g} -v"


def _run_one(args: tuple) -> SeedResult:
    seed, groups = args
    return run_seed(seed, groups=groups)


def _report(r: SeedResult, verbose: bool) -> None:
    g = f", groups {r.groups}" if r.groups > 1 else ""
    if r.violations or (r.stopped and verbose):
        print(f"seed {r.seed} ({r.mode}, window {r.window}{g}): {len(r.violations)} "
              f"violation(s){' [' + r.stopped + ']' if r.stopped else ''}", flush=True)
        for v in r.violations[:10]:
            print(f"  {v}")
        if verbose:
            print("  nemeses:\n    " + "\n    ".join(r.trace))
        print(f"  replay: {replay_command(r.seed, r.groups)}", flush=True)
    elif verbose:
        print(f"seed {r.seed} ({r.mode}, window {r.window}{g}): ok, acknowledged "
              f"{r.acknowledged}, nemeses {r.nemeses}, {r.stats}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quorumlog.testing.nodesim",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--groups", type=int, default=1,
                    help="Raft groups per simulated process (> 1: through NodeHost)")
    a = ap.parse_args(argv)
    if a.seeds < 1 or a.jobs < 1:
        ap.error("--seeds and -j must be >= 1")
    if not 1 <= a.groups <= 64:
        ap.error("--groups must be in 1..64")
    if os.environ.get("PYTHONHASHSEED") != "0":        # set iteration order: replayable
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "quorumlog.testing.nodesim",
                                  *(argv if argv is not None else sys.argv[1:])])
    logging.basicConfig(level=logging.WARNING if a.verbose else logging.CRITICAL + 1)
    sweep_stale_roots()
    seeds = [(s, a.groups) for s in range(a.start, a.start + a.seeds)]
    t0 = time.monotonic()
    viol = acked = nem = 0
    bad_seeds, stopped_seeds = [], []
    totals: dict = {}            # (mode, stat) -> sum over the seeds
    if a.jobs == 1:
        results = map(_run_one, seeds)
    else:
        pool = multiprocessing.get_context("fork").Pool(a.jobs)
        results = pool.imap(_run_one, seeds, chunksize=4)
    for r in results:
        _report(r, a.verbose)
        viol += len(r.violations)
        if r.violations:
            bad_seeds.append(r.seed)
        if r.stopped:
            stopped_seeds.append(r.seed)
        acked += r.acknowledged
        nem += r.nemeses
        for k, v in (("seeds", 1), *r.stats.items()):
            if k != "sim_ms":
                totals[(r.mode, k)] = totals.get((r.mode, k), 0) + v
    dt = time.monotonic() - t0
    print(f"nodesim: {a.seeds / dt:.1f} seeds/s over {dt:.0f} s with -j {a.jobs}")
    for mode in ("sync", "async"):
        part = {k: v for (m, k), v in sorted(totals.items()) if m == mode}
        print(f"nodesim: {mode}: {part}")
    print(f"nodesim: seeds with violations: {len(bad_seeds)} {bad_seeds[:20]}; "
          f"{STOPPED_FOR_RECOVERY} (documented, async after power losses, not a violation): "
          f"{len(stopped_seeds)} {stopped_seeds[:20]}")
    print(f"nodesim: seeds {a.seeds}, violations {viol}, acknowledged {acked}, nemeses {nem}")
    return 1 if viol else 0


if __name__ == "__main__":
    sys.exit(main())
