"""Replicated mode (a follower that becomes leader): queue offsets handed out by the store must
never collide with offsets of records that arrived by replication (committed or not), dispatch
must refuse a second record at an offset it already holds, and a replicated record of an
unknown topic is validated before it creates anything on disk."""
import logging
import os

import pytest

from quorumlog import errors


def _ship(src, dst, lo=None):
    """Copy src's records after dst's last index into dst (what a Raft follower does)."""
    sl, dl = src.commitlog, dst.commitlog
    lo = dl.last_index + 1 if lo is None else lo
    while lo <= sl.last_index:
        raw, n = sl.read(lo, sl.last_index + 1)
        dl.append_replicated(bytes(raw))
        lo += n


def _commit_all(s):
    s.commitlog.commit(s.commitlog.last_index)
    s.dispatch()


def test_new_leader_continues_after_replicated_committed_offsets(open_store, tmp_path):
    a = open_store(str(tmp_path / "a"), replicated=True)
    b = open_store(str(tmp_path / "b"), replicated=True)
    a.put_batch("t", [b"0", b"1", b"2"], queue_id=0)
    _commit_all(a)
    _ship(a, b)
    _commit_all(b)
    assert b.max_offset("t", 0) == 3
    b.term = 2
    r = b.put("t", b"new", queue_id=0)
    assert r.queue_offset == 3
    _commit_all(b)
    assert b.max_offset("t", 0) == 4
    assert [m.body for m in b.get("t", 0, 0, 10)] == [b"0", b"1", b"2", b"new"]


def test_new_leader_batch_and_round_robin_after_replication(open_store, tmp_path):
    a = open_store(str(tmp_path / "a"), replicated=True)
    b = open_store(str(tmp_path / "b"), replicated=True)
    a.create_topic("t", queues=2)
    a.put_batch("t", [b"a%d" % i for i in range(4)])        # round-robin: 2 per queue
    _commit_all(a)
    b.create_topic("t", queues=2)
    _ship(a, b)
    _commit_all(b)
    b.term = 2
    r = b.put_batch("t", [b"b0", b"b1"])
    assert sorted(zip(r.queue_ids.tolist(), r.queue_offsets.tolist())) == [(0, 2), (1, 2)]
    r = b.put_batch("t", [b"c0", b"c1"], queue_id=1)
    assert r.queue_offsets.tolist() == [3, 4]
    _commit_all(b)
    assert b.max_offset("t", 0) == 3 and b.max_offset("t", 1) == 5


@pytest.mark.parametrize("per_round", [1, 5, 64, 65, 300])
def test_counters_follow_replicated_records_in_small_and_large_rounds(open_store, tmp_path,
                                                                      per_round):
    """Dispatch of replicated records moves each touched topic's counters to its queues'
    ends, whether a round holds a few records (plain-int path) or many (numpy path)."""
    a = open_store(str(tmp_path / "a"), replicated=True)
    b = open_store(str(tmp_path / "b"), replicated=True)
    for t in ("t", "u"):
        a.create_topic(t, queues=3)
        b.create_topic(t, queues=3)
    ends = {}
    for k in range(3):
        topic = "tu"[k % 2]
        a.put_batch(topic, [b"%d" % i for i in range(per_round)], queue_id=k % 3)
        _commit_all(a)
        _ship(a, b)
        _commit_all(b)
        ends[(topic, k % 3)] = ends.get((topic, k % 3), 0) + per_round
    b.term = 2
    for (topic, q), end in ends.items():
        assert b.max_offset(topic, q) == end
        assert b.put(topic, b"next", queue_id=q).queue_offset == end      # not handed twice
    assert b.put("u", b"fresh", queue_id=2).queue_offset == 0


def test_new_leader_accounts_for_uncommitted_replicated_tail(open_store, tmp_path):
    a = open_store(str(tmp_path / "a"), replicated=True)
    b = open_store(str(tmp_path / "b"), replicated=True)
    a.put("t", b"0", queue_id=0)
    _commit_all(a)
    a.put_batch("t", [b"1", b"2"], queue_id=0)               # appended, never committed on a
    a.put("u", b"u0", queue_id=1)                            # a topic b has never seen
    _ship(a, b)
    b.commitlog.commit(1)
    b.dispatch()
    assert b.max_offset("t", 0) == 1
    b.term = 2
    assert b.put("t", b"new", queue_id=0).queue_offset == 3
    assert b.put("u", b"u1", queue_id=1).queue_offset == 1
    _commit_all(b)
    assert [m.body for m in b.get("t", 0, 0, 10)] == [b"0", b"1", b"2", b"new"]
    assert [m.body for m in b.get("u", 1, 0, 10)] == [b"u0", b"u1"]


