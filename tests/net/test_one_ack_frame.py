"""The one-message produce acknowledgement's frame fast path (codec._OneAckFrame, every
single-message produce's answer) against codec.py's reference walk: any field values --
in range, at and beyond the bounds, not plain ints -- and any number of positions encode to
the same frame or the same error; any payload, valid or damaged, decodes to the same
message or the same error. It may only ever decline (None), never accept what the
reference refuses."""
import struct

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorumlog.net import codec
from quorumlog.net import messages as m
from quorumlog.net.framing import HEADER_SIZE

SPEC = codec.spec_of_type(0x41)
CHECK = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
I64 = 1 << 63


def _reference(fn, *args, **kw):
    frame, SPEC.frame = SPEC.frame, None
    try:
        return _outcome(fn, *args, **kw)
    finally:
        SPEC.frame = frame


def _outcome(fn, *args, **kw):
    try:
        r = fn(*args, **kw)
    except Exception as e:      # noqa: BLE001 -- the error itself is the outcome compared
        return ("error", type(e).__name__, str(e))
    if isinstance(r, list):
        return ("frame", b"".join(bytes(p) for p in r))
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
    base = bytearray(struct.pack("<qiqqIq", *fields))
    if draw(st.booleans()):
        base[draw(st.integers(0, len(base) - 1))] = draw(st.integers(0, 255))
    how = draw(st.sampled_from(["same", "same", "same", "cut", "longer", "noise"]))
    if how == "cut":
        base = base[:draw(st.integers(0, len(base) - 1))]
    elif how == "longer":
        base += draw(st.binary(min_size=1, max_size=16))
    elif how == "noise":
        base = bytearray(draw(st.binary(max_size=48)))
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
