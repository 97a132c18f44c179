"""The Cython framing helpers against the codec's own (Python) encoding and decoding: a
produce payload framed by _clientframe is byte-identical to codec.encode_payload's, the
bodies decode through split_blobs exactly as through the Python loop, bad lengths are refused
the same way, and fetched records are checked (CRC32C) before they are wrapped."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from quorumlog import _clientframe as cf
from quorumlog.client import encode_produce
from quorumlog.errors import CorruptLogError
from quorumlog.format import TYPE_MESSAGE, Record, encode, tag_hash_of
from quorumlog.net import codec
from quorumlog.net import messages as m
from quorumlog.net.errors import CodecError, EncodeError

bodies_st = st.lists(st.binary(max_size=300), max_size=40)


@settings(max_examples=200, deadline=None)
@given(bodies=bodies_st, qid=st.integers(-1, 65535), seq=st.integers(0, 2**64 - 1),
       tags=st.none() | st.text(max_size=20).filter(lambda t: len(t.encode()) <= 255))
def test_produce_payload_is_the_codecs_and_decodes_the_same(bodies, qid, seq, tags):
    ours = b"".join(encode_produce("topic", bodies, qid, tags, 9, seq))
    ref = b"".join(codec.encode_payload(m.ProduceRequest("topic", bodies, qid, tags, 0, 9,
                                                         seq))[1])
    assert ours == ref
    fast = codec.decode(0x40, ours)
    assert [bytes(b) for b in fast.bodies] == bodies
    # the Python loop (what codec does without the extension) agrees
    saved, codec._split_blobs = codec._split_blobs, None
    try:
        slow = codec.decode(0x40, ours)
    finally:
        codec._split_blobs = saved
    assert [bytes(b) for b in slow.bodies] == bodies


@pytest.mark.parametrize("kw,match", [
    (dict(queue_id=-2), "queue_id=-2 outside"), (dict(sequence=-1), "sequence=-1 outside"),
    (dict(producer_id=2**64), "producer_id=.* outside"), (dict(queue_id="1"), "expected an int"),
    (dict(topic=""), "topic: 0 bytes"), (dict(tags=5), "tags: expected a str"),
    (dict(topic="t" * 256), "topic: 256 bytes")])
def test_produce_header_fields_are_checked_every_time(kw, match):
    """The topic/tags part is encoded once per pair, yet every call checks every field: a bad
    one raises EncodeError naming it (and nothing is cached for it)."""
    args = dict(topic="topic", bodies=[b"x"], queue_id=1, tags=None, producer_id=1, sequence=1)
    encode_produce(**args)                       # the good pair is cached first
    args.update(kw)
    for _ in range(2):
        with pytest.raises(EncodeError, match=match):
            encode_produce(**args)


def test_produce_header_cache_is_bounded():
    from quorumlog import client
    for i in range(client._MAX_HEAD_CACHE + 10):
        encode_produce(f"topic{i}", [b"x"], -1, None, 1, 1)
        assert len(client._HEAD_CACHE) <= client._MAX_HEAD_CACHE


def test_bad_bodies_are_refused():
    with pytest.raises(EncodeError):
        cf.encode_bodies([b"ok", 3], 10)
    with pytest.raises(EncodeError):
        cf.encode_bodies([b""] * 11, 10)
    good = cf.encode_bodies([b"abc", b"de"], 10)
    buf = memoryview(good)
    with pytest.raises(CodecError, match=r"bodies\[1\]: needs 2 bytes"):
        cf.split_blobs(buf[:-2], 4, len(good) - 2, 2, 100)
    with pytest.raises(CodecError, match="expected <= 2"):
        cf.split_blobs(buf, 4, len(good), 2, 2)
    with pytest.raises(CodecError, match="cannot fit"):
        cf.split_blobs(buf, 4, len(good), 1000, 100)


def test_fetched_records_are_checked_before_they_are_wrapped():
    rec = Record(TYPE_MESSAGE, 5, 2, 4096, "t", 3, 17, 1000, 1001, 0, tag_hash_of("tag"),
                 "tag", ("k",), {"p": "v"}, b"hello")
    raw = encode(rec)
    (fm,) = cf.decode_fetched([raw])
    assert (fm.index, fm.term, fm.queue_id, fm.queue_offset) == (5, 2, 3, 17)
    assert (fm.topic, fm.tags, bytes(fm.body)) == ("t", "tag", b"hello")
    assert fm.properties == {"p": "v"} and fm.keys == ("k",)
    bad = bytearray(raw)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptLogError, match="CRC32C"):
        cf.decode_fetched([bytes(bad)])
    with pytest.raises(CorruptLogError):
        cf.decode_fetched([raw[:-1]])
