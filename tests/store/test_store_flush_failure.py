"""The store over a log whose flush fails (EIO injected by the qlsys.h hook): the put waiting
for that flush fails with LogFailedError, later puts are refused at once (no hang), reads go
on; a consume-queue msync failing stops the durable dispatched position (never advanced over
entries that may not be on disk) without failing puts."""
import errno

import pytest

from quorumlog import _commitlog, _consumequeue, errors

QUIET = dict(flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
             dispatch_checkpoint_interval_ms=3_600_000)


@pytest.fixture(autouse=True)
def no_leftover_fault():
    yield
    _commitlog._fail_msync(0)
    _consumequeue._fail_msync(0)


@pytest.mark.timeout(120)
def test_sync_put_fails_and_later_puts_are_refused(open_store, store_dir):
    s = open_store(flush="sync", **QUIET)
    r = s.put("t", b"acked", queue_id=0)
    _commitlog._fail_msync(errno.EIO)
    with pytest.raises(errors.LogFailedError):
        s.put("t", b"not acked", queue_id=0)
    for _ in range(3):
        with pytest.raises(errors.LogFailedError):
            s.put("t", b"refused", queue_id=0)
        with pytest.raises(errors.LogFailedError):
            s.put_batch("t", [b"refused"] * 3, queue_id=0)
    assert [m.body for m in s.get("t", 0, 0, 10)] == [b"acked"]
    s.close()
    s = open_store(flush="sync", **QUIET)
    assert s.get("t", 0, r.queue_offset, 1)[0].body == b"acked"
    assert s.put("t", b"after reopen", queue_id=0).queue_offset >= 1


def test_consume_queue_msync_failure_stops_the_durable_dispatched_position(open_store):
    s = open_store(**QUIET)
    s.put("t", b"a", queue_id=0)
    s.flush()
    durable = s.commitlog.dispatched_position
    s.put("t", b"b", queue_id=0)
    _consumequeue._fail_msync(errno.EIO)
    s.flush()                                   # the log flushes; the queue file does not
    assert s.stats()["dispatch_durable_failed"]
    assert s.commitlog.dispatched_position == durable
    s.put("t", b"c", queue_id=0)                # puts and reads go on
    s.flush()                                   # msync would succeed now: not trusted
    assert s.commitlog.dispatched_position == durable
    assert [m.body for m in s.get("t", 0, 0, 10)] == [b"a", b"b", b"c"]
    s.close()
    s = open_store(**QUIET)                     # re-dispatched from the durable position
    assert [m.body for m in s.get("t", 0, 0, 10)] == [b"a", b"b", b"c"]
