"""The produce path's frame fast paths against codec.py's reference walk: the one-message
acknowledgement (codec._OneAckFrame, every single-message produce's answer) -- any field
values, in range, at and beyond the bounds or not plain ints, and any number of positions
encode to the same frame or the same error, and any payload, valid or damaged, decodes to
the same message or the same error -- and the one-message request (codec._OneBodyProduceFrame,
the leader's side of every single-message produce): any payload decodes to the same message
(its body a view of the payload) or the same error. A fast path may only ever decline
(None), never accept what the reference refuses."""
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorumlog.net import codec
from quorumlog.net import messages as m
from quorumlog.net.framing import HEADER_SIZE

SPEC = codec.spec_of_type(0x41)
REQ = codec.spec_of_type(0x40)
CHECK = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
I64 = 1 << 63


def _reference(fn, *args, spec=SPEC, **kw):
    frame, spec.frame = spec.frame, None
    try:
        return _outcome(fn, *args, **kw)
    finally:
        spec.frame = frame


def _outcome(fn, *args, **kw):
    try:
        r = fn(*args, **kw)
    except Exception as e:      # noqa: BLE001 -- the error itself is the outcome compared
        return ("error", type(e).__name__, str(e))
    if isinstance(r, list):
        return ("frame", b"".join(bytes(p) for p in r))
    if isinstance(r, m.ProduceRequest):
        return ("request", r.topic, r.queue_id, r.tags, r.delay_level, r.producer_id,
                r.sequence, r.base_sequence, type(r.bodies).__name__,
                tuple((type(b).__name__, bytes(b)) for b in r.bodies))
    return ("message", type(r).__name__, tuple((type(v).__name__, v) for v in (
        r.first_index, r.queue_id, r.first_queue_offset, r.store_timestamp_ms)),
        tuple((type(p).__name__, p) for p in r.positions))


def _edge(lo, hi):
    return st.one_of(st.sampled_from([lo - 1, hi + 1, lo, hi, -I64 - 1, I64, True]),
                     st.integers(lo, hi),
                     st.sampled_from([np.int64(5), "7", None, 1.0]))


@st.composite
def acks(draw):
    """A valid one-message acknowledgement with up to two fields (or its positions)
    replaced by values at or beyond their bounds, or not plain ints."""
    bounds = [(0, I64 - 1), (0, m.MAX_QUEUE_ID), (0, I64 - 1), (-I64, I64 - 1)]
    vals = [draw(st.integers(lo, hi)) for lo, hi in bounds]
    positions = (draw(st.integers(0, I64 - 1)),)
    for i in draw(st.lists(st.integers(0, 3), max_size=2)):
        vals[i] = draw(_edge(*bounds[i]))
    how = draw(st.integers(0, 3))
    if how == 1:          # one position, at or beyond its bounds, or not a plain int
        positions = (draw(st.sampled_from([-1, -I64 - 1, I64, 0, I64 - 1, True,
                                           np.int64(5), "7"])),)
    elif how == 2:        # none, or more than one
        positions = tuple(draw(st.lists(_edge(0, I64 - 1), max_size=3)))
    elif how == 3:        # not a tuple
        positions = draw(st.lists(st.integers(0, 10), min_size=1, max_size=2))
    return m.ProduceResponse(*vals, positions)


@CHECK
@given(acks(), st.sampled_from([0, 1, 7, (1 << 64) - 1, 1 << 64, -1]),
       st.sampled_from([0, 3]), st.sampled_from([codec.DEFAULT_MAX_FRAME_BYTES, 64, 63]))
def test_encode_equals_the_reference(msg, rid, group, limit):
    fast = _outcome(codec.encode, msg, rid, max_frame_bytes=limit, group=group)
    assert fast == _reference(codec.encode, msg, rid, max_frame_bytes=limit, group=group)


