"""MessageStore.put_batch in a loop: p50 / p99 per batch, msg/s and the appending thread's CPU
per batch (a profiling aid; A/B: run it with each venv's python, alternating).

    python bench/put_batch_loop.py [BATCHES=300] [SIZE=1024]    (batches of 1000)
"""
import os
import shutil
import sys
import tempfile
import time

import quorumlog


def main(n_batches: int, size: int) -> None:
    d = tempfile.mkdtemp(prefix="put-batch-loop-")
    try:
        st = quorumlog.open(os.path.join(d, "s"), flush="async", segment_size_bytes=1 << 30)
        st.create_topic("bench", 8)
        bodies = [os.urandom(size) for _ in range(1000)]
        lat, tc = [], []
        t0, c0 = time.perf_counter(), os.times()
        for _ in range(n_batches):
            a, ta = time.perf_counter_ns(), time.thread_time_ns()
            st.put_batch("bench", bodies)
            tc.append(time.thread_time_ns() - ta)
            lat.append(time.perf_counter_ns() - a)
        el, c1 = time.perf_counter() - t0, os.times()
        st.close()
    finally:
        shutil.rmtree(d)
    lat.sort()
    tc.sort()
    cpu = c1.user + c1.system - c0.user - c0.system
    print(f"p50 {lat[len(lat) // 2] / 1e3:.0f}us p99 {lat[int(len(lat) * .99)] / 1e3:.0f}us "
          f"{n_batches * 1000 / el:,.0f} msg/s thread-cpu p50 {tc[len(tc) // 2] / 1e3:.0f}us "
          f"cpu {cpu:.2f}s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300,
         int(sys.argv[2]) if len(sys.argv) > 2 else 1024)
