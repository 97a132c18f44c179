"""Log replication (seed-003-dledger-log-replication.txt, seed-002-raft-in-a-message-queue.txt
§2.3, and the Raft paper where DLedger follows it), limits, and the driver contract."""
import random

import pytest

from quorumlog.errors import ReplicationError
from quorumlog.raft import HardState, MemLog, RaftConfig, RaftCore, Role
from quorumlog.raft.memlog import MemPayload
from quorumlog.testing.cluster import ManualCluster
from quorumlog.raft.core import ReadyToServe
from quorumlog.raft.errors import (BackpressureError, LeaderTransferringError, NotLeaderError,
                                   ProposalLimitError)
from quorumlog.raft.log import EntryKind
from quorumlog.raft.messages import Append, AppendResponse, Code, DispatchState


def elected(cfg=None, ids=("n1", "n2", "n3"), **kw):
    cl = ManualCluster(ids, config=cfg or RaftConfig(), **kw)
    cl.elect("n1")
    assert cl.leaders() == ["n1"]
    cl.settle(cl.now + 50)
    return cl


def appends(cl, dst=None):
    return [m for m in cl.queue if isinstance(m, Append) and (dst is None or m.dst == dst)]


def test_new_leader_appends_noop_in_its_term():
    # DLedger / Raft §5.4.2: a new leader appends a NOOP so earlier terms' entries can commit
    cl = elected()
    c = cl.core("n1")
    assert cl.logs["n1"].entry(1)[:2] == (c.term, EntryKind.NOOP)
    cl.settle(cl.now + cl.cfg.heartbeat_interval_ms)
    assert all(cl.core(i).commit_index == 1 for i in cl.ids)


def test_commit_only_entries_of_the_current_term():
    # Raft §5.4.2 (Figure 8): an old-term entry on a majority is not committed by counting
    cl = elected()
    cl.propose("n1", 1)
    cl.drop()  # nobody gets entry 2
    c1 = cl.core("n1")
    # n1 crashes with entry 2 (term t) only in its own log; n2 leads term t+1 and then crashes
    # before anything; n1 comes back and becomes leader of a later term
    cl.crash("n1")  # (entry 2 was flushed on n1: auto persist)
    cl.settle(cl.now + 2000)
    new = cl.leaders()[0]
    assert new != "n1"
    cl.restart("n1")
    cl.crash(new)
    cl.settle(cl.now + 3000)
    assert cl.leaders() == ["n1"] or cl.leaders()
    ld = cl.leaders()[0]
    c = cl.core(ld)
    # whatever survived, every committed index holds an entry of a term that was current when
    # it committed: the NOOP of this term is what commits anything older
    assert cl.logs[ld].term_at(c.commit_index) == c.term


def test_follower_commits_only_what_matches_this_leader():
    # deviation from "min(end index, leader commit)": a follower with a stale tail must not
    # commit it just because the leader's commit index is larger
    cl = elected()
    cl.block("n1", "n3")
    for _ in range(5):
        cl.propose("n1", 1)
    cl.deliver()
    c3 = cl.core("n3")
    lg3 = cl.logs["n3"]
    # give n3 a stale tail of a fake old term at the same indexes (as if from a dead leader)
    assert lg3.last_index() == 1
    lg3.append_control(c3.term, EntryKind.NOOP, b"stale")
    lg3.append_control(c3.term, EntryKind.NOOP, b"stale")
    cl.heal()
    from quorumlog.raft.messages import Heartbeat
    c3.step(Heartbeat(c3.term, "n1", "n3", cl.core("n1").commit_index, 99))
    cl.drain("n3")
    assert c3.commit_index <= 1  # matched only up to 1 with this leader


def test_commit_index_rides_on_heartbeats():
    cl = elected()
    first, last = cl.propose("n1", 2)
    # deliver the appends and their answers, but no later append to carry the commit index
    cl.deliver()
    assert cl.core("n1").commit_index == last
    assert cl.core("n2").commit_index < last
    cl.tick(cl.now + cl.cfg.heartbeat_interval_ms)
    cl.deliver()
    assert cl.core("n2").commit_index == last


def test_follower_reports_match_only_after_persisted():
    # durability hook: matched only after the driver says the entries are durable
    cl = elected()
    cl.manual_persist("n2")
    cl.manual_persist("n3")
    first, last = cl.propose("n1", 3)
    cl.deliver()
    assert cl.core("n1").commit_index < last
    assert not [m for m in cl.out if "APPEND_RESP" in m and f"match={last}" in m]
    cl.persist("n2")
    cl.deliver()
    assert cl.core("n1").commit_index == last


