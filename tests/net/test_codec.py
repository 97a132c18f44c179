"""The message codec: every Raft, handshake and client message round-trips; a golden
vector; every decoded field is range-checked; zero-copy payloads; error codes <-> errors."""
import struct

import pytest

from quorumlog import errors as qe
from quorumlog.net import codec
from quorumlog.net import messages as m
from quorumlog.net.errors import CodecError, EncodeError, ProtocolError
from quorumlog.net.framing import HEADER_SIZE, FrameDecoder
from quorumlog.raft import errors as re_
from quorumlog.raft.log import InstallImage
from quorumlog.raft.messages import (Append, AppendResponse, Code, Heartbeat, HeartbeatResponse,
                                     InstallSegment, InstallSegmentResponse, TakeLeadership,
                                     VoteRequest, VoteResponse, VoteResult)

from net_support import same

RAFT = [
    VoteRequest(7, "n1", "n2", 42, 6, True),
    VoteRequest(0, "n1", "n2", 0, 0),
    VoteRequest(8, "n1", "n2", 42, 6, pre=True),                          # a pre-vote
    VoteResponse(7, "n2", "n1", 7, VoteResult.REJECT_ALREADY_VOTED),
    VoteResponse(8, "n2", "n1", 8, VoteResult.ACCEPT, pre=True),
    Heartbeat(9, "n1", "n2", 100, 3),
    HeartbeatResponse(9, "n2", "n1", Code.INCONSISTENT_LEADER, 3),
    Append(3, "n1", "n2", 10, 2, 11, 12, 3, b"records" * 10, 70, 9,
           ((12, ("n1", "n2", "n3"), ("n4",)),), 4),
    Append(3, "n1", "n2", 10, 2, 11, 10, 0, None, 0, 9, (), 4),            # a probe
    Append(3, "n1", "n2", 0, 0, 1, 500, 3, bytes(300_000), 300_000, 0, (), 1),
    AppendResponse(3, "n2", "n1", Code.INCONSISTENT_STATE, 5, 10, 12, 7, 2, 4),
    TakeLeadership(4, "n1", "n2", 77),
    # an install's first chunk (configurations, a producer snapshot, a large zero-copy chunk)
    InstallSegment(5, "n1", "n2", InstallImage(30, None, 90, 4, 400_000, b'{"v":1}',
                                               ((28, 29, 7, 3, 2),)),
                   0, bytes(200_000), 200_096, False, ((29, ("n1", "n2"), ("n4",)),), 88, 3),
    InstallSegment(5, "n1", "n2", InstallImage(30, 3, 90, 4, 400_000, b"", ()),
                   200_096, b"tail" * 10, 199_904, True, (), 90, 3),
    InstallSegmentResponse(5, "n2", "n1", Code.GAP, 200_096, 0, 90, 3),
    InstallSegmentResponse(5, "n2", "n1", Code.SUCCESS, 400_000, 90, 90, 3),
]

