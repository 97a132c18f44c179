"""quorumlog repair: a log that refuses to open (damage in durable records, damage with intact
records after it, a missing segment, a damaged checkpoint) opens again after an explicit
repair that cuts at the last intact record before the damage, keeps what it removes in
repair-<time>/ with report.json, and reports the raft indexes dropped; --dry-run changes
nothing."""
import json
import os

import pytest
from click.testing import CliRunner

from quorumlog import errors, format as qf
from quorumlog.cli.repair import repair as repair_cmd
from quorumlog.repair import diagnose, repair

from cl_support import SEG, flip_bits, open_log, store_files

LOG_KW = dict(flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
              preallocate_next=False)


def body(k):
    return bytes([k % 250 + 1]) * 1500


def closed_log(path, segments=3):
    with open_log(path, **LOG_KW) as log:
        while log.end_position < (segments - 1) * SEG + 5000:
            log.append("t", body(log.last_index + 1), term=1)
        return [(i, log.position_of(i), log.size_of(i))
                for i in range(1, log.last_index + 1)]



def check_opens(path, last):
    with open_log(path, **LOG_KW) as log:
        assert log.last_index == last
        log.verify()
        for i in range(1, last + 1):
            assert bytes(log.record(i).body) == body(i)
        log.append("t", body(last + 1), term=2)          # and appends go on


def test_damaged_last_record_of_a_clean_store(tmp_path):
    path = tmp_path / "s"
    recs = closed_log(path)
    n, pos, size = recs[-1]
    flip_bits(path, pos + 500)
    before = store_files(path)
    plan = diagnose(path)
    assert not plan.opens and plan.problems and plan.actions and plan.backup_dir is None
    assert store_files(path) == before                    # a dry run changes nothing
    report = repair(path)
    assert report.opens and report.last_index == n - 1
    assert report.cut_position == pos and report.last_kept_index == n - 1
    assert report.dropped_indexes == (n, n)
    saved = os.path.join(report.backup_dir, f"{qf.segment_name(pos - pos % SEG)}@{pos % SEG}")
    with open(saved, "rb") as fh:
        assert fh.read(size)[500:] == before[f"commitlog/{qf.segment_name(pos - pos % SEG)}"][
            pos % SEG + 500:pos % SEG + size]
    assert json.load(open(os.path.join(report.backup_dir, "report.json")))["cut_position"] == pos
    check_opens(path, n - 1)


def test_mid_log_damage_with_intact_records_after(tmp_path):
    """Damage before the flushed position with intact records after it (in later
    segments), found because the checkpoint's anchor could not be checked (its raft-index
    entry is damaged too): the cut drops them all, moved aside, and says which went."""
    path = tmp_path / "s"
    recs = closed_log(path, segments=3)
    i, pos, size = next(r for r in recs if r[1] > SEG // 2)
    flip_bits(path, pos + 200)
    idx = path / "index" / qf.index_file_name(1)
    data = bytearray(idx.read_bytes())
    last = recs[-1][0]
    data[(last - 1) * 24:(last - 1) * 24 + 8] = bytes(8)     # the anchor's position
    idx.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptLogError):
        open_log(path, **LOG_KW)
    report = repair(path)
    assert report.opens and report.last_index == i - 1
    assert report.dropped_indexes == (i, recs[-1][0])
    moved = sorted(os.listdir(report.backup_dir))
    assert "commitlog__" + qf.segment_name(2 * SEG) in moved
    check_opens(path, i - 1)


def test_missing_middle_segment(tmp_path):
    path = tmp_path / "s"
    recs = closed_log(path, segments=4)
    os.unlink(path / "commitlog" / qf.segment_name(2 * SEG))
    with pytest.raises(errors.CorruptLogError):
        open_log(path, **LOG_KW)
    report = repair(path)
    last_before = max(r[0] for r in recs if r[1] < 2 * SEG)
    assert report.opens and report.last_index == last_before
    check_opens(path, last_before)


def test_missing_first_segment_moves_the_min_position(tmp_path):
    path = tmp_path / "s"
    recs = closed_log(path, segments=3)
    os.unlink(path / "commitlog" / qf.segment_name(0))
    with pytest.raises(errors.CorruptLogError):
        open_log(path, **LOG_KW)
    report = repair(path)
    assert report.opens and report.last_index == recs[-1][0]
    with open_log(path, **LOG_KW) as log:
        assert log.min_position == SEG
        first = min(r[0] for r in recs if r[1] >= SEG)
        assert log.first_index == first
        assert bytes(log.record(recs[-1][0]).body) == body(recs[-1][0])


def test_damaged_checkpoint_is_moved_aside(tmp_path):
    path = tmp_path / "s"
    recs = closed_log(path, segments=2)
    cp = path / "checkpoint"
    data = bytearray(cp.read_bytes())
    data[10] ^= 1
    cp.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptLogError):
        open_log(path, **LOG_KW)
    report = repair(path)
    assert report.opens and report.last_index == recs[-1][0]
    assert "checkpoint" in os.listdir(report.backup_dir)
    check_opens(path, recs[-1][0])


def test_healthy_and_locked_stores(tmp_path):
    path = tmp_path / "s"
    recs = closed_log(path, segments=1)
    report = repair(path)
    assert report.opens and not report.actions and report.backup_dir is None
    log = open_log(path, **LOG_KW)
    try:
        with pytest.raises(errors.LockedError):
            repair(path)
    finally:
        log.close()


def test_command(tmp_path):
    path = tmp_path / "s"
    recs = closed_log(path)
    n, pos, size = recs[-1]
    flip_bits(path, pos + 100)
    runner = CliRunner()
    r = runner.invoke(repair_cmd, [str(path), "--dry-run"])
    assert r.exit_code == 3, r.output
    assert "would fix" in r.output and "durable" in r.output
    r = runner.invoke(repair_cmd, [str(path)])
    assert r.exit_code == 0, r.output
    assert f"raft indexes {n}..{n} are no longer in this log" in r.output
    assert f"ok: the log opens (last index {n - 1})" in r.output
    r = runner.invoke(repair_cmd, [str(path)])
    assert r.exit_code == 0 and "nothing to repair" in r.output
