"""A segment the store's retention recycles under a Spark reader (docs/architecture.md
"Segment recycling": the file is renamed to <start>.free, then into place as a new segment
and overwritten): the JVM segment reader must fail with SegmentGoneException naming the
segment, not CorruptRecordException, in fail and skip mode alike; a segment left alone
still reads whole. Real retention and recycling by the native CommitLog under readers
driven through py4j (a DataFrame's read cannot be paused mid-segment)."""
from __future__ import annotations

import os

import pytest
from py4j.protocol import Py4JJavaError

from quorumlog import format as fmt

CommitLog = pytest.importorskip("quorumlog.commitlog").CommitLog

# Larger than the reader's 4 MiB read-ahead (QuorumlogRecordReader.READ_CHUNK): the reader
# must go back to the file after the recycle, as it does in a real segment.
SEG = 8 << 20


def _reader(spark, seg_file, committed, skip=False):
    """A QuorumlogRecordReader over the whole of seg_file, initialised (the file opened)."""
    jvm = spark.sparkContext._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
    if skip:
        conf.set("quorumlog.on.corrupt", "skip")
    split = jvm.io.quorumlog.spark.QuorumlogSplit(
        jvm.org.apache.hadoop.fs.Path("file://" + seg_file), 0, SEG,
        spark.sparkContext._gateway.new_array(jvm.String, 0), committed, committed, 4096)
    r = jvm.io.quorumlog.spark.QuorumlogRecordReader()
    r.initialize(split, conf)
    return r


def _read_all(r):
    n = 0
    while r.nextKeyValue():
        n += 1
    r.close()
    return n


def _gone(exc_info, seg_file):
    jexc = exc_info.value.java_exception
    msg = jexc.getMessage()
    assert jexc.getClass().getSimpleName() == "SegmentGoneException", msg
    assert seg_file in msg and "deleted or reused by the store's retention" in msg, msg
    assert "re-run the query" in msg, msg


def test_a_segment_recycled_under_a_reader_fails_as_gone_not_corrupt(spark, tmp_path):
    path = str(tmp_path / "store")
    log = CommitLog(path, segment_size_bytes=SEG, index_file_entries=4096, recycle_segments=2,
                    flush="async", flush_interval_ms=3_600_000,
                    checkpoint_interval_ms=3_600_000)
    try:
        n0 = 0
        while log.end_position < 3 * SEG:
            i, p, _ = log.append("t", bytes([log.end_position % 251]) * 3000, term=1)
            n0 += p < SEG
        log.commit(log.last_index)
        committed = log.committed_position
        seg0 = os.path.join(path, "commitlog", fmt.segment_name(0))
        inode = os.stat(seg0).st_ino
        # a store that did not change reads whole
        assert _read_all(_reader(spark, seg0, committed)) == n0
        fail, skip = _reader(spark, seg0, committed), _reader(spark, seg0, committed, True)
        assert fail.nextKeyValue() and skip.nextKeyValue()

        assert log.delete_segments_before(SEG) == 1       # seg0 -> 000...0.free
        end_seg = log.end_position // SEG
        while log.end_position < (end_seg + 2) * SEG:     # the pooled file becomes a segment
            log.append("t", b"\x5a" * 3000, term=1)
        reused = os.path.join(path, "commitlog", fmt.segment_name((end_seg + 1) * SEG))
        assert os.stat(reused).st_ino == inode and not os.path.exists(seg0)

        for r in (fail, skip):
            with pytest.raises(Py4JJavaError) as e:
                _read_all(r)
            _gone(e, seg0)
        with pytest.raises(Py4JJavaError) as e:               # planned before, opened after
            _reader(spark, seg0, committed)
        _gone(e, seg0)
    finally:
        log.close()
