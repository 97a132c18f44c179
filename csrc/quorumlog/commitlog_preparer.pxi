# Included by _commitlog.pyx: work kept off the append path -- the preparer thread maps and
# preallocates the next segment once the current one is half full, and keeps the pages
# ahead of the end of the log faulted in for writing (MADV_POPULATE_WRITE): the raft-index
# file's always, the segment's only while records are written through the mapping (single
# appends). Batches and replicated ranges are written with pwritev, which fills new pages
# from the buffer; populating them first would zero every page for nothing.

cdef _discard_prepared(CommitLog self):
    # Called with _prep_cv held. A prepared file the log will not use is unlinked so it
    # cannot look like a later segment at recovery.
    m = <Mapping>self._prepared
    self._prepared = None
    if any(x is m or (<Mapping>x).start == m.start for x in self._segs):
        return      # never unlink a segment the log holds
    try:
        os.unlink(m.path)
    except OSError:
        pass


cdef void _populate(CommitLog self, int64_t upto):
    # Fault the next pages of the current segment in for writing with one madvise
    # instead of one page fault per 4 KiB (the page-fault path is most of the cost of
    # writing through a shared mapping into fresh page cache). Normally the preparer
    # thread has done this already; this is the fallback when it is behind or absent.
    cdef Mapping m = self._cur
    cdef int64_t a = m.populated & ~(<int64_t>4095), b
    cdef int64_t e = max(self._end - m.start, 0)   # _end may still be in the last segment
    if a < e:
        a = e & ~(<int64_t>4095)
    b = min(max(upto - m.start, a + POPULATE_AHEAD), m.size)
    b = (b + 4095) & ~(<int64_t>4095)
    if b > m.size:
        b = m.size
    if b > a:
        with nogil:
            ql_populate_write(m.addr, a, b - a)
        if b > m.populated:
            m.populated = b
    _want_populated(self, upto, True)


cdef inline void _want_populated(CommitLog self, int64_t upto, bint segment):
    # Ask the preparer to keep pages faulted in ahead of `upto` (the segment's too when
    # `segment`); it is woken only when the populated margin falls below BG_POPULATE_LOW
    # (once per ~16 MiB written).
    if not self.preallocate_next or self._stopping:
        return
    if self._pop_want - upto >= BG_POPULATE_LOW and (
            not segment or self._seg_pop_want - upto >= BG_POPULATE_LOW):
        return
    self._pop_want = upto + BG_POPULATE_AHEAD
    if segment:
        self._seg_pop_want = self._pop_want
    with self._prep_cv:
        self._prep_cv.notify_all()


