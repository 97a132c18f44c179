"""DLedger leader election, one test per rule (seed-000-dledger-leader-election.txt, "DLedger §"
below names the passage), plus seed 002's live-leader rule and our documented deviations."""
import random

import pytest

from quorumlog.raft import HardState, MemLog, ParseResult, RaftConfig, RaftCore, Role, VoteResult
from quorumlog.testing.cluster import ManualCluster
from quorumlog.raft.log import EntryKind
from quorumlog.raft.messages import (Code, Heartbeat, HeartbeatResponse, VoteRequest,
                                     VoteResponse)

# DLedger's own candidacy, without the pre-vote phase (RaftConfig.pre_vote, on by default,
# runs before every term-raising campaign; its rules are tested in test_raft_prevote.py, and
# the cluster-level tests below that use ManualCluster() run with it)
CFG = RaftConfig(pre_vote=False)
LEAK_MS = CFG.heartbeat_interval_ms * CFG.max_heartbeat_leak


def make(node="n1", voters=("n1", "n2", "n3"), term=0, voted_for=None, log_terms=(), seed=1,
         config=CFG):
    lg = MemLog()
    for t in log_terms:
        lg.append_control(t, EntryKind.NOOP, b"")
    lg.flush()
    return RaftCore(node, lg, random.Random(seed), config, hard_state=HardState(term, voted_for),
                    voters=voters, peers=voters)


def vote(core, src="n2", term=1, end_index=0, end_term=0, transfer=False):
    core.step(VoteRequest(term, src, core.id, end_index, end_term, transfer))
    r = core.ready()
    resp = [m for m in r.messages if isinstance(m, VoteResponse)]
    assert len(resp) == 1
    return resp[0].result, r


def start_round(core):
    """Tick the candidate until it has sent its vote requests; return them."""
    for t in range(0, 5000, 5):
        core.tick(t)
        r = core.ready()
        reqs = [m for m in r.messages if isinstance(m, VoteRequest)]
        if reqs:
            return reqs, r
    raise AssertionError("no vote round started")


# -- roles and candidacy ------------------------------------------------------------------
def test_node_starts_as_candidate():
    # DLedger §选主: "初始状态下,每个节点的角色为Candidate"
    assert make().role == Role.CANDIDATE


def test_candidate_waits_for_next_time_to_request_vote():
    # DLedger §发起选举 1(1): run only when nextTimeToRequestVote has come
    c = make()
    c.tick(c.next_time_to_request_vote - 1)
    assert not [m for m in c.ready().messages if isinstance(m, VoteRequest)]
    reqs, _ = start_round(c)
    assert {m.dst for m in reqs} == {"n2", "n3"}


def test_candidate_increases_term_after_wait_to_vote_next():
    # DLedger §发起选举 3(1): the term goes up when the last result was WAIT_TO_VOTE_NEXT
    c = make(term=4)
    c.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
    reqs, _ = start_round(c)
    assert c.term == 5 and all(m.term == 5 for m in reqs)


def test_candidate_keeps_term_after_wait_to_revote():
    # DLedger §发起选举 3: otherwise the current term is used -- within one candidacy
    c = make(term=3)
    reqs, _ = start_round(c)          # first round: term 4
    assert c.term == 4
    c.tick(c._vote.deadline_ms)       # nobody answered: valid < quorum -> WAIT_TO_REVOTE
    assert c.last_parse_result == ParseResult.WAIT_TO_REVOTE
    reqs, _ = start_round(c)
    assert c.term == 4 and all(m.term == 4 for m in reqs)


@pytest.mark.parametrize("voted_for", [None, "n2"])
def test_node_that_did_not_run_in_its_term_takes_the_next_one(voted_for):
    # deviation (docs/raft.md): re-running in a term it adopted or voted in elsewhere let a
    # new configuration's quorum elect a second leader in one term (simulation seed 13790)
    c = make(term=4, voted_for=voted_for)
    c.last_parse_result = ParseResult.WAIT_TO_REVOTE
    reqs, r = start_round(c)
    assert c.term == 5 and all(m.term == 5 for m in reqs) and r.hard_state == HardState(5, "n1")