def test_crash_before_flush_loses_only_unacknowledged_entries():
    cl = elected()
    cl.manual_persist("n2")
    first, last = cl.propose("n1", 3)
    cl.deliver()
    assert cl.logs["n2"].last_index() == last
    cl.crash("n2")
    assert cl.logs["n2"].last_index() < last  # never flushed: gone
    cl.restart("n2")
    cl.manual_persist("n2", False)
    cl.settle(cl.now + 1500)
    assert cl.logs["n2"].last_index() >= last and cl.core("n2").commit_index >= last


def test_append_is_pipelined_up_to_the_window():
    cfg = RaftConfig(max_batch_entries=1, max_inflight_batches=4)
    cl = elected(cfg)
    cl.manual_persist("n2")
    for _ in range(10):
        cl.propose("n1", 1)
    assert len(appends(cl, "n2")) == 4  # four one-entry batches in flight, no more
    assert cl.core("n1").progress["n2"].state == DispatchState.APPEND


def test_batches_respect_byte_and_entry_limits_and_never_span_terms():
    cfg = RaftConfig(max_batch_entries=5, max_batch_bytes=300, max_inflight_batches=100)
    cl = elected(cfg)
    cl.propose("n1", items=[b"x" * 10] * 12)
    batches = appends(cl, "n2")
    assert batches
    for b in batches:
        assert b.last_index - b.first_index + 1 <= 5
        assert b.nbytes <= 300 or b.last_index == b.first_index
        lg = cl.logs["n1"]
        assert {lg.term_at(i) for i in range(b.first_index, b.last_index + 1)} == {b.entry_term}


def test_mismatch_walks_back_one_term_per_round_trip():
    # seed 003 COMPARE: the follower answers with its conflicting term and where it starts
    cl = ManualCluster()
    # n3 wrote 30 entries in each of terms 2, 3, 4 that nobody else has
    lg3 = cl.logs["n3"]
    for t in (2, 3, 4):
        for _ in range(30):
            lg3.append_control(t, EntryKind.NOOP, b"old")
    lg3.flush()
    from quorumlog.raft.core import HardState
    cl.hard["n3"] = HardState(4, None)
    for i in ("n1", "n2"):
        lg = cl.logs[i]
        lg.append_control(1, EntryKind.NOOP, b"")
        lg.append_control(5, EntryKind.NOOP, b"")
        lg.flush()
        cl.hard[i] = HardState(5, None)
    for i in cl.ids:
        cl.restart(i)
    cl.partition({"n1", "n2"}, {"n3"})
    cl.elect("n1")
    assert cl.leaders() == ["n1"]
    cl.heal()
    cl.take_output()
    cl.settle(cl.now + 500)
    probes = [line for line in cl.out if line.startswith("n1->n3 APPEND") and "probe" in line]
    assert len(probes) <= 5, probes  # one per term (4, 3, 2) + the first, not one per entry
    assert cl.logs["n3"].last_index() == cl.logs["n1"].last_index()
    assert [cl.logs["n3"].term_at(i) for i in range(1, cl.logs["n3"].last_index() + 1)] == \
           [cl.logs["n1"].term_at(i) for i in range(1, cl.logs["n1"].last_index() + 1)]


def test_lost_batch_is_detected_as_gap_and_resent():
    cl = elected(RaftConfig(max_batch_entries=1, max_inflight_batches=8))
    for _ in range(4):
        cl.propose("n1", 1)
    first = appends(cl, "n2")[0]
    cl.queue.remove(first)  # lost on the wire
    cl.deliver()
    assert any("GAP" in line for line in cl.out)
    cl.settle(cl.now + 50)
    assert cl.logs["n2"].last_index() == cl.logs["n1"].last_index()


def test_unacknowledged_batch_is_resent_after_append_timeout():
    cl = elected()
    cl.propose("n1", 2)
    cl.drop(lambda m: isinstance(m, Append) and m.dst == "n2")
    cl.deliver()
    assert cl.logs["n2"].last_index() < cl.logs["n1"].last_index()
    cl.settle(cl.now + cl.cfg.append_timeout_ms + 20)
    assert cl.logs["n2"].last_index() == cl.logs["n1"].last_index()


def test_duplicate_batch_is_not_appended_twice():
    cl = elected()
    cl.propose("n1", 3)
    dup = appends(cl, "n2")[0]
    cl.deliver()
    end = cl.logs["n2"].last_index()
    cl.queue.append(dup)
    cl.deliver()
    assert cl.logs["n2"].last_index() == end


