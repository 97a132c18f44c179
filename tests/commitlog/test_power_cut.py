"""A power cut in async mode: write-back may reach a later page and not an earlier one, so
damage after the checkpoint's flushed position followed by intact records is a torn tail
(cut there, the records after it dropped), not corruption. The device after the cut is
simulated by a copy of the store's files (another directory: another page cache, as a disk
image of the device is) with pages of the never-flushed tail zeroed out of order. The same
damage where the page cache survived (a killed process, the same directory in the same boot)
cannot come from lost write-back and is still refused as corruption."""
import os
import shutil

import pytest

from quorumlog import errors, format as qf

from cl_support import SEG, open_log

LOG_KW = dict(flush="async", flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
              preallocate_next=False)
PAGE = 4096


def crashed_log(path, n_after=14):
    """Flushed + checkpointed base, then `n_after` never-flushed records; kill -9."""
    log = open_log(path, **LOG_KW)
    for k in range(5):
        log.append("base", bytes([k + 1]) * 1000, term=1)
    log.flush()
    log.checkpoint()
    fp = log.flushed_position
    after = [log.append("t", bytes([k % 250 + 1]) * 1500, term=2)[:2] for k in range(n_after)]
    sizes = [log.size_of(i) for i, _ in after]
    log.crash_for_testing()
    return fp, [(i, p, n) for (i, p), n in zip(after, sizes)]


def lose_writeback(path, lo, hi):
    """The bytes [lo, hi) of segment 0 read back as zeros (pages never written back)."""
    f = path / "commitlog" / qf.segment_name(0)
    data = bytearray(f.read_bytes())
    data[lo:hi] = bytes(hi - lo)
    f.write_bytes(bytes(data))


def power_cut_copy(tmp_path):
    """The store as the device holds it after the cut: a copy (another page cache)."""
    src = tmp_path / "s"
    dst = tmp_path / "after-power-cut"
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("lost", ["whole_page", "page_suffix_at_flush_point"])
def test_earlier_page_lost_later_pages_written(tmp_path, lost):
    fp, after = crashed_log(tmp_path / "s")
    path = power_cut_copy(tmp_path)
    if lost == "whole_page":
        lo = (after[3][1] // PAGE + 1) * PAGE          # a whole page inside the tail
        hi = lo + PAGE
    else:                                              # the page holding fp lost its suffix
        lo, hi = fp, (fp // PAGE + 1) * PAGE
    assert fp <= lo and hi < after[-1][1]              # intact records after the damage
    lose_writeback(path, lo, hi)
    kept = [(i, p, n) for i, p, n in after if p + n <= lo]
    with open_log(path, **LOG_KW) as log:
        assert log.unclean_open
        last = kept[-1][0] if kept else 5
        end = kept[-1][1] + kept[-1][2] if kept else fp
        assert (log.last_index, log.end_position) == (last, end)
        log.verify()
        with open(path / "commitlog" / qf.segment_name(0), "rb") as fh:
            fh.seek(end)
            assert not any(fh.read(SEG - end)), "bytes after the torn tail are not zero"
        idx, pos, _ = log.append("t", b"after the cut", term=3)
        assert (idx, pos) == (last + 1, end)
    with open_log(path, **LOG_KW) as log:                # and it stays open-able
        assert log.last_index == last + 1


def test_same_damage_without_a_power_cut_is_corruption(tmp_path):
    """kill -9 keeps the page cache: damage with intact records after it is not a lost
    write-back there."""
    path = tmp_path / "s"
    fp, after = crashed_log(path)
    lo = (after[3][1] // PAGE + 1) * PAGE
    lose_writeback(path, lo, lo + PAGE)
    with pytest.raises(errors.CorruptLogError):
        open_log(path, **LOG_KW)


def test_damage_before_the_flush_point_after_a_power_cut_is_corruption(tmp_path):
    """Write-back loss cannot touch flushed bytes: the damage there is refused even after a
    power cut."""
    fp, after = crashed_log(tmp_path / "s")
    path = power_cut_copy(tmp_path)
    # zero the anchor (last flushed record) and a page of the tail: the scan starts at the
    # first segment and stops before the flushed position
    lose_writeback(path, fp - 200, fp)
    with pytest.raises(errors.CorruptLogError) as ei:
        open_log(path, **LOG_KW)
    assert "durable" in str(ei.value)


def test_store_opens_after_a_power_cut(tmp_path):
    """The message store over such a log: the consume queues forget the lost tail."""
    import quorumlog
    kw = dict(segment_size_bytes=SEG, consume_queue_file_entries=64, background=False,
              environ={}, flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
              dispatch_checkpoint_interval_ms=3_600_000)
    s = quorumlog.open(tmp_path / "s", **kw)
    for k in range(5):
        s.put("t", b"flushed-%d" % k * 100, queue_id=0)
    s.flush()
    fp = s.commitlog.flushed_position
    rs = [s.put("t", b"tail-%d" % k * 100, queue_id=0) for k in range(12)]
    s.crash_for_testing()
    path = power_cut_copy(tmp_path)
    lo = (rs[2].position // PAGE + 1) * PAGE
    assert lo > fp and lo + PAGE < rs[-1].position
    lose_writeback(path, lo, lo + PAGE)
    with quorumlog.open(path, **kw) as s:
        got = [m.body for m in s.iter_messages("t", 0)]
        assert got[:5] == [b"flushed-%d" % k * 100 for k in range(5)]
        assert got[5:] == [b"tail-%d" % k * 100 for k in range(len(got) - 5)]
        assert len(got) < 17
        assert s.put("t", b"next", queue_id=0).queue_offset == len(got)


def test_the_log_says_when_unflushed_writes_may_be_lost(tmp_path):
    # what the replica's driver asks before it starts its Raft core (raft/recovery.py)
    crashed_log(tmp_path / "s")
    same = open_log(tmp_path / "s", **LOG_KW)         # kill -9: the same page cache
    assert same.unclean_open and not same.lost_writes_possible
    same.crash_for_testing()
    after = open_log(power_cut_copy(tmp_path), **LOG_KW)   # another page cache: a power cut
    assert after.unclean_open and after.lost_writes_possible
    after.close()
    clean = open_log(tmp_path / "after-power-cut", **LOG_KW)
    assert not clean.unclean_open and not clean.lost_writes_possible
    clean.close()