cdef bint _pop_span(CommitLog self, bint index_file, int64_t cap, int64_t *lo, int64_t *hi):
    # Preparer side, GIL held: the next range [lo, hi) (offsets in the current segment,
    # or in the current raft-index file) to fault in, at most `cap` bytes; False when
    # nothing is due. The same arithmetic decides "due" and "do", so the loop cannot spin.
    cdef Mapping m
    cdef int64_t a, b, written, want, mean
    if index_file:
        m = self._cur_idx
        if m is None or self.n_records == 0:
            return False
        written = (self._next_index - m.start) * IDX_ENTRY
        # as many entries ahead as records fit in the wanted segment bytes at the mean
        # record size appended so far (24 B of index per record)
        mean = max(self.n_bytes // self.n_records, 1)
        want = written + max(self._pop_want - self._end, 0) // mean * IDX_ENTRY
    else:
        m = self._cur
        if m is None:
            return False
        written = self._end - m.start
        want = self._seg_pop_want - m.start
    a = m.populated & ~(<int64_t>4095)   # the hint may be mid-page (madvise needs pages)
    if a < written:
        a = written & ~(<int64_t>4095)
    b = min(want, a + cap)
    b = (b + 4095) & ~(<int64_t>4095)
    if b > m.size:
        b = m.size
    lo[0] = a
    hi[0] = b
    return b > a and b > m.populated   # (a mapping may end mid-page: small index files)


cdef bint _populate_due(CommitLog self):
    cdef int64_t a, b
    return _pop_span(self, False, 1 << 40, &a, &b) or _pop_span(self, True, 1 << 40, &a, &b)


cdef populate_ahead(CommitLog self):
    # Preparer side: fault pages in BG_POPULATE_CHUNK at a time with the GIL released
    # until the current segment is populated up to _pop_want and the raft-index file
    # correspondingly. Holding `m` keeps the mapping alive while the GIL is released.
    cdef Mapping m
    cdef int64_t a, b
    cdef bint idx
    cdef int k
    for k in range(2):
        idx = k == 1
        while not self._stopping and _pop_span(self, idx, BG_POPULATE_CHUNK, &a, &b):
            m = self._cur_idx if idx else self._cur
            with nogil:
                ql_populate_write(m.addr, a, b - a)
            if b > m.populated:
                m.populated = b


cdef inline void _maybe_request_prepare(CommitLog self):
    # Prepare the next segment once the current one is half full, off the append path.
    cdef int64_t nxt
    if not self.preallocate_next or self._stopping:
        return
    if self._end - self._cur_start < (self.segment_size_bytes >> 1):
        return
    nxt = self._cur_start + self.segment_size_bytes
    if self._prep_request == nxt:
        return
    self._prep_request = nxt
    with self._prep_cv:
        self._prep_cv.notify_all()


cdef bint _no_segment_due(CommitLog self):
    """Called with _prep_cv held: no next segment is wanted, or it is ready or underway."""
    return (self._prep_busy or self._prep_request < 0 or
            (self._prepared is not None and
             (<Mapping>self._prepared).start == self._prep_request) or
            self._prep_request <= self._cur_start)


cdef prepare_loop(CommitLog self):
    cdef int64_t want
    cdef Mapping m
    while True:
        with self._prep_cv:
            while not self._stopping and _no_segment_due(self) and not _populate_due(self):
                self._prep_cv.wait()
            if self._stopping:
                return
            populate = _no_segment_due(self)
            if not populate:
                # claim the preparation in the same critical section as the check
                want = self._prep_request
                if self._prepared is not None:
                    _discard_prepared(self)
                self._prep_busy = True
        if populate:        # only page population is due
            populate_ahead(self)
            continue
        m = None
        try:
            m = make_segment(self, want // self.segment_size_bytes)
            if self._seg_pop_want > self._cur_start:
                # single appends write through the mapping: fault in the first pages
                # for writing, so they do not pay for page-cache allocation
                with nogil:
                    ql_populate_write(m.addr, 0, min(m.size, 4 << 20))
                m.populated = min(m.size, 4 << 20)
        except Exception as e:  # DiskFullError: the append path retries and reports it
            log.debug("preparing segment %d failed: %s", want, e)
            self._prep_error = e
        with self._prep_cv:
            self._prep_busy = False
            _offer_prepared(self, m, want)
            self._prep_cv.notify_all()
            if m is None:
                # avoid spinning on a full disk: wait for a new request
                self._prep_cv.wait(0.5)


cdef _offer_prepared(CommitLog self, Mapping m, int64_t want):
    """Called with _prep_cv held: keep the segment just prepared at `want` (m; None when
    that failed) for the append path when it is still the next one."""
    if m is None:
        self._prep_request = -1 if self._prep_request == want else self._prep_request
        return
    if want == self._cur_start + self.segment_size_bytes and \
            _seg(self, want // self.segment_size_bytes) is None:
        self._prepared = m
        self.n_segments_created += 1
    elif _seg(self, want // self.segment_size_bytes) is None:
        # no longer the next segment (the log was truncated meanwhile):
        # a file past the end would break segment contiguity at recovery
        try:
            os.unlink(m.path)
        except OSError:
            pass
    # else: the log already holds that segment; drop this second mapping
