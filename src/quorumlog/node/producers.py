"""The leader's producer table (a broker concern, not consensus: DESIGN.md): (producer id,
sequence) -> the batch that holds it, so a retried batch the log already holds is answered with
the original instead of being written twice -- and a batch the log holds only in part is
completed, never answered with the part. The node's put path checks and records here
(pipeline.py); a new leader builds its table from its own log before it takes a producer batch.

Kafka's idempotent producer, learned from (not copied): a producer keeps at most
`batches_per_producer` (N) batches in flight, the leader remembers each producer's last N
batches, and sequences are written in order with no gap:
  * seq above the last written: written if it is the next one (last + 1), or if the client
    says every earlier batch of its session is resolved (`base` == seq: acknowledged or given
    up); else OutOfOrderSequenceError (retriable: the predecessor is still in flight, the
    client resends in sequence order). A producer this leader does not know counts as "last
    written: none" -- only its `base` batch is written first.
  * seq among the remembered batches: KnownBatchError (a DuplicateBatchError), answered with
    the original's positions.
  * seq at or below the last written and not remembered: ProducerSequenceError, not
    retriable (whether it was written cannot be told). A client that keeps its window <= N
    never gets it: every batch it may retry is among the last N.
  * `base` 0 (a client that does not say): any seq above the last written is taken (gaps
    allowed: such a client must not pipeline).

Seed 002 §2.6: after a leader change a client that did not get its answer retries, and the new
leader may already hold (and will commit) the first attempt. The leader keeps the last
`batches_per_producer` batches of each producer; a new leader rebuilds the table from the tail
of its own log (RaftLog.producers over the last `window_entries` entries), which holds every
batch an earlier leader acknowledged and possibly some it did not (those will commit with the
new leader's NOOP, so answering the retry with them is right).

A batch of N messages is N entries, and a new leader may hold only a prefix of it (the old
leader's APPENDs are cut by size; a power loss drops a tail). A log that records each message's
ordinal in the batch and the batch's size N (the native log: record properties QL_I and QL_N)
lets the table tell: a `Batch` knows `count` (N, None if the log did not record it), how many
messages are `held` (always ordinals 0..held-1: every append of a batch's messages is of the
ones missing, in order, and a replica holds a prefix of its leader's log), and `ranges`, the
runs of entries [first, last, term] that hold them, in ordinal order. A retry of an incomplete
batch is answered by appending exactly the missing messages (`place`), after which the batch
spans several ranges.

Bounded: at most `max_producers` producers (the least recently written is forgotten first) and
`batches_per_producer` batches each; a retry older than that (or older than the window at a
leader change) is reported as such, never silently written twice.
"""
from __future__ import annotations

from collections import OrderedDict, deque

from ..errors import (DuplicateBatchError, OutOfOrderSequenceError, ProducerSequenceError,
                      QuorumlogError)
from ..raft.errors import NotSupportedByLogError

__all__ = ["Batch", "BatchMismatchError", "KnownBatchError", "ProducerTable",
           "UncompletableBatchError", "table_for_term"]


class Batch:
    """One (producer, sequence) batch the leader's log holds (some or all of)."""

    __slots__ = ("seq", "count", "held", "ranges", "prefix_known", "waiter")

    def __init__(self, seq: int, count: int | None, held: int, ranges: list,
                 prefix_known: bool = True):
        self.seq = seq
        self.count = count          # messages in the batch; None: the log did not record it
        self.held = held            # messages of it in the log: ordinals 0..held-1
        self.ranges = ranges        # [[first, last, term], ...] in ordinal order
        # False: the table was rebuilt from a window that began inside the batch, so the
        # entries of its first ordinals are not in `ranges` (the batch cannot be answered)
        self.prefix_known = prefix_known
        self.waiter = None          # the driver's: what a retry on this leader may await

    @property
    def complete(self) -> bool:
        return self.count is None or self.held >= self.count

    @property
    def first_index(self) -> int:
        return self.ranges[0][0] if self.ranges else 0

    @property
    def last_index(self) -> int:
        return self.ranges[-1][1] if self.ranges else 0

    @property
    def term(self) -> int:
        return self.ranges[-1][2] if self.ranges else 0

    def __repr__(self) -> str:
        return (f"Batch(seq={self.seq}, count={self.count}, held={self.held}, "
                f"ranges={self.ranges}, prefix_known={self.prefix_known})")