def test_candidacy_interrupted_by_a_leader_takes_the_next_term():
    # deviation: n1 ran in term 4 and lost; it followed the term-4 leader; after that leader
    # goes quiet it must not run in term 4 again (simulation seed 28440)
    c = make(term=3)
    start_round(c)
    assert c.term == 4 and c.voted_for == "n1"
    c.step(Heartbeat(4, "n2", "n1", 0, 1))
    assert c.role == Role.FOLLOWER
    c.ready()
    c.tick(c.now_ms + LEAK_MS + 1)
    assert c.role == Role.CANDIDATE
    reqs, _ = start_round(c)
    assert c.term == 5


def test_need_increase_term_immediately_adopts_known_max_term_then_waits():
    # DLedger §发起选举 1(2)+3(2): needIncreaseTermImmediately -> next term at once; DLedger's
    # maintainAsCandidate then schedules the next vote instead of voting in the same pass
    c = make(term=2)
    res, _ = vote(c, term=7)
    assert res == VoteResult.REJECT_TERM_NOT_READY and c.need_increase_term_immediately
    c.tick(1)
    r = c.ready()
    assert c.term == 7 and c.voted_for is None and r.hard_state == HardState(7, None)
    assert not [m for m in r.messages if isinstance(m, VoteRequest)]
    assert not c.need_increase_term_immediately


def test_vote_request_carries_ledger_end_and_self_vote_is_persisted_first():
    # DLedger §发起投票请求: term, LedgerEndIndex, LedgerEndTerm; the candidate votes for itself
    c = make(log_terms=(1, 1, 2), term=2)
    reqs, r = start_round(c)
    assert all((m.ledger_end_index, m.ledger_end_term) == (3, 2) for m in reqs)
    assert r.hard_state == HardState(c.term, "n1")  # written before the requests leave


def test_restarted_node_never_campaigns_in_its_old_term():
    # deviation (docs/raft.md): found by the simulation, seed 39
    c = make(term=6, voted_for="n1")
    reqs, _ = start_round(c)
    assert c.term == 7


# -- answering vote requests (DLedger handleVote, in its order) -------------------------------
def test_vote_reject_unknown_leader():
    c = make()
    assert vote(c, src="n9")[0] == VoteResult.REJECT_UNKNOWN_LEADER


def test_vote_reject_expired_ledger_term():
    c = make(log_terms=(1, 2), term=2)
    assert vote(c, term=5, end_index=9, end_term=1)[0] == VoteResult.REJECT_EXPIRED_LEDGER_TERM


def test_vote_reject_small_ledger_end_index():
    c = make(log_terms=(1, 1, 1), term=1)
    assert vote(c, term=5, end_index=2, end_term=1)[0] == VoteResult.REJECT_SMALL_LEDGER_END_INDEX


def test_ledger_checks_come_before_term_checks():
    # a stale-log candidate with a bigger term must not push our term up
    c = make(log_terms=(1, 2), term=2)
    vote(c, term=9, end_index=1, end_term=1)
    assert c.term == 2 and c.known_max_term == 2 and not c.need_increase_term_immediately


def test_vote_reject_expired_vote_term():
    c = make(term=5)
    assert vote(c, term=4)[0] == VoteResult.REJECT_EXPIRED_VOTE_TERM


def test_vote_equal_term_already_voted():
    c = make(term=3, voted_for="n3")
    assert vote(c, term=3)[0] == VoteResult.REJECT_ALREADY_VOTED


def test_vote_equal_term_already_has_leader():
    c = make(term=3, voted_for="n3")
    c.leader_id = "n3"
    c.role = Role.CANDIDATE  # no live-leader lease: only the voted-for/leader rule applies
    assert vote(c, term=3)[0] == VoteResult.REJECT_ALREADY_HAS_LEADER


