"""Unit tests and decoder fuzzing of the pure-Python reference codec (quorumlog.format).

Every limit of docs/format.md is checked at its boundary (the largest legal value encodes, one
more raises the specific error), every decoder error path is reached on purpose (the record's
CRC is recomputed after the mutation so the intended check, not the CRC, fires), and
hypothesis feeds random and mutated bytes into the decoders: they raise only
quorumlog.errors exceptions, and whatever they accept re-encodes to the same bytes.
"""
import struct

import pytest
from hypothesis import given, strategies as st

from quorumlog import errors, format as qf

from cl_support import SEG, controls, hsettings, messages, recrc

# ------------------------------------------------------------------ hashes


@pytest.mark.parametrize("data, want", [
    (b"", 0),
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),            # RFC 3720 B.4 test vectors
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
])
def test_crc32c_known_vectors(data, want):
    assert qf.crc32c(data) == want


@given(st.binary(max_size=300), st.binary(max_size=300))
@hsettings(50)
def test_crc32c_incremental(a, b):
    assert qf.crc32c(b, qf.crc32c(a)) == qf.crc32c(a + b)


def test_fnv1a64_known_vectors():
    assert qf.fnv1a64(b"") == 0xCBF29CE484222325
    assert qf.fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert qf.fnv1a64(b"foobar") == 0x85944171F73967E8
    # the header's tag_hash: signed, and 0 for no/empty tags by definition
    assert qf.tag_hash_of(None) == qf.tag_hash_of("") == 0
    assert qf.tag_hash_of("a") == 0xAF63DC4C8601EC8C - (1 << 64)
    assert qf.tag_hash_of("foobar") == qf.tag_hash_of(b"foobar") < 0
    assert qf.topic_hash_of("a") == qf.tag_hash_of("a")


# ------------------------------------------------------------------ round trips

@given(messages(), st.integers(1, (1 << 64) - 1), st.integers(0, (1 << 64) - 1),
       st.integers(0, (1 << 64) - 1), st.integers(-(1 << 63), (1 << 63) - 1))
@hsettings(200)
def test_message_round_trip(m, index, term, position, store_ts):
    raw = qf.encode_record(qf.TYPE_MESSAGE, index=index, term=term, position=position,
                           store_timestamp_ms=store_ts, **m)
    rec = qf.decode_record(raw, expected_position=position)
    assert len(raw) == rec.size
    assert (rec.type, rec.index, rec.term, rec.position) == (qf.TYPE_MESSAGE, index, term, position)
    assert rec.topic == m["topic"] and bytes(rec.body) == m["body"]
    assert rec.tags == (m["tags"] or None)
    assert rec.keys == m["keys"] and rec.properties == (m["properties"] or {})
    assert (rec.queue_id, rec.queue_offset, rec.flags) == (m["queue_id"], m["queue_offset"], m["flags"])
    assert (rec.born_timestamp_ms, rec.store_timestamp_ms) == (m["born_timestamp_ms"], store_ts)
    assert rec.tag_hash == qf.tag_hash_of(m["tags"])
    assert qf.encode(rec) == raw
    # decoding inside a larger buffer at an offset gives the same record
    assert qf.decode_record(b"\x07" * 13 + raw + b"\x09" * 5, 13) == rec


@given(controls(), st.integers(1, 1 << 40), st.integers(0, 1 << 40))
@hsettings(50)
def test_control_round_trip(c, index, term):
    raw = qf.encode_record(c["type"], index=index, term=term, position=4096,
                           born_timestamp_ms=5, store_timestamp_ms=5, body=c["payload"])
    rec = qf.decode_record(raw)
    assert (rec.type, rec.index, rec.term, bytes(rec.body)) == (c["type"], index, term, c["payload"])
    assert rec.topic == "" and rec.tags is None and rec.keys == () and rec.properties == {}
    assert qf.encode(rec) == raw


def test_blank_layout():
    raw = qf.encode_blank(12345, 200)
    assert len(raw) == 200 and raw[96:] == bytes(104)
    assert struct.unpack_from("<IIHBB", raw) == (qf.crc32c(raw[4:96]), 200, 0x4C51, 1, 5)
    assert raw[8:10] == b"QL"
    rec = qf.decode_record(raw)
    assert (rec.type, rec.position, rec.index) == (qf.TYPE_BLANK, 12345, 0)
    with pytest.raises(errors.InvalidArgumentError):
        qf.encode_blank(0, 95)


