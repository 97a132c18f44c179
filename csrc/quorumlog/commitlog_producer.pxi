# Included by _commitlog.pyx: a producer batch's per-message properties, encoded in one C
# loop per batch. Every record of a producer batch carries the reserved properties QL_PID,
# QL_SEQ, QL_N (decimal: producer id, sequence, the batch's message count) and QL_I (the
# message's ordinal), first and in that order (quorumlog.store.nativelog reads them at a
# fixed place), then the caller's own. ProducerProperties stands for the list of dicts
# nativelog.producer_properties used to build per message; append_batch encodes it
# without a Python object per message (the caller's own properties are encoded once when
# shared, once per message when given per message).

@cython.final
cdef class ProducerProperties:
    """The properties of messages `first`.. of producer batch (pid, seq) of `count`
    messages: the reserved QL_PID, QL_SEQ, QL_N, QL_I, then `user` (None, one dict for
    every message, or a list with one dict or None per message). A read-only sequence of
    dicts (len = count - first, or len(user) for a list); append_batch(properties=) takes
    it as it is and encodes it in one loop. The caller checks that `user` uses no reserved
    name (nativelog.producer_properties)."""
    cdef readonly object pid, seq, count, first, user
    cdef Py_ssize_t n

    def __init__(self, pid, seq, count, first, user=None):
        for name, v in (("pid", pid), ("seq", seq), ("count", count), ("first", first)):
            if type(v) is not int:
                raise ArgumentTypeError(f"{name} must be int, not {type(v).__name__}")
            if not 0 <= v < (1 << 64):
                raise InvalidArgumentError(f"{name} {v} outside [0, 2**64)")
        if user is not None and not isinstance(user, (dict, list)):
            raise ArgumentTypeError(f"user properties must be None, a dict or a list, not "
                                    f"{type(user).__name__}")
        self.pid, self.seq, self.count, self.first, self.user = pid, seq, count, first, user
        self.n = len(user) if isinstance(user, list) else max(count - first, 0)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        p = self.user[i] if isinstance(self.user, list) else self.user
        d = {"QL_PID": str(self.pid), "QL_SEQ": str(self.seq), "QL_N": str(self.count),
             "QL_I": str(self.first + i)}
        if p:
            d.update(p)
        return d

    def __iter__(self):
        return (self[j] for j in range(self.n))

    def __repr__(self):
        return (f"ProducerProperties(pid={self.pid}, seq={self.seq}, count={self.count}, "
                f"first={self.first}, n={self.n})")


cdef inline char *_put_str(char *p, const char *s, Py_ssize_t n) noexcept nogil:
    # a u16 length prefix and the bytes
    p[0] = <char>(n & 0xFF)
    p[1] = <char>((n >> 8) & 0xFF)
    memcpy(p + 2, s, <size_t>n)
    return p + 2 + n


cdef inline Py_ssize_t _put_decimal(char *p, uint64_t v) noexcept nogil:
    # v in decimal at p (at most 20 digits) -> the number of digits
    cdef char tmp[20]
    cdef Py_ssize_t k = 0, j
    while True:
        tmp[k] = <char>(48 + v % 10)
        k += 1
        v //= 10
        if v == 0:
            break
    for j in range(k):
        p[j] = tmp[k - 1 - j]
    return k


cdef char *_put_prop_u64(char *p, const char *key, Py_ssize_t klen, uint64_t v) noexcept nogil:
    cdef Py_ssize_t d
    p = _put_str(p, key, klen)
    d = _put_decimal(p + 2, v)
    p[0] = <char>d
    p[1] = 0
    return p + 2 + d


cdef bytes _producer_prefix(ProducerProperties pp):
    """QL_PID, QL_SEQ and QL_N, encoded: the part every message of the batch shares."""
    cdef char buf[3 * (2 + 6 + 2 + 20)]
    cdef char *p = buf
    p = _put_prop_u64(p, b"QL_PID", 6, <uint64_t>pp.pid)
    p = _put_prop_u64(p, b"QL_SEQ", 6, <uint64_t>pp.seq)
    p = _put_prop_u64(p, b"QL_N", 4, <uint64_t>pp.count)
    return buf[:p - buf]


