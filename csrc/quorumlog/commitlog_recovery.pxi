# Included by _commitlog.pyx: recovery at open -- check the segment and raft-index files,
# scan from the checkpoint's verified anchor checking every record's CRC, refuse damage with
# intact data after it (mid-log corruption names file and offset), cut a torn tail, make the
# raft index agree with the log, and restore the durable positions.

# The page size write-back works in (the smallest of the platforms the store runs on; a
# larger page is a run of these).
cdef enum:
    LOST_PAGE = 4096

# What the scan of the log at open found.
cdef struct Scan:
    int64_t min_pos          # start of the first segment
    int64_t start            # where the scan began: the checkpoint's anchor, or min_pos
    int64_t idx              # next raft index expected (-1: take the first record's)
    int64_t term             # term of the last intact record
    int64_t stop_pos         # end of the last intact record: the end of the log
    int64_t first_index      # first raft index scanned (0: none)
    int64_t last_index       # last raft index of the log (0: none)
    int stop_rc              # why the scan stopped (V_OK: clean end)


cdef str page_cache_identity(str path):
    """Which page cache holds the store's unflushed writes: the boot, and the store
    directory's device and inode. A process that dies (kill -9) leaves its writes in the page
    cache, which the next opener then reads: the same identity. After a power cut (a new
    boot), or when the store is a copy of a device's contents (another device or inode),
    writes that were never flushed may be lost, and write-back may have reached a later page
    but not an earlier one."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as fh:
            boot = fh.read().decode("ascii", "replace").strip()
    except OSError:
        boot = ""
    st = os.stat(path)
    return f"boot={boot} dev={st.st_dev} ino={st.st_ino}\n" if boot else ""


cdef recover(CommitLog self):
    cdef Scan r
    abort_path = os.path.join(self.path, "abort")
    self.unclean_open = os.path.exists(abort_path)
    identity = page_cache_identity(self.path)
    try:
        if self.unclean_open:
            with open(abort_path, "rb") as fh:
                previous = fh.read(4096).decode("ascii", "replace")
            # the flush mode of the run that wrote the marker (None: an older marker)
            self.previous_flush_mode = _marker_flush_mode(previous)
            previous = previous.replace(FLUSH_MARK % self.previous_flush_mode, "", 1) \
                if self.previous_flush_mode else previous
            # unknown (an older marker, or no boot id here): treat as a possible power cut;
            # a marker with the lost-writes mark (an open that saw lost writes, not settled
            # before a kill: LOST_MARK) differs from every identity
            self._lost_writeback = not identity or previous != identity
        else:
            self._lost_writeback = False
        if not self.read_only and not self.unclean_open:
            with open(abort_path, "wb"):
                pass
    except OSError as exc:
        raise StorageError(f"{abort_path}: cannot be the store's abort marker: "
                           f"{exc.strerror or exc}", abort_path, exc.errno) from None
    cp = read_checkpoint(self)
    starts = _segment_starts(self, cp)
    self._first_seg = starts[0] // self.segment_size_bytes
    for s in starts:
        # a short file past the durable point (cut by a crash of a file tool) is
        # re-extended; its missing bytes read as zero, i.e. a torn tail
        _install_recovered(self, map_existing(self, os.path.join(self._segdir, numbered_name(s)),
                                              self.segment_size_bytes, s, True, "segment"))
    _map_index_files(self)
    memset(&r, 0, sizeof(Scan))
    _scan_start(self, cp, &r)
    _scan_records(self, &r)
    _refuse_cutting_durable(self, cp, &r)
    _refuse_damage_before_intact(self, cp, &r)
    _cut_tail(self, &r)
    _set_first_index(self, &r)
    self._end = r.stop_pos
    self._next_index = r.last_index + 1 if r.last_index > 0 else r.first_index
    self._last_term = r.term
    _rewrite_index(self, r.start, r.stop_pos)
    _restore_durable_state(self, cp, &r)
    # Recovery's own writes are durable now; from here on unflushed writes of this log live
    # in this page cache (a failed or killed recovery leaves the previous marker, so the next
    # open decides as this one did).
    if not self.read_only:
        # lost writes stay marked until the owner settles them (settle_lost_writes)
        self._lost_mark = self._lost_writeback
        _write_marker(abort_path, marker_content(self, identity, self._lost_mark))
        _fsync_dir(self.path)
        # the files recovery found (or made) have durable names from here on; later ones
        # are synced by the flush that first covers them
        for d in (self._segdir, self._idxdir):
            if os.path.isdir(d):
                _fsync_dir(d)
        load_pool(self)
    self._dir_synced_seg = (<Mapping>self._segs[len(self._segs) - 1]).start // \
        self.segment_size_bytes
    self._dir_synced_idxf = self._first_idxf + len(self._idx) - 1


# The abort marker's second line while an open's possibly lost writes are not settled.
LOST_MARK = "lost-writes\n"
# The abort marker's line naming this run's flush mode: whether a replica acknowledged
# writes before flushing them is the mode of the run that wrote them, not of the next open's
# (a replica restarted in sync mode after an async run's power loss must still recover).
FLUSH_MARK = "flush=%s\n"


cdef str marker_content(CommitLog self, str identity, bint lost):
    return identity + FLUSH_MARK % self.flush_mode + (LOST_MARK if lost else "")


cdef object _marker_flush_mode(str marker):
    for line in marker.splitlines():
        if line.startswith("flush=") and line[6:] in ("sync", "async"):
            return line[6:]
    return None


cdef _write_marker(str path, str content):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, content.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


cdef _install_recovered(CommitLog self, Mapping m):
    self._segs.append(m)
    self._views.append(memoryview(m))


cdef list list_numbered(str d, bint remove_tmp=True):
    """The numbers of the 20-digit files in d, sorted; leftover *.tmp files are removed
    (unless `remove_tmp` is false: a read-only log). A 20-digit name that is not a regular
    file is StorageError naming it (it cannot be mapped; `quorumlog repair` moves it
    aside)."""
    out = []
    if not remove_tmp and not os.path.isdir(d):
        return out
    for name in os.listdir(d):
        f = os.path.join(d, name)
        if is_numbered_name(name):
            if not os.path.isfile(f) or os.path.islink(f):
                raise StorageError(f"{f}: named like a log file but not a regular file", f,
                                   _errno.EISDIR if os.path.isdir(f) else None)
            out.append(int(name))
        elif name.endswith(".tmp") and remove_tmp and os.path.isfile(f):
            os.unlink(f)
    out.sort()
    return out


cdef _check_numbered(str d, list starts, int64_t step, int64_t first, str what, str unit):
    """The files of d (their numbers in `starts`, sorted) each cover `step` positions or
    raft indexes from `first` on: aligned to that, and no gap between them."""
    for s in starts:
        if (s - first) % step:
            raise CorruptLogError(f"{what} {s} is not aligned to {unit} {step}",
                                  os.path.join(d, numbered_name(s)), 0)
    for a, b in zip(starts, starts[1:]):
        if b != a + step:
            miss = os.path.join(d, numbered_name(a + step))
            raise CorruptLogError(f"{miss}: missing: {what}s are not contiguous ({a} then "
                                  f"{b})", miss, 0)


cdef list _segment_starts(CommitLog self, cp):
    """Start positions of the segment files: aligned, contiguous, and holding every byte
    the checkpoint says is durable. No file: the checkpoint's min position."""
    cdef int64_t S = self.segment_size_bytes
    starts = list_numbered(self._segdir, not self.read_only)
    _check_numbered(self._segdir, starts, S, 0, "segment file", "segment_size_bytes")
    if cp and starts and starts[0] < cp["min_position"] and starts[len(starts) - 1] >= \
            cp["min_position"]:
        # retention writes its checkpoint before it unlinks: finish what a crash cut short
        # (a read-only log only leaves those segments out)
        while starts[0] < cp["min_position"]:
            f = os.path.join(self._segdir, numbered_name(starts[0]))
            if not self.read_only:
                log.warning("%s: removing %s, below the checkpoint's min position %d "
                            "(retention was interrupted)", self.path, f, cp["min_position"])
                os.unlink(f)
            starts.pop(0)
        if not self.read_only:
            _fsync_dir(self._segdir)
    if not starts:
        start = cp["min_position"] if cp else 0
        if start % S:
            raise CorruptLogError("checkpoint min_position not segment-aligned",
                                  os.path.join(self.path, "checkpoint"), 48)
        starts = [start]
    if cp:
        _check_durable_segments(self, cp, starts)
    return starts


