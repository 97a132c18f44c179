"""Consumer-group offsets stored in the store (RocketMQ's consumerOffset): commit_offset /
committed_offset, durable across a clean reopen and a crash, rebuilt from the log's META
records when consumer_offsets.json is lost, replicated as META records (a follower applies
them at dispatch; a driven store proposes them through its core), limits and bad input."""
import json
import os

import pytest

import quorumlog
from quorumlog import errors


def test_commit_and_read_back(open_store):
    s = open_store()
    s.put_batch("orders", [b"x"] * 8)
    assert s.committed_offset("billing", "orders", 0) is None
    s.commit_offset("billing", "orders", 0, 2)
    s.commit_offsets("billing", {("orders", 1): 1, ("orders", 2): 2})
    s.commit_offset("audit", "orders", 0, 1)
    s.commit_offset("billing", "orders", 0, 1)       # a reset backwards is allowed
    assert s.committed_offset("billing", "orders", 0) == 1
    assert s.consumer_offsets("billing") == {"orders": {0: 1, 1: 1, 2: 2}}
    assert s.consumer_offsets() == {"audit": {"orders": {0: 1}},
                                    "billing": {"orders": {0: 1, 1: 1, 2: 2}}}
    assert s.stats()["consumer_offsets"] == 4


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_offsets_survive_reopen_and_crash(open_store, store_dir, flush):
    s = open_store(flush=flush)
    s.commit_offset("g", "t", 3, 42)
    s.close()
    with open(os.path.join(store_dir, "consumer_offsets.json")) as fh:
        assert json.load(fh)["offsets"] == {"g": {"t": {"3": 42}}}
    s = open_store(flush=flush)
    assert s.committed_offset("g", "t", 3) == 42
    s.commit_offset("g", "t", 3, 43)
    s.flush()
    s.crash_for_testing()                                       # kill -9: no checkpoint, no file save
    s = open_store(flush=flush)
    assert s.committed_offset("g", "t", 3) == 43


def test_offsets_rebuilt_from_the_log_when_the_file_is_lost(open_store, store_dir):
    s = open_store()
    s.put("t", b"x")
    s.commit_offset("g", "t", 0, 1)
    s.put("t", b"y")
    s.commit_offset("g", "t", 1, 7)
    s.close()
    os.unlink(os.path.join(store_dir, "consumer_offsets.json"))
    s = open_store()
    assert s.consumer_offsets("g") == {"t": {0: 1, 1: 7}}


def test_bad_offset_commits_change_nothing(open_store):
    s = open_store()
    s.commit_offset("g", "t", 0, 5)
    end = s.commitlog.end_position
    bad = [
        (errors.InvalidTypeError, lambda: s.commit_offset(5, "t", 0, 1)),
        (errors.InvalidArgumentError, lambda: s.commit_offset("", "t", 0, 1)),
        (errors.InvalidArgumentError, lambda: s.commit_offset("a/b", "t", 0, 1)),
        (errors.TopicTypeError, lambda: s.commit_offset("g", None, 0, 1)),
        (errors.QueueTypeError, lambda: s.commit_offset("g", "t", "0", 1)),
        (errors.InvalidTypeError, lambda: s.commit_offset("g", "t", 0, 1.5)),
        (errors.InvalidArgumentError, lambda: s.commit_offset("g", "t", 0, -1)),
        (errors.InvalidArgumentError, lambda: s.commit_offsets("g", {})),
        (errors.InvalidArgumentError,
         lambda: s.commit_offsets("g", {("t", q): 1 for q in range(65)})),
    ]
    for exc, call in bad:
        with pytest.raises(exc):
            call()
    assert s.commitlog.end_position == end
    assert s.consumer_offsets() == {"g": {"t": {0: 5}}}


def test_table_limit(open_store):
    s = open_store(max_consumer_offsets=2)
    s.commit_offsets("g", {("t", 0): 1, ("t", 1): 1})
    s.commit_offset("g", "t", 2, 1)                   # over the limit: logged, not applied
    assert s.consumer_offsets("g") == {"t": {0: 1, 1: 1}}
    assert s.stats()["offset_commits_rejected"] == 1


def test_offsets_replicate_as_meta_records(open_store, tmp_path):
    """A leader's offset commit is a META record: a follower that copies the leader's bytes
    (append_replicated) applies it at dispatch once committed -- a new leader after a
    failover knows every committed offset."""
    from quorumlog.commitlog import META
    leader = open_store(str(tmp_path / "leader"), replicated=True)
    follower = open_store(str(tmp_path / "follower"), replicated=True)
    leader.put("t", b"m", queue_id=0)
    leader.commit_offset("g", "t", 0, 1)
    lg = leader.commitlog
    assert lg.record(lg.last_index).type == META
    raw, n = lg.read(1, lg.last_index + 1)
    assert n == lg.last_index
    follower.commitlog.append_replicated(raw)
    assert follower.committed_offset("g", "t", 0) is None      # not committed yet
    follower.apply_committed(lg.last_index)
    assert follower.committed_offset("g", "t", 0) == 1
    leader.apply_committed(lg.last_index)
    assert leader.committed_offset("g", "t", 0) == 1


def test_driven_store_proposes_offsets_through_its_core(open_store):
    s = open_store(replicated=True)
    s.raft_log()
    with pytest.raises(errors.DrivenStoreError):
        s.commit_offset("g", "t", 0, 1)
    proposed = []
    s.commit_offset("g", "t", 0, 1, propose=proposed.append)
    (payload,) = proposed
    assert json.loads(payload) == {"op": "offset", "group": "g", "offsets": [["t", 0, 1]]}
    # what the node does with it: the core appends a META record (the node's raft log
    # appends META payloads with CommitLog.append_control); applied at dispatch
    from quorumlog.commitlog import META
    index, _pos = s.commitlog.append_control(META, payload, term=s.term)
    s.apply_committed(index)
    assert s.committed_offset("g", "t", 0) == 1


def test_read_only_store_sees_offsets(open_store, store_dir):
    s = open_store()
    s.commit_offset("g", "t", 0, 9)
    with quorumlog.open(store_dir, read_only=True, environ={}) as r:
        assert r.committed_offset("g", "t", 0) == 9
        with pytest.raises(errors.ReadOnlyError):
            r.commit_offset("g", "t", 0, 10)