def test_ready_to_serve_after_commit_reaches_log_end_and_dispatch():
    # seed 001: the new leader becomes master when ledgerEndIndex == committedIndex and
    # dispatch is caught up
    cl = ManualCluster()
    cl.elect("n1")
    assert "n1 ReadyToServe(term=%d)" % cl.core("n1").term in cl.out
    c = cl.core("n1")
    assert c.is_ready_to_serve
    # without dispatch progress the event does not come
    cl2 = ManualCluster()
    c2 = cl2.core("n1")
    c2.on_dispatched = lambda i: None  # a driver that never reports dispatch
    cl2.elect("n1")
    assert not cl2.core("n1").is_ready_to_serve


def test_propose_limits_and_errors():
    cfg = RaftConfig(max_entries_per_proposal=4, max_proposal_bytes=100, max_uncommitted_entries=6)
    cl = elected(cfg)
    c = cl.core("n1")
    with pytest.raises(NotLeaderError) as e:
        cl.core("n2").propose([b"a"], 1, 1)
    assert e.value.leader_id == "n1"
    with pytest.raises(ProposalLimitError, match="max_entries_per_proposal=4"):
        c.propose([b"a"] * 5, 5, 5)
    with pytest.raises(ProposalLimitError, match="max_proposal_bytes=100"):
        c.propose([b"a" * 200], 1, 200)
    with pytest.raises(ProposalLimitError, match="empty"):
        c.propose([], 0, 0)
    cl.partition({"n1"})
    c.propose([b"a"] * 4, 4, 4)
    with pytest.raises(BackpressureError, match="max_uncommitted_entries=6"):
        c.propose([b"a"] * 4, 4, 4)
    cl.heal()
    c.transfer_leadership("n2")
    with pytest.raises(LeaderTransferringError):
        c.propose([b"a"], 1, 1)


def test_config_limits_are_validated():
    from quorumlog.errors import ConfigError
    with pytest.raises(ConfigError, match="max_inflight_batches"):
        RaftConfig(max_inflight_batches=0).validate()
    with pytest.raises(ConfigError, match="max_vote_interval_ms"):
        RaftConfig(min_vote_interval_ms=500, max_vote_interval_ms=100).validate()


def test_persist_report_from_before_a_truncation_is_ignored():
    cl = elected()
    c2 = cl.core("n2")
    gen = c2._log_gen
    c2._log_gen += 1  # as if the tail was truncated after the flush started
    before = c2.persisted_index
    c2.on_persisted(cl.logs["n2"].last_index() + 5, gen)
    assert c2.persisted_index == before


def test_leader_sees_bigger_term_in_append_response_and_steps_down():
    cl = elected(RaftConfig(pre_vote=False))  # (with pre-vote: test_raft_prevote.py)
    c = cl.core("n1")
    t = c.term
    c.step(AppendResponse(t + 2, "n2", "n1", Code.EXPIRED_TERM, 0, 0, 0, 0, 0, 0))
    assert c.role == Role.CANDIDATE and c.known_max_term == t + 2
    c.tick(c.next_time_to_request_vote)
    assert c.term == t + 3  # runs past the bigger term, never again at its stale one


@pytest.mark.parametrize("keeps_head_term", [True, False])
def test_follower_behind_retention_is_reported(keeps_head_term):
    # entries the leader no longer holds cannot be sent in Appends: the driver must stream
    # whole segments; the core says so once and stops dispatching Appends to it
    from quorumlog.raft.core import BehindRetention
    from quorumlog.raft.memlog import MemLog

    class HeadDropped(MemLog):
        def first_index(self):
            return 4 if self.last_index() >= 4 else 1

        def term_at(self, index):
            if 0 < index < (3 if keeps_head_term else 4):  # (the native log keeps no term for 3)
                from quorumlog.errors import IndexOutOfRangeError
                raise IndexOutOfRangeError(index)
            return MemLog.term_at(self, index)

    cl = ManualCluster()
    lg = HeadDropped()
    for _ in range(6):
        lg.append_control(1, EntryKind.NOOP, b"")
    lg.flush()
    cl.logs["n1"] = lg
    from quorumlog.raft.core import HardState
    cl.hard["n1"] = HardState(1, None)
    cl.restart("n1")
    cl.elect("n1")
    events = []
    for _ in range(20):
        cl.settle(cl.now + 50)
        r = [line for line in cl.out if "BehindRetention" in line]
        if r:
            events = r
            break
    assert events and "peer=n" in events[0]