OTHERS = [
    m.AuthHello(m.AuthMode.HMAC_SHA256, m.Role.PEER, "c", "n1", "n2", b"\x01" * 32),
    m.AuthHello(m.AuthMode.NONE, m.Role.CLIENT, "c", "app-7", None, b"\x02" * 32),
    m.AuthChallenge("c", "n2", b"\x03" * 32),
    m.AuthHello(m.AuthMode.HMAC_SHA256, m.Role.PEER, "c", "n1", "n2", b"\x01" * 32, 1 << 30),
    m.AuthChallenge("c", "n2", b"\x03" * 32, 1 << 22),
    m.AuthProof(b"\x04" * 32), m.AuthProof(b""),
    m.AuthOk(b"\x05" * 32),
    m.AuthReject(m.RejectReason.BAD_PROOF, "bad proof"),
    m.ProduceRequest("orders", [b"a", b"bb", b"c" * 20000], queue_id=3, tags="t",
                     delay_level=2, producer_id=99, sequence=5),
    m.ProduceRequest("orders", []),
    m.ProduceResponse(11, 3, 40, 1_700_000_000_000, (100, 200, 300)),
    m.FetchRequest("orders", 3, 40, 10, 4096, 500),
    m.FetchResponse(43, 0, 43, [b"rec1", b"rec2" * 10000]),
    m.OffsetsRequest("orders", 0, 1234), m.OffsetsRequest("orders", 0),
    m.OffsetsResponse(0, 10, 4),
    m.AdminRequest(m.AdminOp.ADD_MEMBER, "n4", "10.0.0.4:9000"),
    m.AdminRequest(m.AdminOp.STATUS),
    m.AdminResponse("n1", 2, 5, "n1", "10.0.0.1:9000", 10, 12, ("n1", "n2", "n3")),
    m.AdminResponse("n2", 1, 5, None, None, 10, 12, ()),
    m.AdminResponse("n1", 2, 5, "n1", None, 10, 10, ("n1",), ready_to_serve=True),
    m.GroupAdminRequest(7, m.AdminOp.TRANSFER_LEADERSHIP, "n2"),
    m.GroupAdminRequest(0, m.AdminOp.STATUS),
    m.GroupAdminResponse(8, 7, "n1", 2, 5, "n1", "10.0.0.1:9000", 10, 12, ("n1", "n2")),
    m.GroupAdminResponse(1, 0, "n1", 2, 5, "n1", None, 10, 10, ("n1",), ready_to_serve=True),
    m.ErrorResponse(m.ErrorCode.NOT_LEADER, "not the leader", "n2", "10.0.0.2:9000", 5),
    m.ConsumerOffsetRequest("billing", "orders", 3, 42), m.ConsumerOffsetRequest("g", "t", 0),
    m.ConsumerOffsetResponse(42), m.ConsumerOffsetResponse(),
    m.FindByKeyRequest("orders", "order-42", 16), m.FindByKeyResponse([b"rec1", b"rec2"]),
    m.FindByKeyResponse(),
]


def _wire(msg, rid=0):
    return b"".join(bytes(p) for p in codec.encode(msg, rid))


def _roundtrip(msg, rid=0):
    (fr,) = FrameDecoder(large_payload_bytes=1000).feed(_wire(msg, rid))
    assert fr.request_id == rid
    return codec.decode_frame(fr, getattr(msg, "src", None), getattr(msg, "dst", None))


@pytest.mark.parametrize("msg", RAFT, ids=lambda x: x.describe()[:40])
def test_raft_round_trip(msg):
    got = _roundtrip(msg, rid=5)
    assert type(got) is type(msg) and same(got, msg)
    if isinstance(msg, Append):
        assert got.nbytes == (0 if msg.payload is None else len(msg.payload))
        assert got.configs == msg.configs and got.epoch == msg.epoch
    if isinstance(msg, InstallSegment):
        # the follower compares images to tell installs apart: the decoded one is equal
        assert got.image == msg.image and got.configs == msg.configs
        assert bytes(got.chunk) == bytes(msg.chunk) and got.nbytes == msg.nbytes
        assert (got.done, got.commit_index, got.epoch) == (msg.done, msg.commit_index, msg.epoch)
    if isinstance(msg, InstallSegmentResponse):
        assert (got.code, got.next_offset, got.match_index, got.image_last, got.epoch) == \
               (msg.code, msg.next_offset, msg.match_index, msg.image_last, msg.epoch)


def _norm(x):
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, (list, tuple)):
        return [_norm(i) for i in x]
    return x


@pytest.mark.parametrize("msg", OTHERS, ids=lambda x: type(x).__name__)
def test_other_messages_round_trip(msg):
    got = _roundtrip(msg, rid=2**64 - 1)
    assert type(got) is type(msg)
    for f in type(msg).__dataclass_fields__:
        assert _norm(getattr(got, f)) == _norm(getattr(msg, f)), f


