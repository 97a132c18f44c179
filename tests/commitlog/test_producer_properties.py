"""A producer batch's per-message properties (QL_PID, QL_SEQ, QL_N, QL_I, then the caller's)
are encoded by the native log in one loop per batch (ProducerProperties): differential
tests against the pure-Python codec (quorumlog.format), and the decoders that read them
back (nativelog.producer_tag, the vectorised NativeRaftLog.producers) fuzzed."""
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cl_support import example_dir
from quorumlog import format as qf
from quorumlog._commitlog import encode_producer_properties
from quorumlog.commitlog import CommitLog, ProducerProperties
from quorumlog.errors import InvalidArgumentError
from quorumlog.store.nativelog import NativeRaftLog, producer_properties, producer_tag

U64 = st.integers(0, (1 << 64) - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
USER = st.dictionaries(TEXT.filter(lambda k: not k.startswith("QL_")), TEXT, max_size=3)
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def reference(pid, seq, count, first, user):
    """The dicts producer_properties stood for before (pure Python, in their order)."""
    n = len(user) if isinstance(user, list) else count - first
    out = []
    for j in range(n):
        d = {"QL_PID": str(pid), "QL_SEQ": str(seq), "QL_N": str(count),
             "QL_I": str(first + j)}
        p = user[j] if isinstance(user, list) else user
        d.update(p or {})
        out.append(d)
    return out


@st.composite
def producer_batches(draw):
    count = draw(st.integers(1, 40))
    first = draw(st.integers(0, count - 1))
    form = draw(st.sampled_from(["none", "shared", "list"]))
    user = None if form == "none" else draw(USER) if form == "shared" else \
        draw(st.lists(st.none() | USER, min_size=count - first, max_size=count - first))
    return draw(U64), draw(U64), count, first, user


@SETTINGS
@given(producer_batches())
def test_native_encoding_equals_the_python_codec(batch):
    pp = producer_properties(*batch)
    want = reference(*batch)
    assert list(pp) == want and len(pp) == len(want)
    assert encode_producer_properties(pp) == [qf._props_bytes(d) for d in want]


@SETTINGS
@given(producer_batches())
def test_records_read_back_as_the_dicts(tmp_path_factory, batch):
    pid, seq, count, first, user = batch
    with example_dir(tmp_path_factory, "log") as path:
        cl = CommitLog(str(path), segment_size_bytes=1 << 16, index_file_entries=1024)
        try:
            want = reference(*batch)
            f, _, _ = cl.append_batch("t", [b"m%d" % j for j in range(len(want))], term=1,
                                      properties=producer_properties(*batch))
            got = [cl.record(f + j).properties for j in range(len(want))]
            assert got == want
            assert [producer_tag(cl.record_at(cl.position_of(f + j)))
                    for j in range(len(want))] == [(pid, seq, count, first + j)
                                                   for j in range(len(want))]
            assert NativeRaftLog(cl).producers(f, cl.last_index) == \
                [(f, cl.last_index, pid, seq, count, first)]
        finally:
            cl.close()


def test_bad_producer_properties_are_refused_and_change_nothing(tmp_path):
    with pytest.raises(InvalidArgumentError, match="reserved"):
        producer_properties(1, 2, 3, 0, [None, {"QL_I": "0"}, None])
    with pytest.raises(InvalidArgumentError):
        ProducerProperties(-1, 0, 1, 0)
    cl = CommitLog(str(tmp_path / "log"), segment_size_bytes=1 << 16)
    try:
        with pytest.raises(InvalidArgumentError, match="one entry per body"):
            cl.append_batch("t", [b"a", b"b"], term=1, properties=producer_properties(1, 2, 3, 0))
        with pytest.raises(InvalidArgumentError, match="properties field"):
            cl.append_batch("t", [b"a"], term=1,
                            properties=producer_properties(1, 2, 1, 0, {"k": "v" * 40000}))
        assert cl.last_index == 0
    finally:
        cl.close()


def _record_with_props(props: bytes, topic=b"t") -> bytes:
    """A record's bytes as far as producer_tag reads them: the four field lengths at 76,
    the fields from 96 on (no CRC: producer_tag reads a record the log has verified)."""
    head = bytearray(96)
    struct.pack_into("<HHII", head, 76, len(topic), 0, 0, len(props))
    return bytes(head) + topic + props


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=120))
def test_producer_tag_fuzzed_returns_a_tag_or_none(props):
    # any properties field, well-formed or not: a tag of four ints (or two + None) or None,
    # never an exception
    tag = producer_tag(_record_with_props(props))
    assert tag is None or (len(tag) == 4 and all(v is None or v >= 0 for v in tag))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.dictionaries(st.sampled_from(["QL_PID", "QL_SEQ", "QL_N", "QL_I", "x"]),
                                st.sampled_from(["0", "7", "18446744073709551615", "-1",
                                                 "1e3", "", "x", "99999999999999999999"]),
                                max_size=5), min_size=1, max_size=12))
def test_vector_decoder_agrees_with_producer_tag(tmp_path_factory, props):
    # NativeRaftLog.producers reads the reserved properties with vector operations over
    # every record; any layout of them must give what producer_tag gives one by one
    with example_dir(tmp_path_factory, "log") as path:
        cl = CommitLog(str(path), segment_size_bytes=1 << 16)
        try:
            cl.append_batch("t", [b"b"] * len(props), term=1, properties=props)
            tags = {}
            for i in range(1, cl.last_index + 1):
                t = producer_tag(cl.record_at(cl.position_of(i)))
                if t is not None and all(v is None or v < 1 << 64 for v in t):
                    tags[i] = t
            runs = NativeRaftLog(cl).producers(1, cl.last_index)
            seen = {}
            for first, last, pid, seq, count, ordinal in runs:
                for k, i in enumerate(range(first, last + 1)):
                    seen[i] = (pid, seq, count, None if ordinal is None else ordinal + k)
            assert seen == tags
        finally:
            cl.close()
