"""The leader's producer table: (producer id, sequence) -> the batch that holds it, so a retried
batch the log already holds is answered with the original instead of being written twice.

Seed 002 §2.6: after a leader change a client that did not get its answer retries, and the new
leader may already hold (and will commit) the first attempt. Each batch a producer sends carries
its producer id and a sequence number that grows with every new batch (the leader accepts new
sequences in increasing order only, so a log holds each producer's batches in that order). The
leader keeps the last
`batches_per_producer` batches of each producer; a new leader rebuilds the table from the tail of
its own log (RaftLog.producers over the last `window_entries` entries), which holds every batch
an earlier leader acknowledged and possibly some it did not (those will commit with the new
leader's NOOP, so answering the retry with them is right).

Bounded: at most `max_producers` producers (the least recently written is forgotten first) and
`batches_per_producer` batches each; a retry older than that (or older than the window at a
leader change) is reported as such, never silently written twice.
"""
from __future__ import annotations

from collections import OrderedDict, deque

from .errors import DuplicateBatchError, ProducerSequenceError


class ProducerTable:
    __slots__ = ("max_producers", "batches_per_producer", "_by_pid")

    def __init__(self, max_producers: int, batches_per_producer: int):
        self.max_producers = max_producers
        self.batches_per_producer = batches_per_producer
        # pid -> deque of (seq, first_index, last_index, term), oldest first; LRU order
        self._by_pid: OrderedDict = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_pid)

    def check(self, pid: int, seq: int) -> None:
        """Return if seq is new (above every sequence of pid written so far); raise
        DuplicateBatchError if (pid, seq) is one of the batches remembered, else
        ProducerSequenceError. Sequences are accepted in increasing order only, so every log
        holds a producer's batches in sequence order and "above the highest" is exactly "not
        written" -- a lost pipelined batch retried after later ones is refused, not guessed
        (a remembered window that had lost an old batch once let a retry be written twice:
        simulation seed 967)."""
        batches = self._by_pid.get(pid)
        if not batches or seq > batches[-1][0]:
            return
        for s, first, last, term in batches:
            if s == seq:
                raise DuplicateBatchError(
                    f"producer {pid} sequence {seq} is already at [{first}..{last}] (term {term})",
                    first, last, term)
        raise ProducerSequenceError(
            f"producer {pid}: sequence {seq} is not above the last written ({batches[-1][0]}) "
            f"and not among the {len(batches)} batches remembered: refused (whether it was "
            "written is unknown)")

    def record(self, pid: int, seq: int, first: int, last: int, term: int) -> None:
        batches = self._by_pid.get(pid)
        if batches is None:
            batches = self._by_pid[pid] = deque(maxlen=self.batches_per_producer)
            if len(self._by_pid) > self.max_producers:
                self._by_pid.popitem(last=False)
        else:
            self._by_pid.move_to_end(pid)
            if seq <= batches[-1][0]:
                raise ProducerSequenceError(
                    f"producer {pid}: sequence {seq} recorded after {batches[-1][0]}")
        batches.append((seq, first, last, term))

    def rebuild(self, log, lo: int, hi: int) -> None:
        """From what the log kept of its dropped head, then its batches with a producer in
        [lo, hi], oldest first."""
        self._by_pid.clear()
        for first, last, pid, seq, term in log.producer_snapshot():
            self._record_known(pid, seq, first, last, term)
        for first, last, pid, seq in log.producers(lo, hi):
            self._record_known(pid, seq, first, last, log.term_at(last))

    def _record_known(self, pid, seq, first, last, term) -> None:
        batches = self._by_pid.get(pid)
        if batches and seq <= batches[-1][0]:
            return  # (the snapshot and the window can overlap)
        self.record(pid, seq, first, last, term)
