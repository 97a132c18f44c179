"""Errors the Raft core raises on purpose (all subclasses of quorumlog.errors.QuorumlogError).

They live here rather than in quorumlog/errors.py so the Raft package stays self-contained;
callers catch these (or QuorumlogError), never bare Exception.
"""
from __future__ import annotations

from ..errors import InstallError, InvalidArgumentError, QuorumlogError


class RaftError(QuorumlogError):
    """Base class of the Raft core's errors."""


class NotLeaderError(RaftError):
    """The node is not the leader; `leader_id` is the leader it knows of (or None)."""

    def __init__(self, message: str, leader_id: str | None = None, term: int = 0):
        super().__init__(message)
        self.leader_id = leader_id
        self.term = term


class LeaderTransferringError(RaftError):
    """Leadership is being handed over (DLedger's LEADER_TRANSFERRING): retry on the new leader."""


class BackpressureError(RaftError):
    """Too many uncommitted entries (max_uncommitted_entries): retry after commits catch up."""


class ProposalLimitError(RaftError, InvalidArgumentError):
    """A proposal breaks a limit (max_entries_per_proposal / max_proposal_bytes, or is empty)."""


class MembershipChangeError(RaftError):
    """A membership change was refused: one is already in progress, or the target is invalid."""


class TransferError(RaftError):
    """A leadership transfer was refused (unknown or non-voting target, one already running)."""


class NotSupportedByLogError(RaftError):
    """The RaftLog in use does not implement an optional capability yet (producer ids, or
    installing a follower from the leader's retained log); docs/raft.md says what it needs."""


class InstallRefusedError(NotSupportedByLogError, InstallError):
    """An install image this log can never stage (another segment size, over its
    max_install_bytes, a malformed description): refused before anything changed; the core
    answers UNSUPPORTED and the follower stays behind."""


class RaftInvariantError(RaftError, AssertionError):
    """The core found its own state or its log breaking a Raft invariant (a bug, not bad input)."""
