"""Quick checks of the native commit log's own machinery (the thorough suite is the rest of
tests/commitlog): CRC paths agree, views outlive close/truncate/deletion, the next segment
is prepared off the append path, group commit flushes fewer times than it appends, a full
disk is reported as DiskFullError and leaves the log usable, scan() agrees with record().
"""
import os
import threading

import numpy as np
import pytest

from quorumlog import errors
from quorumlog.commitlog import (BLANK, HEADER_SIZE, MESSAGE, RECORD_INFO, CommitLog, crc32c,
                                 crc32c_hardware, crc32c_software, fnv1a64)

SEG = 65536


def open_log(path, **kw):
    kw.setdefault("segment_size_bytes", SEG)
    kw.setdefault("index_file_entries", 64)
    return CommitLog(str(path), **kw)


def test_crc32c_check_value_and_paths_agree():
    assert crc32c(b"123456789") == 0xE3069283
    data = os.urandom(20000)
    # lengths around every interleaving tier of the hardware path (3 x 64 B, 3 x 256 B,
    # 3 x 1 KiB) and its serial tail (8 B, 4 B, 1 B steps)
    for n in (0, 1, 3, 4, 5, 7, 8, 9, 12, 100, 191, 192, 193, 197, 383, 384, 385, 767, 768,
              769, 959, 960, 961, 1121, 3071, 3072, 3073, 3840, 3841, 4193, 9000, 20000):
        for off in (0, 1, 5):
            assert crc32c(data[off:off + n]) == crc32c_software(data[off:off + n])
    assert crc32c(data[100:], crc32c(data[:100])) == crc32c(data)
    assert isinstance(crc32c_hardware(), bool)


def test_fnv1a64_reference_values():
    assert fnv1a64(b"") == 0
    # FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c (published test vector), stored signed
    assert fnv1a64(b"a") == 0xaf63dc4c8601ec8c - (1 << 64)


def test_views_survive_close_truncate_and_segment_deletion(tmp_path):
    log = open_log(tmp_path / "s")
    for i in range(100):
        log.append("t", bytes([i]) * 2000, term=1)
    first = log.record_at(0)
    view, n = log.read(1, 5)
    tail = log.record_at(log.position_of(100))
    log.delete_segments_before(log.position_of(100))
    assert log.min_position > 0
    log.truncate_after(log.first_index)
    log.close()
    # the mappings are gone from the log; the views keep theirs alive
    assert bytes(first[HEADER_SIZE:HEADER_SIZE + 2]) == b"t\x00"
    assert len(view) == n * (HEADER_SIZE + 1 + 2000)
    assert bytes(tail[-2000:]) == bytes([99]) * 2000 or bytes(tail[-2000:]) == bytes(2000)
    with pytest.raises(errors.LogClosedError):
        log.read(1, 2)


def test_next_segment_is_prepared_in_the_background(tmp_path):
    log = open_log(tmp_path / "s", segment_size_bytes=1 << 20)
    for _ in range(40):
        log.append_batch("t", [b"x" * 1000] * 40, queue_ids=0, queue_offsets=0, term=1)
        if log.stats()["segments_prepared_used"]:
            break
        # give the preparer a moment, as a real producer's pauses would
        threading.Event().wait(0.01)
    s = log.stats()
    assert s["segments_prepared_used"] >= 1, s
    log.close()


def test_group_commit_flushes_less_than_appends(tmp_path):
    log = open_log(tmp_path / "s", flush="sync", segment_size_bytes=1 << 24)
    n_threads, per = 4, 200

    def worker(k):
        for _ in range(per):
            _, pos, _ = log.append("t", b"y" * 1024, queue_id=k, term=1)
            assert log.wait_flushed(pos + 1, timeout=30)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = log.stats()
    assert s["records"] == n_threads * per
    assert log.flushed_position == log.end_position
    assert s["flushes"] < s["records"], s
    log.close()


def test_scan_matches_records_and_skips_blank(tmp_path):
    log = open_log(tmp_path / "s")
    first, positions, ts = log.append_batch(
        "orders", [os.urandom(1500) for _ in range(100)], queue_ids=np.arange(100) % 7,
        queue_offsets=1000, term=3, tags="tg", properties={"k": "v"})
    arr, nxt = log.scan(log.min_position, log.end_position)
    assert arr.dtype == RECORD_INFO and len(arr) == 100 and nxt == log.end_position
    assert (arr["index"] == np.arange(first, first + 100)).all()
    assert (arr["position"] == positions).all()
    assert (arr["queue_id"] == np.arange(100) % 7).all()
    assert (arr["queue_offset"] == np.arange(1000, 1100)).all()
    assert (arr["type"] == MESSAGE).all() and (arr["tag_hash"] == fnv1a64(b"tg")).all()
    assert (arr["topic_hash"] == fnv1a64(b"orders")).all()
    r = log.record(first + 50)
    a = arr[50]
    assert bytes(log.record_at(int(a["position"]))[a["body_offset"]:]) == r.body
    # a BLANK sits at every segment tail that was crossed
    seg0_last = positions[positions < SEG].max()
    blank_at = int(seg0_last) + log.size_of(int(first + (positions < SEG).sum() - 1))
    assert bytes(log.record_at(blank_at)[11:12]) == bytes([BLANK])
    log.close()


