"""Mid-log corruption: a bad record with intact records after it is never silently dropped.

At open (records after the checkpoint's flushed_position are scanned): CorruptLogError that
names the segment file and the byte offset inside it, and every file is left unchanged.
Records before flushed_position are trusted at open, and a read or verify() of the damaged
one raises CorruptLogError.
"""
import os

import pytest

from quorumlog import errors, format as qf

from cl_support import SEG, open_log, store_files


LOG_KW = dict(flush="async", flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
              preallocate_next=False)


def build(path, n_after, body=1000):
    """Checkpoint, then `n_after` more records (not flushed); crash. Returns their (i, pos)."""
    log = open_log(path, **LOG_KW)
    for _ in range(5):
        log.append("base", b"\x01" * body, term=1)
    log.flush()
    log.checkpoint()
    after = [log.append("t", bytes([k % 250 + 1]) * body, term=2)[:2] for k in range(n_after)]
    sizes = {i: log.size_of(i) for i, _ in after}
    log.crash_for_testing()
    return after, sizes


def damage(path, position, data):
    seg = position - position % SEG
    with open(path / "commitlog" / qf.segment_name(seg), "r+b") as f:
        f.seek(position - seg)
        f.write(data)


def expect_corrupt_open(path, position):
    before = store_files(path)
    abort_before = (path / "abort").exists()
    with pytest.raises(errors.CorruptLogError) as ei:
        open_log(path, **LOG_KW)
    e = ei.value
    seg = position - position % SEG
    assert e.path is not None and os.path.basename(e.path) == qf.segment_name(seg)
    assert e.offset == position - seg
    assert qf.segment_name(seg) in str(e) and str(position - seg) in str(e)
    assert store_files(path) == before, "a failed open changed the store"
    assert (path / "abort").exists() == abort_before
    # the failed open released the LOCK: the same error again, not LockedError
    with pytest.raises(errors.CorruptLogError):
        open_log(path, **LOG_KW)


@pytest.mark.parametrize("where", ["header", "crc", "body", "last_byte"])
def test_bit_flip_with_intact_records_after(tmp_path, where):
    path = tmp_path / "s"
    after, sizes = build(path, 6)
    i, pos = after[2]
    at = {"header": pos + 20, "crc": pos + 1, "body": pos + 500,
          "last_byte": pos + sizes[i] - 1}[where]
    with open(path / "commitlog" / qf.segment_name(0), "rb") as f:
        f.seek(at)
        b = f.read(1)[0]
    damage(path, at, bytes([b ^ 0x10]))
    expect_corrupt_open(path, pos)


def test_zeroed_record_with_intact_records_after(tmp_path):
    """A hole (a record that reads back as zeros) looks like the end of the log to a scan;
    the raft index's entries beyond it prove it is not."""
    path = tmp_path / "s"
    after, sizes = build(path, 5)
    i, pos = after[1]
    damage(path, pos, bytes(sizes[i]))
    expect_corrupt_open(path, pos)


def test_corruption_with_intact_first_record_in_a_later_segment(tmp_path):
    path = tmp_path / "s"
    after, sizes = build(path, 90)            # ~90 KiB: crosses into segment 1
    in_seg1 = [(i, p) for i, p in after if p >= SEG]
    assert in_seg1 and in_seg1[0][1] == SEG
    last_in_seg0 = [(i, p) for i, p in after if p < SEG][-1]
    i, pos = last_in_seg0
    damage(path, pos + 200, b"\xff\xfe")
    # and zero the raft index after the checkpointed records, so only the later segment's
    # first record proves the damage
    f = path / "index" / qf.index_file_name(1)
    idx = bytearray(f.read_bytes())
    idx[5 * 24:] = bytes(len(idx) - 5 * 24)
    f.write_bytes(bytes(idx))
    expect_corrupt_open(path, pos)


def test_damage_before_flushed_position_is_found_on_read_and_verify(tmp_path):
    path = tmp_path / "s"
    with open_log(path, **LOG_KW) as log:
        for k in range(10):
            log.append("t", bytes([k + 1]) * 300, term=1)
        pos4 = log.position_of(4)
    damage(path, pos4 + 150, b"\x00\x00")
    with open_log(path, **LOG_KW) as log:       # trusted at open: before flushed_position
        assert log.last_index == 10
        with pytest.raises(errors.CorruptLogError) as ei:
            log.record(4)
        assert ei.value.offset == pos4
        with pytest.raises(errors.CorruptLogError):
            log.record_at(pos4)
        # (read() is a zero-copy view and not CRC-checked: the receiving follower checks)
        with pytest.raises(errors.CorruptLogError) as ei:
            log.verify()
        assert ei.value.offset == pos4 and ei.value.path.endswith(qf.segment_name(0))
        assert bytes(log.record(5).body) == bytes([5]) * 300
        log.verify(from_position=log.position_of(5))


def test_tampered_position_field_is_corruption(tmp_path):
    """A record whose CRC is valid but whose position field is wrong (copied from elsewhere)
    does not verify at its place."""
    path = tmp_path / "s"
    after, sizes = build(path, 4)
    i, pos = after[1]
    seg = bytearray((path / "commitlog" / qf.segment_name(0)).read_bytes())
    import struct
    struct.pack_into("<Q", seg, pos + 32, pos + 8)
    struct.pack_into("<I", seg, pos, qf.crc32c(bytes(seg[pos + 4:pos + sizes[i]])))
    damage(path, pos, bytes(seg[pos:pos + 96]))
    expect_corrupt_open(path, pos)


@pytest.mark.parametrize("how", ["deleted", "short"])
def test_missing_durable_segment_is_corruption(tmp_path, how):
    """A clean checkpoint says every byte before flushed_position is durable; a segment that
    should hold such bytes but is gone (or cut short) is lost committed data, never a torn
    tail to be truncated silently."""
    path = tmp_path / "s"
    with open_log(path, **LOG_KW) as log:
        while log.end_position < 2 * SEG + 1000:
            log.append("t", b"\x03" * 2000, term=1)
        last_seg = log.end_position - log.end_position % SEG
    f = path / "commitlog" / qf.segment_name(last_seg)
    if how == "deleted":
        f.unlink()
    else:
        os.truncate(f, 500)
    before = store_files(path)
    with pytest.raises(errors.CorruptLogError) as ei:
        open_log(path, **LOG_KW)
    assert qf.segment_name(last_seg) in str(ei.value)
    assert store_files(path) == before
