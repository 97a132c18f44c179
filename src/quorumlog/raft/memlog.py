"""In-memory RaftLog: the stand-in for the native commit log in simulation and unit tests.

Faithful where it matters to the core: indexes and terms are assigned by the log, reads return
whole entries under a byte budget (at least one), replicated payloads must continue the log
exactly, and -- for crash simulation -- only what flush() made durable survives crash():
an unflushed truncation is lost too, so a crash can bring a truncated tail back, as a real
log whose recovery scan finds intact old records would.

The head can be dropped (drop_before: retention of committed entries, durable at once, as
deleting a segment file is). With keep_head_term=False the log then forgets the term of the
entry before its new head, as the native log does, so term_at(first_index() - 1) raises.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

from ..errors import IndexOutOfRangeError, InvalidArgumentError, ReplicationError
from .log import EntryKind, InstallImage, decode_config

RECORD_HEADER_BYTES = 96  # the native record header's size (format.md), so byte budgets behave alike


class MemPayload:
    """What MemLog.read returns: parallel tuples for entries first_index..first_index+count-1.
    prods: per entry None or (pid, seq, batch entry count) on a producer batch's last entry."""

    __slots__ = ("first_index", "terms", "kinds", "datas", "sizes", "prods")

    def __init__(self, first_index, terms, kinds, datas, sizes, prods=None):
        self.first_index = first_index
        self.terms = terms
        self.kinds = kinds
        self.datas = datas
        self.sizes = sizes
        self.prods = prods if prods is not None else (None,) * len(terms)

    def __len__(self):
        return len(self.terms)


class ProducerItems(list):
    """A batch of items that carries its producer (pid, seq): MemLog.append_as_leader stores
    the tag with it, as the native log's records carry their producer properties (the broker
    -- quorumlog.node.producers, or the simulator -- decides what to tag; the core does not
    look)."""

    def __init__(self, items, pid: int, seq: int):
        super().__init__(items)
        self.producer = (pid, seq)


def _size_of(item) -> int:
    try:
        return RECORD_HEADER_BYTES + len(item)
    except TypeError:
        return RECORD_HEADER_BYTES + 8


