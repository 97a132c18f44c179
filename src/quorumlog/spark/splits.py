"""Split planning: byte ranges of segment files with the read limits frozen at planning
(the same rules as QuorumlogInputFormat.planSplits on the JVM)."""
from __future__ import annotations

import os

import numpy as np

from .. import format as fmt
from .filters import I64_MAX, I64_MIN, RowFilter
from .raft_index import RaftIndex
from .store_meta import StoreSnapshot, numbered, open_store

DEFAULT_SPLIT_BYTES = 32 << 20       # Hadoop's local block size: the JVM reader's default too
MIN_SPLIT_BYTES = 4096               # QuorumlogInputFormat.MIN_SPLIT_BYTES
NO_LIMIT = (1 << 63) - 1


class Split:
    """A byte range [start, end) of one segment file plus the read limits frozen at planning."""

    __slots__ = ("root", "segment", "base", "start", "end", "limit", "committed",
                 "index_file_entries")

    def __init__(self, root, segment, base, start, end, limit, committed, index_file_entries):
        self.root, self.segment, self.base = root, segment, base
        self.start, self.end = start, end
        self.limit, self.committed, self.index_file_entries = limit, committed, index_file_entries

    def __repr__(self):
        return f"Split({self.segment}, {self.start}, {self.end}, limit={self.limit})"


def plan_splits(root, *, committed_only: bool = True, split_bytes: int = DEFAULT_SPLIT_BYTES
                ) -> list[Split]:
    """The splits of a store (a path, or a StoreSnapshot whose checkpoint is used instead of
    reading it again): every segment cut into split_bytes ranges (one range per segment when
    the store has no raft index to find record boundaries with), up to the checkpoint's
    committed position (committed_only) or the end of the files."""
    snap = root if isinstance(root, StoreSnapshot) else open_store(root)
    root = snap.root
    committed = snap.committed_position
    limit = committed if committed_only else NO_LIMIT
    entries = snap.index_file_entries
    have_index = snap.checkpoint is not None and bool(numbered(os.path.join(root, "index")))
    size = max(split_bytes, MIN_SPLIT_BYTES) if have_index else NO_LIMIT
    out = []
    for base in numbered(os.path.join(root, "commitlog")):
        if base >= limit:
            break
        seg = os.path.join(root, "commitlog", fmt.segment_name(base))
        n = min(os.path.getsize(seg), limit - base)
        off = 0
        while off < n:
            out.append(Split(root, seg, base, off, min(off + size, n), limit, committed, entries))
            off += size
    return out


def prune_by_store_ts(splits: list[Split], rows: RowFilter) -> list[Split]:
    """The splits that may hold a record whose store timestamp passes rows. Store timestamps
    never decrease along the log (a leader stamps max(clock, last stamp)), so a split's
    records lie between the stamps of the first record at or after its start and of the
    first record at or after its end: two raft-index searches and two header reads."""
    if not rows.has_store_ts:
        return splits
    stamps = {}
    out = []
    for s in splits:
        ends = []
        for pos in (s.base + s.start, s.base + s.end):
            if (s.root, pos) not in stamps:
                stamps[s.root, pos] = _store_ts_at_or_after(s, pos)
            ends.append(stamps[s.root, pos])
        lo = I64_MIN if ends[0] is None else ends[0]
        hi = I64_MAX if ends[1] is None else ends[1]
        if rows.may_hold_store_ts(lo, hi):
            out.append(s)
    return out


def _store_ts_at_or_after(split: Split, pos: int) -> int | None:
    """Store timestamp (ms) of the first indexed record at or after log position pos; None
    when unknown (no index, no such record, or a header that does not check out)."""
    if split.index_file_entries <= 0:
        return None
    p = RaftIndex(split.root, split.index_file_entries).first_position_at_or_after(pos)
    if p is None:
        return None
    seg_dir = os.path.dirname(split.segment)
    bases = [b for b in numbered(seg_dir) if b <= p]
    if not bases:
        return None
    try:
        with open(os.path.join(seg_dir, fmt.segment_name(bases[-1])), "rb") as f:
            f.seek(p - bases[-1])
            raw = f.read(fmt.HEADER_SIZE)
    except OSError:
        return None
    if len(raw) < fmt.HEADER_SIZE:
        return None
    h = np.frombuffer(raw, fmt.header_dtype())[0]
    if h["magic"] != fmt.MAGIC or int(h["position"]) != p:
        return None
    return int(h["store_timestamp_ms"])
