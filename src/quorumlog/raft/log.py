"""The log-storage seam of the Raft core: what RaftCore needs from a replicated log.

Implementations: `memlog.MemLog` (in memory, for simulation and unit tests),
`quorumlog.store.nativelog.NativeRaftLog` (the native mmap'd CommitLog through a thin adapter), and its
subclass `quorumlog.store.StoreRaftLog`, the log of a replicated MessageStore
(MessageStore.raft_log()). One conformance suite (tests/raft/test_raft_log_conformance.py) runs
against every implementation (the store's through tests/store/test_store_raft_seam.py).

Indexes start at 1; index 0 is the empty log's sentinel with term 0. Every entry has a term and
a kind (DATA, NOOP or CONFIG). Terms never decrease along the log.

The core calls the mutating methods synchronously while it handles an input: they may write to
the page cache / mmap but need not be durable. Durability is the driver's job: the core asks for
it through Ready.flush_to, and learns of it through RaftCore.on_persisted(index).
"""
from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple, Protocol, runtime_checkable


class EntryKind(IntEnum):
    DATA = 0     # a client message (one record = one entry = one message)
    NOOP = 1     # appended by every new leader so earlier terms' entries can commit
    CONFIG = 2   # membership: data is encode_voters(...)
    META = 3     # store metadata (topics): appended by the node driver, never by the core


def encode_voters(voters) -> bytes:
    """CONFIG entry body: the sorted voter ids, comma separated, UTF-8."""
    return ",".join(sorted(voters)).encode()


def decode_voters(data: bytes) -> tuple[str, ...]:
    return tuple(x for x in bytes(data).decode().split(";")[0].split(",") if x)


def encode_config(voters, learners=()) -> bytes:
    """CONFIG entry body with learners: the voters as encode_voters, then (only if there are
    learners) ';' and the sorted learner ids, comma separated. A learner is a member being
    added: it is in the configuration (so any leader, also a new one, keeps catching it up and
    promotes it) but never counts towards a quorum."""
    body = encode_voters(voters)
    return body + b";" + ",".join(sorted(learners)).encode() if learners else body


def decode_config(data: bytes) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(voters, learners) of a CONFIG entry body (encode_config or encode_voters)."""
    text = bytes(data).decode()
    voters, _, learners = text.partition(";")
    return (tuple(x for x in voters.split(",") if x), tuple(x for x in learners.split(",") if x))


class InstallImage(NamedTuple):
    """The leader's retained log as a byte stream a follower installs (the snapshot equivalent
    of this design: the log *is* the state; docs/raft.md "Installing a follower")."""
    first_index: int         # first entry of the image
    prev_term: int | None    # term of first_index - 1 (None: the log does not keep it)
    last_index: int          # last entry of the image
    last_term: int
    total_bytes: int         # chunks cover offsets [0, total_bytes)
    meta: bytes              # opaque state the follower's store needs with it (topic metadata)
    producers: tuple = ()    # producer_snapshot() of the leader's log: kept by the follower


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
        last_term(): InvalidArgumentError.

        This is the leader's only way in for data: RaftCore.propose(batch, count, nbytes)
        calls it, so the core learns of every entry. What `batch` is belongs to the log: a
        list of bytes for MemLog, (topic, bodies[, kwargs]) for a standalone NativeRaftLog, a
        PutRequest from MessageStore.prepare_put for a store's log (whose append is the
        store's one append path: queue offsets are assigned there, and the request is
        answered by MessageStore.apply_committed once committed)."""

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

    # -- producer ids (exactly-once retries; docs/raft.md "The producer table") -------------
    def append_producer_batch(self, term: int, batch: Any, pid: int, seq: int) -> int:
        """append_as_leader(term, batch), storing (pid, seq) with the batch: it travels in
        read()'s payload, so followers hold it too and producers() finds it on any replica.
        The record format does not change (the native log: reserved record properties)."""

    def producers(self, lo: int, hi: int) -> list:
        """[(first_index, last_index, pid, seq)] of the batches stored with a producer whose
        last entry is in [lo, hi], in log order (a new leader rebuilds its table from it)."""

    def producer_snapshot(self) -> list:
        """[(first_index, last_index, pid, seq, term)]: the newest batches (up to 16 per
        producer) among the entries dropped from the head (retention, or below an installed
        image), oldest first -- so a table rebuilt after retention still knows them."""

    # -- installing a follower from the leader's retained log ------------------------------
    def install_image(self) -> InstallImage:
        """Leader: describe the log as it is now, [first_index() .. last_index()]."""

    def read_image(self, image: InstallImage, offset: int, max_bytes: int) -> tuple[Any, int]:
        """Leader: (chunk, nbytes) of `image` from byte `offset` (a boundary an earlier chunk
        ended at, 0 first), at most max_bytes but never empty. ReplicationError if the log no
        longer holds the image (retention moved its head): start over with a new image."""

    def begin_install(self, image: InstallImage, head_config: tuple) -> None:
        """Follower: start receiving `image` (dropping any install in progress).
        head_config = (voters, learners) in effect at image.first_index - 1, kept with the log
        (config_history starts with it)."""

    def write_chunk(self, offset: int, chunk: Any) -> int:
        """Follower: stage a chunk at `offset` (must be where the last one ended; else
        ReplicationError, nothing staged). Returns the next offset."""

    def finish_install(self) -> int:
        """Follower: replace the whole log by the staged image, atomically and durably before
        it returns (a crash leaves the old log or the new one, never a mix); afterwards
        first_index() == image.first_index, term_at(first_index() - 1) == image.prev_term and
        last_index() == image.last_index. Returns last_index(). ReplicationError if incomplete."""
