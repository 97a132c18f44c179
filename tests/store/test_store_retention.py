"""Retention at each threshold (seed 004) with an injected wall clock and disk usage:
expired segments at the delete_when hour, expired at once above 75 %, unexpired above 85 %,
writes rejected above 90 % and accepted again below; consume queues and min offsets follow;
readers holding messages of deleted segments stay safe."""
import time

import pytest

from quorumlog import errors

from store_support import cq_files

HOUR = 3_600_000


def at_local_hour(base_ms, hour, want=True):
    """The first whole hour at or after base_ms whose local hour is (or is not) `hour`."""
    t = base_ms
    while (time.localtime(t / 1000).tm_hour == hour) != want:
        t += HOUR
    return t


class Disk:
    def __init__(self, ratio=0.5):
        self.ratio = ratio
        self.fn = None

    def __call__(self, path):
        return self.fn() if self.fn else self.ratio


@pytest.fixture
def disk():
    return Disk()


def fill(s, n=6):
    """n segments' worth of messages in 2 queues; returns the last store timestamp."""
    ts = 0
    while len(s.commitlog.segments()) < n:
        ts = s.put_batch("t", [b"x" * 2000] * 8, queue_id=len(s.commitlog.segments()) % 2).store_timestamp_ms
    return ts


def test_nothing_deleted_when_young_or_off_hour(open_store, disk):
    s = open_store(disk_usage=disk, consume_queue_file_entries=16)
    ts = fill(s)
    nseg = len(s.commitlog.segments())
    off_hour = at_local_hour(ts + 73 * HOUR, 4, want=False)
    assert s.run_retention(off_hour) == 0                 # expired, but not 04:00, disk fine
    four = at_local_hour(ts, 4)
    if four - ts < 72 * HOUR:
        assert s.run_retention(four) == 0                 # 04:00 but nothing 72 h old
    assert len(s.commitlog.segments()) == nseg


def test_expired_deleted_at_delete_when_hour(open_store, disk):
    s = open_store(disk_usage=disk, consume_queue_file_entries=16)
    ts = fill(s)
    nseg = len(s.commitlog.segments())
    held = s.get("t", 0, 0, 3)                            # readers holding the oldest segment
    four = at_local_hour(ts + 73 * HOUR, 4)
    deleted = s.run_retention(four)
    assert deleted == nseg - 1                            # all but the active segment
    assert len(s.commitlog.segments()) == 1
    assert [m.body for m in held] == [b"x" * 2000] * 3    # still readable
    # queue 0 lived only in deleted segments: empty now; queue 1 has messages in the active one
    assert s.min_offset("t", 0) == s.max_offset("t", 0) > 0
    mn = s.min_offset("t", 1)
    assert 0 < mn < s.max_offset("t", 1)
    with pytest.raises(errors.OffsetOutOfRangeError) as ei:
        s.get("t", 1, 0)
    assert ei.value.min_offset == mn
    assert s.get("t", 1, mn, 1)[0].queue_offset == mn
    assert s.get("t", 1, mn - 1 + 1, 1)[0].position >= s.commitlog.min_position
    assert next(iter(s.iter_messages("t", 1))).queue_offset == mn   # iterator skips deleted
    assert cq_files(s.path, "t", 0)[0] != "%020d" % 0     # consume-queue files followed
    s.close()
    s = open_store(disk_usage=disk, consume_queue_file_entries=16)
    assert s.min_offset("t", 1) == mn                     # and after reopen


def test_above_75_percent_deletes_expired_at_once(open_store, disk):
    s = open_store(disk_usage=disk)
    ts = fill(s)
    off_hour = at_local_hour(ts + 73 * HOUR, 4, want=False)
    disk.ratio = 0.80
    assert s.run_retention(at_local_hour(ts + HOUR, 4, want=False)) == 0   # not expired yet
    assert s.run_retention(off_hour) >= 1


