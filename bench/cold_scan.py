"""A scan far behind the appends in the segment being written, from disk (the store's replay
at open, a lagging follower's catch-up): a log of ~210 MiB in one 256 MiB segment is closed,
dropped from the page cache (fdatasync + POSIX_FADV_DONTNEED), reopened, read once at its end
(a leader's read: commitlog_scan.pxi `_no_readahead` advises from there), then scanned from
its start to 16 MiB before its end. Prints the scan's major faults and seconds; with the
advice on the whole segment (session 21) it took one major fault per cold 4 KiB page.

    python bench/cold_scan.py [ROUNDS=3]
"""
import os
import resource
import shutil
import sys
import tempfile
import time

from quorumlog.commitlog import CommitLog

BODY = b"r" * 1024


def one_round() -> str:
    d = tempfile.mkdtemp(dir=os.environ.get("TMPDIR", "/tmp"))     # a real disk, not tmpfs
    try:
        path = os.path.join(d, "log")
        log = CommitLog(path, segment_size_bytes=256 << 20)
        for _ in range(800):
            first, _, _ = log.append_batch("t", [BODY] * 256, queue_ids=0, term=1)
            view, _ = log.read(first, first + 256, 8 << 20)
            del view
        log.close()
        fd = os.open(os.path.join(path, "commitlog", f"{0:020d}"), os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        log = CommitLog(path)
        try:
            span = log.end_position - (16 << 20)
            view, _ = log.read(log.last_index, log.last_index + 1)
            del view
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
            t0 = time.monotonic()
            pos, nxt = log.min_position, None
            while nxt != pos:
                nxt, pos = pos, log.scan(pos, span, 65536)[1]
            return (f"{span / 2**20:.0f} MiB scanned: {time.monotonic() - t0:.2f} s, "
                    f"{resource.getrusage(resource.RUSAGE_SELF).ru_majflt - f0} major faults")
        finally:
            log.close()
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        print(one_round(), flush=True)
