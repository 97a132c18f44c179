# Included by _commitlog.pyx: cutting the log -- truncate_after (drop the uncommitted tail a
# new leader overrules; durable before it returns) and delete_segments_before (retention:
# whole segments and the raft-index files wholly below them).

cdef int truncate_log(CommitLog self, int64_t i) except -1:
    cdef int64_t new_end, new_term
    cdef const IdxEntry *e
    _check_writable(self)
    if i >= self._next_index - 1:
        return 0    # nothing after i
    if i < self._first_index - 1 or i < 0:
        raise IndexOutOfRangeError(f"cannot truncate after {i}: first_index is {self._first_index}")
    if i < self._committed_index:
        raise InvalidArgumentError(
            f"cannot truncate after {i}: entries up to {self._committed_index} are committed")
    _acquire(self)
    # no flush may be in flight: it would raise flushed_position past the new end
    _flush_exclusive(self)
    try:
        if i >= self._first_index:
            e = _entry_checked(self, i)
            new_end = e.position + e.size
            new_term = e.term
        else:
            new_end = self.min_position
            new_term = 0
        # The steps are ordered so that a crash after any of them leaves files recovery
        # takes for a prefix of the old log (the truncation then simply happens again):
        # never a gap between segment files, never zeroed bytes with intact records after
        # them, never a checkpoint claiming what is gone.
        if new_end < self._flushed_pos:
            # 1. the checkpoint stops claiming records that are about to disappear
            self._flushed_pos = new_end
            self._flushed_index = i
            write_checkpoint(self, False)
            crash_point("truncate:checkpoint_lowered")
        # 2. the prepared next segment (past the end): unlinked first, or it would stand
        #    alone behind the gap the next step leaves
        _drop_prepared(self)
        crash_point("truncate:prepared_discarded")
        # 3. later segments, newest first: the files left are always contiguous
        _unlink_after(self, new_end)
        # 4. the tail of the segment that keeps the new end, zeroed and synced
        _zero_tail(self, new_end)
        crash_point("truncate:tail_zeroed")
        # 5. the raft-index entries after i (entries naming gone records are ignored by
        #    recovery anyway; zeroed so nothing can resurrect them)
        _cut_index(self, i)
        crash_point("truncate:index_zeroed")
        self._end = new_end
        self._next_index = i + 1
        self._last_term = new_term if i >= 1 else 0
        if self._dispatched > new_end:
            self._dispatched = new_end
        with self._cv:
            # the flusher would spin on a request it can never reach
            if self._flush_request > new_end:
                self._flush_request = new_end
        _fsync_dir(self._idxdir)
    finally:
        _flush_exclusive_end(self)
        _release(self)
    return 0


cdef int _unlink_after(CommitLog self, int64_t new_end) except -1:
    """Unlink every segment after the one holding new_end, newest first (their memory goes
    with the last view), then sync the directory."""
    cdef int64_t k_new = new_end // self.segment_size_bytes
    cdef Mapping m
    while len(self._segs) > k_new - self._first_seg + 1:
        m = <Mapping>self._segs.pop()
        self._views.pop()
        close_write_fd(m)
        try:
            os.unlink(m.path)
        except FileNotFoundError:
            pass
        crash_point("truncate:segment_unlinked")
    self._cur = <Mapping>self._segs[len(self._segs) - 1]
    self._cur_start = self._cur.start
    _fsync_dir(self._segdir)
    if self._dir_synced_seg > k_new:
        self._dir_synced_seg = k_new     # a file made again under a gone name needs a sync
    return 0


cdef int _zero_tail(CommitLog self, int64_t new_end) except -1:
    """Zero [new_end, end of its segment) durably."""
    cdef int64_t S = self.segment_size_bytes
    cdef Mapping m = _seg(self, new_end // S)
    cdef bytes bpath = os.fsencode(m.path)
    cdef const char *cpath = bpath
    cdef int64_t seg_old_end = min(self._end, m.start + S)   # later segments: to its end
    cdef int err
    # The zeroed range is synced whether or not it was flushed: the kernel may have
    # written the dropped records back on its own, and a crash must not bring them back
    # (recovery would find intact records after the end, or resurrect dropped entries).
    # Truncation is rare; one sync each is cheap.
    with nogil:
        err = ql_zero_range(cpath, m.addr, new_end - m.start, seg_old_end - new_end)
        if err == 0:
            err = ql_msync(m.addr, new_end - m.start, seg_old_end - new_end)
    if err:
        _fail(self, f"zeroing the truncated tail of {m.path}", err)
    return 0


cdef int _cut_index(CommitLog self, int64_t i) except -1:
    """Zero the raft-index entries after i (durably)."""
    cdef int64_t j
    cdef char *ep
    for j in range(i + 1, self._next_index):
        ep = _entry(self, j, False)
        if ep != NULL:
            memset(ep, 0, IDX_ENTRY)
    _msync_index(self, i + 1, self._next_index - 1)
    return 0


cdef int _drop_prepared(CommitLog self) except -1:
    """No prepared segment may stay beyond the end after a truncation (a file past the new
    end would break the contiguity of segments)."""
    with self._prep_cv:
        # a preparation in flight targets the old next segment: let it land, then drop it
        while self._prep_busy:
            self._prep_cv.wait()
        self._prep_request = -1
        if self._prepared is not None:
            _discard_prepared(self)
    return 0


cdef int64_t delete_segments(CommitLog self, int64_t position) except -1:
    cdef int64_t S = self.segment_size_bytes, count = 0, n = 0, new_min
    cdef Mapping m, mi
    cdef const RecHeader *h
    _check_writable(self)
    _acquire(self)
    try:
        while n < len(self._segs) - 1:
            m = <Mapping>self._segs[n]
            if m.start + S > position or m is self._cur:
                break
            n += 1
        if n == 0:
            return 0
        new_min = (<Mapping>self._segs[n]).start
        # The intent first: a checkpoint whose min position is the new one (with everything
        # before it flushed), then the unlinks. A crash in between leaves segments below the
        # checkpoint's min position, which recovery unlinks; the other order left a
        # checkpoint naming a missing segment that held durable data.
        flush_log(self)
        _flush_exclusive(self)
        try:
            write_checkpoint(self, False, new_min)
        finally:
            _flush_exclusive_end(self)
        crash_point("retention:checkpoint_written")
        while count < n:
            # out of the log in one step (nothing here releases the GIL: a reader in
            # another thread sees the lists and _first_seg agree) before the file goes
            m = <Mapping>self._segs.pop(0)
            self._views.pop(0)
            self._first_seg += 1
            try:
                # what still holds the mapping is `m` alone; more: a view of it is alive
                pool_segment(self, m, Py_REFCNT(m) > 1)
            except BaseException:
                self._first_seg -= 1
                self._segs.insert(0, m)
                self._views.insert(0, memoryview(m))
                raise
            crash_point("retention:segment_unlinked")
            count += 1
        m = <Mapping>self._segs[0]
        h = <const RecHeader *>m.addr
        if (self._end > m.start and verify_record(m.addr, S, m.start, False) == V_OK
                and h.type != T_BLANK):
            self._first_index = h.raft_index
        # raft index files wholly below first_index go too
        while len(self._idx) > 1 and (self._first_idxf + 1) * self.index_file_entries < self._first_index:
            mi = <Mapping>self._idx.pop(0)
            os.unlink(mi.path)
            self._first_idxf += 1
        _fsync_dir(self._segdir)
        _fsync_dir(self._idxdir)
    finally:
        _release(self)
    return count
