"""Leader election: DLedger's candidacy, vote handling and tally, pre-vote, the live-leader rule,
the follower's leak timeout (docs/raft.md "Election: DLedger's rules").

Mixed into RaftCore (core.py), whose attributes these methods share; pure, like the core."""
from __future__ import annotations

from .messages import ParseResult, Role, VoteRequest, VoteResponse, VoteResult
from .state import NEVER, VoteRound


class ElectionRules:
    # now_ms when this node last gave up a leader whose process exited (on_peer_down)
    _leader_exit_ms = NEVER

    def on_peer_down(self, peer: str) -> None:
        """The driver's transport was refused a connection to `peer` (net/seam.py
        on_peer_lost with refused=True): nothing listens at its address, its process is gone
        (killed, crashed, stopped). A follower of `peer` gives it up now and campaigns (pre-
        vote first) instead of waiting out the leak: fail-over in milliseconds rather than
        the leak's 700 ms. The leak stays the only way out of a leader that went silent (a
        partition, a stalled process, a dead host): no socket says anything then.

        The lease (docs/raft.md "The lease and reads") rests on followers refusing votes
        for the leak after a heartbeat; one that gave its leader up this way breaks that
        promise only to a process that no longer exists, which serves nothing. (A firewall
        that answers a live leader's port with resets while the leader runs would break
        it: RaftConfig.campaign_on_leader_exit=False turns this off.)"""
        if (not self.cfg.campaign_on_leader_exit or self.role != Role.FOLLOWER
                or self.leader_id != peer):
            return
        self.quiesced = False           # (quiesce.py Q3: an input that acts wakes the group)
        self._leader_exit_ms = self.now_ms
        self._become_candidate(self.term)
        self.next_time_to_request_vote = self.now_ms
        self._tick_candidate()          # (now, not at the next tick)

    def _vote_interval(self) -> int:
        c = self.cfg
        if self.term_to_take_leadership == self.term and self.term_to_take_leadership >= 0:
            return c.min_take_leadership_vote_interval_ms + self.rng.randrange(
                c.max_take_leadership_vote_interval_ms - c.min_take_leadership_vote_interval_ms)
        return c.min_vote_interval_ms + self.rng.randrange(
            c.max_vote_interval_ms - c.min_vote_interval_ms)

    def _next_term(self, adopt: bool) -> None:
        """DLedger nextTerm(). adopt (needIncreaseTermImmediately: someone asked us to catch
        up): take the known max term, so we can vote for the asker at it. Otherwise (last
        result WAIT_TO_VOTE_NEXT) run one term *past* the biggest seen: DLedger runs at the
        known max itself, where the others have usually voted for themselves already, and
        with several candidates the one with the best log can chase forever (simulation
        seed 6943)."""
        base = self.known_max_term if self.known_max_term > self.term else self.term
        self.term = base if adopt and base > self.term else base + 1
        self.known_max_term = self.term
        self.voted_for = None
        self._hs_dirty = True

    def _tick_candidate(self) -> None:
        now = self.now_ms
        v = self._vote
        if v is not None:
            if self.need_increase_term_immediately:
                # a bigger term is out there (someone asked us to catch up): this round cannot
                # win; drop it and adopt the term now, not at the round's deadline
                self._vote = None
            else:
                if now >= v.deadline_ms:
                    self._parse_vote()
                return
        if now < self.next_time_to_request_vote and not self.need_increase_term_immediately:
            return
        if self.need_increase_term_immediately:
            # someone with a bigger term asked us to catch up: adopt it (so we can vote for
            # the asker at it), then wait for the next vote time (DLedger)
            self._next_term(True)
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
            if self.term_to_take_leadership == self.term and self.voted_for is None:
                # the transferee: the term it adopted is the one it campaigns in at once
                self.voted_for = self.id
                self._campaign_term = self.term
            self.next_time_to_request_vote = now + self._vote_interval()
            self.need_increase_term_immediately = False
            return
        if self.recovering_term:
            # recovery R2: its log may lack entries it acknowledged; it must not lead on it
            self.next_time_to_request_vote = now + self._vote_interval()
            return
        if now < self._vote_guard_until_ms and self.term_to_take_leadership != self.term:
            self.next_time_to_request_vote = self._vote_guard_until_ms  # (restarted: see __init__)
            return
        if not self._may_campaign():
            # learners and removed members never run and never raise their term on their own
            # (they adopt terms, above, so they can follow a leader of a newer term)
            self.next_time_to_request_vote = now + self._vote_interval()
            return
        # DLedger re-runs in its current term after WAIT_TO_REVOTE even if its candidacy was
        # interrupted (it adopted the term, followed a leader in it, or voted for someone
        # else). After membership changes that elects a second leader in one term: a quorum of
        # the new voters need not intersect the quorum that elected the first (simulation
        # seeds 13790 and 28440, found by the 100,000-seed soak). Re-running in the same term
        # is only a continuation of our own uninterrupted candidacy (as in Raft, where the
        # re-votes are retransmissions); anything else -- and WAIT_TO_VOTE_NEXT -- takes the
        # next term, and with pre-vote only once a quorum said it would vote for us.
        if (self.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT
                or not (self._campaign_term == self.term and self.voted_for == self.id)):
            if self._needs_pre_vote():
                self._start_vote_round(pre=True)
                return
            self._next_term(False)
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self._start_vote_round()

    def _may_campaign(self) -> bool:
        """Voters run. A node outside its latest configuration runs only while that
        configuration is uncommitted and it is a voter of the last committed one: it may hold
        the only copy of a change that removed it (its leader crashed with the entry
        unflushed), and the remaining voters -- whose logs are shorter -- cannot be elected
        without its vote (simulation: voters {n1} on n2 only, n1 still at {n1, n2}). As in the
        Raft thesis §4.2.2 it then leads without counting itself, and steps down once the
        configuration commits."""
        if self.id in self._voter_set:
            return True
        if self.configs[-1][0] <= self.commit_index:
            return False
        committed = self.configs[0][1]
        for idx, voters, _ in self.configs:
            if idx > self.commit_index:
                break
            committed = voters
        return self.id in committed

    def _needs_pre_vote(self) -> bool:
        """Pre-vote before every campaign that raises the term, except in a brand-new group
        (term 0, empty log: no leader can exist yet to be disrupted)."""
        return self.cfg.pre_vote and (self.term > 0 or self.log.last_index() > 0)

    def _start_vote_round(self, pre: bool = False) -> None:
        """Send a vote round at our term, or (pre) a pre-vote round for the term we would take
        next: receivers answer as they would vote, change nothing, and we raise our term only
        once a quorum accepted (_parse_vote)."""
        lg = self.log
        end_index, end_term = lg.last_index(), lg.last_term()
        me = self.id
        if pre:
            term = (self.known_max_term if self.known_max_term > self.term else self.term) + 1
            v = self._vote = VoteRound(term, self.now_ms + self.cfg.vote_response_timeout_ms, True)
            v.known_max_term = self.term
            own = self._handle_pre_vote(VoteRequest(term, me, me, end_index, end_term, False, True), True)
            if me in self._voter_set:
                self._tally(v, me, own, self.term)
            for peer in self.voters:
                if peer != me:
                    self._msgs.append(VoteRequest(term, me, peer, end_index, end_term, False, True))
            self._maybe_parse_vote(v)
            return
        taking = self.term_to_take_leadership == self.term
        v = self._vote = VoteRound(self.term, self.now_ms + self.cfg.vote_response_timeout_ms)
        own = self._handle_vote(VoteRequest(self.term, me, me, end_index, end_term, taking), True)
        if own == VoteResult.ACCEPT:
            self._campaign_term = self.term
        if me in self._voter_set:  # (a non-member finishing a change does not count itself)
            self._tally(v, me, own, self.term)
        for peer in self.voters:
            if peer != me:
                self._msgs.append(VoteRequest(self.term, me, peer, end_index, end_term, taking))
        self._maybe_parse_vote(v)

    def _on_vote_request(self, m: VoteRequest) -> None:
        if m.pre:
            result = self._handle_pre_vote(m, False)
            if result == VoteResult.ACCEPT and self.role == Role.CANDIDATE and m.src > self.id:
                self._defer_to(m.src)
        else:
            result = self._handle_vote(m, False)
        t = self.log.last_term() if result == VoteResult.REJECT_TERM_SMALL_THAN_LEDGER else self.term
        self._msgs.append(VoteResponse(t, self.id, m.src, m.term, result, m.pre))

    def _defer_to(self, peer: str) -> None:
        """We just told `peer` (log at least as good as ours, larger id) that we would vote
        for it: it is about to run in the term we would take. Two followers that lost the same
        leader time out within a few ms of each other; running both splits the vote and costs
        a whole vote interval (or two) of fail-over. So the smaller id stands down from a
        pre-vote round and waits one vote interval; if `peer` does not win by then we run."""
        v = self._vote
        if v is not None and not v.pre:
            return
        self._vote = None
        t = self.now_ms + self._vote_interval()
        if t > self.next_time_to_request_vote:
            self.next_time_to_request_vote = t

    def _handle_pre_vote(self, m: VoteRequest, is_self: bool) -> VoteResult:
        """Would we vote for m.src if it ran in m.term now? The same checks as _handle_vote,
        but nothing changes here: no term adopted, no vote recorded, no role change."""
        r = self._vote_checks(m, is_self)
        if r is not None:
            return r
        if m.term == self.term and self.voted_for is not None and self.voted_for != m.src:
            return VoteResult.REJECT_ALREADY_VOTED
        if m.term < self.log.last_term():
            return VoteResult.REJECT_TERM_SMALL_THAN_LEDGER
        return VoteResult.ACCEPT

    def _vote_checks(self, m: VoteRequest, is_self: bool) -> VoteResult | None:
        """The checks votes and pre-votes share, in DLedger's order (membership, the live
        leader, the ledger, an expired term); None if all pass."""
        if m.src not in self.known_members:
            return VoteResult.REJECT_UNKNOWN_LEADER
        if not is_self and m.src == self.id:
            return VoteResult.REJECT_UNEXPECTED_LEADER
        if self.recovering_term:
            # recovery R2: "my log is not newer than yours" is not known to be true here
            return VoteResult.REJECT_RECOVERING
        if (not is_self and not m.transfer and self.cfg.reject_votes_while_leader_live
                and self._has_live_leader(m.src)):
            return VoteResult.REJECT_ALREADY_HAS_LEADER
        lg = self.log
        end_term = lg.last_term()
        if m.ledger_end_term < end_term:
            return VoteResult.REJECT_EXPIRED_LEDGER_TERM
        if m.ledger_end_term == end_term and m.ledger_end_index < lg.last_index():
            return VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        if m.term < self.term:
            return VoteResult.REJECT_EXPIRED_VOTE_TERM
        return None

    def _has_live_leader(self, requester: str) -> bool:
        """Seed 002: a member that hears from a live leader rejects votes from others. A
        restarted node counts as hearing one for the leak (it may have, before it went down:
        the leader's lease relies on it)."""
        if self.now_ms < self._vote_guard_until_ms:
            return True
        window = self.cfg.heartbeat_interval_ms * self.cfg.max_heartbeat_leak
        if self.role == Role.FOLLOWER:
            return (self.leader_id is not None and self.leader_id != requester
                    and self.now_ms - self.last_leader_heartbeat_ms < window)
        if self.role == Role.LEADER:
            return self.now_ms - self._quorum_contact_ms() < window
        return False

    def _handle_vote(self, m: VoteRequest, is_self: bool) -> VoteResult:
        """DLedger handleVote, checks in DLedger's order -- except the first: DLedger rejects
        a candidate missing from the voter's own (latest, possibly uncommitted) configuration.
        Two uncommitted removals on the two sides of a partition then deadlock elections for
        good (each side's candidate is unknown to the other side's config). Raft thesis
        §4.2.3: grant votes to candidates outside the latest configuration; the live-leader
        rule keeps a removed member from disrupting a working group. Only ids this node has
        never heard of (neither peers nor in any configuration) are rejected."""
        r = self._vote_checks(m, is_self)
        if r is not None:
            return r
        lg = self.log
        end_term = lg.last_term()
        if m.term == self.term:
            if self.voted_for is not None and self.voted_for != m.src:
                if self.leader_id is not None:
                    return VoteResult.REJECT_ALREADY_HAS_LEADER
                return VoteResult.REJECT_ALREADY_VOTED
        else:
            # stepped down by a larger term: only vote once our term has caught up
            self._become_candidate(m.term)
            self.need_increase_term_immediately = True
            return VoteResult.REJECT_TERM_NOT_READY
        if m.term < end_term:
            return VoteResult.REJECT_TERM_SMALL_THAN_LEDGER
        if (not is_self and self.term_to_take_leadership == self.term
                and m.ledger_end_term == end_term and lg.last_index() >= m.ledger_end_index):
            return VoteResult.REJECT_TAKING_LEADERSHIP
        if self.voted_for != m.src:
            self.voted_for = m.src
            self._hs_dirty = True  # persisted before the ACCEPT leaves (driver contract 1)
        return VoteResult.ACCEPT

    def _tally(self, v: VoteRound, src: str, result: VoteResult, term: int) -> None:
        v.responded.add(src)
        if v.pre:
            if result == VoteResult.ACCEPT:
                v.accepted += 1
            else:
                if result == VoteResult.REJECT_ALREADY_HAS_LEADER:
                    v.already_has_leader = True
                if term > v.known_max_term:
                    # the responder is at (or past) the term we proposed: propose past it next
                    v.known_max_term = term
            return
        if result != VoteResult.UNKNOWN and result != VoteResult.REJECT_RECOVERING:
            # (a recovering voter is like one that did not answer: retry in this term, do
            # not push the term up while it recovers)
            v.valid += 1
        if result == VoteResult.ACCEPT:
            v.accepted += 1
        elif result == VoteResult.REJECT_ALREADY_HAS_LEADER:
            v.already_has_leader = True
        elif result in (VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, VoteResult.REJECT_EXPIRED_VOTE_TERM):
            if term > v.known_max_term:
                v.known_max_term = term
        elif result in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX):
            v.bigger_ledger += 1
        elif result == VoteResult.REJECT_TERM_NOT_READY:
            v.not_ready += 1

    def _on_vote_response(self, m: VoteResponse) -> None:
        v = self._vote
        if (v is None or self.role != Role.CANDIDATE or m.req_term != v.term or m.pre != v.pre
                or m.src in v.responded or m.src not in self.voters):
            return
        self._tally(v, m.src, m.result, m.term)
        self._maybe_parse_vote(v)

    def _maybe_parse_vote(self, v: VoteRound) -> None:
        q = self.quorum
        n = len(self.voters)
        if v.pre:
            # decided once a quorum accepted or a quorum can no longer accept
            if v.accepted >= q or len(v.responded) - v.accepted > n - q:
                self._parse_vote()
            return
        if (v.already_has_leader or v.accepted >= q or v.accepted + v.not_ready >= q
                or len(v.responded) >= n):
            self._parse_vote()

    def _parse_pre_vote(self, v: VoteRound) -> None:
        """A quorum would vote for us: raise the term and run for real at once. Otherwise
        nothing changed anywhere; try again after a vote interval (longer if someone still
        hears a leader, as DLedger's WAIT_TO_REVOTE after REJECT_ALREADY_HAS_LEADER)."""
        now = self.now_ms
        if v.known_max_term > self.known_max_term:
            self.known_max_term = v.known_max_term
        if v.accepted >= self.quorum and v.known_max_term < v.term and self.role == Role.CANDIDATE:
            self._next_term(False)
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
            self._start_vote_round()
            return
        wait = self._vote_interval()
        leak = self.cfg.heartbeat_interval_ms * self.cfg.max_heartbeat_leak
        if v.already_has_leader:
            if now - self._leader_exit_ms < leak:
                # our leader's process exited; the voter that still hears it has not seen
                # its connection close yet (a few ms behind us): ask again soon
                wait = self.rng.randrange(self.cfg.min_vote_interval_ms // 2 + 1)
            else:
                wait += leak
        self.next_time_to_request_vote = now + wait

    def _parse_vote(self) -> None:
        """DLedger's ladder, in its order."""
        v = self._vote
        self._vote = None
        if v.pre:
            self._parse_pre_vote(v)
            return
        q = self.quorum
        now = self.now_ms
        if v.known_max_term > v.term:
            res = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_time_to_request_vote = now + self._vote_interval()
            self._become_candidate(v.known_max_term)
        elif v.already_has_leader:
            res = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = (now + self._vote_interval()
                                              + self.cfg.heartbeat_interval_ms * self.cfg.max_heartbeat_leak)
        elif v.valid < q:
            res = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = now + self._vote_interval()
        elif v.valid - v.bigger_ledger < q:
            res = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = now + self._vote_interval() + self.cfg.max_vote_interval_ms
        elif v.accepted >= q:
            res = ParseResult.PASSED
        elif v.accepted + v.not_ready >= q:
            res = ParseResult.REVOTE_IMMEDIATELY
            self.next_time_to_request_vote = 0
        else:
            res = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_time_to_request_vote = now + self._vote_interval()
        self.last_parse_result = res
        if res == ParseResult.PASSED and self.term == v.term and self.role == Role.CANDIDATE:
            self._become_leader()

    def _tick_follower(self) -> None:
        c = self.cfg
        if self.now_ms - self.last_leader_heartbeat_ms > c.max_heartbeat_leak * c.heartbeat_interval_ms:
            self._become_candidate(self.term)
            # Campaign after a random delay in [0, max_vote_interval - min_vote_interval): the
            # leak timeout is the same on every follower, so followers that tick in lockstep
            # would otherwise all run at the same instant and split the vote. (The leak itself
            # is the fixed floor; the jitter has the configured vote interval's width.)
            self.next_time_to_request_vote = self.now_ms + self.rng.randrange(
                c.max_vote_interval_ms - c.min_vote_interval_ms)
