"""Conformance suite for the RaftLog interface (quorumlog/raft/log.py).

Every implementation must pass it: the in-memory MemLog and the native CommitLog through
quorumlog.store.nativelog.NativeRaftLog (a missing native build fails the native params; it is
never skipped). To plug in
another, add an entry to IMPLEMENTATIONS: a factory `make(dir) -> (log, close)` for a fresh,
empty, open log, and `items(n, size)` returning a batch its append_as_leader accepts.
"""
import tempfile

import pytest
from hypothesis import given, settings, strategies as st

from quorumlog.errors import IndexOutOfRangeError, InvalidArgumentError, ReplicationError
from quorumlog.raft.log import EntryKind, RaftLog, decode_voters, encode_voters
from quorumlog.raft.memlog import MemLog
from quorumlog.testing.cluster import pump as cluster_pump


def _mem_make(_dir):
    return MemLog(), lambda: None


def _mem_items(n, size=10):
    return [bytes([65 + (i % 26)]) * size for i in range(n)]


def _native_make(d):
    from quorumlog.commitlog import CommitLog
    from quorumlog.store.nativelog import NativeRaftLog
    cl = CommitLog(f"{d}/log-{next(_seq)}", segment_size_bytes=1 << 16)
    return NativeRaftLog(cl), cl.close


def _native_items(n, size=10):
    return ("raft-conformance", [bytes([65 + (i % 26)]) * size for i in range(n)])


def _native_available():
    try:
        import quorumlog.commitlog  # noqa: F401  (needs the built extension)
        return True
    except ImportError:
        return False


_seq = iter(range(1 << 30))
IMPLEMENTATIONS = {
    "memory": (_mem_make, _mem_items),
    "native": (_native_make, _native_items),
}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def impl(request, tmp_path):
    # The project always builds the extension (make test installs it): a missing build
    # must fail here, not skip the native half of the conformance suite.
    assert request.param != "native" or _native_available(), "native CommitLog not built"
    make, items = IMPLEMENTATIONS[request.param]
    closers = []

    def factory():
        lg, close = make(tmp_path)
        closers.append(close)
        return lg

    yield factory, items
    for close in closers:
        close()


@pytest.fixture
def raft_log(impl):
    return impl[0]()


@pytest.fixture
def items(impl):
    return impl[1]


def test_implements_protocol(raft_log):
    assert isinstance(raft_log, RaftLog)


def test_empty_log(raft_log):
    assert raft_log.first_index() == 1
    assert raft_log.last_index() == 0
    assert raft_log.last_term() == 0
    assert raft_log.term_at(0) == 0


def test_append_as_leader_assigns_consecutive_indexes_with_the_term(raft_log, items):
    assert raft_log.append_as_leader(3, items(4)) == 4
    assert raft_log.append_as_leader(3, items(2)) == 6
    assert raft_log.append_control(5, EntryKind.NOOP, b"") == 7
    assert [raft_log.term_at(i) for i in range(1, 8)] == [3] * 6 + [5]
    assert raft_log.last_term() == 5


def test_terms_never_decrease(raft_log, items):
    raft_log.append_as_leader(5, items(1))
    with pytest.raises(InvalidArgumentError):
        raft_log.append_as_leader(4, items(1))
    with pytest.raises(InvalidArgumentError):
        raft_log.append_control(4, EntryKind.NOOP, b"")


def test_term_at_out_of_range(raft_log, items):
    raft_log.append_as_leader(1, items(3))
    with pytest.raises(IndexOutOfRangeError):
        raft_log.term_at(4)
    with pytest.raises(IndexOutOfRangeError):
        raft_log.term_at(-1)


