"""Shared helpers of the commit-log tests: hypothesis strategies for record contents,
settings, and small utilities (opening a native log with test-sized segments, reading
a store's files). Imported by the test modules of this directory (pytest puts it on sys.path).
"""
import contextlib
import os
import pathlib
import shutil
import struct
import tempfile

from hypothesis import HealthCheck, settings, strategies as st

from quorumlog import format as qf

SEG = 65536                  # smallest legal segment: rollover and BLANKs happen often
IDX_ENTRIES = 256            # small raft-index files so tests cross index-file boundaries too

# QUORUMLOG_HYPOTHESIS_SCALE multiplies every max_examples here (default 1: the whole
# commit-log suite in ~3 minutes on 2 cores); e.g. 20 for a long local run.
SCALE = float(os.environ.get("QUORUMLOG_HYPOTHESIS_SCALE", "1"))


def hsettings(max_examples, **kw):
    kw.setdefault("deadline", None)
    kw.setdefault("suppress_health_check", [HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.function_scoped_fixture])
    return settings(max_examples=max(1, int(max_examples * SCALE)), **kw)


def fast_mkdtemp(prefix):
    """A scratch directory on tmpfs (/dev/shm) when there is one: fsync there is free, so
    tests that open/close/crash many logs (and hypothesis shrinking them) stay fast.
    The caller removes it."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)


@contextlib.contextmanager
def example_dir(tmp_path_factory, name):
    """A fresh directory for one hypothesis example, removed when the example ends: pytest
    keeps tmp_path_factory's directories until the session ends, and a few hundred examples
    of preallocated segments took ~4 GiB of a `make test` run's disk."""
    path = tmp_path_factory.mktemp(name)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def open_log(path, **kw):
    from quorumlog.commitlog import CommitLog
    kw.setdefault("segment_size_bytes", SEG)
    kw.setdefault("index_file_entries", IDX_ENTRIES)
    return CommitLog(str(path), **kw)


# ------------------------------------------------------------------ strategies

_topic_chars = st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",))
# "." and ".." are refused too: a topic is a directory name
topics = st.text(_topic_chars, min_size=1, max_size=40).filter(
    lambda t: len(t.encode()) <= qf.MAX_TOPIC_BYTES and t not in (".", ".."))
tags = st.none() | st.text(max_size=30).filter(lambda t: len(t.encode()) <= qf.MAX_TAGS_BYTES)
keys = st.lists(st.text(max_size=20), max_size=4).map(tuple)
properties = st.none() | st.dictionaries(st.text(max_size=12), st.text(max_size=30), max_size=4)
timestamps = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
flags = st.integers(min_value=0, max_value=(1 << 32) - 1)
queue_ids = st.integers(min_value=0, max_value=qf.MAX_QUEUE_ID)
queue_offsets = st.integers(min_value=0, max_value=(1 << 63) - 1)


def bodies(max_size=2000):
    return st.binary(max_size=max_size)


@st.composite
def messages(draw, max_body=2000):
    """Keyword arguments of one MESSAGE (no index/term/position/store timestamp)."""
    return dict(topic=draw(topics), body=draw(bodies(max_body)), queue_id=draw(queue_ids),
                queue_offset=draw(queue_offsets), tags=draw(tags), keys=draw(keys),
                properties=draw(properties), born_timestamp_ms=draw(timestamps),
                flags=draw(flags))


@st.composite
def controls(draw, max_body=500):
    t = draw(st.sampled_from(qf.CONTROL_TYPES))
    payload = b"" if t == qf.TYPE_NOOP else draw(st.binary(max_size=max_body))
    return dict(type=t, payload=payload)


# ------------------------------------------------------------------ utilities

def recrc(buf, offset=0):
    """Recompute the CRC of the record at `offset` of bytearray `buf` (after a mutation)."""
    total, rtype = struct.unpack_from("<I", buf, offset + 4)[0], buf[offset + 11]
    end = offset + (qf.HEADER_SIZE if rtype == qf.TYPE_BLANK else total)
    end = min(end, len(buf))
    struct.pack_into("<I", buf, offset, qf.crc32c(bytes(buf[offset + 4:end])))
    return buf


def store_files(path):
    """{relative path: bytes} of every segment, raft-index file and checkpoint of a store."""
    path = pathlib.Path(path)
    out = {}
    for sub in ("commitlog", "index"):
        d = path / sub
        if d.is_dir():
            for f in sorted(d.iterdir()):
                out[f"{sub}/{f.name}"] = f.read_bytes()
    cp = path / "checkpoint"
    if cp.exists():
        out["checkpoint"] = cp.read_bytes()
    return out


def log_files(path):
    """Segments and raft index only (the checkpoint carries a wall-clock timestamp)."""
    return {k: v for k, v in store_files(path).items() if k != "checkpoint"}


def append_message(log, m, term):
    """log.append with the keyword set of `messages()`; returns (index, position, ts)."""
    m = dict(m)
    return log.append(m.pop("topic"), m.pop("body"), term=term, **m)


def flip_bits(path, position, mask=0x20):
    """XOR `mask` into the byte at log position `position` of the store at `path`."""
    seg = position - position % SEG
    f = pathlib.Path(path) / "commitlog" / qf.segment_name(seg)
    data = bytearray(f.read_bytes())
    data[position - seg] ^= mask
    f.write_bytes(bytes(data))
