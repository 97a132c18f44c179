# Included by _commitlog.pyx: the RECORD_INFO scan (headers of consecutive records as a numpy
# structured array, no Python object per record) and CRC verification of a span of the log,
# both one nogil loop over the segment mappings.

# One scanned record; RECORD_INFO is its numpy dtype (docs/architecture.md).
cdef packed struct RecInfo:
    int64_t index
    int64_t term
    int64_t position
    int64_t queue_offset
    int64_t born_ts
    int64_t store_ts
    int64_t tag_hash
    int64_t topic_hash
    int32_t size
    int32_t queue_id
    int32_t body_offset
    int32_t body_len
    uint32_t flags
    uint8_t type
    uint8_t pad0
    uint8_t pad1
    uint8_t pad2

RECORD_INFO = np.dtype([
    ("index", "<i8"), ("term", "<i8"), ("position", "<i8"), ("queue_offset", "<i8"),
    ("born_ts", "<i8"), ("store_ts", "<i8"), ("tag_hash", "<i8"), ("topic_hash", "<i8"),
    ("size", "<i4"), ("queue_id", "<i4"), ("body_offset", "<i4"), ("body_len", "<i4"),
    ("flags", "<u4"), ("type", "u1"), ("pad", "u1", (3,)),
])
assert RECORD_INFO.itemsize == sizeof(RecInfo) == 88


cdef extern from "sys/mman.h" nogil:
    int madvise(void *addr, size_t length, int advice)
    int MADV_NORMAL
    int MADV_RANDOM


# A read that starts this close to the log's end is "right behind the appends" (a leader's
# reads for its APPENDs, the dispatch's scans); the advice covers the segment from there on,
# moved up once the reads are NEAR_END past it (one madvise per 8 MiB appended).
cdef enum:
    NEAR_END = 8 << 20


cdef int _no_readahead(CommitLog self, int64_t k, Mapping m, int64_t from_pos) except -1:
    """Reads right behind the appends, in the segment being written, take no readahead: the
    pages past the log's end are fallocated but unwritten, and a fault's readahead there
    zero-fills them (ext4_mpage_readpages) and marks one for the next asynchronous
    readahead, so reads of fresh records kept zero-filling the window ahead, which the next
    pwritev then overwrote -- 6.8 % of all CPU of a replicated run, on the leader
    (docs/benchmarks.md, branch batch21). Only the segment's tail from the reads on gets
    the advice, not the whole segment: a scan further back (the store's replay at open, a
    lagging follower's catch-up, a consumer) reads pages that may have left the cache, and
    without readahead it read them one page per fault (docs/benchmarks.md, session 22).
    The segment read that way before gets readahead back. Advice only: a failure changes
    nothing."""
    cdef Mapping old
    cdef int64_t lo = from_pos - k * self.segment_size_bytes
    if self._end - from_pos > NEAR_END:
        return 0
    lo -= lo % NEAR_END
    if k != self._random_seg:
        if self._random_seg >= 0:
            old = _seg(self, self._random_seg)
            if old is not None:
                madvise(old.addr, <size_t>old.size, MADV_NORMAL)
        madvise(m.addr + lo, <size_t>(m.size - lo), MADV_RANDOM)
    elif lo < self._random_lo:
        madvise(m.addr + lo, <size_t>(self._random_lo - lo), MADV_RANDOM)
    elif lo >= self._random_lo + 2 * NEAR_END:
        madvise(m.addr + self._random_lo, <size_t>(lo - self._random_lo), MADV_NORMAL)
    else:
        return 0
    self._random_seg = k
    self._random_lo = lo
    return 0


cdef char **_segment_addrs(CommitLog self, int64_t from_pos, int64_t limit, int64_t *k0,
                           Py_ssize_t *nseg, list holder) except NULL:
    """malloc'd addresses of the segments holding [from_pos, limit) (the caller frees
    them); `holder` gets the mappings, so they stay mapped while the GIL is released."""
    cdef int64_t S = self.segment_size_bytes
    cdef Py_ssize_t j
    cdef char **addrs
    k0[0] = from_pos // S
    nseg[0] = (limit - 1) // S - k0[0] + 1
    holder.extend(self._segs[k0[0] - self._first_seg:k0[0] - self._first_seg + nseg[0]])
    if len(holder) != nseg[0]:
        raise IndexOutOfRangeError(f"[{from_pos}, {limit}) is not all in the log")
    if holder[nseg[0] - 1] is self._cur:
        _no_readahead(self, k0[0] + nseg[0] - 1, self._cur, max(from_pos, self._cur_start))
    addrs = <char **>malloc(nseg[0] * sizeof(char *))
    if addrs == NULL:
        raise MemoryError()
    for j in range(nseg[0]):
        addrs[j] = (<Mapping>holder[j]).addr
    return addrs


