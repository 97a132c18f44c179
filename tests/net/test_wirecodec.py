"""The fixed fields of every wire message in one C call (quorumlog._wirecodec.FixedLayout),
and whole frames of the replication hot path (FrameCodec: APPEND, HEARTBEAT and their
answers), against the pure-Python reference in codec.py (Fixed.check per field): for
every registered message type, random field values (in range, at the bounds, out of range,
not ints, enum members and non-members) encode to the same bytes or the same error, and
random payloads decode to the same message or the same error. The fast path may only ever
say "not mine" (None) -- never accept what the reference refuses."""
import enum
import operator
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorumlog.net import codec
from quorumlog.net.errors import CodecError, EncodeError

import test_codec

pytest.importorskip("quorumlog._wirecodec")

SPECS = [codec.spec_of_type(c) for c in range(256)
         if codec.spec_of_type(c) is not None and codec.spec_of_type(c).fixed]
CHECK = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _encode_ref(spec, obj):
    fast, spec.fast = spec.fast, None
    try:
        return codec.encode_payload(obj)
    finally:
        spec.fast = fast


def _decode_ref(code, payload):
    spec = codec.spec_of_type(code)
    fast, spec.fast = spec.fast, None
    frame, spec.frame = spec.frame, None
    try:
        return codec.decode(code, payload, "a", "b")
    finally:
        spec.fast, spec.frame = fast, frame