class KnownBatchError(DuplicateBatchError):
    """DuplicateBatchError naming the table's `batch` (count, held, ranges): the driver
    answers a complete batch from its ranges and completes an incomplete one."""

    def __init__(self, message: str, batch: Batch):
        super().__init__(message, batch.first_index, batch.last_index, batch.term)
        self.batch = batch


class BatchMismatchError(ProducerSequenceError):
    """A retry of (pid, seq) with a different number of messages than the batch the log
    holds under that sequence: refused, nothing appended."""


class UncompletableBatchError(ProducerSequenceError):
    """The log holds part of the batch but the leader cannot complete or answer it (the
    records do not say the batch's size, or the table does not know where its first
    messages are): refused, nothing appended; the batch is NOT stored whole."""


class ProducerTable:
    __slots__ = ("max_producers", "batches_per_producer", "_by_pid", "broken", "_source",
                 "term", "pending")

    def __init__(self, max_producers: int, batches_per_producer: int, term: int = 0):
        self.max_producers = max_producers
        self.batches_per_producer = batches_per_producer
        self.term = term            # the leader term this table serves (pipeline.py)
        # pid -> deque of Batch, oldest first; LRU order
        self._by_pid: OrderedDict = OrderedDict()
        # the error that kept rebuild() from reading the log (a damaged record): every
        # producer batch is refused then -- an incomplete table would let retries in twice
        self.broken: QuorumlogError | None = None
        self._source = None        # (log, lo, hi) of a rebuild not done yet (see rebuild)
        # a deferred rebuild has entries left to read (_source is set; see rebuild): an
        # attribute, not a property -- the pipeline reads it once per producer put
        self.pending = False

    def __len__(self) -> int:
        return len(self._table())

    def _table(self) -> OrderedDict:
        while self._source is not None:
            self.read_step(1 << 30)
        return self._by_pid

    def read_step(self, max_entries: int) -> bool:
        """Read the next `max_entries` entries of a deferred rebuild -> True once done. A
        driver reads the table this way, a slice per event-loop iteration, before it uses
        it; any other method reads what is left at once."""
        if self._source is None:
            return True
        log, lo, hi = self._source
        upto = min(hi, lo + max_entries - 1)
        self._source = (log, upto + 1, hi) if upto < hi else None
        self._read(log, lo, upto)
        if self.broken is not None:
            self._source = None
        self.pending = self._source is not None
        return self._source is None

    def lookup(self, pid: int, seq: int) -> Batch | None:
        batches = self._table().get(pid)
        if batches:
            for b in batches:
                if b.seq == seq:
                    return b
        return None

    def latest(self, pid: int) -> Batch | None:
        """pid's newest batch. Only it may be completed (place() after its first run): the
        log then holds every record of a producer's batches in sequence order, which is what
        makes "above the highest in the window" mean "never written" at a rebuild."""
        batches = self._table().get(pid)
        return batches[-1] if batches else None

    def check(self, pid: int, seq: int, base: int = 0) -> None:
        """Return if (pid, seq) may be written now (module docstring); raise KnownBatchError
        (a DuplicateBatchError) if it is one of the batches remembered, OutOfOrderSequenceError
        if its predecessor is missing while the client still has it in flight (`base`: the
        client's lowest unresolved sequence, 0: not given), else ProducerSequenceError.
        Sequences are written in increasing order only, so every log holds a producer's
        batches in sequence order and "above the highest" is exactly "not written" -- a lost
        pipelined batch retried after later ones is refused, not guessed (a remembered window
        that had lost an old batch once let a retry be written twice: simulation seed 967)."""
        # (the table itself when no rebuild is pending: the usual case, once per produce)
        batches = (self._by_pid if self._source is None else self._table()).get(pid)
        if self.broken is not None:
            raise ProducerSequenceError(
                f"producer {pid} sequence {seq}: refused, this leader could not read its log's "
                f"producer ids ({self.broken})")
        last = batches[-1].seq if batches else None
        if last is None or seq > last:
            if base and seq != base and (last is None or seq != last + 1):
                raise OutOfOrderSequenceError(
                    f"producer {pid} sequence {seq}: out of order, this leader holds "
                    + ("no batch of the producer" if last is None else f"up to sequence {last}")
                    + f" and the client has sequences from {base} in flight: resend them in "
                    "order (nothing appended)")
            return
        for b in batches:
            if b.seq == seq:
                raise KnownBatchError(
                    f"producer {pid} sequence {seq} is already at [{b.first_index}.."
                    f"{b.last_index}] (term {b.term}; {b.held} of "
                    f"{'?' if b.count is None else b.count} messages)", b)
        raise ProducerSequenceError(
            f"producer {pid}: sequence {seq} is not above the last written ({last}) "
            f"and not among the {len(batches)} batches remembered: refused, not retriable "
            "(whether it was written is unknown; a client keeps at most "
            f"{self.batches_per_producer} batches in flight)")

    def record(self, pid: int, seq: int, first: int, last: int, term: int) -> Batch:
        """A new batch, whole at [first, last] (last = first - 1: not appended yet, see
        place). Returns its Batch."""
        if self._source is not None:
            self._table()
        return self._add(pid, Batch(seq, last - first + 1, last - first + 1,
                                    [[first, last, term]] if last >= first else []))

    def reserve(self, pid: int, seq: int, count: int) -> Batch:
        """A new batch of `count` messages about to be appended (its place is given later by
        place()): a retry meanwhile finds it."""
        if self._source is not None:
            self._table()
        b = Batch(seq, count, 0, [])
        batches = self._by_pid.get(pid)
        if batches and seq > batches[-1].seq:     # (_add's usual case, inline: per put)
            self._by_pid.move_to_end(pid)
            batches.append(b)
            return b
        return self._add(pid, b)

    @staticmethod
    def place(batch: Batch, first: int, last: int, term: int) -> None:
        """The entries of messages batch.held.. were appended at [first, last] in `term`."""
        if batch.count is not None and batch.held + last - first + 1 > batch.count:
            raise ProducerSequenceError(
                f"sequence {batch.seq}: {last - first + 1} more messages would make "
                f"{batch.held + last - first + 1} of {batch.count}")
        batch.ranges.append([first, last, term])
        batch.held += last - first + 1

    def forget(self, pid: int, batch: Batch) -> None:
        """Drop a reserved batch whose append did not happen (nothing of it is in the log)."""
        batches = self._table().get(pid)
        if batches and batch in batches and not batch.held:
            batches.remove(batch)

    def _add(self, pid: int, batch: Batch) -> Batch:
        batches = self._by_pid.get(pid)
        if batches is None:
            batches = self._by_pid[pid] = deque(maxlen=self.batches_per_producer)
            if len(self._by_pid) > self.max_producers:
                self._by_pid.popitem(last=False)
        else:
            self._by_pid.move_to_end(pid)
            if batches and batch.seq <= batches[-1].seq:
                raise ProducerSequenceError(
                    f"producer {pid}: sequence {batch.seq} recorded after {batches[-1].seq}")
        batches.append(batch)
        return batch

    def rebuild(self, log, lo: int, hi: int) -> None:
        """From what the log kept of its dropped head, then its batches with a producer in
        [lo, hi], oldest first. A log may give each run of a batch's entries as
        (first, last, pid, seq) -- a whole batch -- or (first, last, pid, seq, count,
        first_ordinal) -- a run of ordinals first_ordinal.. of a batch of `count` messages
        (count None: not recorded).

        The window is read later, by the driver's read_step calls (a slice per loop
        iteration) or at the table's first use, not now: reading a 65,536-entry window at
        once (a quarter of a second on a busy machine) held a new leader's heartbeats back
        until the next election began, over and over (a Jepsen run's terms climbed to 800
        with no leader serving). Nothing between the two changes [lo, hi]: a leader does not
        truncate, and every producer batch it appends goes through this table."""
        self._by_pid.clear()
        self.broken = None
        self._source = None
        self.pending = False
        self._read_snapshot(log)
        if lo <= hi and self.broken is None:
            self._source = (log, lo, hi)
        self.pending = self._source is not None

    def _read_snapshot(self, log) -> None:
        try:
            for first, last, pid, seq, term in log.producer_snapshot():
                self._record_known(pid, seq, first, last, term, last - first + 1, 0)
        except NotSupportedByLogError:
            raise
        except QuorumlogError as e:
            self._by_pid.clear()
            self.broken = e

    def _read(self, log, lo: int, hi: int) -> None:
        try:
            runs = log.producers(lo, hi)
            self._record_runs(log, _kept_runs(runs, self.batches_per_producer,
                                              self.max_producers - len(self._by_pid),
                                              self._by_pid))
        except NotSupportedByLogError:
            raise
        except QuorumlogError as e:     # (a damaged record: never raised into an election)
            self._by_pid.clear()
            self.broken = e

    def _record_runs(self, log, runs) -> None:
        for run in runs:
            first, last, pid, seq = run[:4]
            count, ordinal = (run[4], run[5]) if len(run) > 4 else (last - first + 1, 0)
            self._record_known(pid, seq, first, last, log.term_at(last), count, ordinal)

    def _record_known(self, pid, seq, first, last, term, count, ordinal) -> None:
        """A run of entries [first, last] holding ordinals ordinal.. of batch (pid, seq) of
        `count` messages (count and ordinal None: a log that did not record them)."""
        n = last - first + 1
        batches = self._by_pid.get(pid)
        if batches and seq < batches[-1].seq:
            return  # (the snapshot and the window can overlap; an old log's disorder)
        if batches and seq == batches[-1].seq:
            b = batches[-1]
            if ordinal is None or (b.count == count and ordinal == b.held):
                b.held += n
            elif ordinal + n <= b.held:
                return  # (the snapshot and the window overlap)
            else:       # not the run that follows the ones seen: do not guess
                b.prefix_known = False
                b.held = max(b.held, ordinal + n)
            b.ranges.append([first, last, term])
            return
        if ordinal is None:
            b = Batch(seq, None, n, [[first, last, term]])
        else:
            b = Batch(seq, count, ordinal + n, [[first, last, term]], prefix_known=ordinal == 0)
        self._add(pid, b)


