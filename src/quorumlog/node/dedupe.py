"""Idempotent produce: a producer id + sequence number per batch, carried in the records.

A client that retries a batch (a timeout, a lost connection, a failover) sends it again with
the same (producer id, sequence). Every record of the batch carries both as reserved record
properties (PROP_PID, PROP_SEQ: the on-disk format is unchanged), so any leader -- a new one
after failover too -- can tell the batch is already in its log: the leader keeps a table of
the recent sequences of each producer, filled as it appends and rebuilt from the tail of its
log when it becomes leader. A duplicate is answered with the original batch's result and
appended nothing.

Bounded: at most `max_producers` producers (least recently used dropped first) and
`window` sequences each; the rebuild decodes at most `scan_records` records of the tail.
"""
from __future__ import annotations

import collections
import logging

log = logging.getLogger(__name__)

__all__ = ["PROP_PID", "PROP_SEQ", "RESERVED_PROPERTIES", "ProducerTable", "Entry"]

PROP_PID = "QL_PID"
PROP_SEQ = "QL_SEQ"
RESERVED_PROPERTIES = frozenset((PROP_PID, PROP_SEQ))


class Entry:
    """Where a (producer, sequence) batch is in the log; `future` while its commit is
    awaited on this leader."""

    __slots__ = ("first_index", "last_index", "future")

    def __init__(self, first_index, last_index, future=None):
        self.first_index = first_index
        self.last_index = last_index
        self.future = future


class ProducerTable:
    def __init__(self, max_producers: int = 65536, window: int = 256,
                 scan_records: int = 16384):
        self.max_producers = max_producers
        self.window = window
        self.scan_records = scan_records
        self._t: collections.OrderedDict[int, collections.OrderedDict] = collections.OrderedDict()
        self.duplicates = 0

    def clear(self) -> None:
        self._t.clear()

    def __len__(self) -> int:
        return len(self._t)

    def lookup(self, pid: int, seq: int) -> Entry | None:
        seqs = self._t.get(pid)
        if seqs is None:
            return None
        self._t.move_to_end(pid)
        return seqs.get(seq)

    def record(self, pid: int, seq: int, entry: Entry) -> None:
        seqs = self._t.get(pid)
        if seqs is None:
            seqs = self._t[pid] = collections.OrderedDict()
            if len(self._t) > self.max_producers:
                self._t.popitem(last=False)
        else:
            self._t.move_to_end(pid)
        old = seqs.get(seq)
        if old is not None:
            old.first_index = min(old.first_index, entry.first_index)
            old.last_index = max(old.last_index, entry.last_index)
            return
        seqs[seq] = entry
        if len(seqs) > self.window:
            seqs.popitem(last=False)

    def rebuild(self, commitlog) -> int:
        """Fill the table from the last `scan_records` records of the log -> records read."""
        self._t.clear()
        cl = commitlog
        last = cl.last_index
        if last <= 0:
            return 0
        first = max(cl.first_index, last - self.scan_records + 1, 1)
        from ..commitlog import MESSAGE
        n = 0
        pos = cl.position_of(first)
        end = cl.end_position
        while pos < end:
            info, nxt = cl.scan(pos, end, 4096)
            if nxt == pos:
                break
            for p, t in zip(info["position"].tolist(), info["type"].tolist()):
                if t != MESSAGE:
                    continue
                rec = cl.decode_at(p)
                n += 1
                props = rec.properties
                if props and PROP_PID in props:
                    try:
                        pid, seq = int(props[PROP_PID]), int(props[PROP_SEQ])
                    except (KeyError, ValueError):
                        continue
                    self.record(pid, seq, Entry(rec.index, rec.index))
            pos = nxt
        return n
