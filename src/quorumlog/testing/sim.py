"""Deterministic simulation of a RaftCore cluster: simulated time, network, disks, clocks, crashes.

Everything random comes from one random.Random(seed), so a run is a pure function of its seed
(and options): a failure names the seed and `pytest --sim-seed N` (or
`python -m quorumlog.testing.soak --seed N -v`) replays it exactly.

Two kinds of network. Datagram links drop, duplicate and delay (hence reorder) messages, with
rare long spikes. TCP-like links are FIFO per (src, dst) with a small delay and no loss, but a
message may stall its link for 200-800 ms (a retransmission timeout): every later message on
that link waits behind it (head-of-line blocking). Both kinds take partitions, including
one-way ones; a message in flight on a link that is cut is lost (the connection broke).

Flush modes, drawn per seed: "sync" -- a node acknowledges only flushed entries (the disk's
flush completes after a random delay), and a crash throws away the core and every log write
not flushed (MemLog.crash); "async" -- acknowledged at page-cache level (on_persisted at once),
the log flushed every flush_interval_ms, and a crash (kill -9) loses nothing. A power loss
loses every unflushed write in both modes; in async mode the restarted core is told so
(recovering=True: raft/recovery.py). Also drawn: the lagging power loss (a follower lags
behind a partition, the other crashes and the leader loses power together) and flush failures
(the node stops). `lying_flush` (off in the mix) makes a disk report more than it made
durable. The hard state survives every crash because the driver loop persists it before it
sends anything (the contract in core.py). A "disk" completes flushes after a random delay. A process pause stops a node for up
to a second: its ticks, deliveries and flushes wait (its clock keeps running). Each node's
clock runs at its own rate (clock_skew: within 1 +- skew of real time) from its own offset.

Invariants are checked after every event (InvariantViolation names the seed):
  * at most one leader per term
  * log matching: one (index, term) -> one entry, with one predecessor term, on every node
  * committed entries never change, and no node truncates below its commit index
  * a node's commit index never decreases (within one incarnation)
  * leader completeness: a new leader of term u holds every entry committed in terms < u
  * every proposal reported committed to a client is in the log of every leader of a later term
Liveness: after the fault phase the network heals and crashed nodes restart; a leader must be
elected and a new proposal committed within `liveness_ms` of simulated time -- unless no
election can succeed because too many voters are recovering after power losses (the
documented fail-stop; counted as `stopped_for_recovery`).
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from ..errors import DuplicateBatchError, IndexOutOfRangeError, ProducerSequenceError
from ..raft.core import (HardState, LogInstalled, RaftConfig, RaftCore, ReadAborted, ReadReady,
                         RoleChanged)
from ..node.producers import ProducerTable, table_for_term
from ..raft.errors import MembershipChangeError, RaftError, TransferError
from ..raft.log import EntryKind
from ..raft.memlog import MemLog, ProducerItems
from ..raft.messages import Role
from ..raft.ready import Duties, run_readies


class InvariantViolation(AssertionError):
    pass


@dataclass
class FaultProfile:
    drop: float = 0.0
    dup: float = 0.0
    min_delay_ms: int = 1
    max_delay_ms: int = 5
    spike: float = 0.0            # probability of a long delay (reordering far past others)
    spike_ms: int = 200
    crash_rate: float = 0.0       # crashes per simulated second
    partition_rate: float = 0.0   # partition changes per simulated second
    disk_max_ms: int = 2
    membership: bool = False      # add/remove members during the run
    transfers: bool = False       # leadership transfers during the run
    tcp: bool = False             # FIFO links (no drop/dup/reorder) with head-of-line stalls
    stall: float = 0.0            # probability that a message stalls its link (tcp links)
    stall_min_ms: int = 200
    stall_max_ms: int = 800
    pause_rate: float = 0.0       # process pauses per simulated second (one random node each)
    pause_max_ms: int = 1000
    clock_skew: float = 0.0       # each node's clock rate is within 1 +- clock_skew
    lanes: int = 1                # tcp: 2 = control messages on a connection of their own
    retention_rate: float = 0.0   # head drops (committed entries) per simulated second
    # flush = "sync": a node acknowledges flushed entries only (on_persisted after the disk's
    # flush). "async": acknowledged at page-cache level (on_persisted at once); the disk gets
    # everything every flush_interval_ms. A crash (kill -9) then loses nothing.
    flush: str = "sync"
    flush_interval_ms: int = 200
    power_rate: float = 0.0       # power losses per simulated second: unflushed writes lost
    # the lagging power loss (docs/reliability.md findings 2 and 4), per simulated second: a
    # follower lags behind a
    # partition for 0.5-1.5 s, then the other follower crashes and the leader loses its power
    # at the same moment; the network heals, the leader restarts at once, the follower later
    lagging_power_loss_rate: float = 0.0
    flush_fail: float = 0.0       # a disk flush fails (EIO): the driver stops (fail-stop)
    # NOT a fault a correct system survives (finding 4's class, docs/reliability.md): a flush
    # reports success but leaves the last 1-3 entries it covered undurable, as a disk that
    # acknowledges a cache flush it did not do, a flushed page dirtied again and lost, or a
    # driver that reports more than its msync covered. Off in the standard mix.
    lying_flush: float = 0.0

    @classmethod
    def random(cls, rng: random.Random, power_rng: random.Random | None = None) -> "FaultProfile":
        """The standard mix. power_rng draws the flush mode and the power, lagging-power-loss
        and flush faults (None: sync, none of them -- the mix before they existed, so the
        regression seeds of that time replay exactly)."""
        f = cls(
            drop=rng.choice((0.0, 0.0, 0.02, 0.1, 0.3)),
            dup=rng.choice((0.0, 0.02, 0.1)),
            min_delay_ms=rng.choice((0, 1, 2)),
            max_delay_ms=rng.choice((3, 10, 40)),
            spike=rng.choice((0.0, 0.01, 0.05)),
            spike_ms=rng.choice((100, 400)),
            crash_rate=rng.choice((0.0, 0.5, 1.0, 2.0)),
            partition_rate=rng.choice((0.0, 0.5, 1.0, 3.0)),
            disk_max_ms=rng.choice((0, 2, 10)),
            membership=rng.random() < 0.3,
            transfers=rng.random() < 0.3,
        )
        if rng.random() < 0.5:  # TCP-like links instead of datagrams
            f.tcp, f.drop, f.dup, f.spike = True, 0.0, 0.0, 0.0
            f.min_delay_ms, f.max_delay_ms = 0, rng.choice((2, 10))
            f.stall = rng.choice((0.0, 0.01, 0.05))
        f.pause_rate = rng.choice((0.0, 0.0, 0.3, 1.0))
        f.clock_skew = rng.choice((0.0, 0.01, 0.05))
        f.retention_rate = rng.choice((0.0, 0.0, 2.0, 10.0))
        if power_rng is not None:
            f.flush = power_rng.choice(("sync", "async"))
            f.power_rate = power_rng.choice((0.0, 0.0, 0.3, 1.0))
            f.lagging_power_loss_rate = power_rng.choice((0.0, 0.0, 0.3))
            f.flush_fail = power_rng.choice((0.0, 0.0, 0.01))
        return f


@dataclass
class SimResult:
    seed: int
    ok: bool
    violation: str = ""
    events: int = 0
    sim_ms: int = 0
    elections: int = 0
    committed: int = 0
    acked: int = 0
    liveness_ms: int = -1
    stats: dict = field(default_factory=dict)
    trace: list = field(default_factory=list)
    ack_times: list = field(default_factory=list)   # real ms of every acknowledged proposal
    leader_times: list = field(default_factory=list)  # (real ms, term, node) of each election
    failover_ms: int = -1   # with crash_leader_at_ms: crash -> first commit by a new leader
    mix: dict = field(default_factory=dict)  # what this seed exercised, summed by the soak


class _Node:
    __slots__ = ("id", "core", "log", "hard", "alive", "incarnation", "flush_pending",
                 "commit_seen", "tick_phase", "rate", "clock0", "paused_until", "lost_power",
                 "next_sync_ms")

    def __init__(self, nid):
        self.id = nid
        self.core = None
        self.log = MemLog()
        self.hard = HardState()
        self.alive = False
        self.incarnation = 0
        self.flush_pending = False
        self.commit_seen = 0
        self.tick_phase = 0
        self.rate = 1.0       # clock rate relative to real (simulated) time
        self.clock0 = 0       # clock offset
        self.paused_until = 0
        self.lost_power = False   # down after a power loss (its page cache is gone)
        self.next_sync_ms = 0     # async: the next background flush

    def clock(self, t: int) -> int:
        """This node's monotonic clock at real time t."""
        return self.clock0 + int(t * self.rate)