def _kept_runs(runs: list, keep: int, room: int, known) -> list:
    """The runs of `runs` (log order) whose batches can still be in the table once all of
    them are recorded: per producer, the runs of its last `keep` distinct sequences. A
    leader's window of single-message batches is 65,536 runs, nearly all of them pushed out
    of their producer's last `keep` by later ones; recording them cost ~70 ms of a new
    leader's first batch (bench/producer_rebuild.py).

    Exact, not a guess -- the table after recording the kept runs equals the table after
    recording all (tests/node/test_producer_table_batches.py, differential) -- when:
      * a producer's sequences do not decrease along `runs` (the log holds a producer's
        batches in sequence order: `latest`); a producer whose do is kept whole. Then each
        of its last `keep` sequences above what the table held is a new batch, so `keep`
        new batches push every dropped one out of its deque, and one not above is recorded
        alike either way, while a dropped run's sequence is below all of them;
      * no producer is forgotten for room (`max_producers`) meanwhile: if the runs name more
        producers new to the table than `room`, every run is kept."""
    if len(runs) <= keep:
        return runs
    state = {}          # pid -> [distinct sequences from the end, the last seen, cut-off]
    for run in reversed(runs):
        pid, seq = run[2], run[3]
        st = state.get(pid)
        if st is None:
            state[pid] = [1, seq, seq]
        elif st[2] >= 0 and seq != st[1]:
            if seq > st[1]:
                st[2] = -1          # out of order: keep all of this producer's runs
            else:
                st[0] += 1
                st[1] = seq
                if st[0] <= keep:
                    st[2] = seq
    if sum(1 for pid in state if pid not in known) > room:
        return runs
    return [run for run in runs if run[3] >= state[run[2]][2]]


def table_for_term(current: ProducerTable | None, log, term: int, *,
                   window_entries: int = 1 << 16, batches_per_producer: int = 8,
                   max_producers: int = 1 << 16) -> ProducerTable:
    """The leader's table for `term`: `current` if it serves that term, else a new one rebuilt
    from the last `window_entries` entries of `log` (read lazily: rebuild). Called by a leader
    before it takes a producer batch of its term, so every producer batch it appends in the
    term goes through the table and the rebuild sees all the earlier ones its log holds."""
    if current is not None and current.term == term:
        return current
    t = ProducerTable(max_producers, batches_per_producer, term)
    last = log.last_index()
    t.rebuild(log, max(log.first_index(), last - window_entries + 1), last)
    return t