def test_vote_equal_term_repeat_for_same_requester_is_accepted():
    c = make(term=3, voted_for="n2")
    res, r = vote(c, term=3)
    assert res == VoteResult.ACCEPT and r.hard_state is None  # nothing new to persist


def test_vote_bigger_term_becomes_candidate_and_answers_term_not_ready():
    c = make(term=3)
    c.role, c.leader_id = Role.FOLLOWER, None
    res, _ = vote(c, term=8)
    assert res == VoteResult.REJECT_TERM_NOT_READY
    assert c.role == Role.CANDIDATE and c.need_increase_term_immediately and c.known_max_term == 8
    assert c.term == 3  # the term itself moves only in nextTerm()


def test_vote_reject_term_small_than_ledger():
    c = make(log_terms=(1, 5), term=3)  # (only reachable with a log term above currTerm)
    res, r = vote(c, term=3, end_index=2, end_term=5)
    assert res == VoteResult.REJECT_TERM_SMALL_THAN_LEDGER
    assert [m.term for m in r.messages] == [5]  # answered with the ledger end term


def test_vote_reject_taking_leadership():
    c = make(term=4)
    c.term_to_take_leadership = 4
    assert vote(c, term=4)[0] == VoteResult.REJECT_TAKING_LEADERSHIP


def test_vote_accept_is_persisted_before_the_answer():
    c = make(term=2)
    res, r = vote(c, term=2)
    assert res == VoteResult.ACCEPT
    assert r.hard_state == HardState(2, "n2")  # same Ready: the driver writes it before sending


def test_member_hearing_a_live_leader_rejects_votes():
    # seed 002 §2.4 删除节点 4): nodes receiving the leader's appends reject other vote requests
    c = make(term=2)
    c.step(Heartbeat(2, "n3", "n1", 0, 1))
    c.ready()
    assert c.role == Role.FOLLOWER
    assert vote(c, term=9)[0] == VoteResult.REJECT_ALREADY_HAS_LEADER
    assert c.term == 2 and not c.need_increase_term_immediately
    # ...unless the vote comes from a transferee taking leadership
    assert vote(c, term=9, transfer=True)[0] == VoteResult.REJECT_TERM_NOT_READY


def test_live_leader_rejection_expires_after_heartbeat_leak():
    c = make(term=2)
    c.step(Heartbeat(2, "n3", "n1", 0, 1))
    c.now_ms = LEAK_MS  # no tick: still a follower, but the leader is no longer live
    assert vote(c, term=9)[0] == VoteResult.REJECT_TERM_NOT_READY


# -- the candidate's tally (DLedger's parse ladder) -------------------------------------------
def parse_with(results, voters=("n1", "n2", "n3", "n4", "n5"), term=3, terms=None):
    c = make(voters=voters, term=term)
    c.last_parse_result = ParseResult.WAIT_TO_REVOTE
    reqs, _ = start_round(c)
    for k, (peer, res) in enumerate(results):
        t = (terms or {}).get(peer, c.term)
        c.step(VoteResponse(t, peer, "n1", c.term, res))
    if c._vote is not None:  # not latched yet: the round ends at its deadline
        c.tick(c._vote.deadline_ms)
    return c


def test_parse_passed_becomes_leader():
    c = parse_with([("n2", VoteResult.ACCEPT), ("n3", VoteResult.ACCEPT)])
    assert c.last_parse_result == ParseResult.PASSED and c.role == Role.LEADER


def test_parse_bigger_term_is_wait_to_vote_next_and_adopted():
    c = parse_with([("n2", VoteResult.REJECT_EXPIRED_VOTE_TERM), ("n3", VoteResult.ACCEPT),
                    ("n4", VoteResult.ACCEPT), ("n5", VoteResult.ACCEPT)], terms={"n2": 9})
    assert c.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT
    assert c.role == Role.CANDIDATE and c.known_max_term == 9


def test_parse_already_has_leader_waits_to_revote_with_extra_wait():
    c = parse_with([("n2", VoteResult.REJECT_ALREADY_HAS_LEADER)])
    assert c.last_parse_result == ParseResult.WAIT_TO_REVOTE
    assert c.next_time_to_request_vote >= c.now_ms + CFG.min_vote_interval_ms + LEAK_MS


