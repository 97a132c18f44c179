"""The history checker on hand-made histories: a clean one passes, and each property's
violation is caught under its own kind (and only the expected kinds are reported)."""
from __future__ import annotations

import dataclasses

import pytest

from quorumlog.errors import InvalidArgumentError
from quorumlog.testing.history import (Event, History, Op, ReadMessage, ReplicaLog, ReplicaRead,
                                       Unreadable, check, make_body, message_id, parse_body)

NODES = ("n1", "n2", "n3")
T = "t"


class World:
    """A history of three acknowledged batches (queues 0 and 1), one failed, one
    indeterminate (stored), the replicas' reads agreeing with it, and identical logs."""

    def __init__(self):
        self.ops: list[Op] = []
        self.events: list[Event] = []
        self.t = 0.0
        self.stored: dict[tuple, str] = {}
        self.add_batch(1, 0, 0, 3, "ok")          # t/0 @ 0..2
        self.add_batch(2, 1, 0, 2, "ok")          # t/1 @ 0..1
        self.add_batch(3, 0, 3, 2, "ok")          # t/0 @ 3..4
        self.add_batch(4, None, None, 2, "fail")  # never stored
        self.add_batch(5, 1, 2, 1, "info")        # indeterminate, stored at t/1 @ 2
        self.log = bytes(range(256)) * 64

    def tick(self) -> float:
        self.t += 1.0
        return self.t

    def add_batch(self, seq, q, first, n, outcome, node="n1", pid=0xABC):
        mids = tuple(message_id(pid, seq, i) for i in range(n))
        self.ops.append(Op("invoke", 0, self.tick(), pid, seq, T, mids))
        if outcome == "ok":
            self.ops.append(Op("ok", 0, self.tick(), pid, seq, T, mids, q, first,
                               tuple(1000 * seq + i for i in range(n)), node))
        else:
            self.ops.append(Op(outcome, 0, self.tick(), pid, seq, T, mids, error="x"))
        if q is not None:
            for i, mid in enumerate(mids):
                self.stored[(T, q, first + i)] = mid
        return mids

    def reads(self) -> list[ReplicaRead]:
        out = []
        for n in NODES:
            r = ReplicaRead(n)
            for (t, q, o), mid in sorted(self.stored.items()):
                r.messages.append(ReadMessage(t, q, o, mid, True))
            for q in (0, 1):
                offs = [o for (_, qq, o) in self.stored if qq == q]
                r.ranges[(T, q)] = (0, max(offs) + 1)
            out.append(r)
        return out

    def logs(self) -> list[ReplicaLog]:
        return [ReplicaLog(n, len(self.log), {0: self.log}) for n in NODES]

    def check(self, reads=None, logs=None, events=None):
        return check(self.ops, self.events if events is None else events,
                     self.reads() if reads is None else reads,
                     self.logs() if logs is None else logs, nodes_total=3)


def kinds(res) -> set:
    return {f.kind for f in res.findings}


def replace_message(reads, node, where, **kw):
    r = next(r for r in reads if r.node == node)
    k = next(i for i, m in enumerate(r.messages) if (m.topic, m.queue_id, m.offset) == where)
    r.messages[k] = dataclasses.replace(r.messages[k], **kw)
    return r


def test_a_clean_history_has_no_findings():
    w = World()
    res = w.check()
    assert res.valid, res.findings
    c = res.counts
    assert (c["ops"], c["acked_batches"], c["acked_messages"]) == (5, 3, 7)
    assert (c["failed_batches"], c["indeterminate_batches"]) == (1, 1)
    assert c["acked_lost"] == c["wrong_data"] == c["duplicates"] == 0
    assert c["compared_bytes"] == len(w.log)


