"""Idempotent producers (node/producers.py) over hand-driven Raft cores: a leader -- a new one
after a failover too, rebuilding its table from its own log -- answers a retry of a batch it
already holds with the original instead of writing it twice; sequences are written in order
with no gap while the client has the missing one in flight (OutOfOrderSequenceError, retriable),
and pipelined batches whose leader dies complete on the next one, each once, in order.

`Broker` does what the node's put path does (driver.py): the leader's table for its term
(table_for_term), check, propose the batch tagged with its producer, record."""
import random

import pytest

from quorumlog.errors import (DuplicateBatchError, OutOfOrderSequenceError,
                              ProducerSequenceError)
from quorumlog.node.producers import KnownBatchError, ProducerTable, table_for_term
from quorumlog.raft import RaftConfig, Role
from quorumlog.raft.errors import NotLeaderError
from quorumlog.raft.memlog import MemLog, ProducerItems
from quorumlog.testing.cluster import ManualCluster


class Broker:
    def __init__(self, cl: ManualCluster):
        self.cl = cl
        self.tables: dict = {}

    def put(self, node, items, pid, seq, base=0):
        c = self.cl.core(node)
        if c.role != Role.LEADER:
            raise NotLeaderError(f"{node} is not the leader", c.leader_id, c.term)
        t = self.tables[node] = table_for_term(self.tables.get(node), self.cl.logs[node], c.term)
        t.check(pid, seq, base)
        first, last = c.propose(ProducerItems(items, pid, seq), len(items), 8 * len(items))
        t.record(pid, seq, first, last, c.term)
        self.cl.drain(node)
        return first, last


def leading(**cfg):
    cl = ManualCluster(config=RaftConfig(**cfg))
    cl.elect("n1")
    cl.settle(cl.now + 100)
    return cl, Broker(cl)


def test_retry_on_the_same_leader_is_answered_with_the_original():
    cl, b = leading()
    c = cl.core("n1")
    first, last = b.put("n1", [b"a", b"b"], 7, 1)
    end = cl.logs["n1"].last_index()
    with pytest.raises(DuplicateBatchError) as e:
        b.put("n1", [b"a2", b"b2"], 7, 1)
    assert (e.value.first_index, e.value.last_index, e.value.term) == (first, last, c.term)
    assert cl.logs["n1"].last_index() == end  # nothing appended
    assert b.put("n1", [b"c"], 7, 2) == (end + 1, end + 1)


def test_new_leader_rebuilds_the_table_and_answers_a_retry_after_failover():
    # The client's batch reached the followers but the leader crashed before answering: the
    # client retries on the new leader, which must answer from its own log.
    cl, b = leading()
    first, last = b.put("n1", [b"x1", b"x2"], 9, 41)
    cl.deliver(match=lambda m: m.type_name == "APPEND")  # the followers hold it...
    cl.crash("n1")  # ...the leader dies before anyone learns it committed
    cl.queue.clear()
    cl.settle(cl.now + 1500)
    ld = cl.leaders()[0]
    with pytest.raises(DuplicateBatchError) as e:
        b.put(ld, [b"x1", b"x2"], 9, 41)
    assert (e.value.first_index, e.value.last_index) == (first, last)
    cl.settle(cl.now + 200)
    lg = cl.logs[ld]
    assert cl.core(ld).commit_index >= last
    assert [r for r in lg.producers(1, lg.last_index()) if r[2:] == (9, 41)] == [(first, last, 9, 41)]


def test_sequence_rules():
    t = ProducerTable(16, 4)
    # a producer this leader does not know: only the client's oldest unresolved batch first
    with pytest.raises(OutOfOrderSequenceError, match="no batch of the producer"):
        t.check(3, 5, base=4)
    t.check(3, 4, base=4)
    t.record(3, 4, 1, 1, 1)
    t.check(3, 5, base=4)                       # the next one
    with pytest.raises(OutOfOrderSequenceError, match="up to sequence 4 .* from 5"):
        t.check(3, 6, base=5)                   # 5 is still in flight: a gap
    t.check(3, 6, base=6)                       # 5 was given up: 6 goes on
    t.record(3, 6, 2, 2, 1)
    with pytest.raises(KnownBatchError):
        t.check(3, 4, base=4)
    for s in (7, 8, 9, 10):
        t.record(3, s, s, s, 1)
    with pytest.raises(ProducerSequenceError, match="not retriable"):
        t.check(3, 4, base=4)                   # older than the 4 remembered
    # base 0 (a client that does not say): any sequence above the last written is taken
    t.check(3, 12)
    t.check(4, 100)


def test_a_sequence_recorded_out_of_order_is_refused():
    t = ProducerTable(16, 4)
    t.record(1, 5, 1, 1, 1)
    with pytest.raises(ProducerSequenceError, match="recorded after"):
        t.record(1, 5, 2, 2, 1)


