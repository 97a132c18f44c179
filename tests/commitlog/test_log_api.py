"""CommitLog API tests against docs/architecture.md: open/close, LOCK, abort marker, reads,
raft index, truncation, bad arguments (each raises its specific error and changes nothing),
CRC32C known vectors of the native implementation.
"""
import os
import subprocess
import sys
import textwrap

import pytest

from quorumlog import errors, format as qf

from cl_support import (SEG, IDX_ENTRIES, log_files, open_log, store_files)



# ------------------------------------------------------------------ CRC32C

@pytest.mark.parametrize("data, want", [
    (b"", 0), (b"123456789", 0xE3069283), (bytes(32), 0x8A9136AA), (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
])
def test_native_crc32c_known_vectors(data, want):
    from quorumlog import commitlog
    assert commitlog.crc32c(data) == want             # SSE4.2 where the CPU has it
    assert commitlog.crc32c_software(data) == want    # the portable table fallback
    assert qf.crc32c(data) == want
    assert commitlog.crc32c(data[5:], commitlog.crc32c(data[:5])) == want   # incremental


def test_native_crc32c_matches_reference_on_odd_lengths_and_alignments():
    from quorumlog import commitlog
    blob = bytes((i * 131 + 7) & 0xFF for i in range(5000))
    for start in range(0, 9):
        for n in (0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4096 - start):
            want = qf.crc32c(blob[start:start + n])
            assert commitlog.crc32c(blob[start:start + n]) == want
            assert commitlog.crc32c(memoryview(blob)[start:start + n]) == want
            assert commitlog.crc32c_software(blob[start:start + n]) == want


# ------------------------------------------------------------------ open / close

def test_empty_log_properties(tmp_path):
    with open_log(tmp_path / "s") as log:
        assert (log.first_index, log.last_index, log.last_term) == (0, 0, 0)
        assert (log.min_position, log.end_position) == (0, 0)
        assert log.segment_size_bytes == SEG
        assert not log.closed
        assert not log.unclean_open
        cnt = log.read(1, 10)[1]
        assert cnt == 0
    assert log.closed


def test_methods_raise_log_closed_after_close(tmp_path):
    log = open_log(tmp_path / "s")
    log.append("t", b"x", term=1)
    log.close()
    log.close()                                    # idempotent
    for call in (lambda: log.append("t", b"x", term=1), lambda: log.record(1),
                 lambda: log.read(1, 2), lambda: log.flush(), lambda: log.term_at(1),
                 lambda: log.truncate_after(0), lambda: log.append_control(2, term=1),
                 lambda: log.append_batch("t", [b"a"], queue_ids=0, queue_offsets=0, term=1),
                 lambda: log.append_replicated(b""), lambda: log.record_at(0)):
        with pytest.raises(errors.LogClosedError):
            call()


def test_lock_second_open_fails_in_same_process(tmp_path):
    p = tmp_path / "s"
    with open_log(p):
        with pytest.raises(errors.LockedError):
            open_log(p)
    # released on close
    with open_log(p):
        pass


def test_lock_second_open_fails_in_other_process(tmp_path):
    p = tmp_path / "s"
    code = textwrap.dedent(f"""
        import sys
        from quorumlog import errors
        from quorumlog.commitlog import CommitLog
        try:
            CommitLog({str(p)!r}, segment_size_bytes={SEG}, index_file_entries={IDX_ENTRIES})
        except errors.LockedError as e:
            print("LOCKED", e); sys.exit(3)
        sys.exit(0)
    """)
    with open_log(p) as log:
        log.append("t", b"x", term=1)
        before = store_files(p)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert r.returncode == 3, r.stdout + r.stderr
        assert log_files(p) == {k: v for k, v in before.items() if k != "checkpoint"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_abort_marker_and_unclean_open(tmp_path):
    p = tmp_path / "s"
    log = open_log(p)
    assert (p / "abort").exists() and (p / "LOCK").exists()
    log.append("t", b"x", term=1)
    log.close()
    assert not (p / "abort").exists()
    log = open_log(p)
    assert not log.unclean_open
    log.append("t", b"y", term=1)
    log.crash_for_testing()
    assert (p / "abort").exists()
    log = open_log(p)
    assert log.unclean_open
    assert log.last_index == 2          # page cache survived: nothing lost
    log.close()
    with open_log(p) as log:
        assert not log.unclean_open


def test_clean_close_writes_clean_checkpoint(tmp_path):
    p = tmp_path / "s"
    with open_log(p) as log:
        for i in range(5):
            log.append("t", b"x" * i, term=1)
        log.commit(3)
        end = log.end_position
    cp = qf.decode_checkpoint((p / "checkpoint").read_bytes())
    assert cp.clean and cp.flushed_position == end and cp.flushed_index == 5
    assert cp.committed_index == 3 and cp.segment_size_bytes == SEG
    with open_log(p) as log:
        assert log.committed_index == 3 and log.flushed_position == end


def test_reopen_with_other_segment_size_is_rejected(tmp_path):
    p = tmp_path / "s"
    with open_log(p) as log:
        log.append("t", b"x", term=1)
    before = store_files(p)
    with pytest.raises((errors.ConfigError, errors.InvalidArgumentError)):
        open_log(p, segment_size_bytes=SEG * 2)
    assert store_files(p) == before


def test_corrupt_checkpoint_is_an_error_naming_the_file(tmp_path):
    p = tmp_path / "s"
    with open_log(p) as log:
        log.append("t", b"x", term=1)
    cp = bytearray((p / "checkpoint").read_bytes())
    cp[10] ^= 1
    (p / "checkpoint").write_bytes(bytes(cp))
    with pytest.raises(errors.CorruptLogError) as ei:
        open_log(p)
    assert "checkpoint" in str(ei.value)


@pytest.mark.parametrize("kw", [dict(segment_size_bytes=65536 - 4096),
                                dict(segment_size_bytes=65536 + 1),
                                dict(flush="sometimes"), dict(max_message_bytes=-1),
                                dict(index_file_entries=0), dict(flush_interval_ms=-5)])
def test_bad_open_arguments(tmp_path, kw):
    with pytest.raises(errors.InvalidArgumentError):
        open_log(tmp_path / "s", **kw)


# ------------------------------------------------------------------ appends and reads

def test_append_returns_and_reads(tmp_path):
    with open_log(tmp_path / "s") as log:
        idx, pos, ts = log.append("orders", b"hello", queue_id=3, queue_offset=10, term=2,
                                  tags="tg", keys=("a", "b"), properties={"x": "y"},
                                  born_timestamp_ms=123, flags=7)
        assert (idx, pos) == (1, 0) and isinstance(ts, int)
        rec = log.record(1)
        assert isinstance(rec, qf.Record)
        assert (rec.topic, bytes(rec.body), rec.queue_id, rec.queue_offset, rec.term) == \
            ("orders", b"hello", 3, 10, 2)
        assert (rec.tags, rec.keys, rec.properties, rec.born_timestamp_ms, rec.flags) == \
            ("tg", ("a", "b"), {"x": "y"}, 123, 7)
        assert rec.store_timestamp_ms == ts
        raw = bytes(log.record_at(0))
        assert raw == qf.encode(rec)
        assert log.decode_at(0) == rec
        assert (log.term_at(1), log.position_of(1), log.size_of(1)) == (2, 0, len(raw))
        assert log.end_position == len(raw) and log.last_term == 2
        assert log.topic_at(0) == "orders"
        # born defaults to the store timestamp (format.md)
        _, _, ts2 = log.append("orders", b"", term=2)
        assert log.record(2).born_timestamp_ms == ts2
        for bad in (0, 3, -1):
            with pytest.raises(errors.IndexOutOfRangeError):
                log.term_at(bad)
            with pytest.raises(errors.IndexOutOfRangeError):
                log.record(bad)


def test_append_control_records(tmp_path):
    with open_log(tmp_path / "s") as log:
        assert log.append_control(qf.TYPE_NOOP, term=1) == (1, 0)
        i, p = log.append_control(qf.TYPE_CONFIG, b"cfg", term=1)
        i2, p2 = log.append_control(qf.TYPE_META, b"meta", term=3)
        assert (i, i2) == (2, 3)
        recs = [log.record(k) for k in (1, 2, 3)]
        assert [r.type for r in recs] == [2, 3, 4]
        assert [bytes(r.body) for r in recs] == [b"", b"cfg", b"meta"]
        assert all(r.born_timestamp_ms == r.store_timestamp_ms for r in recs)
        for bad_type in (qf.TYPE_MESSAGE, qf.TYPE_BLANK, 0, 9):
            with pytest.raises(errors.InvalidArgumentError):
                log.append_control(bad_type, b"", term=3)
        with pytest.raises(errors.InvalidArgumentError):
            log.append_control(qf.TYPE_NOOP, b"x", term=3)
        assert log.last_index == 3


def test_rollover_writes_blank_and_reads_skip_it(tmp_path):
    with open_log(tmp_path / "s") as log:
        body = b"r" * 3000
        positions = [log.append("t", body, term=1)[1] for _ in range(50)]
        size = log.size_of(1)
        per_seg = (SEG - 96) // size        # records that fit leaving >= 96 bytes
        per_seg = max(k for k in range(per_seg + 2) if k * size + 96 <= SEG)
        assert positions[per_seg] == SEG
        assert positions[per_seg - 1] == (per_seg - 1) * size
        seg0 = (tmp_path / "s" / "commitlog" / qf.segment_name(0)).read_bytes()
        recs = list(qf.iter_records(seg0, 0, include_blank=True))
        assert recs[-1].type == qf.TYPE_BLANK and len(recs) == per_seg + 1
        assert [s for s, _ in log.segments()][:2] == [0, SEG]
        # read() never crosses a segment boundary
        view, n = log.read(1, 51, max_bytes=1 << 20)
        assert n == per_seg and len(view) == per_seg * size
        view, n = log.read(per_seg + 1, 51)
        assert bytes(view[:size]) == bytes(log.record_at(SEG))


def test_read_limits(tmp_path):
    with open_log(tmp_path / "s") as log:
        for i in range(20):
            log.append("t", bytes([i]) * 100, term=1)
        size = log.size_of(1)
        view, n = log.read(3, 10, max_bytes=size * 3 + 5)
        assert n == 3 and len(view) == 3 * size
        assert bytes(view) == b"".join(bytes(log.record_at(log.position_of(i))) for i in (3, 4, 5))
        view, n = log.read(3, 10, max_bytes=1)          # always at least one record
        assert n == 1 and len(view) == size
        assert log.read(3, 4)[1] == 1
        assert log.read(21, 30)[1] == 0                 # lo > last_index
        assert log.read(20, 30)[1] == 1
        assert log.read(5, 5)[1] == 0                  # empty range
        assert log.read(5, 4)[1] == 0                  # hi < lo: empty as well
        for lo, hi in ((0, 5), (-1, 3)):               # below first_index
            with pytest.raises(errors.IndexOutOfRangeError):
                log.read(lo, hi)


def test_truncate_after(tmp_path):
    p = tmp_path / "s"
    with open_log(p) as log:
        for i in range(40):
            log.append("t", b"y" * 3000, term=1 + i // 10)
        assert log.position_of(40) > SEG
        end5 = log.position_of(5) + log.size_of(5)
        log.truncate_after(5)
        assert (log.last_index, log.last_term, log.end_position) == (5, 1, end5)
        with pytest.raises(errors.IndexOutOfRangeError):
            log.record(6)
        seg0 = (p / "commitlog" / qf.segment_name(0)).read_bytes()
        assert seg0[end5:] == bytes(SEG - end5)          # bytes after the end are zeroed
        idx, pos, _ = log.append("t", b"new", term=7)
        assert (idx, pos) == (6, end5)
        log.truncate_after(0)
        assert (log.last_index, log.end_position) == (0, 0)
        assert log.append("t", b"again", term=7)[:2] == (1, 0)
        before = log_files(p)
        log.truncate_after(5)                           # beyond last_index: nothing to drop
        log.truncate_after(1)                           # at last_index: nothing to drop
        assert log.last_index == 1 and log_files(p) == before
        with pytest.raises((errors.IndexOutOfRangeError, errors.InvalidArgumentError)):
            log.truncate_after(-1)
    with open_log(p) as log:
        assert log.last_index == 1 and bytes(log.record(1).body) == b"again"


def test_stats_count_appends_and_flushes(tmp_path):
    with open_log(tmp_path / "s") as log:
        log.append("t", b"x", term=1)
        log.append_batch("t", [b"a", b"b"], queue_ids=0, queue_offsets=0, term=1)
        log.flush()
        s = log.stats()
        assert s["appends"] >= 2 and s["records"] == 3 and s["flushes"] >= 1


def test_verify_detects_damage_before_flushed_position(tmp_path):
    p = tmp_path / "s"
    with open_log(p) as log:
        for i in range(10):
            log.append("t", b"v" * 100, term=1)
        pos = log.position_of(4)
    with open_log(p) as log:
        log.verify()
        raw = bytearray((p / "commitlog" / qf.segment_name(0)).read_bytes())
        with open(p / "commitlog" / qf.segment_name(0), "r+b") as f:
            f.seek(pos + 100)
            f.write(bytes([raw[pos + 100] ^ 0xFF]))
        with pytest.raises(errors.CorruptLogError) as ei:
            log.verify()
        assert ei.value.offset == pos
        with pytest.raises(errors.CorruptLogError):
            log.record(4)
        assert bytes(log.record(5).body) == b"v" * 100


# ------------------------------------------------------------------ bad arguments

def bad_append_calls():
    big = b"x" * 1001
    return [
        ("topic empty", errors.InvalidTopicError, lambda log: log.append("", b"x", term=1)),
        ("topic 256 bytes", errors.InvalidTopicError, lambda log: log.append("a" * 256, b"x", term=1)),
        ("topic 128 x 2-byte chars", errors.InvalidTopicError,
         lambda log: log.append("\u00e9" * 128, b"x", term=1)),
        ("topic with /", errors.InvalidTopicError, lambda log: log.append("a/b", b"x", term=1)),
        ("topic with NUL", errors.InvalidTopicError, lambda log: log.append("a\0", b"x", term=1)),
        ("topic not str", errors.InvalidTopicError, lambda log: log.append(b"t", b"x", term=1)),
        ("topic surrogate", errors.InvalidTopicError, lambda log: log.append("\ud800", b"x", term=1)),
        ("queue id 65536", errors.InvalidQueueError,
         lambda log: log.append("t", b"x", term=1, queue_id=65536)),
        ("queue id -1", errors.InvalidQueueError, lambda log: log.append("t", b"x", term=1, queue_id=-1)),
        ("queue id str", errors.InvalidQueueError, lambda log: log.append("t", b"x", term=1, queue_id="1")),
        ("body over max", errors.MessageTooLargeError, lambda log: log.append("t", big, term=1)),
        ("body str", errors.InvalidArgumentError, lambda log: log.append("t", "text", term=1)),
        ("body None", errors.InvalidArgumentError, lambda log: log.append("t", None, term=1)),
        ("tags 256", errors.InvalidArgumentError, lambda log: log.append("t", b"", term=1, tags="g" * 256)),
        ("tags int", errors.InvalidArgumentError, lambda log: log.append("t", b"", term=1, tags=5)),
        ("keys str", errors.InvalidArgumentError, lambda log: log.append("t", b"", term=1, keys="abc")),
        ("keys field over 32768", errors.InvalidArgumentError,
         lambda log: log.append("t", b"", term=1, keys=("k" * 32767,))),
        ("props not dict", errors.InvalidArgumentError,
         lambda log: log.append("t", b"", term=1, properties=[("a", "b")])),
        ("props value int", errors.InvalidArgumentError,
         lambda log: log.append("t", b"", term=1, properties={"a": 1})),
        ("props over 32768", errors.InvalidArgumentError,
         lambda log: log.append("t", b"", term=1, properties={"a": "b" * 32764})),
        ("term decreasing", errors.InvalidArgumentError, lambda log: log.append("t", b"", term=4)),
        ("term negative", errors.InvalidArgumentError, lambda log: log.append("t", b"", term=-1)),
        ("term str", errors.InvalidArgumentError, lambda log: log.append("t", b"", term="5")),
        ("flags negative", errors.InvalidArgumentError, lambda log: log.append("t", b"", term=5, flags=-1)),
        ("flags 2**32", errors.InvalidArgumentError, lambda log: log.append("t", b"", term=5, flags=1 << 32)),
        ("born out of i64", errors.InvalidArgumentError,
         lambda log: log.append("t", b"", term=5, born_timestamp_ms=1 << 63)),
        ("queue offset negative", errors.InvalidArgumentError,
         lambda log: log.append("t", b"", term=5, queue_offset=-1)),
        # batches: one bad element rejects the whole batch
        ("batch body over max", errors.MessageTooLargeError,
         lambda log: log.append_batch("t", [b"a", big], queue_ids=0, queue_offsets=0, term=5)),
        ("batch body str", errors.InvalidArgumentError,
         lambda log: log.append_batch("t", [b"a", "s"], queue_ids=0, queue_offsets=0, term=5)),
        ("batch queue id out of range", errors.InvalidQueueError,
         lambda log: log.append_batch("t", [b"a", b"b"], queue_ids=[0, 70000], queue_offsets=0, term=5)),
        ("batch queue_ids length", errors.InvalidArgumentError,
         lambda log: log.append_batch("t", [b"a", b"b"], queue_ids=[0], queue_offsets=0, term=5)),
        ("batch queue_offsets length", errors.InvalidArgumentError,
         lambda log: log.append_batch("t", [b"a", b"b"], queue_ids=0, queue_offsets=[1, 2, 3], term=5)),
        ("batch tags list length", errors.InvalidArgumentError,
         lambda log: log.append_batch("t", [b"a"], queue_ids=0, queue_offsets=0, term=5, tags=["a", "b"])),
        ("batch bad tag", errors.InvalidArgumentError,
         lambda log: log.append_batch("t", [b"a", b"b"], queue_ids=0, queue_offsets=0, term=5,
                                      tags=[None, "x" * 300])),
        ("batch bad props", errors.InvalidArgumentError,
         lambda log: log.append_batch("t", [b"a", b"b"], queue_ids=0, queue_offsets=0, term=5,
                                      properties=[None, {"a": 5}])),
        ("batch bad keys", errors.InvalidArgumentError,
         lambda log: log.append_batch("t", [b"a", b"b"], queue_ids=0, queue_offsets=0, term=5,
                                      keys=[("a",), "notatuple"])),
        ("batch bodies not a list", errors.InvalidArgumentError,
         lambda log: log.append_batch("t", b"abc", queue_ids=0, queue_offsets=0, term=5)),
        ("batch topic", errors.InvalidTopicError,
         lambda log: log.append_batch("a/b", [b"a"], queue_ids=0, queue_offsets=0, term=5)),
        ("batch term decreasing", errors.InvalidArgumentError,
         lambda log: log.append_batch("t", [b"a"], queue_ids=0, queue_offsets=0, term=1)),
        ("control term decreasing", errors.InvalidArgumentError,
         lambda log: log.append_control(qf.TYPE_NOOP, term=1)),
        ("control payload str", errors.InvalidArgumentError,
         lambda log: log.append_control(qf.TYPE_CONFIG, "cfg", term=5)),
        ("control payload over max", errors.MessageTooLargeError,
         lambda log: log.append_control(qf.TYPE_META, big, term=5)),
    ]


@pytest.fixture
def populated(tmp_path):
    p = tmp_path / "s"
    log = open_log(p, max_message_bytes=1000)
    for i in range(30):
        log.append("t", b"z" * 900, term=5 if i else 5, queue_offset=i)
    log.flush()
    yield p, log
    if not log.closed:
        log.close()


@pytest.mark.parametrize("name, exc, call", bad_append_calls(), ids=[c[0] for c in bad_append_calls()])
def test_bad_arguments_raise_and_change_nothing(populated, name, exc, call):
    p, log = populated
    before = (log.last_index, log.last_term, log.end_position, log_files(p))
    with pytest.raises(exc):
        call(log)
    assert (log.last_index, log.last_term, log.end_position, log_files(p)) == before
    # and the log still works
    assert log.append("t", b"ok", term=5)[0] == before[0] + 1


def test_max_message_bytes_boundary(tmp_path):
    with open_log(tmp_path / "s", max_message_bytes=1000) as log:
        log.append("t", b"x" * 1000, term=1)
        with pytest.raises(errors.MessageTooLargeError):
            log.append("t", b"x" * 1001, term=1)
    # a record must fit in S - 96 whatever max_message_bytes says
    with open_log(tmp_path / "s2", max_message_bytes=SEG) as log:
        log.append("t", b"x" * (SEG - 96 - 96 - 1), term=1)
        with pytest.raises(errors.MessageTooLargeError):
            log.append("t", b"x" * (SEG - 96 - 96), term=1)
        assert log.last_index == 1


@pytest.mark.parametrize("with_checkpoint", [False, True])
def test_truncate_below_flushed_position_lowers_it(tmp_path, with_checkpoint):
    """flushed_position is a record boundary at or before the end: after truncate_after()
    below it, neither the log nor the checkpoint on disk may claim more (recovery would
    trust bytes that are gone)."""
    p = tmp_path / "s"
    log = open_log(p, flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000)
    for _ in range(3):
        log.append_control(qf.TYPE_NOOP, term=1)
    log.flush()
    if with_checkpoint:
        log.checkpoint()
    log.truncate_after(1)
    assert log.end_position == 96
    assert log.flushed_position <= log.end_position
    log.crash_for_testing()
    if (p / "checkpoint").exists():
        cp = qf.decode_checkpoint((p / "checkpoint").read_bytes())
        assert cp.flushed_position <= 96 and cp.flushed_index <= 1
    with open_log(p) as log:
        assert (log.last_index, log.end_position) == (1, 96)


@pytest.mark.parametrize("body_size", [100, 3000, 20000])
def test_segment_preparation_never_loses_a_segment(tmp_path, body_size):
    """With preallocate_next the next segment is prepared by a background thread while the
    append path may create it itself: whichever wins, every segment the log lists exists on
    disk for its whole life, and a reopen finds every record."""
    p = tmp_path / "s"
    with open_log(p, preallocate_next=True, max_message_bytes=32768) as log:
        body = b"\x5a" * body_size
        while log.end_position < 40 * SEG:
            log.append("t", body, term=1)
            missing = [path for _, path in log.segments() if not os.path.exists(path)]
            assert not missing, f"segment files gone while listed: {missing}"
        last, end = log.last_index, log.end_position
    with open_log(p) as log:
        assert (log.last_index, log.end_position) == (last, end)
        log.verify()
