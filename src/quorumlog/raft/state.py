"""The Raft core's values: its settings (RaftConfig), persisted state (HardState), outputs
(Ready and the events), and the constants its rule files share. core.py re-exports them."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from ..errors import ConfigError
from .messages import DispatchState, Role

NEVER = -(1 << 62)
# GAP answers below a follower's acknowledged match, in a row, before the leader suspects the
# follower lost its tail (see _on_append_response)
GAP_PROBE_AFTER = 3
COMPARE = DispatchState.COMPARE
TRUNCATE = DispatchState.TRUNCATE
APPEND = DispatchState.APPEND
INSTALL = DispatchState.INSTALL


@dataclass
class RaftConfig:
    """Timings and limits. Defaults aim at sub-second failover; dledger_defaults() gives
    DLedger's own (2 s heartbeats, leak 3)."""

    # A leader is given up after max_heartbeat_leak x heartbeat_interval_ms = 700 ms of
    # silence: long enough that a TCP retransmission stall (200 ms minimum RTO, 200-800 ms in
    # the simulator) on one link is ridden out, short enough for fail-over p99 < 1 s
    # (docs/benchmarks.md "Raft elections and fail-over" measures both).
    heartbeat_interval_ms: int = 100
    max_heartbeat_leak: int = 7
    min_vote_interval_ms: int = 100
    max_vote_interval_ms: int = 250
    vote_response_timeout_ms: int = 150   # DLedger waits 2000 + rand(max_vote_interval)
    min_take_leadership_vote_interval_ms: int = 0
    max_take_leadership_vote_interval_ms: int = 30
    append_timeout_ms: int = 300          # an unacknowledged batch is re-sent after this
    max_batch_bytes: int = 1 << 20        # per Append (a single larger entry still goes alone)
    max_batch_entries: int = 8192         # per Append
    max_inflight_batches: int = 16        # per follower
    max_entries_per_proposal: int = 8192
    max_proposal_bytes: int = 16 << 20
    max_uncommitted_entries: int = 1 << 20  # leader back-pressure on propose
    transfer_timeout_ms: int = 1000
    learner_max_lag_entries: int = 64     # a learner this close to the leader's end is caught up
    preferred_leader_id: str | None = None
    reject_votes_while_leader_live: bool = True  # seed 002's rule against removed members
    # a node raises its term only after a quorum answered a pre-vote that it would vote for it
    # (a node cut off from a live leader no longer deposes it when it comes back)
    pre_vote: bool = True
    # a follower whose leader's process exited (its peer port refuses connections: the
    # driver calls on_peer_down) campaigns at once instead of after the leak (election.py)
    campaign_on_leader_exit: bool = True
    # Leader lease: a leader serves (ready to serve, lease reads) only while no other node can
    # have been elected. Followers refuse votes and do not run for the leak after they last
    # heard it; the leader counts its lease from the *send* time of the last heartbeat a quorum
    # acknowledged, for leak x (1 - skew) / (1 + skew) - lease_guard_ms. Sound while every clock
    # runs within 1 +- max_clock_rate_skew_permille/1000 of real time and the driver ticks at
    # least every lease_guard_ms / 2 (a follower notes a heartbeat at its last tick's time),
    # or sets the core's clock before each message (RaftCore.set_clock; node/driver.py).
    max_clock_rate_skew_permille: int = 50
    lease_guard_ms: int = 30
    max_pending_reads: int = 4096         # read_index requests waiting for a heartbeat quorum
    # heartbeats at multiples of heartbeat_interval_ms of the clock, not interval after the
    # last: the groups of one process (node/host.py) then send theirs in the same tick and
    # the host carries them to each peer in one frame
    align_heartbeats: bool = False
    # remove_member refuses a configuration without a quorum of healthy voters (membership.py;
    # etcd's --strict-reconfig-check); False lets an operator (or a test) do it anyway
    strict_reconfig_check: bool = True

    def validate(self) -> "RaftConfig":
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("preferred_leader_id", "reject_votes_while_leader_live", "pre_vote",
                          "align_heartbeats", "strict_reconfig_check",
                          "campaign_on_leader_exit"):
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"RaftConfig.{f.name} must be a non-negative int, got {v!r}")
        for name in ("heartbeat_interval_ms", "max_heartbeat_leak", "max_batch_bytes",
                     "max_batch_entries", "max_inflight_batches", "max_entries_per_proposal",
                     "max_proposal_bytes", "max_uncommitted_entries", "append_timeout_ms"):
            if getattr(self, name) < 1:
                raise ConfigError(f"RaftConfig.{name} must be >= 1")
        if self.max_vote_interval_ms <= self.min_vote_interval_ms:
            raise ConfigError("RaftConfig.max_vote_interval_ms must be > min_vote_interval_ms")
        if self.max_clock_rate_skew_permille >= 1000:
            raise ConfigError("RaftConfig.max_clock_rate_skew_permille must be < 1000")
        if self.max_take_leadership_vote_interval_ms <= self.min_take_leadership_vote_interval_ms:
            raise ConfigError("RaftConfig.max_take_leadership_vote_interval_ms must be > "
                              "min_take_leadership_vote_interval_ms")
        return self

    @classmethod
    def dledger_defaults(cls, **kw) -> "RaftConfig":
        d = dict(heartbeat_interval_ms=2000, max_heartbeat_leak=3, min_vote_interval_ms=300,
                 max_vote_interval_ms=1000, vote_response_timeout_ms=2000,
                 append_timeout_ms=1000, transfer_timeout_ms=6000, lease_guard_ms=250)
        d.update(kw)
        return cls(**d)