def test_follower_commit_index_never_runs_ahead_of_its_flushed_log():
    # A follower committed min(leader commit, match) while the entries were not flushed yet:
    # its driver would dispatch (and checkpoint) a position the disk does not hold. Failed
    # before: commit=4 announced with persisted=1.
    cl = elected()
    cl.manual_persist("n2")
    first, last = cl.propose("n1", 3)
    cl.deliver()
    c2 = cl.core("n2")
    assert cl.core("n1").commit_index == last  # n1 + n3 are a quorum
    cl.take_output()
    cl.settle(cl.now + 150)  # heartbeats carry commit=4 to n2
    assert c2.persisted_index == 1 and c2.commit_index <= c2.persisted_index
    assert not [line for line in cl.take_output() if line.startswith("n2 commit=")]
    cl.persist("n2")
    assert c2.persisted_index == last and c2.commit_index == last


def test_leader_commits_on_a_quorum_of_durable_copies_before_its_own_flush():
    # Raft §5.3 (a majority of copies), counted durable (flush = "sync"): two followers that
    # flushed and acknowledged are a quorum without the leader's own flush. Failed before
    # (commit stayed at the leader's flushed index 1: docs/raft.md deviation 19).
    cl = elected()
    cl.manual_persist("n1")
    first, last = cl.propose("n1", 3)
    cl.settle(cl.now + 150)  # both followers flushed and acknowledged: committed on a quorum
    c1 = cl.core("n1")
    assert c1.persisted_index < last and c1.commit_index == last
    # the followers learn it (each capped at its own flushed index, which is `last`)
    cl.settle(cl.now + 150)
    assert cl.core("n2").commit_index == last and cl.core("n3").commit_index == last
    cl.persist("n1")
    assert c1.persisted_index == last and c1.commit_index == last


def test_leader_counts_no_copy_that_is_not_durable():
    # The leader's log end and a follower's unflushed append are copies, but not durable
    # ones: with only n3 flushed (1 of 3), nothing commits -- not even when n2 holds the
    # entries in its page cache and n1 appended them. A rule that counted the leader's log
    # end (or a follower's append before its flush) would commit here.
    cl = elected()
    cl.manual_persist("n1")
    cl.manual_persist("n2")
    cl.take_output()
    first, last = cl.propose("n1", 3)
    cl.settle(cl.now + 150)
    c1 = cl.core("n1")
    assert cl.logs["n2"].last_index() == last and cl.core("n2").persisted_index < first
    assert cl.core("n3").persisted_index == last
    assert c1.commit_index < first
    assert not [m for m in cl.take_output() if m.startswith("n1 commit=")]
    cl.persist("n2")           # n2 + n3 durable: a quorum without the leader's flush
    cl.settle(cl.now + 20)
    assert c1.persisted_index < first and c1.commit_index == last


def test_leader_own_flush_counts_as_its_vote():
    # n1 flushed, n3 flushed, n2 not: n1's persisted index is one of the two durable copies.
    cl = elected()
    cl.manual_persist("n1")
    cl.manual_persist("n2")
    first, last = cl.propose("n1", 3)
    cl.settle(cl.now + 150)
    c1 = cl.core("n1")
    assert c1.commit_index < first
    cl.persist("n1")
    assert c1.commit_index == last


def test_a_follower_restarted_while_the_group_is_idle_catches_up_with_the_commit_index():
    """Nodesim seeds 3054 and 6545 (sync): a follower holding entries past its commit index
    restarts after the last write. Its restart forgot what it knew to match the leader
    (leader_match 0), while the leader kept its old match and sent heartbeats only: its commit
    index -- and the reads it serves -- stayed behind until the next write. Now its answer's
    new incarnation id makes the leader probe it at once. Failed before (commit stayed 1)."""
    cl = elected()
    first, last = cl.propose("n1", 3)
    cl.deliver()                                   # n3 acknowledges; nothing carries the commit
    assert cl.core("n1").commit_index == last
    assert cl.core("n3").commit_index < last and cl.logs["n3"].last_index() == last
    cl.crash("n3")
    cl.restart("n3", vote_guard=True)
    cl.settle(cl.now + 1000)
    n3 = cl.core("n3")
    assert n3.role == Role.FOLLOWER and n3.leader_id == "n1"
    assert n3.commit_index == last
    assert cl.core("n1").log.last_index() == last  # (no write helped it)