TICK, DELIVER, FLUSH, FAULT, PROPOSE, RESTART, ADMIN = range(7)


class Simulator:
    def __init__(self, seed: int, n_nodes: int = 3, *, faults: FaultProfile | None = None,
                 config: RaftConfig | None = None, fault_ms: int = 3000, liveness_ms: int = 6000,
                 tick_ms: int = 10, propose_every_ms: int = 15, spare_nodes: int = 0,
                 trace: bool = False, crash_leader_at_ms: int | None = None,
                 recovery: bool = True, power_faults: bool = True):
        self.seed = seed
        # recovery=False: the driver does not tell a core that a power loss may have taken
        # entries it acknowledged (as before raft/recovery.py; the checker catches the loss)
        self.recovery = recovery
        self.rng = random.Random(seed)
        rng = self.rng
        # (power_faults=False: the mix before flush modes and power losses, for old seeds)
        self.faults = faults if faults is not None else FaultProfile.random(
            rng, random.Random(seed ^ 0x90E7_5EED) if power_faults else None)
        if config is None:
            # small limits on purpose (many batch boundaries, full windows, back-pressure),
            # but never the slowest of everything at once
            inflight = rng.choice((1, 3, 16))
            config = RaftConfig(max_batch_entries=rng.choice((2, 16, 256) if inflight > 1 else (16, 256)),
                                max_inflight_batches=inflight,
                                max_batch_bytes=rng.choice((300, 2000, 1 << 20) if inflight > 1
                                                           else (2000, 1 << 20)),
                                max_uncommitted_entries=rng.choice((40, 200)))
        self.cfg = config
        self.fault_ms = fault_ms
        self.liveness_ms = liveness_ms
        self.tick_ms = tick_ms
        self.propose_every_ms = propose_every_ms
        self.ids = [f"n{i + 1}" for i in range(n_nodes + spare_nodes)]
        self.initial_voters = tuple(self.ids[:n_nodes])
        self.nodes = {nid: _Node(nid) for nid in self.ids}
        self.now = 0
        self._q: list = []
        self._seq = 0
        self.blocked: set = set()   # (src, dst) pairs that cannot talk
        self.healed = False
        self.tracing = trace
        self.trace: list = []
        # invariant state
        self.leader_of_term: dict[int, str] = {}
        self.entries: dict[tuple[int, int], tuple] = {}   # (index, term) -> (kind, data, prev term)
        self.committed: dict[int, tuple] = {}             # index -> (term, kind, data)
        self.max_committed = 0
        self.committed_in_term: dict[int, int] = {}       # term -> highest index known committed in it
        self.acked: dict[int, tuple] = {}                 # proposal id -> (index, term, commit term)
        self.pending: dict[int, tuple] = {}               # proposal id -> (node, index, term)
        self.next_pid = 1
        self.client_seq = {cid: 0 for cid in range(1, 5)}
        self.retry_pool: list = []                        # ((pid, seq), count) to retry
        self.batch_of: dict[int, tuple] = {}              # last proposal id -> ((pid, seq), count)
        self.committed_batches: dict[tuple, tuple] = {}   # (pid, seq) -> (first, last)
        self.producer_tables: dict[str, ProducerTable] = {}  # leader id -> its term's table
        self.max_acked_index = 0                          # highest index acknowledged to a client
        self.reads: dict[int, int] = {}                   # read id -> max_acked_index at issue
        self.next_read = 1
        self.elections = 0
        self.events = 0
        self.stats: dict[str, int] = {}
        self.liveness_probes: set = set()
        self.liveness_done_ms = -1
        self.link_free: dict[tuple, int] = {}   # tcp links: when the link's last message lands
        self.ack_times: list[int] = []
        self.leader_times: list[tuple] = []
        self.crash_leader_at_ms = crash_leader_at_ms
        self.crashed_leader: tuple | None = None  # (node id, real ms) of crash_leader_at_ms
        self.failover_ms = -1
        skew = self.faults.clock_skew
        for nid in self.ids:
            n = self.nodes[nid]
            # half the nodes forget the term before a dropped head, as the native log does
            n.log.keep_head_term = rng.random() < 0.5
            n.log.meta = f"store state of {nid}".encode()
            n.log.observer = self._make_observer(n)
            n.tick_phase = rng.randrange(tick_ms)
            if skew:
                n.rate = 1.0 + rng.uniform(-skew, skew)
                n.clock0 = rng.randrange(1 << 20)
            self._start(n)

    # -- plumbing ----------------------------------------------------------------------
    def _push(self, t, kind, a=None, b=None):
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, kind, a, b))

    def _t(self, text):
        if self.tracing:
            self.trace.append(f"{self.now:6d} {text}")

    def _fail(self, text):
        raise InvariantViolation(f"seed {self.seed} t={self.now}ms: {text}")

    def _start(self, n: _Node):
        n.incarnation += 1
        n.alive = True
        n.flush_pending = False
        n.commit_seen = 0
        history = n.log.config_history(self.initial_voters)
        n.paused_until = 0
        recovering = self.recovery and n.lost_power and self.faults.flush == "async"
        n.lost_power = False
        n.next_sync_ms = self.now + self.faults.flush_interval_ms
        n.core = RaftCore(n.id, n.log, random.Random(self.rng.getrandbits(64)), self.cfg,
                          hard_state=n.hard, config_history=history, peers=self.ids,
                          now_ms=n.clock(self.now), restarted=n.incarnation > 1,
                          recovering=recovering)
        n.hard = n.core.hard_state  # R1: the floor is durable at open, as node/driver.py does
        self._push(self.now + n.tick_phase, TICK, n.id, n.incarnation)
        self._t(f"start {n.id} inc={n.incarnation} {n.core.status()}")

    def _crash(self, n: _Node, power: bool = False):
        """A process crash, or (power) a power loss: the page cache goes too. In async mode a
        process crash loses nothing (the page cache survives the process); in sync mode every
        crash loses what was not flushed (no stronger than a power loss, and it was always so
        here)."""
        self._t(f"{'power loss' if power else 'crash'} {n.id}")
        n.alive = False
        n.core = None
        if power or self.faults.flush == "sync":
            n.log.crash()
        if power:
            n.lost_power = True
            self.stats["power_losses"] = self.stats.get("power_losses", 0) + 1

    def _make_observer(self, n: _Node):
        entries = self.entries

        def check(lg, lo, hi):
            for i in range(lo, hi + 1):
                term, kind, data = lg.entry(i)
                try:
                    prev = lg.term_at(i - 1)
                except IndexOutOfRangeError:
                    prev = None  # (a dropped head's term, not kept: as the native log)
                key = (i, term)
                got = entries.get(key)
                val = (int(kind), data, prev)
                if got is None or (got[2] is None and prev is not None):
                    entries[key] = val
                elif got[:2] != val[:2] or (prev is not None and got[2] != prev):
                    self._fail(f"log matching: {n.id} has {val} at {key}, another node {got}")

        def observer(event, lg, a, b):
            if event == "append":
                check(lg, a, b)
            elif event == "install":  # the whole log was replaced (a had b... now b entries)
                self.stats["installs"] = self.stats.get("installs", 0) + 1
                core = n.core
                if core is not None and core.commit_index > lg.last_index():
                    self._fail(f"{n.id} installed a log ending at {lg.last_index()} below its "
                               f"commit {core.commit_index}")
                check(lg, lg.first_index(), lg.last_index())
                # the image is its sender's log while it led in the follower's term u: it holds
                # every entry committed in a term <= u (leader completeness, and a leader never
                # drops its own); its uncommitted tail may conflict with entries a later term
                # committed, exactly as the same leader's late APPEND may (seed 67245)
                u = core.term if core is not None else max(self.committed_in_term, default=0)
                m = max((c for t, c in self.committed_in_term.items() if t <= u), default=0)
                for i in range(lg.first_index(), min(lg.last_index(), m) + 1):
                    if lg.entry(i) != self.committed[i]:
                        self._fail(f"{n.id} installed {lg.entry(i)} at index {i}, committed in a "
                                   f"term <= {u} as {self.committed[i]}")
            else:  # truncate after a (log had b entries)
                self.stats["truncations"] = self.stats.get("truncations", 0) + 1
                # (a node may drop a copy of a globally committed entry it never counted as
                # committed itself: a stale conflicting tail cannot be committed, and that the
                # committed entries stay on a quorum is what leader completeness checks)
                core = n.core
                if core is not None and a < core.commit_index:
                    self._fail(f"{n.id} truncates after {a} below its commit {core.commit_index}")
        return observer

    # -- the driver loop (what a real driver does with Ready) ---------------------------
    def _drain(self, n: _Node):
        run_readies(n.core, self._duties(n))

    def _duties(self, n: _Node) -> Duties:
        """This simulator's side of the driver's duties for n (the loop: raft/ready.py)."""
        core = n.core

        def save_hard_state(hs):
            if n.hard.recovering_term and not hs.recovering_term:
                self.stats["recovered"] = self.stats.get("recovered", 0) + 1
                self._t(f"{n.id} recovered (floor t{n.hard.recovering_term})")
            n.hard = hs                         # 1. persist hard state before sending

        def flush(_flush_to, gen):              # 3. flush
            if self.faults.flush == "async":
                core.on_persisted(n.log.last_index(), gen)  # page cache: at once
            elif not n.flush_pending:           # group commit
                n.flush_pending = True
                self._push(self.now + self.rng.randint(0, self.faults.disk_max_ms), FLUSH,
                           n.id, n.incarnation)

        def apply(commit_index):                # 4. apply/dispatch
            self._on_commit(n, commit_index)
            core.on_dispatched(commit_index)

        def events(evs):                        # 5. events
            for ev in evs:
                self._on_event(n, ev)
        return Duties(save_hard_state, self._send, flush, apply, events)

    def _send(self, m):
        f = self.faults
        rng = self.rng
        if (m.src, m.dst) in self.blocked:
            return
        if f.tcp:
            link = (m.src, m.dst, m.lane if f.lanes > 1 else 0)
            # FIFO per link; a stalled message holds back everything sent after it
            t = self.now + rng.randint(f.min_delay_ms, f.max_delay_ms)
            if not self.healed and f.stall and rng.random() < f.stall:
                t += rng.randint(f.stall_min_ms, f.stall_max_ms)
            free = self.link_free.get(link, 0)
            if t < free:
                t = free
            self.link_free[link] = t
            self._push(t, DELIVER, m)
            return
        if not self.healed and f.drop and rng.random() < f.drop:
            return
        copies = 2 if (not self.healed and f.dup and rng.random() < f.dup) else 1
        for _ in range(copies):
            d = rng.randint(f.min_delay_ms, f.max_delay_ms)
            if not self.healed and f.spike and rng.random() < f.spike:
                d += rng.randint(1, f.spike_ms)
            self._push(self.now + d, DELIVER, m)

    def _on_event(self, n: _Node, ev):
        self._t(f"{n.id} event {ev}")
        name = type(ev).__name__
        self.stats[name] = self.stats.get(name, 0) + 1
        if isinstance(ev, RoleChanged) and ev.role == Role.LEADER:
            self.elections += 1
            self.leader_times.append((self.now, ev.term, n.id))
            other = self.leader_of_term.get(ev.term)
            if other is not None and other != n.id:
                self._fail(f"two leaders in term {ev.term}: {other} and {n.id}")
            self.leader_of_term[ev.term] = n.id
            self._check_leader_completeness(n)
            self._check_no_other_leader_serves(n)
        elif isinstance(ev, ReadReady):
            self._check_read(n, ev.index, self.reads.pop(ev.ctx), "read_index")
        elif isinstance(ev, ReadAborted):
            self.reads.pop(ev.ctx, None)

    def _check_no_other_leader_serves(self, n: _Node):
        """The lease: when n becomes leader, no older leader may still be ready to serve or
        hold a valid lease (judged by its own clock now)."""
        for m in self.nodes.values():
            if m is n or not m.alive or m.core.role != Role.LEADER or m.core.term >= n.core.term:
                continue  # (a leader of an older term elected late is harmless: it can commit
                # nothing, and the newer one's lease is not in question)
            if m.core.lease_valid(m.clock(self.now)):
                self._fail(f"lease: {m.id} (term {m.core.term}) still holds its lease when {n.id} "
                           f"becomes leader of term {n.core.term}")
            if m.core.is_ready_to_serve and m.paused_until <= self.now:
                self._fail(f"lease: {m.id} (term {m.core.term}) still ready to serve when {n.id} "
                           f"becomes leader of term {n.core.term}")

    def _check_read(self, n: _Node, index: int, acked_before: int, how: str):
        """Linearizable reads: a read served at `index` (dispatch >= index) sees every write
        acknowledged to a client before the read began."""
        self.stats["reads"] = self.stats.get("reads", 0) + 1
        if index < acked_before:
            self._fail(f"stale {how} on {n.id} (term {n.core.term}): index {index} < {acked_before} "
                       "acknowledged before the read")

    def _check_exactly_once(self, n: _Node, c: int):
        """A (producer id, sequence) is committed at one place only, however often it was
        retried."""
        lo = max(n.commit_seen + 1, n.log.first_index())
        if c < lo:
            return
        seen = self.committed_batches
        for first, last, pid, seq in n.log.producers(lo, c):
            got = seen.get((pid, seq))
            if got is None:
                seen[(pid, seq)] = (first, last)
            elif got != (first, last):
                self._fail(f"exactly-once: producer {pid} seq {seq} committed at {got} and at "
                           f"{(first, last)} (on {n.id})")

    def _check_leader_completeness(self, n: _Node):
        """Raft's Leader Completeness: an entry committed in term t is in the log of every
        leader of a term > t. (A leader of an older term may still be elected late -- a slow
        vote -- and hold less; it can commit nothing, which the other checks cover.)"""
        lg = n.log
        u = n.core.term
        m = max((c for t, c in self.committed_in_term.items() if t < u), default=0)
        if m >= lg.first_index():  # (below it: dropped by retention, committed by definition)
            if lg.last_index() < m:
                self._fail(f"leader completeness: new leader {n.id} ends at {lg.last_index()}, "
                           f"committed {m}")
            if lg.entry(m) != self.committed[m]:
                self._fail(f"leader completeness: {n.id} entry {m} {lg.entry(m)} != committed "
                           f"{self.committed[m]}")
        # (by the term it was committed in, not its own: an entry of term t that only its old
        # leader held, committed when that node leads again in term v > t, need not be on a
        # leader of a term in between -- seed 67230)
        for pid, (idx, term, cterm) in self.acked.items():
            if cterm < u and idx >= lg.first_index() and (idx > lg.last_index()
                                                          or lg.entry(idx)[2] != pid):
                self._fail(f"acked proposal {pid} at {idx}/t{term} (committed in term {cterm}) "
                           f"missing from new leader {n.id}")

    def _check_durable_commit(self, n: _Node, c: int):
        """Sync mode (docs/raft.md deviation 19): a leader's commit index counts durable
        copies only -- entry c (of the leader's term there) is flushed on a quorum of its
        voters, itself counted only if flushed; a follower's never runs ahead of its own
        flushed log."""
        lg = n.log
        if n.core.role != Role.LEADER:
            if c > lg.flushed_index():
                self._fail(f"{n.id} commit {c} beyond its flushed log {lg.flushed_index()}")
            return
        t = lg.term_at(c)
        voters = n.core.voters
        holders = [v for v in voters if self._holds_durably(self.nodes[v].log, c, t)]
        if len(holders) * 2 <= len(voters):
            self._fail(f"leader {n.id} commit {c} (t{t}) flushed on {holders} only of "
                       f"{sorted(voters)}")

    @staticmethod
    def _holds_durably(lg: MemLog, index: int, term: int) -> bool:
        if index < lg.first_index():
            return True        # (dropped by retention: flushed and committed long since)
        return index <= lg.flushed_index() and lg.term_at(index) == term

    def _on_commit(self, n: _Node, c: int):
        if c < n.commit_seen:
            self._fail(f"{n.id} commit index decreased {n.commit_seen} -> {c}")
        lg = n.log
        if c > lg.last_index():
            self._fail(f"{n.id} commit {c} beyond its log end {lg.last_index()}")
        if self.faults.flush == "sync" and not self.faults.lying_flush:
            # (a lying disk is invisible to the driver: what it costs shows in the checks below)
            self._check_durable_commit(n, c)
        committed = self.committed
        for i in range(max(n.commit_seen + 1, lg.first_index()), c + 1):
            e = lg.entry(i)
            got = committed.get(i)
            if got is None:
                committed[i] = e
            elif got != e:
                self._fail(f"committed entry {i} changed: {got} then {e} on {n.id}")
        self._check_exactly_once(n, c)
        if c > self.max_committed:
            # committed indexes form a prefix: every node commits a prefix of the same log
            for i in range(self.max_committed + 1, c + 1):
                if i not in committed:
                    self._fail(f"hole in committed log at {i}")
            self.max_committed = c
        n.commit_seen = c
        t = n.core.term
        if c > self.committed_in_term.get(t, 0):
            self.committed_in_term[t] = c
        if n.core.role == Role.LEADER:
            done = []
            term = n.core.term
            for pid, (node, idx, t) in self.pending.items():
                if node == n.id and idx <= c and idx < lg.first_index():
                    done.append(pid)  # (an install replaced the log: no answer, a retry)
                elif node == n.id and idx <= c:
                    done.append(pid)
                    # reported committed to the client: the entry is still ours at commit time
                    if lg.term_at(idx) == t and lg.entry(idx)[2] == pid:
                        self.acked[pid] = (idx, t, term)
                        self.ack_times.append(self.now)
                        if idx > self.max_acked_index:
                            self.max_acked_index = idx
                        if pid in self.liveness_probes and self.liveness_done_ms < 0:
                            self.liveness_done_ms = self.now
                        cl = self.crashed_leader
                        if cl is not None and self.failover_ms < 0 and n.id != cl[0]:
                            self.failover_ms = self.now - cl[1]
                elif t < term:
                    done.append(pid)  # an old leader's proposal: the client would time out
            for pid in done:
                del self.pending[pid]
                b = self.batch_of.pop(pid, None)
                if b is not None and pid not in self.acked:
                    self.retry_pool.append(b)  # no answer: the client retries

    # -- faults and workload -------------------------------------------------------------
    def _schedule_workload(self):
        rng = self.rng
        f = self.faults
        t = 0
        while t < self.fault_ms:
            t += self.propose_every_ms
            self._push(t, PROPOSE)
        for rate, kind in ((f.crash_rate, "crash"), (f.power_rate, "power"),
                           (f.lagging_power_loss_rate, "lagging_power_loss"),
                           (f.partition_rate, "partition"),
                           (f.pause_rate, "pause"), (f.retention_rate, "retention")):
            if rate <= 0:
                continue
            t = 0.0
            while True:
                t += rng.expovariate(rate) * 1000.0
                if t >= self.fault_ms:
                    break
                self._push(int(t), FAULT, kind)
        if f.membership:
            for _ in range(20):
                self._push(rng.randrange(200, self.fault_ms), ADMIN, "member")
        if f.transfers:
            for _ in range(3):
                self._push(rng.randrange(200, self.fault_ms), ADMIN, "transfer")
        if self.crash_leader_at_ms is not None:
            self._push(self.crash_leader_at_ms, FAULT, "crash_leader")
        self._push(self.fault_ms, FAULT, "heal")

    def _leaders(self):
        return [n for n in self.nodes.values() if n.alive and n.core.role == Role.LEADER]

    def _running_leaders(self):
        """Leaders that can take a client request now (not paused)."""
        return [n for n in self._leaders() if n.paused_until <= self.now]

    def _propose(self, probe=False):
        leaders = self._running_leaders()
        if not leaders:
            return None
        rng = self.rng
        n = rng.choice(leaders)
        count = 1 if probe else rng.randint(1, 4)
        producer = None
        if not probe:
            # four clients with producer ids; now and then one retries a batch it got no
            # answer for (its leader changed): the same (pid, seq), new payload objects
            if self.retry_pool and rng.random() < 0.3:
                producer, count = self.retry_pool.pop(rng.randrange(len(self.retry_pool)))
            else:
                cid = rng.randint(1, 4)
                self.client_seq[cid] += 1
                producer = (cid, self.client_seq[cid])
        pids = list(range(self.next_pid, self.next_pid + count))
        try:
            first, last = self._propose_on(n, pids, producer)
        except DuplicateBatchError:
            self.stats["duplicates_answered"] = self.stats.get("duplicates_answered", 0) + 1
            return None
        except ProducerSequenceError:
            self.stats["retries_refused"] = self.stats.get("retries_refused", 0) + 1
            return None
        except RaftError:
            if producer is not None and producer[1] <= self.client_seq[producer[0]]:
                self.retry_pool.append((producer, count))  # try again later
            return None
        self.next_pid += count
        for i, pid in enumerate(pids):
            self.pending[pid] = (n.id, first + i, n.core.term)
        if producer is not None:
            self.batch_of[pids[-1]] = (producer, count)
        if probe:
            # (before the drain: in async mode a one-voter group commits inside it)
            self.liveness_probes.add(pids[-1])
        self._drain(n)
        return pids[-1]

    def _propose_on(self, n: _Node, pids: list, producer) -> tuple[int, int]:
        """What the node's put path does (node/producers.py): check the batch against the
        leader's table of this term, propose it tagged with its producer, record it."""
        if producer is None or n.core.role != Role.LEADER:   # (the latter: NotLeaderError)
            return n.core.propose(pids, len(pids), len(pids) * 8)
        t = self.producer_tables[n.id] = table_for_term(self.producer_tables.get(n.id), n.log,
                                                        n.core.term)
        t.check(*producer)
        first, last = n.core.propose(ProducerItems(pids, *producer), len(pids), len(pids) * 8)
        t.record(*producer, first, last, n.core.term)
        return first, last

    def _retention(self, n: _Node):
        """Drop the head of n's log below (about) its commit index, as deleting old segment
        files does: a follower that needs those entries must be installed from a retained
        log (a new, empty member joining later too)."""
        lg = n.log
        # (async: committed is not flushed yet; old segment files are, long since, and the
        # newest flushed entry always stays, as the segment being written does)
        k = min(n.core.commit_index, lg.flushed_index()) - self.rng.randint(0, 10)
        if k - lg.first_index() < 5 or k > lg.last_index():
            return
        voters, learners = n.core.voters, ()
        for idx, vs, ls in n.core.configs:
            if idx <= k - 1:
                voters, learners = vs, ls
        dropped = lg.drop_before(k, (voters, learners))
        self.stats["retention_drops"] = self.stats.get("retention_drops", 0) + 1
        self._t(f"retention: {n.id} dropped {dropped} entries, head now {lg.first_index()}")

    def _read(self):
        """A client read on a random running leader: a lease read (checked at once) or a
        read_index (checked when ReadReady comes)."""
        leaders = self._running_leaders()
        if not leaders:
            return
        n = self.rng.choice(leaders)
        if self.rng.random() < 0.5:
            idx = n.core.lease_read_index(n.clock(self.now))
            if idx is not None:
                self._check_read(n, idx, self.max_acked_index, "lease read")
            return
        rid = self.next_read
        self.next_read += 1
        try:
            n.core.read_index(rid)
        except RaftError:
            return
        self.reads[rid] = self.max_acked_index
        self._drain(n)

    def _lagging_power_loss(self):
        """docs/reliability.md findings 2 and 4: isolate one follower (it lags),
        then (later) crash the other follower and cut the leader's power together."""
        leaders = self._running_leaders()
        if not leaders or len(leaders[0].core.voters) < 3:
            return
        ld = leaders[0]
        fs = [v for v in ld.core.voters if v != ld.id and self.nodes[v].alive]
        if len(fs) < 2:
            return
        lag, other = self.rng.sample(fs, 2)
        ids = self.ids
        self.blocked = {(a, b) for a in ids for b in ids if a != b and (a == lag) != (b == lag)}
        self._t(f"lagging power loss: {lag} lags; next {other} crashes and {ld.id} loses power")
        self._push(self.now + self.rng.randint(500, 1500), FAULT, "lagging_power_loss_cut",
                   (ld.id, other, ld.incarnation, self.nodes[other].incarnation))

    def _lagging_power_loss_cut(self, lid, other, linc, oinc):
        ld, o = self.nodes[lid], self.nodes[other]
        if self.healed or not (ld.alive and o.alive and ld.incarnation == linc and o.incarnation == oinc):
            return
        self.stats["lagging_power_losses"] = self.stats.get("lagging_power_losses", 0) + 1
        self._crash(o)
        self._crash(ld, power=True)
        self.blocked = set()
        self._push(self.now + self.rng.randint(10, 100), RESTART, lid)
        self._push(self.now + self.rng.randint(500, 2500), RESTART, other)

    def _fault(self, kind, arg=None):
        rng = self.rng
        alive = [n for n in self.nodes.values() if n.alive]
        if kind in ("crash", "power"):
            if alive:
                n = rng.choice(alive)
                self._crash(n, power=kind == "power")
                self._push(self.now + rng.randint(50, 800), RESTART, n.id)
        elif kind == "pause":
            if alive:
                n = rng.choice(alive)
                n.paused_until = max(n.paused_until, self.now + rng.randint(20, self.faults.pause_max_ms))
                self._t(f"pause {n.id} until {n.paused_until}")
        elif kind == "retention":
            if alive:
                self._retention(rng.choice(alive))
        elif kind == "lagging_power_loss":
            self._lagging_power_loss()
        elif kind == "lagging_power_loss_cut":
            self._lagging_power_loss_cut(*arg)
        elif kind == "crash_leader":
            leaders = self._leaders()
            if leaders:
                n = leaders[0]
                self._crash(n)
                self.crashed_leader = (n.id, self.now)
        elif kind == "partition":
            ids = self.ids
            self.blocked = set()
            r = rng.random()
            if r < 0.2:
                self._t("partition: heal")
            elif r < 0.5:
                side = set(rng.sample(ids, rng.randint(1, len(ids) // 2)))
                self.blocked = {(a, b) for a in ids for b in ids
                                if a != b and ((a in side) != (b in side))}
                self._t(f"partition: {sorted(side)} | rest")
            elif r < 0.75:
                # asymmetric: some links one-way only
                for a in ids:
                    for b in ids:
                        if a != b and rng.random() < 0.3:
                            self.blocked.add((a, b))
                self._t(f"partition: one-way {sorted(self.blocked)}")
            else:
                leaders = self._leaders()
                if leaders:
                    ld = leaders[0].id
                    if rng.random() < 0.5:  # leader cannot hear anyone
                        self.blocked = {(b, ld) for b in ids if b != ld}
                    else:                   # nobody hears the leader
                        self.blocked = {(ld, b) for b in ids if b != ld}
                    self._t(f"partition: leader {ld} one-way {sorted(self.blocked)}")
        elif kind == "heal":
            self.healed = True
            self.blocked = set()
            self._t("heal: network healed, restarting crashed nodes")
            for n in self.nodes.values():
                if not n.alive and (self.crashed_leader is None or n.id != self.crashed_leader[0]):
                    self._start(n)

    def _admin(self, kind):
        rng = self.rng
        leaders = self._running_leaders()
        if not leaders:
            return
        # any node that believes it leads (a stale, partitioned leader too): uncommitted
        # changes on both sides of a partition are what deadlocked elections once
        n = rng.choice(leaders)
        core = n.core
        try:
            if kind == "transfer":
                others = [v for v in core.voters if v != n.id]
                if others:
                    to = rng.choice(others)
                    self._t(f"admin: {n.id} transfer to {to}")
                    core.transfer_leadership(to)
            else:
                # groups shrink down to one voter and grow back (removals to 1-2 voters are
                # allowed; two uncommitted removals on the two sides of a partition once
                # deadlocked elections for good)
                non_voters = [i for i in self.ids if i not in core.voters]
                if non_voters and (len(core.voters) <= 1 or rng.random() < 0.5):
                    p = rng.choice(non_voters)
                    self._t(f"admin: {n.id} add {p}")
                    core.add_member(p)
                elif len(core.voters) > 1:
                    p = rng.choice([v for v in core.voters if v != n.id])
                    self._t(f"admin: {n.id} remove {p}")
                    core.remove_member(p)
        except (MembershipChangeError, TransferError, RaftError) as e:
            self._t(f"admin refused: {e}")
        self._drain(n)

    # -- run ----------------------------------------------------------------------------
    def run(self) -> SimResult:
        res = SimResult(self.seed, True)
        try:
            self._run()
        except InvariantViolation as e:
            res.ok = False
            res.violation = str(e)
        res.events = self.events
        res.sim_ms = self.now
        res.elections = self.elections
        res.committed = self.max_committed
        res.acked = len(self.acked)
        res.liveness_ms = self.liveness_done_ms - self.fault_ms if self.liveness_done_ms >= 0 else -1
        res.trace = self.trace
        res.stats = self.stats
        res.ack_times = self.ack_times
        res.leader_times = self.leader_times
        res.failover_ms = self.failover_ms
        f = self.faults
        power = self.stats.get("power_losses", 0)
        res.mix = {f"seeds_{f.flush}": 1, f"power_losses_{f.flush}": power,
                   f"seeds_with_power_loss_{f.flush}": int(power > 0),
                   "recoveries_ended": self.stats.get("recovered", 0),
                   "stopped_for_recovery": self.stats.get("stopped_for_recovery", 0)}
        return res

    def _run(self):
        self._schedule_workload()
        # a proposal must commit within liveness_ms of the heal; everything must converge (all
        # voters caught up, no learner left) within twice that (catch-up with 2-entry batches
        # over reordering links is slow, not stuck)
        end = self.fault_ms + 2 * self.liveness_ms
        nodes = self.nodes
        q = self._q
        tick_ms = self.tick_ms
        next_probe_ms = self.fault_ms
        f_fail, f_lie = self.faults.flush_fail, self.faults.lying_flush
        while q:
            t, _, kind, a, b = heapq.heappop(q)
            if t > end:
                break
            self.now = t
            self.events += 1
            if kind <= FLUSH:
                # a paused process does nothing until it resumes: its ticks, deliveries (in
                # their order) and flush completions wait
                n = nodes[a.dst if kind == DELIVER else a]
                if n.paused_until > t and n.alive:
                    self._push(n.paused_until, kind, a, b)
                    continue
            if kind == TICK:
                n = nodes[a]
                if not n.alive or n.incarnation != b:
                    continue
                if self.faults.flush == "async" and t >= n.next_sync_ms:
                    n.log.flush()   # the log's background flush (async mode)
                    n.next_sync_ms = t + self.faults.flush_interval_ms
                n.core.tick(n.clock(t))
                self._drain(n)
                self._push(t + tick_ms, TICK, a, b)
                if self.healed and t >= next_probe_ms and self.liveness_done_ms < 0:
                    next_probe_ms = t + 200
                    self._propose(probe=True)
                if self.liveness_done_ms >= 0 and self._converged():
                    break
            elif kind == DELIVER:
                m = a
                if (m.src, m.dst) in self.blocked:
                    continue
                n = nodes[m.dst]
                if not n.alive:
                    continue
                if self.tracing:
                    self._t(f"deliver {m.describe()}")
                n.core.step(m)
                self._drain(n)
            elif kind == FLUSH:
                n = nodes[a]
                if not n.alive or n.incarnation != b:
                    continue
                n.flush_pending = False
                if f_fail and self.rng.random() < f_fail:
                    # EIO: the driver's Flusher stops the node (never retried into success)
                    self.stats["flush_failures"] = self.stats.get("flush_failures", 0) + 1
                    self._crash(n)
                    self._push(self.now + self.rng.randint(50, 800), RESTART, n.id)
                    continue
                idx = n.log.flush()
                if f_lie and self.rng.random() < f_lie:
                    n.log.unflush_tail(self.rng.randint(1, 3))
                    self.stats["lying_flushes"] = self.stats.get("lying_flushes", 0) + 1
                n.core.on_persisted(idx)
                self._drain(n)
            elif kind == PROPOSE:
                self._propose()
                self._read()
            elif kind == FAULT:
                self._fault(a, b)
            elif kind == RESTART:
                n = nodes[a]
                if not n.alive:
                    self._start(n)
            elif kind == ADMIN:
                self._admin(a)
        if ((self.liveness_done_ms < 0 or self.liveness_done_ms > self.fault_ms + self.liveness_ms)
                and self._stopped_for_recovery()):
            # the documented fail-stop: no quorum of voters that lost nothing can form, so no
            # leader may be elected (raft/recovery.py); an operator would end_recovery
            self.stats["stopped_for_recovery"] = 1
            self._final_check()
            return
        if self.liveness_done_ms < 0 or self.liveness_done_ms > self.fault_ms + self.liveness_ms:
            self._fail(f"liveness: no proposal committed within {self.liveness_ms}ms after heal; "
                       + self._states())
        if self.crashed_leader is None and not self._converged():
            # every voter caught up and no membership change left half done (a learner a
            # former leader started adding is promoted by the current one)
            self._fail(f"liveness: not converged {2 * self.liveness_ms}ms after heal; "
                       + self._states())
        self._final_check()

    def _states(self) -> str:
        return "; ".join(f"{n.core.status()} voters={','.join(n.core.voters)} learner={n.core.learner}"
                         for n in self.nodes.values() if n.alive)

    def _stopped_for_recovery(self) -> bool:
        """No leader, and no node that may campaign and is not recovering could gather, in
        its own configuration, a quorum of votes from voters that are not recovering and whose
        logs are not newer than its own: no election can succeed (the documented fail-stop
        of raft/recovery.py, until an operator ends recovery)."""
        if self._leaders():
            return False
        able = {n.id: (n.log.last_term(), n.log.last_index()) for n in self.nodes.values()
                if n.alive and not n.core.recovering}
        for nid, end in able.items():
            core = self.nodes[nid].core
            if not core.may_campaign():
                continue
            voters = core.voters
            votes = sum(1 for v in voters if v in able and able[v] <= end)
            if votes >= len(voters) // 2 + 1:
                return False
        return any(n.alive and n.core.recovering for n in self.nodes.values())

    def _converged(self) -> bool:
        leaders = self._leaders()
        if len(leaders) != 1:
            return False
        ld = leaders[0].core
        if ld.learner is not None:
            return False
        voters = ld.voters
        end = ld.log.last_index()
        return all(self.nodes[v].alive and self.nodes[v].core.commit_index == end
                   and self.nodes[v].log.last_index() == end for v in voters)

    def _final_check(self):
        # every node's log agrees with the committed log up to its commit index
        for n in self.nodes.values():
            if not n.alive:
                continue
            for i in range(n.log.first_index(), n.core.commit_index + 1):
                if n.log.entry(i) != self.committed.get(i):
                    self._fail(f"final: {n.id} entry {i} {n.log.entry(i)} != committed {self.committed.get(i)}")


def sim_options(seed: int) -> dict:
    """The mix `make test` and the soak run: 3 or 5 voters (by parity), one spare node for
    membership changes with 3; every 10th seed uses DLedger's own timings (2 s heartbeats,
    leak 3) on a 15x longer simulated clock."""
    n = 3 if seed % 2 == 0 else 5
    kw = dict(n_nodes=n, spare_nodes=1 if n == 3 else 0)
    if seed % 10 == 9:
        r = random.Random(seed ^ 0x5EED)
        kw.update(config=RaftConfig.dledger_defaults(max_batch_entries=r.choice((4, 256)),
                                                     max_uncommitted_entries=200),
                  fault_ms=45000, liveness_ms=90000, tick_ms=100, propose_every_ms=150)
    return kw


def run_seed(seed: int, **overrides) -> SimResult:
    """One simulation of the standard mix (sim_options), with optional overrides."""
    kw = sim_options(seed)
    kw.update(overrides)
    n = kw.pop("n_nodes")
    return Simulator(seed, n, **kw).run()


def benign_faults(stall: float = 0.01) -> FaultProfile:
    """What a healthy LAN looks like to the core: TCP-like links, 0-2 ms, no loss; `stall` of
    the messages hit a 200-800 ms retransmission stall that holds up their link."""
    return FaultProfile(tcp=True, min_delay_ms=0, max_delay_ms=2, stall=stall, disk_max_ms=2)


def benign_run(seed: int, duration_ms: int = 60000, *, stall: float = 0.01, n_nodes: int = 3,
               config: RaftConfig | None = None) -> SimResult:
    """A long run without crashes, partitions or pauses (the core's defaults unless `config`);
    every election after the first is a spurious one."""
    return Simulator(seed, n_nodes, faults=benign_faults(stall), config=config or RaftConfig(),
                     fault_ms=duration_ms, liveness_ms=2000).run()


def failover_run(seed: int, *, stall: float = 0.0, n_nodes: int = 3,
                 config: RaftConfig | None = None) -> SimResult:
    """Crash the leader at a random moment 2-3 s into a benign run; SimResult.failover_ms is
    the time from the crash to the first proposal committed by a new leader."""
    at = 2000 + random.Random(seed ^ 0xFA11).randrange(1000)
    return Simulator(seed, n_nodes, faults=benign_faults(stall), config=config or RaftConfig(),
                     fault_ms=at + 3000, liveness_ms=2000, crash_leader_at_ms=at).run()


def silent_ms(ack_times, start_ms: int, end_ms: int, bucket_ms: int = 100) -> int:
    """Milliseconds of [start_ms, end_ms) in bucket_ms slices during which no proposal was
    acknowledged (proposals are offered every 15 ms, so a healthy slice always has some)."""
    full = set(t // bucket_ms for t in ack_times if start_ms <= t < end_ms)
    return sum(bucket_ms for b in range(start_ms // bucket_ms, end_ms // bucket_ms) if b not in full)


def lagging_power_loss_faults(flush: str, *, lying_flush: float = 0.0,
                              flush_fail: float = 0.0) -> FaultProfile:
    """docs/reliability.md findings 2 and 4 as a mix: TCP-like links, lagging power losses
    (about one per simulated second), ordinary power losses and crashes, in `flush` mode."""
    return FaultProfile(tcp=True, min_delay_ms=0, max_delay_ms=2, disk_max_ms=2, flush=flush,
                        lagging_power_loss_rate=1.0, power_rate=0.3, crash_rate=0.3,
                        lying_flush=lying_flush, flush_fail=flush_fail)


def lagging_power_loss_run(seed: int, flush: str, *, recovery: bool = True,
                           lying_flush: float = 0.0, flush_fail: float = 0.0) -> SimResult:
    """Three voters, 3 s of lagging power losses (lagging_power_loss_faults), then the heal."""
    return Simulator(seed, 3, faults=lagging_power_loss_faults(flush, lying_flush=lying_flush,
                                                             flush_fail=flush_fail),
                     recovery=recovery).run()