def test_bodies_carry_their_id_and_damage_is_visible():
    b = make_body("abc-1-2", 100)
    assert len(b) == 100 and parse_body(b) == ("abc-1-2", True)
    flipped = bytearray(b)
    flipped[50] ^= 1
    assert parse_body(flipped) == ("abc-1-2", False)
    assert parse_body(b"no separator") == (None, False)
    assert parse_body(make_body("x-1-0")) == ("x-1-0", True)


def test_acknowledged_message_missing_from_a_replica_is_lost():
    w = World()
    reads = w.reads()
    r = reads[1]
    r.messages = [m for m in r.messages if (m.queue_id, m.offset) != (0, 4)]
    r.ranges[(T, 0)] = (0, 4)            # the queue simply ends earlier there
    res = w.check(reads=reads)
    assert kinds(res) == {"acked-lost"}
    assert "n2" in res.findings[0].text
    # one replica lacks it: a finding, but the group (a majority) still holds it
    assert res.counts["acked_missing_copies"] == 1 and res.counts["acked_lost"] == 0
    r = reads[2]
    r.messages = [m for m in r.messages if (m.queue_id, m.offset) != (0, 4)]
    r.ranges[(T, 0)] = (0, 4)
    res = w.check(reads=reads)
    assert res.counts["acked_missing_copies"] == 2 and res.counts["acked_lost"] == 1


def test_acknowledged_message_at_another_offset_is_moved():
    w = World()
    reads = w.reads()
    r = reads[0]
    # the message acknowledged at t/1@0 shows up at t/1@5 instead, t/1@0 being absent
    m = next(m for m in r.messages if (m.queue_id, m.offset) == (1, 0))
    r.messages.remove(m)
    r.messages.append(dataclasses.replace(m, offset=5))
    r.ranges[(T, 1)] = (0, 6)
    res = w.check(reads=reads)
    assert "acked-moved" in kinds(res)
    assert "offset-gap" in kinds(res)       # 0, 3 and 4 are missing in t/1 now
    assert res.counts["acked_lost"] == 0


def test_other_message_at_an_acknowledged_position_is_wrong_data():
    w = World()
    reads = w.reads()
    other = w.stored[(T, 0, 1)]
    replace_message(reads, "n3", (T, 0, 0), message_id=other)
    res = w.check(reads=reads)
    assert "wrong-data" in kinds(res)
    assert "duplicate" in kinds(res)        # `other` is now stored twice on n3
    assert "acked-lost" in kinds(res)       # and t/0@0's own message nowhere on n3
    assert res.counts["wrong_data"] >= 1


def test_damaged_body_and_unknown_id_are_wrong_data():
    w = World()
    reads = w.reads()
    replace_message(reads, "n1", (T, 0, 2), intact=False)
    res = w.check(reads=reads)
    assert "wrong-data" in kinds(res)
    w2 = World()
    reads = w2.reads()
    reads[0].messages.append(ReadMessage(T, 1, 3, "fff-99-0", True))
    reads[0].ranges[(T, 1)] = (0, 4)
    res = w2.check(reads=reads)
    assert kinds(res) == {"wrong-data"}
    assert "no client sent" in res.findings[0].text


def test_duplicate_of_an_idempotent_batch_is_caught():
    w = World()
    reads = w.reads()
    mid = w.stored[(T, 1, 1)]
    for r in reads:
        r.messages.append(ReadMessage(T, 1, 3, mid, True))
        r.ranges[(T, 1)] = (0, 4)
    res = w.check(reads=reads)
    assert kinds(res) == {"duplicate"}
    assert res.counts["duplicates"] == 3


def test_definitely_failed_message_must_not_appear_but_indeterminate_may():
    w = World()
    failed = next(o for o in w.ops if o.type == "fail").message_ids
    reads = w.reads()
    reads[2].messages.append(ReadMessage(T, 0, 5, failed[1], True))
    reads[2].ranges[(T, 0)] = (0, 6)
    res = w.check(reads=reads)
    assert kinds(res) == {"failed-appeared"}
    # the indeterminate batch is stored in the clean world and reported nowhere
    assert any(o.type == "info" for o in w.ops) and w.check().valid


