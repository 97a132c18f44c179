"""Recovery after an unclean open that may have lost acknowledged entries (protocol-aware
recovery, Alagappan et al., FAST 2018; TigerBeetle's replicas whose disk lost writes).

A replica in flush = "async" mode acknowledges entries at page-cache level. A power loss
(the driver learns of it at open: the page cache that held the last opener's unflushed
writes did not survive) can take entries it acknowledged -- entries that a quorum, counting
this replica, committed and a client was told about. Its log then says less than its
acknowledgements did, so Raft's two uses of "my log" become unsafe on it:

  * its vote ("my log is not newer than yours") could elect a leader without those entries;
  * as a leader it would write new entries over their indexes on the peers (truncating a
    peer that still holds them).

The rules (docs/raft.md "Recovery after power loss"; tests/raft/test_raft_recovery.py):

  R1  A replica opened with `recovering=True` (and a non-empty past) enters recovery with
      floor term T = max(its persisted term, its log's last term, an earlier floor still
      set), recorded in the hard state (persisted before anything is sent, like a vote).
  R2  While recovering it grants no vote and no pre-vote (REJECT_RECOVERING), does not
      campaign and ignores TAKE_LEADERSHIP. It follows leaders and replicates as usual.
  R3  It leaves recovery once its log holds an entry of a term > T, received from a leader.
      That leader was elected without this replica's vote (it cast none after T), by
      replicas that had lost nothing (a recovering one casts none), so it holds every entry
      committed with this replica's help (all of them acknowledged to leaders of terms <= T);
      by log matching this replica now holds them too. The cleared floor is persisted.
  R3b It also leaves recovery once it holds, matching, the log of the leader of its current
      term U (U >= T) through E: that leader's last index when it first heard from this
      incarnation of the replica. (A follower that lost power under a leader that stays up
      recovers so: no later term need ever come -- and without R3b the leader's own power
      loss later left two recovering voters and a group stopped for good.) Why it holds every
      entry it may have acknowledged and lost:
        * an entry it acknowledged to this leader was in the leader's log before the
          acknowledgement left, hence before this incarnation existed, hence before the
          leader heard from it: at an index <= E (a leader never truncates its own log);
        * an entry it acknowledged to a leader of an earlier term, if committed (then or
          ever: the acknowledgement was sent before it moved to a later term), is in this
          leader's log (Leader Completeness, which holds because every vote cast in between
          came from a replica that had lost nothing: R2), at an index <= its last one;
        * its log equals the leader's through E (log matching), durable here.
      So its vote again tells the truth about everything a quorum counted it for. E is tied
      to the incarnation: every core draws a random `boot` id; a follower's HeartbeatResponse
      carries it (and its floor), the leader notes E when a new one shows up and echoes
      (boot, E) in its Heartbeats; a follower takes E only with its own boot id, so an E
      meant for an earlier incarnation -- which may have acknowledged more before it lost
      power again -- is ignored. The leader also re-probes a follower whose boot changed
      (replication.py): a restarted follower's match with the leader is re-established at
      once, so its commit index does not wait for the next write.
  R4  A recovering replica that crashes again keeps its floor (the hard state carries it);
      a second power loss raises it to the current term.
  R5  Operator override: `end_recovery(reason)` leaves recovery at once, logged at WARNING.
      For when every copy of the lost entries is truly gone (e.g. every replica lost power):
      the group then goes on without them.

Sync mode never needs it: a replica acknowledges only flushed entries, so a power loss
takes nothing it acknowledged; the driver passes `recovering=False`.
"""
from __future__ import annotations

import logging
import random

from .messages import Role

log = logging.getLogger(__name__)


def boot_id(rng: random.Random) -> int:
    """A core's incarnation id (R3b): random, non-zero, from the rng's state without drawing
    from it, so the core's random sequence (election timings, scenario scripts) is the one it
    was. Int tuples hash the same in every process (PYTHONHASHSEED salts str and bytes only)."""
    return (hash(rng.getstate()) & ((1 << 62) - 1)) | 1


class RecoveryRules:
    """Mixed into RaftCore: the recovery floor and its rules (the core calls these)."""

    recovering_term: int
    _hs_dirty: bool

    def _init_recovery(self, persisted_floor: int, recovering: bool) -> None:
        """R1 / R4: the floor at open."""
        self.recovering_term = persisted_floor
        self._boot_end = (-1, 0)   # R3b: (term, index) from our leader's Heartbeat
        lg = self.log
        if not recovering or (self.term == 0 and lg.last_index() == 0):
            if persisted_floor and lg.last_index() and lg.last_term() > persisted_floor:
                self._check_recovered()  # (R3 met before a crash that kept the page cache)
            elif persisted_floor:
                log.warning("raft %s: still recovering (floor term %d): no vote, no campaign "
                            "until it has caught up with a leader of a term >= %d (R3, R3b)",
                            self.id, persisted_floor, persisted_floor)
            return
        floor = max(self.term, lg.last_term(), persisted_floor, 1)
        self.recovering_term = floor
        self._hs_dirty = True  # persisted before the first message leaves
        log.warning("raft %s: opened after a possible power loss with flush = async: entries "
                    "it acknowledged may be gone; recovering (floor term %d): it grants no "
                    "vote and does not campaign until it has caught up with a leader of a term >= "
                    "%d (docs/raft.md \"Recovery after power loss\")", self.id, floor, floor)

    @property
    def recovering(self) -> bool:
        return self.recovering_term > 0

    def may_campaign(self) -> bool:
        """Introspection: could this node run for election (a voter, or finishing a change
        that removed it) -- and is it not recovering (R2)?"""
        return not self.recovering_term and self._may_campaign()

    def _note_boot_end(self, boot: int, boot_end: int) -> None:
        """R3b: a Heartbeat of our leader (this term) said where it stood when it first heard
        from incarnation `boot`; only our own counts."""
        if boot == self.boot and boot_end > 0:
            self._boot_end = (self.term, boot_end)

    def _check_recovered(self) -> None:
        """R3 / R3b, after the log took entries from a leader or its match with it grew."""
        t = self.recovering_term
        if not t:
            return
        if self.log.last_term() > t:
            why = f"its log holds entries of term {self.log.last_term()} > floor {t}"
        else:
            term, end = self._boot_end
            if (term != self.term or self.role != Role.FOLLOWER or self.leader_match < end
                    or self.persisted_index < end):
                return
            why = (f"it holds the log of leader {self.leader_id} of term {term} (>= floor {t}) "
                   f"through {end}, the leader's end when it first heard from this replica")
        self.recovering_term = 0
        self._hs_dirty = True
        log.warning("raft %s: recovered: %s; it votes and may campaign again", self.id, why)

    def end_recovery(self, reason: str) -> None:
        """R5: the operator's override. Entries this replica acknowledged and lost, and that no
        running peer holds, are then lost for good (the group goes on without them)."""
        if not reason or not isinstance(reason, str):
            raise ValueError("end_recovery needs a reason (it is logged)")
        t = self.recovering_term
        if not t:
            return
        self.recovering_term = 0
        self._hs_dirty = True
        log.warning("raft %s: recovery ended by the operator (floor term %d): %s; entries it "
                    "acknowledged before its power loss and no peer holds are lost",
                    self.id, t, reason)
