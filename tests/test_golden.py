"""Golden vector of the on-disk format (docs/format.md, "Golden vector").

tests/golden/store/ is a small store directory written by the code (see GOLDEN below); this
test checks it byte-for-byte against an expectation built here by hand — struct.pack of each
field in the order format.md's tables give, a bitwise CRC32C and an inline FNV-1a that share
no code with quorumlog.format — and checks that the reference writer (quorumlog.format) and
the native CommitLog produce exactly those bytes from the same calls.

The store timestamps and the checkpoint's written_at_ms come from the clock in the native
log; the golden files hold the fixed values listed in GOLDEN. For the native comparison the
clock-derived fields are checked to lie within the test's own clock window and then replaced
by the golden values (CRC recomputed) before the byte comparison; every other byte is
compared as written.

Regenerate (review the diff!):  python tests/test_golden.py --rewrite [--writer native]
tests/golden/golden.json lists the records' fields for readers in other languages (Java).
"""
import json
import pathlib
import struct
import time

import pytest

HERE = pathlib.Path(__file__).parent
GOLDEN_DIR = HERE / "golden" / "store"
GOLDEN_JSON = HERE / "golden" / "golden.json"

SEGMENT_SIZE = 65536
INDEX_FILE_ENTRIES = 64
TS0 = 1_700_000_000_000          # golden store timestamps: TS0 + 1000 * i (i = raft index)
WRITTEN_AT_MS = 1_700_000_100_000
BIG_BODY = bytes(range(256)) * 250       # 64000 bytes: pushes the next record past the tail

# The calls that write the golden log, in order. Each is (kind, arguments).
GOLDEN = [
    ("message", dict(topic="orders", body=b"hello, quorumlog", queue_id=3, queue_offset=0,
                     term=1, tags="TagA", keys=("order-1", "k2"),
                     properties={"trace": "abc", "retry": "0"},
                     born_timestamp_ms=TS0 - 5, flags=0x11)),
    ("message", dict(topic="orders", body=b"plain", queue_id=3, queue_offset=1, term=1,
                     born_timestamp_ms=TS0 - 4)),
    ("message", dict(topic="t\u00e9", body=b"", queue_id=0, queue_offset=0, term=1,
                     tags="", keys=(), properties={}, born_timestamp_ms=TS0 - 3)),
    ("control", dict(type=2, payload=b"", term=2)),                       # NOOP
    ("control", dict(type=3, payload=b'{"peers":["n1","n2","n3"]}', term=2)),  # CONFIG
    ("control", dict(type=4, payload=b"\x00\x01meta", term=2)),              # META
    ("message", dict(topic="big", body=BIG_BODY, queue_id=65535, queue_offset=7, term=2,
                     born_timestamp_ms=-1)),
    # does not fit in the tail of segment 0: a BLANK fills it, this goes to segment 1
    ("message", dict(topic="orders", body=b"x" * 1000, queue_id=3, queue_offset=2, term=3,
                     tags="TagB", keys=("order-2",), born_timestamp_ms=TS0)),
    ("message", dict(topic="orders", body=b"last", queue_id=1, queue_offset=0, term=3,
                     properties={"k": "v" * 300}, born_timestamp_ms=TS0 + 1)),
]
COMMIT_INDEX = 8
DISPATCHED = "end of record 7"   # set_dispatched_position(end position of record 7)


def store_ts(index):
    return TS0 + 1000 * index


# ---------------------------------------------------------------------------- hand-built

