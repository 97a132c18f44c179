"""Per-follower dispatch state on the leader (DLedger's EntryDispatcher, as plain data).

The leader keeps one Progress per follower (voter or learner). The state machine is driven by
RaftCore; this module only holds the numbers, so the hot path (an append response) touches a
handful of attributes and a deque, never a per-entry structure.

    COMPARE  -- probe (empty Append) at `probe_prev`; the follower answers with the start of its
                conflicting term, so the probe walks back one *term* per round trip
    TRUNCATE -- match point found: send one batch (window 1); accepting it truncates the
                follower's conflicting tail; when it is acknowledged -> APPEND
    APPEND   -- pipelined: up to max_inflight_batches batches in flight, each at most
                max_batch_bytes; a batch not acknowledged within append_timeout_ms re-sends
                from the follower's match point
    INSTALL  -- the follower needs entries the leader no longer holds: the leader streams its
                retained log (an InstallImage) in chunks of max_batch_bytes, up to
                max_inflight_batches in flight; then APPEND from the image's end
"""
from __future__ import annotations

from collections import deque

from .messages import DispatchState


class Progress:
    __slots__ = ("peer", "state", "match", "next", "inflight", "epoch", "probe_prev",
                 "probe_sent_ms", "last_resp_ms", "is_learner", "behind_retention", "leaving_at",
                 "acked_seq", "lease_ack_ms", "image", "image_sent", "image_acked",
                 "gaps_below_match", "gap_probe_epoch", "boot", "boot_end", "floor")

    def __init__(self, peer: str, next_index: int, now_ms: int, is_learner: bool = False):
        self.peer = peer
        self.state = DispatchState.COMPARE
        self.match = 0                 # durable on the follower and matching this leader
        self.next = next_index         # next index to send
        self.inflight: deque = deque() # (last_index, sent_ms) of unacknowledged batches, in order
        self.epoch = 0                 # bumped on every reset; stale rejections are ignored
        self.probe_prev = next_index - 1
        self.probe_sent_ms = -(1 << 62)
        self.last_resp_ms = now_ms     # its last answer to us (check-quorum)
        self.acked_seq = 0             # highest heartbeat round it answered SUCCESS (read_index)
        self.lease_ack_ms = -(1 << 62)  # send time of that round (the leader's lease)
        self.image = None              # INSTALL: the InstallImage being streamed
        self.image_sent = 0            # INSTALL: next byte offset to send
        self.image_acked = 0           # INSTALL: offset the follower has staged up to
        self.is_learner = is_learner
        self.behind_retention = False  # next < log.first_index(): needs an install (reported once)
        # removed from the voters by the CONFIG entry at this index: still replicated to (as
        # a learner) until that entry commits, so the removed node learns it is out and stops
        # campaigning (a removed node that never hears of it keeps bumping terms)
        self.leaving_at = 0
        # GAP answers below `match` in a row, and the epoch of the probe they triggered: a
        # follower that lost acknowledged entries (async flush + power loss) is re-probed
        self.gaps_below_match = 0
        self.gap_probe_epoch = -1
        # the follower's incarnation (HeartbeatResponse.boot), our last index when we first
        # heard from it, and its recovery floor (0: not recovering): raft/recovery.py R3b
        self.boot = 0
        self.boot_end = 0
        self.floor = 0

    def reset_to(self, state: DispatchState, next_index: int) -> None:
        self.state = state
        self.next = next_index
        self.inflight.clear()
        self.epoch += 1

    def describe(self) -> str:
        return (f"{self.peer}:{self.state.name} match={self.match} next={self.next} "
                f"inflight={len(self.inflight)}{' learner' if self.is_learner else ''}")
