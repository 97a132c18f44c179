"""Quiescence (raft/quiesce.py): an idle, fully replicated leader quiesces; a quiesced core's
tick sends nothing and times nothing out; quiet heartbeats keep its followers from timing out
and its lease alive; any input wakes it; a quiesced follower whose leader dies times out and
the group elects as usual."""
from quorumlog.raft import RaftConfig, Role
from quorumlog.raft.messages import (AppendResponse, Code, DispatchState, Heartbeat,
                                      VoteRequest)
from quorumlog.testing.cluster import ManualCluster

CFG = RaftConfig()
IV = CFG.heartbeat_interval_ms
LEAK_MS = IV * CFG.max_heartbeat_leak


def _quiet_cluster():
    """n1 leads an idle, fully replicated group, quiesced on all three members."""
    cl = ManualCluster()
    cl.elect("n1")
    cl.settle(cl.now + 3 * IV)
    leader = cl.core("n1")
    assert leader.is_ready_to_serve and leader.quiescable()
    assert leader.quiesce() and leader.quiesced
    for f in ("n2", "n3"):
        assert cl.core(f).quiet_heartbeat("n1", leader.term, leader.commit_index, cl.now)
    return cl, leader


def _quiet_round(cl, leader, followers=("n2", "n3")):
    """What node/host.py's QuietBeat exchange does for one group, one interval later."""
    sent = cl.now
    cl.tick(cl.now + IV)
    for f in followers:
        if cl.core(f).quiet_heartbeat("n1", leader.term, leader.commit_index, cl.now):
            leader.quiet_ack(f, sent, cl.now)


def test_a_leader_with_work_in_flight_does_not_quiesce():
    cl = ManualCluster()
    cl.elect("n1")
    cl.settle(cl.now + 3 * IV)
    leader = cl.core("n1")
    cl.propose("n1")                       # appended, not replicated yet
    assert not leader.quiescable() and not leader.quiesce()
    cl.settle(cl.now + 3 * IV)
    assert leader.quiesce()
    # a follower that has not answered lately keeps the group awake (Q1)
    cl2 = ManualCluster()
    cl2.elect("n1")
    cl2.settle(cl2.now + 3 * IV)
    cl2.crash("n3")
    cl2.settle(cl2.now + 3 * IV)
    assert not cl2.core("n1").quiescable()


def test_quiesced_groups_send_nothing_and_stay_led_with_quiet_heartbeats():
    cl, leader = _quiet_cluster()
    cl.queue.clear()
    term = leader.term
    for _ in range(3 * CFG.max_heartbeat_leak):       # 2.1 s: three leaks
        _quiet_round(cl, leader)
        assert cl.queue == []                          # no heartbeat, no vote, nothing
    assert leader.role == Role.LEADER and leader.lease_valid() and leader.is_ready_to_serve
    assert [cl.core(f).role for f in ("n2", "n3")] == [Role.FOLLOWER] * 2
    assert all(cl.core(i).term == term and cl.core(i).quiesced for i in cl.ids)
    # without quiet acknowledgements the lease runs out (it is counted as with heartbeats)
    cl.tick(cl.now + LEAK_MS)
    assert not leader.lease_valid()


def test_any_input_wakes_a_quiesced_core_and_a_proposal_commits():
    cl, leader = _quiet_cluster()
    _quiet_round(cl, leader)
    first, last = cl.propose("n1")
    assert not leader.quiesced                        # Q3: a proposal wakes the leader
    cl.deliver()                                      # the Append wakes the followers
    assert not any(cl.core(i).quiesced for i in cl.ids)
    cl.settle(cl.now + 2 * IV)
    assert all(cl.committed[i] >= last for i in cl.ids)
    assert leader.quiesce()                           # idle again


def test_a_quiet_heartbeat_from_a_leader_not_followed_is_refused():
    cl, leader = _quiet_cluster()
    f = cl.core("n2")
    assert not f.quiet_heartbeat("n3", leader.term, leader.commit_index, cl.now)   # other src
    assert not f.quiet_heartbeat("n1", leader.term + 1, leader.commit_index, cl.now)
    assert not f.quiet_heartbeat("n1", leader.term, leader.commit_index + 5, cl.now)
    # a step of any message wakes the follower too
    f.step(Heartbeat(leader.term, "n1", "n2", leader.commit_index, 99))
    assert not f.quiesced


def test_quiet_heartbeats_to_a_held_follower_keep_its_leader_live_for_votes():
    # Q4 and seed 002's live-leader rule: a follower held quiesced beat after beat (the
    # quick path of quiet_heartbeat) still counts each one as hearing its leader, so
    # after three leaks of quiet rounds it refuses another member's vote request (the
    # leader's lease relies on that)
    cl, leader = _quiet_cluster()
    for _ in range(3 * CFG.max_heartbeat_leak):
        _quiet_round(cl, leader)
    f = cl.core("n2")
    assert f.quiesced
    f.step(VoteRequest(leader.term + 1, "n3", "n2", leader.commit_index, leader.term))
    assert f.voted_for != "n3" and f.role == Role.FOLLOWER and f.leader_id == "n1"


def test_a_quiesced_group_elects_a_new_leader_when_its_leader_dies():
    cl, leader = _quiet_cluster()
    _quiet_round(cl, leader)
    cl.crash("n1")
    died = cl.now
    # no more quiet heartbeats: the driver wakes the followers (node/host.py: the leader's
    # process unheard for 3 intervals); until then they do not time out on their own
    cl.tick(cl.now + LEAK_MS * 2, ["n2", "n3"])
    assert [cl.core(f).role for f in ("n2", "n3")] == [Role.FOLLOWER] * 2
    for f in ("n2", "n3"):
        cl.core(f).wake(died + 3 * IV)
    for _ in range(300):
        cl.settle(cl.now + 10)
        if cl.leaders():
            break
    (new,) = cl.leaders()
    assert new in ("n2", "n3") and cl.core(new).term > leader.term


def test_a_follower_left_in_truncate_with_nothing_to_send_does_not_keep_the_group_awake():
    """A stale GAP answer (reordered, below the follower's match) sets its dispatch state to
    TRUNCATE at the leader's end: no batch to send, so no answer ever moves it back to APPEND
    while the group is idle -- Q1 required APPEND and the group never quiesced (nodesim seed
    35 with 4 groups). Matched to the end with nothing in flight, it is whole: the leader
    quiesces, and the follower holds it quiesced."""
    cl = ManualCluster()
    cl.elect("n1")
    cl.settle(cl.now + 3 * IV)
    leader = cl.core("n1")
    last = leader.log.last_index()
    assert leader.progress["n2"].match == last
    leader.step(AppendResponse(leader.term, "n2", "n1", Code.GAP, 0, last - 1, last - 1,
                               last - 1, 0, leader.progress["n2"].epoch))
    assert leader.progress["n2"].state == DispatchState.TRUNCATE       # (the state described)
    cl.settle(cl.now + 3 * IV)
    assert leader.progress["n2"].state == DispatchState.TRUNCATE       # idle: still there
    assert leader.quiesce()
    for f in ("n2", "n3"):
        assert cl.core(f).quiet_heartbeat("n1", leader.term, leader.commit_index, cl.now)
    # the next proposal's first batch goes out in TRUNCATE (window 1), and replication resumes
    cl.propose("n1")
    cl.settle(cl.now + 3 * IV)
    assert leader.progress["n2"].state == DispatchState.APPEND
    assert leader.progress["n2"].match == leader.log.last_index() == leader.commit_index
