"""Queue choice (round-robin, sharding key, explicit), tag filtering, timestamp lookup,
consume-queue file rollover."""
import time
import zlib

import pytest

from quorumlog import errors
from quorumlog._consumequeue import fnv1a64
from quorumlog.format import tag_hash_of

from store_support import cq_files


def test_round_robin_put_and_batch(open_store):
    s = open_store()
    s.create_topic("t", queues=3)
    qs = [s.put("t", b"%d" % i).queue_id for i in range(5)]
    assert qs == [0, 1, 2, 0, 1]
    r = s.put_batch("t", [b"b%d" % i for i in range(7)])
    assert list(r.queue_ids) == [2, 0, 1, 2, 0, 1, 2]
    assert list(r.queue_offsets) == [1, 2, 2, 2, 3, 3, 3]
    assert [s.max_offset("t", q) for q in range(3)] == [4, 4, 4]
    # every message readable at its offset with its body
    for i, pr in enumerate(r):
        (m,) = s.get("t", pr.queue_id, pr.queue_offset, 1)
        assert m.body == b"b%d" % i
        assert (pr.index, pr.position) == (m.index, m.position)
    assert r[-1] == list(r)[6] and len(r) == 7


def test_sharding_key_same_queue_and_stable(open_store, store_dir):
    s = open_store()
    s.create_topic("orders", queues=8)
    expect = {k: zlib.crc32(k.encode()) % 8 for k in ("order-1", "order-2", "order-77")}
    for k, q in expect.items():
        for _ in range(3):
            assert s.put("orders", b"x", sharding_key=k).queue_id == q
    r = s.put_batch("orders", [b"a", b"b", b"c"], sharding_key=["order-1", "order-2", "order-1"])
    assert list(r.queue_ids) == [expect["order-1"], expect["order-2"], expect["order-1"]]
    r2 = s.put_batch("orders", [b"a", b"b"], sharding_key="order-77")
    assert list(r2.queue_ids) == [expect["order-77"]] * 2
    assert list(r2.queue_offsets) == [3, 4]
    s.close()
    s = open_store()
    assert s.put("orders", b"y", sharding_key="order-2").queue_id == expect["order-2"]
    with pytest.raises(errors.InvalidArgumentError):
        s.put("orders", b"y", sharding_key=3.5)


def test_explicit_queue_offsets_consecutive(open_store):
    s = open_store()
    for i in range(3):
        r = s.put_batch("t", [b"x"] * 5, queue_id=2)
        assert list(r.queue_offsets) == list(range(5 * i, 5 * i + 5))
    assert s.max_offset("t", 2) == 15 and s.max_offset("t", 0) == 0


def test_tag_filter(open_store):
    s = open_store()
    tags = ["A", "B", None, "C", "A", "B"] * 20
    s.put_batch("t", [b"%d" % i for i in range(len(tags))], queue_id=0, tags=tags)
    got = s.get("t", 0, 0, 1000, tags="A")
    assert [m.body for m in got] == [b"%d" % i for i, t in enumerate(tags) if t == "A"]
    got = s.get("t", 0, 0, 5, tags=["A", "C"])
    assert [m.tags for m in got] == ["A", "C", "A", "A", "C"]
    assert [m.queue_offset for m in got] == [0, 3, 4, 6, 9]
    got = s.get("t", 0, 115, 10, tags={"B"})
    assert [m.queue_offset for m in got] == [115, 119]
    assert s.get("t", 0, 0, 10, tags="nope") == []
    it = list(s.iter_messages("t", 0, 10, 30, tags="B"))
    assert [m.queue_offset for m in it] == [i for i in range(10, 30) if tags[i] == "B"]
    with pytest.raises(errors.InvalidArgumentError):
        s.get("t", 0, 0, tags=5)
    assert fnv1a64(b"A") == tag_hash_of("A")      # same hash as the format's tag_hash


def test_tag_filter_checks_string_after_hash(open_store, monkeypatch):
    """The stored hash matches but the tag string differs: the message must not be returned
    (the filter compares the tag string after the hash, as RocketMQ's consumer does)."""
    s = open_store()
    s.put_batch("t", [b"1", b"2"], queue_id=0, tags=["A", "B"])
    # Pretend "Z" collides with "A": hand the filter the hash of "A" with the name "Z".
    hashes, _ = s._tag_filter("A")
    monkeypatch.setattr(s, "_tag_filter", lambda tags: (hashes, {b"Z"}))
    assert s.get("t", 0, 0, 10, tags="Z") == []


def test_offset_for_timestamp(open_store):
    s = open_store()
    stamps = []
    for i in range(12):
        r = s.put_batch("t", [b"%d" % i] * 3, queue_id=1)
        stamps += [r.store_timestamp_ms] * 3
        time.sleep(0.003)
    def linear(ts):
        return next((i for i, x in enumerate(stamps) if x >= ts), len(stamps))
    probes = sorted(set(stamps)) + [stamps[0] - 1000, stamps[-1] + 1, stamps[5] + 1]
    for ts in probes:
        assert s.offset_for_timestamp("t", 1, ts) == linear(ts), ts
    assert s.offset_for_timestamp("t", 0, stamps[0]) == 0        # empty queue
    with pytest.raises(errors.InvalidArgumentError):
        s.offset_for_timestamp("t", 1, "now")


def test_consume_queue_file_rollover(open_store, store_dir):
    s = open_store(consume_queue_file_entries=16)
    r = s.put_batch("t", [b"m%d" % i for i in range(50)], queue_id=0)
    assert cq_files(store_dir, "t", 0) == ["%020d" % x for x in (0, 16, 32, 48)]
    size = len(open(f"{store_dir}/consumequeue/t/0/{'0' * 20}", "rb").read())
    assert size == 16 * 20                                    # preallocated, 20-byte entries
    got = s.get("t", 0, 10, 30)
    assert [m.body for m in got] == [b"m%d" % i for i in range(10, 40)]
    assert [m.position for m in got] == list(r.positions[10:40])
