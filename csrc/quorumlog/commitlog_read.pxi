# Included by _commitlog.pyx: reads -- read() (a zero-copy view of whole records by raft
# index, what a leader ships to followers) and the single-record reads by position. Every
# record handed out is CRC-checked first.

cdef _raise_bad(Mapping m, int64_t position, int rc):
    raise CorruptLogError(
        f"{m.path} offset {position - m.start}: {_VERIFY_REASONS.get(rc, rc)}",
        m.path, position - m.start)


cdef tuple read_records(CommitLog self, int64_t lo_index, int64_t hi_index, int64_t max_bytes):
    cdef int64_t hi, p0, k, lo2, hi2, mid, endb, seg_end
    cdef const IdxEntry *e
    cdef Mapping m
    _check_open(self)
    if max_bytes < 0:
        raise InvalidArgumentError("max_bytes must be >= 0")
    if lo_index > self._next_index - 1 and lo_index >= 1:
        return (memoryview(b""), 0)
    if lo_index < self._first_index or lo_index < 1:
        raise IndexOutOfRangeError(
            f"raft index {lo_index} below first_index {self._first_index}")
    hi = min(hi_index, self._next_index)
    if hi <= lo_index:
        return (memoryview(b""), 0)
    e = _entry_checked(self, lo_index)
    p0 = e.position
    k = p0 // self.segment_size_bytes
    seg_end = (k + 1) * self.segment_size_bytes
    # largest j in [lo, hi) with end(j) - p0 <= max_bytes and j in segment k
    lo2 = lo_index
    hi2 = hi - 1
    while lo2 < hi2:
        mid = (lo2 + hi2 + 1) >> 1
        e = _entry_checked(self, mid)
        if <int64_t>e.position < seg_end and <int64_t>e.position + e.size - p0 <= max_bytes:
            lo2 = mid
        else:
            hi2 = mid - 1
    e = _entry_checked(self, lo2)
    endb = e.position + e.size
    m = _seg(self, k)
    if m is None:       # deleted by delete_segments_before between checks
        raise IndexOutOfRangeError(
            f"raft index {lo_index} below first_index {self._first_index}")
    # The view is taken before _verify_span releases the GIL: a concurrent
    # delete_segments_before / truncate_after shifts _views and _first_seg.
    view = <object>self._views[k - self._first_seg]
    # CRC on read too: a leader never ships damaged bytes
    _verify_span(self, p0, endb, lo_index)
    return (view[p0 - m.start:endb - m.start], lo2 - lo_index + 1)


cdef Mapping _checked_record(CommitLog self, int64_t position):
    cdef Mapping m = _seg_for_pos(self, position)
    cdef int rc
    if position >= self._end:
        raise IndexOutOfRangeError(f"position {position} at or beyond end {self._end}")
    rc = verify_record(m.addr + (position - m.start),
                       m.start + self.segment_size_bytes - position, position, True)
    if rc != V_OK:
        _raise_bad(m, position, rc)
    return m


cdef record_view(CommitLog self, int64_t position):
    cdef Mapping m
    cdef int64_t size
    _check_open(self)
    m = _checked_record(self, position)
    size = (<const RecHeader *>(m.addr + (position - m.start))).total_size
    off = position - m.start
    return (<object>self._views[m.start // self.segment_size_bytes - self._first_seg])[
        off:off + size]


cdef str record_topic(CommitLog self, int64_t position):
    cdef Mapping m
    cdef const RecHeader *h
    _check_open(self)
    m = _checked_record(self, position)
    h = <const RecHeader *>(m.addr + (position - m.start))
    return (m.addr + (position - m.start) + HDR)[:h.topic_len].decode("utf-8")
