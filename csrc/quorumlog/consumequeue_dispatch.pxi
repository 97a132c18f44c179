# Included by _consumequeue.pyx: dispatch -- the loops that write consume-queue entries for
# committed records (from CommitLog.scan columns, from the store's own append results, one
# record at a time), all through one fast path; anything else is the caller's slow path.

cdef inline bint _holds(ConsumeQueue cq, int64_t off, int64_t pos) noexcept:
    """True when the queue's current file already holds entry `off` pointing at `pos` (a
    re-dispatch). False otherwise -- another position (two records claim one offset) or an
    entry outside the current file -- so the caller leaves the record to the store's slow
    path, which checks it and reports a conflict; an offset is never silently skipped."""
    cdef CQFile f = cq.cur
    if f is None or off < f.first_offset or off - f.first_offset >= f.capacity:
        return False
    return _cq_entry(f, off - f.first_offset).position == pos


cdef inline bint _dispatch_fast(ConsumeQueue cq, int64_t off, int64_t pos, int32_t size,
                                int64_t tag_hash) noexcept:
    """Write the entry of offset `off` when it is the queue's next one in its current file,
    or find it already there for this position -> True; False leaves the record to the
    slow path (empty queue, new file, gap, an offset held for another position)."""
    cdef CQFile f
    if cq.empty:
        return False
    if off != cq.next_offset:
        return off < cq.next_offset and _holds(cq, off, pos)
    f = cq.cur
    if f is None or off - f.first_offset >= f.capacity or off < f.first_offset:
        return False
    _put_entry(f, off - f.first_offset, pos, size, tag_hash)
    cq.next_offset = off + 1
    return True


def dispatch(dict topics, const int64_t[:] position, const int32_t[:] size,
             const int32_t[:] queue_id, const int64_t[:] queue_offset,
             const int64_t[:] tag_hash, const int64_t[:] topic_hash,
             const uint8_t[:] rtype, Py_ssize_t start):
    """Write consume-queue entries for records [start, n) of the given header columns.

    `topics` maps topic_hash -> list of ConsumeQueue (indexed by queue id). Non-MESSAGE
    records are skipped, as are offsets a queue already holds (re-dispatch after a lagging
    checkpoint) when the entry there points at the same position. Returns the index of the
    first record the fast path cannot handle (unknown topic or queue, empty queue, new file,
    gap, an offset held for another position) or n when every record was handled."""
    cdef Py_ssize_t i, n = position.shape[0]
    cdef int64_t th, last_th = 0
    cdef int32_t qid
    cdef list qlist = None
    for i in range(start, n):
        if rtype[i] != T_MESSAGE:
            continue
        th = topic_hash[i]
        if qlist is None or th != last_th:
            qlist = topics.get(th)
            if qlist is None:
                return i
            last_th = th
        qid = queue_id[i]
        if qid < 0 or qid >= len(qlist):
            return i
        if not _dispatch_fast(<ConsumeQueue>qlist[qid], queue_offset[i], position[i],
                              size[i], tag_hash[i]):
            return i
    return n


def dispatch_batch(list qlist, const int64_t[:] positions, int64_t end,
                   const int64_t[:] qids, const int64_t[:] offs, int64_t shared_tag_hash,
                   const int64_t[:] tag_hashes, Py_ssize_t start):
    """dispatch() for the store's own just-committed batch of one topic: record i spans
    [positions[i], positions[i+1]) (the last one ends at `end`; the caller checked that no
    BLANK lies inside). Tag hash: `tag_hashes[i]`, or `shared_tag_hash` when tag_hashes is
    None. Returns the index of the first record the fast path cannot place, or n."""
    cdef Py_ssize_t i, n = positions.shape[0], nq = len(qlist)
    cdef int64_t th = shared_tag_hash, qid
    cdef bint per_tag = tag_hashes is not None
    for i in range(start, n):
        qid = qids[i]
        if qid < 0 or qid >= nq:
            return i
        if per_tag:
            th = tag_hashes[i]
        if not _dispatch_fast(<ConsumeQueue>qlist[qid], offs[i], positions[i],
                              <int32_t>((positions[i + 1] if i + 1 < n else end) - positions[i]),
                              th):
            return i
    return n


def dispatch_one(ConsumeQueue cq, int64_t off, int64_t pos, int32_t size, int64_t tag_hash):
    """The fast path of dispatch() for one record -> False when the caller must take the slow
    path (empty queue, new file, gap, offset held for another position); True when written or
    already present at this position."""
    return _dispatch_fast(cq, off, pos, size, tag_hash)