def test_gap_in_offsets_is_caught():
    w = World()
    reads = w.reads()
    reads[0].ranges[(T, 0)] = (0, 7)        # claims offsets 5 and 6, serves neither
    res = w.check(reads=reads)
    assert kinds(res) == {"offset-gap"}
    assert res.counts["offset_gaps"] == 2


def test_unreadable_acknowledged_message_is_caught_unless_the_nemesis_damaged_it():
    w = World()
    reads = w.reads()
    r = reads[1]
    r.messages = [m for m in r.messages if (m.queue_id, m.offset) != (0, 1)]
    r.unreadable.append(Unreadable(T, 0, 1, "CorruptLogError: CRC32C mismatch"))
    res = w.check(reads=reads)
    assert kinds(res) == {"acked-unreadable"}
    # the same on a replica the nemesis flipped a bit on: reported apart, not a violation
    # (the other two replicas read the message intact)
    flip = Event(0.5, "bit-flip", ("n2",), {"position": 100})
    logs = w.logs()
    damaged = bytearray(w.log)
    damaged[100] ^= 0x10
    logs[1].segments = {0: bytes(damaged)}
    res = w.check(reads=reads, logs=logs, events=[flip])
    assert res.valid, res.findings
    assert res.counts["damaged_unreadable_acked"] == 1
    assert res.counts["excused_flipped_bytes"] == 1
    # but not when a majority cannot read it
    reads[2].messages = [m for m in reads[2].messages if (m.queue_id, m.offset) != (0, 1)]
    reads[2].unreadable.append(Unreadable(T, 0, 1, "CorruptLogError"))
    res = w.check(reads=reads, logs=logs, events=[flip])
    assert "acked-unreadable" in kinds(res)


def test_unreadable_offset_on_an_undamaged_replica_is_caught():
    w = World()
    reads = w.reads()
    reads[0].unreadable.append(Unreadable(T, 1, 3, "CorruptLogError"))
    reads[0].ranges[(T, 1)] = (0, 4)
    res = w.check(reads=reads)
    assert kinds(res) == {"unreadable"}


def test_short_acknowledgement_is_caught():
    w = World()
    o = next(o for o in w.ops if o.type == "ok")
    w.ops[w.ops.index(o)] = dataclasses.replace(o, positions=o.positions[:1])
    res = w.check()
    assert kinds(res) == {"short-ack"}          # every message is stored all the same
    # the messages it named no position for, missing from the replicas: lost, and the
    # offsets they would have had, taken by other batches, are not blamed on those
    w = World()
    o = next(o for o in w.ops if o.type == "ok")
    w.ops[w.ops.index(o)] = dataclasses.replace(o, positions=o.positions[:1])
    reads = w.reads()
    for r in reads:
        r.messages = [dataclasses.replace(m, message_id=f"abc-9-{m.offset}")
                      if (m.queue_id, m.offset) in ((0, 1), (0, 2)) else m for m in r.messages]
    w.add_batch(9, 0, 1, 0, "ok")
    w.ops[-2] = dataclasses.replace(w.ops[-2], message_ids=("abc-9-1", "abc-9-2"))
    w.ops[-1] = dataclasses.replace(w.ops[-1], message_ids=("abc-9-1", "abc-9-2"),
                                    positions=(1, 2))
    res = w.check(reads=reads)
    assert kinds(res) == {"short-ack", "acked-lost"}, res.findings
    assert res.counts["acked_lost"] == res.counts["acked_lost_by_short_acks"] == 2


def test_two_acks_for_one_position_are_caught():
    w = World()
    w.add_batch(6, 0, 4, 1, "ok")           # t/0@4 again, for another message
    res = w.check()
    assert "position-reused" in kinds(res)


