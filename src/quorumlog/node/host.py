"""NodeHost: the Raft groups of one process (Multi-Raft). Each group is a whole `Node` (its own
core, store directory, role, timers); the host owns what they share -- the event loop, one
peer listener and one connection (lane pair) per peer pair -- and demultiplexes peer frames
to the groups by the frame header's group field. It also keeps the groups' leaders spread
over the members (preferred leaders, node/groups.py) by transferring leadership back, one
group at a time.

    host = NodeHost(path, cfg, raft_cfg, store_cfg=..., groups=8)
    await host.start()
    node = host.node_for("orders", 3)        # the Node of the group that holds the queue
    await host.stop()

groups == 1 is today's replica exactly: one Node at <dir> with a transport of its own (the
frames' group field stays 0). groups > 1: <dir>/groups/<g>/, one shared PeerTransport whose
decoder accepts the group field; a frame naming a group this process does not host is
refused (UnknownGroupError, counted per peer in `stats()["unknown_group"]`, logged at most
every few seconds) and changes nothing.

open_groups (the embedding API, node/replica.py): a process may open only some groups of the
layout (a broker that serves those). `nodes` are then the opened groups' Nodes in
`hosted` order; a frame for a group of the layout it did not open is dropped and counted
in `stats["not_open"]` (peers hosting it send them; not logged: it is the configuration).

Quiescence (raft/quiesce.py): an idle group costs nothing per tick. Every heartbeat
interval the host quiesces each leader group that may (Q1), skips the ticks of quiesced
groups, and sends each peer ONE QuietBeat: the groups it leads quiesced (a quiet heartbeat
each, whatever G) and its answers to the peer's last QuietBeat (the groups it held quiesced
following the peer). A group wakes on any input (Q3) and when the exchange says it must: a
peer unheard for _WAKE_UNHEARD_INTERVALS intervals wakes every quiesced group it leads or
follows there (whose elections then run as usual, per group); a follower group its leader no
longer lists, or a leader group a follower did not acknowledge, wakes.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import random

from ..config import load_config
from ..metrics import GroupsCollector, serve_collector
from ..net.messages import (MAX_BATCH_GROUPS, HeartbeatBatch, HeartbeatResponseBatch,
                            QuietBeat, UnknownGroupError)
from ..net.ratelog import RateLimitedLog
from ..net.transport import DATA, TransportConfig
from ..raft.core import RaftConfig
from ..raft.messages import Heartbeat, HeartbeatResponse, Role
from .clock import MonotonicClock
from .config import NodeConfig, parse_address
from .driver import Node
from .flusher import SharedFlusher
from .groups import (check_groups, check_layout, check_open_groups, group_dir, group_of,
                     preferred_leader)
from .wiring import tcp_transport

log = logging.getLogger(__name__)

__all__ = ["NodeHost", "GroupLink"]

# a tick's heartbeats (and a batch's answers) of every group to one peer: one frame
_BATCHED = {Heartbeat: HeartbeatBatch, HeartbeatResponse: HeartbeatResponseBatch}
_UNBATCH = frozenset(_BATCHED.values())

_BALANCE_EVERY_MS = 500         # how often a host looks for a group to give back
_BALANCE_RETRY_MS = 5000        # a group whose transfer was asked is not asked again sooner
_BALANCE_MAX_LAG = 64           # the preferred member must be this close to the leader's end
# quiescence: a peer unheard (no QuietBeat) for this many heartbeat intervals wakes the groups
# quiesced with it: well inside the leader's lease and the followers' leak (6 and 7 intervals)
_WAKE_UNHEARD_INTERVALS = 3
_QUIET_ROUNDS_KEPT = 8          # own rounds remembered for their answers
_LOOP_STALL_MS = 250
_QUIET_LOGGED_AFTER_MS = 1000   # every group quiesced this long: logged once (INFO)
_IDLE_TICK_MS = 50              # the timer's period while every group is quiesced


class GroupLink:
    """One group's view of the host's shared transport: the net/seam.py Transport a Node is
    given. Sends carry the group id; start/close belong to the host."""

    def __init__(self, host: "NodeHost", group: int):
        self.host = host
        self.group = group
        self.on_message = None
        self.on_peer_lost = None     # (the host tells every group's Node: on_peer_lost)

    @property
    def address(self):
        t = self.host.transport
        return t.address if t is not None else None

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def send(self, peer_id: str, message) -> bool:
        t = self.host.transport
        if t is None or t.closed:
            return False
        if type(message) in _BATCHED:
            return self.host.queue_heartbeat(peer_id, self.group, message)
        return t.send(peer_id, message, self.group)

    def add_peer(self, peer_id: str, address) -> None:
        t = self.host.transport
        if t is not None and (address is not None or peer_id not in t.peers()):
            t.add_peer(peer_id, address)

    def remove_peer(self, peer_id: str) -> None:
        pass     # (the connection is shared: other groups may still have the member)

    def is_connected(self, peer_id: str, lane: int = DATA) -> bool:
        t = self.host.transport
        return t is not None and t.is_connected(peer_id, lane)

    def stats(self) -> dict:
        t = self.host.transport
        return t.stats() if t is not None else {"peers": {}}


class NodeHost:
    """See the module docstring. Build, then `await start()` in the loop that runs it."""

    def __init__(self, path, cfg: NodeConfig, raft_cfg: RaftConfig | None = None, *,
                 store_cfg=None, groups: int | None = None,
                 transport_config: TransportConfig | None = None,
                 rng: random.Random | None = None, balance: bool = True,
                 node_class: type = Node, quiesce: bool | None = None,
                 open_groups=None, transport=None, clock=None, flushers=None):
        self.path = path
        self.cfg = cfg
        self.groups = check_groups(groups if groups is not None else cfg.groups)
        # the groups this process opens, ascending (None: every group of the layout)
        self.hosted = check_open_groups(open_groups, self.groups)
        self.raft_cfg = raft_cfg or RaftConfig()
        self.store_cfg = store_cfg
        self.transport_config = transport_config
        self.rng = rng or random.Random()
        self.balance = balance and self.groups > 1
        self.node_class = node_class     # (the benchmark's replica counts with a subclass)
        self.transport = None
        # the simulator's seams (testing/nodesim.py): a shared transport with the group
        # field (None: TCP), a clock (None: monotonic), flushers: group -> FlushService
        # (None: the shared flush thread in sync mode)
        self._given_transport = transport
        self._flushers = flushers
        self.nodes: list[Node] = []
        self._links: dict[int, GroupLink] = {}
        self._by_group: dict[int, Node] = {}
        self._balancer: asyncio.Task | None = None
        self._ticker: asyncio.Task | None = None
        self.clock = clock or MonotonicClock()
        self._metrics_server = None
        self.metrics_address: tuple | None = None
        self.flusher: SharedFlusher | None = None
        self._asked: dict[int, float] = {}      # group -> when its transfer was asked
        self.stats = {"unknown_group": collections.Counter(), "not_open": collections.Counter(),
                      "transfers_asked": 0,
                      "batched_heartbeats": 0, "heartbeat_batches": 0, "quiet_beats": 0,
                      "quiesced": 0, "woken": 0, "loop_stalls": 0}
        # False: every group ticks and heartbeats, idle or not (None: cfg.quiesce)
        self.quiesce = cfg.quiesce if quiesce is None else quiesce
        self._quiet_seq = 0
        self._quiet_rounds: dict = {}       # own round -> (sent ms, groups listed)
        self._quiet_heard: dict = {}        # peer -> when its last QuietBeat came
        self._quiet_answers: dict = {}      # peer -> (its round, groups held quiesced)
        self._quiet_listed: dict = {}       # peer -> the groups its last QuietBeat listed
        self._next_quiet_ms = 0
        self._quiet_since = None        # since when every group is quiesced (-1: logged)
        self._woke = False              # a follower group quiesced again since the last round
        self._out: dict = {}       # (peer, batch class) -> entries waiting for this turn's end
        self._listeners: list = []
        self._events = RateLimitedLog(log, f"node {cfg.node_id!r} groups", 10.0, 5,
                                      clock=lambda: self.clock.now_ms() / 1000)

    # ---------------------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._events.loop = asyncio.get_running_loop()
        check_layout(self.path, self.groups)
        if self.groups == 1:
            node = self.node_class(self.path, self.cfg, self.raft_cfg,
                                   store_cfg=self.store_cfg,
                                   transport_config=self.transport_config, rng=self.rng)
            self._listen(node, 0)
            await node.start()
            self.nodes = [node]
            self._by_group = {0: node}
            self.transport = node.transport
            return
        # the groups serve /metrics together (metrics.GroupsCollector), not one each
        gcfg = dataclasses.replace(self.cfg, metrics_addr=None)
        rcfg = dataclasses.replace(self.raft_cfg, align_heartbeats=True)
        # sync mode: one flush thread for every group (a round flushes each waiting log)
        self.flusher = SharedFlusher() if self.store_cfg.flush == "sync" and \
            self._flushers is None else None
        # an auto-created topic spans every group: at least G queues (clients assume the
        # same when they choose a queue: client.py topic_queues)
        scfg = self.store_cfg if self.store_cfg is not None else load_config(None, {})
        self.store_cfg = dataclasses.replace(
            scfg, default_topic_queues=max(scfg.default_topic_queues, self.groups))
        try:
            for g in self.hosted:
                link = GroupLink(self, g)
                node = self.node_class(group_dir(self.path, g, self.groups), gcfg,
                                       rcfg, store_cfg=self.store_cfg,
                                       rng=random.Random(self.rng.random()), transport=link,
                                       clock=self.clock, own_ticker=False,
                                       flusher=self._flusher_for(g))
                self._links[g] = link
                self._listen(node, g)
                await node.start()
                self.nodes.append(node)
                self._by_group[g] = node
            self.transport = self._given_transport or self._shared_transport()
            self.transport.on_group_message = self._on_group_message
            self.transport.on_peer_lost = self.on_peer_lost
            await self.transport.start()
        except BaseException:
            await self._stop_nodes()
            raise
        loop = asyncio.get_running_loop()
        if self.cfg.metrics_addr is not None:
            mhost, mport = parse_address(self.cfg.metrics_addr, "metrics_addr")
            collector = GroupsCollector(lambda: [(n.store, n.metrics) for n in self.nodes])
            self._metrics_server, port = serve_collector(collector, mport, mhost)
            self.metrics_address = (mhost, port)
        self._ticker = loop.create_task(self._tick_loop())
        if self.balance:
            self._balancer = loop.create_task(self._balance_loop())
        log.info("node %s: hosting %d Raft groups in %s", self.cfg.node_id, self.groups,
                 self.path)

    def _flusher_for(self, group: int):
        if self._flushers is not None:
            return self._flushers(group)
        return self.flusher.handle() if self.flusher is not None else None

    def _shared_transport(self):
        tcfg = self.transport_config or TransportConfig(
            max_frame_bytes=self.cfg.max_frame_bytes,
            handshake_timeout_ms=self.cfg.handshake_timeout_ms,
            max_send_queue_bytes=max(64 << 20, self.cfg.max_frame_bytes),
            control_lane=self.cfg.control_lane)
        # (a QuietBeat lists up to every group: 18 bytes each)
        tcfg = dataclasses.replace(tcfg, allow_groups=True, control_max_frame_bytes=max(
            tcfg.control_max_frame_bytes, 8192))
        return tcp_transport(self.cfg, transport_config=tcfg, rng=self.rng,
                             segment_size_bytes=self.nodes[0].store.commitlog.segment_size_bytes)

    async def stop(self) -> None:
        for t in (self._balancer, self._ticker):
            if t is not None:
                t.cancel()
                try:
                    await t
                except (asyncio.CancelledError, Exception):
                    pass
        self._balancer = self._ticker = None
        if self._metrics_server is not None:
            server, self._metrics_server = self._metrics_server, None
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: (server.shutdown(), server.server_close()))
        await self._stop_nodes()

    async def crash_for_testing(self) -> None:
        """Test hook (the simulator's kill -9 of the process): every group crashes
        (Node.crash_for_testing), the timers and the shared transport stop."""
        for t in (self._balancer, self._ticker):
            if t is not None:
                t.cancel()
        self._balancer = self._ticker = None
        for node in self.nodes:
            await node.crash_for_testing()
        if self.groups > 1 and self.transport is not None:
            await self.transport.close()

    async def _tick_loop(self) -> None:
        """One timer ticks every group that is not quiesced (a task per group woke 100 times
        a second each), and every heartbeat interval runs a quiet round."""
        clock = self.clock
        interval = self.cfg.tick_ms
        iv = self.raft_cfg.heartbeat_interval_ms
        last = clock.now_ms()
        nap = interval
        while True:
            await clock.sleep_ms(nap)
            now = clock.now_ms()
            if now - last > _LOOP_STALL_MS:
                # the loop did not run for that long: heartbeats and quiet beats stopped too
                self.stats["loop_stalls"] += 1
                log.info("node %s: event loop stalled for %d ms", self.cfg.node_id, now - last)
            last = now
            # (raft/quiesce.py Q2; one comprehension: 64 idle groups are scanned 20 times a
            # second)
            ticked = [node for node in self.nodes if not node.core.quiesced]
            for node in ticked:
                node.tick(now)
            awake = bool(ticked)
            if now >= self._next_quiet_ms:
                # half an interval after the aligned heartbeats: their round has been
                # answered (an open round keeps a leader awake, raft/quiesce.py Q1)
                self._next_quiet_ms = (now // iv + 1) * iv + iv // 2
                awake = self._quiet_round(now) or awake
            # every group quiesced: nothing needs a tick before the next quiet round (a
            # group an input wakes is ticked within _IDLE_TICK_MS: its timeouts are longer)
            nap = interval if awake else max(interval, min(self._next_quiet_ms - now,
                                                           _IDLE_TICK_MS))

    async def _stop_nodes(self) -> None:
        for node in self.nodes:
            await node.stop()
        if self.groups > 1 and self.transport is not None:
            await self.transport.close()

    @property
    def peer_address(self):
        return self.transport.address if self.transport is not None else None

    # ---------------------------------------------------------------------------- routing
    def node(self, group: int) -> Node:
        """The Node of `group`; UnknownGroupError for a group this process does not host
        (out of 0..groups-1, or not opened)."""
        node = self._by_group.get(group) if type(group) is int else None
        if node is None:
            opened = "" if len(self.hosted) == self.groups else \
                f" and opened {list(self.hosted)} of them"
            raise UnknownGroupError(f"node {self.cfg.node_id} hosts groups 0..{self.groups - 1}"
                                    f"{opened}, not {group!r}")
        return node

    def group_of(self, topic: str, queue_id: int) -> int:
        return group_of(topic, queue_id, self.groups)

    def node_for(self, topic: str, queue_id: int) -> Node:
        """The Node of the group that holds (topic, queue_id) (node/groups.py's rule)."""
        if self.groups == 1:
            return self.nodes[0]
        g = group_of(topic, queue_id, self.groups)
        node = self._by_group.get(g)
        return node if node is not None else self.node(g)      # (raises: not opened)

    def opened(self, group: int):
        """The Node of `group` if this process opened it, else None."""
        return self._by_group.get(group)

    def pick_queue(self, topic: str, queues: int, k: int) -> int | None:
        """The k-th (round-robin) of the topic's first `queues` queues whose group this
        process leads; none led: of those whose group it opened (whose Node answers
        NotLeaderError naming the leader); none opened: None."""
        opened = [q for q in range(queues)
                  if group_of(topic, q, self.groups) in self._by_group]
        led = [q for q in opened
               if self._by_group[group_of(topic, q, self.groups)].core.role == Role.LEADER]
        pick = led or opened
        return pick[k % len(pick)] if pick else None

    # ---------------------------------------------------------------------------- heartbeats
    def queue_heartbeat(self, peer: str, group: int, msg) -> bool:
        """Queue one group's heartbeat (or answer) for `peer`: every one queued in this loop
        turn goes in one frame at its end (the host ticks every group in one turn, and the
        cores align their heartbeats to the same ticks: RaftConfig.align_heartbeats)."""
        key = (peer, _BATCHED[type(msg)])
        q = self._out.get(key)
        if q is None:
            if not self._out:
                asyncio.get_running_loop().call_soon(self._send_batches)
            q = self._out[key] = []
        if type(msg) is Heartbeat:
            q.append((group, msg.term, msg.commit_index, msg.seq, msg.boot, msg.boot_end))
        else:
            q.append((group, msg.term, msg.code, msg.seq, msg.boot, msg.floor))
        return True

    def _send_batches(self) -> None:
        out, self._out = self._out, {}
        t = self.transport
        if t is None or t.closed:
            return
        me = self.cfg.node_id
        for (peer, cls), entries in out.items():
            self.stats["batched_heartbeats"] += len(entries)
            for i in range(0, len(entries), MAX_BATCH_GROUPS):
                self.stats["heartbeat_batches"] += 1
                t.send(peer, cls(me, peer, entries[i:i + MAX_BATCH_GROUPS]))

    def _unbatch(self, peer: str, msg) -> None:
        me = self.cfg.node_id
        hb = type(msg) is HeartbeatBatch
        for group, term, x, seq, boot, y in msg.entries:
            # (boot, boot_end / floor: the recovery rules' R3b and the leader's view of a
            # recovering follower need them as much as a single group's heartbeats do)
            one = Heartbeat(term, peer, me, x, seq, boot, y) if hb else \
                HeartbeatResponse(term, peer, me, x, seq, boot, y)
            self._on_group_message(peer, group, one)

    def on_peer_lost(self, peer: str, refused: bool) -> None:
        for node in self.nodes:          # (every group hears of it: one process, one port)
            quiet = node.core is not None and node.core.quiesced
            node.on_peer_lost(peer, refused)
            if quiet and not node.core.quiesced:
                self.stats["woken"] += 1    # (its leader's process exited: on_peer_down)

    def _on_group_message(self, peer: str, group: int, msg) -> None:
        if type(msg) in _UNBATCH:
            self._unbatch(peer, msg)
            return
        if type(msg) is QuietBeat:
            self._on_quiet(peer, msg)
            return
        link = self._links.get(group)
        if link is not None:
            if link.on_message is not None:
                link.on_message(peer, msg)
                return
        elif group < self.groups:       # a group of the layout this process did not open
            self.stats["not_open"][peer] += 1
            return
        # a peer configured with more groups (or a broken peer): nothing of ours changes
        self.stats["unknown_group"][peer] += 1
        self._events.log(logging.WARNING, "unknown group",
                         "peer %r sent %s for group %d: %s", peer, type(msg).__name__, group,
                         UnknownGroupError(f"this process hosts groups 0..{self.groups - 1}"))

    # ---------------------------------------------------------------------------- quiescence
    def _quiet_round(self, now: int) -> bool:
        """Wake what depends on an unheard peer, quiesce the leader groups that may, and send
        each peer one QuietBeat (the module docstring). Returns whether a group is awake."""
        t = self.transport
        if t is None or t.closed:
            return True
        awake = False
        woke, self._woke = self._woke, False    # a group quiesced since the last round
        me = self.cfg.node_id
        oldest = now - _WAKE_UNHEARD_INTERVALS * self.raft_cfg.heartbeat_interval_ms
        heard = self._quiet_heard
        peers = [p for p in t.peers() if p != me]     # (members added later included)
        unheard = frozenset(p for p in peers if heard.get(p, -1) < oldest)
        led = []
        for g, node in zip(self.hosted, self.nodes):
            core = node.core
            if core.quiesced:
                if unheard and (core.leader_id in unheard or (
                        core.role == Role.LEADER and not unheard.isdisjoint(core.progress))):
                    self._wake(node, now)
                    awake = True
                    continue
            elif not (self.quiesce and node.quiescable() and core.quiesce()):
                awake = True
                continue
            else:
                self.stats["quiesced"] += 1
                woke = True
            if core.role == Role.LEADER:
                led.append((g, core.term, core.commit_index))
        if awake:
            self._quiet_since = None
        elif self._quiet_since is None or woke:
            # (a group that woke and quiesced again between two rounds -- an election or a
            # transfer can -- ends the stretch too: the next one is logged again)
            self._quiet_since = now
        elif self._quiet_since >= 0 and now - self._quiet_since >= _QUIET_LOGGED_AFTER_MS:
            self._quiet_since = -1      # (once per quiet stretch: an operator's sign that the
            self._events.log(           # idle process costs next to nothing)
                logging.INFO, "quiesced", "node %s: every group (%d) quiesced for %d ms",
                self.cfg.node_id, self.groups, _QUIET_LOGGED_AFTER_MS)
        seq = self._quiet_seq = self._quiet_seq + 1
        self._quiet_rounds[seq] = (now, frozenset(g for g, _, _ in led))
        self._quiet_rounds.pop(seq - _QUIET_ROUNDS_KEPT, None)
        for peer in peers:
            ack, acked = self._quiet_answers.pop(peer, (0, ()))
            self.stats["quiet_beats"] += 1
            t.send(peer, QuietBeat(me, peer, seq, led, ack, acked))
        return awake

    def _on_quiet(self, peer: str, msg) -> None:
        now = self.clock.now_ms()
        self._quiet_heard[peer] = now
        nodes = self._by_group
        listed = set()
        held = []
        for g, term, commit in msg.groups:          # quiet heartbeats from `peer`
            if g in nodes:
                listed.add(g)
                was = nodes[g].core.quiesced
                if nodes[g].quiet_heartbeat(peer, term, commit, now):
                    held.append(g)
                    self._woke |= not was
        # a group quiesced following `peer` was listed in its last beat (quiet_heartbeat is
        # the only way a follower quiesces, and each beat not listing it wakes it): those
        # not listed now wake -- O(listed), not a look at every group
        for g in self._quiet_listed.get(peer, ()):
            core = nodes[g].core
            if (g not in listed and core.quiesced and core.leader_id == peer
                    and core.role == Role.FOLLOWER):
                self._wake(nodes[g], now)           # its leader is awake (or gone)
        self._quiet_listed[peer] = listed
        self._quiet_answers[peer] = (msg.seq, held)
        sent = self._quiet_rounds.get(msg.ack)
        if sent is None:
            return
        sent_ms, groups = sent
        got = set(msg.acked)
        for g in groups:                            # the answers to my round msg.ack
            core = nodes[g].core
            if core.quiesced and core.role == Role.LEADER and peer in core.progress:
                if g in got:
                    core.quiet_ack(peer, sent_ms, now)
                else:
                    self._wake(nodes[g], now)       # `peer` does not hold it quiesced

    def _wake(self, node, now: int) -> None:
        node.core.wake(now)
        self.stats["woken"] += 1

    def quiesced(self) -> list:
        """The groups whose core is quiesced now."""
        return [g for g, n in zip(self.hosted, self.nodes) if n.core is not None
                and n.core.quiesced]

    # ---------------------------------------------------------------------------- balance
    async def _balance_loop(self) -> None:
        while True:
            await asyncio.sleep(_BALANCE_EVERY_MS / 1000)
            try:
                self.balance_once()
            except Exception:
                log.exception("node %s: leader balancing failed", self.cfg.node_id)

    def balance_once(self) -> int | None:
        """Give one group whose preferred leader is another, caught-up, connected member
        back to it (leadership transfer); at most one group per call, and none while a
        transfer asked by this host is still running. Returns the group or None."""
        now = self.clock.now_ms()       # (the host's clock: virtual in the simulator)
        me = self.cfg.node_id
        for g, node in zip(self.hosted, self.nodes):
            core = node.core
            if core is None or core.role != Role.LEADER or core.transferee is not None:
                continue
            if not node.ready_to_serve:
                continue
            if now - self._asked.get(g, -1e18) < _BALANCE_RETRY_MS:
                continue
            pref = preferred_leader(g, core.voters)
            if pref == me or pref not in core.progress or core.progress[pref].match == 0:
                continue        # (match 0: it never acknowledged this leader -- it may not
                                # host the group at all: a replica that opened some groups)
            if not self.transport.is_connected(pref):
                continue
            if core.log.last_index() - core.progress[pref].match > _BALANCE_MAX_LAG:
                continue
            self._asked[g] = now
            try:
                node.transfer_leadership(pref)
            except Exception as e:      # (lost leadership meanwhile, a transfer running)
                log.info("node %s: group %d: no transfer to %s: %s", me, g, pref, e)
                continue
            self.stats["transfers_asked"] += 1
            log.info("node %s: group %d: leadership back to its preferred leader %s", me, g,
                     pref)
            return g
        return None

    def add_listener(self, fn) -> None:
        """fn(group, event) on the loop for every core event of every group (RoleChanged,
        ReadyToServe, ...: the group says whose); call before start() to miss none."""
        self._listeners.append(fn)

    def _listen(self, node, group: int) -> None:
        node.add_listener(lambda ev: [fn(group, ev) for fn in self._listeners])

    # ---------------------------------------------------------------------------- status
    def leaders(self) -> list:
        """The leader id each group's core knows (None: none known)."""
        return [n.core.leader_id if n.core is not None else None for n in self.nodes]

    def status(self) -> dict:
        return {"node_id": self.cfg.node_id, "groups": self.groups,
                "open_groups": list(self.hosted),
                "unknown_group": dict(self.stats["unknown_group"]),
                "transfers_asked": self.stats["transfers_asked"],
                "quiesced": len(self.quiesced()),
                "group_status": [n.status() for n in self.nodes]}
