# Included by _commitlog.pyx: segment recycling -- retention keeps up to `recycle_segments`
# of the files it frees (renamed to `<old start>.free` in commitlog/) and a new segment is one
# of them renamed into place instead of a new file fallocated: its blocks are allocated and
# its pages usually still cached, so writing it costs a copy, not a new page each (a
# fallocated extent's first write has the kernel allocate and zero-fill every page; issue
# 20, docs/benchmarks.md).
#
# Why stale bytes past the end can never read as records: a pool file only ever held
# segments wholly below the log's min position (retention frees nothing else; truncation
# and recovery unlink what they drop), so every record in it carries a position field below
# the min position, and every record the log will write lies at or after it. Every reader
# (recovery's scan, read/scan, append_replicated's neighbours, the Spark reader) checks a
# record's position field against where it lies, so a stale record fails as "position field
# mismatch": recovery stops at the true end and zeroes the tail (as for a torn tail). What
# must read as zero is zeroed: a BLANK's tail (format.md; replicas compare those bytes).


cdef str _pool_path(CommitLog self, int64_t old_start):
    return os.path.join(self._segdir, numbered_name(old_start) + ".free")


cdef load_pool(CommitLog self):
    """At open: adopt the pool files retention left, newest last; drop the ones beyond
    `recycle_segments` and any that could hold a record at or after the min position (a
    log replaced by an install that starts lower) or has the wrong size."""
    cdef int64_t S = self.segment_size_bytes, lo = self._first_seg * S
    found = []
    for name in os.listdir(self._segdir):
        if not name.endswith(".free") or not is_numbered_name(name[:-5]):
            continue
        f = os.path.join(self._segdir, name)
        old = int(name[:-5])
        if (os.path.isfile(f) and not os.path.islink(f) and old + S <= lo
                and os.path.getsize(f) == S):
            found.append(old)
        elif os.path.isfile(f):
            os.unlink(f)
    found.sort()
    while len(found) > self.recycle_segments:
        os.unlink(_pool_path(self, found.pop(0)))
    self._pool = found


cdef bint pool_segment(CommitLog self, Mapping m, bint exported):
    """Retention frees segment m (already below the checkpoint's min position): keep its
    file in the pool (a full pool gives up its oldest file: the newest freed pages are the
    likeliest to be cached) unless nothing may be kept or something outside the log still
    maps it (`exported`: a memoryview, slice or array of it is alive -- reusing the file
    would change bytes under it; a reader in another process, the Spark reader, reads by
    record, position and CRC checked, and sees a mismatch, never data); else unlink it.
    -> pooled."""
    cdef int64_t oldest = -1
    if self.recycle_segments == 0 or exported:
        os.unlink(m.path)
        return False
    with self._prep_cv:
        if len(self._pool) >= self.recycle_segments:
            oldest = self._pool.pop(0)
    if oldest >= 0:
        try:
            os.unlink(_pool_path(self, oldest))
        except OSError as e:        # (someone removed it: nothing to give back)
            log.debug("dropping pooled segment file %d failed: %s", oldest, e)
    os.rename(m.path, _pool_path(self, m.start))
    with self._prep_cv:
        self._pool.append(m.start)
        self.n_pooled += 1
    return True


cdef Mapping make_segment(CommitLog self, int64_t k):
    """The file of new segment k: a pool file renamed into place when there is one (the
    newest first: its pages are the likeliest to be cached), else a new one. Still
    fallocated (a no-op on an allocated file), so a full disk stays a DiskFullError before
    any byte is written and the mapping can never SIGBUS. A crash after the rename leaves a
    segment past the end holding stale records: recovery unlinks it (or zeroes it, when the
    log ends exactly at its start)."""
    cdef int64_t S = self.segment_size_bytes, old = -1
    cdef Mapping m
    path = _seg_path(self, k)
    with self._prep_cv:
        if self._pool:
            old = self._pool.pop()
    if old >= 0:
        try:
            os.rename(_pool_path(self, old), path)
        except OSError as e:
            log.debug("reusing segment file %d failed: %s", old, e)
            try:
                os.unlink(_pool_path(self, old))
            except OSError:
                pass
            old = -1
        crash_point("recycle:renamed")
    m = map_file(path, S, k * S, True, True, "segment")
    if old >= 0:
        m.recycled_from = old
        self.n_recycled += 1
    return m


cdef int zero_stale_tail(CommitLog self, Mapping m, int64_t blank_pos) except -1:
    """A BLANK was written at blank_pos in m: in a recycled file, make the bytes after its
    header read as zero, as format.md says a BLANK's tail does (a fresh file's do already).
    Replicas compare them; no reader relies on them."""
    cdef int64_t off = blank_pos - m.start + HDR
    cdef int err
    if m.recycled_from < 0 or off >= self.segment_size_bytes:
        return 0
    bpath = os.fsencode(m.path)
    err = ql_zero_range(bpath, m.addr, off, self.segment_size_bytes - off)
    if err:
        _fail(self, f"zeroing the BLANK tail of {m.path}", err)
    return 0
