"""The commit seam: dispatch (and so every read) stops at the log's commit limit. Single
replica: the store commits itself (async: at once; sync: after the covering flush). With
replicated=True a Raft driver commits and then calls dispatch()."""
import quorumlog


def test_sync_mode_put_returns_after_flush(open_store):
    s = open_store(flush="sync")
    r = s.put_batch("t", [b"a"] * 10)
    lg = s.commitlog
    assert lg.flushed_position >= lg.end_position
    assert lg.committed_index == r.first_index + 9
    assert s.dispatched_position == lg.committed_position == lg.end_position


def test_async_mode_commits_at_once(open_store):
    s = open_store(flush="async", flush_interval_ms=3_600_000)
    r = s.put("t", b"a", queue_id=0)
    assert s.commitlog.committed_index == r.index
    assert [m.body for m in s.get("t", 0, 0)] == [b"a"]


def test_replicated_mode_reads_only_committed(open_store, store_dir):
    s = open_store(replicated=True)
    r = s.put_batch("t", [b"%d" % i for i in range(6)], queue_id=1)
    assert list(r.queue_offsets) == list(range(6))
    assert s.max_offset("t", 1) == 0                      # appended, not committed
    assert s.get("t", 1, 0) == []
    s.commitlog.commit(r.first_index + 2)                 # the Raft layer commits 3
    assert s.dispatch() == s.commit_limit
    assert [m.body for m in s.get("t", 1, 0, 10)] == [b"0", b"1", b"2"]
    s.close()
    # Reopened in replicated mode: uncommitted records keep their offsets (the counters
    # account for them), and are not readable until committed.
    s = open_store(replicated=True)
    assert s.max_offset("t", 1) == 3
    assert s.put("t", b"6", queue_id=1).queue_offset == 6
    s.commitlog.commit(s.commitlog.last_index)
    s.dispatch()
    assert [m.body for m in s.get("t", 1, 0, 10)] == [b"%d" % i for i in range(7)]


def test_sync_mode_group_commit_across_producers(open_store):
    """Producers wait for their flush outside the store lock, so one flush covers several."""
    import threading
    s = open_store(flush="sync", segment_size_bytes=1 << 22)
    s.create_topic("t", queues=4)

    def produce():
        for _ in range(50):
            s.put("t", b"x" * 100)

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    st = s.commitlog.stats()
    assert st["records"] == 400
    assert st["flushes"] < 0.9 * 400
    assert sum(s.max_offset("t", q) for q in range(4)) == 400
    assert s.commitlog.committed_position == s.commitlog.end_position == s.dispatched_position


def test_term_for_the_raft_driver(open_store):
    import pytest
    from quorumlog import errors
    s = open_store(replicated=True)
    assert s.term == 1
    s.term = 3
    r = s.put("t", b"x", queue_id=0)
    assert s.commitlog.term_at(r.index) == 3
    with pytest.raises(errors.InvalidArgumentError):
        s.term = 2