def _norm(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("bytes", bytes(v))
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    if hasattr(v, "__dict__") or hasattr(v, "__slots__"):
        return (type(v).__name__, repr(v))
    return (type(v).__name__, v)


def same(a, b) -> bool:
    """Two decoded messages: the same type and the same value (and type) of every field."""
    spec = codec.spec_for(a)
    return type(a) is type(b) and all(
        _norm(getattr(a, n, None)) == _norm(getattr(b, n, None))
        for n in spec.all_names + ["src", "dst", "payload", "nbytes", "image"])


def _outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except (CodecError, EncodeError) as e:
        return type(e).__name__, str(e)


def _field_value(kind):
    """Values around a field's bounds, outside them, of other types, and enum members."""
    edge = st.sampled_from([kind.lo, kind.hi, kind.lo - 1, kind.hi + 1, 0, 1, -1,
                            (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, -(1 << 63)])
    inside = st.integers(kind.lo, kind.hi)
    other = st.sampled_from([None, "1", 1.0, True, False])
    strategies = [edge, inside, other]
    if isinstance(kind.conv, type) and kind.conv is not bool:
        strategies.append(st.sampled_from(list(kind.conv)))
    return st.one_of(*strategies)


@st.composite
def fixed_values(draw):
    spec = draw(st.sampled_from(SPECS))
    return spec, {name: draw(_field_value(kind)) for name, kind in spec.fixed}


@CHECK
@given(fixed_values())
def test_packing_the_fixed_fields_matches_the_reference(case):
    spec, vals = case
    obj = types.SimpleNamespace(**vals)
    got = spec.fast.pack(obj)
    try:
        want = spec.fixed_struct.pack(*[kind.check(name, vals[name], EncodeError)
                                        for name, kind in spec.fixed])
    except EncodeError:
        want = None
    if want is None:
        assert got is None, f"{spec.name}: fast path accepted {vals} that the reference refuses"
    else:
        # (None only for what the reference takes but the fast path leaves to it: non-ints)
        assert got == want or (got is None and any(type(v) is not int and
                                                   not isinstance(v, int) for v in vals.values()))


_FULL = {"B": (0, 0xFF), "H": (0, 0xFFFF), "I": (0, 0xFFFFFFFF), "Q": (0, (1 << 64) - 1),
         "i": (-(1 << 31), (1 << 31) - 1), "q": (-(1 << 63), (1 << 63) - 1)}


def _raw_value(kind):
    """Any value the field's struct format can carry, biased to the field's bounds."""
    lo, hi = _FULL[kind.fmt]
    near = [v for v in (kind.lo, kind.hi, kind.lo - 1, kind.hi + 1, 0, lo, hi) if lo <= v <= hi]
    return st.one_of(st.sampled_from(near), st.integers(lo, hi),
                     st.integers(max(lo, kind.lo), min(hi, kind.hi)))


def _payloads(spec):
    """The fixed fields all in range but one drawn anywhere the format allows (or none),
    then a few bytes more; or arbitrary bytes."""
    @st.composite
    def build(draw):
        odd = draw(st.integers(-1, len(spec.fixed) - 1))
        raw = [draw(_raw_value(kind) if i == odd else
                    st.integers(kind.lo, kind.hi) | st.sampled_from([kind.lo, kind.hi]))
               for i, (_, kind) in enumerate(spec.fixed)]
        return spec.fixed_struct.pack(*raw) + draw(st.binary(max_size=8))
    return st.one_of(build(), st.binary(max_size=96))


def _check_unpack(spec, payload):
    got = spec.fast.unpack(payload)
    raw = spec.fixed_struct.unpack_from(payload, 0)
    try:
        want = {name: kind.check(name, v, CodecError) for (name, kind), v in zip(spec.fixed, raw)}
    except CodecError:
        want = None
    assert got == want, (spec.name, raw)
    if want is not None:
        assert [type(got[n]) for n in want] == [type(want[n]) for n in want], (spec.name, raw)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_unpacking_the_fixed_fields_matches_the_reference(spec, data):
    payload = data.draw(_payloads(spec))
    if len(payload) < spec.fixed_struct.size:
        assert spec.fast.unpack(payload) is None
        return
    _check_unpack(spec, payload)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_field_at_and_beyond_its_bounds(spec):
    """Each field in turn at lo - 1, lo, hi, hi + 1 and the ends of its format (the others
    at their lower bound): unpack and pack agree with the reference on every one."""
    base = [kind.lo for _, kind in spec.fixed]
    for i, (name, kind) in enumerate(spec.fixed):
        lo, hi = _FULL[kind.fmt]
        for v in {kind.lo - 1, kind.lo, kind.hi, kind.hi + 1, lo, hi}:
            if not lo <= v <= hi:
                continue
            raw = list(base)
            raw[i] = v
            _check_unpack(spec, spec.fixed_struct.pack(*raw))
            obj = types.SimpleNamespace(**dict(zip(spec.fixed_names, raw)))
            try:
                want = spec.fixed_struct.pack(*[k.check(n, getattr(obj, n), EncodeError)
                                                for n, k in spec.fixed])
            except EncodeError:
                want = None
            assert spec.fast.pack(obj) == want, (spec.name, name, v)


def _with_fields(msg, spec, draw) -> dict:
    """The attributes of a real message with some fixed fields replaced by drawn values."""
    vals = {name: getattr(msg, name) for name in spec.all_names if hasattr(msg, name)}
    for name, kind in spec.fixed:
        if draw(st.booleans()):
            vals[name] = draw(_field_value(kind))
    return vals


SEEDS = {}
for _m in test_codec.RAFT + test_codec.OTHERS:
    SEEDS.setdefault(type(_m), _m)


@CHECK
@given(st.data())
def test_whole_messages_encode_and_decode_as_the_reference_does(data):
    msg = data.draw(st.sampled_from(sorted(SEEDS.values(), key=lambda x: type(x).__name__)))
    spec = codec.spec_for(msg)
    obj = _Obj(type(msg), _with_fields(msg, spec, data.draw))
    # through the codec with the fast path on and off: the same bytes or the same error
    fast = _outcome(codec.encode_payload, obj)
    ref = _outcome(_encode_ref, spec, obj)
    if fast[0] != "ok" or ref[0] != "ok":
        assert fast == ref
        return
    assert fast[1][0] == ref[1][0]
    payload = b"".join(bytes(p) for p in fast[1][1])
    assert payload == b"".join(bytes(p) for p in ref[1][1])
    a = _outcome(codec.decode, spec.type_code, payload, "a", "b")
    b = _outcome(_decode_ref, spec.type_code, payload)
    assert a[0] == b[0]
    assert same(a[1], b[1]) if a[0] == "ok" else a[1] == b[1]


class _Obj:
    """An object codec.spec_for maps to `cls`'s spec, with arbitrary attribute values."""

    def __new__(cls, target, vals):
        sub = _SUBS.get(target)
        if sub is None:
            sub = _SUBS[target] = type("Fake" + target.__name__, (), {})
            codec._BY_CLASS[sub] = codec._BY_CLASS[target]
        o = object.__new__(sub)
        o.__dict__.update(vals)
        return o


_SUBS: dict = {}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SPECS), st.binary(max_size=200),
       st.lists(st.tuples(st.integers(0, 199), st.integers(0, 255)), max_size=6))
def test_fuzz_decode_fast_equals_reference(spec, noise, edits):
    """Arbitrary and mutated valid payloads: the codec with the fast path gives the message
    or the error the reference gives, never another exception."""
    seed = next((m for m in SEEDS.values() if codec.spec_for(m) is spec), None)
    payload = noise
    if seed is not None and edits:
        b = bytearray(b"".join(bytes(p) for p in codec.encode_payload(seed)[1]))
        for pos, val in edits:
            if b:
                b[pos % len(b)] = val
        payload = bytes(b)
    a = _outcome(codec.decode, spec.type_code, payload, "a", "b")
    b = _outcome(_decode_ref, spec.type_code, payload)
    assert a[0] == b[0]
    assert same(a[1], b[1]) if a[0] == "ok" else a[1] == b[1]


