"""What users trip over in the store API: put_batch takes any iterable and an empty batch is a
no-op; one naming scheme with units last (the old names warn); wrong types are TypeErrors;
the disk-full gate follows a burst; a long-poll get."""
import threading
import time
import warnings

import pytest

from quorumlog import errors


def test_put_batch_takes_any_iterable(open_store):
    s = open_store(max_batch_messages=100)
    r = s.put_batch("t", (b"m%d" % i for i in range(10)), queue_id=0)       # a generator
    assert len(r) == 10 and list(r.queue_offsets) == list(range(10))
    r = s.put_batch("t", (b"a", bytearray(b"b")), queue_id=0)             # a tuple
    assert list(r.queue_offsets) == [10, 11]
    r = s.put_batch("t", map(bytes, [b"x", b"y"]), queue_id=0)            # any iterator
    assert [m.body for m in s.get("t", 0, 10, 10)] == [b"a", b"b", b"x", b"y"]

    def endless():
        while True:
            yield b"z"
    with pytest.raises(errors.BatchTooLargeError):                        # not exhausted
        s.put_batch("t", endless())
    for one in (b"one body", "text", 5):
        with pytest.raises(errors.InvalidTypeError) as ei:
            s.put_batch("t", one)
        assert isinstance(ei.value, TypeError)
    assert s.max_offset("t", 0) == 14


def test_empty_batch_is_a_noop(open_store):
    s = open_store()
    end = s.commitlog.end_position
    for empty in ([], (), iter([])):
        r = s.put_batch("fresh", empty)
        assert len(r) == 0 and list(r) == [] and r.first_index == s.commitlog.last_index + 1
    assert s.commitlog.end_position == end
    assert s.topics() == {}                              # no topic auto-created
    with pytest.raises(errors.InvalidTopicError):         # the arguments are still checked
        s.put_batch("bad/topic", [])
    with pytest.raises(errors.QueueTypeError):
        s.put_batch("t", [], queue_id="1")


def test_one_naming_scheme_units_last(open_store):
    s = open_store()
    r = s.put("t", b"body", queue_id=1, born_timestamp_ms=1234)
    (m,) = s.get("t", 1, r.queue_offset)
    assert r.store_timestamp_ms == m.store_timestamp_ms and m.born_timestamp_ms == 1234
    b = s.put_batch("t", [b"a", b"b"], queue_id=1, born_timestamps_ms=[5, 6])
    assert b.store_timestamp_ms == b[0].store_timestamp_ms
    assert [m.born_timestamp_ms for m in s.get("t", 1, 1)] == [5, 6]
    req = s.prepare_put("t", [b"c"], queue_id=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # the new names do not warn
        assert r.store_timestamp_ms and b.store_timestamp_ms
    for obj, value in ((r, r.store_timestamp_ms), (b, b.store_timestamp_ms)):
        with pytest.warns(DeprecationWarning, match="store_timestamp_ms"):
            assert obj.store_timestamp == value          # the old name: same value, warns
    assert r._fields[-1] == "store_timestamp_ms"
    assert isinstance(type(req).__dict__["store_timestamp"], property)   # alias kept


def test_wrong_types_are_type_errors(open_store):
    s = open_store()
    s.put("t", b"x", queue_id=0)
    calls = [
        (errors.QueueTypeError, lambda: s.put("t", b"a", queue_id="1")),
        (errors.QueueTypeError, lambda: s.put_batch("t", [b"a"], queue_id=1.0)),
        (errors.QueueTypeError, lambda: s.get("t", "0", 0)),
        (errors.TopicTypeError, lambda: s.put(5, b"a")),
        (errors.TopicTypeError, lambda: s.get(b"t", 0, 0)),
        (errors.InvalidTypeError, lambda: s.get("t", 0, "0")),
        (errors.InvalidTypeError, lambda: s.get("t", 0, 0, "3")),
        (errors.InvalidTypeError, lambda: s.get("t", 0, 0, wait_ms=1.5)),
        (errors.InvalidTypeError, lambda: s.put("t", b"a", delay_level="1")),
        (errors.InvalidTypeError, lambda: s.put("t", "text body")),
        (errors.InvalidTypeError, lambda: s.put("t", b"a", sharding_key=1.5)),
        (errors.InvalidTypeError, lambda: s.create_topic("u", queues="8")),
        (errors.InvalidTypeError, lambda: s.offset_for_timestamp("t", 0, "now")),
    ]
    for exc, call in calls:
        with pytest.raises(exc) as ei:
            call()
        assert isinstance(ei.value, TypeError), exc
        assert "outside" not in str(ei.value)            # not a range message for a type
    with pytest.raises(errors.QueueTypeError, match="must be an int, got str"):
        s.put("t", b"a", queue_id="1")


def test_disk_full_gate_follows_a_burst(open_store):
    used = [0.5]
    s = open_store(disk_usage=lambda path: used[0], disk_check_interval_ms=3_600_000,
                   disk_check_bytes=4096)
    s.put("t", b"x")
    used[0] = 0.95                      # the disk fills; no time passes for the interval
    accepted = 0
    with pytest.raises(errors.DiskFullError):
        for _ in range(1000):
            s.put("t", b"y" * 100)
            accepted += 1
    assert accepted * 200 < 4096 + 400  # within disk_check_bytes of records
    assert s.stats()["disk_used_ratio"] == 0.95 and s.disk_full
    used[0] = 0.6
    assert s.stats()["disk_used_ratio"] == 0.6      # stats measures now, not last time
    s.put("t", b"z")                                # and the gate opened again


def _deadline_wait(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not met before the deadline"
        time.sleep(0.005)


def test_long_poll_get_returns_when_messages_arrive(open_store):
    s = open_store()
    s.create_topic("t", queues=1)
    got = []
    t = threading.Thread(target=lambda: got.append(s.get("t", 0, 0, wait_ms=10_000)))
    t.start()
    try:
        _deadline_wait(lambda: s._waiters == 1)
        start = time.monotonic()
        s.put("t", b"hello", queue_id=0)
        t.join(10)
        assert not t.is_alive() and time.monotonic() - start < 5
        assert [m.body for m in got[0]] == [b"hello"]
    finally:
        t.join(10)


def test_long_poll_get_times_out_and_is_bounded(open_store):
    s = open_store(max_get_wait_ms=1000, max_get_waiters=1)
    s.create_topic("t", queues=1)
    start = time.monotonic()
    assert s.get("t", 0, 0, wait_ms=50) == []
    assert time.monotonic() - start >= 0.045
    with pytest.raises(errors.InvalidArgumentError):
        s.get("t", 0, 0, wait_ms=1001)
    errs = []

    def waiter():
        try:
            s.get("t", 0, 0, wait_ms=1000)
        except errors.LogClosedError as e:
            errs.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    try:
        _deadline_wait(lambda: s._waiters == 1)
        with pytest.raises(errors.TooManyWaitersError):
            s.get("t", 0, 0, wait_ms=100)
        s.close()                                   # wakes the waiter at once
        t.join(10)
        assert not t.is_alive() and len(errs) == 1
    finally:
        t.join(10)