# many groups per process (node/host.py): heartbeats and answers of every group, one frame
BATCHES = [m.HeartbeatBatch("n1", "n2", [(0, 5, 10, 3, 77, 9), (255, 6, 0, 1, 0, 0)]),
           m.HeartbeatResponseBatch("n2", "n1", [(3, 5, Code.SUCCESS, 3, (1 << 62) - 1, 4)]),
           m.HeartbeatBatch("n1", "n2", [])]


@pytest.mark.parametrize("msg", BATCHES, ids=lambda x: type(x).__name__)
def test_heartbeat_batches_round_trip(msg):
    got = _roundtrip(msg)
    assert type(got) is type(msg)
    assert (got.src, got.dst) == (msg.src, msg.dst)     # (from the connection, not the wire)
    assert got.entries == msg.entries


# quiescence (raft/quiesce.py, node/host.py): one QuietBeat per peer pair per interval
QUIET = [m.QuietBeat("n1", "n2", 7, [(0, 5, 10), (255, 6, 0)], 3, [1, 255]),
         m.QuietBeat("n1", "n2", 1, [], 0, [])]


@pytest.mark.parametrize("msg", QUIET, ids=lambda x: x.describe())
def test_quiet_beats_round_trip(msg):
    got = _roundtrip(msg)
    assert type(got) is type(msg) and (got.src, got.dst) == (msg.src, msg.dst)
    assert (got.seq, got.groups, got.ack, got.acked) == \
        (msg.seq, tuple(msg.groups), msg.ack, tuple(msg.acked))


def test_quiet_beats_name_groups_below_max_groups():
    with pytest.raises(EncodeError, match="outside 0..255"):
        codec.encode(m.QuietBeat("n1", "n2", 1, [(m.MAX_GROUPS, 1, 1)], 0, []))
    with pytest.raises(EncodeError, match="outside 0..255"):
        codec.encode(m.QuietBeat("n1", "n2", 1, [], 1, [m.MAX_GROUPS]))


def test_quiet_beat_of_every_group_round_trips():
    # (one struct per row on both sides: codec.List's rows of plain ints)
    rows = [(g, (1 << 62) + g, (1 << 63) - 1 - g) for g in range(m.MAX_GROUPS)]
    got = _roundtrip(m.QuietBeat("n1", "n2", 9, rows, 8, list(range(m.MAX_GROUPS))))
    assert got.groups == tuple(rows) and got.acked == tuple(range(m.MAX_GROUPS))


def test_decoded_rows_out_of_bounds_name_the_field():
    # a peer's QuietBeat whose third group is 0x01FA (> MAX_GROUPS - 1): refused, named
    term = 0x0102030405
    wire = bytearray(_wire(m.QuietBeat("n1", "n2", 1, [(1, 1, 1), (2, 1, 1), (0xFA, term, 0)],
                                       0, [])))
    at = wire.index(struct.pack("<q", term)) - 2
    assert wire[at:at + 2] == struct.pack("<H", 0xFA)
    wire[at + 1] = 0x01
    (fr,) = FrameDecoder(large_payload_bytes=1000).feed(bytes(wire))
    with pytest.raises(CodecError, match=r"groups\[2\]\[0\]=506 outside 0..255"):
        codec.decode_frame(fr, "n1", "n2")


def test_heartbeat_batches_are_limited():
    big = m.HeartbeatBatch("n1", "n2", [(0, 1, 1, 1, 1, 1)] * (m.MAX_BATCH_GROUPS + 1))
    with pytest.raises(EncodeError):
        codec.encode(big)
    with pytest.raises(EncodeError, match=r"entries\[0\]\[0\]=256 outside 0..255"):
        codec.encode(m.HeartbeatBatch("n1", "n2", [(m.MAX_GROUPS, 1, 1, 1, 0, 0)]))


def test_every_registered_type_has_a_round_trip_case():
    covered = {type(x) for x in RAFT + OTHERS + BATCHES + QUIET}
    assert {codec.spec_of_type(c).cls for c in range(256) if codec.spec_of_type(c)} <= covered


