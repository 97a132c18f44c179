"""Followers: append_replicated of a leader's read() ranges.

Replicas are byte-identical: a follower fed the leader's ranges (any chunking, across segment
boundaries, where the follower synthesises the same BLANK) ends with the same segment and
raft-index files. A corrupted (bit flip), out-of-sequence (gap, overlap), wrong-position,
term-decreasing, partial, BLANK-carrying or otherwise malformed range is rejected with
ReplicationError and changes nothing (all-or-nothing). Hypothesis mutates ranges and feeds
them in: only quorumlog errors, and the log is unchanged unless the range was accepted.
"""
import dataclasses
import struct

import pytest
from hypothesis import given, strategies as st

from quorumlog import errors, format as qf

from cl_support import (SEG, example_dir, hsettings, log_files, open_log, recrc)


KW = dict(preallocate_next=False)


def fill_leader(log, n, seed=0, big_every=7):
    import random
    rng = random.Random(seed)
    term = 1
    for k in range(n):
        if rng.random() < 0.1:
            term += 1
        if k % 11 == 5:
            log.append_control(rng.choice(qf.CONTROL_TYPES[1:]), rng.randbytes(rng.randrange(200)),
                               term=term)
        else:
            body = rng.randbytes(rng.randrange(6000 if k % big_every == 0 else 400))
            log.append(f"topic{k % 3}", body, term=term, queue_id=k % 4, queue_offset=k,
                       tags=rng.choice([None, "a", "bb"]), keys=("k",) * (k % 2),
                       properties={"p": str(k)} if k % 3 == 0 else None)


def replicate(leader, follower, max_bytes):
    while follower.last_index < leader.last_index:
        view, count = leader.read(follower.last_index + 1, leader.last_index + 1, max_bytes)
        assert count >= 1
        assert follower.append_replicated(view) == follower.last_index
        assert follower.end_position == leader.position_of(follower.last_index) + \
            leader.size_of(follower.last_index)


def state(log, path):
    return (log.last_index, log.last_term, log.end_position, log_files(path))


@pytest.fixture
def pair(tmp_path):
    leader = open_log(tmp_path / "leader", **KW)
    follower = open_log(tmp_path / "follower", **KW)
    yield leader, follower, tmp_path
    for log in (leader, follower):
        if not log.closed:
            log.close()


def test_follower_is_byte_identical(pair):
    leader, follower, tmp = pair
    fill_leader(leader, 300)
    assert leader.end_position > 2 * SEG           # several segment boundaries
    replicate(leader, follower, max_bytes=10000)
    assert (follower.last_index, follower.last_term, follower.end_position) == \
        (leader.last_index, leader.last_term, leader.end_position)
    for i in range(1, leader.last_index + 1):
        assert follower.record(i) == leader.record(i)
    leader.flush()
    follower.flush()
    assert log_files(tmp / "follower") == log_files(tmp / "leader")
    # and after reopening both
    leader.close()
    follower.close()
    assert log_files(tmp / "follower") == log_files(tmp / "leader")


@given(st.integers(1, 4 * SEG), st.integers(0, 1000), st.integers(40, 120))
@hsettings(10)
def test_any_chunking_is_byte_identical(tmp_path_factory, max_bytes, seed, n):
    with example_dir(tmp_path_factory, "repl") as tmp:
        with open_log(tmp / "leader", **KW) as leader, open_log(tmp / "follower", **KW) as follower:
            fill_leader(leader, n, seed=seed)
            replicate(leader, follower, max_bytes)
            leader.flush()
            follower.flush()
            assert log_files(tmp / "follower") == log_files(tmp / "leader")


def test_follower_continues_after_reopen_and_truncate(pair):
    leader, follower, tmp = pair
    fill_leader(leader, 60, seed=3)
    replicate(leader, follower, 5000)
    follower.close()
    follower = open_log(tmp / "follower", **KW)
    try:
        # the follower diverged: drop its suffix, then take the leader's again
        follower.truncate_after(30)
        replicate(leader, follower, 7000)
        leader.flush()
        follower.flush()
        assert log_files(tmp / "follower") == log_files(tmp / "leader")
    finally:
        follower.close()


# ------------------------------------------------------------------ rejections

@pytest.fixture
def synced(pair):
    """A leader with 60 records; the follower holds the first 30."""
    leader, follower, tmp = pair
    fill_leader(leader, 60, seed=7)
    while follower.last_index < 30:
        view, count = leader.read(follower.last_index + 1, 31, 1 << 20)
        follower.append_replicated(view)
    return leader, follower, tmp


def assert_rejected(follower, tmp, raw):
    before = state(follower, tmp / "follower")
    with pytest.raises(errors.ReplicationError):
        follower.append_replicated(raw)
    assert state(follower, tmp / "follower") == before, "a rejected range changed the log"


def next_range(leader, follower, n=5):
    view, count = leader.read(follower.last_index + 1, follower.last_index + 1 + n, 1 << 20)
    return bytearray(view), count


