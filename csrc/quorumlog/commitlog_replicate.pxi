# Included by _commitlog.pyx: follower appends -- append_replicated copies whole records
# from a leader's read() verbatim into the same positions, after checking every one (CRC,
# index continuity, position, term, the format limits); all or nothing.

# Where the records of a replicated range land, worked out before anything is written.
cdef struct RepPlan:
    int64_t pos              # where the next record lands
    int64_t cs               # start of the segment it lands in
    int64_t expect           # the raft index it must carry
    int64_t term             # the term it may not go below
    int64_t last_pos         # position of the last record checked


cdef int64_t append_replicated_range(CommitLog self, raw) except? -1:
    cdef const unsigned char[::1] v
    cdef const char *p
    cdef Py_ssize_t n
    cdef RepPlan plan
    cdef int64_t first_index
    cdef list runs = []      # (src offset, dst position, length) per segment run
    cdef list blanks = []    # positions of the BLANKs closing segments
    cdef list new_segs
    cdef Mapping m
    _check_open(self)
    if isinstance(raw, str) or raw is None:
        raise ArgumentTypeError("raw must be bytes-like")
    try:
        v = raw
    except (TypeError, ValueError, BufferError):
        raise ArgumentTypeError(f"raw must be bytes-like, not {type(raw).__name__}") from None
    n = v.shape[0]
    if n == 0:
        return self._next_index - 1
    p = <const char *>&v[0]
    _acquire(self)
    try:
        _check_writable(self)
        plan.pos = self._end
        plan.cs = self._cur_start
        plan.expect = self._next_index
        plan.term = self._last_term
        plan.last_pos = -1
        first_index = plan.expect
        _plan_replicated(self, p, n, &plan, runs, blanks)
        new_segs = _map_range_for(self, plan.last_pos, plan.expect - 1)
        # all checks passed and every file exists: write
        _write_replicated(self, p, n, first_index, new_segs, runs, blanks)
        for m in new_segs:
            _install_segment(self, m)
        if self._first_index == 0 or first_index == 1:
            self._first_index = min(self._first_index or first_index, first_index)
        _advance_end(self, plan.pos, plan.expect, plan.term, 0, plan.expect - first_index, n,
                     False)
    finally:
        _release(self)
    return plan.expect - 1


cdef int _plan_replicated(CommitLog self, const char *p, Py_ssize_t n, RepPlan *plan,
                          list runs, list blanks) except -1:
    """Check every record of the range and where it lands; collect the runs of bytes to
    copy (one per segment) and the BLANKs to write. ReplicationError on the first fault."""
    cdef Py_ssize_t off = 0
    cdef int64_t S = self.segment_size_bytes
    cdef int64_t run_src = 0, run_dst = -1, run_len = 0
    cdef const RecHeader *h
    # a big range: the CRCs afterwards in one loop without the GIL (releasing it per record
    # cost a GIL hand-off per message); a small one: inline, GIL held
    cdef bint crc_later = n >= NOGIL_BYTES
    cdef int64_t first_index = plan.expect
    while off < n:
        h = _replicated_header(self, p, off, n, plan)
        if <int64_t>h.total_size + HDR > plan.cs + S - plan.pos:
            blanks.append(plan.pos)
            plan.pos = plan.cs + S
            plan.cs = plan.pos
        _check_replicated_record(self, p, off, plan.pos, plan.expect, not crc_later)
        if run_dst >= 0 and run_dst + run_len == plan.pos:
            run_len += h.total_size
        else:
            if run_dst >= 0:
                runs.append((run_src, run_dst, run_len))
            run_src = off
            run_dst = plan.pos
            run_len = h.total_size
        plan.term = h.raft_term
        plan.last_pos = plan.pos
        plan.pos += h.total_size
        off += h.total_size
        plan.expect += 1
    runs.append((run_src, run_dst, run_len))
    if crc_later:
        _check_crcs(p, n, first_index)
    return 0


cdef int _check_crcs(const char *p, Py_ssize_t n, int64_t first_index) except -1:
    """The CRC of every record of a range whose headers _plan_replicated checked (their
    total sizes tile [0, n)), in one loop without the GIL; ReplicationError at the first
    mismatch (a fault other than a CRC found in a later record is reported first)."""
    cdef Py_ssize_t off = 0, bad = -1
    cdef int64_t k = 0
    cdef const RecHeader *h
    with nogil:
        while off < n:
            h = <const RecHeader *>(p + off)
            if ql_crc32c(p + off + 4, h.total_size - 4) != h.crc:
                bad = off
                break
            off += h.total_size
            k += 1
    if bad >= 0:
        raise ReplicationError(f"CRC mismatch in index {first_index + k} at byte {bad}")
    return 0


