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

log = logging.getLogger(__name__)


class RecoveryRules:
    """Mixed into RaftCore: the recovery floor and its rules (the core calls these)."""

    recovering_term: int
    _hs_dirty: bool

    def _init_recovery(self, persisted_floor: int, recovering: bool) -> None:
        """R1 / R4: the floor at open."""
        self.recovering_term = persisted_floor
        lg = self.log
        if not recovering or (self.term == 0 and lg.last_index() == 0):
            if persisted_floor and lg.last_index() and lg.last_term() > persisted_floor:
                self._check_recovered()  # (R3 met before a crash that kept the page cache)
            elif persisted_floor:
                log.warning("raft %s: still recovering (floor term %d): no vote, no campaign "
                            "until a leader of a later term replicates to it",
                            self.id, persisted_floor)
            return
        floor = max(self.term, lg.last_term(), persisted_floor, 1)
        self.recovering_term = floor
        self._hs_dirty = True  # persisted before the first message leaves
        log.warning("raft %s: opened after a possible power loss with flush = async: entries "
                    "it acknowledged may be gone; recovering (floor term %d): it grants no "
                    "vote and does not campaign until a leader of a term > %d replicates to it "
                    "(docs/raft.md \"Recovery after power loss\")", self.id, floor, floor)

    @property
    def recovering(self) -> bool:
        return self.recovering_term > 0

    def may_campaign(self) -> bool:
        """Introspection: could this node run for election (a voter, or finishing a change
        that removed it) -- and is it not recovering (R2)?"""
        return not self.recovering_term and self._may_campaign()

    def _check_recovered(self) -> None:
        """R3, after the log took entries from a leader."""
        t = self.recovering_term
        if t and self.log.last_term() > t:
            self.recovering_term = 0
            self._hs_dirty = True
            log.warning("raft %s: recovered: its log holds entries of term %d > floor %d from "
                        "leader %s; it votes and may campaign again", self.id,
                        self.log.last_term(), t, self.leader_id)

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