@st.composite
def payloads(draw):
    """A one-message acknowledgement's payload with any field values (in and out of their
    bounds), some bytes replaced, cut or extended -- or any bytes at all."""
    q64 = [-(1 << 63), -1, (1 << 63) - 1]
    fields = [draw(st.integers(0, 1 << 40)) for _ in range(4)] + [1, draw(st.integers(0, 1 << 40))]
    fields[1] = draw(st.integers(0, m.MAX_QUEUE_ID))
    for i in draw(st.lists(st.integers(0, 5), max_size=2)):
        fields[i] = draw(st.sampled_from({1: [-(1 << 31), -1, m.MAX_QUEUE_ID + 1, (1 << 31) - 1],
                                          4: [0, 2, 1 << 16, (1 << 32) - 1]}.get(i, q64)))
    return _damaged(draw, bytearray(struct.pack("<qiqqIq", *fields)), 1)


def _damaged(draw, base: bytearray, edits: int):
    """base with up to `edits` bytes replaced, then kept, cut or extended, or any bytes
    instead; as bytes or a memoryview."""
    for _ in range(draw(st.integers(0, edits))):
        at = draw(st.integers(0, len(base) - 1))
        base[at] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xC3, 0xFF, draw(st.integers(0, 255))]))
    how = draw(st.sampled_from(["same", "same", "same", "cut", "longer", "noise"]))
    if how == "cut":
        base = base[:draw(st.integers(0, len(base) - 1))]
    elif how == "longer":
        base += draw(st.binary(min_size=1, max_size=16))
    elif how == "noise":
        base = bytearray(draw(st.binary(max_size=64)))
    return bytes(base) if draw(st.booleans()) else memoryview(bytes(base))


@CHECK
@given(payloads())
def test_decode_equals_the_reference(payload):
    assert _outcome(codec.decode, 0x41, payload) == _reference(codec.decode, 0x41, payload)


def test_a_one_message_ack_takes_the_fast_path_both_ways():
    """(Not declined to the reference: the produce path's answers do go through it.)"""
    msg = m.ProduceResponse(12, 3, 40, 1_700_000_000_000, (9_000,))
    parts = SPEC.frame.encode(msg, 5, 0, codec.DEFAULT_MAX_FRAME_BYTES, 0)
    assert parts is not None
    assert ("frame", b"".join(parts)) == _reference(codec.encode, msg, 5)
    got = SPEC.frame.decode(memoryview(b"".join(parts))[HEADER_SIZE:], None, None)
    assert got == msg


@st.composite
def array_positions(draw):
    """A batch's positions as the leader hands them over: an int64 array -- mostly valid,
    else with a negative item, empty, over the batch limit, of another dtype or byte order,
    strided, or 2-D (each declined by the fast path: the reference decides)."""
    n = draw(st.sampled_from([1, 2, 3, 256, m.MAX_BATCH_MESSAGES]))
    a = np.array(draw(st.lists(st.integers(0, I64 - 1), min_size=1, max_size=4)) * n,
                 dtype=np.int64)[:n]
    how = draw(st.sampled_from(["valid"] * 4 + ["negative", "empty", "over", "int32",
                                                "big-endian", "strided", "2-d", "uint64"]))
    if how == "negative":
        a[draw(st.integers(0, len(a) - 1))] = draw(st.sampled_from([-1, -I64]))
    elif how == "empty":
        a = a[:0]
    elif how == "over":
        a = np.zeros(m.MAX_BATCH_MESSAGES + 1, dtype=np.int64)
    elif how == "int32":
        a = a.astype(np.int32)
    elif how == "big-endian":
        a = a.astype(">i8")
    elif how == "strided":
        a = np.repeat(a, 2)[::2]
    elif how == "2-d":
        a = a.reshape(1, -1)
    elif how == "uint64":
        a = a.astype(np.uint64)
    return a


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(acks(), array_positions(), st.sampled_from([codec.DEFAULT_MAX_FRAME_BYTES, 64, 2100]))
def test_a_batch_ack_of_the_leaders_array_encodes_as_the_reference(msg, positions, limit):
    """The client service passes a batch's int64 positions array as it is: the fast path
    packs it in one C pass (_clientframe.ack_positions) to the same frame the reference
    makes of it item by item -- or declines and the reference decides (its error too)."""
    msg.positions = positions
    fast = _outcome(codec.encode, msg, 9, max_frame_bytes=limit)
    assert fast == _reference(codec.encode, msg, 9, max_frame_bytes=limit)
    # and what a client decodes is the tuple of the same ints
    if fast[0] == "frame":
        got = codec.decode(0x41, memoryview(fast[1])[HEADER_SIZE:])
        assert got.positions == tuple(int(x) for x in positions.ravel())


