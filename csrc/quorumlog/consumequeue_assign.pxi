# Included by _consumequeue.pyx: what the store works out for a batch before appending it --
# the queue of each message (round robin) and its queue offset (per-queue counters), the
# tag hashes, and the total body bytes.

def queue_offsets(const int64_t[:] counters, const int64_t[:] qids):
    """Queue offsets for a batch whose message i goes to queue qids[i]: consecutive per queue
    from `counters` -> (offsets int64[n], new counters). `counters` is not modified (the store
    adopts the new counters only once the log accepted the batch)."""
    cdef Py_ssize_t i, n = qids.shape[0], nq = counters.shape[0]
    cdef int64_t q
    new = np.array(counters, dtype=np.int64)
    offs = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] c = new
    cdef int64_t[::1] o = offs
    for i in range(n):
        q = qids[i]
        if q < 0 or q >= nq:
            raise ValueError(f"queue id {q} outside [0, {nq})")
        o[i] = c[q]
        c[q] += 1
    return offs, new


def round_robin(const int64_t[:] counters, Py_ssize_t start, Py_ssize_t n):
    """Round-robin queue choice for n messages from queue `start`, with their queue offsets
    -> (qids int64[n], offsets int64[n], new counters); `counters` is not modified."""
    cdef Py_ssize_t i, nq = counters.shape[0]
    cdef int64_t q = start
    new = np.array(counters, dtype=np.int64)
    qids = np.empty(n, dtype=np.int64)
    offs = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] c = new
    cdef int64_t[::1] qv = qids
    cdef int64_t[::1] o = offs
    for i in range(n):
        qv[i] = q
        o[i] = c[q]
        c[q] += 1
        q += 1
        if q == nq:
            q = 0
    return qids, offs, new


cpdef int64_t fnv1a64(bytes data):
    """FNV-1a 64 of `data` as a signed int64; 0 for empty data (format.md, tag hash)."""
    cdef const char *p = data
    return <int64_t>fnv1a(p, len(data))


def tag_hashes(list tags):
    """FNV-1a 64 of each tag (None -> 0) as an int64 array."""
    cdef Py_ssize_t i, n = len(tags)
    out = np.zeros(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef dict cache = {}
    for i in range(n):
        t = tags[i]
        if t is None:
            continue
        h = cache.get(t)
        if h is None:
            h = fnv1a64(t.encode("utf-8")) if isinstance(t, str) else 0
            cache[t] = h
        o[i] = h
    return out


def body_bytes(bodies):
    """Total length of a list/tuple of bytes-like bodies (TypeError for anything else)."""
    cdef Py_ssize_t total = 0
    cdef object b
    for b in bodies:
        if PyBytes_CheckExact(b):
            total += PyBytes_GET_SIZE(b)
        else:
            total += len(memoryview(b))
    return total