def test_every_raft_message_class_has_a_wire_encoding():
    """A message type added to raft/messages.py needs its line in codec.py."""
    import inspect

    from quorumlog.raft import messages as rm
    classes = {c for _, c in inspect.getmembers(rm, inspect.isclass)
               if issubclass(c, rm.Message) and c is not rm.Message}
    registered = {codec.spec_of_type(t).cls for t in range(256) if codec.spec_of_type(t)}
    missing = sorted(c.__name__ for c in classes if c not in registered)
    assert missing == [], f"no codec registration for {missing}"


# docs/net.md "Golden vector": VoteRequest(term 7, end index 42, end term 6, transfer, not a
# pre-vote). (The last byte, `pre`, was added to carry the core's pre-vote: length 0x1a.)
GOLDEN_VOTE = bytes.fromhex(
    "51 4e 01 10 00 00 00 00 00 00 00 00 00 00 00 00 1a 00 00 00 21 c9 5e a1"
    " 07 00 00 00 00 00 00 00 2a 00 00 00 00 00 00 00 06 00 00 00 00 00 00 00 01 00")


def test_golden_vote_request():
    assert _wire(VoteRequest(7, "n1", "n2", 42, 6, True)) == GOLDEN_VOTE
    got = codec.decode(0x10, GOLDEN_VOTE[HEADER_SIZE:], "n1", "n2")
    assert got.describe() == "n1->n2 VOTE t7 end=42/t6 transfer"


def test_pre_vote_flag_is_carried_both_ways():
    """A pre-vote must not arrive as a real vote (the receiver would raise its term and
    vote), nor a pre-vote answer as a real one (the candidate would count it)."""
    for pre in (False, True):
        req = _roundtrip(VoteRequest(9, "n1", "n2", 42, 6, False, pre))
        resp = _roundtrip(VoteResponse(9, "n2", "n1", 9, VoteResult.ACCEPT, pre))
        assert req.pre is pre and resp.pre is pre and req.transfer is False
    payload = bytearray(_wire(VoteRequest(9, "n1", "n2", 42, 6))[HEADER_SIZE:])
    payload[-1] = 1                                     # the last byte is `pre`
    assert codec.decode(0x10, bytes(payload), "n1", "n2").describe() == \
        "n1->n2 VOTE t9 end=42/t6 pre"
    resp = bytearray(_wire(VoteResponse(9, "n2", "n1", 9, VoteResult.ACCEPT))[HEADER_SIZE:])
    resp[-2] = 1                                        # `pre` precedes `result`
    assert codec.decode(0x11, bytes(resp), "n2", "n1").pre is True
    resp[-2] = 3
    with pytest.raises(CodecError, match="pre=3 outside 0..1"):
        codec.decode(0x11, bytes(resp), "n2", "n1")


def test_src_and_dst_come_from_the_connection_not_the_wire():
    payload = _wire(Heartbeat(1, "n1", "n2", 0, 1))[HEADER_SIZE:]
    got = codec.decode(0x12, payload, "authenticated-peer", "me")
    assert (got.src, got.dst) == ("authenticated-peer", "me")


def test_append_payload_is_a_view_of_the_frame_and_encoded_without_copy():
    data = bytearray(b"R" * 200_000)
    msg = Append(3, "n1", "n2", 0, 0, 1, 9, 3, memoryview(data), len(data), 0, (), 1)
    parts = codec.encode(msg)
    assert parts[-1].obj is data                     # the caller's buffer, not a copy
    frame = bytearray(b"".join(bytes(p) for p in parts))
    got = codec.decode(0x14, memoryview(frame)[HEADER_SIZE:], "n1", "n2")
    assert got.payload.obj is frame                  # a view of the received frame
    assert bytes(got.payload) == bytes(data)


def test_produce_bodies_decode_as_views():
    frame = bytearray(_wire(m.ProduceRequest("t", [b"x" * 100, b"y" * 50_000])))
    got = codec.decode(0x40, memoryview(frame)[HEADER_SIZE:])
    assert all(isinstance(b, memoryview) and b.obj is frame for b in got.bodies)


