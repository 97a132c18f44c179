"""The store under a real RaftCore (no MemLog): every data record of a replicated leader enters
the log through the store's one append path (RaftCore.propose -> StoreRaftLog.append_as_leader
-> the store), commit -> dispatch -> reply is store.apply_committed, abandon_pending and a Raft
truncation fail the requests whose outcome is unknown or lost, and no second writer can append
to a store-backed log."""
import random

import pytest

from quorumlog import errors
from quorumlog.raft import RaftConfig, RaftCore, RaftLog, ReadyToServe, Role
from quorumlog.raft.errors import NotLeaderError


def _pump(stores, cores, events=None):
    """Drive replicas until quiet, every message delivered in order: the driver duties of
    each Ready (persist: kept in memory here; send; flush -> on_persisted; apply_committed ->
    on_dispatched; events)."""
    busy = True
    while busy:
        busy = False
        for v, c in cores.items():
            if c.has_ready():
                busy = True
                r = c.ready()
                if r.flush_to is not None:
                    c.on_persisted(stores[v].raft_log().flush(), r.flush_gen)
                if r.commit_index is not None:
                    c.on_dispatched(stores[v].apply_committed(r.commit_index))
                if events is not None:
                    events.extend(r.events)
                for m in r.messages:
                    cores[m.dst].step(m)


def _drive(store, core, events=None):
    """The driver duties of one replica (a single voter: no messages), see _pump."""
    _pump({core.id: store}, {core.id: core}, events)


def _single_voter_leader(store):
    core = RaftCore("n1", store.raft_log(), random.Random(1), RaftConfig(), voters=("n1",),
                    peers=("n1",))
    events = []
    now = core.next_time_to_request_vote
    for step in range(10):
        core.tick(now + 400 * step)
        _drive(store, core, events)
        if core.role == Role.LEADER:
            break
    assert core.role == Role.LEADER
    # the NOOP is committed, and apply_committed's answer told the core it is dispatched
    assert core.is_ready_to_serve and any(isinstance(e, ReadyToServe) for e in events)
    return core


def test_reply_comes_after_dispatch_with_the_log_positions(open_store):
    s = open_store(replicated=True)
    core = _single_voter_leader(s)
    replies = []

    def on_done(outcome):
        # called by apply_committed after dispatch: the records are in the consume queue
        # already (dispatched_position reads without dispatching; get() would dispatch)
        dispatched = s.dispatched_position
        replies.append((outcome, dispatched, [m.body for m in s.get("t", 1, 0, 10)]))

    req = s.prepare_put("t", [b"a", b"b", b"c"], queue_id=1, tags="x", on_done=on_done)
    assert (req.count, req.nbytes) == (3, 3) and not req.appended
    first, last = core.propose(req, req.count, req.nbytes)
    assert req.appended and (req.first_index, req.last_index) == (first, last)
    assert not req.done and replies == []
    assert s.max_offset("t", 1) == 0                      # appended, not committed: invisible
    _drive(s, core)
    assert req.done and len(replies) == 1
    result, dispatched, seen = replies[0]
    assert dispatched >= req.end_position and seen == [b"a", b"b", b"c"]
    assert result is req.result and req.wait(0) is result
    lg = s.commitlog
    assert result.first_index == first and result.topic == "t"
    for i in range(3):
        rec = lg.record(first + i)
        assert int(result.positions[i]) == lg.position_of(first + i)
        assert (rec.queue_id, rec.queue_offset, rec.term) == (1, i, core.term)
        assert (int(result.queue_ids[i]), int(result.queue_offsets[i])) == (1, i)
    assert lg.committed_index == last and s.dispatched_position == lg.committed_position
    # the next request continues the queue's offsets and round-robin works through the core
    req2 = s.prepare_put("t", [b"d", b"e"], queue_id=1)
    core.propose(req2, req2.count, req2.nbytes)
    _drive(s, core)
    assert req2.wait(0).queue_offsets.tolist() == [3, 4]
    req3 = s.prepare_put("t", [b"r%d" % i for i in range(8)])
    core.propose(req3, req3.count, req3.nbytes)
    _drive(s, core)
    assert sorted(req3.wait(0).queue_ids.tolist()) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert s.stats()["pending_requests"] == 0


