"""A store's raft-index files (<root>/index/<20 digits>, format.md "Raft index") as numpy
views: where each record of a split starts and how long it is (RaftIndex.java on the JVM)."""
from __future__ import annotations

import bisect
import os

import numpy as np

from .. import format as fmt
from .store_meta import numbered


class RaftIndex:
    """All raft index entries of a store as one (lazily concatenated) numpy view."""

    def __init__(self, root: str, entries_per_file: int):
        self.root = root
        self.n = entries_per_file
        self.firsts = numbered(os.path.join(root, "index"))

    def entries(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(positions, sizes, raft index of positions[0], count) of the used entries from the
        first at or after log position lo; `count` of them lie before hi, and one more (the
        record that follows, if any) is included. Files are memory-mapped and bisected, so a
        split reads O(log n) index pages plus its own entries."""
        dtype = fmt.index_entry_dtype()
        pos_parts, size_parts = [], []
        first_index = None
        count = 0
        expect = self.firsts[0] if self.firsts else 1
        done = False
        for f in self.firsts:
            if f != expect or done:
                break  # a missing index file: entries after the gap cannot be numbered
            expect = f + self.n
            p = os.path.join(self.root, "index", fmt.index_file_name(f))
            if os.path.getsize(p) < dtype.itemsize:
                break
            mm = np.memmap(p, dtype=dtype, mode="r")
            sizes = mm["size"]
            # used entries form a prefix: bisect for its end
            used = bisect.bisect_left(range(len(mm)), True, key=lambda i: sizes[i] == 0)
            if used == 0:
                break
            posv = mm["position"][:used]
            if int(posv[used - 1]) < lo:
                if used < len(mm):
                    break
                continue
            a = bisect.bisect_left(posv, lo) if first_index is None else 0
            b = bisect.bisect_left(posv, hi, lo=a)
            take = min(used, b + 1)  # plus the record that follows
            if first_index is None:
                first_index = f + a
            pos_parts.append(np.array(posv[a:take], dtype=np.uint64))
            size_parts.append(np.array(sizes[a:take], dtype=np.uint32))
            count += b - a
            del mm, sizes, posv
            if take > b or used < self.n:
                done = True
        if first_index is None:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint32), 1, 0
        return np.concatenate(pos_parts), np.concatenate(size_parts), first_index, count

    def first_position_at_or_after(self, lo: int) -> int | None:
        """Log position of the first indexed record at or after lo; None when there is none."""
        positions, _, _, _ = self.entries(lo, lo)
        return int(positions[0]) if len(positions) else None
