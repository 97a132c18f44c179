"""Micro-benchmarks of the pure Raft core (pytest-benchmark): is the core ever the bottleneck
of the replicated write path? Run: pytest bench/bench_raft.py --benchmark-only

  * append-response steps/s: the leader handling APPEND_RESP SUCCESS messages (match advance,
    window release, commit computation) -- with and without refilling the window with a new
    batch read from the log (the refill is what a saturated leader does on every response)
  * overhead per committed batch: propose -> batches to 2 followers -> follower append and
    durability report -> responses -> commit, all in-process with the in-memory log, per batch

The numbers are printed and stored in the benchmark's extra_info (steps_per_s, us_per_batch).
"""
import bisect
import random

import pytest

from quorumlog.raft import HardState, MemLog, RaftConfig, RaftCore, Role
from quorumlog.raft.messages import Append, AppendResponse, Code, VoteRequest, VoteResponse, VoteResult
from quorumlog.testing.cluster import pump as cluster_pump

VOTERS = ("n1", "n2", "n3")


class RunLog:
    """A RaftLog whose every operation is O(1) or O(log terms): entries are only (index, term),
    kept as term runs; a batch is just its entry count. Benchmarks with it measure the core's
    own overhead, not the cost of storing Python objects per entry (which the native log does in
    Cython). It still obeys the interface's contract (the conformance suite's rules)."""

    ENTRY_BYTES = 100

    def __init__(self):
        self._starts = [1]   # run i covers [starts[i], starts[i+1])
        self._terms = [0]
        self._last = 0
        self._durable = 0

    def first_index(self):
        return 1

    def last_index(self):
        return self._last

    def last_term(self):
        return self._terms[-1] if self._last else 0

    def term_at(self, i):
        if i == 0:
            return 0
        if i < 0 or i > self._last:
            raise IndexError(i)
        return self._terms[bisect.bisect_right(self._starts, i) - 1]

    def read(self, lo, hi, max_bytes):
        count = min(hi - lo + 1, max(1, max_bytes // self.ENTRY_BYTES))
        return (lo, count, self.term_at(lo)), count, count * self.ENTRY_BYTES

    def _add(self, term, count):
        if term != self._terms[-1] or not self._last:
            if self._starts[-1] == self._last + 1:  # empty trailing run: reuse it
                self._terms[-1] = term
            else:
                self._starts.append(self._last + 1)
                self._terms.append(term)
        self._last += count
        return self._last

    def append_as_leader(self, term, batch):
        return self._add(term, batch)

    def append_control(self, term, kind, data):
        return self._add(term, 1)

    def append_replicated(self, payload):
        lo, count, term = payload
        assert lo == self._last + 1
        return self._add(term, count)

    def truncate_after(self, i):
        while len(self._starts) > 1 and self._starts[-1] > i:
            self._starts.pop()
            self._terms.pop()
        self._last = i

    def flush(self):
        self._durable = self._last
        return self._last


def _elect(core, voters):
    """Drive `core` to LEADER through its public inputs."""
    core.tick(core.next_time_to_request_vote)
    core.ready()
    for v in voters:
        if v != core.id:
            core.step(VoteResponse(core.term, v, core.id, core.term, VoteResult.ACCEPT))
    assert core.role == Role.LEADER
    return core.ready().messages  # heartbeats and the COMPARE probes


def make_leader(n_entries, batch_entries, window, voters=VOTERS, log_factory=MemLog):
    lg = log_factory()
    cfg = RaftConfig(max_inflight_batches=window, max_batch_entries=batch_entries,
                     max_entries_per_proposal=1 << 16, max_uncommitted_entries=1 << 30)
    core = RaftCore(voters[0], lg, random.Random(1), cfg, voters=voters, peers=voters)
    probes = [m for m in _elect(core, voters) if isinstance(m, Append)]
    item = b"x" * 100
    left = n_entries
    while left:
        k = min(left, 1 << 16)
        core.propose(k if log_factory is RunLog else [item] * k, k, 100 * k)
        left -= k
    core.on_persisted(lg.flush())
    core.ready()
    # answer the COMPARE probes: each follower matches at the leader's start
    for m in probes:
        if m.last_index < m.first_index:
            core.step(AppendResponse(core.term, m.dst, core.id, Code.SUCCESS, m.prev_index,
                                     m.prev_index, m.prev_index, 0, 0, m.epoch))
    # the TRUNCATE batch (one per follower) is acknowledged: APPEND state, window filled
    for m in core.ready().messages:
        if isinstance(m, Append) and m.last_index >= m.first_index:
            core.step(AppendResponse(core.term, m.dst, core.id, Code.SUCCESS, m.last_index,
                                     m.prev_index, m.last_index, 0, 0, m.epoch))
    core.ready()
    assert all(p.state == p.state.APPEND for p in core.progress.values())
    return core


def responses(core, steps, batch_entries):
    """steps SUCCESS responses, alternating followers, each acknowledging one more batch."""
    followers = [v for v in core.voters if v != core.id]
    match = {f: core.progress[f].match for f in followers}
    out = []
    for k in range(steps):
        f = followers[k % len(followers)]
        match[f] += batch_entries
        out.append(AppendResponse(core.term, f, core.id, Code.SUCCESS, match[f], match[f] - batch_entries,
                                  match[f], 0, 0, core.progress[f].epoch))
    return out


def _run_steps(core, msgs, sent):
    step = core.step
    ready = core.ready
    n = 0
    for i, m in enumerate(msgs):
        step(m)
        if i & 1023 == 0:
            n += len(ready().messages)  # the driver takes the batches to send
    n += len(ready().messages)
    sent.append(n)


def _bench_steps(benchmark, steps, batch_entries, window, log_factory, refill=True):
    if refill:
        n_entries = (steps // 2 + window + 4) * batch_entries
    else:  # everything is in flight before the clock starts
        n_entries = (steps // 2) * batch_entries
        window = steps
    state = {}
    sent = []

    def setup():
        core = make_leader(n_entries, batch_entries, window, log_factory=log_factory)
        state["core"] = core
        return (core, responses(core, steps, batch_entries), sent), {}

    benchmark.pedantic(_run_steps, setup=setup, rounds=5, iterations=1)
    core = state["core"]
    assert core.commit_index >= (steps // 2 - 1) * batch_entries
    benchmark.extra_info["batches_sent_per_step"] = round(sent[-1] / steps, 3)
    sps = steps / benchmark.stats.stats.min
    benchmark.extra_info["steps_per_s"] = round(sps)
    print(f"\n{log_factory.__name__}: {steps} append-response steps, batch={batch_entries} "
          f"window={window}: {sps:,.0f} steps/s "
          f"({sent[-1] / steps:.2f} batches sent per step)")
    return sps, sent[-1] / steps


@pytest.mark.parametrize("log_factory", [RunLog, MemLog], ids=["runlog", "memlog"])
def test_append_response_steps_with_window_refill(benchmark, log_factory):
    """Every response frees a window slot and the leader reads and sends the next 64-entry
    batch (RunLog: the core's own cost; MemLog: plus slicing Python lists per batch)."""
    sps, per_step = _bench_steps(benchmark, 100_000, 64, 16, log_factory)
    assert per_step > 0.99  # every response really refilled the window


def test_append_response_steps_ack_only(benchmark):
    """Responses only: match advance, window release, commit; nothing left to send."""
    sps, per_step = _bench_steps(benchmark, 100_000, 1, 0, RunLog, refill=False)
    assert per_step < 0.01


def _cluster(batch_entries, log_factory=MemLog):
    cfg = RaftConfig(max_batch_entries=batch_entries, max_entries_per_proposal=batch_entries,
                     max_inflight_batches=64)
    logs = {v: log_factory() for v in VOTERS}
    cores = {v: RaftCore(v, logs[v], random.Random(7), cfg, voters=VOTERS, peers=VOTERS)
             for v in VOTERS}
    ld = cores["n1"]
    # a real election through messages
    ld.tick(ld.next_time_to_request_vote)
    pump(cores, logs)
    for t in range(1, 50):
        for c in cores.values():
            c.tick(ld.next_time_to_request_vote + t)
        pump(cores, logs)
        if ld.role == Role.LEADER:
            break
    assert ld.role == Role.LEADER
    pump(cores, logs)
    return cores, logs


def pump(cores, logs):
    cluster_pump(cores, logs, dispatch=True)


def _bench_batches(benchmark, log_factory, batch_of, label):
    batch_entries = 256
    n_batches = 2000
    batch = batch_of(batch_entries)

    def setup():
        cores, logs = _cluster(batch_entries, log_factory)
        return (cores, logs), {}

    def run(cores, logs):
        ld = cores["n1"]
        for _ in range(n_batches):
            ld.propose(batch, batch_entries, 200 * batch_entries)
            pump(cores, logs)
        assert ld.commit_index == ld.log.last_index()

    benchmark.pedantic(run, setup=setup, rounds=3, iterations=1)
    us = benchmark.stats.stats.min / n_batches * 1e6
    benchmark.extra_info["us_per_batch"] = round(us, 1)
    benchmark.extra_info["entries_per_batch"] = batch_entries
    print(f"\n{label}: 3 cores in one process, {batch_entries}-entry batches: {us:.1f} us per "
          f"committed batch (all three cores' work), {batch_entries / us * 1e6:,.0f} entries/s")


def test_overhead_per_committed_batch_core_only(benchmark):
    """The core's own cost: O(1) log (RunLog), so no per-entry Python work anywhere."""
    _bench_batches(benchmark, RunLog, lambda n: n, "core only (RunLog)")


def test_overhead_per_committed_batch_memlog(benchmark):
    """Same with the in-memory MemLog, which stores one Python object per entry."""
    _bench_batches(benchmark, MemLog, lambda n: [b"y" * 200] * n, "with MemLog")
