"""The async flusher thread parks while its log is clean (commitlog_flush.pxi flush_loop):
an idle log costs no wake-ups (64 idle groups of a process woke their flushers 320 times a
second), and every kind of append after the pause -- leader appends, batches, a follower's
replicated records -- is still flushed within flush_interval_ms of it, without a waiter.
"""
import time

from cl_support import open_log
from quorumlog.testing.faults.cluster import wait_for

INTERVAL_MS = 20


def _until(cond, timeout=10.0):
    assert wait_for(cond, timeout, interval=0.005), "condition not reached before the deadline"


def _parked(log):
    return log.stats()["flush_thread_parked"]


def test_idle_flusher_parks_and_stops_waking(tmp_path):
    with open_log(tmp_path / "s", flush_interval_ms=INTERVAL_MS) as log:
        _until(lambda: _parked(log))
        woke = log.stats()["flush_thread_wakeups"]
        time.sleep(10 * INTERVAL_MS / 1000)      # ten intervals of an idle log
        assert _parked(log)
        assert log.stats()["flush_thread_wakeups"] == woke


def test_append_after_the_pause_is_flushed_in_the_background(tmp_path):
    with open_log(tmp_path / "s", flush_interval_ms=INTERVAL_MS) as log:
        for k in range(3):
            _until(lambda: _parked(log))
            log.append("t", b"x" * (100 + k), queue_id=0, queue_offset=k, term=1)
            end = log.end_position
            # no waiter asks (async mode): only the woken background thread flushes it
            _until(lambda: log.flushed_position == end)
            assert log.stats()["flushes"] == k + 1


def test_batch_and_control_appends_wake_the_flusher(tmp_path):
    from quorumlog import format as qf
    with open_log(tmp_path / "s", flush_interval_ms=INTERVAL_MS) as log:
        for append in (lambda: log.append_batch("t", [b"a" * 50] * 10, term=1),
                       lambda: log.append_control(qf.TYPE_NOOP, term=1)):
            _until(lambda: _parked(log))
            flushes, before = log.stats()["flushes"], log.end_position
            append()
            assert log.end_position > before
            # no waiter asks (async mode): only the woken background thread flushes it
            _until(lambda: log.flushed_position == log.end_position)
            assert log.stats()["flushes"] > flushes


def test_replicated_append_wakes_a_parked_follower_flusher(tmp_path):
    with open_log(tmp_path / "leader", flush_interval_ms=3_600_000) as leader, \
            open_log(tmp_path / "follower", flush_interval_ms=INTERVAL_MS) as follower:
        for k in range(5):
            leader.append("t", b"m%d" % k, queue_id=0, queue_offset=k, term=1)
        raw, n = leader.read(1, 5)
        _until(lambda: _parked(follower))
        assert follower.append_replicated(bytes(raw)) == n
        _until(lambda: follower.flushed_position == follower.end_position)


def test_a_waiter_wakes_a_parked_flusher(tmp_path):
    # sync-style group commit: wait_flushed asks the (parked) thread and gets its flush
    with open_log(tmp_path / "s", flush_interval_ms=INTERVAL_MS) as log:
        log.append("t", b"x", queue_id=0, queue_offset=0, term=1)
        assert log.wait_flushed(log.end_position, timeout=10)
        _until(lambda: _parked(log))
        log.append("t", b"y", queue_id=0, queue_offset=1, term=1)
        assert log.wait_flushed(log.end_position, timeout=10)


def test_close_stops_a_parked_flusher(tmp_path):
    log = open_log(tmp_path / "s", flush_interval_ms=INTERVAL_MS)
    _until(lambda: _parked(log))
    t0 = time.monotonic()
    log.close()
    assert time.monotonic() - t0 < 5      # (a missed wake-up would hang here: join)
