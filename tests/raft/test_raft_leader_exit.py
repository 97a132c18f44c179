"""A follower told that its leader's process exited (RaftCore.on_peer_down: the driver's
redial to it was refused) gives the leader up and campaigns at once, pre-vote first; the
leak's timeout stays the only way out of a leader that went silent (docs/raft.md "A leader
whose process exited")."""
import dataclasses
import functools

from test_raft_election import make as make_core

from quorumlog.raft import RaftConfig, Role, VoteResult
from quorumlog.raft.messages import Heartbeat, VoteRequest, VoteResponse

CFG = RaftConfig()
LEAK_MS = CFG.heartbeat_interval_ms * CFG.max_heartbeat_leak
make = functools.partial(make_core, config=CFG)


def _follower_of(leader="n3", term=3, config=CFG):
    c = make_core(term=term, log_terms=(1, term), config=config)
    c.tick(10)
    c.step(Heartbeat(term, leader, "n1", 0, 1))
    c.ready()
    assert c.role == Role.FOLLOWER and c.leader_id == leader
    return c


def test_follower_campaigns_at_once_when_its_leaders_process_exits():
    c = _follower_of()
    c.on_peer_down("n3")
    r = c.ready()
    pre = [m for m in r.messages if isinstance(m, VoteRequest)]
    assert c.role == Role.CANDIDATE and c.leader_id is None
    assert sorted(m.dst for m in pre) == ["n2", "n3"] and all(m.pre and m.term == 4 for m in pre)
    assert c.term == 3 and r.hard_state is None        # (pre-vote: nothing raised yet)
    c.step(VoteResponse(3, "n2", "n1", 4, VoteResult.ACCEPT, pre=True))
    real = [m for m in c.ready().messages if isinstance(m, VoteRequest)]
    assert c.term == 4 and real and not any(m.pre for m in real)


def test_another_peer_exiting_changes_nothing():
    c = _follower_of()
    c.on_peer_down("n2")
    assert c.role == Role.FOLLOWER and c.leader_id == "n3"
    assert not [m for m in c.ready().messages if isinstance(m, VoteRequest)]


def test_the_exit_hint_can_be_turned_off():
    c = _follower_of(config=dataclasses.replace(CFG, campaign_on_leader_exit=False))
    c.on_peer_down("n3")
    assert c.role == Role.FOLLOWER and c.leader_id == "n3"
    c.tick(10 + LEAK_MS - 10)
    assert c.role == Role.FOLLOWER             # the leak alone, as before
    c.tick(10 + LEAK_MS + 1)
    assert c.role == Role.CANDIDATE


def test_a_silent_leader_is_given_up_only_after_the_leak():
    c = _follower_of()
    c.tick(10 + LEAK_MS - 10)
    assert c.role == Role.FOLLOWER
    c.tick(10 + LEAK_MS + 1)
    assert c.role == Role.CANDIDATE


def test_a_voter_still_hearing_the_leader_rejects_and_is_asked_again_soon():
    # the other follower has not seen the connection close yet (a few ms behind): it still
    # applies the live-leader rule -- the lease's promise -- and the candidate asks again
    # within half a minimum vote interval, not after a vote interval plus the leak
    c = _follower_of()
    c.on_peer_down("n3")
    c.ready()
    c.step(VoteResponse(3, "n2", "n1", 4, VoteResult.REJECT_ALREADY_HAS_LEADER, pre=True))
    c.step(VoteResponse(3, "n3", "n1", 4, VoteResult.REJECT_ALREADY_HAS_LEADER, pre=True))
    assert c._vote is None and c.term == 3
    assert c.next_time_to_request_vote <= c.now_ms + CFG.min_vote_interval_ms // 2


def test_a_follower_still_hearing_its_leader_rejects_the_early_candidate():
    # the lease: a follower that did not see its leader exit refuses the pre-vote
    c = _follower_of(leader="n3")
    c.step(VoteRequest(4, "n2", "n1", 2, 3, pre=True))
    r = c.ready()
    assert [m.result for m in r.messages] == [VoteResult.REJECT_ALREADY_HAS_LEADER]
    c.on_peer_down("n3")                        # ... until it sees the exit itself
    c.ready()
    c.step(VoteRequest(4, "n2", "n1", 2, 3, pre=True))
    assert [m.result for m in c.ready().messages] == [VoteResult.ACCEPT]


def test_a_quiesced_follower_wakes_when_its_leaders_process_exits():
    # quiesce.py Q3: a quiesced core's ticks do nothing; one that campaigned while quiesced
    # would never time its vote round out (G > 1: the host skips quiesced cores' ticks)
    c = _follower_of()
    c.quiesced = True
    c.on_peer_down("n3")
    assert c.role == Role.CANDIDATE and not c.quiesced
    c.ready()
    c.tick(10 + CFG.vote_response_timeout_ms + 1)     # the round times out (no answers)
    assert c._vote is None
