"""Quiescence (CockroachDB's): a group with nothing to do stops ticking and heartbeating.

The rule, in full:
  Q1 A leader may quiesce (`quiesce()`) when its group is idle and whole: ready to serve,
     commit == persisted == dispatched == its last index, every follower a voter in APPEND
     (or TRUNCATE: no batch to send) that matched the last index with nothing in flight and
     answered within QUIET_FRESH_HEARTBEATS heartbeat intervals, no heartbeat round open, no
     transfer, read, learner, removal or recovery under way.
  Q2 A quiesced core's tick only moves its clock: no timeouts, heartbeats or re-sends. The
     driver may skip its ticks altogether.
  Q3 Every other input wakes it: step() of any message, propose, read_index, a transfer or
     a membership change (and `wake(now)`, the driver's). Awake, it resumes with its timers
     as they were, so a follower whose leader died times out a leak after it last heard it
     and elects as usual: quiescence itself never starts an election.
  Q4 The driver keeps quiesced groups alive with one exchange per peer pair per heartbeat
     interval (node/host.py's QuietBeat), which carries these two calls for every quiesced
     group of the pair:
       follower `quiet_heartbeat(src, term, commit, now)`: the leader's heartbeat of a
         quiesced group. It counts as a heartbeat (the follower neither times out nor grants
         a vote while the leader's process is heard) only if this core follows `src` in
         `term` and holds exactly the leader's committed log; then it quiesces too and the
         answer is True. False: the driver must not acknowledge it (the leader wakes).
       leader `quiet_ack(peer, sent_ms, now)`: `peer` answered a quiet heartbeat sent at
         sent_ms while it held the group quiesced: a heartbeat SUCCESS of that round (check-
         quorum and the lease count it), so the lease holds exactly as with heartbeats.
     When a peer stops answering (or answers without the group) the driver wakes the group.

Mixed into RaftCore (core.py), whose attributes these methods share; pure, like the core."""
from __future__ import annotations

from .messages import Role
from .state import APPEND, TRUNCATE

# a follower that answered less recently than this many heartbeat intervals ago keeps the
# group awake (CockroachDB quiesces only while every follower is live)
QUIET_FRESH_HEARTBEATS = 2
_WHOLE = (APPEND, TRUNCATE)     # dispatch states a follower may be in for Q1 (quiescable)


class QuiesceRules:
    quiesced = False

    def quiescable(self) -> bool:
        """Q1: may this leader quiesce now?"""
        if (self.role != Role.LEADER or self.quiesced or not self.is_ready_to_serve
                or self._hb_open or self.transferee is not None or self._reads
                or self._leaving or self.learner is not None or self.recovering_term):
            return False
        last = self.log.last_index()
        if (self.commit_index != last or self.persisted_index != last
                or self.dispatched_index < last):
            return False
        oldest = self.now_ms - QUIET_FRESH_HEARTBEATS * self.cfg.heartbeat_interval_ms
        for pr in self.progress.values():
            # (TRUNCATE matched to the end with nothing in flight is whole too: its one batch
            # goes with the next proposal -- idle, no answer ever moves it to APPEND. A stale
            # tail past the end on the follower keeps it from holding the group, Q4)
            if (pr.state not in _WHOLE or pr.match != last or pr.inflight or pr.is_learner
                    or pr.last_resp_ms < oldest):
                return False
        return True

    def quiet_inputs(self) -> dict:
        """What Q1 looks at (a report of why a group stays awake: nodesim's liveness check)."""
        return {"role": self.role.name, "term": self.term, "ready": self.is_ready_to_serve,
                "last": self.log.last_index(), "commit": self.commit_index,
                "persisted": self.persisted_index, "dispatched": self.dispatched_index,
                "heartbeat_round_open": self._hb_open, "transferee": self.transferee,
                "reads": len(self._reads), "learner": self.learner,
                "recovering": self.recovering_term,
                "followers": {p: (pr.state.name, pr.match, len(pr.inflight),
                                  self.now_ms - pr.last_resp_ms)
                              for p, pr in self.progress.items()}}

    def quiesce(self) -> bool:
        """Quiesce this leader if Q1 allows; returns whether it is quiesced."""
        if self.quiescable():
            self.quiesced = True
        return self.quiesced

    def wake(self, now_ms: int | None = None) -> None:
        """Q3: resume ticking (the driver's wake: a peer unheard, or the group not held
        quiesced on the other side)."""
        self.quiesced = False
        if now_ms is not None and now_ms > self.now_ms:
            self.now_ms = now_ms

    def quiet_heartbeat(self, src: str, term: int, commit_index: int, now_ms: int) -> bool:
        """Q4, follower: `src` leads this group quiesced in `term` at `commit_index`."""
        if now_ms > self.now_ms:
            self.now_ms = now_ms
        if (self.quiesced and commit_index == self.commit_index and self.leader_id == src
                and self.term == term and self.role == Role.FOLLOWER):
            # held quiesced by the last one and nothing since (any input wakes it, Q3): the
            # log is still exactly this commit, no install or recovery began -- the checks
            # below would all pass again (one of these per quiesced group and interval)
            self.last_leader_heartbeat_ms = self.now_ms
            return True
        if (self.role != Role.FOLLOWER or self.leader_id != src or self.term != term
                or self.recovering_term or self._install is not None):
            return False
        last = self.log.last_index()
        if commit_index != last:
            return False
        self._follower_commit(commit_index)     # (as a heartbeat: it may learn the commit)
        if self.commit_index != last:
            return False                        # not durable here yet: not quiet
        self.last_leader_heartbeat_ms = self.now_ms
        self.quiesced = True
        return True

    def quiet_ack(self, peer: str, sent_ms: int, now_ms: int) -> None:
        """Q4, leader: `peer` held the group quiesced when the round sent at sent_ms came."""
        if now_ms > self.now_ms:
            self.now_ms = now_ms
        pr = self.progress.get(peer)
        if pr is None or self.role != Role.LEADER:
            return
        pr.last_resp_ms = self.now_ms
        if sent_ms > pr.lease_ack_ms:
            pr.lease_ack_ms = sent_ms
