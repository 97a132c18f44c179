"""Damage inside records the checkpoint calls durable (before its flushed position) is never
cut at open: CorruptLogError naming the segment file and offset, and nothing changes; the
records after a cleanly closed store's last checkpoint included."""
import pytest

from quorumlog import errors, format as qf

from cl_support import SEG, flip_bits, open_log, store_files

LOG_KW = dict(flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
              preallocate_next=False)



def closed_log(path, n=12):
    with open_log(path, **LOG_KW) as log:
        recs = [log.append("t", bytes([k + 1]) * 700, term=1)[:2] for k in range(n)]
        sizes = [log.size_of(i) for i, _ in recs]
    return recs, sizes


@pytest.mark.parametrize("where", [96, 300, 700])
def test_damage_in_the_last_record_of_a_clean_store(tmp_path, where):
    path = tmp_path / "s"
    recs, sizes = closed_log(path)
    i, pos = recs[-1]
    flip_bits(path, pos + where)
    before = store_files(path)
    with pytest.raises(errors.CorruptLogError) as ei:
        open_log(path, **LOG_KW)
    assert ei.value.path.endswith(qf.segment_name(0)) and ei.value.offset == pos
    assert "durable" in str(ei.value) and "quorumlog repair" in str(ei.value)
    assert store_files(path) == before


def test_damage_before_the_last_record_is_not_cut_either(tmp_path):
    """The checkpoint's anchor (the last record) verifies: earlier records are trusted at
    open and checked when read; nothing is cut."""
    path = tmp_path / "s"
    recs, sizes = closed_log(path)
    flip_bits(path, recs[-2][1] + 300)
    with open_log(path, **LOG_KW) as log:
        assert log.last_index == recs[-1][0]
        with pytest.raises(errors.CorruptLogError) as ei:
            log.record(recs[-2][0])
        assert ei.value.offset == recs[-2][1]
        assert bytes(log.record(recs[-1][0]).body) == bytes([12]) * 700


def test_damage_in_durable_records_after_a_crash(tmp_path):
    """Flushed and checkpointed, then killed: the same."""
    path = tmp_path / "s"
    log = open_log(path, **LOG_KW)
    recs = [log.append("t", bytes([k + 1]) * 700, term=1)[:2] for k in range(8)]
    log.flush()
    log.checkpoint()
    log.crash_for_testing()
    flip_bits(path, recs[-1][1] + 96)
    with pytest.raises(errors.CorruptLogError) as ei:
        open_log(path, **LOG_KW)
    assert ei.value.offset == recs[-1][1]


def test_zeroed_durable_tail_is_not_a_torn_tail(tmp_path):
    """Durable bytes that read back as zeros (lost by the device) are not a torn tail."""
    path = tmp_path / "s"
    recs, sizes = closed_log(path)
    i, pos = recs[-2]
    f = path / "commitlog" / qf.segment_name(0)
    data = bytearray(f.read_bytes())
    data[pos:pos + sizes[-2] + sizes[-1]] = bytes(sizes[-2] + sizes[-1])
    f.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptLogError) as ei:
        open_log(path, **LOG_KW)
    assert ei.value.offset == pos
