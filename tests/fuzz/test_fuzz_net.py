"""Fuzz the network layer's decoders with hypothesis: the frame decoder, the message codec
and the handshake state machine, fed arbitrary (and mutated valid) bytes, raise nothing but
the protocol's own errors (FrameError / ProtocolError / AuthError, all QuorumlogError)."""
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from quorumlog.net import codec
from quorumlog.net import messages as m
from quorumlog.net.auth import AuthConfig, Handshake
from quorumlog.net.errors import AuthError, FrameError, ProtocolError
from quorumlog.net.framing import HEADER_SIZE, FrameDecoder, encode_frame
from quorumlog.raft.log import InstallImage
from quorumlog.raft.messages import (Append, AppendResponse, Code, Heartbeat,
                                     InstallSegment, InstallSegmentResponse, VoteRequest,
                                     VoteResponse, VoteResult)

FUZZ = settings(max_examples=400, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

TYPE_CODES = sorted(c for c in range(256) if codec.spec_of_type(c) is not None)

SEEDS = [
    VoteRequest(7, "n1", "n2", 42, 6, True),
    VoteResponse(7, "n2", "n1", 7, VoteResult.ACCEPT),
    VoteRequest(8, "n1", "n2", 42, 6, False, True),              # a pre-vote
    VoteResponse(8, "n2", "n1", 8, VoteResult.REJECT_ALREADY_HAS_LEADER, True),
    m.AuthHello(m.AuthMode.HMAC_SHA256, m.Role.PEER_CONTROL, "c", "n1", "n2", b"\x09" * 32),
    Heartbeat(9, "n1", "n2", 100, 3),
    Append(3, "n1", "n2", 10, 2, 11, 12, 3, b"records", 7, 9, ((12, ("n1", "n2"), ()),), 4),
    AppendResponse(3, "n2", "n1", Code.GAP, 5, 10, 12, 7, 2, 4),
    InstallSegment(5, "n1", "n2", InstallImage(30, None, 90, 4, 400, b'{"v":1}',
                                               ((28, 29, 7, 3, 2),)),
                   0, b"chunk" * 20, 100, False, ((29, ("n1", "n2"), ("n4",)),), 88, 3),
    InstallSegment(5, "n1", "n2", InstallImage(30, 3, 90, 4, 400, b"", ()),
                   300, b"tail" * 20, 100, True, (), 90, 3),
    InstallSegmentResponse(5, "n2", "n1", Code.GAP, 200, 0, 90, 3),
    m.ProduceRequest("orders", [b"a", b"bb"], queue_id=3, tags="t"),
    m.FetchResponse(43, 0, 43, [b"rec1", b"rec2"]),
    m.AdminResponse("n1", 2, 5, "n1", "10.0.0.1:9000", 10, 12, ("n1", "n2")),
    m.GroupAdminRequest(5, m.AdminOp.TRANSFER_LEADERSHIP, "n2"),
    m.GroupAdminResponse(8, 5, "n1", 2, 5, "n1", "10.0.0.1:9000", 10, 12, ("n1", "n2")),
    m.HeartbeatBatch("n1", "n2", [(0, 5, 10, 3, 77, 9), (7, 6, 0, 1, 0, 0)]),
    m.HeartbeatResponseBatch("n2", "n1", [(3, 5, Code.SUCCESS, 3, 77, 2)]),
    m.QuietBeat("n1", "n2", 7, [(0, 5, 10), (7, 6, 0)], 3, [1, 2]),
    m.ErrorResponse(m.ErrorCode.NOT_LEADER, "x", "n2", "h:1", 5, -1, -1),
    m.AuthHello(m.AuthMode.HMAC_SHA256, m.Role.PEER, "c", "n1", "n2", b"\x01" * 32),
]
SEED_PAYLOADS = [(codec.encode_payload(x)[0], b"".join(bytes(p) for p in codec.encode_payload(x)[1]))
                 for x in SEEDS]


def _mutate(data: bytes, edits) -> bytes:
    b = bytearray(data)
    for pos, val in edits:
        if b:
            b[pos % len(b)] = val
    return bytes(b)


@FUZZ
@given(st.binary(max_size=4096), st.integers(1, 600))
def test_frame_decoder_arbitrary_bytes(data, chunk):
    d = FrameDecoder(max_frame_bytes=2048, large_payload_bytes=100, recv_buffer_bytes=256)
    try:
        for i in range(0, len(data), chunk):
            for fr in d.feed(data[i:i + chunk]):
                assert len(fr.payload) <= 2048 - HEADER_SIZE
    except FrameError:
        assert d.failed


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=300)), max_size=8),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       st.integers(1, 97))
def test_frame_decoder_mutated_streams(frames, edits, chunk):
    stream = b"".join(encode_frame(t, p, request_id=i) for i, (t, p) in enumerate(frames))
    mutated = _mutate(stream, edits)
    d = FrameDecoder(large_payload_bytes=64, recv_buffer_bytes=128)
    got = []
    try:
        for i in range(0, len(mutated), chunk):
            got.extend(d.feed(mutated[i:i + chunk]))
    except FrameError:
        return
    if mutated == stream:
        assert [(f.type, bytes(f.payload)) for f in got] == frames


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 255), st.integers(0, 0xFFFF), st.binary(max_size=300)),
                max_size=8),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       st.integers(1, 97), st.booleans())
