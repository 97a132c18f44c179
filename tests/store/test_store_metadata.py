"""Derived metadata is checked against the log at open, never trusted into loss: a consume-queue
file that is missing, short, zeroed or damaged at its end, a topics.json that is damaged or
valid but wrong (a topic missing, fewer queues, "queues": 0), a delay_offsets.json that is
wrong by a few. After reopen every acknowledged message is readable at its offset, the next
put continues the queue's offsets (never reuses one), and a later rebuild keeps everything."""
import json
import os
import shutil
import struct

import pytest

from quorumlog.store.files import write_checked_json

from store_support import cq_files


def fill(s):
    s.create_topic("a", queues=3)
    got = {}
    for i in range(45):
        r = s.put("a", b"a-%d" % i * 10, queue_id=i % 3)
        got.setdefault(r.queue_id, []).append(b"a-%d" % i * 10)
    s.put_batch("b", [b"b-%d" % i for i in range(20)], queue_id=1)
    got_b = [b"b-%d" % i for i in range(20)]
    return got, got_b


def check(s, got, got_b):
    for q, bodies in got.items():
        assert s.max_offset("a", q) == len(bodies), (q, s.max_offset("a", q))
        assert [m.body for m in s.iter_messages("a", q)] == bodies
    assert [m.body for m in s.iter_messages("b", 1)] == got_b
    # the next put continues, and a rebuild of everything later keeps every message
    r = s.put("a", b"next", queue_id=0)
    assert r.queue_offset == len(got[0])
    assert s.put("b", b"next-b", queue_id=1).queue_offset == len(got_b)


def queue_file(store_dir, topic, q, first=0):
    return os.path.join(store_dir, "consumequeue", topic, str(q), "%020d" % first)


def reopen_checked(open_store, store_dir, s, got, got_b):
    s.close()
    s = open_store()
    check(s, got, got_b)
    got[0].append(b"next")
    got_b.append(b"next-b")
    s.close()
    shutil.rmtree(os.path.join(store_dir, "consumequeue"))   # a rebuild from the log alone
    os.unlink(os.path.join(store_dir, "queue_offsets.json"))
    s = open_store()
    for q, bodies in got.items():
        assert [m.body for m in s.iter_messages("a", q)] == bodies
    assert [m.body for m in s.iter_messages("b", 1)] == got_b
    assert s.stats()["dispatch_conflicts"] == 0
    return s


@pytest.mark.parametrize("damage", ["deleted", "short", "truncated_to_zero", "zeroed",
                                    "last_entry_position", "dir_deleted"])
def test_consume_queue_file_damage(open_store, store_dir, damage):
    s = open_store(consume_queue_file_entries=64)
    got, got_b = fill(s)
    s.close()
    f = queue_file(store_dir, "a", 1)
    if damage == "deleted":
        os.unlink(f)
    elif damage == "short":
        os.truncate(f, 20 * 7 + 3)
    elif damage == "truncated_to_zero":
        os.truncate(f, 0)
    elif damage == "zeroed":
        with open(f, "r+b") as fh:
            fh.write(bytes(20 * 15))
    elif damage == "last_entry_position":
        with open(f, "r+b") as fh:
            fh.seek(14 * 20)
            pos = struct.unpack("<q", fh.read(8))[0]
            fh.seek(14 * 20)
            fh.write(struct.pack("<q", pos + 1))
    else:
        shutil.rmtree(os.path.dirname(f))
    s = open_store(consume_queue_file_entries=64)
    assert s.stats()["queue_rebuilds"] >= 1
    reopen_checked(lambda: open_store(consume_queue_file_entries=64), store_dir, s, got, got_b)


def read_json(path):
    """A metadata file's object, its checksum (if any) left out."""
    with open(path) as fh:
        obj = json.load(fh)
    obj.pop("crc32c", None)
    return obj