def test_header_field_offsets():
    raw = qf.encode_record(qf.TYPE_MESSAGE, index=0x0102030405060708, term=9, position=10,
                           topic="tp", queue_id=11, queue_offset=12, born_timestamp_ms=-13,
                           store_timestamp_ms=14, flags=15, tags="tg", keys=("k",),
                           properties={"a": "bc"}, body=b"body")
    assert struct.unpack_from("<Q", raw, 16)[0] == 0x0102030405060708
    assert struct.unpack_from("<QQQqqq", raw, 24) == (9, 10, 12, -13, 14, qf.tag_hash_of("tg"))
    assert struct.unpack_from("<IHHIIII", raw, 72) == (11, 2, 2, 3, 7, 4, 0)
    assert struct.unpack_from("<I", raw, 12)[0] == 15
    assert raw[96:] == b"tp" + b"tg" + b"\x01\x00k" + b"\x01\x00a\x02\x00bc" + b"body"


# ------------------------------------------------------------------ encoder limits

def enc(**kw):
    base = dict(index=1, term=1, position=0, topic="t")
    base.update(kw)
    t = base.pop("type", qf.TYPE_MESSAGE)
    return qf.encode_record(t, **base)


@pytest.mark.parametrize("topic", ["a" * 255, "\u00e9" * 127, "x.y-z_1:2", "\u4e2d\u6587"])
def test_topic_ok(topic):
    assert qf.decode_record(enc(topic=topic)).topic == topic


@pytest.mark.parametrize("topic", ["", "a" * 256, "\u00e9" * 128, "a/b", "/", "a\0b", ".", "..",
                                   "\ud800", None, b"bytes", 5])
def test_topic_rejected(topic):
    with pytest.raises(errors.InvalidTopicError):
        enc(topic=topic)


def test_tags_limits():
    assert qf.decode_record(enc(tags="t" * 255)).tags == "t" * 255
    for bad in ("t" * 256, "\u00e9" * 128, "\udfff", 7, b"x"):
        with pytest.raises(errors.InvalidArgumentError):
            enc(tags=bad)


def test_keys_limits():
    # the keys field is at most 32768 bytes: one key of 32766 bytes + its 2-byte length fits
    assert len(qf.decode_record(enc(keys=("k" * 32766,))).keys[0]) == 32766
    assert qf.decode_record(enc(keys=("",) * 16384)).keys == ("",) * 16384
    for bad in [("k" * 32767,), ("",) * 16385, ("a" * 20000, "b" * 20000), ("k" * 65536,),
                "notatuple", (1,), ("\ud800",), [b"x"], {"a": "b"}]:
        with pytest.raises(errors.InvalidArgumentError):
            enc(keys=bad)


def test_properties_limits():
    ok = {"k": "v" * 32763}                       # 2 + 1 + 2 + 32763 = 32768
    assert qf.decode_record(enc(properties=ok)).properties == ok
    assert qf.decode_record(enc(properties={"": ""})).properties == {"": ""}
    for bad in [{"k": "v" * 32764}, {"a" * 70000: ""}, {"k": 1}, {1: "v"}, [("a", "b")],
                "a=b", {"\ud800": "x"}]:
        with pytest.raises(errors.InvalidArgumentError):
            enc(properties=bad)


def test_property_order_is_kept():
    props = {"z": "1", "a": "2", "m": "3"}
    assert list(qf.decode_record(enc(properties=props)).properties) == ["z", "a", "m"]


def test_queue_id_limits():
    assert qf.decode_record(enc(queue_id=65535)).queue_id == 65535
    for bad in (65536, -1, 1 << 40, "1", 1.0, True, None):
        with pytest.raises(errors.InvalidQueueError):
            enc(queue_id=bad)


