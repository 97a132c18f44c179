# Included by _commitlog.pyx: the log's life -- configuration checks, the directory lock
# (LOCK, one opener), the write lock, the background threads, close and the kill -9 test hook.

cdef check_config(segment_size_bytes, index_file_entries, flush, flush_interval_ms,
                  checkpoint_interval_ms, max_message_bytes):
    for name, v in (("segment_size_bytes", segment_size_bytes),
                    ("index_file_entries", index_file_entries),
                    ("flush_interval_ms", flush_interval_ms),
                    ("checkpoint_interval_ms", checkpoint_interval_ms),
                    ("max_message_bytes", max_message_bytes)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ArgumentTypeError(f"{name} must be an int")
    if segment_size_bytes < 65536 or segment_size_bytes % 4096 or segment_size_bytes > (1 << 40):
        raise InvalidArgumentError(
            "segment_size_bytes must be a multiple of 4096 in [65536, 2**40]")
    if index_file_entries < 1 or index_file_entries > (1 << 30):
        raise InvalidArgumentError("index_file_entries must be in [1, 2**30]")
    if flush not in ("async", "sync"):
        raise InvalidArgumentError("flush must be 'async' or 'sync'")
    if flush_interval_ms < 1 or checkpoint_interval_ms < 0:
        raise InvalidArgumentError("flush_interval_ms >= 1 and checkpoint_interval_ms >= 0")
    if max_message_bytes < 0 or max_message_bytes > 0xFFFFFFFF - 2 * HDR:
        # the whole record must also fit a segment; that is checked per record
        raise InvalidArgumentError("max_message_bytes must be in [0, 2**32 - 192]")
    if segment_size_bytes > 0xFFFFFFFF:
        # total_size is a u32 and a BLANK spans the rest of a segment
        raise InvalidArgumentError("segment_size_bytes must be < 2**32")


# The most segment files a log keeps for reuse (each holds segment_size_bytes of disk).
MAX_RECYCLE_SEGMENTS = 64


cdef check_recycle(recycle_segments):
    if not isinstance(recycle_segments, int) or isinstance(recycle_segments, bool):
        raise ArgumentTypeError("recycle_segments must be an int")
    if not 0 <= recycle_segments <= MAX_RECYCLE_SEGMENTS:
        raise InvalidArgumentError(
            f"recycle_segments must be in [0, {MAX_RECYCLE_SEGMENTS}], got {recycle_segments}")


cdef inline int _check_open(CommitLog self) except -1:
    if self._closed:
        raise LogClosedError(f"commit log {self.path} is closed")
    return 0


cdef inline int _check_writable(CommitLog self) except -1:
    """Open, writable and not failed: a write may go ahead."""
    _check_open(self)
    if self.read_only:
        raise ReadOnlyError(f"commit log {self.path} was opened read-only")
    if self._gen != _fork_generation:
        raise ReadOnlyError(f"commit log {self.path} was opened before this process was "
                            "forked: the child may read it, only the process that opened "
                            "it may write (open the store in the child instead)")
    if self._failed is not None:
        _raise_failed(self)
    return 0


cdef int _raise_failed(CommitLog self) except -1:
    raise LogFailedError(f"commit log {self.path} refuses writes: {self._failed}; what was "
                         "appended since the last good flush may not be durable; close and "
                         "reopen the log (recovery keeps what reached the disk)", self.path)


cdef int _fail(CommitLog self, str what, int err) except -1:
    """A flush-side I/O error: from now on the log refuses writes and every waiter of a
    flush fails; raises LogFailedError. Never retried: the kernel reports a write-back error
    once and a retry would return 0 without the data on the device."""
    if self._failed is None:
        self._failed = f"{what} failed: {os.strerror(err)} (errno {err})"
        log.error("commit log %s failed: %s", self.path, self._failed)
    with self._cv:
        self._cv.notify_all()
    raise LogFailedError(f"commit log {self.path}: {what} failed: {os.strerror(err)}; the "
                         "log refuses writes until reopened", self.path, err)


cdef inline void _acquire(CommitLog self) noexcept:
    if not PyThread_acquire_lock(self._wlock, NOWAIT_LOCK):
        with nogil:
            PyThread_acquire_lock(self._wlock, WAIT_LOCK)


cdef inline void _release(CommitLog self) noexcept:
    PyThread_release_lock(self._wlock)


cdef take_lock(CommitLog self):
    lock = os.path.join(self.path, "LOCK")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StorageError(f"{lock}: cannot be the store's lock file: {exc.strerror or exc}",
                           lock, exc.errno) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LockedError(f"{self.path} is open elsewhere (LOCK is held)") from None
    except BaseException:
        os.close(fd)
        raise
    self._lock_fd = fd


cdef start_threads(CommitLog self):
    self._stopping = False
    self._last_cp = time.monotonic()
    t = threading.Thread(target=self._flush_loop, name=f"quorumlog-flush:{self.path}",
                         daemon=True)
    t.start()
    self._threads.append(t)
    if self.preallocate_next:
        t = threading.Thread(target=self._prepare_loop,
                             name=f"quorumlog-prepare:{self.path}", daemon=True)
        t.start()
        self._threads.append(t)


cdef stop_threads(CommitLog self):
    self._stopping = True
    with self._cv:
        self._cv.notify_all()
    with self._prep_cv:
        self._prep_cv.notify_all()
    for t in self._threads:
        if t is not threading.current_thread():
            t.join()
    self._threads = []


cdef void _stop_writer(CommitLog self) noexcept:
    # Write lock held, so no batch is using the writer thread (a batch waits for its last
    # piece before it returns): join it.
    cdef ql_writer *w = self._writer
    self._writer = NULL
    if w != NULL:
        self.n_wpieces += w.n_jobs
        self.n_wtaken += w.n_taken_back
        with nogil:
            ql_writer_free(w)


cdef _let_go_in_child(CommitLog self):
    """close() of a log inherited through fork: drop this process's references only."""
    self._closed = True
    self._writer = NULL          # the parent's thread; its memory is the parent's copy too
    self._prepared = None
    forget_mappings(self)
    _unlock(self)                # closes this process's descriptor; the parent keeps the lock


cdef close_log(CommitLog self):
    if self._closed:
        return
    if self._gen != _fork_generation:
        _let_go_in_child(self)
        return
    if self.read_only:
        self._closed = True
        drop_mappings(self)
        return
    stop_threads(self)
    _acquire(self)
    try:
        _stop_writer(self)
        if self._failed is not None:
            # nothing more is written: the abort marker stays, so the next open is an
            # unclean one and recovery checks what reached the disk
            log.error("commit log %s closed after a failure (%s): not flushed, no clean "
                      "checkpoint", self.path, self._failed)
            self._closed = True
            drop_mappings(self)
            return
        flush_log(self)
        _flush_exclusive(self)
        try:
            write_checkpoint(self, True)
        finally:
            _flush_exclusive_end(self)
        self._closed = True
        drop_mappings(self)
        if self._lost_mark:
            # lost writes not settled (a replica closed before its recovery floor was
            # durable): the marker stays, so the next open sees them again
            log.warning("commit log %s closed before its possibly lost writes were settled: "
                        "the next open treats them as lost again", self.path)
        else:
            try:
                os.unlink(os.path.join(self.path, "abort"))
            except FileNotFoundError:
                pass
            _fsync_dir(self.path)
    finally:
        _release(self)
        _unlock(self)
        self._closed = True
        with self._cv:
            self._cv.notify_all()


cdef crash_log(CommitLog self):
    if self._closed:
        return
    if self._gen != _fork_generation:
        _let_go_in_child(self)
        return
    stop_threads(self)
    _acquire(self)
    try:
        _stop_writer(self)
        self._closed = True
        forget_mappings(self)
        self._prepared = None       # kept on disk, as a crash would leave it
    finally:
        _release(self)
        _unlock(self)
        with self._cv:
            self._cv.notify_all()


cdef _unlock(CommitLog self):
    if self._lock_fd >= 0:
        os.close(self._lock_fd)
        self._lock_fd = -1
