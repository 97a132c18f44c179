"""node/driver.py config_history: the configurations a replica's start hands to RaftCore,
from its log's CONFIG records. They are found through the raft index, not by scanning every
record: the scan read the whole log at every restart (9.5 GB, 8-40 s from disk in the
session-22 measurement; docs/benchmarks.md "restart time"), so a record it had no reason to
read -- a damaged MESSAGE body below the checkpoint, which recovery does not re-verify --
failed the start (on main: CorruptLogError)."""
import os

from quorumlog.commitlog import CONFIG, CommitLog
from quorumlog.node.driver import config_history
from quorumlog.raft.log import encode_config

SEG = 1 << 20


def _build(path) -> list:
    """Messages with three CONFIG records between them -> the expected history."""
    log = CommitLog(path, segment_size_bytes=SEG, index_file_entries=256)
    want = [(0, ("a", "b", "c"))]
    try:
        for k, cfg in enumerate([(("a", "b", "c", "d"), ("d",)), (("a", "b", "c", "d"), ()),
                                 (("b", "c", "d"), ())]):
            log.append_batch("t", [b"x" * 900] * 700, queue_ids=0, term=1)
            idx, _ = log.append_control(CONFIG, encode_config(*cfg), term=1)
            want.append((idx, *cfg))
        log.append_batch("t", [b"x" * 900] * 700, queue_ids=0, term=1)
        log.commit(log.last_index)
    finally:
        log.close()
    return want


def test_history_from_the_config_records(tmp_path):
    path = str(tmp_path / "log")
    want = _build(path)
    log = CommitLog(path)
    try:
        assert log.end_position > 2 * SEG                 # several segments
        assert config_history(log, ["c", "b", "a"]) == want
    finally:
        log.close()


def test_a_damaged_message_body_the_start_need_not_read_does_not_fail_it(tmp_path):
    path = str(tmp_path / "log")
    want = _build(path)
    log = CommitLog(path)
    pos = log.position_of(5)
    log.close()
    seg = os.path.join(path, "commitlog", f"{0:020d}")
    with open(seg, "r+b") as fh:          # one body byte of record 5 (first segment)
        fh.seek(pos + 600)
        b = fh.read(1)
        fh.seek(pos + 600)
        fh.write(bytes([b[0] ^ 0xFF]))
    log = CommitLog(path)                  # a clean close: recovery starts past it
    try:
        assert config_history(log, ["a", "b", "c"]) == want
    finally:
        log.close()
