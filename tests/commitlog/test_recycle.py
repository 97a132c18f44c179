"""Segment recycling (commitlog_recycle.pxi): retention keeps up to `recycle_segments` freed
segment files and new segments reuse them. A reused file holds the old records past the
log's end; these tests check that they are never read back (reads, scans, recovery after a
clean close, a kill and lost write-back), that BLANK tails read as zero so replicas stay
byte-identical, that a kill at each step of a recycle recovers, that a full disk is still a
DiskFullError before anything is written, and that a recycling log is indistinguishable
from one that creates every segment (a differential run)."""
import os
import random
import subprocess
import sys
import textwrap
import threading

import pytest

from quorumlog import errors, format as qf

from cl_support import SEG, log_files, open_log
from tmpfs_support import namespace_support, run_on_tmpfs

KW = dict(segment_size_bytes=SEG, index_file_entries=4096, flush="async",
          flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000)


def body(k, n=900):
    return bytes([k % 251 + 1]) * (n + k % 300)


def fill(log, upto, k0=0, batch=True):
    """Append until the end reaches `upto` -> {index: body}."""
    out, k = {}, k0
    while log.end_position < upto:
        k += 1
        if batch and k % 2:
            bs = [body(k + j) for j in range(7)]
            first, _, _ = log.append_batch("t", bs, term=1)
            out.update({first + j: b for j, b in enumerate(bs)})
        else:
            i, _, _ = log.append("t", body(k), term=1)
            out[i] = body(k)
    return out


def pool_files(path):
    return sorted(n for n in os.listdir(path / "commitlog") if n.endswith(".free"))


def check_reads(log, bodies):
    for i in range(log.first_index, log.last_index + 1):
        assert bytes(log.record(i).body) == bodies[i], i
    log.verify()
    n = 0
    pos = log.min_position
    while pos < log.end_position:
        recs, pos2 = log.scan(pos, log.end_position)
        assert pos2 > pos
        n += sum(1 for r in recs if r["type"] == qf.TYPE_MESSAGE)
        pos = pos2
    assert n == log.last_index - log.first_index + 1


def test_retention_pools_files_and_new_segments_reuse_them(tmp_path):
    path = tmp_path / "s"
    with open_log(path, **KW) as log:
        bodies = fill(log, 6 * SEG)
        inodes = {start: os.stat(p).st_ino for start, p in log.segments()}
        assert log.delete_segments_before(3 * SEG) == 3
        # two kept (the newest freed), the third unlinked
        assert pool_files(path) == [qf.segment_name(SEG) + ".free",
                                    qf.segment_name(2 * SEG) + ".free"]
        assert log.stats()["recycle_pool"] == 2
        end_seg = log.end_position // SEG
        bodies.update(fill(log, (end_seg + 3) * SEG, 5000))
        now = {start: os.stat(p).st_ino for start, p in log.segments()}
        # the next two new segments are the pooled files (newest first), the third is new
        assert now[(end_seg + 1) * SEG] == inodes[2 * SEG]
        assert now[(end_seg + 2) * SEG] == inodes[SEG]
        assert pool_files(path) == []
        st = log.stats()
        assert (st["segments_recycled"], st["segments_pooled"]) == (2, 3)   # 0 was evicted
        check_reads(log, bodies)
    with open_log(path, **KW) as log:
        check_reads(log, bodies)


def test_recycle_segments_zero_unlinks_as_before(tmp_path):
    path = tmp_path / "s"
    with open_log(path, recycle_segments=0, **KW) as log:
        fill(log, 4 * SEG)
        assert log.delete_segments_before(2 * SEG) == 2
        assert pool_files(path) == [] and log.stats()["recycle_pool"] == 0


@pytest.mark.parametrize("bad", [-1, 65, 2.0, True, "2"])
def test_recycle_segments_is_checked(tmp_path, bad):
    with pytest.raises((errors.InvalidArgumentError, TypeError)):
        open_log(tmp_path / "s", recycle_segments=bad, **KW)
    assert not (tmp_path / "s" / "commitlog").exists() or \
        os.listdir(tmp_path / "s" / "commitlog") == []


def test_a_segment_with_a_live_view_is_not_reused(tmp_path):
    # reusing the file would change the bytes under the view
    path = tmp_path / "s"
    with open_log(path, **KW) as log:
        fill(log, 4 * SEG)
        view, count = log.read(1, 2)
        kept = bytes(view)
        assert log.delete_segments_before(2 * SEG) == 2
        assert pool_files(path) == [qf.segment_name(SEG) + ".free"]
        fill(log, 8 * SEG, 7000)
        assert bytes(view) == kept


