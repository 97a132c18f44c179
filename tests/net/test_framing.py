"""Frame header, decoder and encoder: the golden vector of docs/net.md, round trips fed in
every chunking, each header check, limits checked before allocation, zero-copy payloads."""
import binascii
import random
import struct

import numpy as np

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorumlog.errors import QuorumlogError
from quorumlog.net import framing
from quorumlog.net.errors import FrameError, FrameTooLargeError, ProtocolError
from quorumlog.net.framing import (HEADER_SIZE, BufferPool, FrameDecoder, encode_frame,
                                   encode_header)

# docs/net.md "Golden vector": type 0x12, request id 0x0102030405060708, payload b"hello"
GOLDEN = bytes.fromhex("51 4e 01 12 00 00 00 00 08 07 06 05 04 03 02 01 05 00 00 00"
                       " 86 d4 ac d0 68 65 6c 6c 6f")


def test_golden_vector_encode():
    assert encode_frame(0x12, b"hello", request_id=0x0102030405060708) == GOLDEN


def test_golden_vector_checksum_is_crc32_of_first_20_bytes():
    assert struct.unpack_from("<I", GOLDEN, 20)[0] == binascii.crc32(GOLDEN[:20])


def test_golden_vector_decode():
    (fr,) = FrameDecoder().feed(GOLDEN)
    assert (fr.type, fr.flags, fr.request_id, bytes(fr.payload)) == \
        (0x12, 0, 0x0102030405060708, b"hello")


def test_errors_are_quorumlog_errors():
    assert issubclass(FrameTooLargeError, FrameError)
    assert issubclass(FrameError, ProtocolError)
    assert issubclass(ProtocolError, QuorumlogError)


def _frames(n=20, big_every=5, big=200_000):
    out = []
    for i in range(n):
        size = big if big_every and i % big_every == big_every - 1 else (i * 37) % 3000
        out.append((0x10 + i % 7, i, bytes((i + j) % 251 for j in range(size))))
    return out


@pytest.mark.parametrize("chunk", [1, 7, 24, 25, 4096, 65536, 1 << 30])
def test_round_trip_in_any_chunking(chunk):
    frames = _frames()
    stream = b"".join(encode_frame(t, p, request_id=r) for t, r, p in frames)
    d = FrameDecoder(large_payload_bytes=65536, recv_buffer_bytes=70000)
    got = []
    for i in range(0, len(stream), chunk):
        got.extend(d.feed(stream[i:i + chunk]))
    assert [(f.type, f.request_id, bytes(f.payload)) for f in got] == frames
    assert d.buffered_bytes == 0 and d.frames == len(frames) and d.bytes == len(stream)


def test_buffered_protocol_path_receives_large_payload_in_place():
    """get_buffer/buffer_updated as asyncio drives them: the body of a large frame is written
    into a buffer of its own, which becomes the payload (no copy afterwards)."""
    payload = bytes(range(256)) * 1024            # 256 KiB
    stream = encode_frame(0x14, payload) + encode_frame(0x12, b"small")
    d = FrameDecoder(large_payload_bytes=65536)
    pos, got, views = 0, [], []
    while pos < len(stream):
        buf = d.get_buffer(-1)
        views.append(buf)
        n = min(len(buf), len(stream) - pos, 100_000)
        buf[:n] = stream[pos:pos + n]
        pos += n
        got.extend(d.buffer_updated(n))
    assert [bytes(f.payload) for f in got] == [payload, b"small"]
    big = got[0].payload
    assert isinstance(big, memoryview) and isinstance(big.obj, bytearray)
    assert len(big.obj) == len(payload)           # sized by the validated header, exactly
    # the kernel-facing views handed out after the header were slices of that same buffer
    assert any(v.obj is big.obj for v in views)


