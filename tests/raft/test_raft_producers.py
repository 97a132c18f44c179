"""Exactly-once retries (seed 002 §2.6): a batch carries (producer id, sequence); a leader -- a
new one after a failover too, rebuilding its table from its log -- answers a retry of a batch it
already holds with the original instead of writing it twice."""
import pytest

from quorumlog.errors import InvalidArgumentError
from quorumlog.raft import RaftConfig, Role
from quorumlog.raft.errors import DuplicateBatchError, ProducerSequenceError
from quorumlog.raft.memlog import MemLog
from quorumlog.raft.producers import ProducerTable
from quorumlog.testing.cluster import ManualCluster


def leading(**cfg):
    cl = ManualCluster(config=RaftConfig(**cfg))
    cl.elect("n1")
    cl.settle(cl.now + 100)
    return cl, cl.core("n1")


def propose(cl, node, items, producer):
    r = cl.core(node).propose(items, len(items), 8 * len(items), producer=producer)
    cl.drain(node)
    return r


def test_retry_on_the_same_leader_is_answered_with_the_original():
    cl, c = leading()
    first, last = propose(cl, "n1", [b"a", b"b"], (7, 1))
    end = cl.logs["n1"].last_index()
    with pytest.raises(DuplicateBatchError) as e:
        propose(cl, "n1", [b"a2", b"b2"], (7, 1))
    assert (e.value.first_index, e.value.last_index, e.value.term) == (first, last, c.term)
    assert cl.logs["n1"].last_index() == end  # nothing appended
    assert propose(cl, "n1", [b"c"], (7, 2)) == (end + 1, end + 1)


def test_new_leader_rebuilds_the_table_and_answers_a_retry_after_failover():
    # The client's batch reached the followers but the leader crashed before answering: the
    # client retries on the new leader. Failed before (no producer ids): the retry was a new
    # batch, written -- and committed -- a second time.
    cl, c = leading()
    first, last = propose(cl, "n1", [b"x1", b"x2"], (9, 41))
    cl.deliver(match=lambda m: m.type_name == "APPEND")  # the followers hold it...
    cl.crash("n1")  # ...the leader dies before anyone learns it committed
    cl.queue.clear()
    cl.settle(cl.now + 1500)
    ld = cl.leaders()[0]
    with pytest.raises(DuplicateBatchError) as e:
        propose(cl, ld, [b"x1", b"x2"], (9, 41))
    assert (e.value.first_index, e.value.last_index) == (first, last)
    cl.settle(cl.now + 200)
    lg = cl.logs[ld]
    assert cl.core(ld).commit_index >= last
    assert [b for b in lg.producers(1, lg.last_index()) if b[2:] == (9, 41)] == [(first, last, 9, 41)]


def test_sequences_are_accepted_in_increasing_order_only():
    cl, c = leading()
    propose(cl, "n1", [b"a"], (3, 10))
    propose(cl, "n1", [b"b"], (3, 12))  # (gaps are fine: a batch the client gave up on)
    with pytest.raises(ProducerSequenceError, match="not above the last written"):
        propose(cl, "n1", [b"c"], (3, 11))
    with pytest.raises(DuplicateBatchError):
        propose(cl, "n1", [b"a"], (3, 10))
    propose(cl, "n1", [b"d"], (4, 1))  # producers are independent


def test_bad_producer_argument_is_refused_and_changes_nothing():
    cl, c = leading()
    end = cl.logs["n1"].last_index()
    for bad in ((1,), (1, -2), ("p", 1), (1, True), 5):
        with pytest.raises(InvalidArgumentError):
            propose(cl, "n1", [b"a"], bad)
    assert cl.logs["n1"].last_index() == end


def test_producer_ids_travel_with_the_payload():
    cl, c = leading()
    first, last = propose(cl, "n1", [b"a", b"b", b"c"], (5, 5))
    cl.settle(cl.now + 100)
    for i in ("n2", "n3"):
        assert cl.logs[i].producers(1, last) == [(first, last, 5, 5)]


def test_table_is_bounded():
    t = ProducerTable(max_producers=2, batches_per_producer=2)
    for seq in (1, 2, 3):
        t.record(1, seq, seq, seq, 1)
    with pytest.raises(ProducerSequenceError):
        t.check(1, 1)  # forgotten: not guessed
    with pytest.raises(DuplicateBatchError):
        t.check(1, 2)
    t.record(2, 1, 10, 10, 1)
    t.record(3, 1, 11, 11, 1)  # evicts the least recently written producer, 1
    assert len(t) == 2
    t.check(1, 2)  # (unknown producer again: accepted)


def test_window_bounds_the_rebuild():
    lg = MemLog()
    lg.append_producer_batch(1, [b"a"], 1, 1)
    for _ in range(10):
        lg.append_as_leader(1, [b"x"])
    lg.append_producer_batch(1, [b"b"], 2, 1)
    t = ProducerTable(10, 4)
    t.rebuild(lg, lg.last_index() - 4, lg.last_index())
    t.check(1, 1)  # outside the window: the table does not know it (docs/raft.md)
    with pytest.raises(DuplicateBatchError):
        t.check(2, 1)


def test_native_log_stores_producer_ids_and_the_core_uses_them(tmp_path):
    # (the native log used to raise NotSupportedByLogError here: it now carries the producer
    # in record properties, and the core's table works over it)
    from quorumlog.commitlog import CommitLog
    from quorumlog.store.nativelog import NativeRaftLog
    cl = CommitLog(str(tmp_path / "log"), segment_size_bytes=1 << 16)
    try:
        lg = NativeRaftLog(cl)
        assert lg.producers(1, 1) == [] and lg.producer_snapshot() == []
        with pytest.raises(InvalidArgumentError, match="reserved"):
            lg.append_producer_batch(1, ("t", [b"a"], {"properties": {"QL_SEQ": "1"}}), 1, 1)
        assert lg.last_index() == 0
        import random

        from quorumlog.raft import RaftCore
        core = RaftCore("n1", lg, random.Random(1), RaftConfig(), voters=("n1",), peers=("n1",))
        core.tick(core.next_time_to_request_vote)
        assert core.role == Role.LEADER
        assert core.propose(("t", [b"a", b"b"]), 2, 2, producer=(1, 1)) == (2, 3)
        with pytest.raises(DuplicateBatchError) as e:
            core.propose(("t", [b"a", b"b"]), 2, 2, producer=(1, 1))
        assert (e.value.first_index, e.value.last_index) == (2, 3)
        assert core.propose(("t", [b"a"]), 1, 1) == (4, 4)  # without a producer: as before
        assert lg.producers(1, 4) == [(2, 3, 1, 1, 2, 0)]
        assert cl.record(3).properties == {"QL_PID": "1", "QL_SEQ": "1", "QL_N": "2",
                                           "QL_I": "1"}
    finally:
        cl.close()


def test_memlog_producer_tags_follow_truncation_and_crash():
    lg = MemLog()
    lg.append_producer_batch(1, [b"a", b"b"], 1, 1)
    lg.flush()
    lg.append_producer_batch(1, [b"c"], 1, 2)
    assert lg.producers(1, 3) == [(1, 2, 1, 1), (3, 3, 1, 2)]
    lg.truncate_after(2)
    assert lg.producers(1, 3) == [(1, 2, 1, 1)]
    lg.append_producer_batch(2, [b"d"], 1, 3)
    lg.crash()  # the unflushed batch is gone, the flushed one stays
    assert lg.producers(1, 3) == [(1, 2, 1, 1)] and lg.last_index() == 2
