# Included by _consumequeue.pyx: consume-queue files -- CQFile (one preallocated, mmap'd file
# of CQEntry) and ConsumeQueue (the files of one (topic, queue), its next offset, repair on
# reopen, retention).

cdef inline CQEntry *_cq_entry(CQFile f, Py_ssize_t i) noexcept:
    return <CQEntry *>(f.base + i * sizeof(CQEntry))



cdef object _map_private(path, Py_ssize_t nbytes, bint create, bint detached=False):
    """A read-only store's mapping of a consume-queue file: copy-on-write (dispatch and
    repair stay in memory), nothing created; a missing file (`create`) or a short one reads
    as zeros past its end. `detached`: the queue was reset (rebuilt in memory), so what the
    file holds is not used: zeros."""
    if detached:
        return mmap.mmap(-1, nbytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            raise
        return mmap.mmap(-1, nbytes)
    try:
        size = os.fstat(fd).st_size
        if size > nbytes:
            raise CorruptLogError(f"consume queue file {path} has size {size}, expected "
                                  f"{nbytes}", str(path), nbytes)
        if size == nbytes:
            return mmap.mmap(fd, nbytes, access=mmap.ACCESS_COPY)
        mm = mmap.mmap(-1, nbytes)
        mm[:size] = os.pread(fd, size, 0)
        return mm
    finally:
        os.close(fd)


cdef class CQFile:
    def __cinit__(self, path, int64_t first_offset, Py_ssize_t capacity, bint create,
                  bint read_only=False, bint detached=False):
        cdef Py_ssize_t nbytes = capacity * sizeof(CQEntry), i
        cdef bint fresh = False
        self.path = path
        self.first_offset = first_offset
        self.capacity = capacity
        if read_only:
            self.mm = _map_private(path, nbytes, create, detached)
            PyObject_GetBuffer(self.mm, &self._buf, PyBUF_SIMPLE | PyBUF_WRITABLE)
            self._has_buf = True
            self.base = <unsigned char *>self._buf.buf
            self.dirty = False
            return
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise StorageError(f"consume queue file {path}: {exc.strerror or exc}", str(path),
                               exc.errno) from None
        try:
            st = os.fstat(fd)
            fresh = st.st_size == 0
            if st.st_size < nbytes:
                # Preallocate before mapping: a store into a sparse mapping on a full disk is
                # SIGBUS; fallocate fails cleanly with ENOSPC instead.
                try:
                    os.posix_fallocate(fd, 0, nbytes)
                except OSError as exc:
                    if create and st.st_size == 0:
                        os.unlink(path)
                    raise DiskFullError(exc.errno, f"cannot preallocate {path}: {exc.strerror}")
            elif st.st_size > nbytes:
                raise CorruptLogError(f"consume queue file {path} has size {st.st_size}, "
                                      f"expected {nbytes}", str(path), nbytes)
            self.mm = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        PyObject_GetBuffer(self.mm, &self._buf, PyBUF_SIMPLE | PyBUF_WRITABLE)
        self._has_buf = True
        self.base = <unsigned char *>self._buf.buf
        self.dirty = False
        if fresh:
            # Fault every page in for writing now (the file is all zeros, so storing a zero
            # changes nothing): dispatch then never takes a page fault per 204 entries.
            with nogil:
                for i in range(0, nbytes, 4096):
                    (<volatile unsigned char *>self.base)[i] = 0

    def __dealloc__(self):
        if self._has_buf:
            PyBuffer_Release(&self._buf)
            self._has_buf = False

    @property
    def entries(self):
        """All `capacity` entries as a writable numpy structured array over the mapping."""
        return np.frombuffer(self.mm, dtype=CQ_DTYPE)

    def raw(self):
        return np.frombuffer(self.mm, dtype=np.uint8)

    def put(self, Py_ssize_t i, int64_t position, int32_t size, int64_t tag_hash):
        if i < 0 or i >= self.capacity:
            raise IndexError(i)
        _put_entry(self, i, position, size, tag_hash)

    def flush(self):
        """msync the file when it was written to. StorageError when that fails; the file
        then stays dirty, but a later msync returning 0 proves nothing (the kernel reports
        a write-back error once): the caller must not count on these entries again."""
        if self.dirty:
            self.msync()
            self.dirty = False

    def msync(self):
        """msync the whole file, dirty or not, without the GIL and without touching `dirty`:
        a checkpoint taken outside the store's lock clears `dirty` under the lock first (so
        an entry written meanwhile marks the file again), then calls this. StorageError as
        flush()."""
        cdef int err
        with nogil:
            err = ql_msync(<char *>self.base, 0, self.capacity * sizeof(CQEntry))
        if err:
            raise StorageError(f"msync of consume queue file {self.path} failed: "
                               f"{os.strerror(err)}", str(self.path), err)


cdef inline void _put_entry(CQFile f, Py_ssize_t i, int64_t position, int32_t size,
                            int64_t tag_hash) noexcept:
    cdef CQEntry *e = _cq_entry(f, i)
    e.position = position
    e.size = size
    e.tag_hash = tag_hash
    f.dirty = True


cdef inline int32_t _size_at(CQFile f, Py_ssize_t i) noexcept:
    return _cq_entry(f, i).size


cdef Py_ssize_t _first_valid(CQFile f):
    """Index of the first entry with size > 0, or -1."""
    cdef Py_ssize_t i
    for i in range(f.capacity):
        if _size_at(f, i) > 0:
            return i
    return -1


cdef Py_ssize_t _trusted_end(CQFile f, Py_ssize_t a, int64_t limit):
    """First index in [a, capacity) where "size > 0 and position < limit" stops holding."""
    cdef Py_ssize_t lo = a, hi = f.capacity, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if _size_at(f, mid) > 0 and _cq_entry(f, mid).position < limit:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef Py_ssize_t _zero_from(CQFile f, Py_ssize_t k):
    """Zero the non-zero entries from k on, chunk by chunk, stopping at the first chunk that is
    already all zero -> number of entries that were not zero."""
    cdef Py_ssize_t i = k, j, end, n = 0
    cdef bint any_set
    cdef CQEntry *e
    while i < f.capacity:
        end = min(i + ZERO_CHUNK, f.capacity)
        any_set = False
        for j in range(i, end):
            e = _cq_entry(f, j)
            if e.size != 0 or e.position != 0 or e.tag_hash != 0:
                n += 1
                any_set = True
                memset(e, 0, sizeof(CQEntry))
        if not any_set:
            break
        f.dirty = True
        i = end
    return n


def file_name(int64_t first_offset):
    return numbered_name(first_offset)


cdef class ConsumeQueue:
    """The consume queue of one (topic, queue): files named by first queue offset, each holding
    the offsets [first, first + file_entries). `next_offset` is one past the last dispatched
    entry; an `empty` queue accepts its first entry at any offset (a queue rebuilt after
    retention starts in the middle; the entries before it in its file stay zero = holes)."""

    def __init__(self, topic, int queue_id, dir, Py_ssize_t file_entries, *,
                 bint read_only=False):
        # read_only: files mapped copy-on-write, nothing created or deleted on disk
        self.read_only = read_only
        self.detached = False
        self.topic = topic
        self.queue_id = queue_id
        self.dir = dir
        self.file_entries = file_entries
        self.next_offset = 0
        self.empty = True
        self.cur = None
        self.files = {}
        self.starts = []
        self.min_offset_cache = None

    def load(self):
        """List the files on disk. Returns False when the queue directory is missing;
        CorruptLogError / StorageError when what is there is not a queue's files."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"consume queue directory {self.dir}: {exc.strerror or exc}",
                               str(self.dir), exc.errno) from None
        starts = []
        for n in names:
            if is_numbered_name(n):
                v = int(n)
                if v % self.file_entries:
                    raise CorruptLogError(f"consume queue file {n} in {self.dir} is not aligned "
                                          f"to {self.file_entries} entries", str(self.dir), 0)
                starts.append(v)
        starts.sort()
        self.starts = starts
        return True

    def file(self, int64_t first, bint create=False):
        cdef CQFile f = self.files.get(first)
        if f is not None:
            return f
        if not create and (not self.starts or first not in self.starts):
            return None
        path = os.path.join(self.dir, file_name(first))
        if create and not self.read_only:
            os.makedirs(self.dir, exist_ok=True)
        f = CQFile(path, first, self.file_entries, create, self.read_only, self.detached)
        self.files[first] = f
        if first not in self.starts:
            bisect.insort(self.starts, first)
        return f

    def file_for(self, int64_t offset, bint create=False):
        return self.file(offset - offset % self.file_entries, create)

    def recover(self, int64_t limit):
        """Drop every entry that points at or past log position `limit` (never trust the
        index beyond what the log confirms) and set next_offset from what remains.

        O(log n) per queue on the usual shape of a file: [holes][trusted entries][zeros].
        Entries below the durable dispatched position were msync'd before that position was
        checkpointed, so the trusted entries are contiguous and the predicate "size > 0 and
        position < limit" is true on [a, k) and false after: binary search finds k. What
        follows k (entries past the limit, or stale bytes a crash left) is zeroed until a
        whole chunk reads zero, so a later reopen never sees it."""
        cdef CQFile f
        cdef Py_ssize_t a, k, dropped
        self.empty = True
        self.cur = None
        self.next_offset = self.starts[0] if self.starts else 0
        for first in reversed(self.starts):
            f = self.file(first)
            a = _first_valid(f)
            if a < 0:
                continue
            k = _trusted_end(f, a, limit)
            dropped = _zero_from(f, k)
            if dropped:
                log.info("consume queue %s/%d: dropped %d entries from offset %d (past "
                         "position %d)", self.topic, self.queue_id, dropped, first + k, limit)
            if k > a:
                self.next_offset = first + k
                self.empty = False
                self.cur = f
                break
        self.min_offset_cache = None

    def reset(self):
        """Forget every entry: remove whatever the queue's directory holds under a file's
        name (live views of unlinked files stay valid; a directory there goes too) and start
        empty, for a rebuild from the log. The directory is made again if it is missing or
        a file stands in its place. Read-only: only the entries in memory are forgotten
        (the queue is rebuilt in copy-on-write memory; files created anew are private)."""
        if not self.read_only:
            if os.path.lexists(self.dir) and not os.path.isdir(self.dir):
                os.unlink(self.dir)
            os.makedirs(self.dir, exist_ok=True)
            for name in os.listdir(self.dir):
                if is_numbered_name(name):
                    f = os.path.join(self.dir, name)
                    if os.path.isdir(f) and not os.path.islink(f):
                        shutil.rmtree(f)
                    else:
                        os.unlink(f)
        self.files = {}
        self.starts = []
        self.cur = None
        self.empty = True
        self.next_offset = 0
        self.min_offset_cache = None
        self.detached = self.read_only

    def put(self, int64_t offset, int64_t position, int32_t size, int64_t tag_hash):
        """Slow-path write of one entry (first entry of an empty queue, a new file, a gap).
        Returns False for an offset that is already dispatched."""
        cdef CQFile f
        if not self.empty and offset < self.next_offset:
            return False
        if not self.empty and offset > self.next_offset:
            log.warning("consume queue %s/%d: gap, offsets %d..%d missing from the log",
                        self.topic, self.queue_id, self.next_offset, offset - 1)
        f = self.file_for(offset, True)
        f.put(offset - f.first_offset, position, size, tag_hash)
        self.next_offset = offset + 1
        if self.empty:
            self.min_offset_cache = None
        self.empty = False
        self.cur = f
        return True

    def min_offset(self, int64_t min_position):
        """First offset whose entry points at or past the log's min position."""
        cdef CQFile f
        c = self.min_offset_cache
        if c is not None and c[0] == min_position and not self.empty:
            return c[1]
        result = self.next_offset
        if not self.empty:
            for first in list(self.starts):
                if first >= self.next_offset:
                    break
                f = self.file(first)
                n = min(self.file_entries, self.next_offset - first)
                arr = f.entries[:n]
                ok = np.flatnonzero((arr["size"] > 0) & (arr["position"] >= min_position))
                if len(ok):
                    result = first + int(ok[0])
                    break
        # Stays right as entries are appended: they all point past min_position. (An empty
        # queue is not cached: its min offset is its next offset.)
        self.min_offset_cache = (min_position, result)
        return result

    def position_of(self, int64_t offset):
        cdef CQFile f = self.file_for(offset)
        if f is None:
            return None
        e = f.entries[offset - f.first_offset]
        if e["size"] <= 0:
            return None
        return int(e["position"]), int(e["size"])

    def delete_files_before(self, int64_t min_position):
        """Delete whole files whose every entry points below `min_position` (the log's new
        min position); the file holding the last entry is always kept. Returns the count."""
        cdef CQFile f
        deleted = 0
        if self.read_only:
            return 0
        for first in list(self.starts):
            if self.empty or first + self.file_entries >= self.next_offset:
                break
            f = self.file(first)
            arr = f.entries
            valid = np.flatnonzero(arr["size"] > 0)
            if len(valid) and int(arr["position"][valid[len(valid) - 1]]) >= min_position:
                break
            self.files.pop(first, None)
            self.starts.remove(first)
            try:
                os.unlink(f.path)
            except FileNotFoundError:
                pass
            deleted += 1
        self.min_offset_cache = None
        return deleted

    def flush(self):
        cdef CQFile f
        for f in self.files.values():
            f.flush()

    def view(self, int64_t lo, int64_t hi):
        """Read-only numpy view of the entries [lo, min(hi, end of lo's file)) (zero copy)."""
        cdef CQFile f = self.file_for(lo)
        if f is None or lo >= hi:
            return np.empty(0, CQ_DTYPE)
        a = f.entries[lo - f.first_offset:min(hi, f.first_offset + f.capacity) - f.first_offset]
        a.flags.writeable = False
        return a