def test_every_fixed_field_kind_has_a_fast_layout():
    assert SPECS and all(s.fast is not None for s in SPECS)
    assert all(s.fast.size == s.fixed_struct.size for s in SPECS)


def test_a_numpy_integer_is_left_to_the_reference():
    np = pytest.importorskip("numpy")
    spec = codec.spec_of_type(0x12)     # Heartbeat
    vals = {name: np.int64(3) for name, _ in spec.fixed}
    assert spec.fast.pack(types.SimpleNamespace(**vals)) is None
    assert spec.fixed_struct.pack(*[k.check(n, vals[n], EncodeError) for n, k in spec.fixed])
    assert operator.index(vals["term"]) == 3



class _Shade(enum.IntEnum):
    """An IntEnum whose _missing_ takes values that are not members (a pseudo-member)."""
    LIGHT = 1
    DARK = 2

    @classmethod
    def _missing_(cls, value):
        if value == 7:
            return cls.DARK
        return None


def test_enum_fields_convert_by_the_member_map_and_else_by_the_enum():
    """FixedLayout converts an IntEnum field by the enum's value -> member map (no
    Enum.__call__); a value not in the map still goes through the enum itself, so its
    _missing_ hook decides exactly as the reference (Fixed.check) does."""
    from quorumlog._wirecodec import FixedLayout
    lay = FixedLayout(["shade", "n"], ["B", "B"], [0, 0], [255, 255], [_Shade, None])
    for raw, want in ((1, _Shade.LIGHT), (2, _Shade.DARK), (7, _Shade.DARK)):
        got = lay.unpack(bytes([raw, 5]))
        assert got["shade"] is want and type(got["n"]) is int
        ref = codec.Fixed("B", 0, 255, _Shade, "Shade").check("shade", raw, CodecError)
        assert ref is want
    assert lay.unpack(bytes([3, 5])) is None             # refused: the reference raises
    assert lay.pack(types.SimpleNamespace(shade=2, n=1)) == bytes([2, 1])
    assert lay.pack(types.SimpleNamespace(shade=7, n=1)) == bytes([7, 1])
    assert lay.pack(types.SimpleNamespace(shade=3, n=1)) is None
    assert lay.pack(types.SimpleNamespace(shade=True, n=1)) == bytes([1, 1])

# -- whole frames (FrameCodec) -----------------------------------------------------------------

FRAMED = [s for s in SPECS if s.frame is not None and s.channel == codec.RAFT]
# (a one-message produce and its acknowledgement have one too: tests/net/test_produce_frames.py)


