"""A power cut in async mode: write-back may reach a later page and not an earlier one, so
damage after the checkpoint's flushed position followed by intact records is a torn tail
(cut there, the records after it dropped), not corruption. The device after the cut is
simulated by a copy of the store's files (another directory: another page cache, as a disk
image of the device is) with pages of the never-flushed tail zeroed out of order, or by the
same files zeroed in place (a device remounted in the same boot, a VM snapshot, a harness:
the page-cache identity cannot tell, the damage's shape can -- lost write-back reads as a
page of zeros, or a page's suffix). Damage that is not lost write-back (a flipped bit)
where the page cache survived is still refused as corruption, and so is any damage before
the flushed position."""
import os
import shutil

import pytest

import quorumlog

from quorumlog import errors, format as qf

from cl_support import SEG, flip_bits, open_log, store_files

LOG_KW = dict(flush="async", flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
              preallocate_next=False)
PAGE = 4096
CQ_ENTRY = 20               # bytes of a consume-queue entry (docs/format.md)
IDX_ENTRY = 24              # bytes of a raft-index entry (docs/format.md)


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


def in_place(tmp_path):
    """The store where it was (the same directory and page-cache identity)."""
    return tmp_path / "s"


@pytest.mark.parametrize("where", [power_cut_copy, in_place])
@pytest.mark.parametrize("lost", ["whole_page", "page_suffix_at_flush_point", "two_pages"])
def test_lost_pages_after_the_flush_point_are_a_torn_tail(tmp_path, where, lost):
    """Item 7 of issue 21: write-back reached later pages but not earlier ones; the damage
    lies only after the durable point. Opened, cut at the first damaged record, whatever
    the page-cache identity says (in place: refused before)."""
    fp, after = crashed_log(tmp_path / "s")
    path = where(tmp_path)
    if lost == "whole_page":
        lo = (after[3][1] // PAGE + 1) * PAGE
        lose_writeback(path, lo, lo + PAGE)
    elif lost == "page_suffix_at_flush_point":
        lo = fp
        lose_writeback(path, fp, (fp // PAGE + 1) * PAGE)
    else:                                              # two lost pages, a written one between
        lo = (after[2][1] // PAGE + 1) * PAGE
        lose_writeback(path, lo, lo + PAGE)
        lose_writeback(path, lo + 2 * PAGE, lo + 3 * PAGE)
    assert fp <= lo and lo + PAGE < after[-1][1]
    kept = [(i, p, n) for i, p, n in after if p + n <= lo]
    last = kept[-1][0] if kept else 5
    end = kept[-1][1] + kept[-1][2] if kept else fp
    with open_log(path, **LOG_KW) as log:
        assert (log.last_index, log.end_position) == (last, end)
        assert log.lost_writes_possible     # in place too: the shape showed lost write-back
        log.verify()
        assert [bytes(log.record(i).body) for i, _, _ in kept] == \
            [bytes([k % 250 + 1]) * 1500 for k in range(len(kept))]
        assert log.append("t", b"after the cut", term=3)[:2] == (last + 1, end)
    with open_log(path, **LOG_KW) as log:
        assert log.last_index == last + 1


@pytest.mark.parametrize("where", [power_cut_copy, in_place])
def test_lost_index_page_after_the_flush_point(tmp_path, where):
    """The raft-index file lost the write-back of its first page after the durable entries
    (1..5), its second page written: the log is cut at its own damage and the index
    agrees with it."""
    fp, after = crashed_log(tmp_path / "s", n_after=180)   # entries on two index pages
    path = where(tmp_path)
    lo = (after[3][1] // PAGE + 1) * PAGE
    lose_writeback(path, lo, lo + PAGE)
    f = path / "index" / qf.segment_name(1)
    data = bytearray(f.read_bytes())
    assert len(data) > PAGE and any(data[PAGE:])
    data[5 * IDX_ENTRY:PAGE] = bytes(PAGE - 5 * IDX_ENTRY)
    f.write_bytes(bytes(data))
    kept = [(i, p, n) for i, p, n in after if p + n <= lo]
    with open_log(path, **LOG_KW) as log:
        assert log.last_index == kept[-1][0]
        log.verify()
        assert [log.position_of(i) for i, _, _ in kept] == [p for _, p, _ in kept]
    with open(f, "rb") as fh:
        fh.seek((kept[-1][0]) * IDX_ENTRY)
        assert not any(fh.read()), "raft-index entries past the cut are not zero"


@pytest.mark.parametrize("where", ["after_the_flush_point", "at_the_flush_point"])
def test_flipped_bit_without_a_power_cut_is_corruption(tmp_path, where):
    """kill -9 keeps the page cache: a flipped bit with intact records after it is not a
    lost write-back (no page of zeros): refused, naming file and offset."""
    path = tmp_path / "s"
    fp, after = crashed_log(path)
    pos = after[3][1] if where == "after_the_flush_point" else fp
    flip_bits(path, pos + 200)
    before = store_files(path)
    with pytest.raises(errors.CorruptLogError) as ei:
        open_log(path, **LOG_KW)
    assert ei.value.offset == pos and "intact" in str(ei.value)
    assert store_files(path) == before


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


@pytest.mark.parametrize("where", [power_cut_copy, in_place])
def test_store_opens_after_a_power_cut(tmp_path, where):
    """The message store over such a log, its consume queue also missing a page of the
    tail's entries with a later page written: the queue forgets everything past the cut
    and goes on at the next offset."""
    kw = dict(segment_size_bytes=SEG, consume_queue_file_entries=1024, background=False,
              environ={}, flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
              dispatch_checkpoint_interval_ms=3_600_000)
    s = quorumlog.open(tmp_path / "s", **kw)
    for k in range(5):
        s.put("t", b"flushed-%d" % k * 10, queue_id=0)
    s.flush()
    fp = s.commitlog.flushed_position
    rs = [s.put("t", b"tail-%d" % k * 10, queue_id=0) for k in range(300)]
    s.crash_for_testing()
    path = where(tmp_path)
    lo = (rs[20].position // PAGE + 1) * PAGE
    assert lo > fp and lo + PAGE < rs[-1].position
    lose_writeback(path, lo, lo + PAGE)
    (cq,) = [f for f in (path / "consumequeue" / "t" / "0").iterdir()]
    data = bytearray(cq.read_bytes())
    assert any(data[PAGE:PAGE + CQ_ENTRY])                 # entry 205 on the second page
    data[5 * CQ_ENTRY:PAGE] = bytes(PAGE - 5 * CQ_ENTRY)
    cq.write_bytes(bytes(data))
    full = [b"flushed-%d" % k * 10 for k in range(5)] + [b"tail-%d" % k * 10
                                                         for k in range(300)]
    with quorumlog.open(path, **kw) as s:
        got = [m.body for m in s.iter_messages("t", 0)]
        assert 25 <= len(got) < 305 and got == full[:len(got)]
        assert rs[len(got) - 5].position <= lo < rs[len(got) - 4].position  # cut there
        assert s.put("t", b"next", queue_id=0).queue_offset == len(got)
    with quorumlog.open(path, **kw) as s:
        assert [m.body for m in s.iter_messages("t", 0)] == got + [b"next"]


def test_the_log_says_when_unflushed_writes_may_be_lost(tmp_path):
    # what the replica's driver asks before it starts its Raft core (raft/recovery.py)
    crashed_log(tmp_path / "s")
    same = open_log(tmp_path / "s", **LOG_KW)         # kill -9: the same page cache
    assert same.unclean_open and not same.lost_writes_possible
    same.crash_for_testing()
    after = open_log(power_cut_copy(tmp_path), **LOG_KW)   # another page cache: a power cut
    assert after.unclean_open and after.lost_writes_possible
    after.settle_lost_writes()          # (the replica's floor is durable: see below)
    after.close()
    clean = open_log(tmp_path / "after-power-cut", **LOG_KW)
    assert not clean.unclean_open and not clean.lost_writes_possible
    clean.close()


def test_lost_writes_stay_marked_until_the_owner_settles_them(tmp_path):
    """The open that saw lost writes rewrites the abort marker (this page cache's identity)
    before its owner -- a replica saving its recovery floor (docs/raft.md R1) -- has made
    that fact durable elsewhere. The marker keeps a lost-writes mark until
    settle_lost_writes(): a kill, or a clean close of a start that failed, in between used
    to make the next open look like a plain kill (no lost writes: no floor)."""
    crashed_log(tmp_path / "s")
    path = power_cut_copy(tmp_path)
    first = open_log(path, **LOG_KW)
    assert first.lost_writes_possible
    first.crash_for_testing()                         # killed before the floor was saved
    second = open_log(path, **LOG_KW)
    assert second.unclean_open and second.lost_writes_possible
    second.close()                                    # a start that failed: closed cleanly
    third = open_log(path, **LOG_KW)
    assert third.lost_writes_possible
    third.settle_lost_writes()                        # the floor is durable now
    assert third.lost_writes_possible                 # (still this open's fact)
    third.crash_for_testing()
    fourth = open_log(path, **LOG_KW)                 # kill -9 in the same page cache
    assert fourth.unclean_open and not fourth.lost_writes_possible
    fourth.close()
    clean = open_log(path, **LOG_KW)
    assert not clean.unclean_open and not clean.lost_writes_possible
    clean.close()


def test_the_log_names_the_flush_mode_of_the_run_that_may_have_lost_writes(tmp_path):
    """Whether a replica acknowledged writes it had not flushed is decided by the run that
    wrote them: a replica that ran async, lost power and is restarted with flush="sync"
    must still recover what it acknowledged (node/driver.py asks previous_flush_mode).
    Before, only the current open's mode was known."""
    crashed_log(tmp_path / "s")                       # an async run, killed
    path = power_cut_copy(tmp_path)
    sync = open_log(path, **dict(LOG_KW, flush="sync"))
    assert sync.lost_writes_possible and sync.previous_flush_mode == "async"
    assert sync.flush_mode == "sync"
    sync.crash_for_testing()
    again = open_log(path, **LOG_KW)                  # the marker now names the sync run
    assert again.unclean_open and again.previous_flush_mode == "sync"
    again.settle_lost_writes()                        # (the mode line survives a settle)
    again.crash_for_testing()
    third = open_log(path, **LOG_KW)
    assert third.previous_flush_mode == "async" and not third.lost_writes_possible
    third.close()
    clean = open_log(path, **LOG_KW)
    assert not clean.unclean_open and clean.previous_flush_mode is None
    clean.close()