def test_body_limits():
    assert len(qf.decode_record(enc(body=b"x" * 1000, max_message_bytes=1000)).body) == 1000
    with pytest.raises(errors.MessageTooLargeError):
        enc(body=b"x" * 1001, max_message_bytes=1000)
    # the whole record must fit in S - 96
    fits = SEG - 96 - 96 - 1
    assert len(enc(body=b"x" * fits, segment_size_bytes=SEG)) == SEG - 96
    with pytest.raises(errors.MessageTooLargeError):
        enc(body=b"x" * (fits + 1), segment_size_bytes=SEG)
    # bytes-likes of any kind, including non-byte formats
    assert bytes(qf.decode_record(enc(body=bytearray(b"ab"))).body) == b"ab"
    assert bytes(qf.decode_record(enc(body=memoryview(b"abcd")[1:3])).body) == b"bc"
    import array
    assert len(qf.decode_record(enc(body=array.array("i", [1, 2]))).body) == 8
    for bad in ("text", 5, None, [1, 2]):
        with pytest.raises(errors.InvalidArgumentError):
            enc(body=bad)


@pytest.mark.parametrize("kw", [
    dict(index=0), dict(index=-1), dict(index=1 << 64), dict(index=True), dict(index=1.0),
    dict(term=-1), dict(term=1 << 64), dict(term="1"), dict(position=-1), dict(position=None),
    dict(born_timestamp_ms=1 << 63), dict(store_timestamp_ms=-(1 << 63) - 1),
    dict(flags=-1), dict(flags=1 << 32), dict(queue_offset=-1), dict(queue_offset=1 << 64),
    dict(type=0), dict(type=5), dict(type=6), dict(type=True), dict(type="MESSAGE"),
    dict(type=qf.TYPE_NOOP, body=b"x"),
    dict(type=qf.TYPE_CONFIG, topic="t"),
    dict(type=qf.TYPE_META, topic="", queue_id=1),
    dict(type=qf.TYPE_META, topic="", tags="x"),
    dict(type=qf.TYPE_CONFIG, topic="", flags=1),
])
def test_bad_arguments_raise_invalid_argument(kw):
    with pytest.raises(errors.InvalidArgumentError):
        enc(**kw)


def test_encode_record_object_checks_tag_hash():
    rec = qf.decode_record(enc(tags="x"))
    import dataclasses
    with pytest.raises(errors.InvalidArgumentError):
        qf.encode(dataclasses.replace(rec, tag_hash=1))
    with pytest.raises(errors.InvalidArgumentError):
        qf.encode(qf.decode_record(qf.encode_blank(0, 96)))


def test_record_is_frozen_with_slots():
    rec = qf.decode_record(enc())
    with pytest.raises(Exception):
        rec.index = 5
    assert not hasattr(rec, "__dict__")


# ------------------------------------------------------------------ decoder error paths

GOOD = dict(index=7, term=3, position=4096, topic="topic", tags="tg", keys=("k1", "k2"),
            properties={"p": "q"}, body=b"payload", queue_id=2, queue_offset=9)
TOPIC_AT = 96
TAGS_AT = 96 + 5
KEYS_AT = TAGS_AT + 2
PROPS_AT = KEYS_AT + 8
BODY_AT = PROPS_AT + 6


def good():
    return bytearray(enc(**GOOD))


def mutate(**fields):
    """A GOOD record with header fields overwritten (by offset) and a fresh CRC."""
    buf = good()
    for off, (fmt, val) in fields.items():
        struct.pack_into(fmt, buf, int(off[1:]), val)
    return recrc(buf)


def expect_corrupt(buf, match, offset=0, **kw):
    with pytest.raises(errors.CorruptLogError, match=match) as ei:
        qf.decode_record(bytes(buf), offset, **kw)
    assert ei.value.offset == offset
    return ei.value


def test_good_record_layout_assumed_by_these_tests():
    raw = good()
    assert raw[TOPIC_AT:TAGS_AT] == b"topic" and raw[TAGS_AT:KEYS_AT] == b"tg"
    assert raw[BODY_AT:] == b"payload"


def test_decode_short_buffers():
    raw = bytes(good())
    expect_corrupt(raw[:95], "header")
    expect_corrupt(b"", "header")
    expect_corrupt(raw[:-1], "total_size")
    expect_corrupt(b"\0" * 10 + raw[:-1], "total_size", offset=10)
    with pytest.raises(errors.InvalidArgumentError):
        qf.decode_record(raw, len(raw) + 1)
    with pytest.raises(errors.InvalidArgumentError):
        qf.decode_record(raw, -1)