def test_a_batch_ack_takes_the_fast_path():
    pos = np.arange(100, 100 + 256 * 1100, 1100, dtype=np.int64)
    msg = m.ProduceResponse(12, 3, 40, 1_700_000_000_000, pos)
    parts = SPEC.frame.encode(msg, 5, 0, codec.DEFAULT_MAX_FRAME_BYTES, 0)
    assert parts is not None
    assert ("frame", b"".join(parts)) == _reference(codec.encode, msg, 5)
    assert ("frame", b"".join(parts)) == _reference(
        codec.encode, m.ProduceResponse(12, 3, 40, 1_700_000_000_000, tuple(pos.tolist())), 5)


@st.composite
def requests(draw):
    """A produce request's payload as a client frames it -- mostly one body; any topic and
    tags text, any queue id -- with some bytes replaced, cut or extended, or any bytes."""
    topic = draw(st.one_of(st.just("orders"), st.text(min_size=1, max_size=8)))
    tags = draw(st.one_of(st.none(), st.just("t"), st.text(max_size=4)))
    bodies = draw(st.one_of(st.lists(st.binary(max_size=40), min_size=1, max_size=1),
                            st.lists(st.binary(max_size=8), max_size=3)))
    msg = m.ProduceRequest(topic, bodies, draw(st.sampled_from([-1, 0, 7, m.MAX_QUEUE_ID])),
                           tags or None, draw(st.sampled_from([0, 3])),
                           draw(st.integers(0, (1 << 64) - 1)), draw(st.integers(0, 99)),
                           draw(st.integers(0, 99)))
    try:
        base = bytearray(b"".join(bytes(p) for p in codec.encode(msg))[HEADER_SIZE:])
    except Exception:               # noqa: BLE001 -- (a topic over 255 UTF-8 bytes)
        base = bytearray(b"\xff\xff\x00\x00" + bytes(40))
    field = draw(st.sampled_from(["none", "queue", "topic length", "tags length"]))
    if field == "queue":          # (the fixed fields' first: an i32)
        struct.pack_into("<i", base, 0, draw(st.sampled_from([-2, -(1 << 31), 1 << 16,
                                                              (1 << 31) - 1])))
    elif field != "none" and len(base) > 30:     # (the u8 after the 29 fixed bytes; tags after)
        at = 29 if field == "topic length" else 30 + base[29]
        if at < len(base):
            base[at] = draw(st.sampled_from([0, 1, base[at] + 1 & 0xFF, 0xFF]))
    return _damaged(draw, base, 2)


@CHECK
@given(requests())
def test_request_decode_equals_the_reference(payload):
    fast = _outcome(codec.decode, 0x40, payload, channels=(codec.CLIENT,))
    assert fast == _reference(codec.decode, 0x40, payload, spec=REQ, channels=(codec.CLIENT,))


def test_a_one_message_request_takes_the_fast_path():
    from quorumlog.client import encode_produce
    payload = b"".join(bytes(p) for p in encode_produce("orders", [b"x" * 1024], -1, "tg",
                                                       12345, 7, 0, 5))
    got = REQ.frame.decode(payload, None, None)
    assert got is not None and type(got.bodies[0]) is memoryview
    assert _outcome(lambda: got) == _reference(codec.decode, 0x40, payload, spec=REQ)


