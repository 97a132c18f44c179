"""MessageStore API conventions: context manager, closed, bytes in / bytes or memoryview out,
half-open iterators, topics, auto-creation, errors that change nothing."""
import pytest

import quorumlog
from quorumlog import errors


def test_context_manager_and_closed(open_store, store_dir):
    with open_store() as s:
        assert not s.closed
        s.put("t", b"a")
    assert s.closed
    for call in (lambda: s.put("t", b"a"), lambda: s.get("t", 0, 0), lambda: s.topics(),
                 lambda: s.max_offset("t", 0), lambda: s.stats()):
        with pytest.raises(errors.LogClosedError):
            call()
    s.close()   # idempotent


def test_bytes_in_bytes_and_memoryview_out(open_store):
    s = open_store()
    bodies = [b"bytes", bytearray(b"bytearray"), memoryview(b"xxmemoryview")[2:], b""]
    for b in bodies:
        s.put("t", b, queue_id=0)
    ms = s.get("t", 0, 0, 10)
    assert [m.body for m in ms] == [bytes(b) for b in bodies]
    assert all(type(m.body) is bytes for m in ms)
    v = ms[1].body_view
    assert isinstance(v, memoryview) and v.readonly and bytes(v) == b"bytearray"
    assert [m.queue_offset for m in ms] == [0, 1, 2, 3]
    assert all(m.topic == "t" and m.queue_id == 0 for m in ms)
    assert ms[0].index < ms[1].index and ms[0].size > 96


def test_message_fields(open_store):
    s = open_store()
    r = s.put("t", b"body", tags="TagA", keys=("k1", "k2"), properties={"p": "1", "q": ""},
              queue_id=2, born_timestamp_ms=12345)
    (m,) = s.get("t", 2, r.queue_offset)
    assert (m.tags, m.keys, m.properties) == ("TagA", ("k1", "k2"), {"p": "1", "q": ""})
    assert m.born_timestamp_ms == 12345 and m.store_timestamp_ms == r.store_timestamp_ms
    assert (m.index, m.position, m.queue_offset) == (r.index, r.position, r.queue_offset)
    assert bytes(m.raw())[-4:] == b"body" and len(m.raw()) == m.size
    m.properties["p"] = "changed"         # a copy: the message is immutable
    assert m.properties["p"] == "1"
    with pytest.raises(TypeError):
        quorumlog.Message()


def test_iter_messages_half_open(open_store):
    s = open_store()
    s.put_batch("t", [b"%d" % i for i in range(100)], queue_id=1)
    assert [m.body for m in s.iter_messages("t", 1, 10, 20)] == [b"%d" % i for i in range(10, 20)]
    assert [m.queue_offset for m in s.iter_messages("t", 1)] == list(range(100))
    assert list(s.iter_messages("t", 1, 50, 50)) == []
    assert [m.queue_offset for m in s.iter_messages("t", 1, 95, 1000)] == list(range(95, 100))
    assert [m.queue_offset for m in s.iter_messages("t", 1, 0, 7, batch=3)] == list(range(7))


def test_topics_create_and_auto_create(open_store):
    s = open_store()
    s.create_topic("eight")
    s.put("auto", b"x")
    assert s.topics() == {"eight": 8, "auto": 4}
    s.create_topic("eight", queues=8)           # no-op
    s.create_topic("eight", queues=10)          # extend
    assert s.topics()["eight"] == 10
    with pytest.raises(errors.InvalidArgumentError):
        s.create_topic("eight", queues=3)
    for bad in ("", "a/b", "x" * 256, ".", "..", "nul\0", 5):
        with pytest.raises(errors.InvalidTopicError):
            s.create_topic(bad)
    with pytest.raises(errors.InvalidTopicError):
        s.put("SCHEDULE_TOPIC_XXXX", b"x")
    s.close()
    s2 = open_store(auto_create_topics=False)
    assert s2.topics() == {"eight": 10, "auto": 4}     # persisted
    with pytest.raises(errors.TopicNotFoundError):
        s2.put("nope", b"x")
    with pytest.raises(errors.TopicNotFoundError):
        s2.get("nope", 0, 0)


def _snapshot(s):
    return (s.commitlog.end_position, s.commitlog.last_index,
            {t: [s.max_offset(t, q) for q in range(n)] for t, n in s.topics().items()})


