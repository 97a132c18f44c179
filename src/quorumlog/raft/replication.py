"""Log replication: the follower's append handling and commit, the leader's dispatch (COMPARE /
TRUNCATE / APPEND), append responses and the commit rule (docs/raft.md "Replication").

Mixed into RaftCore (core.py), whose attributes these methods share; pure, like the core."""
from __future__ import annotations

import logging

from ..errors import IndexOutOfRangeError, ReplicationError
from .errors import RaftInvariantError
from .messages import Append, AppendResponse, Code, Heartbeat, HeartbeatResponse, Message, Role
from .progress import Progress
from .state import (APPEND, COMPARE, GAP_PROBE_AFTER, INSTALL, TRUNCATE, BehindRetention,
                    ReadyToServe)

log = logging.getLogger(__name__)


class ReplicationRules:
    def _check_sender(self, m: Message) -> Code:
        """The shared front of heartbeat and append handling (DLedger handleHeartBeat)."""
        if m.src not in self.known_members:
            return Code.UNKNOWN_MEMBER
        if m.src == self.id:
            return Code.UNEXPECTED_MEMBER
        if m.term < self.term:
            return Code.EXPIRED_TERM
        if m.term > self.term:
            self._become_candidate(m.term)
            self.need_increase_term_immediately = True
            return Code.TERM_NOT_READY
        if self.leader_id == m.src:
            self.last_leader_heartbeat_ms = self.now_ms
            return Code.SUCCESS
        if self.leader_id is None:
            self._become_follower(m.src)
            return Code.SUCCESS
        return Code.INCONSISTENT_LEADER

    def _follower_commit(self, leader_commit: int) -> None:
        """min(leader commit, what matches this leader, what is flushed here): the commit
        index a driver dispatches to (and checkpoints) never runs ahead of the flushed log."""
        if leader_commit > self._leader_commit:
            self._leader_commit = leader_commit
        c = leader_commit if leader_commit < self.leader_match else self.leader_match
        if c > self.persisted_index:
            c = self.persisted_index
        if c > self.commit_index:
            self.commit_index = c
            self._commit_changed = True
        if self.recovering_term:
            self._check_recovered()   # (R3 / R3b: the match with the leader may have grown)

    def _on_heartbeat(self, m: Heartbeat) -> None:
        code = self._check_sender(m)
        if code == Code.SUCCESS:
            if self.recovering_term:
                self._note_boot_end(m.boot, m.boot_end)
            self._follower_commit(m.commit_index)
        self._msgs.append(HeartbeatResponse(self.term, self.id, m.src, code, m.seq, self.boot,
                                            self.recovering_term))

    def _reply_append(self, m: Append, code: Code, hint_index: int = 0, hint_term: int = 0) -> None:
        r = self._reportable()
        if r > self.reported_match and self.leader_id == m.src:
            self.reported_match = r
        self._msgs.append(AppendResponse(
            self.term, self.id, m.src, code, r, m.prev_index, m.last_index,
            hint_index, hint_term, m.epoch))

    def _reportable(self) -> int:
        p = self.persisted_index
        return p if p < self.leader_match else self.leader_match

    def _maybe_report(self, force: bool) -> None:
        r = self._reportable()
        if r > self.reported_match or (force and r > 0):
            self.reported_match = r
            self._msgs.append(AppendResponse(self.term, self.id, self.leader_id, Code.SUCCESS, r,
                                             r, r, 0, 0, self._leader_epoch))

    def _on_append(self, m: Append) -> None:
        code = self._check_sender(m)
        if code != Code.SUCCESS:
            self._reply_append(m, code)
            return
        self._leader_epoch = m.epoch
        lg = self.log
        last = lg.last_index()
        prev = m.prev_index
        if prev > last:
            self._reply_append(m, Code.GAP, last, lg.last_term())
            return
        if prev < lg.first_index() - 1:
            # below our retained head: those entries are committed, so they match -- but we
            # cannot check prev_term; ask the leader to start at our head
            self._reply_append(m, Code.GAP, lg.first_index() - 1, 0)
            return
        try:
            t = lg.term_at(prev)
        except IndexOutOfRangeError:
            # prev is the entry just before our dropped head: it was committed (retention
            # only drops committed entries), so it matches whatever the leader says
            t = m.prev_term
        if t != m.prev_term:
            if prev <= self.commit_index:
                raise RaftInvariantError(
                    f"{self.id}: committed entry {prev} has term {t}, leader says {m.prev_term}")
            first_of_t = self._first_index_of_term(t, prev)
            self._reply_append(m, Code.INCONSISTENT_STATE, first_of_t, t)
            return
        if prev > self.leader_match:
            self.leader_match = prev
        first, lastb, e = m.first_index, m.last_index, m.entry_term
        if lastb < first:  # COMPARE probe
            self._follower_commit(m.commit_index)
            self._reply_append(m, Code.SUCCESS)
            return
        if last >= first:
            if lg.term_at(first) == e:
                k = last if last < lastb else lastb
                if lg.term_at(k) != e:
                    # our entries first..j have term e (match the leader), then a later term
                    # that the leader does not have here: conflicting, drop them
                    k = self._last_index_of_term(e, first, k)
                    self._truncate_after(k)
                if k > self.leader_match:
                    self.leader_match = k
                self._follower_commit(m.commit_index)
                if k >= lastb:
                    # a re-send of what we hold: answer now if durable, else on_persisted will
                    self._flush_to = lastb
                    self._maybe_report(True)
                else:
                    self._flush_to = k
                    self._reply_append(m, Code.OVERLAP, k, e)
                return
            self._truncate_after(prev)
        new_last = lg.append_replicated(m.payload)
        if new_last != lastb:
            raise RaftInvariantError(f"{self.id}: append_replicated ended at {new_last}, batch at {lastb}")
        if lg.term_at(first) != e or lg.last_term() != e:
            self._refuse_batch(m, prev)
        self.leader_match = lastb
        if m.configs:
            for idx, voters, learners in m.configs:
                self._add_config(idx, voters, learners)
        self._flush_to = lastb
        self._follower_commit(m.commit_index)
        self._maybe_report(False)

    def _refuse_batch(self, m: Append, prev: int) -> None:
        """The batch's entries are not of the term the message says (every entry of a batch
        has `entry_term`, never above the sender's term): bytes that changed after the
        sender read them -- a view of its log kept while that log was truncated and written
        again by a newer leader. Appended with the old leader's prev, they would put a newer
        leader's entries after an entry that newer leader may not hold (a log that matches at
        its end and differs below it). Taken back, refused (nothing is acknowledged)."""
        got = (self.log.term_at(m.first_index), self.log.last_term())
        self._truncate_after(prev)
        raise ReplicationError(
            f"{self.id}: entries {m.first_index}..{m.last_index} have terms {got[0]}..{got[1]}; "
            f"the message (term {m.term}) says {m.entry_term}")

    def _truncate_after(self, index: int) -> None:
        if index < self.commit_index:
            raise RaftInvariantError(
                f"{self.id}: would truncate after {index} below commit index {self.commit_index}")
        self.log.truncate_after(index)
        self._log_gen += 1
        if self.persisted_index > index:
            self.persisted_index = index
        if self.configs[-1][0] > index:
            while self.configs[-1][0] > index:
                self.configs.pop()
            self._apply_config()

    def _first_index_of_term(self, t: int, hi: int) -> int:
        """Lowest index in [max(first, commit+1).., hi] whose term is t (terms never decrease)."""
        lg = self.log
        lo = max(lg.first_index(), 1)
        while lo < hi:
            mid = (lo + hi) // 2
            if lg.term_at(mid) < t:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _last_index_of_term(self, t: int, lo: int, hi: int) -> int:
        """Highest index in [lo, hi] whose term is <= t, given term_at(lo) <= t."""
        lg = self.log
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if lg.term_at(mid) <= t:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _send_probe(self, pr: Progress, prev: int) -> None:
        lg = self.log
        if prev < lg.first_index() - 1:
            self._behind_retention(pr)
            return
        try:
            prev_term = lg.term_at(prev)
        except IndexOutOfRangeError:  # the entry before our dropped head: term not kept
            self._behind_retention(pr)
            return
        pr.state = COMPARE
        pr.inflight.clear()
        pr.probe_prev = prev
        pr.next = prev + 1
        pr.probe_sent_ms = self.now_ms
        self._msgs.append(Append(self.term, self.id, pr.peer, prev, prev_term, prev + 1, prev,
                                 0, None, 0, self.commit_index, (), pr.epoch))

    def _new_boot(self, pr: Progress, boot: int, floor: int) -> None:
        """A follower answered with another incarnation id: note where our log ends (recovery
        R3b) and, if it restarted under us, probe it at once. Its restart reset what it knew
        to match us (leader_match) and may have cut its tail (a power loss); without the probe
        a leader with nothing new to send kept sending heartbeats only, and the restarted
        follower's commit index stayed behind until the next write (simulation seeds 3054,
        6545). The probe asks at its acknowledged match, and its answer is taken as its state
        now (gap_probe_epoch: a GAP below the match at once re-probes lower)."""
        restarted = pr.boot != 0
        pr.boot = boot
        pr.boot_end = self.log.last_index()
        if floor:
            # tell it now, not at the next round (seq 0: counted in no round), so a recovering
            # follower leaves recovery as soon as its appends have caught up
            self._msgs.append(Heartbeat(self.term, self.id, pr.peer, self.commit_index, 0,
                                        boot, pr.boot_end))
        if restarted and pr.state != INSTALL:
            pr.epoch += 1
            pr.gap_probe_epoch = pr.epoch
            self._send_probe(pr, min(pr.match, pr.boot_end))

    def _behind_retention(self, pr: Progress) -> None:
        if not pr.behind_retention:
            pr.behind_retention = True
            self._events.append(BehindRetention(pr.peer, pr.next))
        self._start_install(pr)

    def _response_progress(self, m) -> Progress | None:
        """The Progress an answer at our term as leader is about (None if it is not one; an
        answer with a bigger term makes us step down)."""
        if m.term > self.term:
            self._step_down_to(m.term)
            return None
        if self.role != Role.LEADER or m.term < self.term:
            return None
        return self.progress.get(m.src)

    def _send_appends(self, pr: Progress) -> None:
        """Fill pr's window with batches (hot path: a few attribute reads per batch)."""
        lg = self.log
        last = lg.last_index()
        nxt = pr.next
        if nxt > last or pr.state == INSTALL:
            return
        c = self.cfg
        inflight = pr.inflight
        limit = 1 if pr.state == TRUNCATE else c.max_inflight_batches
        if len(inflight) >= limit:
            return
        if nxt < lg.first_index():
            self._behind_retention(pr)
            return
        now = self.now_ms
        term = self.term
        me = self.id
        peer = pr.peer
        max_entries = c.max_batch_entries
        max_bytes = c.max_batch_bytes
        try:
            prev_term = lg.term_at(nxt - 1)
        except IndexOutOfRangeError:  # the entry before our dropped head: term not kept
            self._behind_retention(pr)
            return
        cfg_last = self.configs[-1][0]
        msgs = self._msgs
        while nxt <= last and len(inflight) < limit:
            hi = nxt + max_entries - 1
            if hi > last:
                hi = last
            t = lg.term_at(nxt)
            # (terms never decrease and the leader's last term is its own: only a batch that
            # starts before this term can cross a term boundary)
            if t != term and lg.term_at(hi) != t:
                hi = self._last_index_of_term(t, nxt, hi)
            payload, count, nbytes = lg.read(nxt, hi, max_bytes)
            hi = nxt + count - 1
            configs = self._configs_in(nxt, hi) if cfg_last >= nxt else ()
            msgs.append(Append(term, me, peer, nxt - 1, prev_term, nxt, hi, t, payload, nbytes,
                               self.commit_index, configs, pr.epoch))
            inflight.append((hi, now))
            prev_term = t
            nxt = hi + 1
        pr.next = nxt

    def _configs_in(self, lo: int, hi: int) -> tuple:
        return tuple(c for c in self.configs if lo <= c[0] <= hi)

    def _on_append_response(self, m: AppendResponse) -> None:
        if m.term == self.term and self.role == Role.LEADER:
            pr = self.progress.get(m.src)    # (_response_progress's answer, inline: per ack)
        else:
            pr = self._response_progress(m)
        if pr is None:
            return
        code = m.code
        if code != Code.INCONSISTENT_LEADER:
            pr.last_resp_ms = self.now_ms  # it answered us as its leader (check-quorum)
        if code == Code.SUCCESS:
            mi = m.match_index
            if mi >= pr.match:
                pr.gaps_below_match = 0
            if mi > pr.match:
                if mi > self.log.last_index():
                    raise RaftInvariantError(f"{m.src} matched {mi} > leader end {self.log.last_index()}")
                pr.match = mi
                inflight = pr.inflight
                if pr.state != INSTALL:  # (an install's window counts bytes, not indexes)
                    while inflight and inflight[0][0] <= mi:
                        inflight.popleft()
                if not pr.is_learner and mi > self.commit_index:
                    self._maybe_commit()
                if self.transferee == m.src:
                    self._check_transfer()
            st = pr.state
            if st == INSTALL:
                if pr.match < pr.image.last_index:
                    return
                pr.image = None  # (it caught up through appends of an earlier epoch)
                pr.reset_to(APPEND, pr.match + 1)
                st = APPEND
            if st == COMPARE:
                if m.epoch == pr.epoch and m.req_last < m.req_prev + 1 and m.req_prev == pr.probe_prev:
                    if m.match_index < pr.match and m.epoch == pr.gap_probe_epoch:
                        # the answer to the probe sent after repeated GAPs is the follower's
                        # state now: it holds less than it acknowledged (a lost tail)
                        log.warning("%s: follower %s holds entries up to %d only (had "
                                    "acknowledged %d)", self.id, m.src, m.match_index, pr.match)
                        pr.match = m.match_index
                    pr.state = TRUNCATE
                    pr.next = m.req_prev + 1
                    pr.inflight.clear()
                else:
                    return
            elif st == TRUNCATE:
                if pr.inflight:
                    return
                if pr.match >= pr.next - 1:
                    pr.state = APPEND
            if pr.next < pr.match + 1:
                pr.next = pr.match + 1
            self._send_appends(pr)
            return
        if m.epoch != pr.epoch:
            return  # a rejection of something we already re-sent
        if code == Code.INCONSISTENT_STATE:
            self._on_mismatch(pr, m)
        elif code == Code.GAP:
            if m.hint_index < pr.match:
                # The follower's log ends before entries it acknowledged: it lost them (flush
                # = "async" acknowledges at page-cache level; a power loss drops the page
                # cache) -- or this answer is stale (reordered). A lost tail answers every
                # batch so, a stale answer is a one-off: after GAP_PROBE_AFTER of them in a
                # row, probe with a fresh epoch; the answer says where the follower is now.
                pr.gaps_below_match += 1
                if pr.gaps_below_match >= GAP_PROBE_AFTER or m.epoch == pr.gap_probe_epoch:
                    pr.gaps_below_match = 0
                    pr.epoch += 1
                    pr.gap_probe_epoch = pr.epoch
                    self._send_probe(pr, m.hint_index)
                    return
            nxt = max(m.hint_index, pr.match) + 1
            pr.reset_to(TRUNCATE, nxt)
            self._send_appends(pr)
        elif code == Code.OVERLAP:
            pr.reset_to(APPEND, max(m.hint_index, pr.match) + 1)
            self._send_appends(pr)
        elif code == Code.INCONSISTENT_LEADER:
            self._become_candidate(self.term)
        # TERM_NOT_READY: the follower adopts our term on its next tick; the timeout re-sends

    def _on_mismatch(self, pr: Progress, m: AppendResponse) -> None:
        """Skip back a whole term: if we hold the follower's conflicting term, probe at our
        last entry of it, else just before where that term starts on the follower."""
        lg = self.log
        ct, ci = m.hint_term, m.hint_index
        prev = m.req_prev - 1
        if ct > 0 and ci <= m.req_prev:
            lo = max(ci, lg.first_index())
            if lo <= m.req_prev and lg.term_at(lo) <= ct:
                j = self._last_index_of_term(ct, lo, m.req_prev)
                prev = j if lg.term_at(j) == ct else ci - 1
            else:
                prev = ci - 1
        if prev >= m.req_prev:
            prev = m.req_prev - 1
        if m.req_prev <= pr.match and prev < pr.match:
            # it conflicts at an index it acknowledged: a power loss took what it acknowledged
            # (async) and left an older, flushed entry there -- its truncation was never
            # flushed. Its match is stale: probing no lower than it never ends (seed 4157)
            log.warning("%s: follower %s conflicts at %d, below the %d it acknowledged: it "
                        "lost entries", self.id, m.src, m.req_prev, pr.match)
            pr.match = prev
        if prev < pr.match:
            prev = pr.match
        pr.epoch += 1
        self._send_probe(pr, prev)

    def _maybe_commit(self) -> None:
        """Commit index = highest index durable on a quorum of voters, in the current term.
        Each voter counts only its durable copy: the leader's vote is its own flushed index
        (persisted_index, never its log end), a follower's the match it acknowledged, which it
        reports only from on_persisted. Any quorum of durable copies commits -- the leader's
        own flush need not be one of them (docs/raft.md deviation 19)."""
        voters = self._voters            # (the property's own field: once per commit)
        me = self.id
        prog = self.progress
        matches = [self.persisted_index if v == me else prog[v].match for v in voters]
        matches.sort(reverse=True)
        n = matches[self.quorum - 1]
        if n > self.commit_index and self.log.term_at(n) == self.term:
            self.commit_index = n
            self._commit_changed = True
            if self._leaving:
                self._drop_leaving()
            if self._learners:                  # (self.learner is not None)
                self._check_learner()
            if not self.is_ready_to_serve:      # (a serving leader: nothing to check per commit)
                self._check_ready_to_serve()
            if self._reads:
                self._release_reads()
            if self.id not in self._voter_set and self.configs[-1][0] <= n:
                # a non-member that led to finish a change (_may_campaign): done
                self._become_candidate(self.term)

    def _check_ready_to_serve(self) -> None:
        if (self.role == Role.LEADER and not self.is_ready_to_serve
                and self.commit_index == self.log.last_index()
                and self.dispatched_index >= self.commit_index
                and self._committed_in_term()
                and self.lease_valid()):
            self.is_ready_to_serve = True
            self._events.append(ReadyToServe(self.term))