def test_decode_header_errors():
    expect_corrupt(mutate(o8=("<H", 0x4C52)), "magic")
    expect_corrupt(mutate(o10=("<B", 2)), "version")
    expect_corrupt(mutate(o11=("<B", 0)), "type")
    expect_corrupt(mutate(o11=("<B", 6)), "type")
    expect_corrupt(mutate(o4=("<I", 95)), "total_size")
    expect_corrupt(mutate(o4=("<I", 1 << 31)), "total_size")
    expect_corrupt(mutate(o92=("<I", 1)), "reserved")
    expect_corrupt(mutate(o16=("<Q", 0)), "raft_index 0")
    expect_corrupt(mutate(o72=("<I", 65536)), "queue_id")
    expect_corrupt(mutate(o64=("<q", 12345)), "tag_hash")
    expect_corrupt(mutate(o88=("<I", 6)), "field lengths")
    # consistent lengths and CRC, but a field over its limit
    expect_corrupt(raw_record(tags=b"a" * 256), "over its limit")
    expect_corrupt(raw_record(keys=b"\x00\x00" * 16385), "over its limit")
    expect_corrupt(raw_record(props=b"\x00\x00" * 16385), "over its limit")
    expect_corrupt(raw_record(topic=b"a" * 256), "topic_len 256")
    assert qf.decode_record(raw_record(tags=b"a" * 255)).tags == "a" * 255


def raw_record(rtype=qf.TYPE_MESSAGE, topic=b"t", tags=b"", keys=b"", props=b"", body=b""):
    """Pack a record by hand with consistent lengths and CRC (bypassing encoder limits)."""
    total = 96 + len(topic) + len(tags) + len(keys) + len(props) + len(body)
    buf = bytearray(qf.HEADER_STRUCT.pack(
        0, total, qf.MAGIC, 1, rtype, 0, 1, 1, 0, 0, 0, 0, qf.tag_hash_of(tags), 0,
        len(topic), len(tags), len(keys), len(props), len(body), 0))
    buf += topic + tags + keys + props + body
    return bytes(recrc(buf))


def test_decode_crc_error_for_every_single_byte_flip():
    raw = good()
    for i in range(len(raw)):
        buf = bytearray(raw)
        buf[i] ^= 0x40
        with pytest.raises(errors.CorruptLogError):
            qf.decode_record(bytes(buf))


def test_decode_crc_message_names_crc():
    buf = good()
    buf[BODY_AT] ^= 1
    expect_corrupt(buf, "CRC")


def test_decode_position_and_limits():
    raw = bytes(good())
    expect_corrupt(raw, "position", expected_position=4097)
    assert qf.decode_record(raw, expected_position=4096).position == 4096
    expect_corrupt(raw, "max_message_bytes", max_message_bytes=6)
    assert qf.decode_record(raw, max_message_bytes=7).body == b"payload"


def test_decode_variable_part_errors():
    def with_bytes(at, new):
        buf = good()
        buf[at:at + len(new)] = new
        return recrc(buf)
    expect_corrupt(with_bytes(TOPIC_AT, b"\xff"), "topic is not valid UTF-8")
    expect_corrupt(with_bytes(TOPIC_AT, b"/"), "NUL or '/'")
    expect_corrupt(with_bytes(TOPIC_AT, b"\0"), "NUL or '/'")
    expect_corrupt(with_bytes(KEYS_AT, b"\x09\x00"), "key runs past")
    expect_corrupt(with_bytes(KEYS_AT + 2, b"\xc3"), "key is not valid UTF-8")
    expect_corrupt(with_bytes(PROPS_AT, b"\x05\x00"), "property runs past")
    expect_corrupt(with_bytes(PROPS_AT + 3, b"\x05\x00"), "property runs past")
    expect_corrupt(with_bytes(PROPS_AT + 2, b"\x80"), "property is not valid UTF-8")


def test_decode_tags_utf8_error():
    # invalid UTF-8 tags need a matching tag hash to reach the UTF-8 check
    buf = good()
    buf[TAGS_AT:TAGS_AT + 2] = b"\xff\xfe"
    struct.pack_into("<q", buf, 64, qf.tag_hash_of(b"\xff\xfe"))
    expect_corrupt(recrc(buf), "tags is not valid UTF-8")


def test_decode_framing_errors():
    expect_corrupt(raw_record(keys=b"\x01\x00a\x00"), "truncated key length")
    expect_corrupt(raw_record(props=b"\x01\x00a"), "truncated length in the properties")
    expect_corrupt(raw_record(props=b"\x01\x00a\x01\x00"), "property runs past")
    # duplicate property key: a dict cannot produce it, a corrupt writer could
    expect_corrupt(raw_record(props=b"\x01\x00a\x01\x001" * 2), "duplicate property key")
    assert qf.decode_record(raw_record(keys=b"\x00\x00" * 3)).keys == ("", "", "")