def test_leader_after_truncated_tail_does_not_skip_offsets(open_store, tmp_path):
    a = open_store(str(tmp_path / "a"), replicated=True)
    b = open_store(str(tmp_path / "b"), replicated=True)
    a.put("t", b"0", queue_id=0)
    _commit_all(a)
    a.put_batch("t", [b"x1", b"x2"], queue_id=0)
    _ship(a, b)
    b.commitlog.commit(1)
    b.dispatch()
    b.term = 2
    assert b.put("t", b"1", queue_id=0).queue_offset == 3    # after the tail it holds
    b.commitlog.truncate_after(1)                            # raft: the tail lost the election
    assert b.put("t", b"1", queue_id=0).queue_offset == 1
    _commit_all(b)
    assert [m.body for m in b.get("t", 0, 0, 10)] == [b"0", b"1"]


def test_dispatch_refuses_a_second_record_at_a_held_offset(open_store, tmp_path, caplog):
    """Two committed records claiming the same (topic, queue, offset): the second is not
    silently dropped; it is reported and counted."""
    b = open_store(str(tmp_path / "b"), replicated=True)
    lg = b.commitlog
    lg.append("t", b"first", queue_id=0, queue_offset=0, term=1)
    lg.append("t", b"clash", queue_id=0, queue_offset=0, term=1)
    lg.commit(lg.last_index)
    with caplog.at_level(logging.ERROR, logger="quorumlog.store"):
        b.dispatch()
    assert b.stats()["dispatch_conflicts"] == 1
    assert any("already holds" in r.getMessage() for r in caplog.records)
    assert [m.body for m in b.get("t", 0, 0, 10)] == [b"first"]


@pytest.mark.parametrize("bad", [".", ".."])
def test_replicated_record_of_invalid_topic_creates_nothing(open_store, tmp_path, bad):
    """A topic is a directory name: '.' and '..' are refused by the log on the leader path and
    on the follower path (append_replicated validates every record before writing), so no
    such record reaches dispatch and nothing is created. The store's own name check at
    dispatch stays as defence in depth for logs written before the log enforced this."""
    from quorumlog import format as ref
    b = open_store(str(tmp_path / "b"), replicated=True)
    lg = b.commitlog
    with pytest.raises(errors.InvalidTopicError):
        lg.append(bad, b"x", queue_id=0, queue_offset=0, term=1)
    # a leader's bytes naming the topic: built as "x" * len(bad), then patched and re-CRC'd
    raw = bytearray(ref.encode_record(ref.TYPE_MESSAGE, index=1, term=1, position=0,
                                      topic="x" * len(bad), body=b"x"))
    raw[ref.HEADER_SIZE:ref.HEADER_SIZE + len(bad)] = bad.encode()
    raw[0:4] = ref.crc32c(bytes(raw[4:])).to_bytes(4, "little")
    with pytest.raises(errors.ReplicationError):
        lg.append_replicated(bytes(raw))
    assert lg.last_index == 0
    lg.append("ok", b"y", queue_id=0, queue_offset=0, term=1)
    lg.commit(lg.last_index)
    before = sorted(os.listdir(os.path.join(b.path, "consumequeue")))
    b.dispatch()
    after = sorted(os.listdir(os.path.join(b.path, "consumequeue")))
    assert set(after) - set(before) == {"ok"}
    assert bad not in b.topics()
    assert b.stats()["dispatch_rejected"] == 0
    assert [m.body for m in b.get("ok", 0, 0)] == [b"y"]


def test_replicated_record_with_absurd_queue_id_is_rejected(open_store, tmp_path, caplog):
    b = open_store(str(tmp_path / "b"), replicated=True, max_queues_per_topic=16)
    lg = b.commitlog
    lg.append("t", b"x", queue_id=0, queue_offset=0, term=1)
    lg.append("t", b"huge", queue_id=5000, queue_offset=0, term=1)
    lg.append("n", b"huge", queue_id=5000, queue_offset=0, term=1)   # unknown topic too
    lg.append("t", b"y", queue_id=0, queue_offset=1, term=1)
    lg.commit(lg.last_index)
    with caplog.at_level(logging.ERROR, logger="quorumlog.store"):
        b.dispatch()
    assert b.topics()["t"] <= 16
    assert "n" not in b.topics()
    assert len(os.listdir(os.path.join(b.path, "consumequeue", "t"))) <= 16
    assert b.stats()["dispatch_rejected"] == 2
    assert [m.body for m in b.get("t", 0, 0)] == [b"x", b"y"]


