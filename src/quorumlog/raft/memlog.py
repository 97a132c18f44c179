"""In-memory RaftLog: the stand-in for the native commit log in simulation and unit tests.

Faithful where it matters to the core: indexes and terms are assigned by the log, reads return
whole entries under a byte budget (at least one), replicated payloads must continue the log
exactly, and -- for crash simulation -- only what flush() made durable survives crash():
an unflushed truncation is lost too, so a crash can bring a truncated tail back, as a real
log whose recovery scan finds intact old records would.
"""
from __future__ import annotations

from bisect import bisect_right

from ..errors import IndexOutOfRangeError, InvalidArgumentError, ReplicationError
from .log import EntryKind, decode_voters

RECORD_HEADER_BYTES = 96  # the native record header's size (format.md), so byte budgets behave alike


class MemPayload:
    """What MemLog.read returns: parallel tuples for entries first_index..first_index+count-1."""

    __slots__ = ("first_index", "terms", "kinds", "datas", "sizes")

    def __init__(self, first_index, terms, kinds, datas, sizes):
        self.first_index = first_index
        self.terms = terms
        self.kinds = kinds
        self.datas = datas
        self.sizes = sizes

    def __len__(self):
        return len(self.terms)


def _size_of(item) -> int:
    try:
        return RECORD_HEADER_BYTES + len(item)
    except TypeError:
        return RECORD_HEADER_BYTES + 8