def test_pool_reuses_a_buffer_only_once_nothing_refers_to_it():
    """Issue 20 (CPU per MB): a large payload's buffer is reused for a later payload only
    when no view of it, no slice and no array made from one is left."""
    pool = BufferPool(max_buffers=2, max_buffer_bytes=1 << 20)
    a = pool.take(300_000)
    a[:] = b"a" * 300_000
    keep_slice = a[10:20]
    del a
    b = pool.take(300_000)                        # a's buffer is still seen through the slice
    assert b.obj is not keep_slice.obj and pool.reused == 0
    arr = np.frombuffer(b, dtype=np.uint8)[5:]    # an array of b keeps it too
    b_id = id(b.obj)
    del b
    c = pool.take(200_000)                        # both kept buffers are in use: its own
    assert c.obj is not keep_slice.obj and id(c.obj) != b_id and pool.reused == 0
    assert len(c.obj) == 200_000 and pool.pooled_bytes == 2 * (512 << 10)
    assert bytes(keep_slice) == b"a" * 10
    gone = id(keep_slice.obj)
    del keep_slice
    d = pool.take(100_000)                        # the first one is free again
    assert id(d.obj) == gone and pool.reused == 1 and len(d) == 100_000
    del arr
    e = pool.take(400_000)
    assert pool.reused == 2 and len(e) == 400_000
    assert pool.take(2 << 20).obj not in (d.obj, e.obj)   # over max_buffer_bytes: its own
    assert pool.pooled_bytes <= 2 * (1 << 20)


def test_pool_keeps_at_most_its_limits():
    pool = BufferPool(max_buffers=3, max_buffer_bytes=1 << 20)
    held = [pool.take(n) for n in (100_000, 900_000, 600_000, 700_000, 3 << 20)]
    assert pool.pooled_bytes == (256 << 10) + (1 << 20) + (768 << 10)
    del held
    big = pool.take(1_000_000)              # a free one too small is replaced, never added
    assert len(big.obj) == 1 << 20 and pool.pooled_bytes <= 3 << 20
    with pytest.raises(ValueError):
        BufferPool(max_buffer_bytes=0)


@pytest.mark.parametrize("seed", range(6))
def test_pooled_decoder_decodes_as_the_plain_one_and_never_changes_a_kept_payload(seed):
    """The same frames from a decoder with a pool as from one without, in any chunking,
    while the caller keeps some payloads (views) and drops others: a kept payload still
    reads as it did when it was delivered, and buffers were reused."""
    rng = random.Random(seed)
    frames = [(0x10 + i % 7, i, bytes([i % 251]) * rng.choice([100, 70_000, 300_000, 900_000]))
              for i in range(40)]
    stream = b"".join(encode_frame(t, p, request_id=r) for t, r, p in frames)
    plain = FrameDecoder(large_payload_bytes=65536)
    pooled = FrameDecoder(large_payload_bytes=65536)
    pooled.pool = BufferPool(max_buffers=3)
    kept, got_plain, got_pooled, pos = [], [], [], 0
    while pos < len(stream):
        n = rng.choice([24, 1000, 65536, 400_000])
        chunk = stream[pos:pos + n]
        pos += n
        got_plain.extend((f.type, f.request_id, bytes(f.payload)) for f in plain.feed(chunk))
        for f in pooled.feed(chunk):
            got_pooled.append((f.type, f.request_id, bytes(f.payload)))
            if rng.random() < 0.3:
                kept.append((f.payload, bytes(f.payload)))
        assert all(bytes(v) == want for v, want in kept)
    assert got_pooled == got_plain == frames
    assert pooled.pool.reused > 0


def test_after_a_large_frame_the_next_read_is_header_sized():
    d = FrameDecoder(large_payload_bytes=1000)
    d.feed(encode_frame(0x14, b"x" * 5000))
    assert len(d.get_buffer(-1)) == HEADER_SIZE
    d.feed(encode_frame(0x12, b"y"))               # a small one: back to the whole buffer
    assert len(d.get_buffer(-1)) > HEADER_SIZE


def _header(**kw):
    f = dict(magic=framing.MAGIC, version=1, ftype=0x10, flags=0, group=0, rid=0, length=0)
    f.update(kw)
    prefix = struct.pack("<HBBHHQI", f["magic"], f["version"], f["ftype"], f["flags"],
                         f["group"], f["rid"], f["length"])
    crc = kw.get("crc", binascii.crc32(prefix))
    return prefix + struct.pack("<I", crc)


