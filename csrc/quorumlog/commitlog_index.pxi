# Included by _commitlog.pyx: the raft index -- files of index_file_entries fixed-width
# entries (position, term, size, type; IdxEntry in _format.pxd), named by their first raft
# index, giving O(1) lookup of any index's record.

cdef inline void write_index(char *e, uint64_t position, uint64_t term, uint32_t size,
                             uint8_t rtype) noexcept nogil:
    cdef IdxEntry *x = <IdxEntry *>e
    x.position = position
    x.term = term
    x.size = size
    x.type = rtype
    x.pad0 = 0
    x.pad1 = 0
    x.pad2 = 0


cdef str _idx_path(CommitLog self, int64_t f):
    return os.path.join(self._idxdir, numbered_name(f * self.index_file_entries + 1))


cdef Mapping _idx_file(CommitLog self, int64_t f, bint create):
    """Index file f, mapped (created when `create`); None when absent."""
    cdef int64_t j
    cdef Mapping m
    if f == self._cur_idxf:
        return self._cur_idx
    j = f - self._first_idxf
    if 0 <= j < len(self._idx):
        return <Mapping>self._idx[j]
    if not create:
        return None
    if len(self._idx) == 0:
        self._first_idxf = f
        j = 0
    if j != len(self._idx):
        raise IndexOutOfRangeError(f"raft index file {f} is not adjacent to the held ones")
    m = map_file(_idx_path(self, f), self.index_file_entries * IDX_ENTRY,
                 f * self.index_file_entries + 1, True, True, "raft index file")
    self._idx.append(m)
    return m


cdef char *_entry(CommitLog self, int64_t i, bint create) except? NULL:
    """Pointer to the raft-index entry of index i (None/NULL when its file is absent)."""
    cdef int64_t f = (i - 1) // self.index_file_entries
    cdef Mapping m
    if f == self._cur_idxf:
        return self._cur_idx.addr + ((i - 1) - f * self.index_file_entries) * IDX_ENTRY
    m = _idx_file(self, f, create)
    if m is None:
        return NULL
    if create:
        self._cur_idx = m
        self._cur_idxf = f
    return m.addr + ((i - 1) - f * self.index_file_entries) * IDX_ENTRY


cdef const IdxEntry *_entry_checked(CommitLog self, int64_t i) except NULL:
    if i < self._first_index or i >= self._next_index or i < 1:
        raise IndexOutOfRangeError(
            f"raft index {i} outside [{self._first_index}, {self._next_index - 1}]")
    cdef char *e = _entry(self, i, False)
    if e == NULL:
        raise CorruptLogError(f"raft index file for {i} is missing", self._idxdir, None)
    return <const IdxEntry *>e


cdef _msync_index(CommitLog self, int64_t lo, int64_t hi):
    """msync the raft-index entries lo..hi (inclusive); an error fails the log."""
    cdef int64_t f, a, b, N = self.index_file_entries
    cdef Mapping m
    cdef int err
    if hi < lo or lo < 1:
        return
    for f in range((lo - 1) // N, (hi - 1) // N + 1):
        m = _idx_file(self, f, False)
        if m is None:
            continue
        a = max(lo - 1, f * N) - f * N
        b = min(hi - 1, f * N + N - 1) - f * N + 1
        with nogil:
            err = ql_msync(m.addr, a * IDX_ENTRY, (b - a) * IDX_ENTRY)
        if err:
            _fail(self, f"msync of {m.path}", err)