def test_above_85_percent_deletes_unexpired_until_below(open_store, disk):
    s = open_store(disk_usage=disk)
    ts = fill(s, 8)
    disk.fn = lambda: (80 + len(s.commitlog.segments())) / 100     # 8 segments: 88 %
    now = at_local_hour(ts, 4, want=False)                      # nothing is expired
    deleted = s.run_retention(now)
    assert deleted == 3                                           # 88 -> 87 -> 86 -> 85 %
    assert len(s.commitlog.segments()) == 5


def test_above_90_percent_rejects_writes_until_space_returns(open_store, disk):
    s = open_store(disk_usage=disk, disk_check_interval_ms=0)
    s.put("t", b"ok", queue_id=0)
    end = s.commitlog.end_position
    disk.ratio = 0.95
    with pytest.raises(errors.DiskFullError):
        s.put("t", b"no", queue_id=0)
    with pytest.raises(errors.DiskFullError):
        s.put_batch("t", [b"no"] * 3)
    assert s.commitlog.end_position == end and s.max_offset("t", 0) == 1
    assert s.stats()["disk_full"]
    assert [m.body for m in s.get("t", 0, 0)] == [b"ok"]           # reads still work
    disk.ratio = 0.89
    assert s.put("t", b"again", queue_id=0).queue_offset == 1
    assert not s.stats()["disk_full"]


def test_disk_check_is_rate_limited(open_store, disk):
    clock = [0.0]
    s = open_store(disk_usage=disk, disk_check_interval_ms=1000, monotonic=lambda: clock[0])
    disk.ratio = 0.95
    s.put("t", b"cached ratio still fine", queue_id=0)     # measured at open: 50 %
    clock[0] += 1.5
    with pytest.raises(errors.DiskFullError):
        s.put("t", b"x", queue_id=0)


def test_disk_full_while_dispatching_stalls_reads_not_puts(open_store, monkeypatch):
    """A consume-queue file cannot be preallocated: the put (already in the log) succeeds,
    the message becomes readable once dispatch can go on."""
    s = open_store()
    real = s._dispatch_slow

    def full(*a):
        raise errors.DiskFullError("no space for a consume-queue file")

    monkeypatch.setattr(s, "_dispatch_slow", full)
    r = s.put("t", b"first", queue_id=0)            # new queue: needs the slow path
    b = s.put_batch("t", [b"second", b"third"], queue_id=0)
    assert (r.queue_offset, list(b.queue_offsets)) == (0, [1, 2])
    assert s.max_offset("t", 0) == 0 and s.stats()["dispatch_stalls"] >= 1
    monkeypatch.setattr(s, "_dispatch_slow", real)
    assert [m.body for m in s.get("t", 0, 0, 10)] == [b"first", b"second", b"third"]


def test_expiry_reads_the_store_timestamp_from_the_header(store_dir, disk):
    """Deciding whether a segment expired reads the next segment's first record header only:
    no whole-record decode (a body copy of up to max_message_bytes per check)."""
    from quorumlog.commitlog import CommitLog
    from quorumlog.config import load_config
    from quorumlog.store import MessageStore

    decoded = []

    class CountingLog(CommitLog):
        def decode_at(self, position):
            decoded.append(position)
            return super().decode_at(position)

    cfg = load_config(None, {}, segment_size_bytes=1 << 16, consume_queue_file_entries=16,
                      background=False)
    s = MessageStore(store_dir, cfg, disk_usage=disk, commitlog_factory=CountingLog)
    try:
        ts = fill(s)
        nseg = len(s.commitlog.segments())
        decoded.clear()
        assert s.run_retention(at_local_hour(ts + 73 * HOUR, 4)) == nseg - 1
        assert decoded == []
        # and the age test is still right: young segments stay even when expired ones
        # would go at once (disk above disk_clean_ratio)
        ts = fill(s, 4)
        disk.ratio = 0.8
        assert s.run_retention(ts + HOUR) == 0
        assert s.run_retention(ts + 73 * HOUR) == 3
        assert decoded == []
    finally:
        s.close()