def rewrite_topics(store_dir, edit, checksum):
    path = os.path.join(store_dir, "topics.json")
    meta = read_json(path)
    edit(meta["topics"])
    if checksum:
        write_checked_json(path, meta)
    else:
        with open(path, "w") as fh:
            json.dump(meta, fh)


@pytest.mark.parametrize("checksum", [False, True], ids=["edited", "edited_with_checksum"])
@pytest.mark.parametrize("edit", ["topic_missing", "fewer_queues", "zero_queues", "all_gone"])
def test_topics_json_valid_but_wrong(open_store, store_dir, edit, checksum):
    s = open_store()
    got, got_b = fill(s)
    s.close()
    if edit == "topic_missing":
        rewrite_topics(store_dir, lambda t: t.pop("a"), checksum)
    elif edit == "fewer_queues":
        rewrite_topics(store_dir, lambda t: t["a"].update(queues=1), checksum)
    elif edit == "zero_queues":
        rewrite_topics(store_dir, lambda t: t["a"].update(queues=0), checksum)
    else:
        rewrite_topics(store_dir, lambda t: t.clear(), checksum)
    s = open_store()
    assert s.topics()["a"] == 3 and s.topics()["b"] >= 2
    reopen_checked(open_store, store_dir, s, got, got_b)


def test_topics_json_flipped_byte(open_store, store_dir):
    s = open_store()
    got, got_b = fill(s)
    s.close()
    path = os.path.join(store_dir, "topics.json")
    data = bytearray(open(path, "rb").read())
    i = data.index(b'"queues": 3') + len(b'"queues": ')
    data[i] = ord("2")
    open(path, "wb").write(bytes(data))
    s = open_store()
    assert s.topics()["a"] == 3
    reopen_checked(open_store, store_dir, s, got, got_b)


def test_queue_summary_lost_too(open_store, store_dir):
    """No topics.json, no queue_offsets.json: the queue directories and the log say it all."""
    s = open_store()
    got, got_b = fill(s)
    s.close()
    os.unlink(os.path.join(store_dir, "topics.json"))
    os.unlink(os.path.join(store_dir, "queue_offsets.json"))
    s = open_store()
    assert s.topics()["a"] == 3
    reopen_checked(open_store, store_dir, s, got, got_b)


def delayed_store(open_store):
    """10 level-1 messages delivered; then 3 level-1 and 1 level-2 message pending ->
    (store, store timestamp of the pending ones)."""
    s = open_store(delay_levels="1s 5s")
    ts = s.put_batch("t", [b"d%d" % i for i in range(10)], delay_level=1,
                     queue_id=0).store_timestamp_ms
    assert s.deliver_due(ts + 1000) == 10
    ts2 = s.put_batch("t", [b"e%d" % i for i in range(3)], delay_level=1,
                      queue_id=0).store_timestamp_ms
    s.put("t", b"later", delay_level=2, queue_id=0)
    return s, ts2


@pytest.mark.parametrize("checksum,shift", [(False, -3), (False, 3), (False, 100),
                                            (True, 100)])
def test_delay_offsets_wrong_by_a_few(open_store, store_dir, shift, checksum):
    """Edited by a few (no valid checksum): recovered from the log. With a valid checksum
    the file is trusted, except an offset past the level's queue."""
    s, ts = delayed_store(open_store)
    s.close()
    path = os.path.join(store_dir, "delay_offsets.json")
    data = read_json(path)
    data["offsets"]["1"] += shift
    if checksum:
        write_checked_json(path, data)
    else:
        with open(path, "w") as fh:
            json.dump(data, fh)
    s = open_store(delay_levels="1s 5s")
    assert s.deliver_due(ts + 999) == 0                   # nothing delivered twice
    assert s.deliver_due(ts + 1000) == 3                  # nothing skipped
    assert s.deliver_due(ts + 10_000) == 1
    assert [m.body for m in s.iter_messages("t", 0)] == (
        [b"d%d" % i for i in range(10)] + [b"e%d" % i for i in range(3)] + [b"later"])
