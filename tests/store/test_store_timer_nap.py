"""A replicated store's timer thread naps while its log stands still (message_store.py
_timer_loop): it backs off up to the retention interval instead of turning every second
(64 idle groups of a process), and a commit (apply_committed) wakes it at once, so the
key index and the dispatch checkpoint follow a log that moves again without the nap's
delay."""
import time
from quorumlog.testing.faults.cluster import wait_for

PERIOD_MS = 20          # schedule_interval_ms: the timer's period while the log moves
NAP_MS = 2000           # retention_interval_ms: the longest nap of a still log


def _until(cond, timeout=10.0):
    assert wait_for(cond, timeout, interval=0.005), "condition not reached before the deadline"


def _turns(s):
    return s.stats()["timer_turns"]


def _open(open_store):
    return open_store(replicated=True, background=True, schedule_interval_ms=PERIOD_MS,
                      retention_interval_ms=NAP_MS)


def test_timer_of_a_still_log_backs_off_past_a_second(open_store):
    s = _open(open_store)
    _until(lambda: _turns(s) >= 8)     # 20, 40, ... 1280 ms: the doubling reached ~2.5 s
    t0, n0 = time.monotonic(), _turns(s)
    time.sleep(1.5)
    # at period it would turn ~75 times in 1.5 s, at a second's back-off once or twice
    assert _turns(s) - n0 <= 1 or time.monotonic() - t0 > 3.0


def test_commit_wakes_a_napping_timer(open_store):
    s = _open(open_store)
    _until(lambda: _turns(s) >= 8)
    n0 = _turns(s)
    r = s.put("t", b"x", queue_id=0)
    s.apply_committed(r.index)
    _until(lambda: _turns(s) > n0, timeout=NAP_MS / 1000 / 2)   # well before the nap ends
    # moving again: the next turns come at the period
    _until(lambda: _turns(s) >= n0 + 3, timeout=NAP_MS / 1000 / 2)
    assert _turns(s) >= n0 + 3


def test_close_stops_a_napping_timer(open_store):
    s = _open(open_store)
    _until(lambda: _turns(s) >= 8)
    t0 = time.monotonic()
    s.close()
    assert time.monotonic() - t0 < NAP_MS / 1000