def test_decode_type_specific_errors():
    expect_corrupt(mutate(o76=("<H", 0), o78=("<H", 7)), "tag_hash|topic_len")
    msg0 = bytearray(enc(topic="t"))
    struct.pack_into("<HI", msg0, 76, 0, 0)       # topic_len 0, tags_len 0
    msg0[96:97] = b""
    struct.pack_into("<I", msg0, 4, len(msg0))
    expect_corrupt(recrc(msg0), "topic_len 0")
    noop = bytearray(enc(type=qf.TYPE_NOOP, topic=""))
    for off, fmt, val, what in [(12, "<I", 1, "message fields"), (40, "<Q", 1, "message fields"),
                                (72, "<I", 1, "message fields")]:
        buf = bytearray(noop)
        struct.pack_into(fmt, buf, off, val)
        expect_corrupt(recrc(buf), what)
    cfg = bytearray(enc(type=qf.TYPE_CONFIG, topic="", body=b"x"))
    cfg[11] = qf.TYPE_NOOP
    expect_corrupt(recrc(cfg), "NOOP record with a body")


def test_decode_blank_errors():
    for off, fmt in [(12, "<I"), (16, "<Q"), (24, "<Q"), (48, "<q"), (76, "<H"), (88, "<I")]:
        buf = bytearray(qf.encode_blank(0, 200))
        struct.pack_into(fmt, buf, off, 1)
        expect_corrupt(recrc(buf), "BLANK record with a non-zero field")
    buf = bytearray(qf.encode_blank(0, 200))
    buf[150] = 1          # outside the CRC'd header: caught by the zero check
    expect_corrupt(buf, "non-zero bytes after")


# ------------------------------------------------------------------ iter_records

def build_segment(records, size=SEG, blank=True, base=0):
    seg = bytearray(size)
    off = 0
    for raw in records:
        seg[off:off + len(raw)] = raw
        off += len(raw)
    if blank:
        seg[off:] = qf.encode_blank(base + off, size - off)
    return seg, off


def seq(n, start_index=1, term=1, base=0, body=b"b" * 100):
    out, pos = [], base
    for i in range(n):
        raw = enc(index=start_index + i, term=term, position=pos, body=body)
        out.append(raw)
        pos += len(raw)
    return out


def test_iter_records_full_and_partial_segment():
    recs = seq(10)
    seg, end = build_segment(recs)
    got = list(qf.iter_records(seg, 0))
    assert [r.index for r in got] == list(range(1, 11))
    assert list(qf.iter_records(seg, 0, include_blank=True))[-1].type == qf.TYPE_BLANK
    seg2, _ = build_segment(recs, blank=False)          # last segment: zeros after the end
    assert [r.index for r in qf.iter_records(seg2, 0)] == list(range(1, 11))
    # a segment starting at a later position
    recs = seq(3, start_index=50, base=SEG)
    seg3, _ = build_segment(recs, base=SEG)
    assert [r.position for r in qf.iter_records(seg3, SEG)] == [SEG, SEG + len(recs[0]),
                                                                 SEG + 2 * len(recs[0])]


def test_iter_records_errors_name_the_offset():
    recs = seq(5)
    size = len(recs[0])
    seg, _ = build_segment(recs, blank=False)
    seg[2 * size + 50] ^= 1
    with pytest.raises(errors.CorruptLogError) as ei:
        list(qf.iter_records(seg, 0, path="/x/seg"))
    assert (ei.value.offset, ei.value.path) == (2 * size, "/x/seg")
    assert "/x/seg" in str(ei.value)
    # index gap, term decrease, wrong position, BLANK not reaching the end
    for bad, what in [(seq(2) + seq(1, start_index=4, base=2 * size), "raft index"),
                      (seq(2, term=5) + seq(1, start_index=3, term=4, base=2 * size), "term"),
                      (seq(2) + seq(1, start_index=3, base=2 * size + 1), "position")]:
        seg, _ = build_segment(bad, blank=False)
        with pytest.raises(errors.CorruptLogError, match=what):
            list(qf.iter_records(seg, 0))
    seg, end = build_segment(seq(2), blank=False)
    seg[end:end + 200] = qf.encode_blank(end, 200)
    with pytest.raises(errors.CorruptLogError, match="BLANK does not reach"):
        list(qf.iter_records(seg, 0))


