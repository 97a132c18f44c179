"""Micro-benchmarks of the network layer (pytest-benchmark). Run:
    .venv/bin/python -m pytest bench/bench_net.py --benchmark-only -s -q -p no:cacheprovider

  * encode of a 1 MiB APPEND (codec.encode: header + fields, the payload stays the caller's
    view) and decode of one (FrameDecoder's BufferedProtocol path + codec.decode; the copy
    into the decoder's buffer stands in for the kernel's recv copy)
  * loopback throughput: APPEND frames of 1 MiB / 256 KiB from one PeerTransport to another
    over 127.0.0.1 (authenticated, one connection), a window of 8 frames in flight, on
    asyncio and on uvloop; MB/s printed and stored in extra_info

On the shared 2-core machine both transports, the kernel's socket copies and everything else
share the cores: compare ratios, not absolutes.
"""
import asyncio
import time

import pytest

from quorumlog.net import codec
from quorumlog.net.auth import AuthConfig
from quorumlog.net.framing import FrameDecoder
from quorumlog.net.transport import PeerTransport, TransportConfig
from quorumlog.raft.messages import Append

try:
    import uvloop
except ImportError:
    uvloop = None

MiB = 1 << 20
SECRET = b"benchmark-secret-benchmark-secret"


def _append(nbytes, payload=None):
    payload = payload if payload is not None else memoryview(bytearray(b"r" * nbytes))
    return Append(5, "a", "b", 100, 5, 101, 200, 5, payload, nbytes, 90, (), 1)


def test_encode_1mib_append(benchmark):
    msg = _append(MiB)
    parts = benchmark(codec.encode, msg)
    assert parts[-1].obj is msg.payload.obj            # no copy of the payload
    benchmark.extra_info["GB_per_s"] = round(MiB / benchmark.stats.stats.median / 1e9, 1)


def test_decode_1mib_append(benchmark):
    frame = b"".join(bytes(p) for p in codec.encode(_append(MiB)))
    src = memoryview(frame)
    dec = FrameDecoder()

    def receive():
        pos, out = 0, []
        while pos < len(frame):
            buf = dec.get_buffer(-1)
            n = min(len(buf), len(frame) - pos)
            buf[:n] = src[pos:pos + n]                  # the kernel's copy, in user space here
            pos += n
            out.extend(dec.buffer_updated(n))
        return codec.decode_frame(out[0], "a", "b")

    msg = benchmark(receive)
    assert msg.nbytes == MiB
    gbs = MiB / benchmark.stats.stats.median / 1e9
    benchmark.extra_info["GB_per_s"] = round(gbs, 2)
    print(f"\ndecode 1 MiB APPEND (incl. one copy in): {gbs:.2f} GB/s")


LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"),
         pytest.param(uvloop.new_event_loop if uvloop else None, id="uvloop",
                      marks=pytest.mark.skipif(uvloop is None, reason="uvloop not installed"))]


@pytest.mark.parametrize("frame_bytes", [MiB, 256 << 10], ids=["1MiB", "256KiB"])
@pytest.mark.parametrize("loop_factory", LOOPS)
def test_loopback_append_throughput(benchmark, loop_factory, frame_bytes):
    total = 128 * MiB
    count = total // frame_bytes
    window = 8
    payload = memoryview(bytearray(b"p" * frame_bytes))
    msg = _append(frame_bytes, payload)
    state = {"received": 0, "bytes": 0}
    wake = {}

    def on_b(peer, m):
        state["received"] += 1
        state["bytes"] += m.nbytes
        ev = wake.get("ev")
        if ev is not None:
            ev.set()

    cfg = TransportConfig(max_send_queue_bytes=64 * MiB)
    runner = asyncio.Runner(loop_factory=loop_factory)
    a = PeerTransport("a", AuthConfig("bench", "a", SECRET, peers=["b"]), lambda p, m: None,
                      config=cfg)
    b = PeerTransport("b", AuthConfig("bench", "b", SECRET, peers=["a"]), on_b, config=cfg)

    async def setup():
        await a.start()
        await b.start()
        a.add_peer("b", b.address)
        b.add_peer("a", a.address)
        await asyncio.wait_for(a.wait_connected("b", 10), 15)
        await asyncio.wait_for(b.wait_connected("a", 10), 15)
        wake["ev"] = asyncio.Event()

    async def transfer():
        start = state["received"]
        sent = 0
        ev = wake["ev"]
        while state["received"] - start < count:
            while sent < count and sent - (state["received"] - start) < window:
                if not a.send("b", msg):
                    break
                sent += 1
            ev.clear()
            await asyncio.wait_for(ev.wait(), 10)
        return state["received"] - start

    try:
        runner.run(setup())
        t0 = time.perf_counter()
        got = benchmark.pedantic(lambda: runner.run(transfer()), rounds=3, iterations=1,
                                 warmup_rounds=1)
        assert got == count
        mbs = total / benchmark.stats.stats.median / 1e6
        benchmark.extra_info["MB_per_s"] = round(mbs)
        print(f"\nloopback APPEND {frame_bytes >> 10} KiB frames, window {window}, "
              f"{loop_factory.__module__.split('.')[0]}: {mbs:.0f} MB/s "
              f"({time.perf_counter() - t0:.1f} s for 4 x {total >> 20} MiB)")
        assert state["bytes"] == 4 * count * frame_bytes
    finally:
        async def teardown():
            await a.close()
            await b.close()
        runner.run(teardown())
        runner.close()