def _hand_made(queue=-1, topic=b"t", tags=b"", count=1, body=b"abc", extra=b""):
    return (struct.pack("<iBQQQ", queue, 0, 9, 2, 2) + bytes([len(topic)]) + topic
            + bytes([len(tags)]) + tags + struct.pack("<II", count, len(body)) + body + extra)


@pytest.mark.parametrize("payload", [
    _hand_made(topic=b""), _hand_made(queue=-2), _hand_made(queue=1 << 16),
    _hand_made(topic=b"\xc3"), _hand_made(tags=b"\xff"), _hand_made(count=0),
    _hand_made(count=2), _hand_made(extra=b"!"), _hand_made()[:-1], _hand_made()],
    ids=["empty topic", "queue -2", "queue 65536", "topic not utf-8", "tags not utf-8",
         "no body", "two bodies, one there", "a byte after the body", "short body", "valid"])
def test_hand_made_requests_decode_as_the_reference_does(payload):
    fast = _outcome(codec.decode, 0x40, payload)
    assert fast == _reference(codec.decode, 0x40, payload, spec=REQ)


@CHECK
@given(st.one_of(requests(), st.sampled_from([
    _hand_made(topic=b""), _hand_made(queue=-2), _hand_made(queue=1 << 16),
    _hand_made(topic=b"\xc3"), _hand_made(tags=b"\xff"), _hand_made(count=0),
    _hand_made(count=2), _hand_made(extra=b"!"), _hand_made()[:-1], _hand_made(),
    _hand_made(tags=b"x" * 255), _hand_made(topic=b"y" * 255)])),
       st.sampled_from([bytes, memoryview]))
def test_the_c_request_decoder_equals_its_python_twin(payload, kind):
    """_clientframe.OneBodyProduce (the frame scan's decoder of a one-message produce) and
    codec._OneBodyProduceFrame (its twin when the extension is not built) take and decline
    the same payloads, and decode them to the same request."""
    pytest.importorskip("quorumlog._clientframe")
    assert type(REQ.frame).__name__ == "OneBodyProduce"
    payload = kind(payload)
    c, py = REQ.frame.decode(payload, None, None), \
        codec.ONE_BODY_PRODUCE_PY.decode(payload, None, None)
    assert (c is None) == (py is None)
    if c is not None:
        c = _outcome(lambda: c)
        assert c == _outcome(lambda: py)
        assert c == _reference(codec.decode, 0x40, bytes(payload), spec=REQ)


@CHECK
@given(acks(), st.one_of(st.none(), array_positions()),
       st.sampled_from([0, 1, 7, (1 << 64) - 1, 1 << 64, -1]), st.sampled_from([0, 3]),
       st.sampled_from([codec.DEFAULT_MAX_FRAME_BYTES, 64, 63, 2100]))
def test_the_c_ack_codec_equals_its_python_twin(msg, positions, rid, group, limit):
    """_wirecodec.OneAckFrame (the ack's codec when built) and codec._OneAckFrame (its twin)
    encode the same acknowledgements to the same frame and decline the same ones."""
    pytest.importorskip("quorumlog._wirecodec")
    assert type(SPEC.frame).__name__ == "OneAckFrame"
    if positions is not None:
        msg.positions = positions
    c = SPEC.frame.encode(msg, rid, group, limit, 0)
    py = codec.ONE_ACK_PY.encode(msg, rid, group, limit, 0) if 0 <= rid < 1 << 64 and \
        type(rid) is int else None
    assert (c is None) == (py is None), (c, py)
    if c is not None:
        assert b"".join(c) == b"".join(py)


@CHECK
@given(payloads())
def test_the_c_ack_decoder_equals_its_python_twin(payload):
    pytest.importorskip("quorumlog._wirecodec")
    c, py = SPEC.frame.decode(payload, None, None), codec.ONE_ACK_PY.decode(payload, None, None)
    assert (c is None) == (py is None)
    assert c == py
