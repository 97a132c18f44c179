"""A leader's read of a batch right after appending it (what it ships to its followers),
against a second read of the same batch: thread CPU per batch of 256 x 1 KiB into a new
log. The first read faults the just-written pages into the mapping (and, without the
`_no_readahead` advice of commitlog_scan.pxi, read ahead into the unwritten pages past the
end, zero-filling them).

    python bench/read_after_append.py [BATCHES=200]
"""
import os
import shutil
import sys
import tempfile
import time

from quorumlog.commitlog import CommitLog, ProducerProperties


def main(n: int) -> None:
    d = tempfile.mkdtemp()
    try:
        log = CommitLog(os.path.join(d, "log"), segment_size_bytes=1 << 26)
        body = os.urandom(1024)
        t_append = t_first = t_second = 0
        clock = time.thread_time_ns
        for i in range(n):
            t0 = clock()
            first, _, _ = log.append_batch("bench-topic", [body] * 256, term=1,
                                           queue_ids=i % 8,
                                           properties=ProducerProperties(1, i, 256, 0))
            t1 = clock()
            log.read(first, first + 256, 1 << 20)
            t2 = clock()
            log.read(first, first + 256, 1 << 20)
            t3 = clock()
            t_append, t_first, t_second = t_append + t1 - t0, t_first + t2 - t1, t_second + t3 - t2
        log.close()
        print(f"per batch of 256 x 1 KiB: append_batch {t_append / n / 1e3:.1f} µs, first read "
              f"{t_first / n / 1e3:.1f} µs, second read {t_second / n / 1e3:.1f} µs")
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
