# cython: language_level=3
"""Consume queues: RocketMQ's per-(topic, queue) index over the commit log, in Cython.

- CQFile: one preallocated (posix_fallocate) mmap'd file of `capacity` 20-byte entries
  (log position i64, record size i32, tag hash i64; little-endian, packed), named by the queue
  offset of its first entry (20 digits) under <dir>/consumequeue/<topic>/<queue>/. Exposed to
  Python as a numpy structured array over the mapping (zero copy).
- ConsumeQueue: the files of one queue, its next offset, repair on reopen, retention.
- dispatch(): the ReputMessageService loop. It walks columns of commit-log record headers
  (CommitLog.scan's RECORD_INFO, or the store's own append results) and writes one entry per
  MESSAGE record, with no Python object per record. Anything unusual (unknown topic, new file,
  gap, empty queue) stops the loop at that record and the Python caller handles it.
- Message / collect(): get()'s hot path. A Message is a pointer into a read-only mapping of a
  commit-log segment; every field is decoded from the record bytes on access.

Entries of a queue hold committed records only (the store dispatches up to the log's commit
limit), so they are derived data: on reopen anything at or past the durable dispatched
position is dropped and re-dispatched from the log.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_CheckExact, PyBytes_GET_SIZE
from libc.string cimport memcpy, memcmp, memset
from libc.stdint cimport int64_t, int32_t, uint32_t, uint16_t, uint8_t, uint64_t

import bisect
import logging
import mmap
import os

import numpy as np

from .errors import CorruptLogError, DiskFullError

log = logging.getLogger(__name__)

ENTRY_SIZE = 20
DEFAULT_FILE_ENTRIES = 300_000
CQ_DTYPE = np.dtype([("position", "<i8"), ("size", "<i4"), ("tag_hash", "<i8")])
assert CQ_DTYPE.itemsize == ENTRY_SIZE

# Record header offsets (docs/format.md, "Header").
DEF H_MAGIC = 8
DEF H_TYPE = 11
DEF H_FLAGS = 12
DEF H_INDEX = 16
DEF H_TERM = 24
DEF H_POSITION = 32
DEF H_QOFFSET = 40
DEF H_BORN = 48
DEF H_STORE = 56
DEF H_TAGHASH = 64
DEF H_QUEUE = 72
DEF H_TOPIC_LEN = 76
DEF H_TAGS_LEN = 78
DEF H_KEYS_LEN = 80
DEF H_PROPS_LEN = 84
DEF H_BODY_LEN = 88
DEF HEADER_SIZE = 96
DEF MAGIC = 0x4C51
DEF TYPE_MESSAGE = 1
DEF MAX_TAG_FILTER = 32
DEF C_ENTRY = 20

MAX_TAG_FILTER_TAGS = MAX_TAG_FILTER


cdef extern from *:
    """
    #define ql_prefetch(p) __builtin_prefetch((const void *)(p), 0, 0)
    """
    void ql_prefetch(const void *p) noexcept nogil

DEF PREFETCH_AHEAD = 6


cdef inline int64_t ld64(const unsigned char *p) noexcept nogil:
    cdef int64_t v
    memcpy(&v, p, 8)
    return v


cdef inline uint32_t ld32(const unsigned char *p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return v


cdef inline uint16_t ld16(const unsigned char *p) noexcept nogil:
    cdef uint16_t v
    memcpy(&v, p, 2)
    return v


cpdef int64_t fnv1a64(bytes data):
    """FNV-1a 64 of `data` as a signed int64; 0 for empty data (format.md, tag hash)."""
    cdef uint64_t h = 0xcbf29ce484222325ULL
    cdef const unsigned char *p = data
    cdef Py_ssize_t i, n = len(data)
    if n == 0:
        return 0
    for i in range(n):
        h = (h ^ p[i]) * 0x100000001b3ULL
    return <int64_t>h


# ---------------------------------------------------------------------------------------------
# Read side

cdef class SegmentView:
    def __cinit__(self, object owner, int64_t start):
        PyObject_GetBuffer(owner, &self._buf, PyBUF_SIMPLE)
        self._has_buf = True
        self.base = <const unsigned char *>self._buf.buf
        self.length = self._buf.len
        self.start = start
        self.owner = owner

    def __dealloc__(self):
        if self._has_buf:
            PyBuffer_Release(&self._buf)
            self._has_buf = False

    def store_timestamp_at(self, int64_t position):
        """store_timestamp_ms of the record at `position` (inside this segment)."""
        if position < self.start or position + HEADER_SIZE > self.start + self.length:
            raise IndexError(position)
        return ld64(self.base + (position - self.start) + H_STORE)


@cython.freelist(512)
cdef class Message:
    """One message as stored: a pointer into the commit log, decoded on access.

    `body` is a bytes copy (cheap for small bodies, safe to keep); `body_view` is a zero-copy
    memoryview of the mapping. Either stays valid after retention deletes the segment."""

    def __init__(self):
        raise TypeError("Message objects are created by MessageStore.get()")

    @property
    def body(self):
        cdef const unsigned char *p = self._p
        cdef Py_ssize_t off = (HEADER_SIZE + ld16(p + H_TOPIC_LEN) + ld16(p + H_TAGS_LEN)
                               + ld32(p + H_KEYS_LEN) + ld32(p + H_PROPS_LEN))
        return PyBytes_FromStringAndSize(<const char *>p + off, ld32(p + H_BODY_LEN))

    @property
    def body_view(self):
        cdef const unsigned char *p = self._p
        cdef Py_ssize_t off = (HEADER_SIZE + ld16(p + H_TOPIC_LEN) + ld16(p + H_TAGS_LEN)
                               + ld32(p + H_KEYS_LEN) + ld32(p + H_PROPS_LEN))
        cdef Py_ssize_t start = (self.position - self._seg.start) + off
        return memoryview(self._seg.owner)[start:start + ld32(p + H_BODY_LEN)].toreadonly()

    @property
    def body_len(self):
        return ld32(self._p + H_BODY_LEN)

    @property
    def topic(self):
        cdef const unsigned char *p = self._p
        return (<const char *>p + HEADER_SIZE)[:ld16(p + H_TOPIC_LEN)].decode("utf-8")

    @property
    def tags(self):
        cdef const unsigned char *p = self._p
        cdef Py_ssize_t n = ld16(p + H_TAGS_LEN)
        if n == 0:
            return None
        cdef Py_ssize_t off = HEADER_SIZE + ld16(p + H_TOPIC_LEN)
        return (<const char *>p + off)[:n].decode("utf-8")

    @property
    def keys(self):
        cdef const unsigned char *p = self._p
        cdef Py_ssize_t off = HEADER_SIZE + ld16(p + H_TOPIC_LEN) + ld16(p + H_TAGS_LEN)
        cdef Py_ssize_t end = off + ld32(p + H_KEYS_LEN)
        cdef Py_ssize_t n
        out = []
        while off + 2 <= end:
            n = ld16(p + off)
            off += 2
            out.append((<const char *>p + off)[:n].decode("utf-8"))
            off += n
        return tuple(out)

    @property
    def properties(self):
        """dict[str, str] (decoded once, then cached; a copy is returned)."""
        cdef const unsigned char *p = self._p
        cdef Py_ssize_t off, end, n
        if self._props is None:
            off = (HEADER_SIZE + ld16(p + H_TOPIC_LEN) + ld16(p + H_TAGS_LEN)
                   + ld32(p + H_KEYS_LEN))
            end = off + ld32(p + H_PROPS_LEN)
            d = {}
            while off + 2 <= end:
                n = ld16(p + off)
                off += 2
                k = (<const char *>p + off)[:n].decode("utf-8")
                off += n
                n = ld16(p + off)
                off += 2
                d[k] = (<const char *>p + off)[:n].decode("utf-8")
                off += n
            self._props = d
        return dict(self._props)

    @property
    def queue_id(self):
        return ld32(self._p + H_QUEUE)

    @property
    def queue_offset(self):
        return ld64(self._p + H_QOFFSET)

    @property
    def index(self):
        return ld64(self._p + H_INDEX)

    @property
    def term(self):
        return ld64(self._p + H_TERM)

    @property
    def flags(self):
        return ld32(self._p + H_FLAGS)

    @property
    def tag_hash(self):
        return ld64(self._p + H_TAGHASH)

    @property
    def born_timestamp_ms(self):
        return ld64(self._p + H_BORN)

    @property
    def store_timestamp_ms(self):
        return ld64(self._p + H_STORE)

    def raw(self):
        """The whole record as a read-only memoryview (zero copy)."""
        cdef Py_ssize_t start = self.position - self._seg.start
        return memoryview(self._seg.owner)[start:start + self.size].toreadonly()

    def __repr__(self):
        return (f"Message(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, position={self.position}, "
                f"body_len={self.body_len}, tags={self.tags!r})")


def collect(object segment_for, CQFile f, Py_ssize_t lo, Py_ssize_t hi, list out,
            Py_ssize_t limit, tuple tag_hashes=None, object tag_names=None):
    """Append Message objects for entries [lo, hi) of `f` to `out` until `out` holds `limit`.

    With `tag_hashes` (a tuple of int64, at most 32) only entries whose stored tag hash is one
    of them are taken, and of those only records whose tags (bytes) are in `tag_names` (a set)
    — the hash comparison reads only the consume queue; the string check touches the record.
    Entries of size 0 are holes (the start of a rebuilt queue) and are skipped.
    `segment_for(position)` returns the SegmentView holding a position.
    Returns the entry index where it stopped (hi when the range was exhausted)."""
    cdef SegmentView seg = None
    cdef int64_t pos, th, pf
    cdef int32_t size
    cdef const unsigned char *e
    cdef const unsigned char *p
    cdef Message m
    cdef Py_ssize_t i, j, have = len(out), nh = 0, tl
    cdef int64_t hashes[MAX_TAG_FILTER]
    cdef bint match
    if hi > f.capacity:
        hi = f.capacity
    if tag_hashes is not None:
        nh = len(tag_hashes)
        if nh > MAX_TAG_FILTER:
            raise ValueError("too many tags in filter")
        for j in range(nh):
            hashes[j] = tag_hashes[j]
    for i in range(lo, hi):
        if have >= limit:
            return i
        e = f.base + i * C_ENTRY
        memcpy(&size, e + 8, 4)
        if size <= 0:
            continue
        pos = ld64(e)
        if tag_hashes is not None:
            th = ld64(e + 12)
            match = False
            for j in range(nh):
                if hashes[j] == th:
                    match = True
                    break
            if not match:
                continue
        if seg is None or pos < seg.start or pos + size > seg.start + seg.length:
            seg = segment_for(pos)
            if pos < seg.start or pos + size > seg.start + seg.length:
                raise CorruptLogError(
                    f"consume queue {f.path} entry {f.first_offset + i} points outside "
                    f"its segment (position {pos}, size {size})", str(f.path), i * ENTRY_SIZE)
        p = seg.base + (pos - seg.start)
        # Consumers read records spread across the log (one queue's messages interleave with
        # every other queue's); start the cache misses of the next records now so they overlap.
        if i + PREFETCH_AHEAD < hi:
            pf = ld64(e + PREFETCH_AHEAD * C_ENTRY)
            if pf >= seg.start and pf + 128 <= seg.start + seg.length:
                ql_prefetch(seg.base + (pf - seg.start))
                ql_prefetch(seg.base + (pf - seg.start) + 64)
        # Cheap pairing check of the index against the record it names (the record's CRC was
        # verified when it was dispatched).
        if ld16(p + H_MAGIC) != MAGIC or ld64(p + H_POSITION) != pos:
            raise CorruptLogError(
                f"consume queue {f.path} entry {f.first_offset + i} does not point at a "
                f"record (position {pos})", str(f.path), i * ENTRY_SIZE)
        if tag_names is not None:
            tl = ld16(p + H_TAGS_LEN)
            if PyBytes_FromStringAndSize(<const char *>p + HEADER_SIZE + ld16(p + H_TOPIC_LEN),
                                         tl) not in tag_names:
                continue
        m = Message.__new__(Message)
        m._seg = seg
        m._p = p
        m.position = pos
        m.size = size
        out.append(m)
        have += 1
    return hi


# ---------------------------------------------------------------------------------------------
# Consume-queue files

cdef class CQFile:
    def __cinit__(self, path, int64_t first_offset, Py_ssize_t capacity, bint create):
        cdef Py_ssize_t nbytes = capacity * C_ENTRY, i
        cdef bint fresh = False
        self.path = path
        self.first_offset = first_offset
        self.capacity = capacity
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            st = os.fstat(fd)
            fresh = st.st_size == 0
            if st.st_size < nbytes:
                # Preallocate before mapping: a store into a sparse mapping on a full disk is
                # SIGBUS; fallocate fails cleanly with ENOSPC instead.
                try:
                    os.posix_fallocate(fd, 0, nbytes)
                except OSError as exc:
                    if create and st.st_size == 0:
                        os.unlink(path)
                    raise DiskFullError(exc.errno, f"cannot preallocate {path}: {exc.strerror}")
            elif st.st_size > nbytes:
                raise CorruptLogError(f"consume queue file {path} has size {st.st_size}, "
                                      f"expected {nbytes}", str(path), nbytes)
            self.mm = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        PyObject_GetBuffer(self.mm, &self._buf, PyBUF_SIMPLE | PyBUF_WRITABLE)
        self._has_buf = True
        self.base = <unsigned char *>self._buf.buf
        self.dirty = False
        if fresh:
            # Fault every page in for writing now (the file is all zeros, so storing a zero
            # changes nothing): dispatch then never takes a page fault per 204 entries.
            with nogil:
                for i in range(0, nbytes, 4096):
                    (<volatile unsigned char *>self.base)[i] = 0

    def __dealloc__(self):
        if self._has_buf:
            PyBuffer_Release(&self._buf)
            self._has_buf = False

    @property
    def entries(self):
        """All `capacity` entries as a writable numpy structured array over the mapping."""
        return np.frombuffer(self.mm, dtype=CQ_DTYPE)

    def raw(self):
        return np.frombuffer(self.mm, dtype=np.uint8)

    def put(self, Py_ssize_t i, int64_t position, int32_t size, int64_t tag_hash):
        cdef unsigned char *e
        if i < 0 or i >= self.capacity:
            raise IndexError(i)
        e = self.base + i * C_ENTRY
        memcpy(e, &position, 8)
        memcpy(e + 8, &size, 4)
        memcpy(e + 12, &tag_hash, 8)
        self.dirty = True

    def flush(self):
        if self.dirty:
            self.dirty = False
            self.mm.flush()


cdef inline int32_t _size_at(CQFile f, Py_ssize_t i) noexcept:
    cdef int32_t v
    memcpy(&v, f.base + i * C_ENTRY + 8, 4)
    return v


cdef Py_ssize_t _first_valid(CQFile f):
    """Index of the first entry with size > 0, or -1."""
    cdef Py_ssize_t i
    for i in range(f.capacity):
        if _size_at(f, i) > 0:
            return i
    return -1


cdef Py_ssize_t _trusted_end(CQFile f, Py_ssize_t a, int64_t limit):
    """First index in [a, capacity) where "size > 0 and position < limit" stops holding."""
    cdef Py_ssize_t lo = a, hi = f.capacity, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if _size_at(f, mid) > 0 and ld64(f.base + mid * C_ENTRY) < limit:
            lo = mid + 1
        else:
            hi = mid
    return lo


DEF ZERO_CHUNK = 4096


cdef Py_ssize_t _zero_from(CQFile f, Py_ssize_t k):
    """Zero the non-zero entries from k on, chunk by chunk, stopping at the first chunk that is
    already all zero -> number of entries that were not zero."""
    cdef Py_ssize_t i = k, j, end, n = 0
    cdef bint any_set
    while i < f.capacity:
        end = min(i + ZERO_CHUNK, f.capacity)
        any_set = False
        for j in range(i, end):
            if _size_at(f, j) != 0 or ld64(f.base + j * C_ENTRY) != 0 or \
                    ld64(f.base + j * C_ENTRY + 12) != 0:
                n += 1
                any_set = True
                memset(f.base + j * C_ENTRY, 0, C_ENTRY)
        if not any_set:
            break
        f.dirty = True
        i = end
    return n


def file_name(int64_t first_offset):
    return "%020d" % first_offset


cdef class ConsumeQueue:
    """The consume queue of one (topic, queue): files named by first queue offset, each holding
    the offsets [first, first + file_entries). `next_offset` is one past the last dispatched
    entry; an `empty` queue accepts its first entry at any offset (a queue rebuilt after
    retention starts in the middle; the entries before it in its file stay zero = holes)."""

    def __init__(self, topic, int queue_id, dir, Py_ssize_t file_entries):
        self.topic = topic
        self.queue_id = queue_id
        self.dir = dir
        self.file_entries = file_entries
        self.next_offset = 0
        self.empty = True
        self.cur = None
        self.files = {}
        self.starts = []
        self.min_offset_cache = None

    def load(self):
        """List the files on disk. Returns False when the queue directory is missing."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return False
        starts = []
        for n in names:
            if len(n) == 20 and n.isdigit():
                v = int(n)
                if v % self.file_entries:
                    raise CorruptLogError(f"consume queue file {n} in {self.dir} is not aligned "
                                          f"to {self.file_entries} entries", str(self.dir), 0)
                starts.append(v)
        starts.sort()
        self.starts = starts
        return True

    def file(self, int64_t first, bint create=False):
        cdef CQFile f = self.files.get(first)
        if f is not None:
            return f
        if not create and (not self.starts or first not in self.starts):
            return None
        path = os.path.join(self.dir, file_name(first))
        if create:
            os.makedirs(self.dir, exist_ok=True)
        f = CQFile(path, first, self.file_entries, create)
        self.files[first] = f
        if first not in self.starts:
            bisect.insort(self.starts, first)
        return f

    def file_for(self, int64_t offset, bint create=False):
        return self.file(offset - offset % self.file_entries, create)

    def recover(self, int64_t limit):
        """Drop every entry that points at or past log position `limit` (never trust the
        index beyond what the log confirms) and set next_offset from what remains.

        O(log n) per queue on the usual shape of a file: [holes][trusted entries][zeros].
        Entries below the durable dispatched position were msync'd before that position was
        checkpointed, so the trusted entries are contiguous and the predicate "size > 0 and
        position < limit" is true on [a, k) and false after: binary search finds k. What
        follows k (entries past the limit, or stale bytes a crash left) is zeroed until a
        whole chunk reads zero, so a later reopen never sees it."""
        cdef CQFile f
        cdef Py_ssize_t a, k, dropped
        self.empty = True
        self.cur = None
        self.next_offset = self.starts[0] if self.starts else 0
        for first in reversed(self.starts):
            f = self.file(first)
            a = _first_valid(f)
            if a < 0:
                continue
            k = _trusted_end(f, a, limit)
            dropped = _zero_from(f, k)
            if dropped:
                log.info("consume queue %s/%d: dropped %d entries from offset %d (past "
                         "position %d)", self.topic, self.queue_id, dropped, first + k, limit)
            if k > a:
                self.next_offset = first + k
                self.empty = False
                self.cur = f
                break
        self.min_offset_cache = None

    def put(self, int64_t offset, int64_t position, int32_t size, int64_t tag_hash):
        """Slow-path write of one entry (first entry of an empty queue, a new file, a gap).
        Returns False for an offset that is already dispatched."""
        cdef CQFile f
        if not self.empty and offset < self.next_offset:
            return False
        if not self.empty and offset > self.next_offset:
            log.warning("consume queue %s/%d: gap, offsets %d..%d missing from the log",
                        self.topic, self.queue_id, self.next_offset, offset - 1)
        f = self.file_for(offset, True)
        f.put(offset - f.first_offset, position, size, tag_hash)
        self.next_offset = offset + 1
        if self.empty:
            self.min_offset_cache = None
        self.empty = False
        self.cur = f
        return True

    def min_offset(self, int64_t min_position):
        """First offset whose entry points at or past the log's min position."""
        cdef CQFile f
        c = self.min_offset_cache
        if c is not None and c[0] == min_position and not self.empty:
            return c[1]
        result = self.next_offset
        if not self.empty:
            for first in list(self.starts):
                if first >= self.next_offset:
                    break
                f = self.file(first)
                n = min(self.file_entries, self.next_offset - first)
                arr = f.entries[:n]
                ok = np.flatnonzero((arr["size"] > 0) & (arr["position"] >= min_position))
                if len(ok):
                    result = first + int(ok[0])
                    break
        # Stays right as entries are appended: they all point past min_position. (An empty
        # queue is not cached: its min offset is its next offset.)
        self.min_offset_cache = (min_position, result)
        return result

    def position_of(self, int64_t offset):
        cdef CQFile f = self.file_for(offset)
        if f is None:
            return None
        e = f.entries[offset - f.first_offset]
        if e["size"] <= 0:
            return None
        return int(e["position"]), int(e["size"])

    def delete_files_before(self, int64_t min_position):
        """Delete whole files whose every entry points below `min_position` (the log's new
        min position); the file holding the last entry is always kept. Returns the count."""
        cdef CQFile f
        deleted = 0
        for first in list(self.starts):
            if self.empty or first + self.file_entries >= self.next_offset:
                break
            f = self.file(first)
            arr = f.entries
            valid = np.flatnonzero(arr["size"] > 0)
            if len(valid) and int(arr["position"][valid[len(valid) - 1]]) >= min_position:
                break
            self.files.pop(first, None)
            self.starts.remove(first)
            try:
                os.unlink(f.path)
            except FileNotFoundError:
                pass
            deleted += 1
        self.min_offset_cache = None
        return deleted

    def flush(self):
        cdef CQFile f
        for f in self.files.values():
            f.flush()

    def view(self, int64_t lo, int64_t hi):
        """Read-only numpy view of the entries [lo, min(hi, end of lo's file)) (zero copy)."""
        cdef CQFile f = self.file_for(lo)
        if f is None or lo >= hi:
            return np.empty(0, CQ_DTYPE)
        a = f.entries[lo - f.first_offset:min(hi, f.first_offset + f.capacity) - f.first_offset]
        a.flags.writeable = False
        return a


