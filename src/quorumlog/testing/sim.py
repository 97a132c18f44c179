"""Deterministic simulation of a RaftCore cluster: simulated time, network, disks and crashes.

Everything random comes from one random.Random(seed), so a run is a pure function of its seed
(and options): a failure names the seed and `pytest --sim-seed N` (or
`python -m quorumlog.testing.soak --seed N -v`) replays it exactly.

The network drops, duplicates, delays (hence reorders) messages and applies partitions,
including one-way (asymmetric) ones. A crash throws away the core and every log write not
flushed (MemLog.crash); the hard state survives because the driver loop persists it before it
sends anything (the contract in core.py). A "disk" completes flushes after a random delay.

Invariants are checked after every event (InvariantViolation names the seed):
  * at most one leader per term
  * log matching: one (index, term) -> one entry, with one predecessor term, on every node
  * committed entries never change, and no node truncates below its commit index
  * a node's commit index never decreases (within one incarnation)
  * leader completeness: a new leader of term u holds every entry committed in terms < u
  * every proposal reported committed to a client is in the log of every leader of a later term
Liveness: after the fault phase the network heals and crashed nodes restart; a leader must be
elected and a new proposal committed within `liveness_ms` of simulated time.
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from ..raft.core import (ConfigChanged, HardState, RaftConfig, RaftCore, ReadyToServe, RoleChanged)
from ..raft.errors import MembershipChangeError, RaftError, TransferError
from ..raft.log import EntryKind
from ..raft.memlog import MemLog
from ..raft.messages import Role


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

    @classmethod
    def random(cls, rng: random.Random) -> "FaultProfile":
        return cls(
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


class _Node:
    __slots__ = ("id", "core", "log", "hard", "alive", "incarnation", "flush_pending",
                 "commit_seen", "tick_phase")

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


TICK, DELIVER, FLUSH, FAULT, PROPOSE, RESTART, ADMIN = range(7)


class Simulator:
    def __init__(self, seed: int, n_nodes: int = 3, *, faults: FaultProfile | None = None,
                 config: RaftConfig | None = None, fault_ms: int = 3000, liveness_ms: int = 6000,
                 tick_ms: int = 10, propose_every_ms: int = 15, spare_nodes: int = 0,
                 trace: bool = False):
        self.seed = seed
        self.rng = random.Random(seed)
        rng = self.rng
        self.faults = faults if faults is not None else FaultProfile.random(rng)
        if config is None:
            # small limits on purpose (many batch boundaries, full windows, back-pressure),
            # but never the slowest of everything at once
            inflight = rng.choice((1, 3, 16))
            config = RaftConfig(max_batch_entries=rng.choice((2, 16, 256) if inflight > 1 else (16, 256)),
                                max_inflight_batches=inflight,
                                max_batch_bytes=rng.choice((200, 2000, 1 << 20) if inflight > 1
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
        self.acked: dict[int, tuple] = {}                 # proposal id -> (index, term)
        self.pending: dict[int, tuple] = {}               # proposal id -> (node, index, term)
        self.next_pid = 1
        self.elections = 0
        self.events = 0
        self.stats: dict[str, int] = {}
        self.liveness_probes: set = set()
        self.liveness_done_ms = -1
        for nid in self.ids:
            n = self.nodes[nid]
            n.log.observer = self._make_observer(n)
            n.tick_phase = rng.randrange(tick_ms)
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
        n.core = RaftCore(n.id, n.log, random.Random(self.rng.getrandbits(64)), self.cfg,
                          hard_state=n.hard, config_history=history, peers=self.ids, now_ms=self.now)
        self._push(self.now + n.tick_phase, TICK, n.id, n.incarnation)
        self._t(f"start {n.id} inc={n.incarnation} {n.core.status()}")

    def _crash(self, n: _Node):
        self._t(f"crash {n.id}")
        n.alive = False
        n.core = None
        n.log.crash()

    def _make_observer(self, n: _Node):
        entries = self.entries

        def observer(event, lg, a, b):
            if event == "append":
                for i in range(a, b + 1):
                    term, kind, data = lg.entry(i)
                    prev = lg.term_at(i - 1)
                    key = (i, term)
                    got = entries.get(key)
                    val = (int(kind), data, prev)
                    if got is None:
                        entries[key] = val
                    elif got != val:
                        self._fail(f"log matching: {n.id} has {val} at {key}, another node {got}")
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
        core = n.core
        while core.has_ready():
            r = core.ready()
            if r.hard_state is not None:
                n.hard = r.hard_state          # 1. persist hard state before sending
            for m in r.messages:               # 2. send
                self._send(m)
            if r.flush_to is not None and not n.flush_pending:   # 3. flush (group commit)
                n.flush_pending = True
                self._push(self.now + self.rng.randint(0, self.faults.disk_max_ms), FLUSH,
                           n.id, n.incarnation)
            if r.commit_index is not None:     # 4. apply/dispatch
                self._on_commit(n, r.commit_index)
                core.on_dispatched(r.commit_index)
            for ev in r.events:                # 5. events
                self._on_event(n, ev)

    def _send(self, m):
        f = self.faults
        rng = self.rng
        if (m.src, m.dst) in self.blocked:
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
            other = self.leader_of_term.get(ev.term)
            if other is not None and other != n.id:
                self._fail(f"two leaders in term {ev.term}: {other} and {n.id}")
            self.leader_of_term[ev.term] = n.id
            self._check_leader_completeness(n)

    def _check_leader_completeness(self, n: _Node):
        """Raft's Leader Completeness: an entry committed in term t is in the log of every
        leader of a term > t. (A leader of an older term may still be elected late -- a slow
        vote -- and hold less; it can commit nothing, which the other checks cover.)"""
        lg = n.log
        u = n.core.term
        m = max((c for t, c in self.committed_in_term.items() if t < u), default=0)
        if m:
            if lg.last_index() < m:
                self._fail(f"leader completeness: new leader {n.id} ends at {lg.last_index()}, "
                           f"committed {m}")
            if lg.entry(m) != self.committed[m]:
                self._fail(f"leader completeness: {n.id} entry {m} {lg.entry(m)} != committed "
                           f"{self.committed[m]}")
        for pid, (idx, term) in self.acked.items():
            if term < u and (idx > lg.last_index() or lg.entry(idx)[2] != pid):
                self._fail(f"acked proposal {pid} at {idx}/t{term} missing from new leader {n.id}")

    def _on_commit(self, n: _Node, c: int):
        if c < n.commit_seen:
            self._fail(f"{n.id} commit index decreased {n.commit_seen} -> {c}")
        lg = n.log
        if c > lg.last_index():
            self._fail(f"{n.id} commit {c} beyond its log end {lg.last_index()}")
        committed = self.committed
        for i in range(n.commit_seen + 1, c + 1):
            e = lg.entry(i)
            got = committed.get(i)
            if got is None:
                committed[i] = e
            elif got != e:
                self._fail(f"committed entry {i} changed: {got} then {e} on {n.id}")
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
                if node == n.id and idx <= c:
                    done.append(pid)
                    # reported committed to the client: the entry is still ours at commit time
                    if lg.term_at(idx) == t and lg.entry(idx)[2] == pid:
                        self.acked[pid] = (idx, t)
                        if pid in self.liveness_probes and self.liveness_done_ms < 0:
                            self.liveness_done_ms = self.now
                elif t < term:
                    done.append(pid)  # an old leader's proposal: the client would time out
            for pid in done:
                del self.pending[pid]

    # -- faults and workload -------------------------------------------------------------
    def _schedule_workload(self):
        rng = self.rng
        f = self.faults
        t = 0
        while t < self.fault_ms:
            t += self.propose_every_ms
            self._push(t, PROPOSE)
        for rate, kind in ((f.crash_rate, "crash"), (f.partition_rate, "partition")):
            if rate <= 0:
                continue
            t = 0.0
            while True:
                t += rng.expovariate(rate) * 1000.0
                if t >= self.fault_ms:
                    break
                self._push(int(t), FAULT, kind)
        if f.membership:
            for _ in range(3):
                self._push(rng.randrange(200, self.fault_ms), ADMIN, "member")
        if f.transfers:
            for _ in range(3):
                self._push(rng.randrange(200, self.fault_ms), ADMIN, "transfer")
        self._push(self.fault_ms, FAULT, "heal")

    def _leaders(self):
        return [n for n in self.nodes.values() if n.alive and n.core.role == Role.LEADER]

    def _propose(self, probe=False):
        leaders = self._leaders()
        if not leaders:
            return None
        n = self.rng.choice(leaders)
        count = 1 if probe else self.rng.randint(1, 4)
        pids = list(range(self.next_pid, self.next_pid + count))
        try:
            first, last = n.core.propose(pids, count, count * 8)
        except RaftError:
            return None
        self.next_pid += count
        for i, pid in enumerate(pids):
            self.pending[pid] = (n.id, first + i, n.core.term)
        self._drain(n)
        return pids[-1]

    def _fault(self, kind):
        rng = self.rng
        alive = [n for n in self.nodes.values() if n.alive]
        if kind == "crash":
            if alive:
                n = rng.choice(alive)
                self._crash(n)
                self._push(self.now + rng.randint(50, 800), RESTART, n.id)
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
                if not n.alive:
                    self._start(n)

    def _admin(self, kind):
        rng = self.rng
        leaders = self._leaders()
        if not leaders:
            return
        n = leaders[0]
        core = n.core
        try:
            if kind == "transfer":
                others = [v for v in core.voters if v != n.id]
                if others:
                    to = rng.choice(others)
                    self._t(f"admin: {n.id} transfer to {to}")
                    core.transfer_leadership(to)
            else:
                non_voters = [i for i in self.ids if i not in core.voters]
                if non_voters and (len(core.voters) <= 3 or rng.random() < 0.5):
                    p = rng.choice(non_voters)
                    self._t(f"admin: {n.id} add {p}")
                    core.add_member(p)
                elif len(core.voters) > 3:
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
        return res

    def _run(self):
        self._schedule_workload()
        end = self.fault_ms + self.liveness_ms
        nodes = self.nodes
        q = self._q
        tick_ms = self.tick_ms
        next_probe_ms = self.fault_ms
        while q:
            t, _, kind, a, b = heapq.heappop(q)
            if t > end:
                break
            self.now = t
            self.events += 1
            if kind == TICK:
                n = nodes[a]
                if not n.alive or n.incarnation != b:
                    continue
                n.core.tick(t)
                self._drain(n)
                self._push(t + tick_ms, TICK, a, b)
                if self.healed and t >= next_probe_ms and self.liveness_done_ms < 0:
                    next_probe_ms = t + 200
                    pid = self._propose(probe=True)
                    if pid is not None:
                        self.liveness_probes.add(pid)
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
                idx = n.log.flush()
                n.core.on_persisted(idx)
                self._drain(n)
            elif kind == PROPOSE:
                self._propose()
            elif kind == FAULT:
                self._fault(a)
            elif kind == RESTART:
                n = nodes[a]
                if not n.alive:
                    self._start(n)
            elif kind == ADMIN:
                self._admin(a)
        if self.liveness_done_ms < 0:
            self._fail(f"liveness: no proposal committed within {self.liveness_ms}ms after heal; "
                       + "; ".join(n.core.status() for n in nodes.values() if n.alive))
        self._final_check()

    def _converged(self) -> bool:
        leaders = self._leaders()
        if len(leaders) != 1:
            return False
        ld = leaders[0].core
        voters = ld.voters
        end = ld.log.last_index()
        return all(self.nodes[v].alive and self.nodes[v].core.commit_index == end
                   and self.nodes[v].log.last_index() == end for v in voters)

    def _final_check(self):
        # every node's log agrees with the committed log up to its commit index
        for n in self.nodes.values():
            if not n.alive:
                continue
            for i in range(1, n.core.commit_index + 1):
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