def crc32c_bitwise(data):
    """Bit-at-a-time CRC32C straight from the definition (no table, no shared code)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def fnv_signed(b):
    if not b:
        return 0
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) % (1 << 64)
    return h - (1 << 64) if h >= 1 << 63 else h


def hand_record(rtype, index, term, position, *, topic=b"", tags=b"", keys=(), props=(),
                body=b"", flags=0, queue_id=0, queue_offset=0, born=0, store=0):
    keys_b = b"".join(struct.pack("<H", len(k)) + k for k in keys)
    props_b = b"".join(struct.pack("<H", len(k)) + k + struct.pack("<H", len(v)) + v
                       for k, v in props)
    total = 96 + len(topic) + len(tags) + len(keys_b) + len(props_b) + len(body)
    after_crc = (
        struct.pack("<I", total)            # 4  total_size
        + struct.pack("<H", 0x4C51)         # 8  magic
        + struct.pack("<B", 1)              # 10 version
        + struct.pack("<B", rtype)          # 11 type
        + struct.pack("<I", flags)          # 12 flags
        + struct.pack("<Q", index)          # 16 raft_index
        + struct.pack("<Q", term)           # 24 raft_term
        + struct.pack("<Q", position)       # 32 position
        + struct.pack("<Q", queue_offset)   # 40 queue_offset
        + struct.pack("<q", born)           # 48 born_timestamp_ms
        + struct.pack("<q", store)          # 56 store_timestamp_ms
        + struct.pack("<q", fnv_signed(tags))   # 64 tag_hash
        + struct.pack("<I", queue_id)       # 72 queue_id
        + struct.pack("<H", len(topic))     # 76 topic_len
        + struct.pack("<H", len(tags))      # 78 tags_len
        + struct.pack("<I", len(keys_b))    # 80 keys_len
        + struct.pack("<I", len(props_b))   # 84 props_len
        + struct.pack("<I", len(body))      # 88 body_len
        + struct.pack("<I", 0)              # 92 reserved
        + topic + tags + keys_b + props_b + body)
    assert len(after_crc) + 4 == total
    return struct.pack("<I", crc32c_bitwise(after_crc)) + after_crc


def hand_blank(position, size):
    hdr = (struct.pack("<I", size) + struct.pack("<H", 0x4C51) + struct.pack("<B", 1)
           + struct.pack("<B", 5) + bytes(20) + struct.pack("<Q", position) + bytes(56))
    assert len(hdr) == 92
    return struct.pack("<I", crc32c_bitwise(hdr)) + hdr + bytes(size - 96)


def hand_expectation():
    """Relative path -> bytes, built from format.md alone."""
    segs = {0: bytearray(SEGMENT_SIZE)}
    entries = []
    pos = 0
    for i, (kind, a) in enumerate(GOLDEN, start=1):
        if kind == "message":
            kw = dict(topic=a["topic"].encode(), tags=(a.get("tags") or "").encode(),
                      keys=[k.encode() for k in a.get("keys", ())],
                      props=[(k.encode(), v.encode()) for k, v in (a.get("properties") or {}).items()],
                      body=a["body"], flags=a.get("flags", 0), queue_id=a["queue_id"],
                      queue_offset=a["queue_offset"], born=a["born_timestamp_ms"],
                      store=store_ts(i))
            rtype = 1
        else:
            kw = dict(body=a["payload"], born=store_ts(i), store=store_ts(i))
            rtype = a["type"]
        raw = hand_record(rtype, i, a["term"], 0, **kw)
        if len(raw) + 96 > SEGMENT_SIZE - pos % SEGMENT_SIZE:
            start = pos - pos % SEGMENT_SIZE
            segs[start][pos - start:] = hand_blank(pos, SEGMENT_SIZE - (pos - start))
            pos = start + SEGMENT_SIZE
            segs[pos] = bytearray(SEGMENT_SIZE)
        raw = hand_record(rtype, i, a["term"], pos, **kw)
        start = pos - pos % SEGMENT_SIZE
        segs[start][pos - start:pos - start + len(raw)] = raw
        entries.append((pos, a["term"], len(raw), rtype))
        pos += len(raw)
    files = {f"commitlog/{s:020d}": bytes(b) for s, b in segs.items()}
    idx = bytearray(INDEX_FILE_ENTRIES * 24)
    for i, (p, t, n, ty) in enumerate(entries):
        idx[i * 24:(i + 1) * 24] = struct.pack("<QQIB", p, t, n, ty) + bytes(3)
    files["index/00000000000000000001"] = bytes(idx)
    committed_pos = entries[COMMIT_INDEX - 1][0] + entries[COMMIT_INDEX - 1][2]
    dispatched = entries[6][0] + entries[6][2]
    cp = (struct.pack("<I", 0x50434C51) + struct.pack("<H", 1) + struct.pack("<H", 1)
          + struct.pack("<Q", pos) + struct.pack("<Q", len(entries))
          + struct.pack("<Q", COMMIT_INDEX) + struct.pack("<Q", committed_pos)
          + struct.pack("<Q", dispatched) + struct.pack("<Q", 0)
          + struct.pack("<Q", SEGMENT_SIZE) + struct.pack("<Q", INDEX_FILE_ENTRIES)
          + struct.pack("<q", WRITTEN_AT_MS) + bytes(44))
    files["checkpoint"] = cp + struct.pack("<I", crc32c_bitwise(cp))
    return files


def read_store(path):
    """The files format.md specifies (segments, raft index, checkpoint) under `path`."""
    path = pathlib.Path(path)
    out = {}
    for sub in ("commitlog", "index"):
        for f in sorted((path / sub).iterdir()):
            out[f"{sub}/{f.name}"] = f.read_bytes()
    out["checkpoint"] = (path / "checkpoint").read_bytes()
    return out


# ---------------------------------------------------------------------------- writers

def write_reference(path):
    from quorumlog import format as qf
    w = qf.ReferenceWriter(segment_size_bytes=SEGMENT_SIZE, index_file_entries=INDEX_FILE_ENTRIES)
    ends = []
    for i, (kind, a) in enumerate(GOLDEN, start=1):
        a = dict(a)
        if kind == "message":
            idx, p = w.append(a.pop("topic"), a.pop("body"), store_timestamp_ms=store_ts(i), **a)
        else:
            idx, p = w.append_control(a["type"], a["payload"], term=a["term"],
                                      store_timestamp_ms=store_ts(i))
        assert idx == i
        ends.append(w.end_position)
    w.commit(COMMIT_INDEX)
    w.set_dispatched_position(ends[6])
    return w.write(path, written_at_ms=WRITTEN_AT_MS)


def write_native(path):
    """Write the golden calls through the native CommitLog; returns (files, t0_ms, t1_ms)."""
    from quorumlog.commitlog import CommitLog
    t0 = int(time.time() * 1000)
    log = CommitLog(str(path), segment_size_bytes=SEGMENT_SIZE,
                    index_file_entries=INDEX_FILE_ENTRIES, preallocate_next=False)
    ends = []
    for i, (kind, a) in enumerate(GOLDEN, start=1):
        a = dict(a)
        if kind == "message":
            idx, p, _ts = log.append(a.pop("topic"), a.pop("body"), **a)
        else:
            idx, p = log.append_control(a["type"], a["payload"], term=a["term"])
        assert idx == i
        ends.append(log.end_position)
    log.commit(COMMIT_INDEX)
    log.set_dispatched_position(ends[6])
    log.close()
    t1 = int(time.time() * 1000)
    return read_store(path), t0, t1


def normalise_clock(files, t0, t1):
    """Replace the native log's clock-derived fields by the golden values, after checking
    they are plausible (inside [t0, t1]) and, for control records, born == store."""
    files = dict(files)
    segs = sorted(k for k in files if k.startswith("commitlog/"))
    index = 1
    for name in segs:
        seg = bytearray(files[name])
        off = 0
        while off + 96 <= len(seg) and any(seg[off:off + 96]):
            total, rtype = struct.unpack_from("<I", seg, off + 4)[0], seg[off + 11]
            if rtype == 5:
                break
            born, store = struct.unpack_from("<qq", seg, off + 48)
            assert t0 <= store <= t1, f"record {index}: store_timestamp_ms {store} not in [{t0}, {t1}]"
            struct.pack_into("<q", seg, off + 56, store_ts(index))
            if rtype != 1:
                assert born == store, f"control record {index}: born {born} != store {store}"
                struct.pack_into("<q", seg, off + 48, store_ts(index))
            struct.pack_into("<I", seg, off, crc32c_bitwise(seg[off + 4:off + total]))
            off += total
            index += 1
        files[name] = bytes(seg)
    cp = bytearray(files["checkpoint"])
    (written,) = struct.unpack_from("<q", cp, 72)
    assert t0 <= written <= t1, f"checkpoint written_at_ms {written} not in [{t0}, {t1}]"
    struct.pack_into("<q", cp, 72, WRITTEN_AT_MS)
    struct.pack_into("<I", cp, 124, crc32c_bitwise(cp[:124]))
    files["checkpoint"] = bytes(cp)
    return files


def describe_diff(got, want):
    lines = []
    for k in sorted(set(got) | set(want)):
        if k not in got or k not in want:
            lines.append(f"{k}: only in {'got' if k in got else 'expected'}")
        elif got[k] != want[k]:
            a, b = got[k], want[k]
            first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            lines.append(f"{k}: differs at byte {first} (len {len(a)} vs {len(b)}): "
                         f"{a[first:first + 16].hex()} vs {b[first:first + 16].hex()}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- tests

@pytest.fixture(scope="module")
def expected():
    return hand_expectation()


def test_hand_expectation_is_the_intended_shape(expected):
    # two segments (record 8 forced a BLANK), one index file, the checkpoint
    assert sorted(expected) == ["checkpoint", "commitlog/00000000000000000000",
                                "commitlog/00000000000000065536", "index/00000000000000000001"]
    seg0 = expected["commitlog/00000000000000000000"]
    blank_at = struct.unpack_from("<Q", expected["index/00000000000000000001"], 6 * 24)[0] + \
        struct.unpack_from("<I", expected["index/00000000000000000001"], 6 * 24 + 16)[0]
    assert seg0[blank_at + 11] == 5 and SEGMENT_SIZE - blank_at >= 96
    assert struct.unpack_from("<I", seg0, blank_at + 4)[0] == SEGMENT_SIZE - blank_at


def test_golden_files_match_hand_built_expectation(expected):
    got = read_store(GOLDEN_DIR)
    assert got == expected, describe_diff(got, expected)


def test_reference_writer_produces_golden_bytes(tmp_path, expected):
    write_reference(tmp_path)
    got = read_store(tmp_path)
    assert got == expected, describe_diff(got, expected)


def test_reference_decoder_reads_golden_records():
    from quorumlog import format as qf
    recs = []
    for name in ("00000000000000000000", "00000000000000065536"):
        data = (GOLDEN_DIR / "commitlog" / name).read_bytes()
        recs += list(qf.iter_records(data, int(name)))
    assert [r.index for r in recs] == list(range(1, len(GOLDEN) + 1))
    for r, (kind, a) in zip(recs, GOLDEN):
        assert r.store_timestamp_ms == store_ts(r.index)
        if kind == "message":
            assert (r.type, r.topic, bytes(r.body), r.queue_id, r.queue_offset, r.term) == \
                (1, a["topic"], a["body"], a["queue_id"], a["queue_offset"], a["term"])
            assert r.tags == (a.get("tags") or None)
            assert r.keys == tuple(a.get("keys", ()))
            assert r.properties == (a.get("properties") or {})
        else:
            assert (r.type, bytes(r.body), r.term) == (a["type"], a["payload"], a["term"])
    cp = qf.decode_checkpoint((GOLDEN_DIR / "checkpoint").read_bytes())
    assert cp.clean and cp.committed_index == COMMIT_INDEX and cp.flushed_index == len(GOLDEN)


def test_golden_json_matches_files():
    """golden.json (for readers in other languages) describes the same records."""
    from quorumlog import format as qf
    doc = json.loads(GOLDEN_JSON.read_text())
    recs = []
    for name in ("00000000000000000000", "00000000000000065536"):
        data = (GOLDEN_DIR / "commitlog" / name).read_bytes()
        recs += list(qf.iter_records(data, int(name), include_blank=True))
    assert doc["records"] == [record_json(r) for r in recs]


def test_native_commitlog_produces_golden_bytes(tmp_path, expected):
    files, t0, t1 = write_native(tmp_path / "store")
    got = normalise_clock(files, t0, t1)
    assert got == expected, describe_diff(got, expected)


def test_native_commitlog_reads_golden_store(tmp_path):
    """The native log opens a copy of the golden store and returns the golden records."""
    import shutil
    from quorumlog import format as qf
    from quorumlog.commitlog import CommitLog
    shutil.copytree(GOLDEN_DIR, tmp_path / "store")
    with CommitLog(str(tmp_path / "store"), segment_size_bytes=SEGMENT_SIZE,
                   index_file_entries=INDEX_FILE_ENTRIES, preallocate_next=False) as log:
        assert (log.first_index, log.last_index) == (1, len(GOLDEN))
        assert log.committed_index == COMMIT_INDEX
        assert not log.unclean_open
        for i in range(1, len(GOLDEN) + 1):
            pos = log.position_of(i)
            seg = (pos // SEGMENT_SIZE) * SEGMENT_SIZE
            data = (GOLDEN_DIR / "commitlog" / f"{seg:020d}").read_bytes()
            ref = qf.decode_record(data, pos - seg)
            assert bytes(log.record_at(pos)) == data[pos - seg:pos - seg + ref.size]
            assert log.record(i) == ref


def record_json(r):
    return dict(type=r.type, index=r.index, term=r.term, position=r.position, topic=r.topic,
                queue_id=r.queue_id, queue_offset=r.queue_offset,
                born_timestamp_ms=r.born_timestamp_ms, store_timestamp_ms=r.store_timestamp_ms,
                flags=r.flags, tag_hash=r.tag_hash, tags=r.tags, keys=list(r.keys),
                properties=r.properties, body_hex=bytes(r.body).hex())


def rewrite(writer):
    """Regenerate tests/golden/ with the chosen writer (review the diff before committing)."""
    import shutil
    import tempfile
    from quorumlog import format as qf
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="quorumlog-golden-"))
    if writer == "native":
        files, t0, t1 = write_native(tmp / "store")
        files = normalise_clock(files, t0, t1)
    else:
        files = write_reference(tmp / "store")
    if GOLDEN_DIR.exists():
        shutil.rmtree(GOLDEN_DIR)
    for rel, data in files.items():
        p = GOLDEN_DIR / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    recs = []
    for rel in sorted(k for k in files if k.startswith("commitlog/")):
        recs += [record_json(r) for r in
                 qf.iter_records(files[rel], int(rel.split("/")[1]), include_blank=True)]
    doc = dict(description="Records of tests/golden/store (see tests/test_golden.py). "
                           "BLANK records are listed with index 0; body as hex.",
               writer=writer, segment_size_bytes=SEGMENT_SIZE,
               index_file_entries=INDEX_FILE_ENTRIES,
               checkpoint=dataclass_dict(qf.decode_checkpoint(files["checkpoint"])),
               records=recs)
    GOLDEN_JSON.write_text(json.dumps(doc, indent=1) + "\n")
    shutil.rmtree(tmp)
    print(f"wrote {GOLDEN_DIR} and {GOLDEN_JSON} with the {writer} writer")


def dataclass_dict(dc):
    import dataclasses
    return {f.name: getattr(dc, f.name) for f in dataclasses.fields(dc)}


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rewrite", action="store_true", required=True)
    ap.add_argument("--writer", choices=("reference", "native"), default="reference")
    rewrite(ap.parse_args().writer)
