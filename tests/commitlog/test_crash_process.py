"""Crash with a real process: a writer subprocess appends in a loop and reports each append
on a pipe; the test SIGKILLs it mid-stream and reopens the log.

sync mode: the writer reports an append only after wait_flushed() returned for it, so every
reported append must be present and intact. async mode: it reports right after append()
returns; kill -9 keeps the page cache, so those must be present too. In both modes the
log must end at a record boundary, and unreported appends may be present only intact.
"""
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from quorumlog import format as qf

from cl_support import SEG, IDX_ENTRIES, open_log


WRITER = textwrap.dedent(f"""
    import sys
    from quorumlog.commitlog import CommitLog
    path, mode = sys.argv[1], sys.argv[2]
    log = CommitLog(path, segment_size_bytes={SEG}, index_file_entries={IDX_ENTRIES},
                    flush=mode, flush_interval_ms=5)
    out = sys.stdout
    k = 0
    while True:
        k += 1
        if k % 5 == 0:
            first, positions, ts = log.append_batch(
                "batch", [body(k, j) for j in range(4)], queue_ids=1, queue_offsets=k, term=1)
            idx, end = first + 3, int(positions[-1]) + log.size_of(first + 3)
        else:
            idx, pos, ts = log.append("t", body(k, 0), term=1, queue_offset=k)
            end = pos + log.size_of(idx)
        if mode == "sync":
            assert log.wait_flushed(end, timeout=30)
        out.write(f"{{idx}} {{k}}\\n")
        out.flush()
""").replace("import sys\n", "import sys\n" + textwrap.dedent("""
    def body(k, j):
        return bytes([(k + j) % 251]) * (200 + (k * 37 + j) % 1800)
"""), 1)


def body(k, j):
    return bytes([(k + j) % 251]) * (200 + (k * 37 + j) % 1800)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigkill_mid_stream(tmp_path, mode):
    path = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked = []
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 150 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            idx, k = map(int, line.split())
            acked.append((idx, k))
        # let it run on a little so the kill lands mid-append, not between reports
        time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(acked) >= 150, proc.stderr.read()
    assert (path / "abort").exists()
    with open_log(path) as log:
        assert log.unclean_open
        last_acked = acked[-1][0]
        assert log.last_index >= last_acked
        # every reported append is there with its exact content
        expect = {}
        for idx, k in acked:
            if k % 5 == 0:
                for j in range(4):
                    expect[idx - 3 + j] = ("batch", body(k, j), k + j)
            else:
                expect[idx] = ("t", body(k, 0), k)
        for i, (topic, b, qoff) in expect.items():
            rec = log.record(i)
            assert (rec.topic, bytes(rec.body), rec.queue_offset) == (topic, b, qoff)
        # the log ends at a record boundary and everything after the acks is intact
        last = log.last_index
        assert log.end_position == log.position_of(last) + log.size_of(last)
        log.verify()
        for start, seg_path in log.segments():
            with open(seg_path, "rb") as f:
                for rec in qf.iter_records(f.read(), start):
                    assert 1 <= rec.index <= last
        # appends continue
        end = log.end_position
        idx, pos, ts = log.append("t", b"after", term=1)
        size = log.size_of(idx)
        assert (idx, pos) == (last + 1, end if qf.fits_in_segment(end, size, SEG)
                              else end - end % SEG + SEG)
