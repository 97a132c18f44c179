"""A producer batch's properties through CommitLog.append_batch: one dict per message (what
producer_properties returned before issue 20) vs ProducerProperties (one native loop),
alternating in one run; prints the appending thread's CPU per append (building the
properties included).

    python bench/producer_props.py [MESSAGES=256] [SIZE=1024]
"""
import os
import shutil
import statistics
import sys
import tempfile
import time

from quorumlog.commitlog import CommitLog
from quorumlog.store.nativelog import producer_properties

PID = 12345


def dicts(seq: int, n: int) -> list:
    """The old form: one dict per message."""
    s = str(seq)
    return [{"QL_PID": str(PID), "QL_SEQ": s, "QL_N": str(n), "QL_I": str(i)} for i in range(n)]


def main(n: int, size: int) -> None:
    d = tempfile.mkdtemp(prefix="producer-props-")
    cl = CommitLog(os.path.join(d, "l"), segment_size_bytes=1 << 30)
    bodies = [os.urandom(size) for _ in range(n)]
    res = {"dicts": [], "native": []}
    seq = 0
    try:
        for r in range(6):
            for name in (("dicts", "native") if r % 2 == 0 else ("native", "dicts")):
                ts = []
                for _ in range(200):
                    seq += 1
                    t = time.thread_time_ns()
                    props = dicts(seq, n) if name == "dicts" else \
                        producer_properties(PID, seq, n, 0)
                    cl.append_batch("t", bodies, term=1, properties=props)
                    ts.append(time.thread_time_ns() - t)
                res[name].append(statistics.median(ts) / 1e3)
    finally:
        cl.close()
        shutil.rmtree(d)
    for k, v in res.items():
        print(f"{k}: median thread-CPU per batch of {n} x {size} B: "
              f"{statistics.median(v):.1f} us (rounds {', '.join(f'{x:.0f}' for x in v)})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 256,
         int(sys.argv[2]) if len(sys.argv) > 2 else 1024)