def _vote_payload(term=7, end=42, end_term=6, transfer=1, pre=0):
    return struct.pack("<qqqBB", term, end, end_term, transfer, pre)


@pytest.mark.parametrize("payload,match", [
    (_vote_payload(term=-1), "term=-1 outside"),
    (_vote_payload(end=-5), "ledger_end_index=-5 outside"),
    (_vote_payload(transfer=2), "transfer=2 outside 0..1"),
    (_vote_payload(pre=2), "pre=2 outside 0..1"),
    (_vote_payload()[:-1], "payload of 25 bytes < 26"),
    (_vote_payload() + b"\x00", "1 unexpected bytes"),
])
def test_bad_vote_request_payloads(payload, match):
    with pytest.raises(CodecError, match=match):
        codec.decode(0x10, payload, "a", "b")


def test_bad_enum_value():
    good = _wire(VoteResponse(7, "n2", "n1", 7, VoteResult.ACCEPT))[HEADER_SIZE:]
    bad = good[:-1] + bytes([99])
    with pytest.raises(CodecError, match="result=99 outside"):
        codec.decode(0x11, bad, "a", "b")
    err = bytearray(_wire(m.ErrorResponse(m.ErrorCode.TIMEOUT))[HEADER_SIZE:])
    err[0:2] = (0).to_bytes(2, "little")
    with pytest.raises(CodecError, match="code=0 outside"):
        codec.decode(0x4F, bytes(err))


def test_node_id_limits():
    long_id = "n" * (m.MAX_NODE_ID_BYTES + 1)
    cfg = (5, (long_id,), ())
    msg = Append(3, "n1", "n2", 4, 2, 5, 5, 3, b"r", 1, 0, (cfg,), 1)
    with pytest.raises(EncodeError, match="1..64"):
        codec.encode(msg)
    # the same on the decode side: a hand-built payload with a 65-byte voter id
    ok = _wire(Append(3, "n1", "n2", 4, 2, 5, 5, 3, b"r", 1, 0, ((5, ("v",), ()),), 1))[HEADER_SIZE:]
    fixed = 7 * 8 + 8
    bad = ok[:fixed + 4 + 8 + 4] + bytes([65]) + b"n" * 65 + b"r"
    with pytest.raises(CodecError, match="length 65 outside 1..64"):
        codec.decode(0x14, bad, "n1", "n2")
    with pytest.raises(CodecError, match="non-printable"):
        # (then the learners' empty list: a CONFIG entry is (index, voters, learners))
        codec.decode(0x14, ok[:fixed + 16] + bytes([1]) + b"\n" + bytes(4) + b"r", "n1", "n2")
    with pytest.raises(CodecError, match="UTF-8"):
        codec.decode(0x14, ok[:fixed + 16] + bytes([1]) + b"\xff" + bytes(4) + b"r", "n1", "n2")


@pytest.mark.parametrize("kw,match", [
    (dict(first_index=12), "first_index 12 != prev_index 10 \\+ 1"),
    (dict(last_index=9), "last_index 9 < prev_index 10"),
    (dict(payload=None), "probe carries no payload"),
    (dict(configs=((20, ("a",), ()),)), "CONFIG index 20 outside 11..12"),
    (dict(configs=((11, (), ()),)), "no voters"),
])
def test_append_consistency(kw, match):
    f = dict(term=3, src="n1", dst="n2", prev_index=10, prev_term=2, first_index=11,
             last_index=12, entry_term=3, payload=b"xx", nbytes=2, commit_index=9, configs=(),
             epoch=1)
    f.update(kw)
    payload = _wire(Append(**f))[HEADER_SIZE:]
    with pytest.raises(CodecError, match=match):
        codec.decode(0x14, payload, "n1", "n2")


def _install(**kw):
    f = dict(term=3, src="n1", dst="n2",
             image=InstallImage(10, None, 20, 3, 1000, b"{}", ()), offset=0, chunk=b"x" * 50,
             nbytes=50, done=False, configs=((9, ("n1",), ()),), commit_index=9, epoch=1)
    f.update(kw)
    return InstallSegment(**f)