def reused_segment_with_stale_tail(path):
    """A log whose last segment is a reused file, ended mid-segment, stale records after the
    end -> (bodies, end)."""
    log = open_log(path, **KW)
    bodies = fill(log, 5 * SEG)
    log.delete_segments_before(3 * SEG)
    bodies.update(fill(log, (log.end_position // SEG + 1) * SEG + SEG // 4, 9000))
    assert log.stats()["segments_recycled"] == 1
    end = log.end_position
    seg = log.segments()[-1][1]
    log.flush()
    return log, bodies, end, seg


@pytest.mark.parametrize("how", ["clean", "kill"])
def test_stale_records_past_the_end_are_never_read(tmp_path, how):
    path = tmp_path / "s"
    log, bodies, end, seg = reused_segment_with_stale_tail(path)
    with open(seg, "rb") as f:
        tail = f.read()[end % SEG:]
    assert any(tail[:4096])        # the file really holds old records there
    recs, nxt = log.scan(end - end % SEG, end)
    assert nxt == end and len(recs) > 0
    assert log.read(log.last_index + 1, log.last_index + 5)[1] == 0
    check_reads(log, bodies)
    last = log.last_index
    if how == "kill":
        log.crash_for_testing()
    else:
        log.close()
    log = open_log(path, **KW)
    try:
        assert log.unclean_open == (how == "kill")
        assert (log.end_position, log.last_index) == (end, last)
        check_reads(log, bodies)
        # appends go on at the true end
        i, pos, _ = log.append("t", b"after", term=2)
        assert (i, pos) == (last + 1, end)
        bodies[i] = b"after"
        check_reads(log, bodies)
    finally:
        log.close()
    with open_log(path, **KW) as log:
        assert log.last_index == last + 1
        check_reads(log, bodies)


def test_lost_write_back_in_a_reused_file_reads_back_old_records_and_is_cut(tmp_path):
    # After a power cut a page whose write-back was lost holds what the file held before:
    # in a reused file, the old segment's records (not zeros). Recovery must stop at the
    # durable end and never take them for records.
    path = tmp_path / "s"
    log, bodies, end, seg = reused_segment_with_stale_tail(path)
    durable, last_durable = log.flushed_position, log.last_index
    with open(seg, "rb") as f:
        before = f.read()                  # old records from `end` on
    bodies.update(fill(log, end + SEG // 3, 12000, batch=False))
    log.crash_for_testing()
    with open(seg, "r+b") as f:            # everything after the durable end lost
        f.seek(durable % SEG)
        f.write(before[durable % SEG:])
    log = open_log(path, **KW)
    try:
        assert log.end_position == durable == end
        assert log.last_index == last_durable
        check_reads(log, bodies)
    finally:
        log.close()


def replicate(src, dst, lo, hi):
    i = lo
    while i <= hi:
        view, count = src.read(i, hi + 1, 20000)
        dst.append_replicated(view)
        i += count


def log_bytes(log, lo, hi):
    out = bytearray()
    for start, p in log.segments():
        a, b = max(lo, start), min(hi, start + SEG)
        if a < b:
            with open(p, "rb") as f:
                f.seek(a - start)
                out += f.read(b - a)
    return bytes(out)


def test_replicas_stay_byte_identical_with_reused_files(tmp_path):
    # BLANK tails in reused files read as zero, on the leader (append, append_batch) and on
    # a follower (append_replicated), so a recycling replica and a fresh one agree
    leader = open_log(tmp_path / "l", **KW)
    fresh = open_log(tmp_path / "f", recycle_segments=0, **KW)
    recyc = open_log(tmp_path / "r", **KW)
    try:
        fill(leader, 4 * SEG)
        replicate(leader, fresh, 1, leader.last_index)
        replicate(leader, recyc, 1, leader.last_index)
        for lg, at in ((leader, 3 * SEG), (recyc, 2 * SEG)):
            lg.delete_segments_before(at)
        for k in range(4):
            n = leader.last_index
            fill(leader, leader.end_position + SEG, 20000 + 1000 * k, batch=k % 2 == 0)
            replicate(leader, fresh, n + 1, leader.last_index)
            replicate(leader, recyc, n + 1, leader.last_index)
            if k == 1:
                recyc.delete_segments_before(4 * SEG)
        assert leader.stats()["segments_recycled"] == 2
        assert recyc.stats()["segments_recycled"] >= 2
        lo, hi = max(leader.min_position, recyc.min_position), leader.end_position
        ref = log_bytes(fresh, lo, hi)
        assert log_bytes(leader, lo, hi) == ref
        assert log_bytes(recyc, lo, hi) == ref
    finally:
        for lg in (leader, fresh, recyc):
            lg.close()


CRASH_SCRIPT = textwrap.dedent(f"""
    import os, sys
    from quorumlog import _commitlog
    from quorumlog.commitlog import CommitLog
    path, point = sys.argv[1], sys.argv[2]
    log = CommitLog(path, **{KW!r})
    k = 0
    while log.end_position < 4 * {SEG} + {SEG} // 3:
        k += 1
        log.append("t", bytes([k % 250 + 1]) * (700 + k % 900), term=1)
    log.flush()
    log.checkpoint()
    print(log.last_index, flush=True)
    _commitlog._set_crash_point(point)
    log.delete_segments_before(2 * {SEG})
    while log.end_position < 7 * {SEG}:      # past the next segment starts: reuse them
        k += 1
        log.append("t", bytes([k % 250 + 1]) * (700 + k % 900), term=1)
    print("step not reached", flush=True)
    os._exit(3)
""")


@pytest.mark.parametrize("point", ["retention:checkpoint_written",
                                   "retention:segment_unlinked", "recycle:renamed"])
def test_killed_at_each_step_of_a_recycle(tmp_path, point):
    path = tmp_path / "s"
    r = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, str(path), point],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 137, f"exit {r.returncode}: {r.stdout}\n{r.stderr}"
    before = int(r.stdout.split()[0])
    with open_log(path, **KW) as log:
        assert log.unclean_open and log.last_index >= before
        log.verify()
        for i in range(log.first_index, log.last_index + 1):
            rec = log.record(i)
            assert bytes(rec.body) == bytes([i % 250 + 1]) * (700 + i % 900), i
        assert len(pool_files(path)) <= 2
        assert log.min_position == 2 * SEG      # recovery finishes an interrupted retention
        log.delete_segments_before(log.end_position - SEG)
        last = log.last_index
        k = last
        while log.end_position < log.min_position + 6 * SEG:
            k += 1
            log.append("t", bytes([k % 250 + 1]) * (700 + k % 900), term=2)
        assert log.stats()["segments_recycled"] >= 1
        log.verify()
        end, last = log.end_position, log.last_index
    with open_log(path, **KW) as log:
        assert (log.end_position, log.last_index) == (end, last)
        log.verify()


DISK_FULL = textwrap.dedent(f"""
    import json, os, sys
    from quorumlog import errors
    from quorumlog.commitlog import CommitLog
    mnt = sys.argv[1]
    path = os.path.join(mnt, "s")
    log = CommitLog(path, **{KW!r})
    k = 0
    def one():
        global k
        k += 1
        return log.append("t", bytes([k % 250 + 1]) * 900, term=1)
    while log.end_position < 4 * {SEG}:
        one()
    log.delete_segments_before(3 * {SEG})     # two files pooled
    filler = os.path.join(mnt, "filler")
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\\xaa" * 4096)
        except OSError:
            pass
    start_seg = log.end_position // {SEG}
    err = None
    while True:
        state = (log.last_index, log.end_position)
        try:
            one()
        except errors.DiskFullError as e:
            err = str(e)
            break
    assert (log.last_index, log.end_position) == state
    res = dict(err=err, segs_written=log.end_position // {SEG} - start_seg,
               recycled=log.stats()["segments_recycled"], pool=log.stats()["recycle_pool"])
    log.verify()
    os.unlink(filler)
    log.close()
    log = CommitLog(path, **{KW!r})
    assert log.last_index == state[0]
    log.verify()
    log.close()
    print("RESULT " + json.dumps(res))
""")


def test_full_disk_reuses_pooled_files_then_is_disk_full_before_writing(tmp_path):
    why = namespace_support()
    if why:
        pytest.skip(why)
    res = run_on_tmpfs(tmp_path, DISK_FULL, "2m")
    # with no space left, the two pooled files still became segments; then DiskFullError
    assert res["recycled"] == 2 and res["pool"] == 0 and res["segs_written"] >= 2
    assert "space" in res["err"].lower() or "full" in res["err"].lower()


def run_ops(path, seed, recycle):
    """One seeded sequence of appends, truncations, retention, reopen and kill."""
    rnd = random.Random(seed)
    log = open_log(path, recycle_segments=recycle, **KW)
    term, k, reused = 1, 0, 0
    try:
        for step in range(160):
            op = rnd.random()
            k += 1
            if op < 0.45:
                bs = [bytes([rnd.randrange(256)]) * rnd.randrange(1, 5000)
                      for _ in range(rnd.randrange(1, 12))]
                log.append_batch("t%d" % (k % 3), bs, term=term, born_timestamps_ms=k)
            elif op < 0.75:
                log.append("t", bytes([k % 256]) * rnd.randrange(0, 9000), term=term,
                           born_timestamp_ms=k)
            elif op < 0.8:
                log.append_control(qf.TYPE_NOOP, term=term)
            elif op < 0.87 and log.last_index > max(log.first_index, log.committed_index):
                i = rnd.randrange(max(log.first_index, log.committed_index), log.last_index)
                log.truncate_after(i)
                term += 1
            elif op < 0.95 and log.end_position > log.min_position + 2 * SEG:
                log.commit(log.last_index)
                log.delete_segments_before(log.end_position - 2 * SEG)
            else:
                log.flush()
                reused += log.stats()["segments_recycled"]
                if rnd.random() < 0.5:
                    log.close()
                else:
                    log.crash_for_testing()
                log = open_log(path, recycle_segments=recycle, **KW)
                term = max(term, log.last_term)
        log.flush()
        records = [(log.position_of(i), log.record(i).topic, bytes(log.record(i).body))
                   for i in range(log.first_index, log.last_index + 1)]
        return (log.min_position, log.end_position, log.first_index, log.last_index,
                records, log_bytes(log, log.min_position, log.end_position),
                reused + log.stats()["segments_recycled"])
    finally:
        log.close()


@pytest.mark.parametrize("seed", range(4))
def test_differential_against_fresh_files(tmp_path, seed):
    a = run_ops(tmp_path / "a", seed, 2)
    b = run_ops(tmp_path / "b", seed, 0)
    assert a[-1] > 0 and b[-1] == 0, "the run never reused a segment"
    # the same log: ends, indexes, every record's position, topic and body (the files
    # differ only in store timestamps, which come from the clock)
    assert a[:-2] == b[:-2]
    assert len(a[-2]) == len(b[-2])


def test_reads_racing_retention_and_reuse_see_their_own_records(tmp_path):
    # A reader in another thread takes views of the oldest segments while retention frees
    # them and appends reuse the files: a view either keeps its segment out of the pool or
    # is never taken (IndexOutOfRangeError); it never shows another segment's records.
    log = open_log(tmp_path / "s", **KW)
    try:
        bodies = fill(log, 3 * SEG)
        stop = threading.Event()
        progress = threading.Event()     # the reader reads once per batch appended
        errors_seen = []

        def writer():
            try:
                k = 100000
                while not stop.is_set() and log.stats()["segments_recycled"] < 6:
                    k += 8
                    bs = [body(k + j) for j in range(8)]
                    first, _, _ = log.append_batch("t", bs, term=1)
                    bodies.update({first + j: b for j, b in enumerate(bs)})
                    progress.set()
                    if log.end_position - log.min_position > 3 * SEG:
                        log.delete_segments_before(log.end_position - 2 * SEG)
            except BaseException as e:           # reported by the main thread
                errors_seen.append(e)

        th = threading.Thread(target=writer)
        th.start()
        checked = 0
        try:
            while th.is_alive():
                progress.wait(1.0)
                progress.clear()
                lo = log.first_index
                try:
                    view, n = log.read(lo, lo + 8, 4 * SEG)
                except errors.IndexOutOfRangeError:
                    continue
                off = 0
                for j in range(n):         # the records of lo.., bodies as appended
                    rec = qf.decode_record(view, off)
                    assert rec.index == lo + j and bytes(rec.body) == bodies[lo + j]
                    off += int.from_bytes(view[off + 4:off + 8], "little")
                checked += 1
                del view, rec                  # (a view kept would keep its file from reuse)
        finally:
            stop.set()
            th.join()
        assert not errors_seen, errors_seen
        assert checked > 0 and log.stats()["segments_recycled"] >= 1
        check_reads(log, bodies)
    finally:
        log.close()