def test_a_batch_whose_entries_are_not_of_the_messages_term_is_refused_and_taken_back():
    """Every entry of a batch has the message's entry_term. A batch whose bytes say otherwise
    changed after the sender read them (a view of a deposed leader's log, truncated and
    written again by a newer leader, sent late: nodesim seed 15370). Appended after the old
    leader's prev it would splice a newer leader's entries onto an entry that leader may
    not hold; it is refused and nothing of it stays or is acknowledged."""
    lg = MemLog()
    for _ in range(3):
        lg.append_control(1, EntryKind.NOOP, b"")
    lg.flush()
    core = RaftCore("n1", lg, random.Random(1), RaftConfig(),
                    hard_state=HardState(1, "n2", 0), voters=("n1", "n2", "n3"),
                    peers=("n1", "n2", "n3"), restarted=True)
    stale = MemPayload(4, (2, 2), (EntryKind.NOOP,) * 2, (b"", b""), (1, 1))
    with pytest.raises(ReplicationError, match="says 1"):
        core.step(Append(1, "n2", "n1", 3, 1, 4, 5, 1, stale, 2, 0, (), 0))
    assert (lg.last_index(), lg.last_term()) == (3, 1)
    assert not [m for m in core.ready().messages if isinstance(m, AppendResponse)
                and m.code == Code.SUCCESS]
    good = MemPayload(4, (1, 1), (EntryKind.NOOP,) * 2, (b"", b""), (1, 1))
    core.step(Append(1, "n2", "n1", 3, 1, 4, 5, 1, good, 2, 0, (), 0))
    assert (lg.last_index(), lg.last_term()) == (5, 1)


def test_a_follower_that_briefly_campaigned_catches_up_with_the_commit_index_while_idle():
    """Nodesim seed 6545 again (sync, stalls only, on the merged main of session 18): a
    follower that stopped hearing the leader for an election timeout became a pre-vote
    candidate in the same term, then followed the same leader again. Following it reset
    what it knew to match that leader (leader_match 0), while the leader, which had its
    acknowledgement, sent heartbeats only: the follower's commit index stayed one entry
    behind for good in an idle group. Within a term there is one leader, so what matched it
    still matches. Failed before (commit stayed below last)."""
    cl = elected()
    first, last = cl.propose("n1", 3)
    cl.deliver()                                   # n3 acknowledges; nothing carries the commit
    assert cl.core("n1").commit_index == last
    assert cl.core("n3").commit_index < last and cl.logs["n3"].last_index() == last
    cl.block("n1", "n3")                           # n3 hears nothing: it campaigns (pre-vote)
    cl.settle(cl.now + 2000)
    assert cl.core("n3").role == Role.CANDIDATE and cl.core("n3").term == cl.core("n1").term
    cl.heal()
    cl.settle(cl.now + 1000)
    n3 = cl.core("n3")
    assert n3.role == Role.FOLLOWER and n3.leader_id == "n1"
    assert n3.commit_index == last
    assert cl.core("n1").log.last_index() == last  # (no write helped it)


def test_a_ready_taken_as_persisted_carries_the_acknowledgement_of_its_own_append():
    # a driver whose flush is a no-op (node async mode): core.ready(persisted=True) reports
    # the flush itself, so a follower's acknowledgement and a leader's own vote come with the
    # Ready of the append, not with a second one after the flush duty
    cl = elected()
    lead, f = cl.core("n1"), cl.core("n2")
    last = lead.propose([b"a", b"b"], 2, 2)[1]      # (the core's own: no drain by the cluster)
    r = lead.ready(persisted=True)
    assert r.flush_to is None and lead.persisted_index == last
    sent = [m for m in r.messages if isinstance(m, Append) and m.dst == "n2"]
    assert sent and sent[-1].last_index == last
    f.step(sent[-1])
    r = f.ready(persisted=True)
    assert r.flush_to is None and f.persisted_index == last
    acks = [m for m in r.messages if isinstance(m, AppendResponse)]
    assert [(a.code, a.match_index) for a in acks] == [(Code.SUCCESS, last)]
    assert not f.has_ready()
    lead.step(acks[0])
    assert lead.commit_index == last
    # without it the flush is the driver's duty, and the acknowledgement waits for its report
    last = lead.propose([b"c"], 1, 1)[1]
    f.step([m for m in lead.ready().messages if isinstance(m, Append) and m.dst == "n2"][-1])
    r = f.ready()
    assert r.flush_to == last and not [m for m in r.messages if isinstance(m, AppendResponse)]
