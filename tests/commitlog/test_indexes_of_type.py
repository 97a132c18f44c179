"""CommitLog.indexes_of_type: the raft indexes of one record type, read from the raft index
alone (a replica's start finds its CONFIG records this way instead of scanning every record:
node/driver.py config_history). It must agree with a scan of the records across segment and
index-file boundaries, after a truncation and after retention."""
import pytest

from quorumlog.commitlog import CONFIG, MESSAGE, NOOP
from quorumlog.errors import InvalidArgumentError

from cl_support import open_log


def _scanned(log, rtype) -> list:
    """The reference: every record's header, scanned."""
    out, pos = [], log.min_position
    while pos < log.end_position:
        info, nxt = log.scan(pos, log.end_position, 4096)
        out += info["index"][info["type"] == rtype].tolist()
        pos = nxt
    return out


def _fill(log, rounds: int) -> None:
    """Messages with a CONFIG or NOOP record every few, crossing 64 KiB segments and
    256-entry index files."""
    for r in range(rounds):
        log.append_batch("t", [b"m" * 300] * 7, queue_ids=0, term=1)
        if r % 3:
            log.append_control(CONFIG, b"cfg%d" % r, term=1)
        else:
            log.append_control(NOOP, term=1)


def test_agrees_with_a_scan_of_the_records(tmp_path):
    log = open_log(str(tmp_path / "log"))
    try:
        _fill(log, 120)
        assert log.last_index > 3 * 256            # several index files
        for rtype in (CONFIG, NOOP, MESSAGE):
            assert log.indexes_of_type(rtype).tolist() == _scanned(log, rtype)
        assert len(log.indexes_of_type(CONFIG)) == 80
        # a range (retention asks only for the segments it deletes), clipped to the log
        every = _scanned(log, CONFIG)
        for lo, hi in ((1, 300), (257, 513), (400, 400), (-5, 10 ** 9), (600, 500)):
            assert log.indexes_of_type(CONFIG, lo, hi).tolist() == \
                [i for i in every if lo <= i <= hi], (lo, hi)
    finally:
        log.close()


def test_after_truncation_and_retention_and_a_reopen(tmp_path):
    path = str(tmp_path / "log")
    log = open_log(path)
    try:
        _fill(log, 120)
        cut = int(log.indexes_of_type(CONFIG)[50]) - 1
        log.truncate_after(cut)
        assert log.indexes_of_type(CONFIG).tolist() == _scanned(log, CONFIG)
        assert int(log.indexes_of_type(CONFIG)[-1]) < cut + 1
        log.commit(log.last_index)
        log.flush()
        mid = log.position_of(log.last_index // 2)
        assert log.delete_segments_before(mid) > 0
        found = log.indexes_of_type(CONFIG).tolist()
        assert found and found[0] >= log.first_index and found == _scanned(log, CONFIG)
    finally:
        log.close()
    log = open_log(path)
    try:
        assert log.indexes_of_type(CONFIG).tolist() == found
    finally:
        log.close()


def test_an_empty_log_and_a_bad_type(tmp_path):
    log = open_log(str(tmp_path / "log"))
    try:
        assert log.indexes_of_type(CONFIG).tolist() == []
        with pytest.raises(InvalidArgumentError, match="record type 256"):
            log.indexes_of_type(256)
    finally:
        log.close()
