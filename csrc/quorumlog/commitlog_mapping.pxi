# Included by _commitlog.pyx: Mapping (one mmap'd file exporting a read-only buffer, unmapped
# only when no view of it remains), map_file (open + posix_fallocate + mmap) and the log's
# segment files: lookup by number or position, creation, installation at the end.

@cython.final
cdef class Mapping:
    def __cinit__(self):
        self.addr = NULL
        self.size = 0
        self._stride = 1
        self.populated = 0
        self.fd = -1
        self.recycled_from = -1

    def __dealloc__(self):
        if self.fd >= 0:
            close(self.fd)
            self.fd = -1
        if self.addr != NULL:
            munmap(self.addr, <size_t>self.size)
            self.addr = NULL

    def __getbuffer__(self, Py_buffer *buf, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("log mappings are read-only")
        if self.addr == NULL:
            raise BufferError("mapping is not open")
        buf.buf = self.addr
        buf.obj = self
        buf.len = self.size
        buf.readonly = 1
        buf.itemsize = 1
        buf.format = NULL
        if flags & PyBUF_FORMAT:
            buf.format = b"B"
        buf.ndim = 1
        buf.shape = NULL
        if flags & PyBUF_ND:
            buf.shape = &self.size
        buf.strides = NULL
        if (flags & PyBUF_STRIDES) == PyBUF_STRIDES:
            buf.strides = &self._stride
        buf.suboffsets = NULL
        buf.internal = NULL

    def __releasebuffer__(self, Py_buffer *buf):
        pass

    def __len__(self):
        return self.size

    def __repr__(self):
        return f"<Mapping {self.path!r} start={self.start} size={self.size}>"


cdef int write_fd(Mapping m) except -1:
    """The descriptor appends write `m`'s file through, opened on first use."""
    if m.fd < 0:
        try:
            m.fd = os.open(m.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise StorageError(f"segment {m.path}: {e.strerror}", m.path, e.errno) from None
    return m.fd


cdef void close_write_fd(Mapping m) noexcept:
    if m is not None and m.fd >= 0:
        close(m.fd)
        m.fd = -1


def _disk_error(int err, str what, str path=None):
    if err == ENOSPC or err == EDQUOT:
        return DiskFullError(err, f"no space to preallocate {what}", what)
    return StorageError(f"{what}: {os.strerror(err)}", path, err)


cdef Mapping map_file(str path, int64_t size, int64_t start, bint create,
                      bint always_allocate, str what):
    """Open/create + posix_fallocate + mmap, GIL released. ENOSPC -> DiskFullError (a file
    this call created is unlinked again)."""
    cdef bytes bpath = os.fsencode(path)
    cdef const char *cpath = bpath
    cdef void *addr = NULL
    cdef int created = 0, err
    with nogil:
        err = ql_map_file(cpath, size, create, always_allocate, &addr, &created)
    if err != 0:
        if created:
            try:
                os.unlink(path)
            except OSError:
                pass
        if err == _errno.EFBIG:
            raise ConfigError(f"{path} is longer than the configured size {size}")
        raise _disk_error(err, f"{what} {path}", path)
    cdef Mapping m = Mapping.__new__(Mapping)
    m.addr = <char *>addr
    m.size = size
    m.start = start
    m.path = path
    return m


cdef Mapping map_file_private(str path, int64_t size, int64_t start, str what):
    """A read-only log's mapping of a file: copy-on-write, nothing created or allocated;
    bytes past the file's end read as zero."""
    cdef bytes bpath = os.fsencode(path)
    cdef const char *cpath = bpath
    cdef void *addr = NULL
    cdef int err
    with nogil:
        err = ql_map_file_private(cpath, size, &addr)
    if err != 0:
        if err == _errno.EFBIG:
            raise ConfigError(f"{path} is longer than the configured size {size}")
        raise OSError(err, os.strerror(err), path)
    cdef Mapping m = Mapping.__new__(Mapping)
    m.addr = <char *>addr
    m.size = size
    m.start = start
    m.path = path
    return m


cdef Mapping map_existing(CommitLog self, str path, int64_t size, int64_t start, bint extend,
                          str what):
    """A file recovery maps: shared read-write (`extend`: a short file is re-extended), or
    copy-on-write for a read-only log."""
    if self.read_only:
        return map_file_private(path, size, start, what)
    return map_file(path, size, start, extend, False, what)


def _segment_name(int64_t start):
    return numbered_name(start)


cdef str _seg_path(CommitLog self, int64_t k):
    return os.path.join(self._segdir, numbered_name(k * self.segment_size_bytes))


cdef Mapping _seg(CommitLog self, int64_t k):
    """Segment k, or None when the log does not hold it."""
    cdef int64_t j = k - self._first_seg
    if j < 0 or j >= len(self._segs):
        return None
    return <Mapping>self._segs[j]


cdef Mapping _seg_for_pos(CommitLog self, int64_t position):
    cdef int64_t k = position // self.segment_size_bytes
    cdef Mapping m = _seg(self, k)
    if m is None or position < 0:
        raise IndexOutOfRangeError(
            f"position {position} outside [{self.min_position}, {self._end})")
    return m


cdef Mapping _new_segment_mapping(CommitLog self, int64_t k):
    """Mapping for segment k (not yet part of the log): the prepared one when the
    background thread has it ready, else created here synchronously."""
    cdef Mapping m
    cdef int64_t start = k * self.segment_size_bytes
    with self._prep_cv:
        while self._prep_busy:
            self._prep_cv.wait()
        if self._prepared is not None and (<Mapping>self._prepared).start == start:
            m = <Mapping>self._prepared
            self._prepared = None
            self.n_prepared_used += 1
            # withdraw the request it answered: until this mapping is installed the log
            # does not hold segment k, so a preparer woken now would map the same file
            # again and offer it as the next segment -- a second mapping of a segment
            # the log holds, which a later discard could unlink
            if self._prep_request <= start:
                self._prep_request = -1
            return m
        if self._prepared is not None:
            _discard_prepared(self)
        # keep the preparer off this file while it is created here
        self._prep_busy = True
        if self._prep_request <= start:
            self._prep_request = -1
    try:
        m = make_segment(self, k)
    finally:
        with self._prep_cv:
            self._prep_busy = False
            self._prep_cv.notify_all()
    self.n_segments_created += 1
    self.n_sync_created += 1
    return m


cdef _install_segment(CommitLog self, Mapping m):
    close_write_fd(self._cur)      # nothing is appended to the old segment any more
    self._segs.append(m)
    self._views.append(memoryview(m))
    self._cur = m
    self._cur_start = m.start


cdef list _map_range_for(CommitLog self, int64_t last_pos, int64_t last_index):
    """Make sure segments up to the one holding `last_pos` and index files up to
    `last_index` exist (creating them; DiskFullError before anything is written).
    Returns the new segment mappings (not yet installed)."""
    cdef list new = []
    cdef int64_t k, k_last = last_pos // self.segment_size_bytes
    cdef int64_t k_cur = self._cur_start // self.segment_size_bytes
    cdef int64_t f, f_first = (self._next_index - 1) // self.index_file_entries
    cdef int64_t f_last = (last_index - 1) // self.index_file_entries
    cdef Mapping m
    try:
        for f in range(f_first, f_last + 1):
            _idx_file(self, f, True)
        for k in range(k_cur + 1, k_last + 1):
            new.append(_new_segment_mapping(self, k))
    except BaseException:
        for m in new:
            try:
                os.unlink(m.path)
            except OSError:
                pass
        raise
    return new


cdef Mapping _new_seg_at(CommitLog self, list new_segs, int64_t position):
    """The mapping a position lands in during a multi-segment append: the current segment
    or one of `new_segs` (from _map_range_for, not yet installed)."""
    cdef int64_t k = position // self.segment_size_bytes
    cdef int64_t k_cur = self._cur_start // self.segment_size_bytes
    if k == k_cur:
        return self._cur
    return <Mapping>new_segs[k - k_cur - 1]


cdef forget_mappings(CommitLog self):
    """Drop the log's references to its mappings (each is unmapped with its last view)."""
    for m in self._segs:
        close_write_fd(<Mapping>m)
    self._segs = []
    self._views = []
    self._idx = []
    self._cur = None
    self._cur_idx = None
    self._cur_idxf = -1


cdef drop_mappings(CommitLog self):
    """Unlink a prepared segment the log never used, then forget_mappings. In this order:
    _discard_prepared's guard (never unlink a segment the log holds) reads self._segs,
    which forget_mappings empties; the other order unlinked the last segment, records and
    all, when the prepared mapping was also the log's newest segment at close."""
    with self._prep_cv:
        if self._prepared is not None:
            _discard_prepared(self)
    forget_mappings(self)
