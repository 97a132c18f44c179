"""A new leader's producer-table rebuild in isolation (issue 20's failover): a log of 65,536
producer entries (batches of BATCH messages of SIZE bytes), read as table_for_term reads it.
Prints the reading thread's CPU, best of 5 rounds, of NativeRaftLog.producers over the
window, of the whole table_for_term (read in the driver's slices of 4,096 entries) and of
the same recording every run (the table before producers._kept_runs), for the current path
(producer_tags, one C loop)
and the numpy path it replaced (tests/commitlog/producers_numpy.py), alternating, and the
numpy path's phases (CommitLog.read with its CRC check, the scan, the row gather, the
tag decoding, the runs).

    python bench/producer_rebuild.py [BATCH=64] [SIZE=1024] [ENTRIES=65536]
"""
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from quorumlog.commitlog import CommitLog
from quorumlog.node.producers import table_for_term
from quorumlog.store.nativelog import NativeRaftLog, _runs, producer_properties

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "commitlog"))
import producers_numpy as ref  # noqa: E402  (the reference lives with its test)

ROUNDS = 5
STEP = 4096            # pipeline._PRODUCER_READ_STEP


class NumpyLog(NativeRaftLog):
    """NativeRaftLog reading its window the old way."""
    def producers(self, lo, hi):
        return ref.producers_numpy(self, lo, hi)


def cpu_ms(fn) -> float:
    t = time.thread_time_ns()
    fn()
    return (time.thread_time_ns() - t) / 1e6


def rebuild(log, entries: int) -> None:
    """table_for_term, then its deferred reads in the driver's slices (pipeline.py)."""
    t = table_for_term(None, log, 2, window_entries=entries)
    while not t.read_step(STEP):
        pass
    assert len(t)


def rebuild_every_run(log, entries: int) -> None:
    """The same slices, every run recorded (before the table kept only the newest runs:
    ProducerTable._record_runs without producers._kept_runs)."""
    t = table_for_term(None, log, 2, window_entries=entries)
    log_, lo, hi = t._source
    t._source = None
    for a in range(lo, hi + 1, STEP):
        t._record_runs(log_, log_.producers(a, min(hi, a + STEP - 1)))
    assert len(t)


def phases(cl, lo, hi) -> dict:
    """The numpy path's CPU per phase (ms), one round."""
    out = dict.fromkeys(("read+crc", "scan", "rows", "tags", "runs"), 0.0)
    parts, idx = [], lo
    while idx <= hi:
        t = time.thread_time_ns()
        view, count = cl.read(idx, hi + 1, 64 << 20)
        base = cl.position_of(idx)
        t1 = time.thread_time_ns()
        info, _ = cl.scan(base, base + len(view), 1 << 20)
        t2 = time.thread_time_ns()
        parts.append(ref._prefixes(cl, view, base))      # (the scan again, then the rows)
        t3 = time.thread_time_ns()
        out["read+crc"] += (t1 - t) / 1e6
        out["scan"] += (t2 - t1) / 1e6
        out["rows"] += max((t3 - t2) - (t2 - t1), 0) / 1e6
        idx += count
    t = time.thread_time_ns()
    tags = ref._tags(cl, *(np.concatenate(c) for c in zip(*parts)))
    t1 = time.thread_time_ns()
    _runs(*tags)
    out["tags"] = (t1 - t) / 1e6
    out["runs"] = (time.thread_time_ns() - t1) / 1e6
    return out


def main(batch: int, size: int, entries: int) -> None:
    d = tempfile.mkdtemp(prefix="producer-rebuild-")
    cl = CommitLog(os.path.join(d, "l"), segment_size_bytes=1 << 30)
    try:
        body = os.urandom(size)
        for seq in range(entries // batch):
            cl.append_batch("t", [body] * batch, term=1,
                            properties=producer_properties(seq % 97, seq, batch, 0))
        cl.flush()
        logs = {"numpy": NumpyLog(cl), "native": NativeRaftLog(cl)}
        lo, hi = 1, cl.last_index
        assert logs["numpy"].producers(lo, hi) == logs["native"].producers(lo, hi)
        res = {(k, w): [] for k in logs for w in ("producers", "table_for_term", "every run")}
        for r in range(ROUNDS):
            for name in (("numpy", "native") if r % 2 == 0 else ("native", "numpy")):
                lg = logs[name]
                res[name, "producers"].append(cpu_ms(lambda: lg.producers(lo, hi)))
                res[name, "table_for_term"].append(cpu_ms(lambda: rebuild(lg, entries)))
                res[name, "every run"].append(cpu_ms(lambda: rebuild_every_run(lg, entries)))
        print(f"{entries} entries, batches of {batch} x {size} B, load "
              f"{os.getloadavg()[0]:.2f}; thread CPU ms, best of {ROUNDS} (median)")
        for (name, what), v in res.items():
            print(f"  {name:7s} {what:15s} {min(v):8.1f}  ({sorted(v)[len(v) // 2]:.1f})")
        best = [phases(cl, lo, hi) for _ in range(ROUNDS)]
        print("  numpy path phases, best of 5: " + ", ".join(
            f"{k} {min(b[k] for b in best):.1f}" for k in best[0]))
    finally:
        cl.close()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    a = [int(x) for x in sys.argv[1:]]
    main(*(a + [64, 1024, 1 << 16][len(a):]))