# ---------------------------------------------------------------------------------------------
# Dispatch

cdef inline bint _holds(ConsumeQueue cq, int64_t off, int64_t pos):
    """True when the queue's current file already holds entry `off` pointing at `pos` (a
    re-dispatch). False otherwise -- another position (two records claim one offset) or an
    entry outside the current file -- so the caller leaves the record to the store's slow
    path, which checks it and reports a conflict; an offset is never silently skipped."""
    cdef CQFile f = cq.cur
    cdef int64_t held
    if f is None or off < f.first_offset or off - f.first_offset >= f.capacity:
        return False
    memcpy(&held, f.base + (off - f.first_offset) * C_ENTRY, 8)
    return held == pos


def dispatch(dict topics, const int64_t[:] position, const int32_t[:] size,
             const int32_t[:] queue_id, const int64_t[:] queue_offset,
             const int64_t[:] tag_hash, const int64_t[:] topic_hash,
             const uint8_t[:] rtype, Py_ssize_t start):
    """Write consume-queue entries for records [start, n) of the given header columns.

    `topics` maps topic_hash -> list of ConsumeQueue (indexed by queue id). Non-MESSAGE
    records are skipped, as are offsets a queue already holds (re-dispatch after a lagging
    checkpoint) when the entry there points at the same position. Returns the index of the
    first record the fast path cannot handle (unknown topic or queue, empty queue, new file,
    gap, an offset held for another position) or n when every record was handled."""
    cdef Py_ssize_t i, n = position.shape[0]
    cdef int64_t th, last_th = 0, off, pos
    cdef int32_t qid, sz
    cdef list qlist = None
    cdef ConsumeQueue cq
    cdef CQFile f
    cdef unsigned char *e
    for i in range(start, n):
        if rtype[i] != TYPE_MESSAGE:
            continue
        th = topic_hash[i]
        if qlist is None or th != last_th:
            qlist = topics.get(th)
            if qlist is None:
                return i
            last_th = th
        qid = queue_id[i]
        if qid < 0 or qid >= len(qlist):
            return i
        cq = <ConsumeQueue>qlist[qid]
        off = queue_offset[i]
        if cq.empty:
            return i
        if off != cq.next_offset:
            if off < cq.next_offset and _holds(cq, off, position[i]):
                continue
            return i
        f = cq.cur
        if f is None or off - f.first_offset >= f.capacity or off < f.first_offset:
            return i
        e = f.base + (off - f.first_offset) * C_ENTRY
        pos = position[i]
        sz = size[i]
        memcpy(e, &pos, 8)
        memcpy(e + 8, &sz, 4)
        memcpy(e + 12, &tag_hash[i], 8)
        f.dirty = True
        cq.next_offset = off + 1
    return n


