"""The message-key index (RocketMQ's IndexFile): find_by_key answers "where is order 42"
from keyindex/ files built behind dispatch; collisions are confirmed against the record;
a limit on hits; rebuilt from the log after a crash, a damaged or deleted file; files follow
retention; bad input is refused."""
import os
import threading
import time

import pytest

import quorumlog
from quorumlog import errors
from quorumlog.store import keyindex


def test_find_by_key(open_store):
    s = open_store()
    for i in range(300):
        s.put("orders", b"order-%d" % i, keys=("order-%d" % i, "customer-%d" % (i % 7)))
    s.put("refunds", b"r", keys=("order-5",))          # same key, other topic
    (m,) = s.find_by_key("orders", "order-42")
    assert m.body == b"order-42" and m.topic == "orders"
    hits = s.find_by_key("orders", "customer-3", max_hits=64)
    assert len(hits) == 43 and all(h.topic == "orders" for h in hits)
    assert [h.body for h in hits][:2] == [b"order-297", b"order-290"]     # newest first
    assert len(s.find_by_key("orders", "customer-3", max_hits=5)) == 5    # the limit
    assert [m.body for m in s.find_by_key("refunds", "order-5")] == [b"r"]
    assert s.find_by_key("orders", "nope") == []
    ts = hits[0].store_timestamp_ms
    assert s.find_by_key("orders", "customer-3", 64, begin_ms=ts + 1) == []
    assert os.listdir(os.path.join(s.path, "keyindex"))


def test_batches_and_files_rolling_over(open_store):
    s = open_store(key_index_file_entries=64, key_index_slots=16)
    s.put_batch("t", [b"m%d" % i for i in range(500)],
                keys=[("k%d" % i, "all") for i in range(500)])
    assert [m.body for m in s.find_by_key("t", "k123")] == [b"m123"]
    assert len(s.find_by_key("t", "all", max_hits=64)) == 64
    assert len(os.listdir(os.path.join(s.path, "keyindex"))) >= 15


def test_hash_collisions_are_confirmed_against_the_record(open_store, monkeypatch):
    monkeypatch.setattr(keyindex, "key_hash", lambda topic, key: 7)   # every key collides
    s = open_store()
    s.put("t", b"a", keys=("ka",))
    s.put("t", b"b", keys=("kb",))
    assert [m.body for m in s.find_by_key("t", "kb")] == [b"b"]
    assert [m.body for m in s.find_by_key("t", "ka")] == [b"a"]


def test_rebuilt_after_crash_and_damage(open_store, store_dir):
    s = open_store()
    for i in range(50):
        s.put("t", b"%d" % i, keys=("k%d" % i,))
    assert s.find_by_key("t", "k10")
    s.flush()
    for i in range(50, 80):
        s.put("t", b"%d" % i, keys=("k%d" % i,))
    assert s.find_by_key("t", "k79")
    s.crash_for_testing()                       # index header not rewritten, entries past it torn
    s = open_store()
    assert [m.body for m in s.find_by_key("t", "k79")] == [b"79"]
    assert [m.body for m in s.find_by_key("t", "k3")] == [b"3"]
    s.close()
    kdir = os.path.join(store_dir, "keyindex")
    (name,) = os.listdir(kdir)
    with open(os.path.join(kdir, name), "r+b") as fh:     # damage the header
        fh.write(b"\xff" * 8)
    s = open_store()
    assert [m.body for m in s.find_by_key("t", "k33")] == [b"33"]
    s.close()
    import shutil
    shutil.rmtree(kdir)                                    # lost: rebuilt from the log
    s = open_store()
    assert [m.body for m in s.find_by_key("t", "k49")] == [b"49"]


def test_key_index_follows_retention(open_store):
    now = [10**12]
    s = open_store(key_index_file_entries=32, key_index_slots=16,
                   clock_ms=lambda: now[0], file_reserved_hours=1, delete_when="04",
                   disk_usage=lambda p: 0.95, disk_reject_ratio=0.99)
    for i in range(400):
        s.put("t", b"x" * 500, keys=("k%d" % i,))
    s.find_by_key("t", "k0")
    files_before = len(os.listdir(os.path.join(s.path, "keyindex")))
    assert s.run_retention() > 0
    assert s.find_by_key("t", "k0") == []                  # its segment is gone
    assert [m.body[:1] for m in s.find_by_key("t", "k399")] == [b"x"]
    assert len(os.listdir(os.path.join(s.path, "keyindex"))) < files_before


def test_bad_lookups(open_store):
    s = open_store(max_key_hits=10)
    s.put("t", b"x", keys=("k",))
    for exc, call in [(errors.TopicTypeError, lambda: s.find_by_key(1, "k")),
                      (errors.InvalidTypeError, lambda: s.find_by_key("t", b"k")),
                      (errors.InvalidArgumentError, lambda: s.find_by_key("t", "")),
                      (errors.InvalidArgumentError, lambda: s.find_by_key("t", "k", 11)),
                      (errors.InvalidTypeError, lambda: s.find_by_key("t", "k", "1")),
                      (errors.InvalidTypeError, lambda: s.find_by_key("t", "k", begin_ms=1.0))]:
        with pytest.raises(exc):
            call()


def test_read_only_store_finds_keys(open_store, store_dir, dir_tree):
    s = open_store()
    s.put("t", b"x", keys=("k",))
    s.close()
    before = dir_tree(store_dir)
    with quorumlog.open(store_dir, read_only=True, environ={}) as r:
        assert [m.body for m in r.find_by_key("t", "k")] == [b"x"]
    assert dir_tree(store_dir) == before


def test_the_timer_catches_the_index_up_a_bounded_stretch_per_turn(open_store, monkeypatch):
    """A key index far behind (a restart) is caught up by the timer thread a bounded stretch
    of log per turn, each holding the store's lock briefly, not the whole log at once; a
    record larger than the stretch still gets indexed."""
    from quorumlog.store import message_store
    monkeypatch.setattr(message_store, "_KEYS_PER_TURN_BYTES", 16 << 10, raising=False)
    steps = []
    real = keyindex.KeyIndex.catch_up

    def recording(self, upto, *a, **kw):
        before = self.position
        real(self, upto, *a, **kw)
        if threading.current_thread().name == "quorumlog-store-timer" and self.position > before:
            steps.append(self.position - before)
    monkeypatch.setattr(keyindex.KeyIndex, "catch_up", recording)
    s = open_store(background=True, schedule_interval_ms=5, disk_clean_ratio=1.0,
                   disk_force_clean_ratio=1.0, disk_reject_ratio=1.0,   # (no retention)
                   delete_when="%02d" % ((time.localtime().tm_hour + 12) % 24))
    with s._lock:                       # (the timer waits: the index falls behind)
        for i in range(200):
            s.put("t", b"x" * 1000, keys=("k%d" % i,))
        s.put("t", b"b" * (40 << 10), keys=("big",))
    deadline = time.monotonic() + 20
    while s._keys.position < s._dispatcher.position:     # the timer alone catches up
        assert time.monotonic() < deadline, (s._keys.position, s._dispatcher.position, steps)
        time.sleep(0.01)
    # bounded stretches (past the bound: the one with the big record, a segment's padding)
    assert len(steps) >= 10 and sum(n > 16 << 10 for n in steps) <= 2, steps
    assert max(steps) <= (16 << 10) + (41 << 10), steps
    assert [len(m.body) for m in s.find_by_key("t", "big")] == [40 << 10]
    assert [m.body for m in s.find_by_key("t", "k7")] == [b"x" * 1000]