def test_bad_input_changes_nothing(open_store):
    s = open_store(max_batch_messages=10, max_batch_bytes=1000, max_get_messages=100)
    s.put_batch("t", [b"a"] * 5)
    before = _snapshot(s)
    rr_before = s.put_batch("t", [b"probe"]).queue_ids[0]
    before = _snapshot(s)
    bad_calls = [
        (errors.BatchTooLargeError, lambda: s.put_batch("t", [b"a"] * 11)),
        (errors.BatchTooLargeError, lambda: s.put_batch("t", [b"a" * 600] * 2)),
        (errors.InvalidArgumentError, lambda: s.put_batch("t", [], queue_id=4)),
        (errors.InvalidArgumentError, lambda: s.put_batch("t", b"notalist")),
        (errors.InvalidArgumentError, lambda: s.put_batch("t", [b"a", 5])),
        (errors.InvalidQueueError, lambda: s.put("t", b"a", queue_id=4)),
        (errors.InvalidQueueError, lambda: s.put("t", b"a", queue_id=-1)),
        (errors.InvalidDelayLevelError, lambda: s.put("t", b"a", delay_level=19)),
        (errors.InvalidDelayLevelError, lambda: s.put("t", b"a", delay_level=-1)),
        (errors.InvalidArgumentError, lambda: s.put_batch("t", [b"a"] * 3, tags=["x"])),
        (errors.InvalidArgumentError, lambda: s.put("t", b"a", tags="x" * 300)),
        (errors.InvalidArgumentError, lambda: s.put("t", b"a", queue_id=1, sharding_key="k")),
        (errors.InvalidArgumentError, lambda: s.put("t", b"a", properties={"REAL_TOPIC": "x"},
                                                    delay_level=1)),
        (errors.MessageTooLargeError, lambda: s.put("t", b"a" * (s.config.max_message_bytes + 1))),
        (errors.InvalidTopicError, lambda: s.put("bad/topic", b"a")),
    ]
    for exc, call in bad_calls:
        with pytest.raises(exc):
            call()
        assert _snapshot(s) == before
    # an empty batch is a no-op (any iterable is a batch), not an error: nothing changes
    assert len(s.put_batch("t", [])) == 0
    assert _snapshot(s) == before
    # round-robin position unchanged by the failed puts
    assert s.put_batch("t", [b"next"]).queue_ids[0] == (rr_before + 1) % 4


def test_get_ranges_and_errors(open_store):
    s = open_store(max_get_messages=100)
    s.put_batch("t", [b"m"] * 10, queue_id=0)
    assert len(s.get("t", 0, 0, 100)) == 10
    assert s.get("t", 0, 10) == []                      # caught up
    with pytest.raises(errors.OffsetOutOfRangeError) as ei:
        s.get("t", 0, 11)
    assert (ei.value.min_offset, ei.value.max_offset) == (0, 10)
    with pytest.raises(errors.OffsetOutOfRangeError):
        s.get("t", 0, -1)
    with pytest.raises(errors.InvalidQueueError):
        s.get("t", 4, 0)
    with pytest.raises(errors.InvalidArgumentError):
        s.get("t", 0, 0, 0)
    with pytest.raises(errors.InvalidArgumentError):
        s.get("t", 0, 0, 101)
    with pytest.raises(errors.InvalidArgumentError):
        s.get("t", 0, "0")


def test_consume_queue_view_zero_copy(open_store):
    s = open_store()
    res = s.put_batch("t", [b"x" * 10] * 20, queue_id=3, tags="A")
    v = s.consume_queue("t", 3, 0)
    assert v.dtype.names == ("position", "size", "tag_hash") and v.dtype.itemsize == 20
    assert not v.flags.writeable and not v.flags.owndata
    n = min(20, s.config.consume_queue_file_entries)
    assert list(v["position"][:n]) == list(res.positions[:n])
    assert len(set(v["tag_hash"][:n].tolist())) == 1


def test_stats(open_store):
    s = open_store()
    s.put_batch("t", [b"x"] * 7)
    s.get("t", 0, 0)
    st = s.stats()
    assert st["messages_put"] == 7 and st["messages"] == 7 and st["topics"] == 1
    assert st["dispatched_position"] == st["committed_position"] == st["end_position"]
    assert st["gets"] == 1 and st["messages_got"] == 2


def test_rejected_first_put_does_not_create_topic(open_store):
    s = open_store()
    with __import__("pytest").raises(errors.MessageTooLargeError):
        s.put("fresh", b"x" * (s.config.max_message_bytes + 1))
    with __import__("pytest").raises(errors.InvalidArgumentError):
        s.put_batch("fresh2", [b"a", None])
    assert s.topics() == {}
    s.close()
    assert open_store().topics() == {}
