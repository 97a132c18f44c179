"""A flush that fails with an I/O error (a device failing under the filesystem: msync returns
EIO once, as Linux reports a write-back error once) is never retried into success: the flush
raises LogFailedError, the flushed position stays, and the log refuses every write until it
is reopened; waiters fail at once instead of hanging. The failure is injected with the
qlsys.h hook (_commitlog._fail_msync), deterministically."""
import errno
import threading
import time

import pytest

from quorumlog import _commitlog, errors

from cl_support import open_log

QUIET = dict(flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
             preallocate_next=False)


@pytest.fixture(autouse=True)
def no_leftover_fault():
    yield
    _commitlog._fail_msync(0)


def test_failed_flush_is_never_retried_into_success(tmp_path):
    log = open_log(tmp_path / "s", **QUIET)
    log.append("t", b"durable", term=1)
    flushed = log.flush()
    log.append("t", b"lost?", term=1)
    _commitlog._fail_msync(errno.EIO)
    with pytest.raises(errors.LogFailedError) as ei:
        log.flush()
    assert ei.value.errno == errno.EIO and str(tmp_path / "s") in str(ei.value)
    assert log.flushed_position == flushed
    assert "EIO" in log.failure or "Input/output" in log.failure
    # the retry would succeed at the device level (the hook fails once): it must not happen
    with pytest.raises(errors.LogFailedError):
        log.flush()
    assert log.flushed_position == flushed
    for write in (lambda: log.append("t", b"x", term=1),
                  lambda: log.append_batch("t", [b"x"], term=1),
                  lambda: log.append_control(2, term=1),
                  lambda: log.wait_flushed(log.end_position, timeout=5),
                  lambda: log.checkpoint(),
                  lambda: log.truncate_after(1)):
        with pytest.raises(errors.LogFailedError):
            write()
    assert bytes(log.record(1).body) == b"durable"        # reads go on
    log.close()                                           # no flush, no clean checkpoint
    assert (tmp_path / "s" / "abort").exists()
    with open_log(tmp_path / "s", **QUIET) as log:
        assert log.unclean_open and log.failure is None
        assert bytes(log.record(1).body) == b"durable"
        log.append("t", b"again", term=1)                 # a reopened log writes again


def test_waiters_fail_instead_of_hanging(tmp_path):
    """A group-commit waiter whose flush fails gets LogFailedError at once."""
    log = open_log(tmp_path / "s", flush="sync", **QUIET)
    log.append("t", b"a", term=1)
    assert log.wait_flushed(log.end_position, timeout=30)
    _commitlog._fail_msync(errno.EIO)
    end = log.append("t", b"b", term=1)[1] + 200
    outcome = []

    def waiter():
        try:
            outcome.append(log.wait_flushed(min(end, log.end_position)))
        except errors.LogFailedError as exc:
            outcome.append(exc)

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a waiter hangs"
    assert len(outcome) == 3 and all(isinstance(o, errors.LogFailedError) for o in outcome)
    log.close()


def test_background_flush_failure_fails_the_log(tmp_path):
    """Async mode: the flusher's msync fails; the next append is refused."""
    log = open_log(tmp_path / "s", flush="async", flush_interval_ms=5,
                   checkpoint_interval_ms=3_600_000, preallocate_next=False)
    _commitlog._fail_msync(errno.EIO)
    log.append("t", b"a", term=1)
    deadline = time.monotonic() + 30
    while log.failure is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.failure is not None
    with pytest.raises(errors.LogFailedError):
        log.append("t", b"b", term=1)
    log.close()


def test_failed_index_sync_before_a_checkpoint_fails_the_log(tmp_path):
    """The checkpoint claims raft-index entries durable: their msync failing stops it."""
    log = open_log(tmp_path / "s", **QUIET)
    log.append("t", b"a", term=1)
    log.flush()
    _commitlog._fail_msync(errno.EIO)      # the next msync: the raft index before the checkpoint
    with pytest.raises(errors.LogFailedError):
        log.checkpoint()
    with pytest.raises(errors.LogFailedError):
        log.append("t", b"b", term=1)
    log.close()
