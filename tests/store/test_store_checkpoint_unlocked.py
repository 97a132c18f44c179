"""The store's timer thread writes its consume-queue checkpoint (msyncs, queue_offsets.json)
without holding the store's lock: a put and a read complete while that write is held up (a
slow disk; on a replica the put path is the event loop), the checkpoint still lands after,
and a failed msync there stops the durable dispatched position as on the put path."""
import errno
import threading
import time

import pytest

from quorumlog import _consumequeue, errors
from quorumlog.store import dispatch

TIMER = "quorumlog-store-timer"
# (retention off whatever the disk holds: past disk_clean_ratio its runs checkpoint under
# the lock -- not what these tests are about)
FAST = dict(background=True, dispatch_checkpoint_interval_ms=20, schedule_interval_ms=10,
            disk_clean_ratio=1.0, disk_force_clean_ratio=1.0, disk_reject_ratio=1.0,
            delete_when="%02d" % ((time.localtime().tm_hour + 12) % 24))


@pytest.fixture(autouse=True)
def no_leftover_fault():
    yield
    _consumequeue._fail_msync(0)


def _until(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


# retention running every turn (the disk "past" disk_clean_ratio): it must not checkpoint
# under the lock either
RETAINING = dict(FAST, disk_clean_ratio=0.0001, retention_interval_ms=10)


@pytest.mark.parametrize("settings", [FAST, RETAINING], ids=["plain", "retention"])
def test_put_and_read_go_on_while_a_checkpoint_waits_on_the_disk(open_store, monkeypatch,
                                                                 settings):
    armed, entered, release = threading.Event(), threading.Event(), threading.Event()
    real = dispatch.write_checked_json

    def slow_disk(path, obj):
        if armed.is_set() and not release.is_set():
            entered.set()
            release.wait(20)
        real(path, obj)
    monkeypatch.setattr(dispatch, "write_checked_json", slow_disk)
    s = open_store(**settings)
    done = {}

    def put(key, body):
        done[key] = s.put("t", body, queue_id=0)
        done[key + " read"] = [m.body for m in s.get("t", 0, 0, 10)]
    try:
        first = s.put("t", b"first", queue_id=0)
        # the first put's checkpoint lands before arming: the summary is written only when
        # it changes, so the write held below is one after the second put (armed earlier,
        # the first put's could be held while the second thread had not put yet, and the
        # third put then landed before the second: [first, third] read, under load)
        _until(lambda: s.commitlog.dispatched_position > first.position,
               what="the first put's checkpoint")
        armed.set()            # from now on a checkpoint's summary write waits on the "disk"
        ths = [threading.Thread(target=put, args=("second", b"second"))]
        ths[0].start()
        assert entered.wait(10), "no checkpoint after the second put"
        # a checkpoint is held up in its write: the store goes on (on the old code it held
        # the store's lock meanwhile, or the write was the put's own)
        ths.append(threading.Thread(target=put, args=("third", b"third")))
        ths[1].start()
        ths[1].join(5)
        alive = ths[1].is_alive()
        release.set()
        for th in ths:
            th.join(10)
        assert not alive, "a put waited for a checkpoint's disk write"
        assert done["third read"] == [b"first", b"second", b"third"]
        # the checkpoints go on once the disk does: the puts are durable in the queues too
        end = done["third"].position + 1
        _until(lambda: s.commitlog.dispatched_position >= end, what="the checkpoint")
    finally:
        release.set()
    s.close()
    s = open_store(**FAST)
    assert [m.body for m in s.get("t", 0, 0, 10)] == [b"first", b"second", b"third"]


def test_a_failed_msync_in_the_background_checkpoint_stops_the_durable_position(open_store):
    s = open_store(**FAST)
    s.put("t", b"a", queue_id=0)
    _until(lambda: s.commitlog.dispatched_position > 0, what="a first checkpoint")
    _consumequeue._fail_msync(errno.EIO)
    durable = s.commitlog.dispatched_position
    s.put("t", b"b", queue_id=0)
    _until(lambda: s.stats()["dispatch_durable_failed"], what="the failed msync noticed")
    assert s.commitlog.dispatched_position == durable
    _consumequeue._fail_msync(0)
    s.put("t", b"c", queue_id=0)                # puts and reads go on
    assert [m.body for m in s.get("t", 0, 0, 10)] == [b"a", b"b", b"c"]
    s.flush()                # msync would succeed now: not trusted, the position stays
    assert s.commitlog.dispatched_position == durable