def test_read_returns_whole_entries_within_budget(raft_log, items):
    raft_log.append_as_leader(1, items(10, 100) if items is _mem_items else items(10))
    payload, count, nbytes = raft_log.read(1, 10, 1 << 20)
    assert count == 10 and nbytes > 0
    _, c1, b1 = raft_log.read(1, 10, nbytes // 2)
    assert 1 <= c1 < 10 and b1 <= nbytes // 2
    _, c2, _ = raft_log.read(3, 5, 1 << 20)
    assert c2 == 3  # never beyond hi


def test_read_returns_at_least_one_entry(raft_log, items):
    raft_log.append_as_leader(1, items(3))
    _, count, nbytes = raft_log.read(2, 3, 1)
    assert count == 1 and nbytes > 1


def test_read_out_of_range(raft_log, items):
    raft_log.append_as_leader(1, items(3))
    with pytest.raises(IndexOutOfRangeError):
        raft_log.read(2, 4, 1000)
    with pytest.raises(IndexOutOfRangeError):
        raft_log.read(0, 2, 1000)


def test_replicated_payload_reproduces_the_leader_log(impl, items):
    leader, follower = impl[0](), impl[0]()  # (two logs of the same implementation)
    leader.append_as_leader(1, items(5))
    leader.append_control(2, EntryKind.NOOP, b"")
    leader.append_control(2, EntryKind.CONFIG, encode_voters(["b", "a"]))
    leader.append_as_leader(2, items(3))
    i = 1
    while i <= leader.last_index():
        payload, count, _ = leader.read(i, leader.last_index(), 150)
        assert follower.append_replicated(payload) == i + count - 1
        i += count
    assert [follower.term_at(i) for i in range(10)] == [leader.term_at(i) for i in range(10)]


def test_append_replicated_must_continue_the_log(impl, items):
    leader, follower = impl[0](), impl[0]()
    leader.append_as_leader(1, items(5))
    payload, _, _ = leader.read(3, 5, 1 << 20)
    with pytest.raises(ReplicationError):
        follower.append_replicated(payload)  # gap: follower ends at 0
    first, _, _ = leader.read(1, 2, 1 << 20)
    follower.append_replicated(first)
    with pytest.raises(ReplicationError):
        follower.append_replicated(first)  # overlap


def test_truncate_after(raft_log, items):
    raft_log.append_as_leader(1, items(5))
    raft_log.truncate_after(2)
    assert raft_log.last_index() == 2
    assert raft_log.append_as_leader(2, items(1)) == 3
    assert raft_log.term_at(3) == 2
    raft_log.truncate_after(0)
    assert raft_log.last_index() == 0 and raft_log.last_term() == 0
    with pytest.raises(IndexOutOfRangeError):
        raft_log.truncate_after(1)


def test_flush_returns_durable_end(raft_log, items):
    raft_log.append_as_leader(1, items(3))
    assert raft_log.flush() == 3


def test_config_body_roundtrip():
    assert decode_voters(encode_voters({"n3", "n1"})) == ("n1", "n3")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["lead", "trunc", "noop"]), st.integers(1, 4)), max_size=30))
def test_log_matches_a_list_model(ops):
    # hypothesis: any sequence of appends/truncations behaves like a list of terms
    for name, (make, mk) in IMPLEMENTATIONS.items():
        assert name != "native" or _native_available(), "native CommitLog not built"
        with tempfile.TemporaryDirectory() as d:
            lg, close = make(d)
            try:
                _run_model(lg, mk, ops)
            finally:
                close()


def _run_model(lg, mk, ops):
    model = []
    term = 1
    for op, n in ops:
        if op == "lead":
            term += n % 2
            lg.append_as_leader(term, mk(n))
            model += [term] * n
        elif op == "noop":
            lg.append_control(term, EntryKind.NOOP, b"")
            model.append(term)
        else:
            cut = max(0, len(model) - n)
            lg.truncate_after(cut)
            del model[cut:]
        assert lg.last_index() == len(model)
        assert [lg.term_at(i) for i in range(1, len(model) + 1)] == model


def test_memlog_crash_keeps_only_flushed_state():
    # simulation helper (not part of the protocol): unflushed appends AND truncations are lost
    lg = MemLog()
    lg.append_as_leader(1, _mem_items(4))
    lg.flush()
    lg.truncate_after(2)
    lg.append_as_leader(2, _mem_items(1))
    lg.crash()
    assert lg.last_index() == 4 and lg.term_at(3) == 1
    lg.truncate_after(1)
    lg.flush()
    lg.crash()
    assert lg.last_index() == 1


def test_three_cores_over_the_log(impl, items):
    """RaftCore end to end over this implementation: elect, replicate through verbatim
    payloads, commit; the followers' entries equal the leader's."""
    import random

    from quorumlog.raft import RaftConfig, RaftCore, Role

    voters = ("n1", "n2", "n3")
    logs = {v: impl[0]() for v in voters}
    cfg = RaftConfig(max_batch_bytes=300, max_batch_entries=4)
    cores = {v: RaftCore(v, logs[v], random.Random(i), cfg, voters=voters, peers=voters)
             for i, v in enumerate(voters)}

    def pump():
        cluster_pump(cores, logs)

    ld = cores["n1"]
    now = ld.next_time_to_request_vote
    for step in range(20):
        for v in voters if step else ("n1",):
            cores[v].tick(now + step)
        pump()
        if ld.role == Role.LEADER:
            break
    assert ld.role == Role.LEADER
    for _ in range(5):
        batch = items(7)
        ld.propose(batch, 7, 70)
        pump()
    last = logs["n1"].last_index()
    assert last == 36 and ld.commit_index == last
    for v in ("n2", "n3"):
        assert logs[v].last_index() == last
        assert [logs[v].term_at(i) for i in range(1, last + 1)] == \
               [logs["n1"].term_at(i) for i in range(1, last + 1)]