def test_disk_full_is_reported_and_recoverable(tmp_path):
    """ENOSPC from posix_fallocate: DiskFullError, nothing changed, appends work again once
    space is freed. Runs in a 6 MiB tmpfs inside a private mount namespace (unshare -m);
    skipped with the reason where the machine does not permit that."""
    import shutil
    import subprocess
    import sys
    import textwrap
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) not available to make a small tmpfs")
    code = textwrap.dedent(f"""
        import os, sys
        sys.path[:0] = {sys.path!r}
        from quorumlog import errors
        from quorumlog.commitlog import CommitLog
        d = "/mnt/qlfull"
        log = CommitLog(d + "/s", segment_size_bytes=1 << 20, index_file_entries=1024,
                        preallocate_next=False)
        filler = open(d + "/filler", "wb")
        try:
            while True:
                filler.write(b"\\0" * 65536); filler.flush()
        except OSError:
            pass
        filler.close()
        n = 0
        try:
            while True:
                log.append("t", b"z" * 4000, term=1)
                n += 1
        except errors.DiskFullError:
            pass
        last, end = log.last_index, log.end_position
        assert log.record(last).body == b"z" * 4000
        try:
            log.append_batch("t", [b"q" * 4000] * 400, queue_ids=0, queue_offsets=0, term=1)
            raise SystemExit("batch over a full disk succeeded")
        except errors.DiskFullError:
            pass
        assert (log.last_index, log.end_position) == (last, end)
        os.unlink(d + "/filler")
        log.append_batch("t", [b"q" * 4000] * 400, queue_ids=0, queue_offsets=0, term=1)
        assert log.last_index == last + 400
        log.close()
        print("OK", n)
    """)
    script = ("mount -t tmpfs -o size=6m tmpfs /mnt/qlfull 2>/dev/null || exit 77; "
              f"{sys.executable} -c \"$QL_CODE\"")
    os.makedirs("/mnt/qlfull", exist_ok=True) if os.access("/mnt", os.W_OK) else None
    if not os.path.isdir("/mnt/qlfull"):
        pytest.skip("cannot create /mnt/qlfull as a mount point")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, QL_CODE=code))
    if r.returncode == 77 or "unshare failed" in r.stderr or "Operation not permitted" in r.stderr:
        pytest.skip(f"no private tmpfs here: {r.stderr.strip()[:200]}")
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_wrong_types_raise_errors_from_quorumlog_errors(tmp_path):
    # The wrong-type classes live in quorumlog.errors; each is a TypeError and the specific
    # quorumlog error, and a rejected call writes nothing.
    from quorumlog import commitlog
    assert commitlog.ArgumentTypeError is errors.InvalidTypeError
    assert commitlog.TopicTypeError is errors.TopicTypeError
    assert commitlog.QueueTypeError is errors.QueueTypeError
    with open_log(tmp_path) as log:
        with pytest.raises(errors.TopicTypeError) as ei:
            log.append(b"topic", b"x", term=1)
        assert isinstance(ei.value, TypeError) and isinstance(ei.value, errors.InvalidTopicError)
        with pytest.raises(errors.QueueTypeError) as ei:
            log.append("t", b"x", queue_id="1", term=1)
        assert isinstance(ei.value, TypeError) and isinstance(ei.value, errors.InvalidQueueError)
        with pytest.raises(errors.InvalidTypeError) as ei:
            log.append_batch("t", [b"x", "not bytes"], term=1)
        assert isinstance(ei.value, TypeError) and isinstance(ei.value, errors.InvalidArgumentError)
        assert log.last_index == 0 and log.end_position == 0