def test_delayed_put_and_delivery_through_the_core(open_store):
    s = open_store(replicated=True, delay_levels="1s")
    core = _single_voter_leader(s)

    def propose(r):
        return core.propose(r, r.count, r.nbytes)

    req = s.prepare_put("t", [b"later"], queue_id=0, delay_level=1)
    propose(req)
    _drive(s, core)
    ts = req.wait(0).store_timestamp_ms
    assert req.result.topic == "SCHEDULE_TOPIC_XXXX"
    with pytest.raises(errors.InvalidArgumentError):
        s.deliver_due(ts + 10_000)                       # a driven store delivers via the core
    assert s.deliver_due(ts + 10_000, propose=propose) == 1
    assert s.max_offset("t", 0) == 0                     # proposed, not committed yet
    _drive(s, core)
    assert [m.body for m in s.get("t", 0, 0)] == [b"later"]


def test_abandon_pending_fails_outstanding_requests(open_store):
    s = open_store(replicated=True)
    core = _single_voter_leader(s)
    outcomes = []
    reqs = [s.prepare_put("t", [b"%d" % i], queue_id=0, on_done=outcomes.append)
            for i in range(2)]
    for r in reqs:
        core.propose(r, r.count, r.nbytes)
    lost = NotLeaderError("leadership lost", None, core.term)
    assert s.abandon_pending(lost) == 2
    assert outcomes == [lost, lost]
    for r in reqs:
        assert r.done
        with pytest.raises(NotLeaderError):
            r.wait(0)
    _drive(s, core)                                      # they commit after all: no 2nd reply
    assert outcomes == [lost, lost]
    assert [m.body for m in s.get("t", 0, 0)] == [b"0", b"1"]
    assert s.abandon_pending(lost) == 0


def test_wait_times_out_while_not_committed(open_store):
    s = open_store(replicated=True)
    core = _single_voter_leader(s)
    req = s.prepare_put("t", [b"x"])
    core.propose(req, req.count, req.nbytes)
    with pytest.raises(TimeoutError):
        req.wait(0.01)
    _drive(s, core)
    assert req.wait(0).first_index == req.first_index


def test_truncation_fails_dropped_requests_and_recounts_offsets(open_store):
    """What the core does to a deposed leader's uncommitted tail: truncate_after through the
    store's RaftLog."""
    s = open_store(replicated=True)
    rlog = s.raft_log()
    kept = s.prepare_put("t", [b"k0", b"k1"], queue_id=0)
    rlog.append_as_leader(1, kept)
    s.apply_committed(kept.last_index)
    outcomes = []
    dropped = s.prepare_put("t", [b"x0", b"x1"], queue_id=0, on_done=outcomes.append)
    assert rlog.append_as_leader(1, dropped) == 4
    assert dropped.result.queue_offsets.tolist() == [2, 3]
    rlog.truncate_after(2)
    assert len(outcomes) == 1 and isinstance(outcomes[0], NotLeaderError)
    with pytest.raises(NotLeaderError):
        dropped.wait(0)
    assert kept.done and kept.wait(0).queue_offsets.tolist() == [0, 1]
    again = s.prepare_put("t", [b"n2"], queue_id=0)
    assert rlog.append_as_leader(2, again) == 3
    assert again.result.queue_offsets.tolist() == [2]   # the dropped offsets are free again
    s.apply_committed(3)
    assert [m.body for m in s.get("t", 0, 0, 10)] == [b"k0", b"k1", b"n2"]


def test_no_second_writer_on_a_store_backed_log(open_store, tmp_path):
    s = open_store(str(tmp_path / "a"), replicated=True)
    other = open_store(str(tmp_path / "b"), replicated=True)
    s.put("t", b"before", queue_id=0)                    # no core yet: the store's own term
    rlog = s.raft_log()
    assert isinstance(rlog, RaftLog) and s.raft_log() is rlog
    lg = s.commitlog
    before = (lg.last_index, lg.end_position, s.topics())
    with pytest.raises(errors.DrivenStoreError):
        s.put("t", b"x", queue_id=0)
    with pytest.raises(errors.DrivenStoreError):
        s.put_batch("t", [b"x"])
    # NativeRaftLog's own (topic, bodies) leader append is not offered by the store's log
    with pytest.raises(errors.InvalidArgumentError):
        rlog.append_as_leader(2, ("u", [b"raw"]))
    with pytest.raises(errors.InvalidArgumentError):
        rlog.append_as_leader(2, other.prepare_put("u", [b"foreign"]))
    assert (lg.last_index, lg.end_position, s.topics()) == before
    req = s.prepare_put("t", [b"y"], queue_id=0)
    assert rlog.append_as_leader(2, req) == before[0] + 1
    with pytest.raises(errors.InvalidArgumentError):
        rlog.append_as_leader(2, req)                    # a request is appended once
    assert lg.last_index == before[0] + 1
    single = open_store(str(tmp_path / "c"))
    with pytest.raises(errors.InvalidArgumentError):
        single.raft_log()                                # a single replica has no Raft core