def test_frame_decoder_groups_mutated_streams(frames, edits, chunk, allow):
    """Frames naming Raft groups (header bytes 6..7), mutated: a decoder that allows groups
    returns each frame's group; one that does not refuses a nonzero group with FrameError."""
    stream = b"".join(encode_frame(t, p, request_id=i, group=g)
                      for i, (t, g, p) in enumerate(frames))
    mutated = _mutate(stream, edits)
    d = FrameDecoder(large_payload_bytes=64, recv_buffer_bytes=128)
    d.allow_groups = allow
    got = []
    try:
        for i in range(0, len(mutated), chunk):
            got.extend(d.feed(mutated[i:i + chunk]))
    except FrameError:
        assert d.failed
        return
    assert allow or all(f.group == 0 for f in got)
    if mutated == stream:
        assert [(f.type, f.group, bytes(f.payload)) for f in got] == frames


@FUZZ
@given(st.sampled_from(TYPE_CODES + [0, 0x30, 0xFF]), st.binary(max_size=600))
def test_codec_arbitrary_payloads(type_code, payload):
    try:
        msg = codec.decode(type_code, payload, "n1", "n2")
    except ProtocolError as e:
        assert str(e)                    # the protocol's own error, saying what is wrong
        return
    # accepted: a message of that very type, which encodes again
    assert codec.encode_payload(msg)[0] == type_code


@FUZZ
@given(st.sampled_from(SEED_PAYLOADS),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(-8, 8))
def test_codec_mutated_valid_payloads(seed, edits, cut):
    type_code, payload = seed
    data = _mutate(payload, edits)
    data = data[:len(data) + cut] if cut < 0 else data + b"\x00" * cut
    try:
        msg = codec.decode(type_code, data, "n1", "n2")
    except ProtocolError:
        return
    # whatever decoded must encode again (every field passed the same checks), as its type
    assert codec.encode_payload(msg)[0] == type_code


SECRET = b"0123456789abcdef-cluster-secret!"


def _responder():
    h = Handshake.responder(AuthConfig("c", "n2", SECRET, peers=["n1"],
                                       client_secret=b"c" * 32), nonce=b"\x07" * 32)
    h.start()
    return h


def _initiator():
    h = Handshake.initiator(AuthConfig("c", "n1", SECRET, peers=["n2"]), "n2", nonce=b"\x08" * 32)
    h.start()
    return h


AUTH_CODES = sorted(codec.types_of_channel(codec.AUTH))


@FUZZ
@given(st.booleans(), st.lists(st.tuples(st.sampled_from(AUTH_CODES + [0x12, 0x40]),
                                         st.binary(max_size=200)), min_size=1, max_size=5))
def test_handshake_arbitrary_frames(responder, frames):
    """Arbitrary handshake frames in any order: only CodecError/AuthError, and never done
    without a valid proof."""
    h = _responder() if responder else _initiator()
    for type_code, payload in frames:
        try:
            msg = codec.decode(type_code, payload, channels=(codec.AUTH,))
            h.receive(msg)
        except (ProtocolError, AuthError):
            continue
    assert not h.done


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
       st.sampled_from(["hello", "proof"]))
def test_handshake_mutated_messages(edits, which):
    """Flip bytes in a genuine handshake: the responder either refuses or (when the edit hit
    nothing that matters) completes; an altered proof never verifies."""
    init, resp = _initiator(), _responder()
    # what _initiator()'s start() sent
    hello = m.AuthHello(m.AuthMode.HMAC_SHA256, m.Role.PEER, "c", "n1", "n2", b"\x08" * 32)
    hello_payload = b"".join(bytes(p) for p in codec.encode(hello))[HEADER_SIZE:]
    try:
        if which == "hello":
            hello_payload = _mutate(hello_payload, edits)
        (ch,) = resp.receive(codec.decode(0x01, hello_payload, channels=(codec.AUTH,)))
        (pf,) = init.receive(ch)
        proof_payload = b"".join(bytes(p) for p in codec.encode_payload(pf)[1])
        if which == "proof":
            mutated = _mutate(proof_payload, edits)
            assume(mutated != proof_payload)
            proof_payload = mutated
        resp.receive(codec.decode(0x03, proof_payload, channels=(codec.AUTH,)))
    except (ProtocolError, AuthError):
        assert not resp.done
        return
    assert which == "hello"            # an intact-enough hello: the real proof then verifies
    assert resp.done


def test_fuzz_targets_cover_every_message_type():
    assert {t for t, _ in SEED_PAYLOADS} <= set(TYPE_CODES)
    assert len(TYPE_CODES) >= 20
