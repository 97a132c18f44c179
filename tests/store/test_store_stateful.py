"""Hypothesis stateful test: MessageStore against a plain model (per-queue lists), through
put, put_batch, get, iteration, reopen, crash (the log's _crash hook: kill -9 semantics) and
retention (injected clock and disk usage)."""
import shutil
import tempfile
import time

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import quorumlog
from quorumlog import errors

HOUR = 3_600_000
TOPICS = {"a": 3, "b": 4}          # "a" created with 3 queues, "b" auto-created (4)
# sizes up to 6000 so a few steps fill several 64 KiB segments (retention has work to do)
bodies = st.one_of(st.binary(max_size=64),
                   st.builds(lambda n, c: bytes([c]) * n, st.integers(0, 6000),
                             st.integers(0, 255)))
tags = st.sampled_from([None, "x", "y"])


class StoreMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="store-stateful-")
        self.now = [int(time.time() * 1000)]
        self.disk = [0.5]
        self.s = None
        self._open()
        self.s.create_topic("a", queues=3)
        self.model = {(t, q): [] for t, n in TOPICS.items() for q in range(n)}
        self.rr = {t: 0 for t in TOPICS}
        self.min_position = 0

    FLUSH = "async"

    def _open(self):
        self.s = quorumlog.open(self.dir, segment_size_bytes=1 << 16, flush=self.FLUSH,
                                consume_queue_file_entries=16, background=False, environ={},
                                clock_ms=lambda: self.now[0], disk_usage=lambda p: self.disk[0],
                                disk_check_interval_ms=0)

    def teardown(self):
        if self.s is not None and not self.s.closed:
            self.s.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _record(self, topic, results, bodies_, tags_):
        for r, b, tg in zip(results, bodies_, tags_):
            lst = self.model[(topic, r.queue_id)]
            assert r.queue_offset == len(lst)
            lst.append((b, tg, r.position))

    @rule(topic=st.sampled_from(sorted(TOPICS)), body=bodies, tag=tags,
          queue=st.one_of(st.none(), st.integers(0, 2)))
    def put(self, topic, body, tag, queue):
        r = self.s.put(topic, body, tags=tag, queue_id=queue)
        if queue is None:
            assert r.queue_id == self.rr[topic]
            self.rr[topic] = (self.rr[topic] + 1) % TOPICS[topic]
        self._record(topic, [r], [body], [tag])

    @rule(topic=st.sampled_from(sorted(TOPICS)), bs=st.lists(bodies, min_size=1, max_size=20),
          tag=tags, queue=st.one_of(st.none(), st.integers(0, 2)))
    def put_batch(self, topic, bs, tag, queue):
        r = self.s.put_batch(topic, bs, tags=tag, queue_id=queue)
        if queue is None:
            n = TOPICS[topic]
            assert list(r.queue_ids) == [(self.rr[topic] + i) % n for i in range(len(bs))]
            self.rr[topic] = (self.rr[topic] + len(bs)) % n
        self._record(topic, [r[i] for i in range(len(bs))], bs, [tag] * len(bs))

    @rule(topic=st.sampled_from(sorted(TOPICS)), c=st.integers(0, 255))
    def fill_segment(self, topic, c):
        """About one 64 KiB segment in one batch, so retention always has segments to drop."""
        self.put_batch(topic, [bytes([c]) * 6000] * 11, None, None)

    @rule(topic=st.sampled_from(sorted(TOPICS)), q=st.integers(0, 3), frac=st.floats(0, 1),
          n=st.integers(1, 40), tag=tags)
    def get(self, topic, q, frac, n, tag):
        q %= TOPICS[topic]
        if topic not in self.s.topics():
            return
        lst = self.model[(topic, q)]
        lo = self._model_min(topic, q)
        off = lo + int(frac * (len(lst) - lo))
        got = self.s.get(topic, q, off, n, tags=tag)
        want = [(i, b) for i, (b, tg, _) in enumerate(lst) if i >= off and (tag is None or tg == tag)]
        assert [(m.queue_offset, m.body) for m in got] == want[:n]
        if off > lo:
            try:
                self.s.get(topic, q, lo - 1, 1)
                assert lo == 0, "read below min offset"
            except errors.OffsetOutOfRangeError:
                pass

    def _model_min(self, topic, q):
        lst = self.model[(topic, q)]
        for i, (_, _, pos) in enumerate(lst):
            if pos >= self.min_position:
                return i
        return len(lst)

    def _resume_rr(self):
        # after a reopen round-robin resumes at the first least-filled queue
        for t, n in TOPICS.items():
            counts = [len(self.model[(t, q)]) for q in range(n)]
            self.rr[t] = counts.index(min(counts))

    @rule()
    def reopen(self):
        self.s.close()
        self._open()
        self._resume_rr()

    @rule(flush=st.booleans())
    def crash(self, flush):
        if flush:
            self.s.flush()
        self.s.crash_for_testing()          # kill -9: the page cache keeps every write
        self._open()
        self._resume_rr()

    @rule(hours=st.integers(0, 100), ratio=st.sampled_from([0.88, 0.8, 0.5]))
    def retention(self, hours, ratio):
        self.now[0] += hours * HOUR
        self.disk[0] = ratio
        self.s.run_retention()
        self.min_position = self.s.commitlog.min_position
        self.disk[0] = 0.5

    @invariant()
    def offsets_match(self):
        if self.s is None:
            return
        existing = self.s.topics()
        for (t, q), lst in self.model.items():
            if t not in existing:            # "b" is auto-created by its first put
                assert not lst
                continue
            assert existing[t] == TOPICS[t]
            assert self.s.max_offset(t, q) == len(lst)
            assert self.s.min_offset(t, q) == self._model_min(t, q)


StoreMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestStoreStateful = StoreMachine.TestCase


class SyncStoreMachine(StoreMachine):
    """The same model with flush="sync" (commit after the covering flush)."""
    FLUSH = "sync"


SyncStoreMachine.TestCase.settings = settings(
    max_examples=10, stateful_step_count=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestSyncStoreStateful = SyncStoreMachine.TestCase
