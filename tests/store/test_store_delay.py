"""Delay levels: stored under the schedule topic, delivered to the real topic when due, progress
survives restarts without loss or re-delivery (including a crash between re-put and save)."""
import pytest

from quorumlog import errors
from quorumlog.store import SCHEDULE_TOPIC


def test_delay_delivery(open_store):
    s = open_store()
    s.create_topic("t", queues=2)
    r = s.put("t", b"later", delay_level=2, queue_id=1, tags="T", keys=("k",),
              properties={"p": "v"})
    assert (r.topic, r.queue_id) == (SCHEDULE_TOPIC, 1)
    assert SCHEDULE_TOPIC not in s.topics()
    assert s.max_offset("t", 1) == 0
    assert s.stats()["delayed_pending"] == 1
    assert s.deliver_due(r.store_timestamp_ms + 4999) == 0       # level 2 = 5 s
    assert s.deliver_due(r.store_timestamp_ms + 5000) == 1
    (m,) = s.get("t", 1, 0)
    assert (m.body, m.tags, m.keys) == (b"later", "T", ("k",))
    assert m.properties == {"p": "v", "SCHEDULE_OFFSET": "2:0"}
    assert s.deliver_due(r.store_timestamp_ms + 10**9) == 0      # delivered once
    assert s.stats()["delayed_pending"] == 0


def test_levels_are_independent_and_ordered(open_store):
    s = open_store(delay_levels="1s 10s")
    t0 = s.put("t", b"a10", delay_level=2, queue_id=0).store_timestamp_ms
    s.put_batch("t", [b"b1", b"c1"], delay_level=1, queue_id=0)
    assert s.deliver_due(t0 + 500) == 0
    n = s.deliver_due(t0 + 10**6 // 1000 + 5000)
    assert n == 2
    assert [m.body for m in s.get("t", 0, 0, 10)] == [b"b1", b"c1"]
    assert s.deliver_due(t0 + 10_000 + 5000) == 1
    assert [m.body for m in s.get("t", 0, 0, 10)] == [b"b1", b"c1", b"a10"]
    with pytest.raises(errors.InvalidDelayLevelError):
        s.put("t", b"x", delay_level=3)


def test_restart_neither_loses_nor_redelivers(open_store):
    s = open_store()
    ts = s.put_batch("t", [b"%d" % i for i in range(6)], delay_level=1, queue_id=0).store_timestamp_ms
    s.put("t", b"slow", delay_level=3, queue_id=0)
    assert s.deliver_due(ts + 1000) == 6
    s.close()
    s = open_store()
    assert s.deliver_due(ts + 1000) == 0                         # not again
    assert s.stats()["delayed_pending"] == 1
    s.close()
    s = open_store()
    assert s.deliver_due(ts + 60_000) == 1                       # not lost
    assert [m.body for m in s.get("t", 0, 0, 100)] == [b"%d" % i for i in range(6)] + [b"slow"]


def test_crash_between_delivery_and_progress_save(open_store, monkeypatch):
    s = open_store()
    ts = s.put_batch("t", [b"a", b"b"], delay_level=1, queue_id=0).store_timestamp_ms
    monkeypatch.setattr(s.schedule, "save", lambda: None)         # the save never happens
    assert s.deliver_due(ts + 1000) == 2
    s.crash_for_testing()
    s = open_store()
    assert s.deliver_due(ts + 1000) == 0                         # recovered from the log
    assert [m.body for m in s.get("t", 0, 0, 100)] == [b"a", b"b"]
    s.put("t", b"c", delay_level=1, queue_id=0)
    assert s.deliver_due(ts + 10**7) == 1


def test_timer_thread_delivers(open_store):
    import time
    s = open_store(background=True, delay_levels="1s", schedule_interval_ms=20)
    s.put("t", b"x", delay_level=1, queue_id=0)
    deadline = time.monotonic() + 10
    while s.max_offset("t", 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [m.body for m in s.get("t", 0, 0)] == [b"x"]