cdef const RecHeader *_replicated_header(CommitLog self, const char *p, Py_ssize_t off,
                                         Py_ssize_t n, const RepPlan *plan) except NULL:
    """The header at byte `off` of the range, checked before its record is placed: it is
    whole, replicable, sized to fit, and continues the raft index and term."""
    cdef const RecHeader *h
    if n - off < HDR:
        raise ReplicationError(f"truncated record header at byte {off} of the range")
    h = <const RecHeader *>(p + off)
    if h.magic != MAGIC or h.version != VERSION:
        raise ReplicationError(f"bad magic/version at byte {off} of the range")
    if h.type < T_MESSAGE or h.type > T_META:
        raise ReplicationError(f"record type {h.type} at byte {off} cannot be replicated")
    if h.total_size < HDR or h.total_size > n - off:
        raise ReplicationError(f"bad total_size {h.total_size} at byte {off}")
    if <int64_t>h.total_size + HDR > self.segment_size_bytes:
        raise ReplicationError(f"record of {h.total_size} bytes does not fit a segment")
    if h.raft_index != <uint64_t>plan.expect:
        raise ReplicationError(
            f"raft index {h.raft_index} at byte {off}; expected {plan.expect}")
    if h.raft_term < <uint64_t>plan.term:
        raise ReplicationError(
            f"term {h.raft_term} of index {plan.expect} is below the previous term {plan.term}")
    return h


cdef int _check_replicated_record(CommitLog self, const char *p, Py_ssize_t off,
                                  int64_t pos, int64_t index, bint check_crc) except -1:
    """The record at byte `off`, landing at `pos`: its position field, lengths, the format
    limits an append enforces (a follower never stores what its own append would refuse,
    or what readers cannot decode) and, with check_crc, its CRC."""
    cdef const RecHeader *h = <const RecHeader *>(p + off)
    cdef int rc
    if h.position != <uint64_t>pos:
        raise ReplicationError(
            f"index {index} carries position {h.position}; it lands at {pos}")
    rc = verify_record(p + off, h.total_size, pos, False)
    if rc != V_OK:
        raise ReplicationError(f"index {index}: {_VERIFY_REASONS.get(rc, rc)}")
    fault = _replicated_fault(p + off, self.max_message_bytes)
    if fault is not None:
        raise ReplicationError(f"index {index} at byte {off}: {fault}")
    if check_crc and ql_crc32c(p + off + 4, h.total_size - 4) != h.crc:
        raise ReplicationError(f"CRC mismatch in index {index} at byte {off}")
    return 0


cdef int _write_replicated(CommitLog self, const char *p, Py_ssize_t n, int64_t first_index,
                           list new_segs, list runs, list blanks) except -1:
    """Write the planned BLANKs, the runs (pwrite from the received buffer: no page of
    the segment needs zeroing first), and the raft-index entries."""
    cdef int64_t S = self.segment_size_bytes, bp, r_src, r_dst, r_len, i
    cdef Py_ssize_t off
    cdef const RecHeader *h
    cdef Mapping m
    cdef bint release_gil = n >= NOGIL_BYTES
    cdef char blank[HDR]
    cdef int fd, err = 0
    for bpos in blanks:
        bp = bpos
        m = _new_seg_at(self, new_segs, bp)
        write_blank(blank, <uint64_t>bp, <uint32_t>(m.start + S - bp))
        err = ql_pwrite_all(write_fd(m), blank, HDR, bp - m.start)
        if err:
            _fail_replicated(self, m, new_segs, err)
        zero_stale_tail(self, m, bp)
        self.n_blank += 1
    for r in runs:
        r_src, r_dst, r_len = r
        m = _new_seg_at(self, new_segs, r_dst)
        fd = write_fd(m)
        if release_gil:
            with nogil:
                err = ql_pwrite_all(fd, p + r_src, r_len, r_dst - m.start)
        else:
            err = ql_pwrite_all(fd, p + r_src, r_len, r_dst - m.start)
        if err:
            _fail_replicated(self, m, new_segs, err)
    off = 0
    i = first_index
    while off < n:
        h = <const RecHeader *>(p + off)
        write_index(_entry(self, i, True), h.position, h.raft_term, h.total_size, h.type)
        off += h.total_size
        i += 1
    return 0


cdef int _fail_replicated(CommitLog self, Mapping m, list new_segs, int err) except -1:
    # A write error (not lack of space: every block is fallocated). Nothing of the range
    # is published; what reached the files lies past the end (a torn tail at recovery).
    for mm in new_segs:
        try:
            os.unlink((<Mapping>mm).path)
        except OSError:
            pass
    _fail(self, f"writing {m.path}", err)
