# Included by _commitlog.pyx: leader appends -- append (one MESSAGE), append_control (NOOP /
# CONFIG / META) and append_batch (many MESSAGEs in three passes: gather and check every
# argument, lay the records out, encode them straight into the mappings without the GIL).
# Everything is validated before the first byte is written.

cdef inline int64_t _stamp(CommitLog self, int64_t now_ms) noexcept:
    """The store timestamp for a leader append made now (caller holds the lock)."""
    return now_ms if now_ms > self._last_store_ms else self._last_store_ms


cdef void _note_last_store(CommitLog self) noexcept:
    """Re-read the last record's store timestamp (after recovery or a replicated
    append); keeps the larger of it and what was already noted."""
    cdef int64_t i = self._next_index - 1
    cdef char *ep
    cdef const IdxEntry *e
    cdef Mapping m
    cdef int64_t ts
    if i < 1 or i < self._first_index:
        return
    ep = _entry(self, i, False)
    if ep == NULL:
        return
    e = <const IdxEntry *>ep
    m = _seg(self, <int64_t>e.position // self.segment_size_bytes)
    if m is None:
        return
    ts = (<const RecHeader *>(m.addr + (<int64_t>e.position - m.start))).store_ts
    if ts > self._last_store_ms:
        self._last_store_ms = ts


cdef int _check_append(CommitLog self, int64_t term) except -1:
    """Write lock held: the log is open, has not failed, and `term` does not go back."""
    _check_writable(self)
    if term < self._last_term:
        raise InvalidArgumentError(
            f"term {term} is below the log's last term {self._last_term}")
    return 0


cdef int64_t _ensure_room(CommitLog self, uint32_t size) except -1:
    """Make sure a record of `size` bytes can go at the end: the index slot exists and,
    when the record does not fit in the current segment, the next segment is mapped
    and a BLANK closes the current one. Raises (DiskFullError) before writing.
    -> the position the record goes to. _end is NOT moved past the BLANK here: the
    caller publishes _end only once the record is written, because it may release
    the GIL in between and the flusher's (_end, last index) snapshot must always be
    a record end and its index (the checkpoint anchor recovery relies on)."""
    cdef int64_t off = self._end - self._cur_start
    cdef Mapping m
    _entry(self, self._next_index, True)
    if off < 0:
        return self._cur_start  # a BLANK closed the last segment; nothing written since
    if <int64_t>size + HDR <= self.segment_size_bytes - off:
        return self._end
    m = _new_segment_mapping(self, self._cur_start // self.segment_size_bytes + 1)
    write_blank(self._cur.addr + off, self._end, <uint32_t>(self.segment_size_bytes - off))
    zero_stale_tail(self, self._cur, self._end)
    self.n_blank += 1
    _install_segment(self, m)
    return m.start


cdef int _advance_end(CommitLog self, int64_t end, int64_t next_index, int64_t term,
                      int64_t store_ms, int64_t records, int64_t nbytes,
                      bint mapped) except -1:
    """Publish records just written (write lock and GIL held, so readers and the flusher
    see the new end and last index together), count them, and keep the preparer ahead.
    store_ms: the last record's store timestamp (0: re-read it from the log). mapped: the
    records were written through the mapping (then the segment's pages are kept populated
    ahead too, not only the raft index's)."""
    self._end = end
    self._next_index = next_index
    self._last_term = term
    if store_ms > self._last_store_ms:
        self._last_store_ms = store_ms
    elif store_ms == 0:
        _note_last_store(self)      # a later leader term on this node stamps above it
    self.n_append_calls += 1
    self.n_records += records
    self.n_bytes += nbytes
    if self._flush_parked:
        _unpark_flusher(self)
    _maybe_request_prepare(self)
    _want_populated(self, end, mapped)
    return 0


# ---------------------------------------------------------------------------------------
# one record: append, append_control
# ---------------------------------------------------------------------------------------
cdef tuple append_message(CommitLog self, topic, body, queue_id, queue_offset, term, tags,
                          keys, properties, born_timestamp_ms, flags):
    cdef RecSrc s
    cdef Py_buffer buf
    cdef char held = 0
    cdef bytes tb, gb, kb, pb
    cdef int64_t t, born, store
    cdef uint32_t fl
    cdef bint born_default
    _check_open(self)
    memset(&s, 0, sizeof(RecSrc))
    tb = _check_topic(topic)
    s.topic = PyBytes_AS_STRING(tb)
    s.topic_len = <uint32_t>PyBytes_GET_SIZE(tb)
    if tags is not None:
        gb = _encode_tags(tags)
        _set_tags(&s, gb, _tag_hash(gb))
    if not (keys is None or (type(keys) is tuple and len(<tuple>keys) == 0)):
        kb = _encode_keys(keys)
        _set_keys(&s, kb)
    if type(properties) is ProducerProperties and len(properties) == 1:
        properties = properties[0]
    if properties is not None:
        pb = _encode_props(properties)
        _set_props(&s, pb)
    if type(queue_id) is not int:
        raise QueueTypeError(f"queue_id must be int, not {type(queue_id).__name__}")
    if type(queue_offset) is not int:
        raise ArgumentTypeError(f"queue_offset must be int, not {type(queue_offset).__name__}")
    if not (0 <= queue_id < MAX_QUEUE_ID):
        raise InvalidQueueError(f"queue_id {queue_id} outside [0, {MAX_QUEUE_ID})")
    if queue_offset < 0 or queue_offset >= (1 << 63):
        raise InvalidArgumentError(f"queue_offset {queue_offset} out of range")
    t = _check_term(term)
    fl = <uint32_t>_check_flags(flags)
    store = ql_now_ms()
    born_default = born_timestamp_ms is None
    born = store if born_default else _check_born(born_timestamp_ms, "born_timestamp_ms")
    try:
        _set_body(&s, body, &buf, &held, self.max_message_bytes, -1)
        return _append_record(self, &s, _record_size(&s, self.segment_size_bytes, -1),
                              T_MESSAGE, fl, <uint32_t>queue_id, queue_offset, t, born,
                              born_default, store)
    finally:
        if held:
            PyBuffer_Release(&buf)


cdef tuple append_control_record(CommitLog self, int rtype, payload, term):
    cdef RecSrc s
    cdef int64_t t, store
    _check_open(self)
    if rtype not in (T_NOOP, T_CONFIG, T_META):
        raise InvalidArgumentError(f"append_control type must be NOOP, CONFIG or META, not {rtype}")
    if isinstance(payload, str) or payload is None:
        raise ArgumentTypeError("payload must be bytes-like")
    t = _check_term(term)
    payload = bytes(payload)
    if rtype == T_NOOP and len(payload):
        raise InvalidArgumentError("a NOOP record has an empty body")
    if len(payload) > self.max_message_bytes:
        raise MessageTooLargeError(f"payload is {len(payload)} bytes; max_message_bytes "
                                   f"is {self.max_message_bytes}")
    memset(&s, 0, sizeof(RecSrc))
    s.body = PyBytes_AS_STRING(payload)
    s.body_len = <uint32_t>len(payload)
    store = ql_now_ms()
    index, pos, _ = _append_record(self, &s, HDR + s.body_len, <uint8_t>rtype, 0, 0, 0, t,
                                   store, True, store)
    return (index, pos)


cdef tuple _append_record(CommitLog self, const RecSrc *s, uint32_t size, uint8_t rtype,
                          uint32_t flags, uint32_t queue_id, int64_t queue_offset,
                          int64_t term, int64_t born, bint born_default, int64_t store):
    """Write one checked record at the end under the write lock
    -> (index, position, store_timestamp_ms). Through the mapping; a stream of single
    MESSAGEs has its pages populated ahead, a control record (rare: a leader's NOOP,
    CONFIG, META between batches) only faults in the page or two it writes."""
    cdef int64_t pos, index
    cdef bint stream = rtype == T_MESSAGE
    _acquire(self)
    try:
        _check_append(self, term)
        pos = _ensure_room(self, size)
        store = _stamp(self, store)
        if born_default:
            born = store
        index = self._next_index
        if stream and pos + size > self._cur_start + self._cur.populated:
            _populate(self, pos + size)      # the preparer is behind (or absent)
        encode_record(self._cur.addr + (pos - self._cur_start), s, rtype, flags, index,
                      term, pos, queue_offset, born, store, queue_id, size)
        write_index(_entry(self, index, True), pos, term, size, rtype)
        _advance_end(self, pos + size, index + 1, term, store, 1, size, stream)
    finally:
        _release(self)
    return (index, pos, store)


# ---------------------------------------------------------------------------------------
# many records: append_batch
# ---------------------------------------------------------------------------------------
# One batch, gathered and checked before anything is written.
cdef struct Batch:
    Py_ssize_t n
    RecSrc *src              # per record: pointers into the caller's objects
    uint32_t *sizes          # per record: total size
    int64_t *posp            # per record: position (the returned array's data)
    Py_buffer *bufs          # buffers of bodies that are not bytes (NULL: none yet)
    char *held               # which of bufs are held
    const int64_t *qids      # per-record columns, or NULL: qid0 / qoff0 + j / born0
    const int64_t *qoffs
    const int64_t *borns
    const char *pprops       # a ProducerProperties' encoded fields back to back, or NULL
    uint32_t *plens          # ... and the length of each record's (an array in `keep`)
    int64_t qid0, qoff0, born0
    int64_t term, store, total, first_index
    uint32_t flags


# Where a batch goes: every segment and raft-index file it writes into.
cdef struct BatchTarget:
    int *segfd               # the current segment, then each new one (write_fd)
    char **idxaddr           # raft-index files f0, f0 + 1, ...
    char *stage              # the log's staging buffer (STAGE_BYTES)
    iovec *iov               # IOV_MAX_N
    ql_writer *w             # the writer thread for a big batch, else NULL (write inline)
    char *ring               # with w: the log's QL_WRITER_SLOTS staging buffers (instead
    iovec *ring_iov          # of stage) and iovec arrays (instead of iov)
    int64_t k_cur, S, end, f0, N
    int64_t ipop_from, ipop_to   # offsets in the first raft-index file still to populate


cdef tuple append_messages(CommitLog self, topic, bodies, queue_ids, queue_offsets, term,
                           tags, keys, properties, born_timestamps_ms, flags):
    cdef Batch b
    cdef tuple bt
    cdef bytes tb
    cdef list keep = []          # objects the batch's pointers point into
    cdef cnp.ndarray positions
    _check_open(self)
    if not isinstance(bodies, (list, tuple)):
        raise ArgumentTypeError("bodies must be a list or tuple of bytes-like objects")
    bt = tuple(bodies)
    memset(&b, 0, sizeof(Batch))
    b.n = len(bt)
    if b.n > MAX_BATCH_RECORDS:
        raise InvalidArgumentError(f"batch of {b.n} records over the {MAX_BATCH_RECORDS} limit")
    tb = _check_topic(topic)
    b.term = _check_term(term)
    b.flags = <uint32_t>_check_flags(flags)
    b.store = ql_now_ms()
    _batch_columns(&b, queue_ids, queue_offsets, born_timestamps_ms, keep)
    if type(properties) is ProducerProperties:
        # a producer batch: every record's properties in one loop, no dict per message
        lens = cnp.PyArray_EMPTY(1, [max(b.n, 1)], cnp.NPY_UINT32, 0)
        keep.append(lens)
        b.plens = <uint32_t *>cnp.PyArray_DATA(lens)
        pbuf = _producer_batch_props(<ProducerProperties>properties, b.n, b.plens)
        keep.append(pbuf)
        b.pprops = PyBytes_AS_STRING(pbuf)
        properties = None
    fields = _batch_fields(tags, keys, properties, b.n)
    positions = cnp.PyArray_EMPTY(1, [b.n], cnp.NPY_INT64, 0)
    b.posp = <int64_t *>cnp.PyArray_DATA(positions)
    if b.n == 0:
        return (self._next_index, positions, b.store)
    b.src = <RecSrc *>calloc(b.n, sizeof(RecSrc))
    b.sizes = <uint32_t *>malloc(b.n * sizeof(uint32_t))
    try:
        if b.src == NULL or b.sizes == NULL:
            raise MemoryError()
        _gather_batch(self, &b, bt, tb, tags, keys, properties, fields, keep)
        _acquire(self)
        try:
            _check_append(self, b.term)
            if b.store < self._last_store_ms:     # see _last_store_ms
                if born_timestamps_ms is None:
                    b.born0 = self._last_store_ms
                b.store = self._last_store_ms
            _place_batch(self, &b)
        finally:
            _release(self)
    finally:
        _free_batch(&b)
    return (b.first_index, positions, b.store)


cdef int _batch_columns(Batch *b, queue_ids, queue_offsets, born_timestamps_ms,
                        list keep) except -1:
    """queue_ids, queue_offsets and born_timestamps_ms: one int for the batch (offsets:
    the first of consecutive ones) or an integer array of one value per record."""
    cdef Py_ssize_t n = b.n
    if isinstance(queue_ids, int) and not isinstance(queue_ids, bool):
        if not (0 <= queue_ids < MAX_QUEUE_ID):
            raise InvalidQueueError(f"queue_id {queue_ids} outside [0, {MAX_QUEUE_ID})")
        b.qid0 = queue_ids
    else:
        a = _int64_array(queue_ids, "queue_ids", QueueTypeError)
        if a.ndim != 1 or a.shape[0] != n:
            raise InvalidArgumentError(f"queue_ids must have one entry per body ({n})")
        if n and (a.min() < 0 or a.max() >= MAX_QUEUE_ID):
            raise InvalidQueueError(f"a queue_id is outside [0, {MAX_QUEUE_ID})")
        keep.append(a)
        b.qids = <int64_t *>cnp.PyArray_DATA(a)
    if isinstance(queue_offsets, int) and not isinstance(queue_offsets, bool):
        if queue_offsets < 0 or queue_offsets + n >= (1 << 63):
            raise InvalidArgumentError(f"queue_offsets {queue_offsets} out of range")
        b.qoff0 = queue_offsets
    else:
        a = _int64_array(queue_offsets, "queue_offsets", ArgumentTypeError)
        if a.ndim != 1 or a.shape[0] != n:
            raise InvalidArgumentError(f"queue_offsets must have one entry per body ({n})")
        if n and a.min() < 0:
            raise InvalidArgumentError("a queue_offset is negative")
        keep.append(a)
        b.qoffs = <int64_t *>cnp.PyArray_DATA(a)
    if born_timestamps_ms is None:
        b.born0 = b.store
    elif isinstance(born_timestamps_ms, int) and not isinstance(born_timestamps_ms, bool):
        if not (-(1 << 63) <= born_timestamps_ms < (1 << 63)):
            raise InvalidArgumentError("born_timestamps_ms is not an i64")
        b.born0 = born_timestamps_ms
    else:
        a = _int64_array(born_timestamps_ms, "born_timestamps_ms", ArgumentTypeError)
        if a.ndim != 1 or a.shape[0] != n:
            raise InvalidArgumentError(f"born_timestamps_ms must have one entry per body ({n})")
        keep.append(a)
        b.borns = <int64_t *>cnp.PyArray_DATA(a)
    return 0


cdef tuple _batch_fields(tags, keys, properties, Py_ssize_t n):
    """Check the shape of tags / keys / properties -> (per_tags, shared_tags, per_keys,
    per_props, shared_props): per_* when the argument holds one entry per record, shared_*
    the encoded value every record gets (None: no such field)."""
    cdef bint per_tags = tags is not None and not isinstance(tags, str)
    cdef bint per_keys = keys is not None and isinstance(keys, list)
    cdef bint per_props = properties is not None and isinstance(properties, list)
    shared_tags = shared_props = None
    if tags is not None and not per_tags:
        shared_tags = _encode_tags(tags)
    if keys is not None and not per_keys:
        raise ArgumentTypeError("keys must be None or a list with one tuple of str per body")
    if properties is not None and not per_props:
        shared_props = _encode_props(properties)
    if per_tags and not isinstance(tags, (list, tuple)):
        raise ArgumentTypeError(
            f"tags must be None, a str, or a list of str, not {type(tags).__name__}")
    if per_tags and len(tags) != n:
        raise InvalidArgumentError(f"tags must be None, a str, or a list of {n} entries")
    if per_keys and len(keys) != n:
        raise InvalidArgumentError(f"keys must have one entry per body ({n})")
    if per_props and len(properties) != n:
        raise InvalidArgumentError(f"properties must have one entry per body ({n})")
    return (per_tags, shared_tags, per_keys, per_props, shared_props)


cdef int _gather_batch(CommitLog self, Batch *b, tuple bt, bytes tb, tags, keys, properties,
                       tuple fields, list keep) except -1:
    """Pass 1: every record's pointers and lengths, every limit checked."""
    cdef bint per_tags = fields[0], per_keys = fields[2], per_props = fields[3]
    cdef bytes shared_tags = fields[1], shared_props = fields[4], e
    cdef int64_t shared_hash = 0, S = self.segment_size_bytes, max_body = self.max_message_bytes
    cdef int64_t total = 0
    cdef Py_ssize_t j
    cdef RecSrc *s
    cdef RecSrc *src = b.src             # locals: the stores below could alias *b
    cdef uint32_t *sizes = b.sizes
    cdef const char *topic = PyBytes_AS_STRING(tb)
    cdef uint32_t topic_len = <uint32_t>PyBytes_GET_SIZE(tb)
    cdef bint shared_tagged = shared_tags is not None and PyBytes_GET_SIZE(shared_tags) > 0
    # one branch per record when there are no tags, keys or properties at all
    cdef const char *pprops = b.pprops
    cdef const uint32_t *plens = b.plens
    cdef bint any_fields = (per_tags or per_keys or per_props or shared_tagged or
                            shared_props is not None or pprops != NULL)
    if shared_tagged:
        shared_hash = _tag_hash(shared_tags)
    for j in range(b.n):
        s = &src[j]
        o = bt[j]
        if PyBytes_CheckExact(o) and PyBytes_GET_SIZE(o) <= max_body:
            s.body = PyBytes_AS_STRING(o)           # the common case, inline
            s.body_len = <uint32_t>PyBytes_GET_SIZE(o)
        else:
            if b.bufs == NULL and not PyBytes_CheckExact(o):
                b.bufs = <Py_buffer *>calloc(b.n, sizeof(Py_buffer))
                b.held = <char *>calloc(b.n, 1)
                if b.bufs == NULL or b.held == NULL:
                    raise MemoryError()
            _set_body(s, o, b.bufs + j if b.bufs != NULL else NULL,
                      b.held + j if b.held != NULL else NULL, max_body, j)
        s.topic = topic
        s.topic_len = topic_len
        if any_fields:
            if per_tags:
                g = tags[j]
                if g is not None:
                    e = _encode_tags(g)
                    keep.append(e)
                    _set_tags(s, e, _tag_hash(e))
            elif shared_tagged:
                _set_tags(s, shared_tags, shared_hash)
            if per_keys:
                g = keys[j]
                if g is not None and len(g):
                    e = _encode_keys(g)
                    keep.append(e)
                    _set_keys(s, e)
            if per_props:
                g = properties[j]
                if g is not None:
                    e = _encode_props(g)
                    keep.append(e)
                    _set_props(s, e)
            elif shared_props is not None:
                _set_props(s, shared_props)
            elif pprops != NULL:
                s.props = pprops
                s.props_len = plens[j]
                pprops += plens[j]
        sizes[j] = _record_size(s, S, j)
        total += sizes[j]
    b.total = total
    return 0


cdef int _place_batch(CommitLog self, Batch *b) except -1:
    """Write lock held, everything checked: pass 2 lays the records out (positions, a
    BLANK at each segment tail), every file they need is created, pass 3 encodes them."""
    cdef BatchTarget t
    cdef Py_ssize_t j, n = b.n
    cdef int64_t S = self.segment_size_bytes
    cdef int64_t pos = self._end, cs = self._cur_start
    cdef int64_t *posp = b.posp
    cdef const uint32_t *sizes = b.sizes
    cdef list new_segs
    cdef list blanks = []
    cdef Mapping m
    cdef int err = 0
    for j in range(n):
        if <int64_t>sizes[j] + HDR > cs + S - pos:
            blanks.append(pos)
            pos = cs + S
            cs = pos
        posp[j] = pos
        pos += sizes[j]
    b.first_index = self._next_index
    # every file the batch needs exists before one byte is written
    new_segs = _map_range_for(self, b.posp[n - 1], b.first_index + n - 1)
    memset(&t, 0, sizeof(BatchTarget))
    try:
        _batch_target(self, b, new_segs, &t)
        if pos - self._end >= NOGIL_BYTES:
            with nogil:
                err = _write_batch(b, &t)
        else:   # (a small batch: as _verify_span, keeping the GIL is cheaper)
            err = _write_batch(b, &t)
    finally:
        free(t.segfd)
        free(t.idxaddr)
        free(t.iov)
    if err:
        # nothing of the batch is published (the end has not moved); what reached the
        # files lies past the end, where recovery finds a torn tail
        for m in new_segs:
            try:
                os.unlink(m.path)
            except OSError:
                pass
        _fail(self, f"writing the log ({self._cur.path})", err)
    for bp in blanks:
        zero_stale_tail(self, _new_seg_at(self, new_segs, bp), bp)
    for m in new_segs:
        _install_segment(self, m)
        self.n_blank += 1
    _entry(self, b.first_index + n - 1, True)   # keep the cached index file current
    _advance_end(self, b.posp[n - 1] + b.sizes[n - 1], b.first_index + n, b.term, b.store,
                 n, b.total, False)
    return 0


cdef int _batch_target(CommitLog self, const Batch *b, list new_segs,
                       BatchTarget *t) except -1:
    """The files pass 3 writes to, and the raft-index population hint advanced before it
    (the write cannot fail for lack of space: every block is fallocated)."""
    cdef Py_ssize_t j, nseg = 1 + len(new_segs), n = b.n
    cdef int64_t nidx
    cdef Mapping m
    t.S = self.segment_size_bytes
    t.N = self.index_file_entries
    t.k_cur = self._cur_start // t.S
    t.end = self._end
    t.f0 = (b.first_index - 1) // t.N
    nidx = (b.first_index + n - 2) // t.N - t.f0 + 1
    if self._stage == NULL:
        self._stage = <char *>malloc(STAGE_BYTES)
    t.stage = self._stage
    if b.total >= PAR_WRITE_BYTES and not self._no_writer:
        if self._ring == NULL:
            self._ring = <char *>malloc(QL_WRITER_SLOTS * SLOT_STAGE)
        if self._ring_iov == NULL:
            self._ring_iov = <iovec *>malloc(QL_WRITER_SLOTS * IOV_MAX_N * sizeof(iovec))
        if self._writer == NULL and self._ring != NULL and self._ring_iov != NULL:
            self._writer = ql_writer_new()     # NULL (no thread): write inline
        if self._writer != NULL:
            t.w = self._writer
            t.ring = self._ring
            t.ring_iov = self._ring_iov
    t.segfd = <int *>malloc(nseg * sizeof(int))
    t.idxaddr = <char **>malloc(nidx * sizeof(char *))
    t.iov = <iovec *>malloc(IOV_MAX_N * sizeof(iovec))
    if t.segfd == NULL or t.idxaddr == NULL or t.iov == NULL or t.stage == NULL:
        raise MemoryError()
    t.segfd[0] = write_fd(self._cur)
    for j in range(1, nseg):
        t.segfd[j] = write_fd(<Mapping>new_segs[j - 1])
    for j in range(nidx):
        t.idxaddr[j] = _idx_file(self, t.f0 + j, False).addr
    # Raft-index pages the preparer has not faulted in yet are populated by the batch
    # itself (one madvise instead of a page fault per 4 KiB).
    m = _idx_file(self, t.f0, False)
    t.ipop_from = max(m.populated, (b.first_index - m.start) * IDX_ENTRY)
    t.ipop_to = min(b.first_index + n - m.start, t.N) * IDX_ENTRY
    if t.ipop_to > m.populated:
        m.populated = t.ipop_to
    return 0


cdef void _free_batch(Batch *b) noexcept:
    cdef Py_ssize_t j
    if b.bufs != NULL:
        for j in range(b.n):
            if b.held[j]:
                PyBuffer_Release(&b.bufs[j])
    free(b.bufs)
    free(b.held)
    free(b.src)
    free(b.sizes)


# Pass 3 writes through an Out: the file range [off, off + len) is pending in iov[0..n),
# staged bytes in stage[0 .. sp) (up to stage_end) and big bodies straight from the
# caller's buffers. With a writer thread (w), the Out writes into ring slot `slot`'s
# staging buffer and iovec array; a flushed piece is queued for the thread and the Out
# goes on in the next slot, once the piece queued in it before has been written. The last
# staged record's CRC is pending (crc_at != NULL: see encode_staged) until the next record
# is staged or the piece is flushed.
cdef struct Out:
    char *crc_at
    size_t crc_staged
    const char *crc_body
    uint32_t crc_body_len
    int fd
    int64_t off, len
    iovec *iov
    int n
    char *stage
    char *sp
    char *stage_end
    ql_writer *w
    int slot
    char *ring
    iovec *ring_iov


cdef inline void _out_add(Out *o, const char *p, size_t len) noexcept nogil:
    # the caller keeps n below IOV_MAX_N; a piece continuing the last one extends it
    cdef iovec *last
    if len == 0:
        return
    if o.n > 0:
        last = &o.iov[o.n - 1]
        if <const char *>last.iov_base + last.iov_len == p:
            last.iov_len += len
            o.len += len
            return
    o.iov[o.n].iov_base = <void *>p
    o.iov[o.n].iov_len = len
    o.n += 1
    o.len += len


cdef inline void _out_settle(Out *o) noexcept nogil:
    # the pending CRC, if any, is written into its record
    if o.crc_at != NULL:
        crc_staged(o.crc_at, o.crc_staged, o.crc_body, o.crc_body_len)
        o.crc_at = NULL


cdef inline void _out_slot(Out *o, int slot) noexcept nogil:
    o.slot = slot
    o.stage = o.ring + slot * SLOT_STAGE
    o.stage_end = o.stage + SLOT_STAGE
    o.iov = o.ring_iov + slot * IOV_MAX_N


cdef inline int _out_flush(Out *o) noexcept nogil:
    cdef int err = 0
    _out_settle(o)
    if o.n and o.w != NULL:
        ql_writer_post(o.w, o.fd, o.iov, o.n, o.off)
        _out_slot(o, (o.slot + 1) % QL_WRITER_SLOTS)
        # the piece queued in that slot before is written: its buffers are free
        err = ql_writer_wait(o.w, QL_WRITER_SLOTS - 1)
    elif o.n:
        err = ql_pwritev_all(o.fd, o.iov, o.n, o.off)
    o.off += o.len
    o.len = 0
    o.n = 0
    o.sp = o.stage
    return err


cdef int _write_batch(const Batch *b, const BatchTarget *t) noexcept nogil:
    # -> 0 or an errno; with a writer thread, only once its last piece is written (the
    # pieces point into the caller's bodies and the staging buffers).
    cdef int err = _encode_write(b, t), err2
    if t.w != NULL:
        err2 = ql_writer_wait(t.w, 0)
        if err == 0:
            err = err2
    return err


cdef int _encode_write(const Batch *b, const BatchTarget *t) noexcept nogil:
    # Pass 3: encode every record into the staging buffer (a big body stays in the
    # caller's buffer) and pwritev them, write each raft-index entry, a BLANK where a
    # record moves on to the next segment. -> 0 or an errno. The columns are copied to
    # locals: stores through the index mapping could alias the structs as far as the
    # compiler knows.
    cdef const RecSrc *src = b.src
    cdef const uint32_t *sizes = b.sizes
    cdef const int64_t *posp = b.posp
    cdef const int64_t *qids = b.qids
    cdef const int64_t *qoffs = b.qoffs
    cdef const int64_t *borns = b.borns
    cdef int64_t qid0 = b.qid0, qoff0 = b.qoff0, born0 = b.born0
    cdef int64_t term = b.term, store = b.store, first_index = b.first_index
    cdef uint32_t flags = b.flags
    cdef Py_ssize_t j, n = b.n
    cdef int64_t S = t.S, N = t.N
    cdef int64_t pos = t.end, cs = t.k_cur * S, seg = 0, index
    cdef int64_t fcur = 0
    cdef char *ibase = t.idxaddr[0]
    cdef int64_t islot = (first_index - 1) - t.f0 * N
    cdef char *q
    cdef bint apart
    cdef int err
    cdef Out o
    o.fd = t.segfd[0]
    o.off = pos - cs
    o.len = 0
    o.n = 0
    o.w = t.w
    o.ring = t.ring
    o.ring_iov = t.ring_iov
    if o.w != NULL:
        _out_slot(&o, 0)
    else:
        o.iov = t.iov
        o.stage = t.stage
        o.stage_end = t.stage + STAGE_BYTES
    o.sp = o.stage
    o.crc_at = NULL
    if t.ipop_to - t.ipop_from >= 4096:
        ql_populate_write(ibase, t.ipop_from & ~(<int64_t>4095),
                          t.ipop_to - (t.ipop_from & ~(<int64_t>4095)))
    for j in range(n):
        if o.n >= IOV_MAX_N - 2 or o.stage_end - o.sp < STAGE_ROOM or \
                (o.w != NULL and o.len >= PAR_PIECE_BYTES):
            err = _out_flush(&o)
            if err:
                return err
        if posp[j] != pos:
            # the rest of this segment becomes a BLANK; the record starts the next one
            write_blank(o.sp, <uint64_t>pos, <uint32_t>(cs + S - pos))
            _out_add(&o, o.sp, HDR)
            o.sp += HDR
            err = _out_flush(&o)
            if err:
                return err
            seg += 1
            cs += S
            pos = cs
            o.fd = t.segfd[seg]
            o.off = 0
        index = first_index + j
        apart = src[j].body_len >= APART_BODY
        q = encode_staged(o.sp, &src[j], <uint64_t>index, <uint64_t>term, <uint64_t>pos,
                          <uint64_t>(qoffs[j] if qoffs != NULL else qoff0 + j),
                          borns[j] if borns != NULL else born0, store,
                          <uint32_t>(qids[j] if qids != NULL else qid0), sizes[j], flags,
                          apart)
        _out_settle(&o)                 # the previous record's CRC, now that j is stored
        o.crc_at = o.sp
        o.crc_staged = <size_t>(q - o.sp)
        o.crc_body = src[j].body
        o.crc_body_len = src[j].body_len if apart else 0
        _out_add(&o, o.sp, <size_t>(q - o.sp))
        o.sp = q
        if apart:
            _out_add(&o, src[j].body, src[j].body_len)
        if islot == N:
            fcur += 1
            ibase = t.idxaddr[fcur]
            islot = 0
        write_index(ibase + islot * IDX_ENTRY, <uint64_t>pos, <uint64_t>term, sizes[j],
                    T_MESSAGE)
        islot += 1
        pos += sizes[j]
    return _out_flush(&o)