def test_iter_records_rejects_record_leaving_less_than_a_header():
    # a record ending 95 bytes before the segment end breaks the BLANK rule
    body = b"z" * (SEG - 95 - 96 - 1)
    raw = enc(body=body)
    assert SEG - len(raw) == 95
    seg, _ = build_segment([raw], blank=False)
    with pytest.raises(errors.CorruptLogError, match="header's room"):
        list(qf.iter_records(seg, 0))


# ------------------------------------------------------------------ index and checkpoint

def test_index_entry_round_trip_and_errors():
    raw = qf.encode_index_entry(65536, 3, 120, qf.TYPE_CONFIG)
    assert raw == struct.pack("<QQIB", 65536, 3, 120, 3) + bytes(3)
    assert qf.decode_index_entry(raw) == qf.IndexEntry(65536, 3, 120, 3)
    assert qf.decode_index_entry(bytes(48), 24) is None
    for bad in (raw[:20] + b"\x05" + bytes(3), raw[:21] + b"\x01\x00\x00",
                struct.pack("<QQIB", 0, 0, 95, 1) + bytes(3)):
        with pytest.raises(errors.CorruptLogError):
            qf.decode_index_entry(bad)
    with pytest.raises(errors.CorruptLogError):
        qf.decode_index_entry(raw[:23])
    with pytest.raises(errors.InvalidArgumentError):
        qf.encode_index_entry(0, 0, 96, qf.TYPE_BLANK)


def test_checkpoint_round_trip_and_errors():
    cp = qf.Checkpoint(1, 1000, 10, 9, 900, 800, 0, SEG, 256, 1234)
    raw = qf.encode_checkpoint(cp)
    assert len(raw) == 128 and raw[:4] == b"QLCP"
    assert qf.decode_checkpoint(raw) == cp and cp.clean
    for i in range(128):
        buf = bytearray(raw)
        buf[i] ^= 0x10
        with pytest.raises(errors.CorruptLogError):
            qf.decode_checkpoint(bytes(buf), path="cp")
    with pytest.raises(errors.CorruptLogError, match="magic"):
        qf.decode_checkpoint(b"XXXX" + raw[4:])
    with pytest.raises(errors.CorruptLogError, match="128"):
        qf.decode_checkpoint(raw[:127])
    bad = bytearray(raw)
    bad[100] = 1
    struct.pack_into("<I", bad, 124, qf.crc32c(bytes(bad[:124])))
    with pytest.raises(errors.CorruptLogError, match="reserved"):
        qf.decode_checkpoint(bytes(bad))


# ------------------------------------------------------------------ reference writer

def test_writer_blank_rule_boundaries():
    """n + 96 <= remaining: the record goes here; one byte more: BLANK + next segment."""
    for extra, expect_blank in ((0, False), (1, True)):
        w = qf.ReferenceWriter(segment_size_bytes=SEG, index_file_entries=16)
        w.append("t", b"a" * 1000, term=1, store_timestamp_ms=0)
        remaining = SEG - w.end_position
        body = remaining - 96 - (96 + 1) + extra        # record size = remaining - 96 + extra
        idx, pos = w.append("t", b"b" * body, term=1, store_timestamp_ms=0)
        assert (pos == SEG) is expect_blank
        files = w.files(written_at_ms=0)
        seg0 = files["commitlog/" + qf.segment_name(0)]
        recs = list(qf.iter_records(seg0, 0, include_blank=True))
        if expect_blank:
            assert recs[-1].type == qf.TYPE_BLANK and recs[-1].position == 1000 + 97
            assert "commitlog/" + qf.segment_name(SEG) in files
        else:
            assert [r.type for r in recs] == [1, 1] and SEG - w.end_position == 96


