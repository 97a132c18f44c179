"""The seam's raft log answers a leader's second read of the same batch (the next follower's
APPEND in one propose) from its last read, without a second CRC pass; a truncation, an install
or a replicated append forgets it, so entries written again at the same indexes are read
anew (node/storebridge.py _MetaRaftLog.read). A read kept across a truncation would ship the
old leader's bytes (a view of the old length over the new records) under the new entries'
indexes."""
import quorumlog
from quorumlog.node.storebridge import MetaSeam

SMALL = dict(segment_size_bytes=1 << 16, index_file_entries=1024,
             consume_queue_file_entries=1024, key_index=False)


def _open(path):
    return quorumlog.open(str(path), environ={}, replicated=True, **SMALL)


def _append(seam, term, bodies):
    rlog = seam.raft_log()
    return rlog.append_as_leader(term, seam.prepare_put("t", bodies, queue_id=0))


def test_a_second_read_of_the_same_range_is_the_first_reads_answer(tmp_path):
    s = _open(tmp_path)
    try:
        seam = MetaSeam(s)
        rlog = seam.raft_log()
        rlog.append_control(1, 1, b"")
        last = _append(seam, 1, [b"a" * 100, b"b" * 100])
        first = rlog.read(2, last, 1 << 20)
        assert rlog.read(2, last, 1 << 20) is first         # (no second log read)
        other = rlog.read(2, last, 150)                      # another range: read anew
        assert other is not first and other[1] == 1
        assert bytes(rlog.read(2, last, 1 << 20)[0]) == bytes(first[0])
    finally:
        s.close()


def test_a_truncation_forgets_the_last_read(tmp_path):
    s = _open(tmp_path)
    try:
        seam = MetaSeam(s)
        rlog = seam.raft_log()
        rlog.append_control(1, 1, b"")
        last = _append(seam, 1, [b"old-" * 25])
        before = bytes(rlog.read(2, last, 1 << 20)[0])
        rlog.truncate_after(1)                               # a newer leader's log won
        assert _append(seam, 2, [b"new-" * 40]) == last      # the same index, other bytes
        view, count, nbytes = rlog.read(2, last, 1 << 20)
        assert count == 1 and nbytes == len(view) == s.commitlog.size_of(last)
        assert len(view) > len(before)
        assert b"new-" in bytes(view) and b"old-" not in bytes(view)
        assert rlog.term_at(last) == 2
    finally:
        s.close()