cdef bytes _producer_fields(ProducerProperties pp, Py_ssize_t n, list user_enc,
                            bytes shared_user, uint32_t *lens):
    """Every message's encoded properties, back to back in one bytes object; lens[j] the
    length of message j's. user_enc: each message's encoded own properties (None: use
    shared_user, b"" for none)."""
    cdef bytes prefix = _producer_prefix(pp)
    cdef Py_ssize_t plen = PyBytes_GET_SIZE(prefix), j, total = 0, ulen
    cdef Py_ssize_t shared_len = PyBytes_GET_SIZE(shared_user)
    cdef uint64_t first = <uint64_t>pp.first
    cdef bytes out, u
    cdef char *p
    cdef char *start
    cdef const char *up
    if user_enc is None:
        total = n * (plen + 2 + 4 + 2 + 20 + shared_len)
    else:
        for j in range(n):
            total += plen + 2 + 4 + 2 + 20 + PyBytes_GET_SIZE(<bytes>user_enc[j])
    out = PyBytes_FromStringAndSize(NULL, total)
    p = PyBytes_AS_STRING(out)
    for j in range(n):
        start = p
        if user_enc is None:
            up, ulen = PyBytes_AS_STRING(shared_user), shared_len
        else:
            u = <bytes>user_enc[j]
            up, ulen = PyBytes_AS_STRING(u), PyBytes_GET_SIZE(u)
        memcpy(p, PyBytes_AS_STRING(prefix), <size_t>plen)
        p = _put_prop_u64(p + plen, b"QL_I", 4, first + <uint64_t>j)
        memcpy(p, up, <size_t>ulen)
        p += ulen
        lens[j] = <uint32_t>(p - start)
        if lens[j] > MAX_PROPS_FIELD:
            raise InvalidArgumentError(f"properties field over {MAX_PROPS_FIELD} bytes")
    return out[:p - PyBytes_AS_STRING(out)]


cdef bytes _producer_batch_props(ProducerProperties pp, Py_ssize_t n, uint32_t *lens):
    """append_batch's properties for a ProducerProperties of n messages (see
    _producer_fields); the caller's own ones are checked and encoded here."""
    cdef list user_enc = None
    cdef bytes shared = b""
    user = pp.user
    if pp.n != n:
        raise InvalidArgumentError(f"properties must have one entry per body ({n})")
    if isinstance(user, list):
        user_enc = [b"" if u is None else _encode_props(u) for u in user]
    elif user is not None:
        shared = _encode_props(user)
    return _producer_fields(pp, n, user_enc, shared, lens)


def encode_producer_properties(ProducerProperties pp):
    """Each message's encoded properties field, as append_batch writes it (for the
    differential test against the pure-Python codec)."""
    cdef Py_ssize_t n = pp.n, j, o = 0
    cdef uint32_t *lens = <uint32_t *>malloc(max(n, 1) * sizeof(uint32_t))
    if lens == NULL:
        raise MemoryError()
    try:
        buf = _producer_batch_props(pp, n, lens)
        out = []
        for j in range(n):
            out.append(buf[o:o + lens[j]])
            o += lens[j]
        return out
    finally:
        free(lens)


# -- reading the reserved properties back (a new leader's producer table) -----------------
# nativelog.producers() reads QL_PID/QL_SEQ/QL_N/QL_I of every record of a window of up to
# 65,536 entries. One C loop over the whole records of a CommitLog.read view (CRC already
# checked by read) parses each MESSAGE record's first PRODUCER_PREFIX property bytes in
# place: no second scan and CRC pass, no numpy temporaries per byte column.

cdef enum:
    PRODUCER_PREFIX = 96      # property bytes that hold the four reserved ones
    TAG_SKIP = 0              # not a MESSAGE record, or no properties
    TAG_FAST = 1              # the four reserved properties first, in order
    TAG_OTHER = 2             # properties of another layout: the caller parses them