cdef tuple scan_headers(CommitLog self, int64_t from_position, int64_t limit_position,
                        Py_ssize_t max_records):
    cdef int64_t S = self.segment_size_bytes, limit, pos, cap, k0
    cdef Py_ssize_t nseg, count = 0
    cdef char **addrs
    cdef int rc = 0
    cdef cnp.ndarray out
    cdef RecInfo *infos
    cdef list segs = []
    _check_open(self)
    if max_records < 0:
        raise InvalidArgumentError("max_records must be >= 0")
    if from_position < self.min_position or from_position > self._end:
        raise IndexOutOfRangeError(
            f"position {from_position} outside [{self.min_position}, {self._end}]")
    limit = min(limit_position, self._end)
    if limit <= from_position or max_records == 0:
        return (np.empty(0, dtype=RECORD_INFO), from_position)
    cap = min(<int64_t>max_records, (limit - from_position) // HDR + 1)
    out = np.empty(cap, dtype=RECORD_INFO)
    addrs = _segment_addrs(self, from_position, limit, &k0, &nseg, segs)
    try:
        pos = from_position
        infos = <RecInfo *>cnp.PyArray_DATA(out)
        if cap > 64:
            with nogil:
                rc = _scan_loop(addrs, k0, nseg, S, &pos, limit, infos, cap, &count, -1)
        else:
            rc = _scan_loop(addrs, k0, nseg, S, &pos, limit, infos, cap, &count, -1)
    finally:
        free(addrs)
    if rc != V_OK:
        if count == 0:
            m = _seg_for_pos(self, pos)
            if rc in (V_MAGIC, V_POSITION, V_SHORT) and pos == from_position:
                raise InvalidArgumentError(f"no record starts at position {from_position}")
            _raise_bad(m, pos, rc)
        # return the intact prefix; the next call reports the damage
    return (out[:count], pos)


cdef object indexes_of_type(CommitLog self, int rtype, int64_t lo, int64_t hi):
    """The raft indexes in [first_index, last_index] whose record is of type `rtype`, read
    from the raft index (24 bytes an entry) instead of the records: a replica's start looks
    for its CONFIG records this way (node/driver.py config_history), where a scan of the
    whole log read every byte of it -- 9.5 GB, 8-16 s from disk -- at every restart
    (docs/benchmarks.md, session 22)."""
    cdef int64_t N = self.index_file_entries, f, a, b, j, n = 0, cap = 16
    cdef const IdxEntry *e
    cdef int64_t *found
    cdef int64_t *grown
    cdef bint oom = False
    cdef Mapping m
    _check_open(self)
    if rtype < 0 or rtype > 255:
        raise InvalidArgumentError(f"record type {rtype} outside 0..255")
    lo = max(lo, self._first_index)
    hi = min(hi, self._next_index - 1)
    if hi < lo:
        return np.empty(0, dtype=np.int64)
    found = <int64_t *>malloc(cap * sizeof(int64_t))
    if found == NULL:
        raise MemoryError()
    try:
        for f in range((lo - 1) // N, (hi - 1) // N + 1):
            m = _idx_file(self, f, False)
            if m is None:
                raise CorruptLogError(f"raft index file for {f * N + 1} is missing",
                                      self._idxdir, None)
            a = max(lo - 1, f * N) - f * N
            b = min(hi - 1, f * N + N - 1) - f * N + 1
            e = <const IdxEntry *>m.addr
            with nogil:
                for j in range(a, b):
                    if e[j].type != rtype:
                        continue
                    if n == cap:
                        grown = <int64_t *>realloc(found, 2 * cap * sizeof(int64_t))
                        if grown == NULL:
                            oom = True
                            break
                        found = grown
                        cap *= 2
                    found[n] = f * N + j + 1
                    n += 1
            if oom:
                raise MemoryError()
        out = np.empty(n, dtype=np.int64)
        if n:
            memcpy(cnp.PyArray_DATA(out), found, n * sizeof(int64_t))
        return out
    finally:
        free(found)


cdef int64_t verify_log(CommitLog self, from_position) except -1:
    cdef int64_t pos
    _check_open(self)
    pos = self.min_position if from_position is None else from_position
    if pos < self.min_position or pos > self._end:
        raise IndexOutOfRangeError(
            f"position {pos} outside [{self.min_position}, {self._end}]")
    _verify_span(self, pos, self._end, -1)
    return self._end


cdef int _verify_span(CommitLog self, int64_t from_pos, int64_t limit,
                      int64_t expect_index) except -1:
    """Verify every record in [from_pos, limit) (GIL released); CorruptLogError at the
    first bad one. expect_index > 0 also checks the raft index sequence."""
    cdef int64_t S = self.segment_size_bytes, k0, pos = from_pos
    cdef Py_ssize_t nseg, count = 0
    cdef char **addrs
    cdef int rc
    cdef list segs = []
    if limit <= from_pos:
        return 0
    if from_pos // S < self._first_seg:
        raise IndexOutOfRangeError(f"position {from_pos} below min_position {self.min_position}")
    addrs = _segment_addrs(self, from_pos, limit, &k0, &nseg, segs)
    try:
        if limit - from_pos >= NOGIL_BYTES:
            with nogil:
                rc = _scan_loop(addrs, k0, nseg, S, &pos, limit, NULL, limit, &count,
                                expect_index)
        else:
            # a few records (a leader's read for one APPEND of single messages): ~40 ns per
            # KiB of CRC costs less than handing the GIL to another thread and waiting to
            # get it back (a futex wake-up, up to a switch interval)
            rc = _scan_loop(addrs, k0, nseg, S, &pos, limit, NULL, limit, &count,
                            expect_index)
    finally:
        free(addrs)
    if rc != V_OK or pos < limit:
        _raise_bad(_seg_for_pos(self, pos), pos, rc if rc != V_OK else V_SIZE)
    return 0


cdef int _scan_loop(char **addrs, int64_t k0, Py_ssize_t nseg, int64_t S, int64_t *pos_io,
                    int64_t limit, RecInfo *out, int64_t cap, Py_ssize_t *count_out,
                    int64_t expect_index) noexcept nogil:
    # Verifies consecutive records (CRC included) and, when `out` is not NULL, fills one
    # RECORD_INFO per non-BLANK record. expect_index > 0: raft indexes must continue it.
    cdef int64_t pos = pos_io[0], k, off
    cdef Py_ssize_t count = 0
    cdef const RecHeader *h
    cdef const char *p
    cdef RecInfo *r
    cdef int rc = V_OK
    while count < cap and pos < limit:
        k = pos // S - k0
        if k >= nseg:
            break
        off = pos - (pos // S) * S
        p = addrs[k] + off
        rc = verify_record(p, S - off, <uint64_t>pos, True)
        if rc != V_OK:
            break
        h = <const RecHeader *>p
        if h.type == T_BLANK:
            pos += h.total_size
            continue
        if pos + h.total_size > limit:
            break
        if expect_index > 0:
            if h.raft_index != <uint64_t>expect_index:
                rc = V_INDEX
                break
            expect_index += 1
        if out == NULL:
            count += 1
            pos += h.total_size
            continue
        r = &out[count]
        r.index = h.raft_index
        r.term = h.raft_term
        r.position = pos
        r.queue_offset = h.queue_offset
        r.born_ts = h.born_ts
        r.store_ts = h.store_ts
        r.tag_hash = h.tag_hash
        r.topic_hash = <int64_t>fnv1a(p + HDR, h.topic_len)
        r.size = h.total_size
        r.queue_id = h.queue_id
        r.body_offset = h.total_size - h.body_len
        r.body_len = h.body_len
        r.flags = h.flags
        r.type = h.type
        r.pad0 = 0
        r.pad1 = 0
        r.pad2 = 0
        count += 1
        pos += h.total_size
    pos_io[0] = pos
    count_out[0] = count
    return rc