class MemLog:
    def __init__(self):
        # entry i lives at position i - 1
        self._terms: list[int] = []
        self._kinds: list[int] = []
        self._datas: list = []
        self._sizes: list[int] = []
        self._cum: list[int] = [0]  # _cum[i] = bytes of entries 1..i (reads bisect it)
        # durable image (what survives crash()) and the lowest position changed since flush
        self._d_terms: list[int] = []
        self._d_kinds: list[int] = []
        self._d_datas: list = []
        self._d_sizes: list[int] = []
        self._dirty_from = 0
        self.observer = None  # optional: called as observer(event, log, a, b) by the simulator

    # -- reads -------------------------------------------------------------------------
    def first_index(self) -> int:
        return 1

    def last_index(self) -> int:
        return len(self._terms)

    def last_term(self) -> int:
        t = self._terms
        return t[-1] if t else 0

    def term_at(self, index: int) -> int:
        if index == 0:
            return 0
        if index < 0 or index > len(self._terms):
            raise IndexOutOfRangeError(f"term_at({index}): log holds 1..{len(self._terms)}")
        return self._terms[index - 1]

    def read(self, lo: int, hi: int, max_bytes: int):
        last = len(self._terms)
        if lo < 1 or hi > last or lo > hi:
            raise IndexOutOfRangeError(f"read({lo}, {hi}): log holds 1..{last}")
        if max_bytes <= 0:
            raise InvalidArgumentError(f"read: max_bytes must be > 0, got {max_bytes}")
        cum = self._cum
        base = cum[lo - 1]
        # last index end in [lo, hi] with cum[end] - base <= max_bytes (at least lo)
        end = bisect_right(cum, base + max_bytes, lo, hi + 1) - 1
        if end < lo:
            end = lo
        p = MemPayload(lo, tuple(self._terms[lo - 1:end]), tuple(self._kinds[lo - 1:end]),
                       tuple(self._datas[lo - 1:end]), tuple(self._sizes[lo - 1:end]))
        return p, end - lo + 1, cum[end] - base

    def entry(self, index: int):
        """(term, kind, data) at index -- for tests and the simulator, not the core."""
        if index < 1 or index > len(self._terms):
            raise IndexOutOfRangeError(f"entry({index}): log holds 1..{len(self._terms)}")
        i = index - 1
        return self._terms[i], self._kinds[i], self._datas[i]

    # -- writes ------------------------------------------------------------------------
    def append_as_leader(self, term: int, batch) -> int:
        if term < self.last_term():
            raise InvalidArgumentError(f"append_as_leader: term {term} is below the log's last term {self.last_term()}")
        first = len(self._terms) + 1
        cum = self._cum
        total = cum[-1]
        for item in batch:
            self._terms.append(term)
            self._kinds.append(EntryKind.DATA)
            self._datas.append(item)
            sz = _size_of(item)
            self._sizes.append(sz)
            total += sz
            cum.append(total)
        last = len(self._terms)
        if self.observer is not None and last >= first:
            self.observer("append", self, first, last)
        return last

    def append_control(self, term: int, kind, data: bytes) -> int:
        if term < self.last_term():
            raise InvalidArgumentError(f"append_control: term {term} is below the log's last term {self.last_term()}")
        if kind not in (EntryKind.NOOP, EntryKind.CONFIG):
            raise InvalidArgumentError(f"append_control: kind must be NOOP or CONFIG, not {kind!r}")
        self._terms.append(term)
        self._kinds.append(EntryKind(kind))
        self._datas.append(bytes(data))
        sz = _size_of(data)
        self._sizes.append(sz)
        self._cum.append(self._cum[-1] + sz)
        last = len(self._terms)
        if self.observer is not None:
            self.observer("append", self, last, last)
        return last

    def append_replicated(self, payload: MemPayload) -> int:
        first = len(self._terms) + 1
        if payload.first_index != first:
            raise ReplicationError(
                f"append_replicated: payload starts at {payload.first_index}, log ends at {first - 1}")
        if not payload.terms:
            raise ReplicationError("append_replicated: empty payload")
        prev = self.last_term()
        for t in payload.terms:
            if t < prev:
                raise ReplicationError(f"append_replicated: term {t} after term {prev}")
            prev = t
        self._terms.extend(payload.terms)
        self._kinds.extend(payload.kinds)
        self._datas.extend(payload.datas)
        self._sizes.extend(payload.sizes)
        cum = self._cum
        total = cum[-1]
        for sz in payload.sizes:
            total += sz
            cum.append(total)
        last = len(self._terms)
        if self.observer is not None:
            self.observer("append", self, first, last)
        return last

    def truncate_after(self, index: int) -> None:
        last = len(self._terms)
        if index < 0 or index > last:
            raise IndexOutOfRangeError(f"truncate_after({index}): log holds 1..{last}")
        if self.observer is not None:
            self.observer("truncate", self, index, last)
        del self._terms[index:]
        del self._kinds[index:]
        del self._datas[index:]
        del self._sizes[index:]
        del self._cum[index + 1:]
        if index < self._dirty_from:
            self._dirty_from = index

    def flush(self) -> int:
        cut = min(self._dirty_from, len(self._d_terms))
        for d, s in ((self._d_terms, self._terms), (self._d_kinds, self._kinds),
                     (self._d_datas, self._datas), (self._d_sizes, self._sizes)):
            del d[cut:]
            d.extend(s[cut:])
        self._dirty_from = len(self._terms)
        return len(self._terms)

    # -- simulation helpers --------------------------------------------------------------
    def crash(self) -> None:
        """Lose everything not flushed (including unflushed truncations)."""
        self._terms = list(self._d_terms)
        self._kinds = list(self._d_kinds)
        self._datas = list(self._d_datas)
        self._sizes = list(self._d_sizes)
        cum = [0]
        for sz in self._sizes:
            cum.append(cum[-1] + sz)
        self._cum = cum
        self._dirty_from = len(self._terms)

    def config_history(self, initial_voters) -> list[tuple[int, tuple[str, ...]]]:
        """[(index, voters)] for index 0 (initial) and every CONFIG entry: what a driver
        recovers by scanning CONFIG records, to hand to RaftCore on restart."""
        out = [(0, tuple(sorted(initial_voters)))]
        for i, k in enumerate(self._kinds):
            if k == EntryKind.CONFIG:
                out.append((i + 1, decode_voters(self._datas[i])))
        return out
