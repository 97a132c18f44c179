"""A process forked while a store is open (multiprocessing with fork, a PySpark worker daemon,
a broker that forks helpers) inherits the store's mappings and descriptors but none of its
threads. In the child the log may be read, refuses writes with a clear error, and the
store's close() only lets go of the child's references. (The store's other methods take
locks one of the parent's threads may have held at the fork: not for use in a child.) Before: the child's close joined the parent's
writer thread and hung for good; had it returned, it would have flushed, written a clean
checkpoint and removed the abort marker of a log the parent was still writing."""
import os
import time

import pytest

import quorumlog
from quorumlog.errors import ReadOnlyError


def _child(fn) -> int:
    """Run fn() in a forked child; its exit code (0: fn returned), bounded by a deadline."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.02)
        pytest.fail("the forked child did not finish within 30 s")
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def test_a_forked_child_reads_refuses_writes_and_lets_go_on_close(tmp_path):
    d = str(tmp_path / "s")
    s = quorumlog.open(d, segment_size_bytes=1 << 22, environ={})
    try:
        # big batches: the log's writer thread is running when the process forks
        s.put_batch("t", [b"x" * 1000] * 5000, queue_id=0)
        abort = os.path.join(d, "abort")
        assert os.path.exists(abort)
        assert not s.commitlog.inherited

        def child():
            # (the log itself, not the store's methods: those take the store's locks, which
            # one of the parent's threads may have held at the fork)
            log = s.commitlog
            assert log.inherited
            assert bytes(log.record_at(0)[-1000:]) == b"x" * 1000
            with pytest.raises(ReadOnlyError, match="forked"):
                log.append("t", b"from the child", term=0)
            s.close()
            assert log.closed
        assert _child(child) == 0
        assert os.path.exists(abort), "the child's close removed the parent's abort marker"
        r = s.put("t", b"after", queue_id=0)          # the parent goes on writing
        assert r.queue_offset == 5000
    finally:
        s.close()
    with quorumlog.open(d, environ={}) as s2:
        assert [bytes(m.body) for m in s2.get("t", 0, 4999, max_messages=2)] == [
            b"x" * 1000, b"after"]


def test_a_forked_child_exiting_with_the_store_open_leaves_it_to_the_parent(tmp_path):
    d = str(tmp_path / "s")
    s = quorumlog.open(d, segment_size_bytes=1 << 22, environ={})
    try:
        s.put_batch("t", [b"y" * 500] * 3000, queue_id=0)
        log = s.commitlog
        assert _child(lambda: log.crash_for_testing()) == 0
        assert _child(lambda: None) == 0
        s.put("t", b"still", queue_id=0)
    finally:
        s.close()
    with quorumlog.open(d, environ={}) as s2:
        assert bytes(s2.get("t", 0, 3000, max_messages=1)[0].body) == b"still"
