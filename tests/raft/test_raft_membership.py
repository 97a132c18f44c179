"""Membership change (seed-002 §2.4) and leadership transfer / preferred leader (DLedger's
handleLeadershipTransfer / handleTakeLeadership, as docs/raft.md describes them)."""
import pytest

from quorumlog.raft import HardState, RaftConfig, Role, VoteResult
from quorumlog.testing.cluster import ManualCluster
from quorumlog.raft.errors import MembershipChangeError, NotLeaderError, TransferError
from quorumlog.raft.log import EntryKind, decode_config, decode_voters
from quorumlog.raft.messages import (Heartbeat, HeartbeatResponse, TakeLeadership, VoteRequest,
                                     VoteResponse)


def cluster(ids=("n1", "n2", "n3"), spare=(), cfg=None):
    cl = ManualCluster(ids, config=cfg or RaftConfig(), spare=spare)
    cl.elect("n1")
    assert cl.leaders() == ["n1"]
    cl.settle(cl.now + 150)
    return cl


def configs(cl, node):
    lg = cl.logs[node]
    return [(i, decode_voters(lg.entry(i)[2])) for i in range(1, lg.last_index() + 1)
            if lg.entry(i)[1] == EntryKind.CONFIG]


def test_add_member_catches_up_as_learner_then_config_entry():
    # seed 002 §添加节点: 2) sync existing log to D, 3) when caught up, a Config Entry ABCD
    cl = cluster(spare=("n4",))
    for _ in range(20):
        cl.propose("n1", 5)
    cl.settle(cl.now + 50)
    c = cl.core("n1")
    c.add_member("n4")
    assert "n4" not in c.voters and c.progress["n4"].is_learner
    cl.settle(cl.now + 300)
    assert c.voters == ("n1", "n2", "n3", "n4") and c.quorum == 3
    assert configs(cl, "n4")[-1][1] == ("n1", "n2", "n3", "n4")
    assert cl.core("n4").voters == ("n1", "n2", "n3", "n4")
    assert any("ConfigChanged" in line for line in cl.out)


def test_learner_does_not_count_towards_commit():
    cl = cluster(spare=("n4",))
    c = cl.core("n1")
    cl.partition({"n1", "n4"}, {"n2", "n3"})
    c.add_member("n4")
    first, last = cl.propose("n1", 1)
    cl.settle(cl.now + 100)
    assert c.commit_index < last  # n1 + learner n4 are not a quorum of {n1, n2, n3}


def test_remove_member_config_entry_and_quorum():
    # seed 002 §删除节点: 1) Config Entry ABC, 3) A stops sending to D
    cl = cluster(("n1", "n2", "n3", "n4"))
    c = cl.core("n1")
    idx = c.remove_member("n4")
    assert c.voters == ("n1", "n2", "n3")
    cl.settle(cl.now + 150)
    assert c.commit_index >= idx
    assert "n4" not in c.progress  # dropped once the removal committed
    # n4 received the entry that removes it before the leader stopped: it will not campaign
    assert cl.core("n4").voters == ("n1", "n2", "n3")
    cl.take_output()
    cl.settle(cl.now + 2000)
    assert not [line for line in cl.out if line.startswith("n4->") and " VOTE " in line]


def test_removed_member_cannot_disrupt_the_group():
    # seed 002 §删除节点 4): a removed node that campaigns gets rejected and terms do not move
    cl = cluster(("n1", "n2", "n3", "n4"))
    c = cl.core("n1")
    cl.partition({"n4"})
    c.remove_member("n4")
    cl.settle(cl.now + 200)
    term = c.term
    cl.heal()
    cl.take_output()
    cl.settle(cl.now + 3000)  # n4 never learned: it campaigns with rising terms
    assert [line for line in cl.out if line.startswith("n4->") and " VOTE " in line]
    assert cl.leaders() == ["n1"] and c.term == term


def test_unknown_member_vote_is_rejected():
    cl = cluster()
    c2 = cl.core("n2")
    c2.step(VoteRequest(99, "n9", "n2", 100, 99))
    r = c2.ready()
    assert r.messages[0].result == VoteResult.REJECT_UNKNOWN_LEADER and c2.term < 99


def test_one_membership_change_at_a_time():
    cl = cluster(("n1", "n2", "n3", "n4"), spare=("n5",))
    c = cl.core("n1")
    c.add_member("n5")
    with pytest.raises(MembershipChangeError, match="learner n5"):
        c.remove_member("n4")
    cl.settle(cl.now + 300)
    cl.partition({"n1"})
    c.remove_member("n4")  # appended, cannot commit while n1 is alone
    with pytest.raises(MembershipChangeError, match="not committed"):
        c.remove_member("n3")