def test_reject_bit_flips(synced):
    leader, follower, tmp = synced
    raw, count = next_range(leader, follower)
    assert count >= 3
    for bit in range(0, len(raw) * 8, max(1, len(raw) * 8 // 200)):
        bad = bytearray(raw)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert_rejected(follower, tmp, bytes(bad))
    # all-or-nothing: the last record of the range is bad, the first ones are fine
    bad = bytearray(raw)
    bad[-1] ^= 0xFF
    assert_rejected(follower, tmp, bytes(bad))
    follower.append_replicated(bytes(raw))      # the intact range is still accepted


def test_reject_gap_and_overlap(synced):
    leader, follower, tmp = synced
    last = follower.last_index
    gap, _ = leader.read(last + 2, last + 5, 1 << 20)
    assert_rejected(follower, tmp, bytes(gap))
    overlap, _ = leader.read(last, last + 3, 1 << 20)
    assert_rejected(follower, tmp, bytes(overlap))
    old, _ = leader.read(1, 4, 1 << 20)
    assert_rejected(follower, tmp, bytes(old))
    # the same range twice: the second time it overlaps
    ok, _ = leader.read(last + 1, last + 3, 1 << 20)
    follower.append_replicated(bytes(ok))
    assert_rejected(follower, tmp, bytes(ok))


def test_reject_wrong_position(synced):
    leader, follower, tmp = synced
    raw, count = next_range(leader, follower, 1)
    for delta in (1, -1, 4096, SEG):
        bad = bytearray(raw)
        pos = struct.unpack_from("<Q", bad, 32)[0]
        struct.pack_into("<Q", bad, 32, pos + delta)
        assert_rejected(follower, tmp, bytes(recrc(bad)))
    # a well-formed record with the right index but encoded for another position
    rec = qf.decode_record(bytes(raw))
    other = qf.encode(dataclasses.replace(rec, position=rec.position + 100))
    assert_rejected(follower, tmp, other)


def test_reject_term_decreasing(synced):
    leader, follower, tmp = synced
    t = follower.last_term
    assert t >= 2
    raw = qf.encode_record(qf.TYPE_NOOP, index=follower.last_index + 1, term=t - 1,
                           position=follower.end_position)
    assert_rejected(follower, tmp, raw)
    # within a range: second record's term below the first's
    r1 = qf.encode_record(qf.TYPE_NOOP, index=follower.last_index + 1, term=t + 2,
                          position=follower.end_position)
    r2 = qf.encode_record(qf.TYPE_NOOP, index=follower.last_index + 2, term=t + 1,
                          position=follower.end_position + len(r1))
    assert_rejected(follower, tmp, r1 + r2)
    follower.append_replicated(r1)            # a good record built by the reference encoder
    assert follower.last_term == t + 2


def test_reject_malformed_ranges(synced):
    leader, follower, tmp = synced
    raw, count = next_range(leader, follower, 3)
    assert_rejected(follower, tmp, bytes(raw[:-1]))                 # partial record
    assert_rejected(follower, tmp, bytes(raw[:50]))                 # partial header
    assert_rejected(follower, tmp, bytes(raw) + b"\x00" * 10)       # trailing bytes
    assert_rejected(follower, tmp, bytes(raw) + bytes(200))         # trailing zeros
    assert_rejected(follower, tmp, bytes(raw) + b"\xff" * 100)      # trailing garbage
    assert_rejected(follower, tmp, qf.encode_blank(follower.end_position, 200))   # BLANKs never ship
    assert_rejected(follower, tmp, bytes(200))
    bad = bytearray(raw)
    struct.pack_into("<I", bad, 4, len(raw) + 1000)          # size beyond the range
    assert_rejected(follower, tmp, bytes(recrc(bad)))
    bad = bytearray(raw)
    struct.pack_into("<I", bad, 4, 50)                       # size below a header
    assert_rejected(follower, tmp, bytes(bad))


def test_reject_range_that_would_break_the_blank_rule(pair):
    """A record that does not fit where it would land (it must go to the next segment,
    after a BLANK the follower writes) is only valid at the next segment's start."""
    leader, follower, tmp = pair
    body = b"x" * 33000
    for _ in range(2):
        leader.append("t", body, term=1)
    assert leader.position_of(2) == SEG          # 2 × 30 KiB do not fit in one segment
    view, _ = leader.read(1, 2)
    follower.append_replicated(bytes(view))
    # forge record 2 at the position right after record 1 although it does not fit there
    rec2 = leader.record(2)
    here = follower.end_position
    assert not qf.fits_in_segment(here, rec2.size, SEG)
    forged = qf.encode(dataclasses.replace(rec2, position=here))
    assert_rejected(follower, tmp, forged)
    view, _ = leader.read(2, 3)
    follower.append_replicated(bytes(view))
    assert follower.position_of(2) == leader.position_of(2)


def test_wrong_types_are_rejected(synced):
    leader, follower, tmp = synced
    before = state(follower, tmp / "follower")
    for bad in ("text", None, 12, [1, 2]):
        with pytest.raises((errors.ReplicationError, errors.InvalidArgumentError)):
            follower.append_replicated(bad)
    assert state(follower, tmp / "follower") == before


# ------------------------------------------------------------------ fuzz

@st.composite
def mutations(draw):
    ops = []
    for _ in range(draw(st.integers(1, 3))):
        ops.append((draw(st.sampled_from(["flip", "set", "truncate", "insert", "recrc"])),
                    draw(st.integers(0, 1 << 16)), draw(st.integers(0, 255)),
                    draw(st.binary(min_size=1, max_size=8))))
    return ops


def apply(raw, ops):
    raw = bytearray(raw)
    for op, i, v, blob in ops:
        if not raw:
            break
        i %= len(raw)
        if op == "flip":
            raw[i] ^= 1 << (v % 8)
        elif op == "set":
            raw[i] = v
        elif op == "truncate":
            del raw[i:]
        elif op == "insert":
            raw[i:i] = blob
        elif op == "recrc" and len(raw) >= 96:
            # make a mutated header/body pass the CRC so deeper validation must catch it
            start = 0
            while start + 96 <= len(raw):
                total = struct.unpack_from("<I", raw, start + 4)[0]
                if total < 96 or start + total > len(raw):
                    break
                recrc(raw, start)
                start += total
    return bytes(raw)


@pytest.fixture(scope="module")
def fuzz_pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    leader = open_log(tmp / "leader", **KW)
    follower = open_log(tmp / "follower", **KW)
    fill_leader(leader, 40, seed=11)
    view, _ = leader.read(1, 21, 1 << 20)
    follower.append_replicated(view)
    yield leader, follower, tmp
    leader.close()
    follower.close()


@given(mutations(), st.integers(1, 5))
@hsettings(500)
def test_fuzz_append_replicated(fuzz_pair, ops, n):
    leader, follower, tmp = fuzz_pair
    lo = follower.last_index + 1
    if lo > leader.last_index:
        return
    view, _ = leader.read(lo, lo + n, 1 << 20)
    good = bytes(view)
    raw = apply(good, ops)
    before = state(follower, tmp / "follower")
    try:
        last = follower.append_replicated(raw)
    except errors.QuorumlogError:
        assert state(follower, tmp / "follower") == before
        return
    assert last == follower.last_index
    if not raw:                                   # an empty range is a no-op
        assert state(follower, tmp / "follower") == before
        return
    # accepted: whole records that read back
    assert last > before[0]
    assert follower.end_position - before[2] <= len(raw) + SEG
    for i in range(before[0] + 1, last + 1):
        pos = follower.position_of(i)
        try:
            rec = follower.record(i)
        except errors.QuorumlogError:
            continue
        assert rec.index == i and rec.position == pos
    # keep the fuzz fixture aligned with the leader: drop what a mutation let through
    if raw != good[:len(raw)]:
        follower.truncate_after(before[0])


# ------------------------------------------------------------------ big ranges (>= NOGIL_BYTES)
# A range of at least NOGIL_BYTES (256 KiB) has its CRCs checked in one loop without the GIL
# after the per-record checks; the small segments above never reach that path.

BIG_SEG = 1 << 20


@pytest.fixture(scope="module")
def big_range(tmp_path_factory):
    """A leader range of 300 records of ~1 KiB (> 256 KiB) and the index of its first."""
    tmp = tmp_path_factory.mktemp("bigrange")
    with open_log(tmp / "leader", segment_size_bytes=BIG_SEG, **KW) as leader:
        bodies = [bytes([k % 251]) * 1000 for k in range(300)]
        leader.append_batch("t", bodies, term=1, queue_ids=0, queue_offsets=0)
        view, count = leader.read(1, 301, 1 << 20)
        assert count == 300 and len(view) >= 256 << 10
        return bytes(view)


def test_big_range_is_accepted_byte_identical(tmp_path, big_range):
    with open_log(tmp_path / "f", segment_size_bytes=BIG_SEG, **KW) as f:
        assert f.append_replicated(big_range) == 300
        view, _ = f.read(1, 301, 1 << 20)
        assert bytes(view) == big_range


@given(st.integers(0, 299), st.integers(qf.HEADER_SIZE, 1020), st.integers(1, 255))
@hsettings(25)
def test_big_range_with_a_flipped_byte_is_rejected_naming_the_record(
        tmp_path_factory, big_range, k, at, xor):
    with example_dir(tmp_path_factory, "bigflip") as tmp:
        raw = bytearray(big_range)
        off = 0
        for _ in range(k):                       # the k-th record's offset (sizes tile the range)
            off += struct.unpack_from("<I", raw, off + 4)[0]
        size = struct.unpack_from("<I", raw, off + 4)[0]
        raw[off + min(at, size - 1)] ^= xor      # a byte of its body (the CRC does not cover it now)
        with open_log(tmp / "f", segment_size_bytes=BIG_SEG, **KW) as f:
            before = (f.last_index, f.end_position)
            with pytest.raises(errors.ReplicationError, match=f"index {k + 1}\\b"):
                f.append_replicated(raw)
            assert (f.last_index, f.end_position) == before
            assert f.append_replicated(big_range) == 300      # the intact range still goes in