def test_the_hot_raft_messages_have_a_frame_fast_path():
    assert sorted(s.name for s in FRAMED) == ["APPEND", "APPEND_RESP", "HEARTBEAT",
                                              "HEARTBEAT_RESP"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_the_frame_header_crc_is_zlibs(data):
    import zlib
    from quorumlog import _wirecodec
    assert _wirecodec.crc32(data) == zlib.crc32(data)


def _encode_frame_ref(msg, rid, group, limit):
    spec = codec.spec_for(msg)
    frame, spec.frame = spec.frame, None
    try:
        return codec.encode(msg, rid, group=group, max_frame_bytes=limit)
    finally:
        spec.frame = frame


def _parts_shape(parts):
    return [(type(p).__name__, bytes(p)) for p in parts]


_PAYLOADS = st.one_of(st.none(), st.binary(max_size=40),
                      st.sampled_from([b"", bytes(range(256)) * 64, bytes(codec.ZERO_COPY_MIN_BYTES),
                                       bytes(codec.ZERO_COPY_MIN_BYTES - 1)]),
                      st.binary(max_size=40).map(memoryview),
                      st.binary(min_size=8, max_size=40).map(lambda b: memoryview(b).cast("I")
                                                            if len(b) % 4 == 0 else bytearray(b)),
                      st.just(memoryview(bytes(range(64)))[::2]), st.just("not bytes"))


@st.composite
def framed_messages(draw):
    """A real hot-path message with some fields replaced: out-of-range values, CONFIG
    entries, odd payloads, inconsistent APPEND indexes."""
    seed = draw(st.sampled_from([m for m in SEEDS.values() if codec.spec_for(m).frame]))
    spec = codec.spec_for(seed)
    vals = _with_fields(seed, spec, draw)
    vals.update(src="n1", dst="n2")
    if type(seed).__name__ == "Append":
        vals["configs"] = draw(st.sampled_from([(), [], ((vals.get("first_index"), ("a",), ()),),
                                                None, "x"]))
        vals["payload"] = draw(_PAYLOADS)
        if draw(st.booleans()):       # a consistent batch or probe
            prev = draw(st.integers(0, 1000))
            vals.update(prev_index=prev, first_index=prev + 1,
                        last_index=prev + draw(st.integers(0, 3)))
    return _Obj(type(seed), vals)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(framed_messages(), st.sampled_from([0, 1, 7, (1 << 64) - 1, 1 << 64, -1, True]),
       st.sampled_from([0, 1, 0xFFFF, 0x10000, -1]),
       st.sampled_from([codec.DEFAULT_MAX_FRAME_BYTES, 64, 120, 24 + 60]))
def test_framed_encode_equals_the_reference(msg, rid, group, limit):
    """The same buffers (bytes, and the payload's own view from ZERO_COPY_MIN_BYTES on) or
    the same error, for any field values, payload, request id, group and frame limit."""
    fast = _outcome_frame(codec.encode, msg, rid, group, limit)
    ref = _outcome_frame(_encode_frame_ref, msg, rid, group, limit)
    if fast[0] != "ok" or ref[0] != "ok":
        assert fast == ref
        return
    assert _parts_shape(fast[1]) == _parts_shape(ref[1])
    # ... and those bytes decode as the reference decodes them (or fail as it fails)
    code = codec.spec_for(msg).type_code
    payload = b"".join(bytes(p) for p in fast[1])[24:]
    a = _outcome(codec.decode, code, payload, "a", "b")
    b = _outcome(_decode_ref, code, payload)
    assert a[0] == b[0]
    assert same(a[1], b[1]) if a[0] == "ok" else a[1] == b[1]


def _outcome_frame(fn, msg, rid, group, limit):
    from quorumlog.net.errors import NetError
    try:
        if fn is codec.encode:
            return "ok", codec.encode(msg, rid, group=group, max_frame_bytes=limit)
        return "ok", fn(msg, rid, group, limit)
    except NetError as e:
        return type(e).__name__, str(e)


def test_a_strided_payload_is_an_encode_error_naming_the_field():
    from quorumlog.net.errors import EncodeError
    from quorumlog.raft.messages import Append
    for view in (memoryview(bytes(range(64)))[::2],
                 memoryview(bytearray(codec.ZERO_COPY_MIN_BYTES * 2))[::2]):
        a = Append(3, "n1", "n2", 0, 0, 1, 2, 3, view, view.nbytes, 0, (), 1)
        with pytest.raises(EncodeError, match=r"APPEND\.payload: a non-contiguous buffer"):
            codec.encode(a)


def test_a_large_payload_stays_the_callers_view():
    from quorumlog.raft.messages import Append
    big = bytearray(codec.ZERO_COPY_MIN_BYTES + 5)
    a = Append(3, "n1", "n2", 0, 0, 1, 2, 3, memoryview(big), len(big), 0, (), 1)
    parts = codec.encode(a)
    assert len(parts) == 2 and type(parts[1]) is memoryview
    big[-1] = 7                   # a view of the caller's buffer, not a copy
    assert parts[1][-1] == 7


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FRAMED), st.binary(max_size=120),
       st.lists(st.tuples(st.integers(0, 199), st.integers(0, 255)), max_size=6),
       st.booleans(), st.booleans())
def test_framed_decode_equals_the_reference(spec, noise, edits, as_view, tail):
    """Valid, mutated and arbitrary payloads (bytes or a memoryview, with or without a
    batch's records): the same message, field for field, or the same error."""
    seed = [m for m in test_codec.RAFT if codec.spec_for(m) is spec
            and not getattr(m, "configs", ())][len(edits) % 2 if spec.name == "APPEND" else 0]
    payload = noise
    if edits or tail:
        b = bytearray(b"".join(bytes(p) for p in codec.encode_payload(seed)[1]))
        for pos, val in edits:
            if b:
                b[pos % len(b)] = val
        payload = bytes(b) + (noise if tail else b"")
    if as_view:
        payload = memoryview(bytearray(b"xx" + payload))[2:]
    a = _outcome(codec.decode, spec.type_code, payload, "a", "b")
    b = _outcome(_decode_ref, spec.type_code, payload)
    assert a[0] == b[0]
    assert same(a[1], b[1]) if a[0] == "ok" else a[1] == b[1]


def test_the_fast_path_takes_the_common_messages():
    """What the replication path sends goes through FrameCodec (not declined to the
    reference): APPENDs without CONFIG entries, probes, answers, heartbeats."""
    taken = set()
    for msg in test_codec.RAFT:
        spec = codec.spec_for(msg)
        if spec.frame is None or getattr(msg, "configs", ()):
            continue
        parts = spec.frame.encode(msg, 0, 0, codec.DEFAULT_MAX_FRAME_BYTES,
                                  codec.ZERO_COPY_MIN_BYTES)
        assert parts is not None, spec.name
        payload = b"".join(bytes(p) for p in parts)[24:]
        got = spec.frame.decode(payload, "a", "b")
        assert got is not None and same(got, _decode_ref(spec.type_code, payload)), spec.name
        taken.add(spec.name)
    assert taken == {s.name for s in FRAMED}
