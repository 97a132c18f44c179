"""Overlapping flushes (commitlog_flush.pxi, issue 20): a flush may start while another one
is inside msync, each msyncs everything from the flushed position to the end it saw, and the
results are published in start order -- never a flushed position past a flush that failed
(Linux reports a write-back error to one msync only: a concurrent one may return 0 over the
lost pages). Truncation waits for the flushes in flight. One msync is held inside the
kernel call with the qlsys.h gate hook (_commitlog._gate_msync), so the overlap is
deterministic, not a race the test hopes to win."""
import errno
import threading
import time

import pytest

from quorumlog import _commitlog, errors

from cl_support import open_log

QUIET = dict(flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
             preallocate_next=False)
DEADLINE_S = 10.0


@pytest.fixture(autouse=True)
def no_leftover_hook():
    yield
    if _commitlog._gate_state() in (1, 2):
        _commitlog._gate_release(0)
    _commitlog._fail_msync(0)


def _until(cond, what):
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


class _Flush(threading.Thread):
    """log.flush() on a thread of its own; `.result` is its return value or exception."""

    def __init__(self, log):
        super().__init__(daemon=True)
        self.log, self.result, self.done = log, None, threading.Event()

    def run(self):
        try:
            self.result = self.log.flush()
        except BaseException as e:     # noqa: BLE001 -- handed to the test
            self.result = e
        self.done.set()


def _held_flush(log):
    """A flush whose msync is held in the gate."""
    _commitlog._gate_msync()
    a = _Flush(log)
    a.start()
    _until(lambda: _commitlog._gate_state() == 2, "the first flush to reach msync")
    return a


def test_a_flush_runs_while_another_is_inside_msync_and_publishes_after_it(tmp_path):
    log = open_log(tmp_path / "s", **QUIET)
    try:
        log.append("t", b"a" * 3000, term=1)
        a = _held_flush(log)
        end_a = log.end_position
        log.append("t", b"b" * 3000, term=1)
        b = _Flush(log)
        b.start()
        # b started (its range includes a's) while a is inside msync; it publishes after a
        _until(lambda: log.stats()["flushes_in_flight"] == 2, "the second flush to start")
        time.sleep(0.05)    # (b had every chance to publish early)
        assert not b.done.is_set() and log.flushed_position == 0
        _commitlog._gate_release(0)
        assert a.done.wait(DEADLINE_S) and b.done.wait(DEADLINE_S)
        assert a.result >= end_a and b.result == log.end_position
        assert log.flushed_position == log.end_position
        assert log.stats()["flushes"] == 2
    finally:
        log.close()


def test_a_flush_never_publishes_past_an_earlier_one_that_failed(tmp_path):
    log = open_log(tmp_path / "s", **QUIET)
    try:
        log.append("t", b"durable", term=1)
        flushed = log.flush()
        log.append("t", b"x" * 3000, term=1)
        a = _held_flush(log)
        log.append("t", b"y" * 3000, term=1)
        b = _Flush(log)
        b.start()
        time.sleep(0.05)
        _commitlog._gate_release(errno.EIO)     # a's msync fails; b's returned 0 meanwhile
        assert a.done.wait(DEADLINE_S) and b.done.wait(DEADLINE_S)
        assert isinstance(a.result, errors.LogFailedError)
        assert isinstance(b.result, errors.LogFailedError)
        assert log.flushed_position == flushed
    finally:
        log.close()


def test_truncation_waits_for_the_flush_in_flight(tmp_path):
    """A flush in flight would otherwise publish its end over the truncated log's new
    (unflushed) bytes."""
    log = open_log(tmp_path / "s", **QUIET)
    try:
        log.append("t", b"keep", term=1)
        log.flush()
        log.append("t", b"z" * 3000, term=2)
        log.append("t", b"z" * 3000, term=2)
        a = _held_flush(log)
        cut = threading.Thread(target=log.truncate_after, args=(1,), daemon=True)
        cut.start()
        time.sleep(0.05)
        assert cut.is_alive() and log.last_index == 3    # waits for a
        _commitlog._gate_release(0)
        assert a.done.wait(DEADLINE_S)
        cut.join(DEADLINE_S)
        assert not cut.is_alive() and log.last_index == 1
        assert log.flushed_position == log.end_position == log.position_of(1) + log.size_of(1)
        log.append("t", b"new", term=3)
        assert log.flushed_position < log.end_position     # the new tail is not flushed
        assert log.flush() == log.end_position
    finally:
        log.close()
