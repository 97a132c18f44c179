"""A hand-driven cluster of RaftCores for unit tests and scenario scripts.

Unlike sim.py nothing happens on its own: the caller advances the clock, ticks nodes, and
delivers, drops or holds messages, so a test can walk one DLedger rule at a time. Every
delivered message and every event is logged as a stable one-line string (scenario output).

Persistence is automatic by default (each Ready's flush is done and reported at once);
`manual_persist(node)` turns that off for one node so tests can check the durability hook.
`async_flush(node)` makes a node acknowledge at page-cache level (flush = "async": reported at
once, nothing flushed until `sync_disk(node)`); `crash` is then a kill -9 (the page cache
survives) and `power_loss` drops everything not synced.
"""
from __future__ import annotations

import random

from ..raft.core import HardState, RaftConfig, RaftCore
from ..raft.memlog import MemLog
from ..raft.messages import Message


def pump(cores: dict, logs: dict, *, dispatch: bool = False) -> None:
    """Synchronous driver for cores the caller built itself: persist each Ready's flush at
    once, deliver every message (in order, nothing lost), until no core has output.
    dispatch=True also reports each commit index as dispatched (ready-to-serve)."""
    busy = True
    while busy:
        busy = False
        for v, c in cores.items():
            if c.has_ready():
                busy = True
                r = c.ready()
                if r.flush_to is not None:
                    c.on_persisted(logs[v].flush(), r.flush_gen)
                if dispatch and r.commit_index is not None:
                    c.on_dispatched(r.commit_index)
                for m in r.messages:
                    cores[m.dst].step(m)


