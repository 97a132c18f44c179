"""A leader's reads (CommitLog.read: what it ships to followers) and the dispatch's scans
(CommitLog.scan), right behind the appends, take no readahead from the segment being written: the pages past the log's end are
fallocated but unwritten, and a readahead there zero-fills them (the next pwritev then
overwrites them) -- on a replicated run that was 6.8 % of all CPU, on the leader
(docs/benchmarks.md, branch batch21). The segment gets readahead back once another one is
written (consumers reading it later from disk read ahead as before)."""
import os
import resource

import pytest

from quorumlog.commitlog import CommitLog

from test_pwrite_append import _resident_pages

BODY = b"r" * 1024


def _vm_flags(path: str, offset: int = 0) -> str:
    """The VmFlags line of this process's mapping of `path` (/proc/self/smaps) that holds
    file offset `offset` (the advice splits a segment's mapping in two)."""
    lines = open("/proc/self/smaps").read().splitlines()
    for i, ln in enumerate(lines):
        if ln.endswith(" " + path):
            addrs, _, off = ln.split()[:3]
            lo, hi = (int(a, 16) for a in addrs.split("-"))
            if not int(off, 16) <= offset < int(off, 16) + hi - lo:
                continue
            for more in lines[i + 1:]:
                if more.startswith("VmFlags:"):
                    return more
    raise AssertionError(f"offset {offset} of {path} is not mapped")


def _append_and_read(log, batches: int) -> None:
    """Batches of 256 x 1 KiB, each read back at once (a leader's APPEND)."""
    for _ in range(batches):
        first, _, _ = log.append_batch("t", [BODY] * 256, queue_ids=0, term=1)
        view, count = log.read(first, first + 256, 8 << 20)
        assert count >= 1
        del view


def _append_and_scan(log, batches: int) -> None:
    """Batches of 256 x 1 KiB, each scanned at once (a store's dispatch)."""
    pos = log.min_position
    for _ in range(batches):
        log.append_batch("t", [BODY] * 256, queue_ids=0, term=1)
        while pos < log.end_position:
            _, pos = log.scan(pos, log.end_position, 65536)


@pytest.mark.parametrize("how", [_append_and_read, _append_and_scan])
def test_reads_behind_the_appends_zero_fill_nothing_ahead(tmp_path, how):
    path = str(tmp_path / "log")
    log = CommitLog(path, segment_size_bytes=64 << 20)
    try:
        # past the first 16 MiB (opening a log reads its first pages through the mapping)
        how(log, 70)
        seg = os.path.join(path, "commitlog", f"{0:020d}")
        lo = (log.end_position + 4095) // 4096 * 4096 + 4096
        assert log.end_position > 16 << 20
        # main: the reads' readahead had zero-filled every page of these 4 MiB
        assert _resident_pages(seg, lo, lo + (4 << 20)) == 0
        assert " rr" in _vm_flags(seg, lo)
        # ... but only the tail right behind the appends (docs/benchmarks.md, session 22)
        assert " rr" not in _vm_flags(seg, 0)
    finally:
        log.close()


def test_a_segment_gets_readahead_back_once_another_is_written(tmp_path):
    path = str(tmp_path / "log")
    log = CommitLog(path, segment_size_bytes=4 << 20)
    try:
        _append_and_read(log, 20)          # ~5.3 MiB: the second segment is being written
        segs = sorted(os.listdir(os.path.join(path, "commitlog")))
        first, second = (os.path.join(path, "commitlog", s) for s in segs[:2])
        assert " rr" not in _vm_flags(first)
        assert " rr" in _vm_flags(second, log.end_position - (4 << 20) - 1)
    finally:
        log.close()


def test_a_scan_far_behind_the_appends_reads_ahead_pages_that_left_the_cache(tmp_path):
    # The advice once covered the whole segment being written from the first read that
    # touched it: a scan further back (the store's replay at open, a lagging follower's
    # catch-up) then faulted pages that had left the page cache in one at a time -- one
    # major fault per 4 KiB page on main (docs/benchmarks.md, session 22).
    path = str(tmp_path / "log")
    log = CommitLog(path, segment_size_bytes=64 << 20)
    _append_and_read(log, 160)                          # ~42 MiB
    log.close()
    seg = os.path.join(path, "commitlog", f"{0:020d}")
    span = 28 << 20                     # ends > NEAR_END (8 MiB) behind the log's end
    fd = os.open(seg, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)     # clean now: dropped
    finally:
        os.close(fd)
    log = CommitLog(path)
    try:
        # (the open reads the segment's first pages)
        cold = span // 4096 - _resident_pages(seg, 0, span)
        if cold < span // 4096 // 2:
            pytest.skip("the page cache kept the pages (nothing to read from disk)")
        view, _ = log.read(log.last_index, log.last_index + 1)    # a leader's read
        del view
        before = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        pos, nxt = log.min_position, None
        while nxt != pos:
            nxt, pos = pos, log.scan(pos, span, 65536)[1]
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - before
        assert faults < cold // 4, (faults, cold)
    finally:
        log.close()
