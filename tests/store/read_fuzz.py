"""Fuzzer of the store's read side, run as a subprocess by test_store_read_fuzz.py (a crash in
native code then fails that test instead of killing pytest).

It fills a store with messages of every shape (tags, keys, properties, empty and large bodies),
keeps it open, and for each hypothesis example flips bits of one stored record in the segment
file (the store's read-only mappings see the change at once through the page cache), reads,
checks, and restores the bytes:

  mode "before": the damage is on disk before get(): get() raises CorruptLogError, or every
                 accessor of what it returns gives the value the message was put with;
  mode "after":  the damage lands under a Message that get() already returned: every accessor
                 returns a value or raises CorruptLogError -- never another exception, never
                 a crash (bytes changed under a live Message are bounds-checked on access).

Usage: read_fuzz.py MODE MAX_EXAMPLES SEED. Exit status 0: every example held.
"""
import logging
import os
import shutil
import sys
import tempfile

from hypothesis import HealthCheck, given, seed, settings, strategies as st

import quorumlog
from quorumlog import errors
from quorumlog.format import HEADER_OFFSETS, segment_name

ACCESSORS = ("body", "body_len", "topic", "tags", "keys", "properties", "queue_id",
             "queue_offset", "index", "term", "flags", "tag_hash", "born_timestamp_ms",
             "store_timestamp_ms", "position", "size")
# the u16/u32 length fields a damaged header could make a reader trust
LENGTH_FIELDS = ("total_size", "topic_len", "tags_len", "keys_len", "props_len", "body_len")
SEG = 1 << 16


def read_all(m):
    """Every accessor of a Message -> {name: value}; raises what an accessor raises."""
    out = {name: getattr(m, name) for name in ACCESSORS}
    out["body_view"] = bytes(m.body_view)
    out["raw"] = bytes(m.raw())
    out["repr"] = repr(m)
    return out


def build(path):
    s = quorumlog.open(path, segment_size_bytes=SEG, consume_queue_file_entries=64,
                       background=False, environ={})
    s.create_topic("fz", queues=2)
    shapes = [
        dict(body=b"", tags=None, keys=(), properties=None),
        dict(body=b"x" * 10, tags="tag", keys=("k1", "key-two"), properties={"a": "b", "c": ""}),
        dict(body=os.urandom(3000), tags="t" * 200, keys=("k",) * 5, properties={"p": "v" * 300}),
        dict(body=b"\xe2\x82\xac" * 30, tags=None, keys=("\u20ac",), properties={"\u20ac": "x"}),
        dict(body=os.urandom(20000), tags="big", keys=(), properties=None),
    ]
    where = []
    for k in range(12):
        shape = shapes[k % len(shapes)]
        r = s.put("fz", shape["body"], queue_id=k % 2, tags=shape["tags"], keys=shape["keys"],
                  properties=shape["properties"], born_timestamp_ms=1000 + k)
        where.append((r.queue_id, r.queue_offset))
    s.flush()
    expected = []
    for q, off in where:
        (m,) = s.get("fz", q, off, 1)
        expected.append((q, off, m.position, m.size, read_all(m)))
    return s, expected


def flip(path, position, size, bits):
    """Flip `bits` (bit offsets inside the record) -> the original bytes, for restore()."""
    fd = os.open(os.path.join(path, "commitlog", segment_name(position - position % SEG)),
                 os.O_RDWR)
    try:
        off = position % SEG
        orig = os.pread(fd, size, off)
        buf = bytearray(orig)
        for b in bits:
            buf[(b // 8) % size] ^= 1 << (b % 8)
        os.pwrite(fd, bytes(buf), off)
    finally:
        os.close(fd)
    return orig


def restore(path, position, orig):
    fd = os.open(os.path.join(path, "commitlog", segment_name(position - position % SEG)),
                 os.O_RDWR)
    try:
        os.pwrite(fd, orig, position % SEG)
    finally:
        os.close(fd)


def length_field_bits(size):
    """Bit offsets that hit the header's length fields (the values a reader computes offsets
    from), high bits included."""
    out = []
    for name in LENGTH_FIELDS:
        width = 2 if name in ("topic_len", "tags_len") else 4
        base = HEADER_OFFSETS[name] * 8
        out.extend(range(base, base + width * 8))
    return out


def main(mode, max_examples, seed_value):
    # the store logs each damaged entry it repairs; thousands of lines say nothing here
    logging.disable(logging.CRITICAL)
    d = tempfile.mkdtemp(prefix="ql-read-fuzz-")
    path = os.path.join(d, "store")
    s, expected = build(path)
    checked = {"examples": 0, "corrupt": 0, "returned": 0}

    def one(k, bits):
        q, off, position, size, want = expected[k % len(expected)]
        if mode == "after":
            (m,) = s.get("fz", q, off, 1)
        orig = flip(path, position, size, bits)
        try:
            if mode == "before":
                try:
                    got = s.get("fz", q, off, 1)
                except errors.CorruptLogError:
                    checked["corrupt"] += 1
                    return
                assert len(got) == 1, f"get returned {len(got)} messages"
                have = read_all(got[0])
                checked["returned"] += 1
                assert have == want, f"wrong data returned: {have} != {want}"
            else:
                for name in ACCESSORS + ("body_view", "raw", "repr"):
                    try:
                        if name == "body_view":
                            bytes(m.body_view)
                        elif name == "raw":
                            bytes(m.raw())
                        elif name == "repr":
                            repr(m)
                        else:
                            getattr(m, name)
                    except errors.CorruptLogError:
                        checked["corrupt"] += 1
        finally:
            restore(path, position, orig)
        checked["examples"] += 1

    # Deterministic part: every length field set to large values, one record of each shape.
    for k in range(len(expected)):
        size = expected[k][3]
        for name in LENGTH_FIELDS:
            width = 2 if name in ("topic_len", "tags_len") else 4
            for top in range(width * 8 - 1, width * 8 - 4, -1):
                one(k, [HEADER_OFFSETS[name] * 8 + top])

    bits_in_record = st.lists(st.integers(min_value=0, max_value=(1 << 20)), min_size=1,
                              max_size=4)
    bits_in_lengths = st.lists(st.sampled_from(length_field_bits(0)), min_size=1, max_size=3)

    @seed(seed_value)
    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(k=st.integers(min_value=0, max_value=len(expected) - 1),
           bits=st.one_of(bits_in_record, bits_in_lengths))
    def fuzz(k, bits):
        one(k, bits)

    try:
        fuzz()
    finally:
        s.close()
        shutil.rmtree(d, ignore_errors=True)
    print(f"OK {mode} {checked}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
