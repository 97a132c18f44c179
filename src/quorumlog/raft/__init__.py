"""Raft for quorumlog: DLedger's election and replication as a pure state machine (core.py),
the log-storage seam (log.py, memlog.py; the native log's adapter is
quorumlog.store.nativelog); the simulator is quorumlog.testing."""
from .core import (BehindRetention, ConfigChanged, HardState, LeaseExpired, LogInstalled,
                   RaftConfig, RaftCore, ReadAborted, Ready, ReadReady, ReadyToServe,
                   RoleChanged, TransferAborted)
from .log import EntryKind, RaftLog
from .memlog import MemLog
from .messages import Code, DispatchState, ParseResult, Role, VoteResult

__all__ = ["RaftCore", "RaftConfig", "HardState", "Ready", "RoleChanged", "ReadyToServe",
           "LeaseExpired", "ReadReady", "ReadAborted", "LogInstalled",
           "ConfigChanged", "TransferAborted", "BehindRetention", "EntryKind", "RaftLog",
           "MemLog", "Code", "DispatchState", "ParseResult", "Role", "VoteResult"]
