"""The producer table's reading of a window (quorumlog.commitlog.producer_tags: one C loop
over the records, behind NativeRaftLog.producers) held to the numpy reading it replaced
(producers_numpy): the same runs over logs of mixed batches, legacy records without
QL_N/QL_I, records with other properties, non-producer records, and the same error for a
damaged record."""
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from quorumlog import errors
from quorumlog.commitlog import CommitLog
from quorumlog.store.nativelog import NativeRaftLog, producer_properties
from cl_support import example_dir
from producers_numpy import producers_numpy

U64 = st.integers(0, (1 << 64) - 1)
SMALL = st.integers(0, 999)
VALUES = st.sampled_from(["0", "7", "18446744073709551615", "-1", "1e3", "", "x",
                          "99999999999999999999", "1234567890123456789"])
OTHER = st.dictionaries(st.sampled_from(["QL_PID", "QL_SEQ", "QL_N", "QL_I", "x", "k"]),
                        VALUES, max_size=5)
USER = st.none() | st.dictionaries(st.sampled_from(["a", "zz", "k" * 40]),
                                   st.text(max_size=30), max_size=2)


@st.composite
def appends(draw):
    """One append: ("producer", pid, seq, count, first, user), ("legacy", pid, seq, n),
    ("props", [dict]), ("plain", n) or ("control",)."""
    kind = draw(st.sampled_from(["producer", "producer", "legacy", "props", "plain",
                                 "control"]))
    if kind == "producer":
        count = draw(st.integers(1, 70))
        first = draw(st.integers(0, count - 1))
        return (kind, draw(U64 | SMALL), draw(U64 | SMALL), count, first, draw(USER))
    if kind == "legacy":
        return (kind, draw(SMALL), draw(SMALL), draw(st.integers(1, 5)))
    if kind == "props":
        return (kind, draw(st.lists(OTHER, min_size=1, max_size=6)))
    if kind == "plain":
        return (kind, draw(st.integers(1, 5)))
    return (kind,)


def _append(cl, a):
    kind = a[0]
    if kind == "producer":
        _, pid, seq, count, first, user = a
        n = count - first
        cl.append_batch("t", [b"m"] * n, term=1,
                        properties=producer_properties(pid, seq, count, first, user))
    elif kind == "legacy":
        _, pid, seq, n = a
        cl.append_batch("t", [b"m"] * n, term=1,
                        properties={"QL_PID": str(pid), "QL_SEQ": str(seq)})
    elif kind == "props":
        cl.append_batch("t", [b"m"] * len(a[1]), term=1, properties=a[1])
    elif kind == "plain":
        cl.append_batch("t", [b"m"] * a[1], term=1)
    else:
        cl.append_control(4, b"meta", term=1)   # a META record


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(appends(), min_size=1, max_size=12), st.data())
def test_producers_equal_the_numpy_reading(tmp_path_factory, log, data):
    # small segments: windows that span several reads
    with example_dir(tmp_path_factory, "log") as path:
        cl = CommitLog(str(path), segment_size_bytes=1 << 16)
        try:
            for a in log:
                _append(cl, a)
            last = cl.last_index
            lo = data.draw(st.integers(1, max(last, 1)))
            hi = data.draw(st.integers(lo - 1, last + 2))
            rl = NativeRaftLog(cl)
            assert rl.producers(lo, hi) == producers_numpy(rl, lo, hi)
            assert rl.producers(1, last) == producers_numpy(rl, 1, last)
        finally:
            cl.close()


def test_a_damaged_record_is_the_same_error(tmp_path):
    cl = CommitLog(str(tmp_path / "log"), segment_size_bytes=1 << 20)
    try:
        for seq in range(4):
            cl.append_batch("t", [b"x" * 100] * 8, term=1,
                            properties=producer_properties(7, seq, 8, 0))
        cl.flush()
        rl = NativeRaftLog(cl)
        want = producers_numpy(rl, 1, cl.last_index)
        assert len(want) == 4 and rl.producers(1, cl.last_index) == want
        pos = cl.position_of(13) + 150      # inside record 13's properties
        seg = next(p for p in pathlib.Path(tmp_path / "log").rglob("*")
                   if p.is_file() and p.stat().st_size == 1 << 20)
        with open(seg, "r+b") as f:
            f.seek(pos)
            b = f.read(1)
            f.seek(pos)
            f.write(bytes([b[0] ^ 0x20]))
        with pytest.raises(errors.CorruptLogError) as want_e:
            producers_numpy(rl, 1, cl.last_index)
        with pytest.raises(errors.CorruptLogError) as got_e:
            rl.producers(1, cl.last_index)
        assert str(got_e.value) == str(want_e.value)
    finally:
        cl.close()
