"""Every failure to use a file of the log is a quorumlog error that names the file: a
directory named like a segment, a raft-index file, LOCK, abort or the checkpoint; a file where
the log's directory belongs; a gap between segment files names the missing one. The log
opens again after `quorumlog repair` moves the foreign object aside."""
import os

import pytest

from quorumlog import errors, format as qf
from quorumlog.repair import repair

from cl_support import SEG, open_log

KW = dict(flush_interval_ms=3_600_000, checkpoint_interval_ms=3_600_000,
          preallocate_next=False)


def closed_log(path, segments=1):
    with open_log(path, **KW) as log:
        while log.end_position < (segments - 1) * SEG + 3000:
            log.append("t", bytes([log.last_index % 250 + 1]) * 1500, term=1)
        return log.last_index


@pytest.mark.parametrize("where", ["commitlog/" + qf.segment_name(SEG),
                                   "index/" + qf.index_file_name(257), "LOCK", "abort"])
def test_directory_where_a_file_belongs(tmp_path, where):
    path = tmp_path / "s"
    last = closed_log(path)
    target = path / where
    if target.exists():
        target.unlink()
    target.mkdir()
    (target / "x").write_bytes(b"not ours")
    with pytest.raises(errors.QuorumlogError) as ei:
        open_log(path, **KW)
    assert isinstance(ei.value, (errors.StorageError, errors.CorruptLogError))
    assert ei.value.path == str(target) and str(target) in str(ei.value)
    report = repair(path)
    assert report.opens and report.last_index == last
    # moved aside, not deleted (the raft-index files go as a whole: rebuilt at open)
    moved = "index" if where.startswith("index/") else where.replace("/", "__")
    assert os.path.isdir(os.path.join(report.backup_dir, moved))


def test_checkpoint_directory(tmp_path):
    path = tmp_path / "s"
    last = closed_log(path)
    (path / "checkpoint").unlink()
    (path / "checkpoint").mkdir()
    with pytest.raises(errors.CorruptLogError) as ei:
        open_log(path, **KW)
    assert ei.value.path == str(path / "checkpoint")
    assert repair(path).last_index == last


@pytest.mark.parametrize("sub", ["commitlog", "index"])
def test_file_where_the_log_directory_belongs(tmp_path, sub):
    path = tmp_path / "s"
    path.mkdir()
    (path / sub).write_bytes(b"")
    with pytest.raises(errors.StorageError) as ei:
        open_log(path, **KW)
    assert ei.value.path == str(path / sub)


def test_gap_between_segments_names_the_missing_file(tmp_path):
    path = tmp_path / "s"
    closed_log(path, segments=4)
    missing = path / "commitlog" / qf.segment_name(2 * SEG)
    missing.unlink()
    with pytest.raises(errors.CorruptLogError) as ei:
        open_log(path, **KW)
    assert ei.value.path == str(missing) and str(missing) in str(ei.value)
