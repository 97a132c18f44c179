"""The Python fallback's numpy scan without Spark: CRC32C lanes vs the reference CRC, and
scan_split over every planned split vs the reference decoder (fast; no JVM)."""
from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest
from hypothesis import given, settings, strategies as hs

import _spark_stores as st
from quorumlog import format as fmt
from quorumlog import spark as qs
from quorumlog.errors import CorruptLogError

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"


@settings(max_examples=60, deadline=None)
@given(hs.lists(hs.binary(min_size=4, max_size=1500), min_size=1, max_size=12))
def test_crc32c_many_equals_reference(chunks):
    region = np.frombuffer(b"".join(chunks), np.uint8)
    lens = np.array([len(c) for c in chunks])
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    got = qs.crc32c_many(region, starts, lens)
    assert [int(x) for x in got] == [fmt.crc32c(c) for c in chunks]


def test_crc32c_many_long_message_and_check_value():
    big = np.random.default_rng(5).integers(0, 256, (1 << 20) + 13, dtype=np.uint8)
    assert int(qs.crc32c_many(big, np.array([0]), np.array([len(big)]))[0]) == \
        fmt.crc32c(big.tobytes())
    nine = np.frombuffer(b"123456789", np.uint8)
    assert int(qs.crc32c_many(nine, np.array([0]), np.array([9]))[0]) == 0xE3069283


def _scan_all(path, split_bytes, **kw):
    rows = []
    for sp in qs.plan_splits(path, split_bytes=split_bytes,
                             committed_only=kw.pop("committed_only", True)):
        for cols in qs.scan_split(sp, **kw):
            t = qs.to_arrow(cols).to_pylist()
            rows += [(r["topic"], r["queue_id"], r["queue_offset"], r["raft_index"], r["term"],
                      r["position"], _us(r["born_timestamp"]), _us(r["store_timestamp"]),
                      r["tags"], tuple(r["keys"]), tuple(sorted(r["properties"])), r["body"])
                     for r in t]
    return rows


def _us(dt):
    import datetime
    return (dt - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) \
        // datetime.timedelta(microseconds=1)


@pytest.fixture(params=["native-crc", "numpy-crc"])
def crc_path(request, monkeypatch):
    """Run with the engine's CRC function and with the pure-numpy lanes (same results)."""
    if request.param == "numpy-crc":
        monkeypatch.setenv("QUORUMLOG_SPARK_NUMPY_CRC", "1")
    else:
        assert qs._native_crc32c() is not None, "native extension not built"
    return request.param


@pytest.mark.parametrize("split_bytes", [1 << 30, 4096, 150001])
def test_scan_split_equals_reference(log_store, split_bytes, crc_path):
    pytest.importorskip("pyarrow")
    assert _scan_all(log_store, split_bytes) == st.expected_messages(log_store)
    # committed_only=False reads the uncommitted tail too
    assert _scan_all(log_store, split_bytes, committed_only=False) == \
        st.expected_messages(log_store, committed_only=False)


def test_scan_golden_vector():
    """The golden store (tests/golden, checked byte-for-byte by test_golden.py)."""
    pytest.importorskip("pyarrow")
    g = json.loads((GOLDEN / "golden.json").read_text())
    ci = g["checkpoint"]["committed_index"]
    want = [(r["topic"], r["index"], r["tags"], tuple(r["keys"]),
             bytes.fromhex(r["body_hex"])) for r in g["records"]
            if r["type"] == fmt.TYPE_MESSAGE and r["index"] <= ci]
    got = [(r[0], r[3], r[8], r[9], r[11]) for r in _scan_all(str(GOLDEN / "store"), 4096)]
    assert got == want and want


def test_scan_corrupt_record_names_file_and_offset(log_store, tmp_path, crc_path):
    pytest.importorskip("pyarrow")
    path = str(tmp_path / "s")
    shutil.copytree(log_store, path)
    victim = [r for r in st.all_records(path) if r.type == fmt.TYPE_MESSAGE][77]
    seg, _ = st.corrupt_byte(path, victim.position + 50)  # inside the header: queue offset
    with pytest.raises(CorruptLogError) as ei:
        _scan_all(path, 1 << 30)
    assert ei.value.path == seg and ei.value.offset == victim.position % st.SEGMENT_SIZE
    stats = {}
    n = sum(len(c["queue_id"]) for sp in qs.plan_splits(path)
            for c in qs.scan_split(sp, on_corrupt="skip", stats=stats))
    assert n == len(st.expected_messages(log_store)) - 1


def _utc(ms):
    import datetime
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


def test_python_reader_takes_pushed_filters_drops_rows_before_arrow_and_prunes_splits(ts_store):
    """The Python source's reader (no Spark: the calls Spark's planner makes) with filters on
    topic, queue_id and store_timestamp, plus two it cannot use."""
    pytest.importorskip("pyspark")
    from pyspark.sql.datasource import (EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan,
                                        StringStartsWith)
    from quorumlog.spark.datasource import QuorumlogPythonSource

    lo, hi = st.TS0 + 100, st.TS0 + 300
    filters = [EqualTo(("topic",), "orders"), In(("queue_id",), (1, 3)),
               GreaterThanOrEqual(("store_timestamp",), _utc(lo)),
               LessThan(("store_timestamp",), _utc(hi)), IsNotNull(("topic",)),
               StringStartsWith(("topic",), "ord")]
    opts = {"path": ts_store, "splitBytes": "65536", "pushdown": "true"}
    reader = QuorumlogPythonSource(opts).reader(None)
    assert list(reader.pushFilters(filters)) == filters  # Spark evaluates all of them again
    parts = reader.partitions()
    everything = QuorumlogPythonSource(opts).reader(None).partitions()
    assert len(parts) < len(everything) // 2             # splits outside [lo, hi) not read
    got = [r for p in parts for b in reader.read(p) for r in b.to_pylist()]
    want = [t for t in st.expected_messages(ts_store)
            if t[0] == "orders" and t[1] in (1, 3) and lo * 1000 <= t[7] < hi * 1000]
    assert len(want) > 5
    # only the matching records were turned into Arrow rows
    assert [(r["raft_index"], r["queue_id"], r["body"]) for r in got] == \
        [(t[3], t[1], t[11]) for t in want]
