"""Thread CPU of the transport's per-frame Python, with no system call: two authenticated
PeerTransports on loopback (one uvloop), then the receiving connection is driven by hand --
`get_buffer`, the frame's bytes written into it (what the kernel's recv does),
`buffer_updated` -> decoded -> `on_message` (a no-op) -- one frame per read, as a single
message's APPENDs, answers and heartbeats arrive. And the sending side: `send` of a message
to the peer (encode, budget, the turn's queue), the turn's write left out (the frames are
dropped from the turn before they reach the socket). Best of 5 x N per frame type.

    python bench/transport_frame_cpu.py [N=20000]

Compare two trees by running it with PYTHONPATH=<tree>/src (the _Conn attributes used here
are the same on both).
"""
import asyncio
import sys

import uvloop

from quorumlog.net import codec
from quorumlog.net.auth import AuthConfig
from quorumlog.net.transport import PeerTransport, TransportConfig
from quorumlog.raft.messages import Append, AppendResponse, Code, Heartbeat

from frame_codec_cpu import _best     # (bench/ is the script's own directory: on sys.path)

SECRET = b"s" * 32




async def _pair():
    got = []
    a = PeerTransport("n1", AuthConfig("c", "n1", SECRET, peers=["n2"]), lambda p, m: None,
                      listen=("127.0.0.1", 0), config=TransportConfig())
    b = PeerTransport("n2", AuthConfig("c", "n2", SECRET, peers=["n1"]),
                      lambda p, m: got.append(m), listen=("127.0.0.1", 0),
                      config=TransportConfig())
    await a.start()
    await b.start()
    a.add_peer("n2", b.address)
    b.add_peer("n1", a.address)
    await a.wait_connected("n2", 10)
    await b.wait_connected("n1", 10)
    return a, b, got


async def main(n: int) -> None:
    a, b, got = await _pair()
    try:
        msgs = [AppendResponse(5, "n1", "n2", Code.SUCCESS, 101, 100, 101, 0, 0, 3),
                Heartbeat(5, "n1", "n2", 99, 7, 1, 0),
                Append(5, "n1", "n2", 100, 5, 101, 101, 5, bytes(1100), 1100, 99, (), 3)]
        rx = b._peers["n1"].data.conn
        tx = a._peers["n2"].data.conn
        for msg in msgs:
            wire = b"".join(bytes(p) for p in codec.encode(msg))
            k = len(wire)

            def receive():
                rx.get_buffer(-1)[:k] = wire
                rx.buffer_updated(k)

            def send():
                a.send("n2", msg)
                tx._turn.clear()             # (never written: no system call measured)
                tx.queued_bytes -= tx._turn_bytes
                tx._turn_bytes = 0

            got.clear()
            r = _best(receive, n)
            assert len(got) == 5 * n and type(got[-1]) is type(msg)
            s = _best(send, n)
            print(f"{type(msg).__name__:15s} {k:5d} B  receive {r:5.2f} µs  send {s:5.2f} µs")
    finally:
        await a.close()
        await b.close()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000))
