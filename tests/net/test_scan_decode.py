"""The C frame scan decoding a read's hot frames (FrameDecoder.codecs -> Frame.message,
quorumlog._wirecodec.scan_frames) against the reference: the Python frame loop and
codec.decode with every fast path off. Valid frames of every type of a channel, payloads
with any field value, corrupted streams, any header field under a correct checksum, in any
chunking: the same frames and the same FrameError as a decoder without decoders, and every
message the scan decoded is the one the reference decodes from that payload (a frame the
scan declines has no message: the transport then runs codec.decode, the reference). Random
bytes: a FrameError or frames, nothing else."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorumlog.net import codec, framing
from quorumlog.net.errors import FrameError
from quorumlog.net.framing import FrameDecoder, encode_frame

import test_framing
import test_wirecodec
from test_wirecodec import _decode_ref, _outcome, same

pytest.importorskip("quorumlog._wirecodec")

CHECK = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CHANNELS = (codec.RAFT, codec.CLIENT)
SRC, DST = "a", "b"          # (test_wirecodec._decode_ref's)


def _types(channel):
    return sorted(codec.types_of_channel(channel))


@st.composite
def _frames(draw, channel):
    """(type, payload, request id, group) of a frame of `channel`: a payload of its type's
    fields with any one value anywhere its format allows, or arbitrary bytes; sometimes a
    real encoded message of a hot type."""
    seeds = [m for m in test_wirecodec.SEEDS.values() if codec.spec_for(m).channel == channel]
    if draw(st.booleans()):
        # a real message of the channel, some of its fixed fields redrawn (any value)
        seed = draw(st.sampled_from(sorted(seeds, key=lambda x: type(x).__name__)))
        spec = codec.spec_for(seed)
        obj = test_wirecodec._Obj(type(seed), test_wirecodec._with_fields(seed, spec, draw))
        got = _outcome(codec.encode_payload, obj)
        code = spec.type_code
        payload = b"".join(bytes(p) for p in (got[1][1] if got[0] == "ok" else
                                              codec.encode_payload(seed)[1]))
    else:
        code = draw(st.sampled_from(_types(channel)))
        spec = codec.spec_of_type(code)
        payload = draw(test_wirecodec._payloads(spec) if spec.fixed else st.binary(max_size=96))
    return code, payload, draw(st.integers(0, (1 << 64) - 1)), draw(st.sampled_from([0, 0, 3]))


def _run(stream, chunks, channel, *, decoders, groups, large, limit):
    """(frames as tuples, error) of a decoder of `channel`'s types fed `stream` in `chunks`;
    with decoders, each frame's message too."""
    d = FrameDecoder(limit, known_types=codec.types_of_channel(channel),
                     large_payload_bytes=large, recv_buffer_bytes=4096)
    d.allow_groups = groups
    if decoders:
        d.codecs = codec.frame_decoders(channel)
        d.src, d.dst = SRC, DST
    got, err, pos = [], None, 0
    try:
        for n in chunks:
            got.extend(d.feed(stream[pos:pos + n]))
            pos += n
    except FrameError as e:
        err = (type(e).__name__, str(e))
    return got, err


def _check_messages(frames, channel):
    """Each decoded message is the reference's decode of its payload; each frame the scan
    could decode (its type has a decoder that takes the payload) was decoded."""
    table = codec.frame_decoders(channel)
    for fr in frames:
        want = _outcome(_decode_ref, fr.type, bytes(fr.payload))
        if fr.message is not None:
            assert want[0] == "ok", (fr, want)
            assert same(fr.message, want[1]), (fr.message, want[1])
        elif table[fr.type] is not None and isinstance(fr.payload, bytes):
            # (a large payload is the Python loop's and comes out undecoded)
            assert _outcome(table[fr.type].decode, fr.payload, SRC, DST) == ("ok", None), \
                "the scan left a frame undecoded that its decoder takes"


@CHECK
@given(st.sampled_from(CHANNELS), st.data(),
       st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=2),
       st.lists(st.integers(1, 700), min_size=1, max_size=6), st.booleans(),
       st.sampled_from([64, 200, 1 << 16]), st.sampled_from([300, 1 << 20]))