def test_ack_from_a_minority_node_during_a_partition_is_caught():
    w = World()
    start = w.tick()
    part = Event(start, "partition", ("n1",), {"groups": [["n1"], ["n2", "n3"]]})
    mids = w.add_batch(7, 0, 5, 1, "ok", node="n1")
    heal = Event(w.tick(), "heal")
    res = w.check(events=[part, heal])
    assert kinds(res) == {"minority-ack"}, res.findings
    assert mids[0].split("-")[1] in res.findings[0].text
    # the same ack from a majority node, or invoked before the partition began, is fine
    w2 = World()
    s2 = w2.tick()
    w2.add_batch(7, 0, 5, 1, "ok", node="n2")
    res = w2.check(events=[Event(s2, "partition", ("n1",), {"groups": [["n1"], ["n2", "n3"]]}),
                           Event(w2.tick(), "heal")])
    assert res.valid, res.findings
    w3 = World()
    w3.add_batch(7, 0, 5, 1, "ok", node="n1")
    inv, ok = w3.ops[-2], w3.ops[-1]
    part3 = Event(inv.time + 0.5, "partition", ("n1",), {"groups": [["n1"], ["n2", "n3"]]})
    assert part3.time < ok.time
    res = w3.check(events=[part3, Event(ok.time + 1, "heal")])
    assert res.valid, res.findings


def test_replicas_that_differ_below_the_commit_position_are_caught():
    w = World()
    logs = w.logs()
    other = bytearray(w.log)
    other[5000] ^= 1
    logs[2].segments = {0: bytes(other)}
    res = w.check(logs=logs)
    assert kinds(res) == {"replicas-differ"}
    assert "position 5000" in res.findings[0].text
    # beyond the lowest commit position a difference is allowed (uncommitted tail)
    logs = w.logs()
    logs[0].committed_position = 4000
    logs[2].segments = {0: bytes(other)}
    assert w.check(logs=logs).valid
    # a replica lacking committed bytes altogether
    logs = w.logs()
    logs[1].segments = {0: w.log[:1000]}
    res = w.check(logs=logs)
    assert kinds(res) == {"replicas-differ"}


def test_logs_compare_across_segment_boundaries():
    w = World()
    logs = w.logs()
    half = len(w.log) // 2
    logs[1].segments = {0: w.log[:half], half: w.log[half:]}
    assert w.check(logs=logs).valid
    other = bytearray(w.log[half:])
    other[7] ^= 0x80
    logs[1].segments = {0: w.log[:half], half: bytes(other)}
    res = w.check(logs=logs)
    assert f"position {half + 7}" in res.findings[0].text


def test_slow_or_missing_convergence_is_caught():
    w = World()
    ok = Event(10.0, "converged", (), {"after_s": 2.5, "since": "final heal"})
    assert w.check(events=[ok]).valid
    slow = Event(10.0, "converged", (), {"after_s": 12.0})
    never = Event(11.0, "converged", (), {"after_s": None})
    res = w.check(events=[slow, never])
    assert kinds(res) == {"not-converged"}
    assert res.counts["not_converged"] == 2


def test_history_recorder_and_bad_op_type():
    h = History(clock=iter(range(100)).__next__)
    h.op("invoke", process=1, producer_id=1, sequence=1, topic=T, message_ids=("1-1-0",))
    h.event("kill", ["n1"], pid=123)
    assert h.count_events("kill") == 1 and len(h.ops) == 1
    with pytest.raises(InvalidArgumentError):
        Op("maybe", 0, 0.0, 1, 1, T)


def test_a_replica_that_does_not_start_again_is_caught():
    w = World()
    res = w.check(events=[Event(3.0, "restart-failed", ("n2",), {"error": "exited with 1"})])
    assert kinds(res) == {"restart-failed"}
    # refusing to start on damage the nemesis made is the documented fail-stop
    res = w.check(events=[Event(3.0, "refused-start", ("n2",), {"error": "CRC mismatch"})])
    assert res.valid