def test_parse_valid_below_quorum_waits_to_revote():
    c = parse_with([("n2", VoteResult.UNKNOWN), ("n3", VoteResult.UNKNOWN)])
    assert c.last_parse_result == ParseResult.WAIT_TO_REVOTE


def test_parse_bigger_ledger_majority_waits_longer():
    c = parse_with([("n2", VoteResult.REJECT_SMALL_LEDGER_END_INDEX),
                    ("n3", VoteResult.REJECT_EXPIRED_LEDGER_TERM),
                    ("n4", VoteResult.REJECT_SMALL_LEDGER_END_INDEX),
                    ("n5", VoteResult.ACCEPT)])
    assert c.last_parse_result == ParseResult.WAIT_TO_REVOTE
    assert c.next_time_to_request_vote >= c.now_ms + CFG.min_vote_interval_ms + CFG.max_vote_interval_ms


def test_parse_not_ready_revotes_immediately():
    c = parse_with([("n2", VoteResult.REJECT_TERM_NOT_READY), ("n3", VoteResult.REJECT_TERM_NOT_READY)])
    assert c.last_parse_result == ParseResult.REVOTE_IMMEDIATELY
    term = c.term
    reqs, _ = start_round(c)  # at once, same term
    assert reqs[0].term == term


def test_parse_otherwise_wait_to_vote_next():
    c = parse_with([("n2", VoteResult.REJECT_ALREADY_VOTED), ("n3", VoteResult.REJECT_ALREADY_VOTED),
                    ("n4", VoteResult.REJECT_ALREADY_VOTED), ("n5", VoteResult.REJECT_ALREADY_VOTED)])
    assert c.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT


def test_quorum_is_members_over_two_plus_one():
    assert make(voters=("a", "b", "n1", "d")).quorum == 3
    assert make(voters=("a", "b", "n1", "d", "e")).quorum == 3


# -- heartbeats (DLedger handleHeartBeat and sendHeartbeats) --------------------------------
def hb(core, src="n2", term=1):
    core.step(Heartbeat(term, src, core.id, 0, 1))
    return [m for m in core.ready().messages if isinstance(m, HeartbeatResponse)][0].code


def test_heartbeat_unknown_member():
    assert hb(make(), src="n9") == Code.UNKNOWN_MEMBER


def test_heartbeat_unexpected_member():
    assert hb(make(), src="n1") == Code.UNEXPECTED_MEMBER


def test_heartbeat_expired_term():
    assert hb(make(term=4), term=3) == Code.EXPIRED_TERM


def test_heartbeat_equal_term_without_leader_makes_follower():
    c = make(term=4)
    assert hb(c, term=4) == Code.SUCCESS
    assert c.role == Role.FOLLOWER and c.leader_id == "n2"


def test_heartbeat_equal_term_same_leader_refreshes_timer():
    c = make(term=4)
    hb(c, term=4)
    c.now_ms = 250
    assert hb(c, term=4) == Code.SUCCESS and c.last_leader_heartbeat_ms == 250


def test_heartbeat_from_another_leader_is_inconsistent():
    c = make(term=4)
    hb(c, term=4)
    assert hb(c, src="n3", term=4) == Code.INCONSISTENT_LEADER


def test_heartbeat_bigger_term_candidate_term_not_ready():
    c = make(term=4)
    assert hb(c, term=6) == Code.TERM_NOT_READY
    assert c.role == Role.CANDIDATE and c.need_increase_term_immediately and c.known_max_term == 6


def test_follower_without_heartbeat_for_leak_becomes_candidate():
    c = make(term=4)
    hb(c, term=4)
    c.tick(LEAK_MS)
    assert c.role == Role.FOLLOWER
    c.tick(LEAK_MS + 1)
    assert c.role == Role.CANDIDATE


def elected(cfg=CFG):
    cl = ManualCluster(config=cfg)
    cl.elect("n1")
    assert cl.leaders() == ["n1"]
    return cl, cl.core("n1")


