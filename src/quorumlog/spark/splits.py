"""Split planning: byte ranges of segment files with the read limits frozen at planning
(the same rules as QuorumlogInputFormat.planSplits on the JVM)."""
from __future__ import annotations

import os

from .. import format as fmt
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
