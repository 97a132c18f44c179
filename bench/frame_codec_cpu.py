"""Thread CPU per encode / decode of the replication hot path's frames (a 1,100-byte APPEND
and its APPEND_RESP): the C frame path (`_wirecodec.FrameCodec`) against codec.py's
reference, in one run (the reference keeps the fixed fields' FixedLayout: the path before
FrameCodec). Best of 5 x N calls each.

    python bench/frame_codec_cpu.py [N=20000]
"""
import sys
import time

from quorumlog.net import codec
from quorumlog.net.framing import HEADER_SIZE
from quorumlog.raft.messages import Append, AppendResponse, Code


def _best(fn, n: int) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - t0) / n)
    return best * 1e6


def _reference(spec):
    """Context: the spec without its frame fast path."""
    class Ref:
        def __enter__(self):
            self.saved = spec.frame
            spec.frame = None

        def __exit__(self, *exc):
            spec.frame = self.saved
    return Ref()


def main(n: int) -> None:
    msgs = [Append(5, "n1", "n2", 100, 5, 101, 101, 5, memoryview(bytes(1100)), 1100, 99, (), 3),
            AppendResponse(5, "n2", "n1", Code.SUCCESS, 101, 100, 101, 0, 0, 3)]
    for msg in msgs:
        spec = codec.spec_for(msg)
        wire = b"".join(bytes(p) for p in codec.encode(msg))
        payload = memoryview(wire)[HEADER_SIZE:]
        enc = _best(lambda: codec.encode(msg), n)
        dec = _best(lambda: codec.decode(spec.type_code, payload, "n1", "n2"), n)
        with _reference(spec):
            enc_ref = _best(lambda: codec.encode(msg), n)
            dec_ref = _best(lambda: codec.decode(spec.type_code, payload, "n1", "n2"), n)
        print(f"{spec.name:12s} encode {enc:5.2f} µs (reference {enc_ref:5.2f})  "
              f"decode {dec:5.2f} µs (reference {dec_ref:5.2f})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