@pytest.mark.parametrize("kw,match", [
    (dict(image=InstallImage(10, None, 9, 3, 1000, b"{}", ())), "image \\[10..9\\] is empty"),
    (dict(chunk=None), "a chunk carries bytes"),
    (dict(nbytes=40), "chunk of 50 bytes advancing 40"),
    (dict(offset=960, configs=()), "advancing 50 at offset 960 of an image of 1000"),
    (dict(done=True), "`done` marks the chunk that ends the image"),
    (dict(offset=950, configs=()), "`done` marks the chunk that ends the image"),
    (dict(offset=100), "only the first chunk carries configurations"),
    (dict(configs=((9, (), ()),)), "has no voters"),
    (dict(configs=((21, ("n1",), ()),)), "past the image"),
])
def test_install_consistency(kw, match):
    payload = _wire(_install(**kw))[HEADER_SIZE:]
    with pytest.raises(CodecError, match=match):
        codec.decode(0x17, payload, "n1", "n2")


def test_install_chunk_is_a_view_of_the_frame_and_encoded_without_copy():
    chunk = memoryview(bytearray(b"r" * 100_000))
    parts = codec.encode(_install(chunk=chunk, nbytes=100_000,
                                  image=InstallImage(10, 9, 20, 3, 100_000, b"{}", ()),
                                  done=True))
    assert any(p is chunk or (type(p) is memoryview and p.obj is chunk.obj) for p in parts)
    (fr,) = FrameDecoder(large_payload_bytes=1000).feed(b"".join(bytes(p) for p in parts))
    got = codec.decode_frame(fr, "n1", "n2")
    assert type(got.chunk) is memoryview and bytes(got.chunk) == bytes(chunk)
    assert got.image.prev_term == 9


def test_install_meta_and_producer_limits():
    with pytest.raises(EncodeError, match="image_meta"):
        codec.encode(_install(image=InstallImage(10, None, 20, 3, 1000,
                                                 b"m" * (m.MAX_INSTALL_META_BYTES + 1), ())))
    many = tuple((1, 1, 1, 1, 1) for _ in range(m.MAX_INSTALL_PRODUCERS + 1))
    with pytest.raises(EncodeError, match="image_producers"):
        codec.encode(_install(image=InstallImage(10, None, 20, 3, 1000, b"", many)))


def test_list_count_over_the_limit_refused_before_looping():
    head = _wire(m.FetchResponse(0, 0, 0, []))[HEADER_SIZE:]
    bad = head[:-4] + struct.pack("<I", m.MAX_BATCH_MESSAGES + 1)
    with pytest.raises(CodecError, match="items >"):
        codec.decode(0x43, bad)
    bad = head[:-4] + struct.pack("<I", 1000)                   # a count with no items
    with pytest.raises(CodecError, match="cannot fit"):
        codec.decode(0x43, bad)


def test_int_lists_checked_per_item_on_both_sides():
    """A list of ints (a produce ack's positions) is range-checked as a whole; a bad item is
    still named, whichever side sees it, and ints of other types are still accepted."""
    import numpy as np
    positions = tuple(range(0, 256 * 1120, 1120))
    r = m.ProduceResponse(11, 3, 40, 7, positions)
    out = codec.decode(0x41, _wire(r)[HEADER_SIZE:])
    assert out == r and type(out.positions) is tuple
    assert codec.decode(0x41, _wire(m.ProduceResponse(1, 0, 0, 7, ()))[HEADER_SIZE:]).positions == ()
    mixed = m.ProduceResponse(11, 3, 40, 7, (np.int64(5), True, 9))
    assert codec.decode(0x41, _wire(mixed)[HEADER_SIZE:]).positions == (5, 1, 9)
    with pytest.raises(EncodeError, match=r"positions\[2\]=-1 outside"):
        codec.encode(m.ProduceResponse(11, 3, 40, 7, (1, 2, -1, 4)))
    with pytest.raises(EncodeError, match=r"positions\[1\]: expected an int"):
        codec.encode(m.ProduceResponse(11, 3, 40, 7, (1, "2")))
    wire = bytearray(_wire(r)[HEADER_SIZE:])
    struct.pack_into("<q", wire, len(wire) - 8 * 200, -5)       # positions[56] < 0
    with pytest.raises(CodecError, match=r"positions\[56\]=-5 outside"):
        codec.decode(0x41, bytes(wire))


