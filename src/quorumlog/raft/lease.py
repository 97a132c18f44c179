"""The leader's heartbeats, check-quorum, lease and linearizable reads (docs/raft.md "The lease
and reads").

Mixed into RaftCore (core.py), whose attributes these methods share; pure, like the core."""
from __future__ import annotations

from typing import Any

from .errors import BackpressureError, NotLeaderError
from .messages import Code, Heartbeat, HeartbeatResponse, ParseResult, Role
from .state import (APPEND, COMPARE, INSTALL, NEVER, TRUNCATE, LeaseExpired, ReadReady,
                    TransferAborted)


class LeaseRules:
    def lease_valid(self, now_ms: int | None = None) -> bool:
        """Leader: True while no other node can have been elected (RaftConfig: the lease and
        its clock-rate skew bound). `now_ms`: the driver's clock now (default: the last tick),
        for a read between ticks."""
        if self.role != Role.LEADER or self._handed_over:
            return False
        now = self.now_ms if now_ms is None or now_ms < self.now_ms else now_ms
        return now < self._lease_start_ms() + self.lease_ms

    def lease_read_index(self, now_ms: int | None = None) -> int | None:
        """A lease read: the index a read must wait for (dispatch >= it) to be linearizable,
        or None (no valid lease, or this leader's first entry has not committed yet: use
        read_index)."""
        if not self.lease_valid(now_ms) or not self._committed_in_term():
            return None
        return self.commit_index

    def read_index(self, ctx: Any) -> None:
        """ReadIndex (Raft thesis §6.4), no clock assumptions: the read gets the commit index
        of now (or this leader's first committed one) and is released -- ReadReady(ctx, index)
        -- once a quorum answered a heartbeat round sent after it; the driver then serves it
        when dispatch reaches index. ReadAborted(ctx, reason) if leadership is lost first."""
        if self.role != Role.LEADER:
            raise NotLeaderError(f"{self.id} is not the leader (term {self.term})",
                                 self.leader_id, self.term)
        if len(self._reads) >= self.cfg.max_pending_reads:
            raise BackpressureError(
                f"read_index: {len(self._reads)} reads pending >= max_pending_reads")
        idx = self.commit_index if self._committed_in_term() else None
        self.quiesced = False   # (quiesce.py Q3: the round goes at the next tick)
        self._reads.append((ctx, self._hb_seq + 1, idx))
        self.last_send_heartbeat_ms = NEVER  # the next tick sends that round

    def _committed_in_term(self) -> bool:
        """Has an entry of our term committed? (A commit index below our first entry -- right
        after an install it is first - 1, whose term the log may not keep -- is not ours.)"""
        c = self.commit_index
        return c >= self.log.first_index() and self.log.term_at(c) == self.term

    def _lease_start_ms(self) -> int:
        """Send time of the newest heartbeat round that a quorum (us included) acknowledged."""
        me = self.id
        prog = self.progress
        times = [self.now_ms if v == me else prog[v].lease_ack_ms for v in self.voters]
        times.sort(reverse=True)
        return times[self.quorum - 1]

    def _on_lease_ack(self) -> None:
        if self._reads:
            self._release_reads()
        if not self.is_ready_to_serve:
            self._check_ready_to_serve()

    def _release_reads(self) -> None:
        if not self._committed_in_term():
            return  # (no entry of ours committed yet: the commit index may be stale)
        me = self.id
        prog = self.progress
        seqs = [self._hb_seq if v == me else prog[v].acked_seq for v in self.voters]
        seqs.sort(reverse=True)
        confirmed = seqs[self.quorum - 1]
        keep = []
        for r in self._reads:
            if r[1] <= confirmed:
                self._events.append(ReadReady(r[0], self.commit_index if r[2] is None else r[2]))
            else:
                keep.append(r)
        self._reads = keep

    def _quorum_contact_ms(self) -> int:
        """Check-quorum: the latest time by which a quorum of voters (us included) had
        answered us as their leader -- the quorum-th most recent answer (heartbeat SUCCESS
        of any round, or an append response) per voter."""
        q = self.quorum
        me = self.id
        prog = self.progress
        times = [self.now_ms if v == me else prog[v].last_resp_ms for v in self.voters]
        times.sort(reverse=True)
        return times[q - 1]

    def _next_tick_leader(self) -> int | None:
        """When _tick_leader below next acts (RaftCore.next_tick_ms): the next heartbeat,
        the check-quorum deadline, the lease's end while serving, the first append or probe
        time-out -- or None while it works every tick (a transfer, a learner catching up, an
        install, a preferred leader to hand over to, a follower with entries to send and
        none in flight). Each bound is the first time the matching test below holds."""
        c = self.cfg
        if (self.transferee is not None or self.learner is not None
                or (c.preferred_leader_id is not None and c.preferred_leader_id != self.id)):
            return None
        iv = c.heartbeat_interval_ms
        last = self.last_send_heartbeat_ms
        if last == NEVER:
            return None                   # (read_index asked for a round at the next tick)
        due = (last // iv + 1) * iv if c.align_heartbeats else last + iv
        t = self._quorum_contact_ms() + c.max_heartbeat_leak * iv + 1
        if t < due:
            due = t
        if self.is_ready_to_serve:
            t = self._lease_start_ms() + self.lease_ms
            if t < due:
                due = t
        timeout = c.append_timeout_ms
        lg_last = self.log.last_index()
        for pr in self.progress.values():
            st = pr.state
            if st == COMPARE:
                t = pr.probe_sent_ms + timeout
            elif st == INSTALL:
                return None
            elif pr.inflight:
                t = pr.inflight[0][1] + timeout
            elif pr.next <= lg_last:
                return None
            else:
                continue
            if t < due:
                due = t
        return due

    def _tick_leader(self) -> None:
        now = self.now_ms
        c = self.cfg
        if now - self._quorum_contact_ms() > c.max_heartbeat_leak * c.heartbeat_interval_ms:
            # check-quorum (DLedger: no quorum of heartbeat SUCCESS for maxHeartBeatLeak x
            # interval -> CANDIDATE), checked every tick and counting late answers of earlier
            # rounds and append responses: a stalled link delays answers, it does not make a
            # follower stop following us
            self._become_candidate(self.term)
            return
        if self.is_ready_to_serve and not self.lease_valid():
            self.is_ready_to_serve = False
            self._events.append(LeaseExpired(self.term))
        iv = c.heartbeat_interval_ms
        if (now // iv > self.last_send_heartbeat_ms // iv if c.align_heartbeats
                else now - self.last_send_heartbeat_ms >= iv):
            if self._hb_open:
                self._close_heartbeat_round()
                if self.role != Role.LEADER:
                    return
            self._send_heartbeats()
        timeout = c.append_timeout_ms
        lg_last = self.log.last_index()
        for pr in self.progress.values():
            if pr.state == COMPARE:
                if now - pr.probe_sent_ms >= timeout:
                    self._send_probe(pr, pr.probe_prev)
            elif pr.state == INSTALL:
                if pr.inflight and now - pr.inflight[0][1] >= timeout:
                    pr.inflight.clear()
                    pr.epoch += 1
                    pr.image_sent = pr.image_acked  # re-send from what the follower staged
                self._send_install(pr)
            elif pr.inflight:
                if now - pr.inflight[0][1] >= timeout:
                    pr.reset_to(APPEND if pr.match > 0 else TRUNCATE, pr.match + 1)
                    self._send_appends(pr)
            elif pr.next <= lg_last:
                self._send_appends(pr)
        if self.transferee is not None:
            if now >= self.transfer_deadline_ms:
                self._events.append(TransferAborted(self.term, self.transferee, "timeout"))
                self.transferee = None
                self._next_preferred_try_ms = now + 2 * c.transfer_timeout_ms
                if self._handed_over:
                    # TAKE_LEADERSHIP went out: the transferee may still win this term, so
                    # this leader has no lease in it again -- and never became ready to
                    # serve for the rest of a stable term (nodesim seed 3583). Run again in a
                    # new term, at once (its log is the group's best).
                    self._step_down_to(self.term)
                    self.next_time_to_request_vote = now
                    return
            else:
                self._check_transfer()
        elif (c.preferred_leader_id is not None and c.preferred_leader_id != self.id
              and now >= self._next_preferred_try_ms):
            pr = self.progress.get(c.preferred_leader_id)
            if pr is not None and not pr.is_learner and pr.match >= lg_last:
                self.transfer_leadership(c.preferred_leader_id)
        if self.learner is not None:
            self._check_learner()

    def _send_heartbeats(self) -> None:
        self._hb_seq += 1
        self._hb_open = True
        self._hb_all = self._hb_succ = 1 if self.id in self._voter_set else 0
        self._hb_answered = set()
        self._hb_not_ready = 0
        self._hb_max_term = -1
        self._hb_inconsistent = False
        self.last_send_heartbeat_ms = self.now_ms
        self._hb_sent[self._hb_seq] = self.now_ms
        self._hb_sent.pop(self._hb_seq - 256, None)  # (answers that late no longer matter)
        for peer, pr in self.progress.items():
            self._msgs.append(Heartbeat(self.term, self.id, peer, self.commit_index, self._hb_seq,
                                        pr.boot, pr.boot_end))
        if self._hb_succ >= self.quorum:  # a group of one
            self._hb_open = False
            self.last_succ_heartbeat_ms = self.now_ms
            self._on_lease_ack()

    def _on_heartbeat_response(self, m: HeartbeatResponse) -> None:
        if m.term > self.term:
            self._step_down_to(m.term)
            return
        if self.role != Role.LEADER:
            return
        if m.code == Code.SUCCESS:
            pr = self.progress.get(m.src)
            if pr is not None and m.term == self.term:
                if m.boot != pr.boot and m.boot:
                    self._new_boot(pr, m.boot, m.floor)
                pr.floor = m.floor
                pr.last_resp_ms = self.now_ms  # check-quorum: late answers count too
                if m.seq > pr.acked_seq:
                    pr.acked_seq = m.seq
                    sent = self._hb_sent.get(m.seq)
                    if sent is not None and sent > pr.lease_ack_ms:
                        pr.lease_ack_ms = sent
                    self._on_lease_ack()
            if (pr is not None and pr.state == COMPARE
                    and self.now_ms - pr.probe_sent_ms >= self.cfg.heartbeat_interval_ms):
                # the follower is reachable again (after a partition or a restart): probe now
                # rather than at the next append timeout
                self._send_probe(pr, pr.probe_prev)
        if (not self._hb_open or m.seq != self._hb_seq or m.src not in self._voter_set
                or m.src in self._hb_answered):
            return  # (a duplicated answer would count twice towards the round's quorum)
        self._hb_answered.add(m.src)
        code = m.code
        if code == Code.SUCCESS:
            self._hb_succ += 1
        elif code == Code.EXPIRED_TERM:
            if m.term > self._hb_max_term:
                self._hb_max_term = m.term
        elif code == Code.INCONSISTENT_LEADER:
            self._hb_inconsistent = True
        elif code == Code.TERM_NOT_READY:
            self._hb_not_ready += 1
        self._hb_all += 1
        q = self.quorum
        if self._hb_succ >= q:
            self.last_succ_heartbeat_ms = self.now_ms
            self._hb_open = False
        elif self._hb_succ + self._hb_not_ready >= q or self._hb_all >= len(self.voters):
            self._close_heartbeat_round()

    def _step_down_to(self, term: int) -> None:
        """A response showed a bigger term: CANDIDATE, and the next campaign runs past it
        (never at our stale term, where we could be elected again and again)."""
        self._become_candidate(term)
        self.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
        self.next_time_to_request_vote = self.now_ms + self._vote_interval()

    def _close_heartbeat_round(self) -> None:
        """DLedger sendHeartbeats' verdict for a round without a quorum of SUCCESS."""
        self._hb_open = False
        q = self.quorum
        if self._hb_succ >= q:
            self.last_succ_heartbeat_ms = self.now_ms
        elif self._hb_succ + self._hb_not_ready >= q:
            self.last_send_heartbeat_ms = NEVER  # heartbeat again at once
        elif self._hb_max_term > self.term:
            self._step_down_to(self._hb_max_term)
        elif self._hb_inconsistent:
            self._become_candidate(self.term)
        # (no quorum for max_heartbeat_leak x interval: _tick_leader's check-quorum, which
        # counts every answer, not only this round's)
