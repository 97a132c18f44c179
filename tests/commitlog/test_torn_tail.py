"""Torn tail: every byte offset inside the last 3 records × {truncate the segment file there,
zero from there, garbage from there}.

The checkpoint is written before the last 3 records (flush + checkpoint, then append, then
`crash_for_testing()` with the background flusher idle), so per format.md's recovery the scan starts
before the damage. Each reopen must recover exactly the intact prefix (the leading records
whose bytes are unchanged), raise nothing, never return a partial record, leave zeros after
the end, and take the next append at the right place. The store lives on tmpfs when
available so the ~1,500 reopens are cheap.
"""
import os
import pathlib
import random
import shutil

import pytest

from quorumlog import format as qf

from cl_support import SEG, IDX_ENTRIES, fast_mkdtemp, open_log, store_files


LOG_KW = dict(flush="async", flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
              preallocate_next=False)


@pytest.fixture
def fast_dir():
    d = pathlib.Path(fast_mkdtemp("ql-torn-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def build(path):
    """A log whose last 3 records (in segment 1) are after the checkpoint."""
    log = open_log(path, **LOG_KW)
    while log.end_position < SEG + 500:
        log.append("base", os.urandom(1500) + b"\x01", term=1)
    log.flush()
    log.checkpoint()
    base_last = log.last_index
    tail = []
    tail.append(log.append("orders", b"\x05" * 60, term=2, tags="tg", keys=("k1",),
                           properties={"a": "b"})[:2])
    tail.append(log.append_control(qf.TYPE_CONFIG, b"\x07" * 40, term=2))
    tail.append(log.append("orders", b"\x09" * 30, term=3, queue_id=5)[:2])
    sizes = [log.size_of(i) for i, _ in tail]
    raws = [bytes(log.record_at(p)) for _, p in tail]
    log.crash_for_testing()
    cp = qf.decode_checkpoint((path / "checkpoint").read_bytes())
    assert cp.flushed_index == base_last and cp.flushed_position <= tail[0][1]
    return base_last, [(i, p, n) for (i, p), n in zip(tail, sizes)], raws


def test_torn_tail_every_offset(fast_dir):
    path = fast_dir / "s"
    base_last, tail, raws = build(path)
    pristine = store_files(path)
    seg_name = "commitlog/" + qf.segment_name(SEG)
    seg_file = path / seg_name
    start = tail[0][1]
    end = tail[-1][1] + tail[-1][2]
    assert start // SEG == (end - 1) // SEG == 1
    rng = random.Random(1234)
    failures = []
    checked = 0

    def restore():
        for rel, data in pristine.items():
            (path / rel).write_bytes(data)
        # drop anything a previous iteration created (e.g. a later segment)
        for name in os.listdir(path / "commitlog"):
            if f"commitlog/{name}" not in pristine:
                os.unlink(path / "commitlog" / name)

    for mode in ("truncate", "zero", "garbage"):
        for pos in range(start, end):
            restore()
            off = pos - SEG
            seg = bytearray(pristine[seg_name])
            if mode == "truncate":
                damaged = bytes(seg[:off])
                with open(seg_file, "r+b") as f:
                    f.truncate(off)
            else:
                fill = bytes(end - pos) if mode == "zero" else rng.randbytes(end - pos)
                seg[off:end - SEG] = fill
                damaged = bytes(seg)
                with open(seg_file, "r+b") as f:
                    f.seek(off)
                    f.write(fill)
            # the intact prefix: leading tail records whose bytes are unchanged
            intact = 0
            for (i, p, n), raw in zip(tail, raws):
                if damaged[p - SEG:p - SEG + n] == raw:
                    intact += 1
                else:
                    break
            checked += 1
            try:
                check_recovered(path, base_last, tail, raws, intact)
            except Exception as e:        # collect, so one run reports every bad offset
                failures.append(f"{mode}@{pos} (record {intact + 1} of the tail): "
                                f"{type(e).__name__}: {e}")
                if len(failures) >= 20:
                    break
        if len(failures) >= 20:
            break
    assert not failures, "\n".join(failures)
    assert checked == 3 * (end - start)


def check_recovered(path, base_last, tail, raws, intact):
    log = open_log(path, **LOG_KW)
    try:
        assert log.unclean_open
        last = base_last + intact
        assert log.last_index == last, f"last_index {log.last_index} != {last}"
        end = tail[intact - 1][1] + tail[intact - 1][2] if intact else tail[0][1]
        assert log.end_position == end, f"end_position {log.end_position} != {end}"
        for k in range(intact):
            i, p, n = tail[k]
            assert bytes(log.record_at(p)) == raws[k]
            assert (log.position_of(i), log.size_of(i)) == (p, n)
        view, count = log.read(last, last + 5)
        assert count == 1 and len(view) == log.size_of(last)
        assert log.read(last + 1, last + 5)[1] == 0
        # the torn bytes were zeroed up to the end of the segment, index entries beyond too
        with open(path / "commitlog" / qf.segment_name(SEG), "rb") as f:
            f.seek(end - SEG)
            rest = f.read()
        assert rest == bytes(SEG - (end - SEG)), "bytes after the recovered end are not zero"
        # appends continue at the end
        idx, pos, ts = log.append("after", b"\x0b" * 10, term=3)
        assert (idx, pos) == (last + 1, end)
        assert bytes(log.record(idx).body) == b"\x0b" * 10
    finally:
        log.crash_for_testing()


def test_torn_tail_index_entries_beyond_end_are_zeroed(fast_dir):
    path = fast_dir / "s"
    base_last, tail, raws = build(path)
    # tear inside the second tail record: records 2 and 3 go, their index entries too
    tear_at = tail[1][1] + 50
    with open(path / "commitlog" / qf.segment_name(SEG), "r+b") as f:
        f.seek(tear_at - SEG)
        f.write(b"\xee" * (tail[2][1] + tail[2][2] - tear_at))
    log = open_log(path, **LOG_KW)
    assert log.last_index == base_last + 1
    log.close()
    idx = (path / "index" / qf.index_file_name(1)).read_bytes()
    assert len(idx) == IDX_ENTRIES * 24
    for i in range(base_last + 2, IDX_ENTRIES + 1):
        assert qf.decode_index_entry(idx, (i - 1) * 24) is None, f"entry {i} not zeroed"
    e = qf.decode_index_entry(idx, base_last * 24)
    assert (e.position, e.size, e.term) == (tail[0][1], tail[0][2], 2)