def test_membership_change_argument_errors():
    cl = cluster()
    c = cl.core("n1")
    with pytest.raises(MembershipChangeError, match="already a voter"):
        c.add_member("n2")
    with pytest.raises(MembershipChangeError, match="transfer leadership"):
        c.remove_member("n1")
    with pytest.raises(MembershipChangeError, match="not a voter"):
        c.remove_member("n7")
    with pytest.raises(NotLeaderError):
        cl.core("n2").add_member("n9")


def test_config_entry_is_undone_with_a_truncated_tail():
    # a CONFIG entry takes effect when appended; if it is truncated, the previous one applies
    cl = cluster(("n1", "n2", "n3", "n4", "n5"))
    c = cl.core("n1")
    cl.partition({"n1", "n2"}, {"n3", "n4", "n5"})
    c.remove_member("n5")
    cl.drain("n1")
    cl.deliver()
    assert cl.core("n2").voters == ("n1", "n2", "n3", "n4")  # applied on append, uncommitted
    cl.settle(cl.now + 3000)
    ld = [i for i in cl.leaders() if i in ("n3", "n4", "n5")]
    assert ld, cl.leaders()
    cl.propose(ld[0], 1)
    cl.heal()
    cl.settle(cl.now + 1000)
    assert cl.core("n2").voters == ("n1", "n2", "n3", "n4", "n5")  # the CONFIG entry was truncated
    assert not configs(cl, "n2")


# -- leadership transfer -------------------------------------------------------------------
def test_transfer_to_caught_up_member_campaigns_at_term_plus_one():
    cl = cluster()
    c = cl.core("n1")
    term = c.term
    cl.propose("n1", 3)
    c.transfer_leadership("n2")
    cl.settle(cl.now + 300)
    assert cl.leaders() == ["n2"]
    assert cl.core("n2").term == term + 1
    assert any("TAKE_LEADERSHIP" in line for line in cl.out)
    # the transferee's vote requests carry the transfer flag past the live-leader rule
    assert any("VOTE t%d" % (term + 1) in line and "transfer" in line for line in cl.out)


def test_transfer_waits_for_transferee_to_catch_up():
    cl = cluster()
    c = cl.core("n1")
    cl.partition({"n1", "n2"}, {"n3"})
    cl.propose("n1", 5)
    cl.settle(cl.now + 50)
    c.transfer_leadership("n3")
    cl.settle(cl.now + 100)  # (shorter than the heartbeat leak: n3 must not start campaigning)
    assert not any("TAKE_LEADERSHIP" in line for line in cl.out)  # n3 is behind
    cl.heal()
    cl.settle(cl.now + 600)
    assert cl.leaders() == ["n3"]


def test_transfer_times_out_and_leader_serves_again():
    cl = cluster()
    c = cl.core("n1")
    cl.crash("n3")
    cl.propose("n1", 1)
    c.transfer_leadership("n3")
    cl.settle(cl.now + cl.cfg.transfer_timeout_ms + 50)
    assert any("TransferAborted" in line for line in cl.out)
    assert c.role == Role.LEADER
    cl.propose("n1", 1)  # accepted again


def test_transfer_argument_errors():
    cl = cluster()
    c = cl.core("n1")
    with pytest.raises(TransferError):
        c.transfer_leadership("n1")
    with pytest.raises(TransferError):
        c.transfer_leadership("n9")
    c.transfer_leadership("n2")
    with pytest.raises(TransferError, match="already in progress"):
        c.transfer_leadership("n3")


def test_preferred_leader_takes_over_when_caught_up():
    cl = ManualCluster(config=RaftConfig(preferred_leader_id="n3"))
    cl.elect("n1")
    assert cl.leaders() == ["n1"]
    cl.settle(cl.now + 600)
    assert cl.leaders() == ["n3"]
    cl.settle(cl.now + 1000)
    assert cl.leaders() == ["n3"]  # and stays


def test_transferee_adopts_term_plus_one_at_once_so_a_late_heartbeat_cannot_cancel_it():
    # Review item 1: the transferee used to stay at term T (leader_id cleared) until its next
    # tick; a Heartbeat from the old leader at T stepped before that tick made it a FOLLOWER
    # again, the leader never re-sent TakeLeadership and refused proposals until the timeout.
    cl = cluster()
    c = cl.core("n1")
    term = c.term
    cl.propose("n1", 3)
    cl.settle(cl.now + 50)
    c.transfer_leadership("n2")
    cl.drain("n1")
    # deliver only the TakeLeadership, then a heartbeat from n1 at T, before n2 ticks
    assert cl.deliver(match=lambda m: m.__class__.__name__ == "TakeLeadership") == 1
    n2 = cl.core("n2")
    assert n2.term == term + 1 and n2.voted_for == "n2" and n2.role == Role.CANDIDATE
    assert cl.hard["n2"] == HardState(term + 1, "n2")  # persisted in the same Ready as its answers
    c.tick(cl.now)
    c.last_send_heartbeat_ms = -(1 << 40)
    c.tick(cl.now)  # force a heartbeat round now
    cl.drain("n1")
    cl.deliver(match=lambda m: m.__class__.__name__ == "Heartbeat" and m.dst == "n2")
    assert n2.role == Role.CANDIDATE and n2.term_to_take_leadership == term + 1
    cl.settle(cl.now + 200)
    assert cl.leaders() == ["n2"]
    assert n2.term == term + 1
    assert not any("TransferAborted" in line for line in cl.out)