def test_flush_syncs_the_log_and_the_checkpoint_syncs_the_index(tmp_path):
    # A flush (group commit) makes only the log's bytes durable; raft-index entries after
    # the checkpoint's flushed_index may be lost in a crash, and recovery rebuilds them from
    # the log. Simulate that loss on a copy of the directory: every flushed record is back.
    import shutil
    import struct
    src = tmp_path / "s"
    log = open_log(src, segment_size_bytes=1 << 20, index_file_entries=1 << 10,
                   checkpoint_interval_ms=10 ** 9)
    for i in range(100):
        log.append("t", b"a%d" % i, term=1)
    log.flush()
    log.checkpoint()
    for i in range(100, 300):
        log.append("t", b"b%d" % i, term=2)
    log.flush()
    assert log.flushed_position == log.end_position
    positions = [log.position_of(i) for i in range(1, 301)]
    cp = (src / "checkpoint").read_bytes()
    cp_index = struct.unpack_from("<Q", cp, 16)[0]
    assert cp_index == 100
    dst = tmp_path / "crashed"
    shutil.copytree(src, dst)
    idx_file = dst / "index" / ("%020d" % 1)
    raw = bytearray(idx_file.read_bytes())
    raw[cp_index * 24:] = bytes(len(raw) - cp_index * 24)   # entries 101.. never reached disk
    idx_file.write_bytes(bytes(raw))
    log.close()
    with open_log(dst, segment_size_bytes=1 << 20, index_file_entries=1 << 10) as back:
        assert back.last_index == 300
        assert [back.position_of(i) for i in range(1, 301)] == positions
        assert back.term_at(300) == 2 and back.term_at(100) == 1
        assert back.record(250).body == b"b249"


def test_big_batch_bodies_streaming_copy_round_trip(tmp_path):
    # Bodies >= 2 KiB are copied with streaming stores and CRC'd from the source: the bytes
    # and CRCs must be exactly those of the ordinary path, at every alignment.
    sizes = [1, 511, 512, 2047, 2048, 2049, 4096, 5003, 70001]
    bodies = [os.urandom(n) for n in sizes] * 3
    with open_log(tmp_path / "s", segment_size_bytes=1 << 20) as log:
        log.append("t", b"x" * 3, term=1)        # odd start offset for the batch
        first, positions, _ = log.append_batch("topic", bodies, term=1)
        assert log.verify() == log.end_position
        for k, body in enumerate(bodies):
            rec = log.record(first + k)
            assert rec.body == body and rec.position == positions[k]
            assert rec.size == HEADER_SIZE + 5 + len(body)


def test_store_timestamps_never_decrease_along_the_log(tmp_path, monkeypatch):
    """A wall clock that steps back must not make store timestamps decrease (the store's
    offset_for_timestamp binary-searches them). A record stamped in the future stands in for
    the clock stepping back by a day; appends after it, and after a reopen, stamp at least it."""
    import time
    from quorumlog.commitlog import CommitLog
    day = 86_400_000
    future = int(time.time() * 1000) + day
    leader = tmp_path / "leader"
    follower = tmp_path / "follower"
    with CommitLog(leader, segment_size_bytes=1 << 16) as a, \
            CommitLog(follower, segment_size_bytes=1 << 16) as b:
        a.append("t", b"x", term=1)
        # Forge the future stamp through the follower path: a leader whose clock is a day
        # ahead wrote this record; the follower, later leader, must not stamp below it.
        from quorumlog import format as ref
        raw = ref.encode_record(ref.TYPE_MESSAGE, index=1, term=1, position=0, topic="t",
                                body=b"x", born_timestamp_ms=future, store_timestamp_ms=future)
        b.append_replicated(raw)
        _, _, ts1 = b.append("t", b"y", term=2)
        assert ts1 >= future
        _, _, ts2 = b.append_batch("t", [b"p", b"q"], term=2)
        assert ts2 >= future
        i, _ = b.append_control(ref.TYPE_NOOP, term=2)
        assert b.record(i).store_timestamp_ms >= future
        assert b.record(4).born_timestamp_ms == b.record(4).store_timestamp_ms
    with CommitLog(follower, segment_size_bytes=1 << 16) as b:
        _, _, ts3 = b.append("t", b"z", term=2)
        assert ts3 >= future
        stamps = [b.record(i).store_timestamp_ms for i in range(1, b.last_index + 1)]
        assert stamps == sorted(stamps)


def test_close_never_unlinks_the_newest_segment_when_the_prepared_mapping_is_it(tmp_path):
    """A preparer race once left a second mapping of the log's newest segment as the
    'prepared next segment'; close discarded it after forgetting the log's own mappings,
    so the guard 'never unlink a segment the log holds' saw none and the newest segment,
    records and all, was unlinked on a clean close (found by CI: a Spark reader's
    NoSuchFileException). The hook recreates that state deterministically."""
    d = tmp_path / "s"
    log = open_log(d, preallocate_next=True)
    for i in range(500):
        log.append("t", b"%06d" % i * 50, term=1)
    end, last = log.end_position, log.last_index
    assert end > 2 * SEG
    log._prepare_duplicate_for_testing()
    log.close()
    newest = d / "commitlog" / ("%020d" % ((end - 1) // SEG * SEG))
    assert newest.exists(), sorted(os.listdir(d / "commitlog"))
    log = open_log(d)
    try:
        assert (log.end_position, log.last_index) == (end, last)
        assert bytes(log.record_at(log.position_of(last))[-300:]) == b"000499" * 50
    finally:
        log.close()