def test_producer_ids_travel_with_the_payload():
    cl, b = leading()
    first, last = b.put("n1", [b"a", b"b", b"c"], 5, 5)
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
    t.check(1, 1)  # outside the window: the table does not know it (docs/node.md)
    with pytest.raises(DuplicateBatchError):
        t.check(2, 1)


def test_table_for_term_is_kept_within_a_term_and_rebuilt_after():
    lg = MemLog()
    lg.append_producer_batch(1, [b"a"], 1, 1)
    t = table_for_term(None, lg, 1)
    assert table_for_term(t, lg, 1) is t
    t2 = table_for_term(t, lg, 2)
    assert t2 is not t and t2.term == 2 and t2.lookup(1, 1) is not None


def test_memlog_producer_tags_follow_truncation_and_crash():
    lg = MemLog()
    lg.append_as_leader(1, ProducerItems([b"a", b"b"], 1, 1))
    lg.flush()
    lg.append_producer_batch(1, [b"c"], 1, 2)
    assert lg.producers(1, 3) == [(1, 2, 1, 1), (3, 3, 1, 2)]
    lg.truncate_after(2)
    assert lg.producers(1, 3) == [(1, 2, 1, 1)]
    lg.append_producer_batch(2, [b"d"], 1, 3)
    lg.crash()  # the unflushed batch is gone, the flushed one stays
    assert lg.producers(1, 3) == [(1, 2, 1, 1)] and lg.last_index() == 2


# -- pipelined batches across a failover ----------------------------------------------------
class Producer:
    """A client's producer as AsyncClient keeps it: at most `window` sequences unresolved;
    each attempt carries the lowest unresolved one (base)."""

    def __init__(self, pid, window):
        self.pid, self.window = pid, window
        self.next = 1
        self.open: dict = {}          # seq -> items
        self.acked: dict = {}         # seq -> (first, last)

    def base(self):
        return min(self.open, default=self.next)

    def new_batch(self):
        assert self.next - self.base() < self.window
        seq = self.next
        self.next += 1
        self.open[seq] = [b"p%d-s%d-m%d" % (self.pid, seq, i) for i in range(1 + seq % 3)]
        return seq

    def send(self, broker, node, seq):
        """-> "acked" or "out-of-order" (any other error fails the test)."""
        try:
            first, last = broker.put(node, self.open[seq], self.pid, seq, self.base())
        except KnownBatchError as e:
            first, last = e.first_index, e.last_index
        except OutOfOrderSequenceError:
            return "out-of-order"
        self.acked[seq] = (first, last)
        del self.open[seq]
        return "acked"


@pytest.mark.parametrize("window", [4, 8])
@pytest.mark.parametrize("seed", range(6))
def test_pipelined_batches_survive_a_failover_with_retries_out_of_order(window, seed):
    # The leader takes `window` pipelined batches of a producer, replicates only the first k
    # to one follower, and dies before answering any. The client's retries reach the new
    # leader in any order (connections re-made at different times): each is answered with
    # the original, or refused as out of order (nothing appended) and resent once the older
    # ones are resolved -- no error, every batch once, in sequence order. (Before: a leader
    # took sequences above the last written with gaps, so a retry of an older batch arriving
    # after a newer one was refused for good: "sequence 1492 is not above the last written".)
    rng = random.Random(f"{window}/{seed}")
    cl, b = leading()
    p = Producer(77, window)
    warm = p.new_batch()
    assert p.send(b, "n1", warm) == "acked"
    cl.settle(cl.now + 100)
    cl.queue.clear()
    k = rng.randint(0, window)
    seqs = [p.new_batch() for _ in range(window)]
    for i, s in enumerate(seqs):
        b.put("n1", p.open[s], p.pid, s, p.base())     # answers lost with the leader
        if i < k:
            cl.deliver(match=lambda m: m.type_name == "APPEND" and m.dst == "n2")
        cl.queue.clear()
    cl.crash("n1")
    cl.queue.clear()
    cl.settle(cl.now + 2000)
    ld = cl.leaders()[0]
    assert ld != "n1"
    # the first attempts at the new leader, shuffled
    order = seqs[:]
    rng.shuffle(order)
    refused = [s for s in order if p.send(b, ld, s) == "out-of-order"]
    # the client's rule after an error: resend in sequence order, oldest first
    for s in sorted(refused):
        assert s == p.base()
        assert p.send(b, ld, s) == "acked"
    assert not p.open
    # the producer goes on with a full window
    for _ in range(2 * window):
        assert p.send(b, ld, p.new_batch()) == "acked"
    cl.settle(cl.now + 500)
    c = cl.core(ld)
    lg = cl.logs[ld]
    runs = [r for r in lg.producers(1, c.commit_index) if r[2] == p.pid]
    assert [r[3] for r in runs] == list(range(1, p.next))      # each once, in order
    assert {r[3]: (r[0], r[1]) for r in runs} == p.acked        # where acknowledged
    bodies = [lg.entry(i)[2] for r in runs for i in range(r[0], r[1] + 1)]
    assert len(bodies) == len(set(bodies))                       # every message once
