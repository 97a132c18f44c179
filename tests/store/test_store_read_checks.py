"""The read path checks what it returns: a record whose bytes rotted raises CorruptLogError
naming the segment file and offset (CRC32C on every get, as Kafka consumers check); a wrong
consume-queue entry (derived data) has the topic's queues rebuilt from the log and the read
returns the right messages."""
import os
import struct

import pytest

from quorumlog import errors
from quorumlog.format import HEADER_OFFSETS, segment_name

SEG = 1 << 16


def cq_entry_path(store_dir, topic, q, first=0):
    return os.path.join(store_dir, "consumequeue", topic, str(q), "%020d" % first)


def write_entry(store_dir, topic, q, offset, position, size, tag_hash=0):
    with open(cq_entry_path(store_dir, topic, q), "r+b") as fh:
        fh.seek(offset * 20)
        fh.write(struct.pack("<qiq", position, size, tag_hash))


def flip_log_byte(store_dir, position):
    seg = position - position % SEG
    with open(os.path.join(store_dir, "commitlog", segment_name(seg)), "r+b") as fh:
        fh.seek(position - seg)
        b = fh.read(1)[0]
        fh.seek(position - seg)
        fh.write(bytes([b ^ 0x04]))


@pytest.fixture
def filled(open_store):
    s = open_store()
    s.create_topic("t", queues=2)
    rs = [s.put("t", b"body-%d" % i * 20, queue_id=i % 2, tags="tg") for i in range(20)]
    s.flush()
    return s, rs


@pytest.mark.parametrize("where", ["body", "queue_offset", "queue_id", "topic"])
def test_rotted_record_raises_naming_file_and_offset(filled, store_dir, where):
    s, rs = filled
    r = rs[6]
    at = {"body": r.position + r_size(s, r) - 3,
          "queue_offset": r.position + HEADER_OFFSETS["queue_offset"],
          "queue_id": r.position + HEADER_OFFSETS["queue_id"],
          "topic": r.position + 96}[where]
    flip_log_byte(store_dir, at)
    with pytest.raises(errors.CorruptLogError) as ei:
        s.get("t", r.queue_id, r.queue_offset, 1)
    assert not isinstance(ei.value, errors.CorruptQueueError)
    assert ei.value.path.endswith(segment_name(0)) and ei.value.offset == r.position
    assert segment_name(0) in str(ei.value)
    # the records around it are still served
    assert s.get("t", r.queue_id, r.queue_offset + 1, 1)[0].body == b"body-8" * 20


def test_offset_for_timestamp_checks_the_records_it_probes(open_store, store_dir):
    s = open_store()
    r = s.put("one", b"x" * 50, queue_id=0)
    s.flush()
    flip_log_byte(store_dir, r.position + HEADER_OFFSETS["store_timestamp_ms"] + 7)
    with pytest.raises(errors.CorruptLogError) as ei:
        s.offset_for_timestamp("one", 0, r.store_timestamp_ms)
    assert ei.value.offset == r.position


def r_size(s, r):
    return s.commitlog.size_of(r.index)


@pytest.mark.parametrize("position", [-5, 1 << 40, 12345, "other"])
def test_wrong_entry_is_rebuilt_from_the_log(filled, store_dir, position):
    s, rs = filled
    r = rs[4]                                  # queue 0, offset 2
    if position == "other":                    # a valid record of the other queue
        other = rs[5]
        position, size = other.position, r_size(s, other)
    else:
        size = r_size(s, r)
    write_entry(store_dir, "t", 0, r.queue_offset, position, size)
    got = s.get("t", 0, 0, 32)
    assert [m.body for m in got] == [b"body-%d" % i * 20 for i in range(0, 20, 2)]
    assert [m.queue_offset for m in got] == list(range(10))
    assert s.stats()["queue_rebuilds"] == 1
    assert s.max_offset("t", 0) == 10 and s.max_offset("t", 1) == 10
    assert s.put("t", b"next", queue_id=0).queue_offset == 10


def test_wrong_entry_and_rotted_log_is_a_log_error(filled, store_dir):
    """The rebuild verifies the log first: damage there is reported, the queues stay."""
    s, rs = filled
    write_entry(store_dir, "t", 0, 1, -5, 200)
    flip_log_byte(store_dir, rs[9].position + 100)
    with pytest.raises(errors.CorruptLogError) as ei:
        s.get("t", 0, 0, 32)
    assert not isinstance(ei.value, errors.CorruptQueueError)
    assert ei.value.offset == rs[9].position