def leader_round(cl, answers):
    """Let n1 send a heartbeat round and answer it with {peer: (code, term)}."""
    c = cl.core("n1")
    cl.queue.clear()
    cl.tick(c.last_send_heartbeat_ms + CFG.heartbeat_interval_ms, ["n1"])
    hbs = [m for m in cl.queue if isinstance(m, Heartbeat)]
    cl.queue.clear()
    for m in hbs:
        if m.dst in answers:
            code, term = answers[m.dst]
            c.step(HeartbeatResponse(term, m.dst, "n1", code, m.seq))
    cl.drain("n1")
    return c


def test_leader_records_time_on_quorum_of_heartbeat_success():
    cl, c = elected()
    c = leader_round(cl, {"n2": (Code.SUCCESS, c.term)})
    assert c.last_succ_heartbeat_ms == cl.now and c.role == Role.LEADER


def test_leader_heartbeats_again_at_once_on_success_plus_not_ready_quorum():
    cl, c = elected()
    c = leader_round(cl, {"n2": (Code.TERM_NOT_READY, c.term - 1), "n3": (Code.TERM_NOT_READY, c.term - 1)})
    assert c.role == Role.LEADER and c.last_send_heartbeat_ms < 0  # -1 in DLedger: send next tick


def test_leader_steps_down_on_bigger_term():
    cl, c = elected()
    c = leader_round(cl, {"n2": (Code.EXPIRED_TERM, c.term + 3)})
    assert c.role == Role.CANDIDATE and c.known_max_term == c.term + 3


def test_leader_steps_down_on_inconsistent_leader():
    cl, c = elected()
    c = leader_round(cl, {"n2": (Code.INCONSISTENT_LEADER, c.term), "n3": (Code.UNKNOWN_MEMBER, c.term)})
    assert c.role == Role.CANDIDATE


def test_leader_steps_down_without_quorum_for_heartbeat_leak():
    cl, c = elected()
    cl.partition({"n1"})
    t0 = cl.now
    while cl.now < t0 + LEAK_MS + 2 * CFG.heartbeat_interval_ms and c.role == Role.LEADER:
        cl.tick(cl.now + 10, ["n1"])
    assert c.role == Role.CANDIDATE
    assert cl.now - t0 > LEAK_MS


def test_dledger_default_timings_elect_and_commit():
    cl = ManualCluster(config=RaftConfig.dledger_defaults())
    cl.settle(8000, step_ms=50)
    assert len(cl.leaders()) == 1
    ld = cl.leaders()[0]
    first, last = cl.propose(ld, 3)
    cl.settle(cl.now + 200, step_ms=50)
    assert cl.core(ld).commit_index == last
    cl.settle(cl.now + 2000, step_ms=50)  # followers learn it from the next heartbeat
    assert all(cl.core(i).commit_index == last for i in cl.ids)


def test_default_timings_fail_over_below_one_second():
    cl = ManualCluster()
    cl.settle(1000)
    old = cl.leaders()[0]
    cl.crash(old)
    t0 = cl.now
    while not [i for i in cl.leaders() if i != old] and cl.now < t0 + 5000:
        cl.settle(cl.now + 10)
    assert cl.now - t0 < 1500, f"fail-over took {cl.now - t0} ms"


def test_following_a_leader_clears_need_increase_term_immediately():
    # Review item 2: a stale need_increase_term_immediately (and known_max_term) survived
    # becoming a follower, so the next candidacy bumped the term twice (adopt, then run).
    c = make("n2", term=3)
    c.step(Heartbeat(5, "n1", "n2", 0, 1))  # bigger term: CANDIDATE, TERM_NOT_READY
    assert c.need_increase_term_immediately and c.known_max_term == 5
    c.step(Heartbeat(3, "n3", "n2", 0, 1))  # a live leader at our term
    assert c.role == Role.FOLLOWER
    assert not c.need_increase_term_immediately and c.known_max_term == 3
    c.ready()
    t = 0
    while c.role == Role.FOLLOWER or c._vote is None:
        t += 10
        c.tick(t)
        assert t < 5000
    assert c.term == 4  # one bump, straight into a vote round