def test_new_leader_delays_and_delivers_after_replicated_records(open_store, tmp_path):
    """Delay levels on a follower that becomes leader: the schedule queue and the real queue
    continue after the replicated records."""
    from quorumlog.store import SCHEDULE_TOPIC
    a = open_store(str(tmp_path / "a"), replicated=True)
    b = open_store(str(tmp_path / "b"), replicated=True)
    a.put("t", b"r0", queue_id=0)
    a.put("t", b"d0", queue_id=0, delay_level=1)
    _commit_all(a)
    _ship(a, b)
    _commit_all(b)
    b.term = 2
    r = b.put("t", b"d1", queue_id=0, delay_level=1)
    assert (r.topic, r.queue_offset) == (SCHEDULE_TOPIC, 1)
    _commit_all(b)
    assert b.deliver_due(r.store_timestamp_ms + 10**6) == 2
    _commit_all(b)
    assert [m.body for m in b.get("t", 0, 0, 10)] == [b"r0", b"d0", b"d1"]


@pytest.mark.parametrize("commit_deliveries", [True, False])
def test_new_leader_does_not_redeliver_what_the_old_leader_delivered(
        open_store, tmp_path, commit_deliveries):
    a = open_store(str(tmp_path / "a"), replicated=True)
    b = open_store(str(tmp_path / "b"), replicated=True)
    ts = a.put("t", b"d0", queue_id=0, delay_level=1).store_timestamp_ms
    a.put("t", b"d1", queue_id=0, delay_level=1)
    _commit_all(a)
    _ship(a, b)
    _commit_all(b)                                   # b learns of both delayed messages
    assert a.deliver_due(ts + 10**6) == 2            # a delivers them before losing office
    _commit_all(a)
    _ship(a, b)
    if commit_deliveries:
        _commit_all(b)
    b.term = 2
    assert b.deliver_due(ts + 10**6) == 0
    _commit_all(b)
    assert [m.body for m in b.get("t", 0, 0, 10)] == [b"d0", b"d1"]
    assert b.stats()["delayed_pending"] == 0


def test_timer_does_not_deliver_in_replicated_mode(open_store, tmp_path):
    """A follower's timer must not append deliveries to its log (only the Raft driver, on
    the leader, calls deliver_due)."""
    import time as _time
    s = open_store(str(tmp_path / "b"), replicated=True, background=True,
                   schedule_interval_ms=10, delay_levels="1s")
    s.commitlog.append("SCHEDULE_TOPIC_XXXX", b"d", queue_id=0, queue_offset=0, term=1,
                       properties={"REAL_TOPIC": "t", "REAL_QID": "0", "DELAY": "1"},
                       born_timestamp_ms=0)
    last = s.commitlog.last_index
    s.commitlog.commit(last)
    s.dispatch()
    _time.sleep(1.3)
    assert s.commitlog.last_index == last


def test_replicated_delayed_record_with_bad_destination_is_not_delivered(open_store, tmp_path,
                                                                         caplog):
    """REAL_TOPIC / REAL_QID of a replicated delayed record are checked before delivery
    creates any topic or queue."""
    b = open_store(str(tmp_path / "b"), replicated=True, delay_levels="1s",
                   max_queues_per_topic=16)
    lg = b.commitlog
    bad = [{"REAL_TOPIC": "..", "REAL_QID": "0"},
           {"REAL_TOPIC": "t", "REAL_QID": "5000"},
           {"REAL_TOPIC": "t", "REAL_QID": "x"}]
    for off, props in enumerate(bad + [{"REAL_TOPIC": "t", "REAL_QID": "1"}]):
        props["DELAY"] = "1"
        lg.append("SCHEDULE_TOPIC_XXXX", b"m%d" % off, queue_id=0, queue_offset=off, term=1,
                  properties=props)
    lg.commit(lg.last_index)
    b.dispatch()
    with caplog.at_level(logging.ERROR, logger="quorumlog.schedule"):
        assert b.deliver_due(b._clock_ms() + 10**6) == 1
    assert b.stats()["delay_rejected"] == 3
    assert list(b.topics()) == ["t"] and b.topics()["t"] <= 16
    assert sorted(os.listdir(os.path.join(b.path, "consumequeue"))) == ["SCHEDULE_TOPIC_XXXX",
                                                                        "t"]
    _commit_all(b)
    assert [m.body for m in b.get("t", 1, 0)] == [b"m3"]
    assert b.stats()["delayed_pending"] == 0