def queue_offsets(const int64_t[:] counters, const int64_t[:] qids):
    """Queue offsets for a batch whose message i goes to queue qids[i]: consecutive per queue
    from `counters` -> (offsets int64[n], new counters). `counters` is not modified (the store
    adopts the new counters only once the log accepted the batch)."""
    cdef Py_ssize_t i, n = qids.shape[0], nq = counters.shape[0]
    cdef int64_t q
    new = np.array(counters, dtype=np.int64)
    offs = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] c = new
    cdef int64_t[::1] o = offs
    for i in range(n):
        q = qids[i]
        if q < 0 or q >= nq:
            raise ValueError(f"queue id {q} outside [0, {nq})")
        o[i] = c[q]
        c[q] += 1
    return offs, new


def tag_hashes(list tags):
    """FNV-1a 64 of each tag (None -> 0) as an int64 array."""
    cdef Py_ssize_t i, n = len(tags)
    out = np.zeros(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef dict cache = {}
    for i in range(n):
        t = tags[i]
        if t is None:
            continue
        h = cache.get(t)
        if h is None:
            h = fnv1a64(t.encode("utf-8")) if isinstance(t, str) else 0
            cache[t] = h
        o[i] = h
    return out


def dispatch_batch(list qlist, const int64_t[:] positions, int64_t end,
                   const int64_t[:] qids, const int64_t[:] offs, int64_t shared_tag_hash,
                   const int64_t[:] tag_hashes, Py_ssize_t start):
    """dispatch() for the store's own just-committed batch of one topic: record i spans
    [positions[i], positions[i+1]) (the last one ends at `end`; the caller checked that no
    BLANK lies inside). Tag hash: `tag_hashes[i]`, or `shared_tag_hash` when tag_hashes is
    None. Returns the index of the first record the fast path cannot place, or n."""
    cdef Py_ssize_t i, n = positions.shape[0], nq = len(qlist)
    cdef int64_t off, pos, th = shared_tag_hash
    cdef int64_t qid
    cdef int32_t sz
    cdef ConsumeQueue cq
    cdef CQFile f
    cdef unsigned char *e
    cdef bint per_tag = tag_hashes is not None
    for i in range(start, n):
        qid = qids[i]
        if qid < 0 or qid >= nq:
            return i
        cq = <ConsumeQueue>qlist[qid]
        off = offs[i]
        if cq.empty:
            return i
        if off != cq.next_offset:
            if off < cq.next_offset and _holds(cq, off, positions[i]):
                continue
            return i
        f = cq.cur
        if f is None or off - f.first_offset >= f.capacity or off < f.first_offset:
            return i
        pos = positions[i]
        sz = <int32_t>((positions[i + 1] if i + 1 < n else end) - pos)
        if per_tag:
            th = tag_hashes[i]
        e = f.base + (off - f.first_offset) * C_ENTRY
        memcpy(e, &pos, 8)
        memcpy(e + 8, &sz, 4)
        memcpy(e + 12, &th, 8)
        f.dirty = True
        cq.next_offset = off + 1
    return n


def body_bytes(bodies):
    """Total length of a list/tuple of bytes-like bodies (TypeError for anything else)."""
    cdef Py_ssize_t total = 0
    cdef object b
    for b in bodies:
        if PyBytes_CheckExact(b):
            total += PyBytes_GET_SIZE(b)
        else:
            total += len(memoryview(b))
    return total


def round_robin(const int64_t[:] counters, Py_ssize_t start, Py_ssize_t n):
    """Round-robin queue choice for n messages from queue `start`, with their queue offsets
    -> (qids int64[n], offsets int64[n], new counters); `counters` is not modified."""
    cdef Py_ssize_t i, nq = counters.shape[0]
    cdef int64_t q = start
    new = np.array(counters, dtype=np.int64)
    qids = np.empty(n, dtype=np.int64)
    offs = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] c = new
    cdef int64_t[::1] qv = qids
    cdef int64_t[::1] o = offs
    for i in range(n):
        qv[i] = q
        o[i] = c[q]
        c[q] += 1
        q += 1
        if q == nq:
            q = 0
    return qids, offs, new


def dispatch_one(ConsumeQueue cq, int64_t off, int64_t pos, int32_t size, int64_t tag_hash):
    """The fast path of dispatch() for one record -> False when the caller must take the slow
    path (empty queue, new file, gap, offset held for another position); True when written or
    already present at this position."""
    cdef CQFile f
    cdef unsigned char *e
    if cq.empty:
        return False
    if off != cq.next_offset:
        return off < cq.next_offset and _holds(cq, off, pos)
    f = cq.cur
    if f is None or off - f.first_offset >= f.capacity or off < f.first_offset:
        return False
    e = f.base + (off - f.first_offset) * C_ENTRY
    memcpy(e, &pos, 8)
    memcpy(e + 8, &size, 4)
    memcpy(e + 12, &tag_hash, 8)
    f.dirty = True
    cq.next_offset = off + 1
    return True
