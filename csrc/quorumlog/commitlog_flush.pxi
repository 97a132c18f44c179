# Included by _commitlog.pyx: durability -- flush (msync of the appended range, GIL
# released), group commit (wait_flushed: one flush covers every waiter), the background
# flusher thread (async mode), and the commit index.

cdef int64_t flush_log(CommitLog self) except -1:
    """msync everything appended so far; returns the flushed position. Flushes may overlap
    (FLUSHES_IN_FLIGHT threads of the node's Flusher): each one msyncs from where the
    flushes in flight end to the end it saw (the whole unflushed range when none is in
    flight), so it does not wait on pages another msync is writing back. Results are
    published in start order (_flush_publish), so a flush's success counts only together
    with every earlier one's: it never reports past an earlier one that failed -- Linux
    reports a write-back error to one msync only, so a concurrent one may return 0 over
    lost pages.
    _flush_lock (a Condition) guards the snapshot and the publication; truncation,
    checkpoints and close take it exclusively (_flush_exclusive), which waits for the
    flushes in flight and holds new ones back."""
    cdef int64_t target, tindex, lo, S = self.segment_size_bytes, a, b, k, seq
    cdef Mapping m
    cdef int err = 0
    with self._flush_lock:
        while self._flush_excl:
            self._flush_lock.wait()
        if self._failed is not None:
            _raise_failed(self)
        # a consistent snapshot: both values change together under the GIL
        target = self._end
        tindex = self._next_index - 1
        lo = self._flushed_pos
        if target <= lo and tindex <= self._flushed_index:
            return self._flushed_pos
        if self._flushes_running and self._flush_started_to > lo:
            # the flushes in flight cover up to there and publish first: only the rest
            # (none runs across a truncation: it waits for them, so that end is current)
            lo = min(self._flush_started_to, target)
            if target > self._flush_started_to:
                self._flush_started_to = target
        else:
            self._flush_started_to = target
        segs = [_seg(self, k) for k in range(lo // S, (max(target, lo + 1) - 1) // S + 1)]
        seq = self._flush_seq
        self._flush_seq += 1
        self._flushes_running += 1
    t0 = time.monotonic_ns()
    ok = False
    try:
        for m in segs:
            if m is None:
                continue
            a = max(lo, m.start)
            b = min(target, m.start + S)
            if b > a:
                # msync of the appended range, not fdatasync of the file: for a
                # MAP_SHARED file both end in the same range writeback + journal
                # commit + device flush on Linux (measured equal, ~3.5 ms here), but
                # fdatasync would also write the zero pages the preparer has faulted
                # in ahead of the end.
                with nogil:
                    err = ql_msync(m.addr, a - m.start, b - a)
                if err:
                    _fail(self, f"msync of {m.path}", err)
        # A segment file created since the last flush (by the preparer or a rollover) has
        # a directory entry that no msync covers: without an fsync of the directory a power
        # cut can lose the whole file (ext4 without a journal, issue 21 item 8), and with it
        # acknowledged records. Once per new segment, before anything in it counts as flushed.
        k = (max(target, lo + 1) - 1) // S
        if k > self._dir_synced_seg:
            _sync_dir_or_fail(self, self._segdir)
            if k > self._dir_synced_seg:
                self._dir_synced_seg = k
        # The raft-index entries are not synced here: recovery rewrites the entries of
        # every record after the checkpoint's flushed position from the log itself, so
        # they only need to be durable up to the checkpoint's flushed_index, which
        # write_checkpoint ensures. One device flush per group commit instead of two
        # (each costs a journal commit) doubles the flushes per second.
        ok = True
    finally:
        _flush_publish(self, seq, ok, target, tindex, time.monotonic_ns() - t0)
    return self._flushed_pos


cdef int _flush_publish(CommitLog self, int64_t seq, bint ok, int64_t target, int64_t tindex,
                        int64_t ns) except -1:
    """Flush `seq` ended (ok: its msyncs returned 0): once every earlier flush has ended too,
    raise the flushed position to `target` -- unless the log failed meanwhile (an earlier
    flush's error: this one's 0 may hide it) -- and let truncation and close go on."""
    cdef bint published = False
    with self._flush_lock:
        self._flush_ended.add(seq)
        while self._flush_oldest in self._flush_ended:
            self._flush_ended.discard(self._flush_oldest)
            self._flush_oldest += 1
        self._flush_lock.notify_all()
        while self._flush_oldest <= seq:
            self._flush_lock.wait()
        try:
            if ok:
                if self._failed is not None:
                    _raise_failed(self)
                self.n_flushes += 1
                _note_flush_latency(self, ns)
                with self._cv:
                    if target > self._flushed_pos:
                        self._flushed_pos = target
                        self._flushed_index = tindex
                    self._cv.notify_all()
        finally:
            self._flushes_running -= 1
            self._flush_lock.notify_all()
    return 0


cdef int _flush_exclusive(CommitLog self) except -1:
    """Take _flush_lock with no flush in flight (truncation, checkpoints, close): new flushes
    wait until _flush_exclusive_end."""
    self._flush_lock.acquire()
    self._flush_excl += 1
    while self._flushes_running:
        self._flush_lock.wait()
    return 0


cdef int _flush_exclusive_end(CommitLog self) except -1:
    self._flush_excl -= 1
    self._flush_lock.notify_all()
    self._flush_lock.release()
    return 0


# Upper bounds (ns) of the flush-latency histogram in stats() (a metrics exporter's buckets).
FLUSH_LATENCY_BUCKETS_NS = (100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
                            10_000_000, 25_000_000, 50_000_000, 100_000_000, 250_000_000,
                            1_000_000_000)


cdef _note_flush_latency(CommitLog self, int64_t ns):
    """One flush's duration into the histogram (per-bucket counts, the last one +Inf)."""
    cdef Py_ssize_t i = 0
    for bound in FLUSH_LATENCY_BUCKETS_NS:
        if ns <= bound:
            break
        i += 1
    self._flush_hist[i] += 1
    self._flush_ns_total += ns


cdef bint wait_flushed_to(CommitLog self, int64_t position, timeout) except -1:
    cdef double deadline
    if self._flushed_pos >= position:
        return True
    _check_writable(self)
    if position > self._end:
        raise InvalidArgumentError(
            f"wait_flushed({position}) is beyond end_position {self._end}")
    deadline = time.monotonic() + (timeout if timeout is not None else 1e18)
    with self._cv:
        if position > self._flush_request:
            self._flush_request = position
            self._cv.notify_all()
        while self._flushed_pos < position:
            if self._failed is not None:
                _raise_failed(self)
            if self._closed or self._stopping:
                return self._flushed_pos >= position
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._cv.wait(min(remaining, 1.0))
    return True


cdef flush_loop(CommitLog self):
    # Flush when a waiter asks (group commit: everything appended so far goes in one
    # msync) or when flush_interval_ms has passed with unflushed data. A log that stayed
    # clean for a whole interval parks the thread until an append (_advance_end ->
    # _unpark_flusher) or a waiter wakes it: an idle log costs no wake-ups (64 idle groups
    # of a process woke their flushers 320 times a second), and an append after the pause
    # is flushed within flush_interval_ms of it, as before.
    interval = self.flush_interval_ms / 1000.0
    while True:
        deadline = time.monotonic() + interval
        with self._cv:
            while not self._stopping and self._flush_request <= self._flushed_pos:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if self._end > self._flushed_pos:
                        break
                    # parked is set BEFORE _end is read again (both under the GIL, as
                    # _advance_end writes _end before it reads parked): one of the two
                    # sees the other's write, so an append is never left unflushed
                    self._flush_parked = True
                    if self._end > self._flushed_pos:
                        self._flush_parked = False
                        break
                    self._cv.wait()
                    self._flush_parked = False
                    self.n_flush_wakeups += 1
                    deadline = time.monotonic() + interval
                    continue
                self._cv.wait(remaining)
                self.n_flush_wakeups += 1
            if self._stopping:
                return
            if self._failed is not None:     # nothing more is flushed: wait for close
                self._cv.wait()
                continue
        try:
            flush_log(self)
            if self.checkpoint_interval_ms >= 0 and (
                    time.monotonic() - self._last_cp) * 1000 >= self.checkpoint_interval_ms:
                self.checkpoint()
        except LogFailedError:
            pass                 # logged by _fail; the loop now waits for close
        except Exception as e:   # keep flushing; report once per distinct error
            if repr(e) != repr(self._flush_error):
                log.error("background flush of %s failed: %s", self.path, e)
            self._flush_error = e
            with self._cv:
                self._cv.wait(interval)


cdef _unpark_flusher(CommitLog self):
    """An append to a log whose flusher is parked (write lock and GIL held): wake it, so
    the new records are flushed within flush_interval_ms (flush_loop)."""
    with self._cv:
        self._flush_parked = False
        self._cv.notify_all()


cdef int commit_to(CommitLog self, int64_t index) except -1:
    cdef const IdxEntry *e
    _check_open(self)
    if index > self._next_index - 1:
        raise IndexOutOfRangeError(f"commit {index} beyond last_index {self._next_index - 1}")
    if index <= self._committed_index:
        return 0
    e = _entry_checked(self, index)
    self._committed_pos = e.position + e.size
    self._committed_index = index
    return 0


cdef _sync_dir_or_fail(CommitLog self, str d):
    """fsync directory d; an error fails the log (a failed fsync is not retried into
    success)."""
    try:
        _fsync_dir(d)
    except OSError as exc:
        _fail(self, f"fsync of the directory {d}", exc.errno or _errno.EIO)


cdef _fsync_dir(str d):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