@pytest.mark.parametrize("kw,match", [
    (dict(magic=0x4C51), "bad frame magic"),
    (dict(version=2), "unsupported frame version 2"),
    (dict(flags=1), "unknown frame flags"),
    (dict(group=3), "group field is 0x3, must be 0 on this connection"),
    (dict(crc=0), "checksum mismatch"),
])
def test_bad_header_fields(kw, match):
    d = FrameDecoder()
    with pytest.raises(FrameError, match=match):
        d.feed(_header(**kw))


def test_garbage_is_refused_within_one_header():
    d = FrameDecoder()
    assert d.feed(b"GET / HTTP/1.1\r\nHost: x") == []       # 23 bytes: not yet a header
    with pytest.raises(FrameError, match="magic"):
        d.feed(b"\r\n")


def test_unknown_type_refused_at_the_header():
    d = FrameDecoder(known_types=frozenset({1, 2}))
    with pytest.raises(FrameError, match="type 0x10 not allowed"):
        d.feed(_header(ftype=0x10, length=10))


def test_oversized_length_refused_before_the_body_and_names_the_limit():
    d = FrameDecoder(max_frame_bytes=4096)
    with pytest.raises(FrameTooLargeError, match="max_frame_bytes=4096") as ei:
        d.feed(_header(length=0xFFFFFFFF))          # header only: no body ever sent
    assert ei.value.limit == 4096 and ei.value.length == 0xFFFFFFFF + HEADER_SIZE
    assert d.buffered_bytes == 0


def test_frame_exactly_at_the_limit_is_accepted():
    limit = 1000
    d = FrameDecoder(max_frame_bytes=limit, large_payload_bytes=100)
    (fr,) = d.feed(encode_frame(0x10, b"z" * (limit - HEADER_SIZE), max_frame_bytes=limit))
    assert len(fr.payload) == limit - HEADER_SIZE
    with pytest.raises(FrameTooLargeError):
        d.feed(encode_frame(0x10, b"z" * (limit - HEADER_SIZE + 1)))


def test_decoder_stays_failed():
    d = FrameDecoder()
    with pytest.raises(FrameError):
        d.feed(b"\x00" * HEADER_SIZE)
    with pytest.raises(FrameError):
        d.feed(GOLDEN)                              # the stream has lost its framing
    with pytest.raises(FrameError):
        d.get_buffer(-1)
    assert d.failed


def test_frames_before_a_bad_header_in_the_same_read_are_not_lost_silently():
    d = FrameDecoder()
    with pytest.raises(FrameError):
        d.feed(GOLDEN + b"\xff" * HEADER_SIZE)
    assert d.frames == 1                             # the good frame was decoded first


def test_encoder_refuses_what_the_decoder_would():
    with pytest.raises(FrameTooLargeError, match="max_frame_bytes=100"):
        encode_frame(0x10, b"x" * 77, max_frame_bytes=100)
    with pytest.raises(FrameError):
        encode_header(256, 0)
    with pytest.raises(FrameError):
        encode_header(1, 0, flags=1)
    with pytest.raises(FrameError):
        encode_header(1, 0, request_id=-1)


def test_frame_parts_do_not_copy_the_payload():
    big = memoryview(bytearray(b"q" * 100_000))
    head, body = framing.frame_parts(0x14, big, request_id=9)
    assert body is big and len(head) == HEADER_SIZE
    (fr,) = FrameDecoder().feed(head + bytes(body))
    assert fr.request_id == 9 and bytes(fr.payload) == bytes(big)


def test_one_at_a_time_lets_the_caller_change_the_allowed_types_between_frames():
    """The handshake's last frame and the first Raft frame may arrive in one read: in
    one_at_a_time mode the second is parsed only by parse_buffered(), after the caller set
    the types of the new state (before it, it would be refused as not allowed)."""
    data = encode_frame(0x04, b"ok") + encode_frame(0x14, b"x" * 100) + encode_frame(0x12, b"hb")
    d = FrameDecoder(known_types={0x04}, large_payload_bytes=64)
    d.one_at_a_time = True
    (first,) = d.feed(data)
    assert first.type == 0x04
    d.known_types = {0x12, 0x14}
    d.one_at_a_time = False
    assert [(f.type, bytes(f.payload)) for f in d.parse_buffered()] == \
        [(0x14, b"x" * 100), (0x12, b"hb")]
    assert d.parse_buffered() == []
    strict = FrameDecoder(known_types={0x04})
    with pytest.raises(FrameError, match="frame type 0x14 not allowed here"):
        strict.feed(data)