def test_becoming_leader_clears_need_increase_term_immediately():
    c = make("n1", term=3)
    v = start_round(c)
    c.step(Heartbeat(7, "n3", "n1", 0, 1))  # bigger term seen while the round is open
    assert c.need_increase_term_immediately
    c.step(VoteResponse(c.term, "n2", "n1", c.term, VoteResult.ACCEPT))
    assert c.role == Role.LEADER
    assert not c.need_increase_term_immediately and c.known_max_term == c.term


def _lockstep_failover(seed):
    """n1 dies; n2 and n3 tick at exactly the same instants (every 10 ms). Returns the time
    each follower first campaigned (None: it never had to) and the fail-over time."""
    cl = ManualCluster(seed=seed)
    cl.elect("n1")
    cl.settle(cl.now + 200)
    cl.crash("n1")
    t0 = cl.now
    first = {"n2": None, "n3": None}
    while not cl.leaders() and cl.now - t0 < 5000:
        cl.tick(cl.now + 10, nodes=["n2", "n3"])
        for i in first:
            if first[i] is None and cl.core(i)._vote is not None:
                first[i] = cl.now - t0
        cl.deliver()
    return first, cl.now - t0


def test_follower_that_loses_its_leader_campaigns_after_a_random_delay():
    # Review item 3: _tick_follower's candidacy used to start the vote round on the very next
    # tick, so followers ticking in lockstep always campaigned at the same instant, split the
    # vote and failed over in 637-968 ms; with a random delay they rarely collide.
    same, worst = 0, 0
    for seed in range(20):
        first, took = _lockstep_failover(seed)
        if first["n2"] is not None and first["n2"] == first["n3"]:
            same += 1
        worst = max(worst, took)
    assert same <= 4, f"{same}/20 seeds: both followers campaigned at the same instant"
    assert worst < 1000, f"lockstep fail-over took up to {worst} ms"


def test_duplicated_heartbeat_answer_counts_once():
    # 5 voters, quorum 3: the leader and one follower's SUCCESS delivered twice made a quorum
    # (and refreshed the round's success time). Failed before: last_succ_heartbeat_ms moved.
    cl = ManualCluster(("n1", "n2", "n3", "n4", "n5"), config=CFG)
    cl.elect("n1")
    c = cl.core("n1")
    before = c.last_succ_heartbeat_ms
    cl.queue.clear()
    cl.tick(c.last_send_heartbeat_ms + CFG.heartbeat_interval_ms, ["n1"])
    hb = [m for m in cl.queue if isinstance(m, Heartbeat) and m.dst == "n2"][0]
    cl.queue.clear()
    for _ in range(2):
        c.step(HeartbeatResponse(c.term, "n2", "n1", Code.SUCCESS, hb.seq))
    assert c.last_succ_heartbeat_ms == before and c._hb_succ == 2
    c.step(HeartbeatResponse(c.term, "n3", "n1", Code.SUCCESS, hb.seq))
    assert c.last_succ_heartbeat_ms == cl.now  # a real third answer does


def test_candidate_adopts_a_bigger_term_while_its_vote_round_is_open():
    # need_increase_term_immediately was ignored until the open round's deadline: a candidate
    # asked to catch up (a vote request at a bigger term) could not vote for the asker in the
    # meantime. Failed before: the term was still the old one after the next tick.
    c = make(term=3)
    start_round(c)
    assert c.term == 4 and c._vote is not None
    res, _ = vote(c, src="n3", term=9, end_index=0, end_term=0)
    assert res == VoteResult.REJECT_TERM_NOT_READY and c.need_increase_term_immediately
    c.tick(c.now_ms + 1)  # well before the round's deadline
    assert c.term == 9 and c._vote is None and not c.need_increase_term_immediately
    assert vote(c, src="n3", term=9)[0] == VoteResult.ACCEPT
