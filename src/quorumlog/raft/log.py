"""The log-storage seam of the Raft core: what RaftCore needs from a replicated log.

Two implementations: `memlog.MemLog` (in memory, for simulation and unit tests) and the native
mmap'd CommitLog (Cython), through the thin adapter `nativelog.NativeRaftLog`. One
conformance suite (tests/raft/test_raft_log_conformance.py) runs against every implementation.

Indexes start at 1; index 0 is the empty log's sentinel with term 0. Every entry has a term and
a kind (DATA, NOOP or CONFIG). Terms never decrease along the log.

The core calls the mutating methods synchronously while it handles an input: they may write to
the page cache / mmap but need not be durable. Durability is the driver's job: the core asks for
it through Ready.flush_to, and learns of it through RaftCore.on_persisted(index).
"""
from __future__ import annotations

from enum import IntEnum
from typing import Any, Protocol, runtime_checkable


class EntryKind(IntEnum):
    DATA = 0     # a client message (one record = one entry = one message)
    NOOP = 1     # appended by every new leader so earlier terms' entries can commit
    CONFIG = 2   # membership: data is encode_voters(...)
    META = 3     # store metadata (topics): appended by the node driver, never by the core


def encode_voters(voters) -> bytes:
    """CONFIG entry body: the sorted voter ids, comma separated, UTF-8."""
    return ",".join(sorted(voters)).encode()


def decode_voters(data: bytes) -> tuple[str, ...]:
    return tuple(x for x in bytes(data).decode().split(",") if x)


@runtime_checkable
class RaftLog(Protocol):
    def first_index(self) -> int:
        """Lowest index still held (1 for a log that never dropped its head)."""

    def last_index(self) -> int:
        """Highest index held; first_index() - 1 when empty."""

    def last_term(self) -> int:
        """term_at(last_index())."""

    def term_at(self, index: int) -> int:
        """Term of the entry at `index`; valid for first_index()-1 <= index <= last_index()
        (index 0 -> 0). Outside that range: IndexOutOfRangeError."""

    def read(self, lo: int, hi: int, max_bytes: int) -> tuple[Any, int, int]:
        """Whole entries lo..lo+count-1 (count >= 1, lo+count-1 <= hi), stopping before
        max_bytes would be exceeded -- but always at least one entry. Returns
        (payload, count, nbytes): payload is opaque to the core and is what a follower's
        append_replicated() accepts (the native log: a memoryview of the records' bytes)."""

    def append_as_leader(self, term: int, batch: Any) -> int:
        """Append a batch of client messages, each becoming one DATA entry of `term`; the log
        assigns indexes (and positions). Returns the new last index. A term below
        last_term(): InvalidArgumentError."""

    def append_control(self, term: int, kind: EntryKind, data: bytes) -> int:
        """Append one NOOP or CONFIG entry of `term`. Returns the new last index."""

    def append_replicated(self, payload: Any) -> int:
        """Follower: append a payload another log's read() returned, verbatim. Its first entry
        must be last_index()+1 and its terms >= last_term() (else ReplicationError).
        Returns the new last index."""

    def truncate_after(self, index: int) -> None:
        """Drop every entry after `index` (first_index()-1 <= index <= last_index())."""

    def flush(self) -> int:
        """Make everything appended so far durable; return the durable last index."""