cdef inline bint _tag_value(const uint8_t *b, Py_ssize_t *o_io, Py_ssize_t end,
                            const char *key, Py_ssize_t klen, uint64_t *out) noexcept nogil:
    # key (u16 length prefix) at b[o], then a value of 1..19 decimal digits, all before end
    # (the key and the value's length prefix are checked to fit before either is read)
    cdef Py_ssize_t o = o_io[0], vlen, j
    cdef uint64_t v = 0
    if o + klen + 4 > end or b[o] != klen or b[o + 1] != 0 \
            or memcmp(b + o + 2, key, <size_t>klen) != 0:
        return False
    o += klen + 2
    vlen = b[o] | (<Py_ssize_t>b[o + 1] << 8)
    if vlen < 1 or vlen > 19 or o + 2 + vlen > end:
        return False
    for j in range(vlen):
        if b[o + 2 + j] < 48 or b[o + 2 + j] > 57:
            return False
        v = v * 10 + (b[o + 2 + j] - 48)
    out[0] = v
    o_io[0] = o + 2 + vlen
    return True


cdef Py_ssize_t _tag_loop(const uint8_t *buf, Py_ssize_t size, int64_t *index,
                          int64_t *position, uint64_t *vals, uint8_t *status,
                          int64_t base, Py_ssize_t cap) noexcept nogil:
    # One row per MESSAGE record of buf -> the number of rows; vals: 4 per row
    cdef Py_ssize_t at = 0, n = 0, o, end
    cdef const RecHeader *h
    cdef const uint8_t *p
    cdef uint32_t plen
    cdef uint64_t *v
    while at + HDR <= size and n < cap:
        h = <const RecHeader *>(buf + at)
        if h.total_size < HDR or at + h.total_size > size:
            break
        if h.type == T_MESSAGE:
            index[n] = <int64_t>h.raft_index
            position[n] = base + at
            v = vals + 4 * n
            v[0] = v[1] = v[2] = v[3] = 0
            plen = h.props_len
            p = buf + at + HDR + h.topic_len + h.tags_len + h.keys_len
            end = min(<Py_ssize_t>plen, <Py_ssize_t>PRODUCER_PREFIX)
            o = 0
            if plen >= 8 and p + end <= buf + at + h.total_size \
                    and _tag_value(p, &o, end, b"QL_PID", 6, v) \
                    and _tag_value(p, &o, end, b"QL_SEQ", 6, v + 1) \
                    and _tag_value(p, &o, end, b"QL_N", 4, v + 2) \
                    and _tag_value(p, &o, end, b"QL_I", 4, v + 3):
                status[n] = TAG_FAST
            else:
                v[0] = v[1] = v[2] = v[3] = 0
                status[n] = TAG_OTHER if plen > 0 else TAG_SKIP
            n += 1
        at += h.total_size
    return n


def producer_tags(view, int64_t base, Py_ssize_t max_rows):
    """The producer tags of the whole records `view` (a CommitLog.read view: CRC checked;
    log position `base` on; at most max_rows MESSAGE records: the read's count) ->
    (index, position, vals, status): one row per MESSAGE record;
    vals (n x 4 uint64) QL_PID, QL_SEQ, QL_N, QL_I where status is 1 (the four reserved
    properties first, in order, within the first 96 property bytes), else 0; status 2: the
    record has properties of another layout (nativelog.producer_tag parses those), 0: none."""
    cdef const uint8_t[::1] b = view
    cdef Py_ssize_t size = b.shape[0], cap = min(size // HDR, max(max_rows, 0)), n
    index = np.empty(cap, np.int64)
    position = np.empty(cap, np.int64)
    vals = np.empty((cap, 4), np.uint64)
    status = np.empty(cap, np.uint8)
    cdef int64_t[::1] ix = index, px = position
    cdef uint64_t[:, ::1] vx = vals
    cdef uint8_t[::1] sx = status
    if cap == 0:
        return index, position, vals, status
    with nogil:
        n = _tag_loop(&b[0], size, &ix[0], &px[0], &vx[0, 0], &sx[0], base, cap)
    return index[:n], position[:n], vals[:n], status[:n]