class ManualCluster:
    def __init__(self, ids=("n1", "n2", "n3"), config: RaftConfig | None = None, seed: int = 0,
                 voters=None, spare=()):
        self.cfg = config or RaftConfig()
        self.seed = seed
        self.ids = list(ids) + list(spare)
        self.voters = tuple(voters or ids)
        self.now = 0
        self.logs = {i: MemLog() for i in self.ids}
        self.hard = {i: HardState() for i in self.ids}
        self.cores: dict[str, RaftCore] = {}
        self.down: set = set()
        self.blocked: set = set()
        self.queue: list[Message] = []
        self.out: list[str] = []
        self.committed: dict[str, int] = {}
        self._manual: set = set()
        self._unflushed: dict[str, int] = {}
        self._async: set = set()
        self.incarnation = {i: 0 for i in self.ids}
        for i in self.ids:
            self._boot(i)

    def _boot(self, i, vote_guard=False, recovering=False):
        self.incarnation[i] += 1
        hist = self.logs[i].config_history(self.voters)
        rng = random.Random(f"{self.seed}/{i}/{self.incarnation[i]}")
        self.cores[i] = RaftCore(i, self.logs[i], rng, self.cfg, hard_state=self.hard[i],
                                 config_history=hist, peers=self.ids, now_ms=self.now,
                                 restarted=vote_guard, recovering=recovering)
        self.committed[i] = 0

    # -- driving ---------------------------------------------------------------------
    def core(self, i) -> RaftCore:
        return self.cores[i]

    def drain(self, i):
        c = self.cores[i]
        while c.has_ready():
            r = c.ready()
            if r.hard_state is not None:
                self.hard[i] = r.hard_state
            for m in r.messages:
                if (m.src, m.dst) not in self.blocked:
                    self.queue.append(m)
            if r.flush_to is not None:
                if i in self._async:
                    c.on_persisted(self.logs[i].last_index(), r.flush_gen)
                elif i in self._manual:
                    self._unflushed[i] = r.flush_to
                else:
                    c.on_persisted(self.logs[i].flush(), r.flush_gen)
            if r.commit_index is not None:
                self.committed[i] = r.commit_index
                self.out.append(f"{i} commit={r.commit_index}")
                c.on_dispatched(r.commit_index)
            for ev in r.events:
                self.out.append(f"{i} {_event(ev)}")

    def tick(self, to_ms: int, nodes=None):
        """Advance the clock to to_ms and tick `nodes` (default: every live node)."""
        self.now = max(self.now, to_ms)
        for i in nodes or self.ids:
            if i not in self.down:
                self.cores[i].tick(self.now)
                self.drain(i)

    def deliver(self, limit: int | None = None, match=None) -> int:
        """Deliver queued messages in order (newly produced ones go to the back); stop after
        `limit` deliveries or when the queue is empty. match(m) -> bool filters."""
        n = 0
        while self.queue and (limit is None or n < limit):
            idx = 0
            if match is not None:
                for idx, m in enumerate(self.queue):
                    if match(m):
                        break
                else:
                    return n
            m = self.queue.pop(idx)
            if m.dst in self.down or (m.src, m.dst) in self.blocked:
                self.out.append(f"dropped {m.describe()}")
                continue
            self.out.append(m.describe())
            self.cores[m.dst].step(m)
            self.drain(m.dst)
            n += 1
        return n

    def drop(self, match=None, limit: int | None = None) -> int:
        keep, gone = [], 0
        for m in self.queue:
            if (match is None or match(m)) and (limit is None or gone < limit):
                gone += 1
                self.out.append(f"dropped {m.describe()}")
            else:
                keep.append(m)
        self.queue = keep
        return gone

    def propose(self, i, count=1, items=None):
        items = items if items is not None else [f"{i}-{self.now}-{k}".encode() for k in range(count)]
        r = self.cores[i].propose(items, len(items), sum(len(x) for x in items))
        self.out.append(f"{i} proposed [{r[0]}..{r[1]}]")
        self.drain(i)
        return r

    def manual_persist(self, i, on=True):
        (self._manual.add if on else self._manual.discard)(i)

    def persist(self, i):
        if i in self._unflushed:
            del self._unflushed[i]
            c = self.cores[i]
            c.on_persisted(self.logs[i].flush())
            self.drain(i)

    def async_flush(self, i, on=True):
        (self._async.add if on else self._async.discard)(i)

    def sync_disk(self, i):
        """The async log's background flush: everything appended so far reaches the disk."""
        self.logs[i].flush()

    def crash(self, i):
        self.down.add(i)
        if i not in self._async:  # (async: kill -9, the page cache survives the process)
            self.logs[i].crash()
        self._unflushed.pop(i, None)
        self.out.append(f"{i} crashed")

    def power_loss(self, i):
        """i loses its power: whatever its log had not flushed is gone."""
        self.down.add(i)
        self.logs[i].crash()
        self._unflushed.pop(i, None)
        self.out.append(f"{i} lost power")

    def restart(self, i, vote_guard=False, recovering=False):
        """Start i again from its log and hard state. vote_guard=True tells the core it ran
        before (RaftCore(restarted=True)), as a real driver does after a crash; scenario set-ups
        that prepare logs by hand and reboot leave it off. recovering=True: the driver found
        that this open may have lost acknowledged entries (async, power loss)."""
        self.down.discard(i)
        self._boot(i, vote_guard, recovering)
        self.out.append(f"{i} restarted t{self.hard[i].term} vote={self.hard[i].voted_for}")

    def partition(self, *groups):
        self.blocked = set()
        for g in groups:
            for a in self.ids:
                for b in self.ids:
                    if a in g and b not in g:
                        self.blocked.add((a, b))
                        self.blocked.add((b, a))

    def block(self, src, dst):
        self.blocked.add((src, dst))

    def heal(self):
        self.blocked = set()

    def elect(self, i, start_ms: int | None = None):
        """Make `i` campaign now (its vote time has come) and deliver until quiet."""
        from ..raft.messages import Role
        c = self.cores[i]
        t = max(self.now, c.next_time_to_request_vote) if start_ms is None else start_ms
        self.tick(t, [i])
        self.deliver()
        for _ in range(5):  # others answered TERM_NOT_READY: they adopt the term, i re-votes
            if c.role == Role.LEADER:
                break
            self.tick(self.now + 1)
            self.deliver()
        return c

    def settle(self, until_ms: int, step_ms: int = 10):
        """Tick everyone every step_ms and deliver everything, until until_ms."""
        while self.now < until_ms:
            self.tick(self.now + step_ms)
            self.deliver()

    def leaders(self):
        from ..raft.messages import Role
        return [i for i in self.ids if i not in self.down and self.cores[i].role == Role.LEADER]

    def take_output(self) -> list[str]:
        out, self.out = self.out, []
        return out


def _event(ev) -> str:
    name = type(ev).__name__
    parts = []
    for k, v in ev._asdict().items():
        parts.append(f"{k}={v.name if hasattr(v, 'name') else v}")
    return f"{name}({', '.join(parts)})"