def test_votes_are_granted_to_candidates_outside_the_latest_configuration():
    # Raft thesis §4.2.3. With DLedger's "requester not in my voters -> REJECT_UNKNOWN_LEADER"
    # this deadlocked elections for good: a partitioned leader n3 removes n1 (uncommitted, on
    # n3 alone); n1 is elected on the other side and removes n2 (uncommitted); after the heal
    # n3 (config n2,n3) refuses n1, n2 (config n1,n3: not a voter) never runs, and n3's own
    # log is too old for n2's vote. Failed before the fix (no leader 10 s after the heal).
    # (The strict reconfig check refuses n1's removal of n2, n3 being cut off; such a state
    # still comes of removals just before a partition, or by an operator's override.)
    cl = ManualCluster(config=RaftConfig(strict_reconfig_check=False))
    cl.elect("n3")
    cl.settle(cl.now + 200)
    assert cl.leaders() == ["n3"]
    cl.partition({"n3"}, {"n1", "n2"})
    cl.core("n3").remove_member("n1")
    cl.drain("n3")
    assert cl.core("n3").voters == ("n2", "n3")
    t0 = cl.now
    while not [i for i in cl.leaders() if i != "n3"] and cl.now < t0 + 5000:
        cl.settle(cl.now + 10)
    if cl.core("n2").role == Role.LEADER:
        cl.settle(cl.now + 100)
        cl.core("n2").transfer_leadership("n1")
        cl.settle(cl.now + 300)
    assert cl.core("n1").role == Role.LEADER
    cl.settle(cl.now + 50)
    cl.core("n1").remove_member("n2")
    cl.drain("n1")
    cl.settle(cl.now + 2000)  # both leaders lose their heartbeat quorum and step down
    assert not cl.leaders()
    assert (cl.core("n1").voters, cl.core("n3").voters) == (("n1", "n3"), ("n2", "n3"))
    cl.heal()
    t1 = cl.now
    while not [i for i in cl.leaders() if i in cl.core(i).voters] and cl.now < t1 + 10000:
        cl.settle(cl.now + 10)
    leaders = cl.leaders()
    assert leaders, "no leader 10 s after the network healed"
    ld = leaders[0]
    first, last = cl.propose(ld, 1)
    cl.settle(cl.now + 200)
    assert cl.core(ld).commit_index >= last
    # n1's removal of n2 won (n1's log was the newer one); n2 may have led for a moment to
    # finish it (a non-member finishing a change, Raft thesis §4.2.2)
    assert cl.core(ld).voters == ("n1", "n3") and cl.core("n3").voters == ("n1", "n3")


def test_vote_from_a_known_member_outside_the_config_is_judged_on_its_log():
    # the member check only rejects ids this node has never heard of; a removed member with
    # an up-to-date log is judged like anyone else (the live-leader rule still applies)
    cl = cluster(("n1", "n2", "n3", "n4"))
    c = cl.core("n1")
    c.remove_member("n4")
    cl.settle(cl.now + 150)
    c3 = cl.core("n3")
    assert "n4" not in c3.voters
    c3.role, c3.leader_id = Role.CANDIDATE, None  # no live leader at n3
    lg = cl.logs["n4"]
    c3.step(VoteRequest(c3.term + 1, "n4", "n3", lg.last_index(), lg.last_term()))
    assert c3.ready().messages[0].result == VoteResult.REJECT_TERM_NOT_READY  # not UNKNOWN_LEADER


def test_add_member_survives_a_leader_change_mid_add():
    # The learner used to live only in the leader's memory: a new leader forgot the add and
    # the member never joined. Now add_member appends a CONFIG entry with the learner, and
    # whoever leads promotes it once it has caught up. Failed before: voters stayed n1..n3.
    cl = cluster(spare=("n4",))
    for _ in range(5):
        cl.propose("n1", 5)
    cl.settle(cl.now + 50)
    cl.block("n1", "n4")  # the learner cannot catch up from n1
    cl.core("n1").add_member("n4")
    cl.settle(cl.now + 150)
    assert cl.core("n2").learner == "n4" and "n4" not in cl.core("n2").voters
    cl.crash("n1")
    cl.heal()
    cl.settle(cl.now + 3000)
    ld = cl.leaders()
    assert ld and ld[0] != "n1"
    assert cl.core(ld[0]).voters == ("n1", "n2", "n3", "n4") and cl.core(ld[0]).learner is None
    assert cl.core("n4").voters == ("n1", "n2", "n3", "n4")