class MemLog:
    def __init__(self, *, keep_head_term: bool = True):
        # entry i lives at position i - self._first
        self._first = 1            # lowest index held
        self._head_term = 0        # term of entry _first - 1 (None: not kept)
        self._head_config = None   # (voters, learners) in effect at _first - 1, if dropped
        self._head_producers: dict = {}  # pid -> newest dropped batches ((first, last, seq, term))
        self.keep_head_term = keep_head_term
        self._terms: list[int] = []
        self._kinds: list[int] = []
        self._datas: list = []
        self._sizes: list[int] = []
        self._prods: list = []
        self._cum: list[int] = [0]  # _cum[k] = bytes of the first k entries held (reads bisect it)
        # durable image (what survives crash()) and the lowest position changed since flush
        self._d_terms: list[int] = []
        self._d_kinds: list[int] = []
        self._d_datas: list = []
        self._d_sizes: list[int] = []
        self._d_prods: list = []
        self._dirty_from = 0
        self.meta = b""       # what install_image() ships as the store's state (the simulator's)
        self._staging = None  # follower: [image, head_config, next offset, chunks]
        self.observer = None  # optional: called as observer(event, log, a, b) by the simulator

    # -- reads -------------------------------------------------------------------------
    def first_index(self) -> int:
        return self._first

    def last_index(self) -> int:
        return self._first - 1 + len(self._terms)

    def last_term(self) -> int:
        t = self._terms
        if t:
            return t[-1]
        return self.term_at(self._first - 1)

    def term_at(self, index: int) -> int:
        if index == 0:
            return 0
        p = index - self._first
        if p < -1 or p >= len(self._terms):
            raise IndexOutOfRangeError(
                f"term_at({index}): log holds {self._first}..{self.last_index()}")
        if p == -1:
            if self._head_term is None:
                raise IndexOutOfRangeError(
                    f"term_at({index}): the term before the first retained entry is not kept")
            return self._head_term
        return self._terms[p]

    def read(self, lo: int, hi: int, max_bytes: int):
        last = self.last_index()
        if lo < self._first or hi > last or lo > hi:
            raise IndexOutOfRangeError(f"read({lo}, {hi}): log holds {self._first}..{last}")
        if max_bytes <= 0:
            raise InvalidArgumentError(f"read: max_bytes must be > 0, got {max_bytes}")
        cum = self._cum
        a = lo - self._first
        b = hi - self._first + 1
        base = cum[a]
        # last position end in [a+1, b] with cum[end] - base <= max_bytes (at least one entry)
        end = bisect_right(cum, base + max_bytes, a + 1, b + 1) - 1
        if end <= a:
            end = a + 1
        p = MemPayload(lo, tuple(self._terms[a:end]), tuple(self._kinds[a:end]),
                       tuple(self._datas[a:end]), tuple(self._sizes[a:end]),
                       tuple(self._prods[a:end]))
        return p, end - a, cum[end] - base

    def entry(self, index: int):
        """(term, kind, data) at index -- for tests and the simulator, not the core."""
        p = index - self._first
        if p < 0 or p >= len(self._terms):
            raise IndexOutOfRangeError(f"entry({index}): log holds {self._first}..{self.last_index()}")
        return self._terms[p], self._kinds[p], self._datas[p]

    def producers(self, lo: int, hi: int) -> list:
        out = []
        first = self._first
        lo = max(lo, first)
        hi = min(hi, self.last_index())
        prods = self._prods
        for p in range(lo - first, hi - first + 1):
            tag = prods[p]
            if tag is not None:
                last = p + first
                out.append((last - tag[2] + 1, last, tag[0], tag[1]))
        return out

    def producer_snapshot(self) -> list:
        out = [(f, la, pid, seq, t) for pid, bs in self._head_producers.items()
               for f, la, seq, t in bs]
        out.sort()
        return out

    def _keep_dropped_producers(self, k: int) -> None:
        """Before dropping the first k entries: remember their newest producer batches."""
        heads = self._head_producers
        first = self._first
        for p in range(k):
            tag = self._prods[p]
            if tag is not None:
                last = p + first
                bs = heads.setdefault(tag[0], [])
                bs.append((last - tag[2] + 1, last, tag[1], self._terms[p]))
                del bs[:-16]

    # -- writes ------------------------------------------------------------------------
    def _push(self, term, kind, data, prod=None) -> None:
        sz = _size_of(data)
        self._terms.append(term)
        self._kinds.append(kind)
        self._datas.append(data)
        self._sizes.append(sz)
        self._prods.append(prod)
        self._cum.append(self._cum[-1] + sz)

    def _check_term(self, op: str, term: int) -> None:
        if term < self.last_term():
            raise InvalidArgumentError(
                f"{op}: term {term} is below the log's last term {self.last_term()}")

    def append_as_leader(self, term: int, batch) -> int:
        producer = getattr(batch, "producer", None)
        if producer is not None:
            return self.append_producer_batch(term, batch, *producer)
        self._check_term("append_as_leader", term)
        first = self.last_index() + 1
        for item in batch:
            self._push(term, EntryKind.DATA, item)
        last = self.last_index()
        if self.observer is not None and last >= first:
            self.observer("append", self, first, last)
        return last

    def append_producer_batch(self, term: int, batch, pid: int, seq: int) -> int:
        self._check_term("append_producer_batch", term)
        items = list(batch)
        if not items:
            raise InvalidArgumentError("append_producer_batch: empty batch")
        first = self.last_index() + 1
        for item in items[:-1]:
            self._push(term, EntryKind.DATA, item)
        self._push(term, EntryKind.DATA, items[-1], (pid, seq, len(items)))
        last = self.last_index()
        if self.observer is not None:
            self.observer("append", self, first, last)
        return last

    def append_control(self, term: int, kind, data: bytes) -> int:
        self._check_term("append_control", term)
        if kind not in (EntryKind.NOOP, EntryKind.CONFIG):
            raise InvalidArgumentError(f"append_control: kind must be NOOP or CONFIG, not {kind!r}")
        self._push(term, EntryKind(kind), bytes(data))
        last = self.last_index()
        if self.observer is not None:
            self.observer("append", self, last, last)
        return last

    def append_replicated(self, payload: MemPayload) -> int:
        first = self.last_index() + 1
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
        self._prods.extend(payload.prods)
        cum = self._cum
        total = cum[-1]
        for sz in payload.sizes:
            total += sz
            cum.append(total)
        last = self.last_index()
        if self.observer is not None:
            self.observer("append", self, first, last)
        return last

    def truncate_after(self, index: int) -> None:
        last = self.last_index()
        if index < self._first - 1 or index > last:
            raise IndexOutOfRangeError(
                f"truncate_after({index}): log holds {self._first}..{last}")
        if self.observer is not None:
            self.observer("truncate", self, index, last)
        p = index - self._first + 1
        for lst in (self._terms, self._kinds, self._datas, self._sizes, self._prods):
            del lst[p:]
        del self._cum[p + 1:]
        if p < self._dirty_from:
            self._dirty_from = p

    def flush(self) -> int:
        cut = min(self._dirty_from, len(self._d_terms))
        for d, s in ((self._d_terms, self._terms), (self._d_kinds, self._kinds),
                     (self._d_datas, self._datas), (self._d_sizes, self._sizes),
                     (self._d_prods, self._prods)):
            del d[cut:]
            d.extend(s[cut:])
        self._dirty_from = len(self._terms)
        return self.last_index()

    # -- installing a follower from the leader's retained log ----------------------------
    def install_image(self) -> InstallImage:
        head = self._head_term if self._first > 1 else 0
        return InstallImage(self._first, head, self.last_index(), self.last_term(),
                            self._cum[-1], bytes(self.meta), tuple(self.producer_snapshot()))

    def read_image(self, image: InstallImage, offset: int, max_bytes: int):
        if (image.first_index != self._first or image.last_index > self.last_index()
                or self.term_at(image.last_index) != image.last_term):
            raise ReplicationError("read_image: the log no longer holds this image")
        cum = self._cum
        p = bisect_left(cum, offset)
        end = image.last_index - self._first + 1
        if p >= end or cum[p] != offset:
            raise ReplicationError(f"read_image: offset {offset} is not an entry boundary of the image")
        lo = p + self._first
        payload, count, nbytes = self.read(lo, image.last_index, max_bytes)
        return payload, nbytes

    def begin_install(self, image: InstallImage, head_config) -> None:
        self._staging = [image, (tuple(head_config[0]), tuple(head_config[1])), 0, []]

    def write_chunk(self, offset: int, chunk: MemPayload) -> int:
        st = self._staging
        if st is None or offset != st[2]:
            raise ReplicationError(f"write_chunk: offset {offset}, expected "
                                   f"{None if st is None else st[2]}")
        image, _, _, chunks = st
        expect = image.first_index + sum(len(c) for c in chunks)
        if chunk.first_index != expect or expect + len(chunk) - 1 > image.last_index:
            raise ReplicationError(f"write_chunk: chunk starts at {chunk.first_index}, expected {expect}")
        chunks.append(chunk)
        st[2] += sum(chunk.sizes)
        return st[2]

    def finish_install(self) -> int:
        st = self._staging
        if st is None or st[2] != st[0].total_bytes:
            raise ReplicationError("finish_install: the image is incomplete")
        image, head_config, _, chunks = st
        self._staging = None
        old_last = self.last_index()
        self._first = image.first_index
        self._head_term = image.prev_term
        self._head_config = head_config
        self.meta = image.meta
        self._head_producers = {}
        for f, la, pid, seq, t in image.producers:
            self._head_producers.setdefault(pid, []).append((f, la, seq, t))
        for name in ("terms", "kinds", "datas", "sizes", "prods"):
            live = [x for c in chunks for x in getattr(c, name)]
            setattr(self, "_" + name, live)
            setattr(self, "_d_" + name, list(live))  # durable at once: the atomic replace
        cum = [0]
        for sz in self._sizes:
            cum.append(cum[-1] + sz)
        self._cum = cum
        self._dirty_from = len(self._terms)
        if self.last_index() != image.last_index or self.last_term() != image.last_term:
            raise ReplicationError("finish_install: the staged entries do not match the image")
        if self.observer is not None:
            self.observer("install", self, old_last, self.last_index())
        return self.last_index()

    # -- simulation helpers --------------------------------------------------------------
    def flushed_index(self) -> int:
        """Highest index whose entry (and every one before it) is durable as it is now."""
        return self._first - 1 + min(len(self._d_terms), self._dirty_from, len(self._terms))

    def unflush_tail(self, k: int) -> None:
        """Testing (the simulator's lying disk): the last k entries that flush() just made
        durable are not durable after all (a crash drops them)."""
        keep = max(min(self._dirty_from, len(self._d_terms)) - k, 0)
        for d in (self._d_terms, self._d_kinds, self._d_datas, self._d_sizes, self._d_prods):
            del d[keep:]
        self._dirty_from = keep

    def crash(self) -> None:
        """Lose everything not flushed (including unflushed truncations)."""
        self._terms = list(self._d_terms)
        self._kinds = list(self._d_kinds)
        self._datas = list(self._d_datas)
        self._sizes = list(self._d_sizes)
        self._prods = list(self._d_prods)
        cum = [0]
        for sz in self._sizes:
            cum.append(cum[-1] + sz)
        self._cum = cum
        self._dirty_from = len(self._terms)

    def drop_before(self, index: int, config) -> int:
        """Retention: drop every entry below `index` (they must be flushed -- the caller drops
        committed entries only), durable at once. `config` is (voters, learners) in effect at
        index - 1, kept for config_history. Returns how many entries were dropped."""
        k = index - self._first
        if k <= 0:
            return 0
        if index > self.last_index():
            raise InvalidArgumentError(f"drop_before({index}): the last entry is always kept")
        if k > min(len(self._d_terms), self._dirty_from):
            raise InvalidArgumentError(f"drop_before({index}): entries not flushed yet")
        term = self.term_at(index - 1)
        self._keep_dropped_producers(k)
        for lst in (self._terms, self._kinds, self._datas, self._sizes, self._prods,
                    self._d_terms, self._d_kinds, self._d_datas, self._d_sizes, self._d_prods):
            del lst[:k]
        base = self._cum[k]
        self._cum = [c - base for c in self._cum[k:]]
        self._dirty_from -= k
        self._first = index
        self._head_term = term if self.keep_head_term else None
        self._head_config = (tuple(config[0]), tuple(config[1]))
        return k

    def config_history(self, initial_voters) -> list[tuple[int, tuple, tuple]]:
        """[(index, voters, learners)] for the configuration before the first entry held (the
        initial one, or the one kept when the head was dropped) and every CONFIG entry: what a
        driver recovers by scanning CONFIG records, to hand to RaftCore on restart."""
        if self._head_config is None:
            out = [(0, tuple(sorted(initial_voters)), ())]
        else:
            out = [(self._first - 1, *self._head_config)]
        first = self._first
        for p, k in enumerate(self._kinds):
            if k == EntryKind.CONFIG:
                out.append((p + first, *decode_config(self._datas[p])))
        return out
