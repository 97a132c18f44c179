"""Multi-step file operations are crash-safe: a process killed at any step of truncate_after
(spanning segments, with a prepared next segment) or of retention (delete_segments_before)
leaves a log that opens, holding a prefix of the log as it was whose records are intact --
all of it (the operation had not taken effect), what the operation kept, or something in
between -- and the operation can be done again. Each case runs in a subprocess that exits
at a named step (the _commitlog._set_crash_point hook, os._exit: no cleanup, as kill -9)."""
import os
import subprocess
import sys
import textwrap

import pytest

from quorumlog import format as qf

from cl_support import SEG, open_log

IDX = 64
KW = dict(segment_size_bytes=SEG, index_file_entries=IDX, flush="async",
          flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000)

SCRIPT = textwrap.dedent(f"""
    import os, sys, time
    from quorumlog import _commitlog
    from quorumlog.commitlog import CommitLog
    path, op, point = sys.argv[1], sys.argv[2], sys.argv[3]
    log = CommitLog(path, **{KW!r})
    k = 0
    while log.end_position < 3 * {SEG} + {SEG} // 2 + 4000:
        k += 1
        log.append("t", bytes([k % 250 + 1]) * (700 + k % 900), term=1)
    log.flush()
    log.checkpoint()
    nxt = os.path.join(path, "commitlog", "%020d" % (4 * {SEG}))
    deadline = time.monotonic() + 30
    while not os.path.exists(nxt) and time.monotonic() < deadline:   # the prepared segment
        time.sleep(0.01)
    assert os.path.exists(nxt), "no prepared next segment"
    print(log.last_index, flush=True)
    _commitlog._set_crash_point(point)
    if op == "truncate":
        target = max(i for i in range(1, log.last_index + 1)
                     if log.position_of(i) < {SEG} + {SEG} // 2)
        log.commit(3)
        log.truncate_after(target)
    else:
        log.delete_segments_before(2 * {SEG})
    print("step not reached", flush=True)
    os._exit(3)
""")


def body(k):
    return bytes([k % 250 + 1]) * (700 + k % 900)


def run_until(path, op, point):
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(path), op, point],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 137, f"exit {r.returncode}: {r.stdout}\n{r.stderr}"
    return int(r.stdout.split()[0])


def check_log(path, first, last_at_least, last_at_most):
    with open_log(path, **KW) as log:
        assert last_at_least <= log.last_index <= last_at_most, log.last_index
        assert log.first_index == first
        log.verify()
        for i in range(first, log.last_index + 1):
            assert bytes(log.record(i).body) == body(i)
        return log.last_index, log.min_position


TRUNCATE_STEPS = ["truncate:checkpoint_lowered", "truncate:prepared_discarded",
                  "truncate:segment_unlinked", "truncate:tail_zeroed", "truncate:index_zeroed"]


@pytest.mark.parametrize("point", TRUNCATE_STEPS)
def test_truncate_killed_at_each_step(tmp_path, point):
    path = tmp_path / "s"
    old_last = run_until(path, "truncate", point)
    check_log(path, 1, 1, old_last)
    with open_log(path, **KW) as log:
        target = max(i for i in range(1, log.last_index + 1)
                     if log.position_of(i) < SEG + SEG // 2)
        assert log.last_index >= target                # nothing the truncation keeps is lost
        log.truncate_after(target)                     # done again, and the log goes on
        idx, pos, _ = log.append("t", body(target + 1), term=2)
    check_log(path, 1, target + 1, target + 1)
    names = sorted(os.listdir(path / "commitlog"))
    assert names[:2] == [qf.segment_name(0), qf.segment_name(SEG)]


@pytest.mark.parametrize("point", ["retention:segment_unlinked", "retention:checkpoint_written"])
def test_retention_killed_at_each_step(tmp_path, point):
    path = tmp_path / "s"
    old_last = run_until(path, "retention", point)
    with open_log(path, **KW) as log:
        first = log.first_index
        assert log.min_position in (0, SEG, 2 * SEG)
        assert log.last_index == old_last
    check_log(path, first, old_last, old_last)
    with open_log(path, **KW) as log:
        log.delete_segments_before(2 * SEG)            # done again
        assert log.min_position == 2 * SEG
        log.append("t", body(old_last + 1), term=2)
    with open_log(path, **KW) as log:
        assert log.min_position == 2 * SEG and log.last_index == old_last + 1