@pytest.mark.parametrize("msg,match", [
    (Heartbeat(-1, "a", "b", 0, 0), "term=-1 outside"),
    (Heartbeat(1, "a", "b", "x", 0), "expected an int"),
    (HeartbeatResponse(1, "a", "b", 42, 0), "code=42 outside"),
    (Append(3, "n1", "n2", 0, 0, 1, 1, 3, object(), 1, 0, (), 1), "bytes-like"),
    (m.ProduceRequest("", [b"x"]), "must be 1..255"),
    (m.ProduceRequest("t", [b"x"], queue_id=70000), "queue_id=70000 outside"),
    (m.AuthProof(b"short"), "expected \\[0, 32\\]"),
    (object(), "no wire encoding for object"),
])
def test_encode_refuses_bad_fields(msg, match):
    with pytest.raises(EncodeError, match=match):
        codec.encode(msg)


def test_channels_restrict_where_a_type_is_accepted():
    payload = _wire(Heartbeat(1, "a", "b", 0, 0))[HEADER_SIZE:]
    with pytest.raises(CodecError, match="not allowed on a client connection"):
        codec.decode(0x12, payload, channels=(codec.CLIENT,))
    with pytest.raises(CodecError, match="unknown message type 0xee"):
        codec.decode(0xEE, payload)
    assert codec.types_of_channel(codec.AUTH) == frozenset({1, 2, 3, 4, 5})


def test_codec_errors_are_protocol_errors():
    assert issubclass(CodecError, ProtocolError) and issubclass(EncodeError, CodecError)
    assert issubclass(EncodeError, qe.InvalidArgumentError)


# --- error codes <-> exceptions -------------------------------------------------------------

@pytest.mark.parametrize("code", list(m.ErrorCode), ids=lambda c: c.name)
def test_each_error_code_maps_to_its_class_and_back(code):
    exc = m.ErrorResponse(code, "boom").to_exception()
    assert isinstance(exc, m.ERROR_CLASSES[code]) and isinstance(exc, qe.QuorumlogError)
    assert m.ErrorResponse.from_exception(exc).code is code


def test_not_leader_carries_leader_id_and_client_address():
    r = m.ErrorResponse.from_exception(re_.NotLeaderError("not leader", "n3", term=8),
                                       leader_address="10.0.0.3:9000")
    r2 = _roundtrip(r)
    exc = r2.to_exception()
    assert isinstance(exc, re_.NotLeaderError)
    assert (exc.leader_id, exc.term, exc.leader_address) == ("n3", 8, "10.0.0.3:9000")


def test_offset_out_of_range_carries_bounds():
    r = m.ErrorResponse.from_exception(qe.OffsetOutOfRangeError("behind", 5, 90))
    exc = _roundtrip(r).to_exception()
    assert isinstance(exc, qe.OffsetOutOfRangeError) and (exc.min_offset, exc.max_offset) == (5, 90)


def test_most_specific_class_wins_and_unknown_errors_leak_nothing():
    assert m.ErrorResponse.from_exception(qe.TopicTypeError("x")).code is m.ErrorCode.INVALID_TOPIC
    assert m.ErrorResponse.from_exception(qe.InvalidTypeError("x")).code is \
        m.ErrorCode.INVALID_ARGUMENT
    r = m.ErrorResponse.from_exception(KeyError("/secret/path"))
    assert r.code is m.ErrorCode.UNKNOWN and r.message == "KeyError"
    long = m.ErrorResponse.from_exception(qe.QuorumlogError("é" * 5000))
    assert len(long.message.encode()) <= m.MAX_ERROR_TEXT_BYTES
    _roundtrip(long)
