"""Membership changes (learners, CONFIG entries) and leadership transfer (docs/raft.md
"Membership").

Mixed into RaftCore (core.py), whose attributes these methods share; pure, like the core."""
from __future__ import annotations

from .errors import LeaderTransferringError, MembershipChangeError, NotLeaderError, TransferError
from .log import EntryKind, encode_config
from .messages import Heartbeat, ParseResult, Role, TakeLeadership
from .progress import Progress
from .state import COMPARE, ConfigChanged, LeaseExpired

# a follower is healthy for a membership change if it answered within this many heartbeat
# intervals (and is not recovering)
HEALTHY_WITHIN_HEARTBEATS = 3


class MembershipRules:
    def add_member(self, peer: str) -> int:
        """Start adding `peer`: a CONFIG entry makes it a learner (replicated to, never
        counted); once it has caught up, the leader -- this one or any later one, the learner
        is in the log -- appends a CONFIG entry that makes it a voter. Returns the index of
        the first entry."""
        self._check_admin()
        if peer in self.voters:
            raise MembershipChangeError(f"add_member: {peer} is already a voter")
        self._check_no_change_in_progress()
        return self._append_config(self.voters, (peer,))

    def remove_member(self, peer: str) -> int:
        """Append a CONFIG entry without `peer` (a voter, or a learner still catching up);
        returns its index."""
        self._check_admin()
        if peer == self.id:
            raise MembershipChangeError("remove_member: transfer leadership before removing the leader")
        if peer in self._learners:
            self._check_no_change_in_progress(learner_ok=True)
            return self._append_config(self.voters, tuple(p for p in self._learners if p != peer))
        if peer not in self.voters:
            raise MembershipChangeError(f"remove_member: {peer} is not a voter")
        self._check_no_change_in_progress()
        voters = tuple(v for v in self.voters if v != peer)
        if self.cfg.strict_reconfig_check:
            self._check_healthy_quorum(voters, f"remove_member {peer}")
        return self._append_config(voters, self._learners)

    def _check_healthy_quorum(self, voters: tuple, what: str) -> None:
        """Refuse a change whose configuration would not have a quorum of healthy voters --
        the leader, and followers that answered within HEALTHY_WITHIN_HEARTBEATS heartbeat
        intervals and are not recovering (raft/recovery.py) -- as etcd's strict reconfig
        check does. Removing a voter while another one is down left the group without a
        quorum by the operator's own hand; and a two-voter configuration with a recovering
        voter cannot elect until it recovers (simulation seeds 11, 145)."""
        window = self.cfg.heartbeat_interval_ms * HEALTHY_WITHIN_HEARTBEATS
        healthy, why = [], []
        for v in voters:
            pr = self.progress.get(v)
            if v == self.id:
                healthy.append(v)
            elif pr is None or pr.acked_seq == 0:
                why.append(f"{v} has not answered this leader")
            elif pr.floor:
                why.append(f"{v} is recovering after a power loss (floor term {pr.floor})")
            elif self.now_ms - pr.last_resp_ms > window:
                why.append(f"{v} has not answered for {self.now_ms - pr.last_resp_ms} ms")
            else:
                healthy.append(v)
        quorum = len(voters) // 2 + 1
        if len(healthy) < quorum:
            raise MembershipChangeError(
                f"{what}: refused: the voters left, {list(voters)}, need {quorum} for a quorum "
                f"and only {healthy} are healthy ({'; '.join(why)}); retry once they answer")

    def transfer_leadership(self, to: str) -> None:
        if self.role != Role.LEADER:
            raise NotLeaderError(f"{self.id} is not the leader", self.leader_id, self.term)
        if self.transferee is not None:
            raise TransferError(f"transfer to {self.transferee} already in progress")
        if to == self.id or to not in self.voters:
            raise TransferError(f"transfer_leadership: {to} is not another voter")
        pr = self.progress.get(to)
        if pr is not None and pr.floor:
            # (it would ignore TAKE_LEADERSHIP, recovery R2: proposals wait for the timeout)
            raise TransferError(f"transfer_leadership: {to} is recovering after a power loss "
                                f"(floor term {pr.floor}) and may not lead until it recovers")
        self.quiesced = False   # (quiesce.py Q3)
        self.transferee = to
        self.transfer_deadline_ms = self.now_ms + self.cfg.transfer_timeout_ms
        self._take_sent = False
        self._check_transfer()

    def _on_take_leadership(self, m: TakeLeadership) -> None:
        if (m.term != self.term or m.src != self.leader_id or self.role != Role.FOLLOWER
                or self.recovering_term):  # (recovery R2: the transfer times out)
            return
        # Adopt T+1 and vote for ourselves now, not on the next tick: in between we would sit
        # at term T with no leader, and a heartbeat from the old leader at T would make us its
        # follower again and silently cancel the transfer (the leader would never re-send
        # TakeLeadership and refuse proposals until transfer_timeout_ms). The new HardState
        # leaves in this step's Ready, so it is durable before any answer at T+1 is sent.
        self._become_candidate(m.term + 1)
        self.term = m.term + 1
        self.known_max_term = self.term
        self.voted_for = self.id
        self._hs_dirty = True
        self.term_to_take_leadership = self.term
        self._campaign_term = self.term
        self.need_increase_term_immediately = False
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.next_time_to_request_vote = self.now_ms + self._vote_interval()

    def _drop_leaving(self) -> None:
        for p in [p for p, pr in self.progress.items() if 0 < pr.leaving_at <= self.commit_index]:
            # one last heartbeat carries the commit index: the removed node learns that its
            # removal committed and stops campaigning (otherwise it keeps asking for votes)
            self._msgs.append(Heartbeat(self.term, self.id, p, self.commit_index, 0))
            del self.progress[p]
            self._leaving -= 1
            if self.transferee == p:
                self.transferee = None

    def _check_transfer(self) -> None:
        """Send TAKE_LEADERSHIP once the transferee's durable match reaches our end, and again
        every heartbeat interval until the transfer ends: one lost message used to block
        proposals until transfer_timeout_ms (a transferee that already took the next term
        ignores the repeats)."""
        pr = self.progress.get(self.transferee)
        end = self.log.last_index()
        if pr is None or pr.match < end:
            return
        if self._take_sent and self.now_ms - self._take_sent_ms < self.cfg.heartbeat_interval_ms:
            return
        self._take_sent = True
        self._take_sent_ms = self.now_ms
        self._msgs.append(TakeLeadership(self.term, self.id, self.transferee, end))
        if not self._handed_over:
            # the transferee's votes bypass the live-leader rule: no lease from here on (for
            # the rest of this term, even if the transfer is abandoned -- it may still win)
            self._handed_over = True
            if self.is_ready_to_serve:
                self.is_ready_to_serve = False
                self._events.append(LeaseExpired(self.term))

    @property
    def voters(self) -> tuple:
        return self._voters

    @property
    def learner(self) -> str | None:
        """The member being added (in the configuration as a learner), if any."""
        return self._learners[0] if self._learners else None

    def _apply_config(self, initial: bool = False) -> None:
        idx, voters, learners = self.configs[-1]
        self._voters = voters
        self._voter_set = frozenset(voters)
        self._learners = learners
        self.quorum = len(voters) // 2 + 1
        for _, vs, ls in self.configs:
            self.known_members.update(vs)
            self.known_members.update(ls)
        if not initial:
            self._events.append(ConfigChanged(idx, voters, learners))
        if self.role == Role.LEADER:
            self._track_members(idx)

    def _track_members(self, config_index: int) -> None:
        """Leader: a Progress for every voter and learner of the configuration; members that
        left it are replicated to until config_index commits (then dropped)."""
        me = self.id
        last = self.log.last_index()
        for p in self._voters + self._learners:
            learner = p not in self._voter_set
            pr = self.progress.get(p)
            if p == me:
                continue
            if pr is None:
                pr = self.progress[p] = Progress(p, last + 1, self.now_ms, is_learner=learner)
                self._send_probe(pr, last)
            else:
                pr.is_learner = learner
                if pr.leaving_at:
                    pr.leaving_at = 0
                    self._leaving -= 1
        members = set(self._voters) | set(self._learners)
        for p, pr in self.progress.items():
            if p not in members and not pr.leaving_at:
                pr.leaving_at = config_index
                pr.is_learner = True
                self._leaving += 1

    def _add_config(self, index: int, voters, learners=()) -> None:
        if index <= self.configs[-1][0]:
            return
        self.configs.append((index, tuple(sorted(voters)), tuple(sorted(learners))))
        self._apply_config()

    def _append_config(self, voters: tuple, learners: tuple = ()) -> int:
        voters = tuple(sorted(voters))
        idx = self.log.append_control(self.term, EntryKind.CONFIG, encode_config(voters, learners))
        self._flush_to = idx
        self._add_config(idx, voters, learners)
        for pr in self.progress.values():
            if pr.state != COMPARE:
                self._send_appends(pr)
        self._maybe_commit()
        return idx

    def _check_admin(self) -> None:
        if self.role != Role.LEADER:
            raise NotLeaderError(f"{self.id} is not the leader", self.leader_id, self.term)
        if self.transferee is not None:
            raise LeaderTransferringError(f"{self.id}: leadership transfer in progress")
        self.quiesced = False   # (quiesce.py Q3: a membership change)

    def _check_no_change_in_progress(self, learner_ok: bool = False) -> None:
        if self.learner is not None and not learner_ok:
            raise MembershipChangeError(f"membership change in progress: learner {self.learner}")
        if self.configs[-1][0] > self.commit_index:
            raise MembershipChangeError(
                f"membership change in progress: CONFIG entry {self.configs[-1][0]} not committed")
        if not self._committed_in_term():
            raise MembershipChangeError("membership change refused until this leader's NOOP commits")

    def _check_learner(self) -> None:
        """Promote the learner once it has caught up (and the CONFIG entry that made it one
        has committed): seed 002 §2.4 step 3."""
        peer = self.learner
        pr = self.progress.get(peer)
        if (pr is not None and pr.match >= self.commit_index
                and self.log.last_index() - pr.match <= self.cfg.learner_max_lag_entries
                and self.configs[-1][0] <= self.commit_index):
            pr.is_learner = False
            self._append_config(self.voters + (peer,), tuple(p for p in self._learners if p != peer))