# -- the C scan of small frames (_wirecodec.scan_frames) against the Python loop --------------

def _decode_all(stream, chunks, kw, c_scan: bool, groups: bool):
    """Frames (and the error, if any) of a decoder fed `stream` in `chunks`."""
    saved = framing._scan_frames
    if not c_scan:
        framing._scan_frames = None
    try:
        d = FrameDecoder(**kw)
        d.allow_groups = groups
        got, err, pos = [], None, 0
        try:
            for n in chunks:
                got.extend((f.type, f.flags, f.request_id, bytes(f.payload), f.group)
                           for f in d.feed(stream[pos:pos + n]))
                pos += n
        except FrameError as e:
            err = (type(e).__name__, str(e))
        return got, err, d.frames, d.buffered_bytes
    finally:
        framing._scan_frames = saved


def test_the_c_scan_is_built_and_used():
    pytest.importorskip("quorumlog._wirecodec")
    assert framing._scan_frames is not None


def _raw_frame(magic, version, ftype, flags, group, rid, payload, extra):
    """A frame with any header field values and a correct checksum (length: the payload's
    plus `extra`, so a header can claim more than follows)."""
    prefix = struct.pack("<HBBHHQI", magic, version, ftype, flags, group, rid,
                         len(payload) + extra)
    return prefix + struct.pack("<I", binascii.crc32(prefix)) + payload


_ODD_FRAMES = st.builds(_raw_frame, st.sampled_from([framing.MAGIC, framing.MAGIC ^ 1]),
                        st.sampled_from([framing.VERSION, 2]), st.integers(0, 255),
                        st.sampled_from([0, 0, 1, 0x8000]), st.sampled_from([0, 0, 5]),
                        st.integers(0, (1 << 64) - 1), st.binary(max_size=80),
                        st.sampled_from([0, 0, 0, 1, 1 << 20]))


def _edited(stream: bytes, edits) -> bytes:
    """`stream` with each (position modulo its length, byte value) of `edits` written in:
    the corruptions of the C scan's differential tests (here and test_scan_decode.py)."""
    out = bytearray(stream)
    for pos, val in edits:
        if out:
            out[pos % len(out)] = val
    return bytes(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
           st.tuples(st.integers(0x10, 0x1B), st.integers(0, (1 << 64) - 1),
                     st.integers(0, 3), st.binary(max_size=300)), _ODD_FRAMES), max_size=8),
       st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=3),
       st.lists(st.integers(1, 700), min_size=1, max_size=6),
       st.sampled_from([None, frozenset({0x12, 0x14}), frozenset(range(0x10, 0x1C))]),
       st.booleans(), st.sampled_from([64, 200, 1 << 16]), st.sampled_from([300, 1 << 20]))
def test_c_scan_decodes_as_the_python_loop(frames, edits, chunks, types, groups, large, limit):
    """Valid streams, corrupted ones (any byte changed), headers with any field value under
    a correct checksum, and every chunking: the same frames, the same error, the same
    counters with and without the C scan."""
    pytest.importorskip("quorumlog._wirecodec")
    stream = _edited(b"".join(f if isinstance(f, bytes) else
                              encode_frame(f[0], f[3], request_id=f[1], group=f[2])
                              for f in frames), edits)
    sizes = (chunks * (len(stream) // max(1, sum(chunks)) + 1))
    kw = dict(known_types=types, large_payload_bytes=large, max_frame_bytes=limit,
              recv_buffer_bytes=4096)
    a = _decode_all(stream, sizes, kw, True, groups)
    b = _decode_all(stream, sizes, kw, False, groups)
    assert a == b
