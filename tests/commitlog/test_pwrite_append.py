"""Batches and replicated ranges are written with pwritev from a staging buffer (not through
the mapping): the bytes are exactly the format's across the staging buffer's and the iovec
limit's flushes and segment boundaries, pages ahead of the end are not populated for them
(no zero-fill of pages that pwrite fills anyway), and a write error fails the log cleanly.
"""
import ctypes
import errno
import mmap
import os
import time

import pytest

from quorumlog import errors, format as qf
from quorumlog import _commitlog
from quorumlog.commitlog import BLANK, NOOP, CommitLog

SEG = 1 << 20


def _bodies(n, sizes):
    return [bytes([(k * 7 + j) % 251 for j in range(min(s, 64))]) * (s // 64) +
            bytes([k % 251]) * (s % 64) for k, s in zip(range(n), sizes)]


def _check_segments(path):
    """Every segment decodes with the reference codec, and every BLANK's tail is zero.
    -> the number of records read."""
    segdir = os.path.join(path, "commitlog")
    n = 0
    for name in sorted(os.listdir(segdir)):
        data = open(os.path.join(segdir, name), "rb").read()
        for rec in qf.iter_records(data, int(name), include_blank=True):
            if rec.type == BLANK:
                off = rec.position - int(name)
                assert not any(data[off + qf.HEADER_SIZE:]), name
            else:
                n += 1
    return n


@pytest.mark.parametrize("sizes", [
    [100] * 15000,                              # staged bodies: the staging buffer refills
    [2048, 5000, 3] * 1000,                      # bodies apart: the iovec limit refills
    [60000, 2047, 2048, 70000, 10, 300000] * 4,  # mixed, records crossing segments
])
def test_batches_write_the_format_bytes(tmp_path, sizes):
    path = str(tmp_path / "log")
    log = CommitLog(path, segment_size_bytes=SEG, index_file_entries=4096)
    bodies = _bodies(len(sizes), sizes)
    props = [{"k": str(j)} if j % 3 == 0 else None for j in range(len(sizes))]
    first, _, _ = log.append_batch("t", bodies[:1], queue_ids=0, queue_offsets=0, term=1)
    idx, pos, _ = log.append("t", b"single", term=1)       # through the mapping between
    first2, positions, _ = log.append_batch("t", bodies[1:], queue_ids=3, queue_offsets=1,
                                            term=2, tags="g", properties=props[1:])
    assert first2 == idx + 1
    for j in range(1, len(bodies)):
        r = log.record(first2 + j - 1)
        assert bytes(r.body) == bodies[j] and r.position == positions[j - 1]
        assert r.tags == "g" and r.properties == (props[j] or {})
    log.verify()
    log.close()
    assert _check_segments(path) == len(bodies) + 1
    log = CommitLog(path, segment_size_bytes=SEG, index_file_entries=4096)
    try:
        assert log.last_index == first2 + len(bodies) - 2
        assert bytes(log.record(first).body) == bodies[0]
        log.verify()
    finally:
        log.close()


def test_follower_written_by_pwrite_is_byte_identical(tmp_path):
    leader = CommitLog(str(tmp_path / "a"), segment_size_bytes=SEG)
    follower = CommitLog(str(tmp_path / "b"), segment_size_bytes=SEG)
    try:
        sizes = [100, 3000, 70000, 2048] * 60
        leader.append_batch("t", _bodies(len(sizes), sizes), queue_ids=0, queue_offsets=0,
                            term=1)
        i = 1
        while i <= leader.last_index:
            view, count = leader.read(i, leader.last_index + 1, 200_000)
            follower.append_replicated(view)
            i += count
        assert follower.end_position == leader.end_position
        for k in range(leader.end_position // SEG + 1):
            name = f"{k * SEG:020d}"
            a = open(os.path.join(leader.path, "commitlog", name), "rb").read()
            b = open(os.path.join(follower.path, "commitlog", name), "rb").read()
            assert a == b, name
    finally:
        leader.close()
        follower.close()


def _resident_pages(path, lo, hi):
    """Pages of [lo, hi) of the file that are in the page cache (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, hi - lo, mmap.PROT_READ, mmap.MAP_SHARED, fd, lo)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        vec = ctypes.create_string_buffer((hi - lo) // 4096)
        assert libc.mincore(addr, hi - lo, vec) == 0, ctypes.get_errno()
        libc.munmap(addr, hi - lo)
        return sum(b & 1 for b in vec.raw)
    finally:
        os.close(fd)


def _ahead(log, path, how):
    """Resident pages in 8 MiB ahead of the end after appends (`how`: batch, single,
    control), once the preparer had the time to act on them (bounded polling: single
    appends must see pages appear)."""
    seg = os.path.join(path, "commitlog", f"{0:020d}")
    body = b"x" * 4000
    if how == "single":
        for k in range(300):
            log.append("t", body, term=1)
    elif how == "control":
        for k in range(300):
            log.append_control(NOOP, b"", term=1)
    else:
        log.append_batch("t", [body] * 300, queue_ids=0, queue_offsets=0, term=1)
    # (opening a log reads its first pages, and reading an unwritten extent through the
    # mapping zero-fills the read-ahead window: look past it)
    lo = max((log.end_position + 8191) & ~4095, 16 << 20)
    deadline = time.monotonic() + 1.0
    seen = 0
    while time.monotonic() < deadline and not seen:
        seen = _resident_pages(seg, lo, lo + (8 << 20))
        time.sleep(0.02)
    return seen


@pytest.mark.parametrize("how", ["batch", "control"])
def test_batches_and_control_records_do_not_populate_the_segment_ahead(tmp_path, how):
    # main populated 64 MiB ahead of every append (zero-filling pages pwrite fills anyway,
    # and, after a leader's NOOP, pages the batches after it would fill)
    path = str(tmp_path / "log")
    log = CommitLog(path, segment_size_bytes=64 << 20)
    try:
        assert _ahead(log, path, how) == 0
    finally:
        log.close()


def test_single_appends_still_populate_ahead(tmp_path):
    path = str(tmp_path / "log")
    log = CommitLog(path, segment_size_bytes=64 << 20)
    try:
        assert _ahead(log, path, "single") > 0
    finally:
        log.close()


@pytest.mark.parametrize("replicated", [False, True])
def test_write_error_fails_the_log_and_publishes_nothing(tmp_path, replicated):
    src = CommitLog(str(tmp_path / "src"), segment_size_bytes=SEG)
    src.append_batch("t", [b"a" * 3000] * 500, queue_ids=0, queue_offsets=0, term=1)
    path = str(tmp_path / "log")
    log = CommitLog(path, segment_size_bytes=SEG)
    view, count = src.read(1, 201, 1 << 30)
    log.append_replicated(view) if replicated else \
        log.append_batch("t", [b"a" * 3000] * 200, queue_ids=0, queue_offsets=0, term=1)
    state = (log.last_index, log.end_position)
    _commitlog._fail_write(errno.EIO)
    try:
        with pytest.raises(errors.LogFailedError):
            if replicated:
                log.append_replicated(src.read(201, 501, 1 << 30)[0])
            else:
                log.append_batch("t", [b"b" * 3000] * 300, queue_ids=0, queue_offsets=200,
                                 term=1)
    finally:
        _commitlog._fail_write(0)
    assert (log.last_index, log.end_position) == state
    with pytest.raises(errors.LogFailedError):
        log.append("t", b"c", term=1)
    assert bytes(log.record(200).body) == b"a" * 3000
    log.close()
    src.close()
    log = CommitLog(path, segment_size_bytes=SEG)      # recovery keeps the intact records
    try:
        assert log.last_index == 200
        log.verify()
    finally:
        log.close()


@pytest.mark.parametrize("sizes", [
    [1024] * 700,                                # staged bodies, pieces of PAR_PIECE_BYTES
    [4096, 100, 70000] * 12,                     # mixed, records crossing segments
])
def test_writer_thread_writes_the_same_bytes_as_inline(tmp_path, sizes):
    # A big batch's pwritev calls go to the log's writer thread in pieces while the next
    # piece is encoded; the files must be byte for byte those of writing inline.
    bodies = _bodies(len(sizes), sizes)
    files = []
    for inline in (True, False):
        path = str(tmp_path / f"log{int(inline)}")
        log = CommitLog(path, segment_size_bytes=SEG, index_file_entries=4096)
        log._write_inline(inline)
        for k in range(2):
            log.append_batch("t", bodies, queue_ids=1, queue_offsets=k * len(bodies),
                             term=1, born_timestamps_ms=7, tags="g")
        store_ms = [log.record(i).store_timestamp_ms for i in (1, log.last_index)]
        log.close()
        assert _check_segments(path) == 2 * len(bodies)
        segdir = os.path.join(path, "commitlog")
        files.append((store_ms, [(int(n), open(os.path.join(segdir, n), "rb").read())
                                 for n in sorted(os.listdir(segdir))]))
    (ts0, a), (ts1, b) = files
    assert len(a) == len(b) > 1
    if ts0 == ts1:           # same store timestamps in both runs: the files are identical
        assert a == b
    for (sa, x), (sb, y) in zip(a, b):    # the records, apart from their store timestamps
        assert sa == sb
        key = lambda r: (r.position, r.index, r.type, bytes(r.body), r.queue_offset)
        assert [key(r) for r in qf.iter_records(x, sa, include_blank=True)] == \
            [key(r) for r in qf.iter_records(y, sb, include_blank=True)]


def test_writer_queue_counts_its_pieces(tmp_path):
    # A big batch is cut into pieces of PAR_PIECE_BYTES (262144) of file bytes queued for
    # the writer thread, up to 4 in flight; each is written by the thread or, when the
    # thread had not started it, taken back by the appending thread. 1500 records of
    # 96 + 1 + 4096 bytes: a piece closes at 63 records (262144 bytes or more), so 24 pieces.
    bodies = _bodies(1500, [4096] * 1500)
    path = str(tmp_path / "log")
    log = CommitLog(path, segment_size_bytes=64 << 20)
    log.append_batch("t", bodies, queue_ids=0, queue_offsets=0, term=1)
    st = log.stats()
    assert st["writer_pieces"] == 24
    assert 0 <= st["writer_pieces_taken_back"] <= 24
    log.append_batch("t", bodies[:10], queue_ids=0, queue_offsets=1500, term=1)  # inline
    assert log.stats()["writer_pieces"] == 24
    log.close()
    assert log.stats()["writer_pieces"] == 24          # kept when the thread is stopped
    assert _check_segments(path) == 1510
    log = CommitLog(path, segment_size_bytes=64 << 20)
    try:
        assert [bytes(log.record(i).body) for i in (1, 777, 1500, 1510)] == \
            [bodies[0], bodies[776], bodies[1499], bodies[9]]
        assert log.stats()["writer_pieces"] == 0
    finally:
        log.close()