def test_the_scan_decodes_as_the_reference(channel, data, edits, chunks, groups, large, limit):
    items = data.draw(st.lists(st.one_of(_frames(channel), test_framing._ODD_FRAMES),
                               max_size=6))
    stream = test_framing._edited(b"".join(f if isinstance(f, bytes) else
                                           encode_frame(f[0], f[1], request_id=f[2], group=f[3])
                                           for f in items), edits)
    sizes = chunks * (len(stream) // sum(chunks) + 1)
    kw = dict(groups=groups, large=large, limit=limit)
    fast, fast_err = _run(stream, sizes, channel, decoders=True, **kw)
    plain, plain_err = _run(stream, sizes, channel, decoders=False, **kw)
    # the frames and the error do not change with decoding; only `message` is added
    assert [(f.type, f.flags, f.request_id, bytes(f.payload), f.group) for f in fast] == \
        [(f.type, f.flags, f.request_id, bytes(f.payload), f.group) for f in plain]
    assert fast_err == plain_err
    assert all(f.message is None for f in plain)
    _check_messages(fast, channel)


@CHECK
@given(st.sampled_from(CHANNELS), st.binary(max_size=600),
       st.lists(st.integers(1, 300), min_size=1, max_size=4))
def test_random_bytes_give_frames_or_a_frame_error(channel, blob, chunks):
    """Fuzz: any bytes, any chunking -- a FrameError (the decoder then stays failed) or
    frames whose messages are the reference's; no other exception, no crash."""
    sizes = chunks * (len(blob) // sum(chunks) + 1)
    frames, err = _run(blob, sizes, channel, decoders=True, groups=True, large=1 << 16,
                       limit=1 << 20)
    _check_messages(frames, channel)
    if err is not None:
        assert err[0] in ("FrameError", "FrameTooLargeError")


@CHECK
@given(st.sampled_from(CHANNELS), st.lists(st.data(), min_size=1, max_size=4))
def test_random_payloads_under_valid_headers_decode_as_the_reference(channel, draws):
    """Fuzz the decoders through the scan: valid headers of the channel's types around random
    payloads (of any length, or the type's fields with junk appended)."""
    stream = b""
    for data in draws:
        code = data.draw(st.sampled_from(_types(channel)))
        stream += encode_frame(code, data.draw(st.binary(max_size=200)))
    frames, err = _run(stream, [len(stream)], channel, decoders=True, groups=False,
                       large=1 << 16, limit=1 << 20)
    assert err is None and len(frames) == len(draws)
    _check_messages(frames, channel)


def test_a_decoder_that_raises_leaves_the_frame_to_the_reference():
    """scan_frames catches a decoder's exception: the frame comes out undecoded and the
    transport's codec.decode meets (and reports) it."""
    class Boom:
        def decode(self, payload, src, dst):
            raise ValueError("boom")

    d = FrameDecoder(known_types=None)
    d.codecs = tuple(Boom() if t == 0x12 else None for t in range(256))
    frames = d.feed(encode_frame(0x12, b"x" * 40) + encode_frame(0x13, b"y"))
    assert [(f.type, f.message) for f in frames] == [(0x12, None), (0x13, None)]


def test_hot_raft_frames_come_out_decoded():
    """The replication hot path: APPEND (batch and probe), its answer, HEARTBEAT and its
    answer, encoded by the codec, come out of one read with their messages."""
    from quorumlog.raft.messages import Append, AppendResponse, Code, Heartbeat
    msgs = [Append(5, "x", "y", 9, 4, 10, 11, 5, b"r" * 300, 300, 8, (), 2),
            Append(5, "x", "y", 9, 4, 10, 9, 5, None, 0, 8, (), 2),
            AppendResponse(5, "x", "y", Code.SUCCESS, 11, 9, 11, 0, 0, 2),
            Heartbeat(5, "x", "y", 8, 1, 2, 3)]
    stream = b"".join(b"".join(bytes(p) for p in codec.encode(m)) for m in msgs)
    d = FrameDecoder(known_types=codec.types_of_channel(codec.RAFT))
    d.codecs = codec.frame_decoders(codec.RAFT)
    d.src, d.dst = SRC, DST
    frames = d.feed(stream)
    assert len(frames) == 4 and all(f.message is not None for f in frames)
    for f in frames:
        assert same(f.message, _decode_ref(f.type, f.payload))
    assert framing._scan_frames is not None
