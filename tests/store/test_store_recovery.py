"""Reopen and repair: consume queues rebuilt from the log, entries beyond what the log confirms
dropped, lost topic metadata recovered, crashes (the log's _crash hook) and lost tails."""
import os
import shutil

import pytest

from store_support import cq_files


def fill(s, n=300):
    s.create_topic("a", queues=3)
    s.put_batch("a", [b"a%d" % i * (1 + i % 50) for i in range(n)], tags=["x", "y", None] * (n // 3))
    for i in range(40):
        s.put("b", b"b%d" % i, keys=("k%d" % i,), properties={"i": str(i)})
    s.put_batch("b", [b"z" * 3000] * 40, queue_id=1)


def snapshot(s):
    out = {}
    for t, n in sorted(s.topics().items()):
        for q in range(n):
            lo, hi = s.min_offset(t, q), s.max_offset(t, q)
            msgs = [(m.queue_offset, m.position, m.body, m.tags, m.keys, m.properties)
                    for m in s.iter_messages(t, q, lo, hi)]
            out[(t, q)] = (lo, hi, msgs)
    return out


def test_rebuild_after_deleting_consumequeue_dir(open_store, store_dir):
    s = open_store()
    fill(s)
    assert len(s.commitlog.segments()) > 2           # several segments
    before = snapshot(s)
    s.close()
    shutil.rmtree(os.path.join(store_dir, "consumequeue"))
    s = open_store()
    assert s.stats()["rebuilt"]
    assert snapshot(s) == before
    r = s.put("a", b"new", queue_id=0)
    assert r.queue_offset == before[("a", 0)][1]     # offsets continue


def test_rebuild_one_queue_and_lost_topic_list(open_store, store_dir):
    s = open_store()
    fill(s)
    before = snapshot(s)
    s.close()
    shutil.rmtree(os.path.join(store_dir, "consumequeue", "b", "1"))
    s = open_store()
    assert snapshot(s) == before
    s.close()
    os.unlink(os.path.join(store_dir, "topics.json"))
    s = open_store()
    # queue counts come back from the records (at least the default 4, and every queue used)
    assert set(s.topics()) == {"a", "b"}
    assert snapshot(s) == {k: v for k, v in before.items()
                           if k[1] < s.topics()[k[0]]} | {
        (t, q): (0, 0, []) for t, n in s.topics().items() for q in range(n)
        if (t, q) not in before}


def test_entries_beyond_log_are_dropped(open_store, store_dir):
    s = open_store()
    s.put_batch("t", [b"x%d" % i for i in range(10)], queue_id=0)
    end = s.commitlog.end_position
    s.close()
    # A stale entry past the end of queue 0 pointing past the end of the log.
    path = os.path.join(store_dir, "consumequeue", "t", "0", "%020d" % 0)
    with open(path, "r+b") as fh:
        fh.seek(10 * 20)
        fh.write((end + 500).to_bytes(8, "little") + (100).to_bytes(4, "little") + bytes(8))
    s = open_store()
    assert s.max_offset("t", 0) == 10
    assert s.put("t", b"next", queue_id=0).queue_offset == 10
    assert [m.body for m in s.get("t", 0, 9, 5)] == [b"x9", b"next"]


def test_reopen_redispatches_past_checkpointed_position(open_store):
    s = open_store(dispatch_checkpoint_interval_ms=3_600_000)
    fill(s)
    before = snapshot(s)
    s.commitlog.set_dispatched_position(s.commitlog.min_position)
    s.commitlog.checkpoint()
    s.crash_for_testing()
    s = open_store()
    assert snapshot(s) == before


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_crash_keeps_everything_flushed(open_store, flush):
    s = open_store(flush=flush)
    fill(s, 120)
    s.flush()
    before = snapshot(s)
    s.crash_for_testing()
    s = open_store(flush=flush)
    assert snapshot(s) == before
    for q in range(3):
        assert s.put("a", b"after", queue_id=q).queue_offset == before[("a", q)][1]


def test_lost_unflushed_tail(open_store, store_dir):
    """Writes after the last flush never reached the disk: the log recovers to the flushed
    end, the consume queues must forget the lost messages and reuse their offsets."""
    s = open_store()
    s.put_batch("t", [b"kept%d" % i for i in range(6)], queue_id=0)
    flushed = s.flush()
    s.put_batch("t", [b"lost%d" % i for i in range(6)], queue_id=0)
    assert s.max_offset("t", 0) == 12
    s.crash_for_testing()
    seg = os.path.join(store_dir, "commitlog", "%020d" % 0)
    with open(seg, "r+b") as fh:           # the unflushed bytes are gone
        fh.seek(flushed)
        fh.write(bytes(4096))
    s = open_store()
    assert s.max_offset("t", 0) == 6
    assert [m.body for m in s.get("t", 0, 0, 100)] == [b"kept%d" % i for i in range(6)]
    assert s.put("t", b"again", queue_id=0).queue_offset == 6