def test_writer_index_files_and_checkpoint(tmp_path):
    w = qf.ReferenceWriter(segment_size_bytes=SEG, index_file_entries=4)
    for i in range(10):
        w.append("t", bytes([i]) * 10, term=1 + i // 3, store_timestamp_ms=i)
    w.append_control(qf.TYPE_NOOP, term=5, store_timestamp_ms=99)
    w.commit(9)
    w.commit(4)                              # never backwards
    w.set_dispatched_position(100)
    files = w.write(tmp_path, written_at_ms=77)
    assert sorted(k for k in files if k.startswith("index/")) == [
        "index/" + qf.index_file_name(i) for i in (1, 5, 9)]
    third = files["index/" + qf.index_file_name(9)]
    assert len(third) == 4 * 24
    assert qf.decode_index_entry(third, 24 * 2).type == qf.TYPE_NOOP
    assert qf.decode_index_entry(third, 24 * 3) is None
    cp = qf.decode_checkpoint(files["checkpoint"])
    assert (cp.committed_index, cp.flushed_index, cp.flushed_position, cp.written_at_ms) == \
        (9, 11, w.end_position, 77)
    e9 = qf.decode_index_entry(third, 0)
    assert cp.committed_position == e9.position + e9.size
    assert (tmp_path / "checkpoint").read_bytes() == files["checkpoint"]
    with pytest.raises(errors.InvalidArgumentError):
        w.append("t", b"", term=4, store_timestamp_ms=0)          # term decreasing
    with pytest.raises(errors.InvalidArgumentError):
        w.append_control(qf.TYPE_MESSAGE, term=5, store_timestamp_ms=0)
    assert w.last_index == 11


# ------------------------------------------------------------------ fuzzing the decoders

ALLOWED = (errors.CorruptLogError, errors.InvalidArgumentError)


def check_decoder(buf, offset=0):
    """Decoding arbitrary bytes raises only quorumlog errors; an accepted record re-encodes
    to exactly the bytes it was decoded from (nothing is silently normalised)."""
    try:
        rec = qf.decode_record(buf, offset)
    except ALLOWED:
        return None
    raw = bytes(buf[offset:offset + struct.unpack_from("<I", buf, offset + 4)[0]])
    if rec.type == qf.TYPE_BLANK:
        assert qf.encode_blank(rec.position, len(raw)) == raw
    else:
        assert qf.encode(rec) == raw
    return rec


@given(st.binary(max_size=400))
@hsettings(300)
def test_fuzz_random_bytes(data):
    check_decoder(data)


@given(st.binary(min_size=96, max_size=300))
@hsettings(300)
def test_fuzz_random_header_with_valid_magic_and_crc(data):
    # random bytes that pass the magic/version/CRC gates exercise the deeper checks
    buf = bytearray(data)
    buf[8:11] = b"QL\x01"
    buf[11] = buf[11] % 6
    struct.pack_into("<I", buf, 4, struct.unpack_from("<I", buf, 4)[0] % (len(buf) + 1))
    recrc(buf)
    check_decoder(bytes(buf))


@st.composite
def mutated_records(draw):
    if draw(st.booleans()):
        m = draw(messages(max_body=200))
        raw = bytearray(qf.encode_record(qf.TYPE_MESSAGE, index=5, term=2, position=0, **m))
    else:
        c = draw(controls(max_body=100))
        raw = bytearray(qf.encode_record(c["type"], index=5, term=2, position=0,
                                         body=c["payload"]))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert"]))
        if not raw:
            break
        i = draw(st.integers(0, len(raw) - 1))
        if op == "flip":
            raw[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            raw[i] = draw(st.integers(0, 255))
        elif op == "truncate":
            del raw[i:]
        else:
            raw[i:i] = draw(st.binary(min_size=1, max_size=8))
    if draw(st.booleans()) and len(raw) >= 12:
        recrc(raw)     # make the mutation pass the CRC so the structural checks must catch it
    return bytes(raw)


@given(mutated_records())
@hsettings(500)
def test_fuzz_mutated_records(raw):
    check_decoder(raw)


@given(mutated_records())
@hsettings(100)
def test_fuzz_iter_records(raw):
    seg = bytearray(4096)
    seg[:len(raw)] = raw[:4096]
    try:
        for rec in qf.iter_records(bytes(seg), 0):
            assert rec.type != qf.TYPE_BLANK
    except ALLOWED:
        pass


@given(st.binary(min_size=128, max_size=128) | st.binary(max_size=200))
@hsettings(200)
def test_fuzz_checkpoint_and_index_entry(data):
    try:
        cp = qf.decode_checkpoint(data)
        assert qf.encode_checkpoint(cp) == data
    except errors.CorruptLogError:
        pass
    try:
        qf.decode_index_entry(data)
    except errors.CorruptLogError:
        pass