class HardState(NamedTuple):
    term: int = 0
    voted_for: str | None = None
    # > 0: recovering after an unclean async open, until the log holds an entry of a later
    # term (raft/recovery.py); 0: not recovering
    recovering_term: int = 0


# -- events ------------------------------------------------------------------------------
class RoleChanged(NamedTuple):
    term: int
    role: Role
    leader_id: str | None


class ReadyToServe(NamedTuple):
    """The leader's log end equals the commit index, dispatch caught up (seed 001) and its
    lease is valid. Sent again when a lost lease is regained."""
    term: int


class LeaseExpired(NamedTuple):
    """The leader's lease ran out (no heartbeat quorum for too long) or it handed leadership
    over: stop serving (the broker's master role) until the next ReadyToServe."""
    term: int


class ReadReady(NamedTuple):
    """read_index(ctx): a read that waits until dispatch reaches `index` is linearizable."""
    ctx: Any
    index: int


class ReadAborted(NamedTuple):
    """read_index(ctx) cannot be answered here (not the leader any more): retry elsewhere."""
    ctx: Any
    reason: str


class ConfigChanged(NamedTuple):
    index: int
    voters: tuple
    learners: tuple = ()  # members being added (replicated to, never counted)


class TransferAborted(NamedTuple):
    term: int
    transferee: str
    reason: str


class BehindRetention(NamedTuple):
    """A follower needs entries the leader's log no longer holds: the leader streams its
    retained log to it (InstallSegment), if its log can (else the follower stays behind)."""
    peer: str
    next_index: int


class LogInstalled(NamedTuple):
    """Follower: the log was replaced by the leader's retained log [first_index..last_index];
    `meta` is the leader store's opaque state. The driver resets its store from the new log and
    meta (consume queues are rebuilt from the log, as after a recovery)."""
    first_index: int
    last_index: int
    meta: bytes


class Ready:
    __slots__ = ("hard_state", "flush_to", "flush_gen", "messages", "commit_index", "events")

    def __init__(self, hard_state, flush_to, flush_gen, messages, commit_index, events):
        self.hard_state = hard_state
        self.flush_to = flush_to
        self.flush_gen = flush_gen
        self.messages = messages
        self.commit_index = commit_index
        self.events = events

    def empty(self) -> bool:
        return (self.hard_state is None and self.flush_to is None and not self.messages
                and self.commit_index is None and not self.events)


class VoteRound:
    __slots__ = ("term", "deadline_ms", "responded", "valid", "accepted", "not_ready",
                 "bigger_ledger", "already_has_leader", "known_max_term", "pre")

    def __init__(self, term, deadline_ms, pre=False):
        self.term = term
        self.deadline_ms = deadline_ms
        self.pre = pre  # a pre-vote round: `term` is the term we would run in
        self.responded: set = set()
        self.valid = 0
        self.accepted = 0
        self.not_ready = 0
        self.bigger_ledger = 0
        self.already_has_leader = False
        self.known_max_term = term