cdef _check_durable_segments(CommitLog self, dict cp, list starts):
    # Durable bytes (before the checkpoint's flushed position) must all be there: a
    # missing or short segment below it is lost data, not a torn tail.
    cdef int64_t S = self.segment_size_bytes
    fp = cp["flushed_position"]
    if fp <= cp["min_position"]:
        return
    if starts[0] > cp["min_position"] and starts[0] < fp:
        miss = os.path.join(self._segdir, numbered_name(cp["min_position"]))
        raise CorruptLogError(f"{miss}: segment holding durable data is missing", miss, 0)
    need_last = ((fp - 1) // S) * S
    if starts[len(starts) - 1] < need_last:
        miss = os.path.join(self._segdir, numbered_name(starts[len(starts) - 1] + S))
        raise CorruptLogError(f"{miss}: segment holding durable data is missing", miss, 0)
    for s0 in starts:
        if s0 < fp:
            f = os.path.join(self._segdir, numbered_name(s0))
            sz = os.path.getsize(f)
            if sz < S and s0 + sz < fp:
                raise CorruptLogError(
                    f"{f}: segment is {sz} bytes, shorter than {S}, and held "
                    f"durable data", f, sz)


cdef _map_index_files(CommitLog self):
    cdef int64_t N = self.index_file_entries
    idx_starts = list_numbered(self._idxdir, not self.read_only)
    _check_numbered(self._idxdir, idx_starts, N, 1, "raft index file", "index_file_entries")
    if idx_starts:
        self._first_idxf = (idx_starts[0] - 1) // N
        for a in idx_starts:
            self._idx.append(map_existing(self, os.path.join(self._idxdir, numbered_name(a)),
                                          N * IDX_ENTRY, a, False, "raft index file"))


cdef bint _intact_entry(CommitLog self, const IdxEntry *e, int64_t index) noexcept:
    """The record raft-index entry e names is in the log, intact, and carries `index`."""
    cdef int64_t S = self.segment_size_bytes
    cdef Mapping m = _seg(self, <int64_t>e.position // S)
    cdef const char *p
    if m is None:
        return False
    p = m.addr + (e.position - m.start)
    return (verify_record(p, m.start + S - e.position, e.position, True) == V_OK and
            (<const RecHeader *>p).raft_index == <uint64_t>index)


cdef _scan_start(CommitLog self, cp, Scan *r):
    # where the scan starts: the checkpoint's flushed position when its anchor record
    # (the last one before it) checks out; else the first segment
    cdef char *ep
    cdef const IdxEntry *e
    r.min_pos = self._first_seg * self.segment_size_bytes
    r.start = r.min_pos
    r.idx = -1
    r.term = 0
    if cp and cp["flushed_position"] > r.min_pos and cp["flushed_index"] > 0:
        fi = cp["flushed_index"]
        ep = _entry(self, fi, False)
        if ep != NULL:
            e = <const IdxEntry *>ep
            if e.position + e.size == cp["flushed_position"] and _intact_entry(self, e, fi):
                r.start = cp["flushed_position"]
                r.idx = fi + 1
                r.term = e.term
    elif cp and cp["flushed_position"] == r.min_pos and cp["flushed_index"] > 0:
        r.idx = cp["flushed_index"] + 1   # empty after retention + truncation


cdef _scan_records(CommitLog self, Scan *r):
    # pass 1: verify only (nothing changes until the corruption checks pass)
    cdef int64_t S = self.segment_size_bytes, pos = r.start, k
    cdef int rc
    cdef Mapping m
    cdef const RecHeader *h
    r.stop_pos = r.start
    r.last_index = r.idx - 1 if r.idx > 0 else 0
    r.first_index = 0
    r.stop_rc = V_OK
    while True:
        k = pos // S
        m = _seg(self, k)
        if m is None:
            break
        rc = verify_record(m.addr + (pos - m.start), m.start + S - pos, pos, True)
        if rc != V_OK:
            r.stop_rc = rc
            break
        h = <const RecHeader *>(m.addr + (pos - m.start))
        if h.type == T_BLANK:
            pos = m.start + S    # counts only once a record follows it
            continue
        if (r.idx > 0 and h.raft_index != <uint64_t>r.idx) or h.raft_term < <uint64_t>r.term:
            r.stop_rc = V_LENGTHS
            break
        if r.first_index == 0:
            r.first_index = h.raft_index
        r.idx = h.raft_index + 1
        r.term = h.raft_term
        r.last_index = h.raft_index
        pos += h.total_size
        r.stop_pos = pos


cdef _refuse_cutting_durable(CommitLog self, cp, const Scan *r):
    # Records before the checkpoint's flushed position were durable: the scan (which starts
    # before it when the anchor record does not verify) must reach it. Stopping short is
    # damage to durable data, never a torn tail: an error naming file and offset, and an
    # explicit repair (`quorumlog repair`), not a silent cut.
    cdef int64_t S = self.segment_size_bytes
    if cp is None or r.stop_pos >= cp["flushed_position"]:
        return
    m = _seg(self, r.stop_pos // S)
    path = m.path if m is not None else _seg_path(self, r.stop_pos // S)
    off = r.stop_pos - (r.stop_pos // S) * S
    raise CorruptLogError(
        f"{path} offset {off}: damaged record "
        f"({_VERIFY_REASONS.get(r.stop_rc, 'bad record') if r.stop_rc else 'no record'}) "
        f"before position {cp['flushed_position']}, which the checkpoint says is durable: "
        f"durable records are never cut at open; `quorumlog repair {self.path}` cuts the "
        f"log there, keeping what it removes", path, off)


cdef _refuse_damage_before_intact(CommitLog self, cp, const Scan *r):
    # An intact record beyond the stop point means damage in the middle: refused, unless
    # the damage lies after the checkpoint's flushed position on an unclean open and can
    # come from lost write-back (write-back may reach a later page and not an earlier one):
    # either the page cache is another one (see page_cache_identity), or the damage has
    # the shape lost write-back leaves -- a page reading zeros from its start (or from the
    # stop point) to its end. The identity alone cannot tell a device remounted in the
    # same boot (or a restored snapshot) from a killed process; a flipped bit has no such
    # page and stays refused. Intact records after a torn tail are cut with it (counted in
    # the warning). Damage before the flushed position never gets here (refused above).
    cdef int64_t i = r.last_index + 1, j, dropped = 0, first_pos = -1
    cdef char *ep
    cdef const IdxEntry *e
    cdef Mapping m
    cdef bint after_durable = (cp is not None and self.unclean_open
                               and r.stop_pos >= cp["flushed_position"])
    why = None
    while True:
        ep = _entry(self, i, False)
        if ep == NULL:
            break
        e = <const IdxEntry *>ep
        if e.size == 0:
            break
        if e.position >= <uint64_t>r.stop_pos and _intact_entry(self, e, i):
            if why is None:
                why = f"raft index {i} at position {e.position} is intact"
                first_pos = e.position
            dropped += 1
        i += 1
    for j in range(r.stop_pos // self.segment_size_bytes + 1 - self._first_seg, len(self._segs)):
        m = <Mapping>self._segs[j]
        if verify_record(m.addr, self.segment_size_bytes, m.start, True) == V_OK:
            if why is None or m.start < first_pos:
                why = f"segment {m.path} starts with an intact record"
                first_pos = m.start
            dropped += 1
    if not dropped:
        return
    if not (after_durable and (self._lost_writeback
                               or _lost_page_between(self, r.stop_pos,
                                                     _damaged_end(self, r.stop_pos, first_pos)))):
        raise_stop(self, r.stop_pos, r.stop_rc, why)
    # write-back was lost, whatever the identity said: unflushed writes are gone (the
    # replica's Raft recovery asks lost_writes_possible before it votes or stands)
    self._lost_writeback = True
    log.warning("%s: the log's writes after position %d were never flushed and may have "
                "been lost to a power cut: damage at position %d is a torn tail; %d "
                "intact record(s) after it (raft-index entries or segment starts) are "
                "dropped with it", self.path, cp["flushed_position"], r.stop_pos, dropped)


cdef int64_t _damaged_end(CommitLog self, int64_t pos, int64_t hi):
    """Where the damaged record at pos ends when its header still names a size that fits
    (the lost page is one of its pages: not the zeros of a BLANK after it), else hi."""
    cdef int64_t S = self.segment_size_bytes
    cdef Mapping m = _seg(self, pos // S)
    cdef const RecHeader *h
    if m is None or m.start + S - pos < HDR:
        return hi
    h = <const RecHeader *>(m.addr + (pos - m.start))
    if h.magic == MAGIC and HDR <= h.total_size <= <uint64_t>(m.start + S - pos):
        return min(hi, pos + <int64_t>h.total_size)
    return hi


cdef bint _lost_page_between(CommitLog self, int64_t lo, int64_t hi):
    """A page of [lo, hi) reads zeros from its start (or from lo) to its end: what a page
    whose write-back was lost holds (never written: zeros; written back earlier: the log's
    end then, a record boundary, followed by zeros)."""
    cdef int64_t S = self.segment_size_bytes, p = lo, pend, a
    cdef Mapping m
    cdef const unsigned char *b
    cdef bint zero
    while p < hi:
        pend = (p // LOST_PAGE + 1) * LOST_PAGE
        m = _seg(self, p // S)
        if m is not None:
            b = <const unsigned char *>m.addr
            zero = True
            for a in range(p - m.start, pend - m.start):
                if b[a]:
                    zero = False
                    break
            if zero:
                return True
        p = pend
    return False


cdef _cut_tail(CommitLog self, const Scan *r):
    # pass 2: the tail is torn (or clean): zero it, drop later segments
    cdef int64_t S = self.segment_size_bytes, k = r.stop_pos // S, stop = r.stop_pos
    cdef Mapping m = _seg(self, k), mm
    cdef int err
    if m is None:        # stop exactly at a segment start that has no file
        if self.read_only:
            m = map_file_private(_seg_path(self, k), S, k * S, "segment")   # zeros
        else:
            m = map_file(_seg_path(self, k), S, k * S, True, True, "segment")
        _install_recovered(self, m)
    if self.read_only:
        # Nothing is cut on disk: the log just ends at `stop` (reads never pass the end).
        while len(self._segs) > k - self._first_seg + 1:
            self._segs.pop()
            self._views.pop()
        self._cur = <Mapping>self._segs[len(self._segs) - 1]
        self._cur_start = self._cur.start
        return
    tail_dirty = self.unclean_open or any(
        (<const unsigned char *>(m.addr + (stop - m.start)))[x] != 0
        for x in range(min(HDR, m.start + S - stop)))
    if tail_dirty:
        bpath = os.fsencode(m.path)
        err = ql_zero_range(bpath, m.addr, stop - m.start, m.start + S - stop)
        if err == 0:
            err = ql_msync(m.addr, stop - m.start, m.start + S - stop)
        if err:
            raise StorageError(f"{m.path}: zeroing the torn tail from offset {stop - m.start} "
                               f"failed: {os.strerror(err)}", m.path, err)
        if self.unclean_open:
            log.warning("%s: unclean open; log ends at position %d (index %d)", self.path,
                        stop, r.last_index)
        else:   # old records past the end of a reused segment file (commitlog_recycle.pxi)
            log.info("%s: clean open; bytes after the end (position %d, index %d) zeroed",
                     self.path, stop, r.last_index)
    while len(self._segs) > k - self._first_seg + 1:
        mm = <Mapping>self._segs.pop()
        self._views.pop()
        os.unlink(mm.path)
    self._cur = <Mapping>self._segs[len(self._segs) - 1]
    self._cur_start = self._cur.start


cdef _set_first_index(CommitLog self, Scan *r):
    cdef Mapping m = <Mapping>self._segs[0]
    if r.first_index == 0:
        # nothing scanned: the first record of the log (if any) names first_index
        if r.stop_pos > r.min_pos and verify_record(m.addr, self.segment_size_bytes,
                                                    m.start, False) == V_OK:
            r.first_index = (<const RecHeader *>m.addr).raft_index
        elif r.last_index > 0:
            r.first_index = r.last_index + 1 if r.stop_pos == r.min_pos else 1
        else:
            r.first_index = 1
    if r.start > r.min_pos:
        if verify_record(m.addr, self.segment_size_bytes, m.start, False) == V_OK:
            r.first_index = (<const RecHeader *>m.addr).raft_index
    self._first_index = r.first_index


cdef _rewrite_index(CommitLog self, int64_t start, int64_t stop_pos):
    # index entries of the scanned records, rewritten where they disagree
    cdef int64_t S = self.segment_size_bytes, pos = start, i
    cdef Mapping m
    cdef const RecHeader *h
    cdef char *ep
    cdef const IdxEntry *e
    while pos < stop_pos:
        m = _seg(self, pos // S)
        h = <const RecHeader *>(m.addr + (pos - m.start))
        if h.type == T_BLANK:
            pos = m.start + S
            continue
        ep = _entry(self, h.raft_index, not self.read_only)
        if ep == NULL:       # read-only and the entry's file is missing: nothing to fix
            pos += h.total_size
            continue
        e = <const IdxEntry *>ep
        if (e.position != <uint64_t>pos or e.term != h.raft_term or e.size != h.total_size
                or e.type != h.type or e.pad0 or e.pad1 or e.pad2):
            write_index(ep, pos, h.raft_term, h.total_size, h.type)
        pos += h.total_size
    _zero_index_after(self, self._next_index)
    if self._next_index >= 1 and not self.read_only:
        _entry(self, self._next_index, True)


cdef _zero_index_after(CommitLog self, int64_t first):
    # Entries from `first` on (beyond the last record) are zeroed to the end of every index
    # file held, not only up to the first zero entry: a page of entries whose write-back
    # was lost reads zeros while a later page of stale entries was written, and those
    # would be taken for records past the end at the next open once appends reach them.
    cdef int64_t N = self.index_file_entries, lo, off, n, x
    cdef Mapping m
    cdef unsigned char *b
    for m in self._idx:
        lo = max(first, m.start)
        if lo >= m.start + N:
            continue
        b = <unsigned char *>m.addr
        off = (lo - m.start) * IDX_ENTRY
        n = (m.start + N - lo) * IDX_ENTRY
        for x in range(off, off + n):
            if b[x]:
                # only from the first stale byte: zeroing writes (dirties) the pages
                memset(b + x, 0, off + n - x)
                break


cdef _restore_durable_state(CommitLog self, cp, const Scan *r):
    # flushed, committed and dispatched positions after recovery, then a checkpoint
    cdef const IdxEntry *e
    self._flushed_pos = r.start
    if r.start > r.min_pos:
        self._flushed_index = cp["flushed_index"]   # the verified anchor
    else:
        self._flushed_index = (0 if r.idx <= 0 or cp is None
                               else min(cp["flushed_index"], r.last_index))
    if cp:
        self._committed_index = min(cp["committed_index"], r.last_index)
        if self._committed_index >= self._first_index and self._committed_index > 0:
            e = <const IdxEntry *>_entry(self, self._committed_index, False)
            self._committed_pos = e.position + e.size
        else:
            if self._committed_index < self._first_index:
                self._committed_index = 0
            self._committed_pos = r.min_pos
        self._dispatched = min(cp["dispatched_position"], r.stop_pos)
    else:
        self._committed_pos = r.min_pos
        self._dispatched = r.min_pos
    self._flush_lock = threading.Condition(threading.Lock())
    self._idx_synced = 0        # entries were rewritten above: the checkpoint syncs them
    self._flushed_pos = min(self._flushed_pos, r.stop_pos)
    if self.read_only:
        self._flushed_index = min(self._flushed_index, r.last_index)
        _note_last_store(self)
        return
    if self._flushed_pos < r.stop_pos or self._flushed_index < r.last_index:
        self._flushed_index = min(self._flushed_index, r.last_index)
        flush_log(self)
    write_checkpoint(self, False)
    _note_last_store(self)


cdef raise_stop(CommitLog self, int64_t stop_pos, int rc, str why):
    cdef int64_t S = self.segment_size_bytes
    m = _seg(self, stop_pos // S)
    path = m.path if m is not None else _seg_path(self, stop_pos // S)
    off = stop_pos - (stop_pos // S) * S
    raise CorruptLogError(
        f"{path} offset {off}: damaged record ({_VERIFY_REASONS.get(rc, 'bad record')}) "
        f"with intact data after it: {why}", path, off)