def test_bad_requests_are_refused_at_prepare(open_store):
    s = open_store(replicated=True, max_batch_messages=4)
    s.create_topic("t", queues=2)
    before = (s.commitlog.last_index, s.topics())
    for exc, call in [
        (errors.InvalidTopicError, lambda: s.prepare_put("a/b", [b"x"])),
        (errors.InvalidTopicError, lambda: s.prepare_put("SCHEDULE_TOPIC_XXXX", [b"x"])),
        (errors.InvalidQueueError, lambda: s.prepare_put("t", [b"x"], queue_id=2)),
        (errors.BatchTooLargeError, lambda: s.prepare_put("t", [b"x"] * 5)),
        (errors.InvalidArgumentError, lambda: s.prepare_put("t", [])),
        (errors.InvalidArgumentError, lambda: s.prepare_put("t", [b"x"], on_done=5)),
        (errors.InvalidDelayLevelError, lambda: s.prepare_put("t", [b"x"], delay_level=99)),
    ]:
        with pytest.raises(exc):
            call()
    assert (s.commitlog.last_index, s.topics()) == before


def test_three_replicas_read_the_same_queues(open_store, tmp_path):
    voters = ("n1", "n2", "n3")
    stores = {v: open_store(str(tmp_path / v), replicated=True) for v in voters}
    cores = {v: RaftCore(v, stores[v].raft_log(), random.Random(i), RaftConfig(),
                         voters=voters, peers=voters) for i, v in enumerate(voters)}
    ld = cores["n1"]
    now = ld.next_time_to_request_vote
    for step in range(20):
        for v in voters if step else ("n1",):
            cores[v].tick(now + step)
        _pump(stores, cores)
        if ld.role == Role.LEADER:
            break
    assert ld.role == Role.LEADER
    replies = []
    for k in range(4):
        req = stores["n1"].prepare_put("t", [b"%d-%d" % (k, i) for i in range(5)],
                                       on_done=replies.append)
        ld.propose(req, req.count, req.nbytes)
        _pump(stores, cores)
    assert [r.first_index for r in replies] == sorted(r.first_index for r in replies)
    assert len(replies) == 4
    t = ld.now_ms + RaftConfig().heartbeat_interval_ms     # the commit index rides heartbeats
    for v in voters:
        cores[v].tick(t)
    _pump(stores, cores)
    want = {q: [(m.queue_offset, m.body, m.index) for m in stores["n1"].get("t", q, 0, 100)]
            for q in range(4)}
    assert sum(len(x) for x in want.values()) == 20
    for v in ("n2", "n3"):
        assert stores[v].commitlog.committed_index == ld.commit_index
        got = {q: [(m.queue_offset, m.body, m.index) for m in stores[v].get("t", q, 0, 100)]
               for q in range(4)}
        assert got == want


# -- the RaftLog conformance suite, run against the store-backed log -------------------------
def _load_conformance():
    """tests/raft/test_raft_log_conformance.py, loaded by path (tests/ is not a package)."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), os.pardir, "raft",
                        "test_raft_log_conformance.py")
    spec = importlib.util.spec_from_file_location("_raft_log_conformance", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _takes_a_log(f) -> bool:
    import inspect
    return bool({"impl", "raft_log"} & set(inspect.signature(f).parameters))


_conformance = _load_conformance()
# Every test of the suite that takes its log(s) from the `impl` fixture, under a name of its
# own here; the hypothesis list-model test walks the suite's own implementations and is not
# repeated. The suite's `raft_log` and `items` fixtures come along and use the `impl` below.
globals().update({f"{name}__store_raft_log": f for name, f in vars(_conformance).items()
                  if name.startswith("test_") and callable(f) and _takes_a_log(f)})
raft_log, items = _conformance.raft_log, _conformance.items


@pytest.fixture
def impl(open_store, tmp_path):
    """The conformance suite's factory for the store-backed log: make() opens a replicated
    store and returns its raft_log(); items(n) prepares n messages on the first store made
    (the suite appends as leader only to the first log it makes)."""
    made = []

    def make():
        s = open_store(str(tmp_path / f"log{len(made)}"), replicated=True)
        made.append(s)
        return s.raft_log()

    def items(n, size=10):
        return made[0].prepare_put("raft-conformance",
                                   [bytes([65 + (i % 26)]) * size for i in range(n)])

    return make, items