def test_a_learner_that_never_catches_up_can_be_removed():
    cl = cluster(spare=("n4",))
    c = cl.core("n1")
    cl.crash("n4")
    c.add_member("n4")
    cl.settle(cl.now + 300)
    assert c.learner == "n4"
    c.remove_member("n4")
    cl.settle(cl.now + 300)
    assert c.learner is None and c.voters == ("n1", "n2", "n3") and "n4" not in c.progress
    assert decode_config(cl.logs["n1"].entry(cl.logs["n1"].last_index())[2]) == (("n1", "n2", "n3"), ())


def test_take_leadership_is_resent_when_lost():
    # TAKE_LEADERSHIP went out once: one lost message blocked proposals until
    # transfer_timeout_ms and then aborted the transfer. Failed before: TransferAborted.
    cl = cluster()
    c = cl.core("n1")
    cl.propose("n1", 2)
    cl.settle(cl.now + 50)
    c.transfer_leadership("n2")
    cl.drain("n1")
    assert cl.drop(lambda m: m.__class__.__name__ == "TakeLeadership") == 1
    cl.settle(cl.now + 400)
    assert cl.leaders() == ["n2"]
    assert not any("TransferAborted" in line for line in cl.out)


def test_remove_member_is_refused_while_the_voters_left_would_have_no_healthy_quorum():
    """Nodesim seeds 11 and 145: a follower was removed while the other follower was down,
    leaving a two-voter configuration whose second voter was down -- no quorum, by the
    operator's own hand (and after the leader's power loss in async mode, no way back). Like
    etcd's strict reconfig check the leader refuses, naming who is not healthy, and appends
    nothing. Failed before the check (the CONFIG entry was appended)."""
    cl = cluster()
    c = cl.core("n1")
    cl.crash("n3")
    cl.settle(cl.now + 4 * cl.cfg.heartbeat_interval_ms)
    end = cl.logs["n1"].last_index()
    with pytest.raises(MembershipChangeError,
                       match=r"remove_member n2: refused: .*need 2 .*n3 has not answered for"):
        c.remove_member("n2")
    assert c.voters == ("n1", "n2", "n3") and cl.logs["n1"].last_index() == end
    c.remove_member("n3")   # (removing the silent one leaves a healthy quorum: allowed)
    cl.settle(cl.now + 200)
    assert c.voters == ("n1", "n2") and c.commit_index == cl.logs["n1"].last_index()


def test_remove_member_is_refused_while_a_voter_left_is_recovering():
    cl = cluster()
    c = cl.core("n1")
    cl.crash("n3")
    cl.restart("n3", recovering=True)
    cl.tick(cl.now + cl.cfg.heartbeat_interval_ms, ["n1"])
    cl.deliver(match=lambda m: isinstance(m, Heartbeat))      # (n3 answers: recovering)
    cl.deliver(match=lambda m: isinstance(m, HeartbeatResponse))
    assert cl.core("n3").recovering
    with pytest.raises(MembershipChangeError, match=r"n3 is recovering after a power loss"):
        c.remove_member("n2")
    cl.settle(cl.now + 500)           # n3 catches up with n1 and recovers (recovery R3b)
    assert not cl.core("n3").recovering
    c.remove_member("n2")


def test_a_leader_whose_transfer_was_abandoned_after_take_leadership_serves_again_in_a_new_term():
    """Nodesim seed 3583: TAKE_LEADERSHIP went out (so no lease for the rest of the term: the
    transferee may still win it) and never arrived; the transfer timed out and the leader led
    on in its term without a lease -- never ready to serve again while the term lasted (for
    good, in a stable group). Now it runs again in a new term and serves. Failed before
    (lease_valid() False 3 s later, same term)."""
    cl = cluster()
    c = cl.core("n1")
    t0 = c.term
    c.transfer_leadership("n2")
    cl.drain("n1")
    deadline = cl.now + cl.cfg.transfer_timeout_ms + 3000
    while cl.now < deadline:
        cl.tick(cl.now + 10)
        while cl.queue:
            cl.drop(match=lambda m: isinstance(m, TakeLeadership))
            cl.deliver(limit=1)
    assert any("TransferAborted" in line for line in cl.out)
    (ld,) = cl.leaders()
    assert cl.core(ld).term > t0 and cl.core(ld).lease_valid()
