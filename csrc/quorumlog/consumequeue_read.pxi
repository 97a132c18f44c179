# Included by _consumequeue.pyx: the read side of the store -- SegmentView (a read-only
# buffer over one commit-log segment), Message (a record decoded on access) and collect()
# (the Messages of a range of consume-queue entries, get()'s hot path).

cdef inline const RecHeader *_header(const unsigned char *p) noexcept nogil:
    return <const RecHeader *>p


cdef inline Py_ssize_t _keys_offset(const RecHeader *h) noexcept nogil:
    return HDR + h.topic_len + h.tags_len


cdef inline Py_ssize_t _body_offset(const RecHeader *h) noexcept nogil:
    return HDR + h.topic_len + h.tags_len + h.keys_len + h.props_len


cdef class SegmentView:
    def __cinit__(self, object owner, int64_t start, object path=None):
        PyObject_GetBuffer(owner, &self._buf, PyBUF_SIMPLE)
        self._has_buf = True
        self.base = <const unsigned char *>self._buf.buf
        self.length = self._buf.len
        self.start = start
        self.owner = owner
        self.path = path

    def __dealloc__(self):
        if self._has_buf:
            PyBuffer_Release(&self._buf)
            self._has_buf = False

    def store_timestamp_at(self, int64_t position, int32_t size):
        """store_timestamp_ms of the record of `size` bytes at `position` (inside this
        segment), its CRC checked: CorruptLogError when it is not an intact record there."""
        cdef const unsigned char *p
        cdef const RecHeader *h
        if position < self.start or size < HDR or position + size > self.start + self.length:
            raise IndexError(position)
        p = self.base + (position - self.start)
        h = _header(p)
        if (h.magic != MAGIC or <int64_t>h.position != position
                or h.total_size != <uint32_t>size
                or ql_crc32c(p + 4, <size_t>(size - 4)) != h.crc):
            raise CorruptLogError(f"{self.path} offset {position - self.start}: no intact "
                                  f"record of {size} bytes at position {position}", self.path,
                                  position - self.start)
        return h.store_ts


cdef str _utf8(Message m, const unsigned char *p, Py_ssize_t n, str what):
    try:
        return (<const char *>p)[:n].decode("utf-8")
    except UnicodeDecodeError:
        _damaged(m, f"its {what} is not valid UTF-8")


cdef int _damaged(Message m, str why) except -1:
    path = m._seg.path
    raise CorruptLogError(f"{path} offset {m.position - m._seg.start}: record at position "
                          f"{m.position} is damaged: {why}", path, m.position - m._seg.start)


cdef inline const RecHeader *_checked(Message m) except NULL:
    """The header of m's record with its lengths checked: the fields add up to the record's
    size, which collect() checked to lie inside the mapping. Every offset an accessor computes
    is then inside the record, whatever the bytes say now (they are re-read on each access
    and may have changed on disk since get() returned)."""
    cdef const RecHeader *h = _header(m._p)
    if (h.total_size != <uint32_t>m.size or <uint64_t>HDR + h.topic_len + h.tags_len
            + <uint64_t>h.keys_len + h.props_len + h.body_len != <uint64_t>m.size):
        _damaged(m, "its field lengths disagree with its size")
    return h


cdef Py_ssize_t _string_end(Message m, Py_ssize_t off, Py_ssize_t end) except -1:
    """End of the u16-length-prefixed string at `off`, which must end by `end`."""
    cdef uint16_t n
    if end - off < 2:
        _damaged(m, "a key or property runs past its field")
    memcpy(&n, m._p + off, 2)
    if n > end - off - 2:
        _damaged(m, "a key or property runs past its field")
    return off + 2 + n


