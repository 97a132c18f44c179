"""Message-store benchmarks (pytest-benchmark; `make microbench` or
`pytest bench/bench_store.py --benchmark-only`). Goals (issue 3):

- put_batch through the store, dispatch included, 100 B and 1 KiB bodies, batches of 1000,
  against raw CommitLog.append_batch of the same batches in the same run: dispatch and queue
  bookkeeping should cost <= 25 % (compare the `store` and `raw` rows of each size);
- get: sequential consumption of each queue, batches of 32, 100 B bodies, touching every body:
  >= 2 M messages/s;
- cold reopen (close, then quorumlog.open in the same process, page cache warm) of a store with
  >= 10 M messages: <= 1 s. Set QUORUMLOG_BENCH_REOPEN_MESSAGES to change the size.

Messages/s are in each row's `extra_info` (`--benchmark-columns=mean,ops` and the json output
carry them); rows are per call, so ops x batch = messages/s.
"""
import os
import shutil
import tempfile

import numpy as np
import pytest

import quorumlog
from quorumlog.commitlog import CommitLog

BATCH = 1000
QUEUES = 8
GET_BATCH = 32
GET_MESSAGES = 1_000_000
REOPEN_MESSAGES = int(os.environ.get("QUORUMLOG_BENCH_REOPEN_MESSAGES", 10_000_000))


WARM_BYTES = int(os.environ.get("QUORUMLOG_BENCH_WARM_GIB", "3")) << 30   # as bench_commitlog
BENCH_DIR = os.environ.get("QUORUMLOG_BENCH_DIR") or None


@pytest.fixture(scope="module", autouse=True)
def touch_memory():
    """Fault in a few GiB once so the first benchmark does not pay the kernel's first-touch
    costs that later ones do not."""
    held = []
    try:
        for _ in range(max(1, WARM_BYTES >> 28)):
            a = np.empty(1 << 28, dtype=np.uint8)
            a[::4096] = 1          # one write per page faults it in
            held.append(a)
    except MemoryError:
        pass
    del held


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="quorumlog-bench-store-", dir=BENCH_DIR)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _open(path, **kw):
    return quorumlog.open(path, background=False, environ={},
                          segment_size_bytes=kw.pop("segment_size_bytes", 1 << 30), **kw)


@pytest.mark.parametrize("size", [100, 1024])
@pytest.mark.parametrize("mode", ["raw", "store"])
def test_put_batch(benchmark, workdir, mode, size):
    bodies = [os.urandom(size)] * BATCH
    if mode == "raw":
        log = CommitLog(workdir, segment_size_bytes=1 << 30)
        qids = (np.arange(BATCH) % QUEUES).astype(np.int32)
        offs = np.arange(BATCH, dtype=np.int64)

        def put():
            log.append_batch("bench", bodies, queue_ids=qids, queue_offsets=offs, term=1)
        closer = log.close
    else:
        s = _open(workdir)
        s.create_topic("bench", QUEUES)

        def put():
            s.put_batch("bench", bodies)
        closer = s.close
    try:
        benchmark.extra_info.update(messages_per_call=BATCH, body_bytes=size)
        benchmark.pedantic(put, rounds=300, iterations=1, warmup_rounds=20)
        benchmark.extra_info["messages_per_s"] = BATCH / benchmark.stats.stats.mean
    finally:
        closer()


@pytest.fixture(scope="module")
def filled_store():
    d = tempfile.mkdtemp(prefix="quorumlog-bench-get-", dir=BENCH_DIR)
    s = _open(d)
    s.create_topic("bench", QUEUES)
    body = os.urandom(100)
    for _ in range(GET_MESSAGES // BATCH):
        s.put_batch("bench", [body] * BATCH)
    yield s
    s.close()
    shutil.rmtree(d, ignore_errors=True)


def consume_all(s, per_queue, topic="bench"):
    """Read queues 0..QUEUES-1 of `topic` from offset 0 to `per_queue` in gets of GET_BATCH,
    touching every body -> messages read."""
    n = 0
    for q in range(QUEUES):
        off = 0
        while off < per_queue:
            msgs = s.get(topic, q, off, GET_BATCH)
            for m in msgs:
                m.body
            off += len(msgs)
            n += len(msgs)
    return n


def test_get_sequential(benchmark, filled_store):
    s = filled_store
    per_queue = GET_MESSAGES // QUEUES
    n = benchmark.pedantic(lambda: consume_all(s, per_queue), rounds=3, iterations=1,
                           warmup_rounds=1)
    assert n == GET_MESSAGES
    benchmark.extra_info.update(messages_per_call=n, body_bytes=100, batch=GET_BATCH,
                                messages_per_s=n / benchmark.stats.stats.mean)


def test_cold_reopen(benchmark):
    d = tempfile.mkdtemp(prefix="quorumlog-bench-reopen-", dir=BENCH_DIR)
    try:
        s = _open(d)
        s.create_topic("bench", QUEUES)
        body = b"x" * 16
        batch = [body] * 10_000
        for _ in range(REOPEN_MESSAGES // len(batch)):
            s.put_batch("bench", batch)
        s.close()
        holder = []

        def reopen():
            st = _open(d)
            st.get("bench", QUEUES - 1, 0, 1)
            holder.append(st)

        def teardown():
            while holder:
                holder.pop().close()

        benchmark.pedantic(reopen, rounds=3, iterations=1, teardown=teardown)
        with _open(d) as st:
            assert sum(st.max_offset("bench", q) for q in range(QUEUES)) == \
                REOPEN_MESSAGES // len(batch) * len(batch)
            assert st.commitlog.last_index >= REOPEN_MESSAGES // len(batch) * len(batch)
        benchmark.extra_info.update(messages=REOPEN_MESSAGES)
    finally:
        shutil.rmtree(d, ignore_errors=True)
