"""A real writer process killed with SIGKILL mid-stream: after reopen every acknowledged put
(sync: every put that returned; async: every put before the last flush that returned) is
readable at the same queue offset with the same body, and queue offsets continue without gaps."""
import os
import signal
import subprocess
import sys

import pytest

import quorumlog

HERE = os.path.dirname(__file__)


def body(i):
    return b"msg-%d-" % i + b"p" * (i % 300)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flush", ["async", "sync"])
def test_sigkill_writer(tmp_path, flush):
    path = str(tmp_path / "store")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "store_writer.py"), path, flush],
                            stdout=subprocess.PIPE, text=True)
    acked = {}          # message id -> (queue, offset)
    put = {}
    durable_upto = 0
    try:
        for line in proc.stdout:
            kind, *rest = line.split()
            if kind in ("ACK", "PUT"):
                i, q, off = map(int, rest)
                put[i] = (q, off)
                if kind == "ACK":
                    durable_upto = i + 1
            elif kind == "FLUSHED":
                durable_upto = int(rest[0])
            if durable_upto >= 600:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert durable_upto >= 600
    acked = {i: put[i] for i in range(durable_upto)}
    with quorumlog.open(path, segment_size_bytes=1 << 16, consume_queue_file_entries=64,
                        background=False, environ={}) as s:
        assert s.commitlog.unclean_open
        for i, (q, off) in acked.items():
            (m,) = s.get("k", q, off, 1)
            assert m.body == body(i) and m.queue_offset == off
        for q in range(4):
            end = s.max_offset("k", q)
            offs = [m.queue_offset for m in s.iter_messages("k", q, 0, end)]
            assert offs == list(range(end))                       # no gaps
            assert s.put("k", b"after", queue_id=q).queue_offset == end