@cython.freelist(512)
cdef class Message:
    """One message as stored: a pointer into the commit log, decoded on access.

    `body` is a bytes copy (cheap for small bodies, safe to keep); `body_view` is a zero-copy
    memoryview of the mapping. Either stays valid after retention deletes the segment.
    Every length is checked before it is used: a record damaged after get() returned raises
    CorruptLogError from the accessor that meets the damage."""

    def __init__(self):
        raise TypeError("Message objects are created by MessageStore.get()")

    @property
    def body(self):
        cdef const RecHeader *h = _checked(self)
        return PyBytes_FromStringAndSize(<const char *>self._p + _body_offset(h), h.body_len)

    @property
    def body_view(self):
        cdef const RecHeader *h = _checked(self)
        cdef Py_ssize_t start = (self.position - self._seg.start) + _body_offset(h)
        return memoryview(self._seg.owner)[start:start + h.body_len].toreadonly()

    @property
    def body_len(self):
        return _checked(self).body_len

    @property
    def topic(self):
        return _utf8(self, self._p + HDR, _checked(self).topic_len, "topic")

    @property
    def tags(self):
        cdef const RecHeader *h = _checked(self)
        if h.tags_len == 0:
            return None
        return _utf8(self, self._p + HDR + h.topic_len, h.tags_len, "tags")

    @property
    def keys(self):
        cdef const RecHeader *h = _checked(self)
        cdef Py_ssize_t off = _keys_offset(h), e
        cdef Py_ssize_t end = off + h.keys_len
        out = []
        while off < end:
            e = _string_end(self, off, end)
            out.append(_utf8(self, self._p + off + 2, e - off - 2, "keys"))
            off = e
        return tuple(out)

    @property
    def properties(self):
        """dict[str, str] (decoded once, then cached; a copy is returned)."""
        cdef const RecHeader *h
        cdef Py_ssize_t off, end, e
        if self._props is None:
            h = _checked(self)
            off = _keys_offset(h) + h.keys_len
            end = off + h.props_len
            d = {}
            while off < end:
                e = _string_end(self, off, end)
                k = _utf8(self, self._p + off + 2, e - off - 2, "properties")
                off = e
                e = _string_end(self, off, end)
                d[k] = _utf8(self, self._p + off + 2, e - off - 2, "properties")
                off = e
            self._props = d
        return dict(self._props)

    # The fixed header fields involve no length; the header lies inside the record.
    @property
    def queue_id(self):
        return _header(self._p).queue_id

    @property
    def queue_offset(self):
        return <int64_t>_header(self._p).queue_offset

    @property
    def index(self):
        return <int64_t>_header(self._p).raft_index

    @property
    def term(self):
        return <int64_t>_header(self._p).raft_term

    @property
    def flags(self):
        return _header(self._p).flags

    @property
    def tag_hash(self):
        return _header(self._p).tag_hash

    @property
    def born_timestamp_ms(self):
        return _header(self._p).born_ts

    @property
    def store_timestamp_ms(self):
        return _header(self._p).store_ts

    def raw(self):
        """The whole record as a read-only memoryview (zero copy)."""
        cdef Py_ssize_t start = self.position - self._seg.start
        return memoryview(self._seg.owner)[start:start + self.size].toreadonly()

    def __repr__(self):
        return (f"Message(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, position={self.position}, "
                f"body_len={self.body_len}, tags={self.tags!r})")


def message_at(SegmentView seg, int64_t position):
    """The MESSAGE record at `position` of `seg` as a Message, or None when no MESSAGE
    record starts there (a lookup that is not a consume-queue entry, e.g. the key index,
    checks what it found: magic, the position field, the type, the size within the
    segment)."""
    cdef const unsigned char *p
    cdef const RecHeader *h
    cdef Message m
    if position < seg.start or position + HDR > seg.start + seg.length:
        return None
    p = seg.base + (position - seg.start)
    h = _header(p)
    if (h.magic != MAGIC or <int64_t>h.position != position or h.type != T_MESSAGE or
            h.total_size < HDR or position + h.total_size > seg.start + seg.length):
        return None
    m = Message.__new__(Message)
    m._seg = seg
    m._p = p
    m.position = position
    m.size = h.total_size
    return m


# What _check_record finds about the record a consume-queue entry names.
cdef enum:
    R_OK = 0
    R_ENTRY = 1       # the entry does not name a record of its queue: derived data damaged
    R_RECORD = 2      # the entry names the record, whose bytes are damaged (CRC): the log


# bench/bench_read_crc.py turns the checks off (_read_checks(False)) to measure what they cost;
# off, only the magic and position of the record are compared with the entry.
cdef bint _full_checks = True


def _read_checks(bint enabled):
    """For bench/bench_read_crc.py only: False leaves get() with the old pairing check (magic
    and position) instead of the full check (CRC32C, queue, offset, topic)."""
    global _full_checks
    _full_checks = enabled


cdef int _check_record(const unsigned char *p, int64_t pos, int32_t size, int64_t offset,
                       uint32_t queue_id, const char *topic,
                       Py_ssize_t topic_len) noexcept nogil:
    """The record at p (size bytes, inside the mapping) against the entry naming it: the
    header must say it is this MESSAGE at this position with this size, its CRC must hold,
    and it must be of the queue and offset the entry is for."""
    cdef const RecHeader *h = _header(p)
    if not _full_checks:
        return R_OK if h.magic == MAGIC and <int64_t>h.position == pos else R_ENTRY
    if (h.magic != MAGIC or h.version != VERSION or h.type != T_MESSAGE
            or <int64_t>h.position != pos or h.total_size != <uint32_t>size):
        return R_ENTRY
    if ql_crc32c(p + 4, <size_t>(size - 4)) != h.crc:
        return R_RECORD
    # CRC-checked: the header's fields are what was written
    if (h.queue_id != queue_id or <int64_t>h.queue_offset != offset or h.topic_len != topic_len
            or memcmp(p + HDR, topic, topic_len) != 0):
        return R_ENTRY
    return R_OK


