"""The producer table (node/producers.py) under real RaftCores over three replicated stores: a
leader builds it from the store's log for its term (the records' QL_PID/QL_SEQ/QL_N/QL_I
properties), a new leader that holds only part of a batch knows exactly which messages it
misses, completing the batch leaves every message stored once, and a later leader rebuilds
the completed batch (two runs of entries) from its own log."""
import random

import pytest

from quorumlog.errors import DuplicateBatchError, ProducerSequenceError
from quorumlog.node.producers import KnownBatchError, table_for_term
from quorumlog.raft import RaftConfig, RaftCore, Role
from quorumlog.store.raftlog import producer_properties
from test_store_raft_seam import _pump

VOTERS = ("n1", "n2", "n3")


class _Link:
    """A core whose incoming messages pass `drop` first (a dropped one is lost)."""

    def __init__(self, core, drop):
        self.core, self.drop = core, drop

    def step(self, m):
        if not self.drop(m):
            self.core.step(m)

    def __getattr__(self, name):
        return getattr(self.core, name)


class _Dead:
    """A crashed replica: hears nothing, says nothing."""

    id = "dead"
    now_ms = 0
    next_time_to_request_vote = 1 << 62

    def step(self, m):
        pass

    def has_ready(self):
        return False

    def tick(self, now):
        pass


def _group(open_store, tmp_path):
    stores = {v: open_store(str(tmp_path / v), replicated=True) for v in VOTERS}
    logs = {v: stores[v].raft_log() for v in VOTERS}
    cores = {v: RaftCore(v, logs[v], random.Random(i), RaftConfig(max_batch_entries=2),
                         voters=VOTERS, peers=VOTERS) for i, v in enumerate(VOTERS)}
    return stores, logs, cores


def _elect(stores, cores, who, now, others_time_out=False):
    """Tick `who` past its election timeout until it leads and serves (the others time out
    too if others_time_out: their logs must be shorter); returns the time reached."""
    now = max(now, cores[who].next_time_to_request_vote)
    for step in range(40):
        now += 100
        cores[who].tick(now)
        for v, c in cores.items():
            if v != who:
                c.tick(now if others_time_out else
                       max(c.now_ms, min(now, c.next_time_to_request_vote - 1)))
        _pump(stores, cores)
        if cores[who].role == Role.LEADER and cores[who].is_ready_to_serve:
            return now
    raise AssertionError(f"{who} not elected: {cores[who].role.name}")


def _heartbeat(stores, cores, now):
    """One heartbeat round: the followers learn the commit index."""
    now += RaftConfig().heartbeat_interval_ms
    for c in cores.values():
        c.tick(now)
    _pump(stores, cores)
    return now


_TABLES: dict = {}


def _table(store, core):
    """The leader's table for its term, as the node's put path gets it (driver.py)."""
    t = _TABLES[core.id] = table_for_term(_TABLES.get(core.id), store.raft_log(), core.term)
    return t


def _put(store, core, pid, seq, bodies, first_ordinal=0, count=None):
    req = store.prepare_put("t", bodies, queue_id=1, properties=producer_properties(
        pid, seq, count or len(bodies), first_ordinal))
    if first_ordinal:       # a completion: the driver appends it and updates the table
        core.propose(req, req.count, req.nbytes)
    else:                   # the node's put path: check, propose, record
        t = _table(store, core)
        t.check(pid, seq)
        core.propose(req, req.count, req.nbytes)
        t.record(pid, seq, req.first_index, req.last_index, core.term)
    return req


def test_new_leader_completes_a_batch_it_holds_in_part(open_store, tmp_path):
    stores, logs, cores = _group(open_store, tmp_path)
    now = _elect(stores, cores, "n1", cores["n1"].next_time_to_request_vote)
    n1 = cores["n1"]
    _put(stores["n1"], n1, 7, 1, [b"one-0", b"one-1", b"one-2"])
    _pump(stores, cores)
    now = _heartbeat(stores, cores, now)
    base = logs["n1"].last_index()
    assert all(logs[v].last_index() == base for v in VOTERS)

    # batch (7, 2) of 6 messages: n3 hears nothing, n2 only the first APPEND (2 entries)
    bodies = [b"two-%d" % i for i in range(6)]
    _put(stores["n1"], n1, 7, 2, bodies)
    seen = []

    def drop(m):
        if m.type_name != "APPEND" or m.last_index <= base:
            return False
        if m.dst == "n2" and not seen:
            seen.append(m)
            return False
        return True
    _pump(stores, {"n1": n1, "n2": _Link(cores["n2"], drop), "n3": _Link(cores["n3"], drop)})
    assert logs["n2"].last_index() == base + 2 and logs["n3"].last_index() == base

    # n1 dies; n2 (the longer log) leads and rebuilds its table from its log
    cores["n1"] = _Dead()
    now = _elect(stores, cores, "n2", now + 10_000, others_time_out=True)
    n2 = cores["n2"]
    table = _table(stores["n2"], n2)
    with pytest.raises(KnownBatchError) as e:
        _put(stores["n2"], n2, 7, 2, bodies)
    b = e.value.batch
    assert (b.count, b.held, b.complete, b.prefix_known) == (6, 2, False, True)
    assert [r[:2] for r in b.ranges] == [[base + 1, base + 2]]
    with pytest.raises(DuplicateBatchError):         # the first batch: complete
        _put(stores["n2"], n2, 7, 1, [b"one-0", b"one-1", b"one-2"])
    assert table.lookup(7, 1).complete
    with pytest.raises(ProducerSequenceError):       # (below the last written, not known)
        _put(stores["n2"], n2, 7, 0, [b"zero"])

    # the driver's completion: exactly the missing messages, same (pid, seq)
    req = _put(stores["n2"], n2, 7, 2, bodies[2:], first_ordinal=2, count=6)
    table.place(b, req.first_index, req.last_index, n2.term)
    assert b.complete and len(b.ranges) == 2
    _pump(stores, cores)
    now = _heartbeat(stores, cores, now)
    got = [(bytes(m.body), m.properties["QL_I"]) for m in stores["n2"].get("t", 1, 0, 100)]
    assert got == [(b"one-%d" % i, str(i)) for i in range(3)] + \
        [(x, str(i)) for i, x in enumerate(bodies)]

    # n2 dies too: n3 (caught up) leads, and its table rebuilt from its own log knows the
    # completed batch as two runs of entries
    assert logs["n3"].last_index() == logs["n2"].last_index()
    cores["n2"] = _Dead()
    cores["n1"] = RaftCore("n1", logs["n1"], random.Random(9), RaftConfig(max_batch_entries=2),
                           voters=VOTERS, peers=VOTERS)
    _elect(stores, cores, "n3", now + 10_000, others_time_out=True)
    t3 = _table(stores["n3"], cores["n3"])
    b3 = t3.lookup(7, 2)
    assert (b3.count, b3.held, b3.complete) == (6, 6, True)
    assert [r[:2] for r in b3.ranges] == [r[:2] for r in b.ranges]
    # n1's stale prefix was replaced by n2's entries (same bodies, once each)
    got1 = [bytes(m.body) for m in stores["n1"].get("t", 1, 0, 100)]
    assert got1[3:] == bodies