cdef int _raise_unpaired(ConsumeQueue cq, CQFile f, Py_ssize_t i, int64_t pos, int32_t size,
                         SegmentView seg, int rc, str why) except -1:
    cdef int64_t offset = f.first_offset + i
    if rc == R_RECORD:
        raise CorruptLogError(f"{seg.path} offset {pos - seg.start}: record at position {pos} "
                              f"({cq.topic}/{cq.queue_id} offset {offset}) fails its CRC",
                              seg.path, pos - seg.start)
    raise CorruptQueueError(
        f"consume queue {f.path} entry {offset} ({cq.topic}/{cq.queue_id}) does not name a "
        f"record of its queue: {why} (position {pos}, size {size})", str(f.path),
        i * ENTRY_SIZE, topic=cq.topic, queue_id=cq.queue_id)


def collect(object segment_for, ConsumeQueue cq, CQFile f, Py_ssize_t lo, Py_ssize_t hi,
            list out, Py_ssize_t limit, tuple tag_hashes=None, object tag_names=None,
            int64_t min_position=0, int64_t max_position=INT64_MAX):
    """Append Message objects for entries [lo, hi) of `f` (a file of `cq`) to `out` until
    `out` holds `limit`.

    With `tag_hashes` (a tuple of int64, at most 32) only entries whose stored tag hash is one
    of them are taken, and of those only records whose tags (bytes) are in `tag_names` (a set)
    — the hash comparison reads only the consume queue; the string check touches the record.
    Entries of size 0 are holes (the start of a rebuilt queue) and are skipped.
    `segment_for(position)` returns the SegmentView holding a position.

    Every record returned is checked first: the entry must lie in [min_position,
    max_position) (the log's min position and the dispatched position) and name a MESSAGE of
    this queue and offset at that position and size, and the record's CRC32C must hold.
    CorruptQueueError when the entry is wrong (the consume queue is derived data: the store
    rebuilds it from the log), CorruptLogError when the record's bytes are damaged.
    Returns the entry index where it stopped (hi when the range was exhausted)."""
    cdef SegmentView seg = None
    cdef int64_t pos, pf, pn, th
    cdef int32_t size
    cdef const CQEntry *e
    cdef const unsigned char *p
    cdef const RecHeader *h
    cdef Message m
    cdef Py_ssize_t i, j, have = len(out), nh = 0
    cdef int64_t hashes[MAX_TAG_FILTER]
    cdef bint match
    cdef int rc
    cdef bytes topic = cq.topic.encode()
    cdef const char *topic_p = topic
    cdef Py_ssize_t topic_len = len(topic)
    cdef uint32_t queue_id = cq.queue_id
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
        e = _cq_entry(f, i)
        size = e.size
        if size <= 0:
            continue
        pos = e.position
        if size < HDR or pos < min_position or pos > max_position - size:
            _raise_unpaired(cq, f, i, pos, size, seg, R_ENTRY,
                            "outside the log's dispatched records")
        if tag_hashes is not None:
            th = e.tag_hash
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
                _raise_unpaired(cq, f, i, pos, size, seg, R_ENTRY, "outside its segment")
        p = seg.base + (pos - seg.start)
        # Consumers read records spread across the log (one queue's messages interleave with
        # every other queue's); start the cache misses of the next records now so they overlap.
        # The whole record is read (CRC), so its every line is fetched, up to PREFETCH_BYTES.
        if i + PREFETCH_AHEAD < hi:
            pf = (e + PREFETCH_AHEAD).position
            pn = min(<int64_t>(e + PREFETCH_AHEAD).size, <int64_t>PREFETCH_BYTES)
            if pn > 0 and pf >= seg.start and pf + pn <= seg.start + seg.length:
                for j in range(0, pn, 64):
                    ql_prefetch(seg.base + (pf - seg.start) + j)
        # The consume queue is derived data and the record may have rotted since it was
        # written: check both (CRC32C in hardware: a few ns per 100-byte record).
        rc = _check_record(p, pos, size, f.first_offset + i, queue_id, topic_p, topic_len)
        if rc != R_OK:
            _raise_unpaired(cq, f, i, pos, size, seg, rc, "no record of this queue and offset starts there")
        if tag_names is not None:
            h = _header(p)
            if PyBytes_FromStringAndSize(<const char *>p + HDR + h.topic_len,
                                         h.tags_len) not in tag_names:
                continue
        m = Message.__new__(Message)
        m._seg = seg
        m._p = p
        m.position = pos
        m.size = size
        out.append(m)
        have += 1
    return hi
