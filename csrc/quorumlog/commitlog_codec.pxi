# Included by _commitlog.pyx: the record codec -- encoding a record into a mapping, checking
# one (verify_record and the format limits of a replicated record), decoding one into a
# Record -- and the checksum functions the module exports (crc32c, fnv1a64).

def crc32c(data, uint32_t value=0):
    """CRC32C of a bytes-like object; `value` continues a previous result."""
    cdef Py_buffer buf
    PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
    try:
        with nogil:
            value = ql_crc32c_update(value ^ 0xFFFFFFFFu, buf.buf, <size_t>buf.len) ^ 0xFFFFFFFFu
    finally:
        PyBuffer_Release(&buf)
    return value


def crc32c_software(data):
    """The portable table CRC32C (for tests comparing it with the hardware path)."""
    cdef Py_buffer buf
    PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
    try:
        return ql_crc32c_sw(buf.buf, <size_t>buf.len)
    finally:
        PyBuffer_Release(&buf)


def crc32c_hardware():
    """True when the SSE4.2 instruction is in use."""
    return bool(ql_crc32c_hw())


_CRC_PATHS = {"table": 1, "sse42": 2, "fold256": 8, "fold": 4}


def crc32c_paths():
    """The CRC32C implementations this CPU runs: "table" always, "sse42" (the crc32
    instruction), "fold256" (VPCLMULQDQ from 256 bytes on, AVX2), "fold" (the same on
    AVX-512); crc32c uses the last."""
    cdef int have = ql_crc32c_paths()
    return tuple(name for name, bit in _CRC_PATHS.items() if have & bit)


def crc32c_path(path, data, uint32_t value=0):
    """crc32c through one named implementation (tests compare them)."""
    cdef Py_buffer buf
    if path not in crc32c_paths():
        raise ValueError(f"CRC32C path {path!r} is not available here: {crc32c_paths()}")
    PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
    try:
        return ql_crc32c_update_path(_CRC_PATHS[path], value ^ 0xFFFFFFFFu, buf.buf,
                                     <size_t>buf.len) ^ 0xFFFFFFFFu
    finally:
        PyBuffer_Release(&buf)


def fnv1a64(data):
    """FNV-1a 64 of bytes (str is UTF-8 encoded) as a signed int; 0 for empty input."""
    if isinstance(data, str):
        data = data.encode()
    cdef const unsigned char[::1] v = data
    if v.shape[0] == 0:
        return 0
    return <int64_t>fnv1a(<const char *>&v[0], v.shape[0])


# A record at p (inside a mapping with `avail` bytes to the segment end) is checked here;
# the return code says what is wrong (0: intact). The caller names file and offset.
cdef enum:
    V_OK = 0
    V_SHORT = 1       # fewer than 96 bytes left in the segment
    V_MAGIC = 2
    V_VERSION = 3
    V_TYPE = 4
    V_SIZE = 5
    V_POSITION = 6
    V_LENGTHS = 7
    V_CRC = 8
    V_INDEX = 9       # raft index out of sequence (or term decreasing)

_VERIFY_REASONS = {V_SHORT: "header does not fit in the segment", V_MAGIC: "bad magic",
                   V_VERSION: "bad version", V_TYPE: "bad record type",
                   V_SIZE: "bad total_size", V_POSITION: "position field mismatch",
                   V_LENGTHS: "field lengths disagree with total_size", V_CRC: "CRC mismatch",
                   V_INDEX: "raft index or term out of sequence"}


cdef int verify_record(const char *p, int64_t avail, uint64_t position,
                       bint check_crc) noexcept nogil:
    cdef const RecHeader *h = <const RecHeader *>p
    cdef uint32_t size, crc
    if avail < HDR:
        return V_SHORT
    if h.magic != MAGIC:
        return V_MAGIC
    if h.version != VERSION:
        return V_VERSION
    if h.type < T_MESSAGE or h.type > T_BLANK:
        return V_TYPE
    size = h.total_size
    if size < HDR or size > avail:
        return V_SIZE
    if h.position != position:
        return V_POSITION
    if h.type == T_BLANK:
        if size != avail:
            return V_SIZE
        if check_crc and ql_crc32c(p + 4, HDR - 4) != h.crc:
            return V_CRC
        return V_OK
    if <uint64_t>HDR + h.topic_len + h.tags_len + h.keys_len + h.props_len + h.body_len != size:
        return V_LENGTHS
    if h.raft_index == 0:
        return V_LENGTHS
    if check_crc and ql_crc32c(p + 4, size - 4) != h.crc:
        return V_CRC
    return V_OK


cdef inline void write_blank(char *p, uint64_t position, uint32_t size) noexcept nogil:
    cdef RecHeader *h = <RecHeader *>p
    memset(p, 0, HDR)
    h.total_size = size
    h.magic = MAGIC
    h.version = VERSION
    h.type = T_BLANK
    h.position = position
    h.crc = ql_crc32c(p + 4, HDR - 4)


# One record's variable fields, gathered before anything is written.
cdef struct RecSrc:
    const char *topic
    const char *tags
    const char *keys
    const char *props
    const char *body
    uint32_t topic_len
    uint32_t tags_len
    uint32_t keys_len
    uint32_t props_len
    uint32_t body_len
    int64_t tag_hash


cdef inline char *encode_head(char *dst, const RecSrc *s, uint8_t rtype, uint32_t flags,
                              uint64_t index, uint64_t term, uint64_t position,
                              uint64_t queue_offset, int64_t born, int64_t store,
                              uint32_t queue_id, uint32_t size) noexcept nogil:
    # the header and the fields before the body (CRC not set) -> where the body goes
    cdef RecHeader *h = <RecHeader *>dst
    cdef char *p = dst + HDR
    h.total_size = size
    h.magic = MAGIC
    h.version = VERSION
    h.type = rtype
    h.flags = flags
    h.raft_index = index
    h.raft_term = term
    h.position = position
    h.queue_offset = queue_offset
    h.born_ts = born
    h.store_ts = store
    h.tag_hash = s.tag_hash
    h.queue_id = queue_id
    h.topic_len = <uint16_t>s.topic_len
    h.tags_len = <uint16_t>s.tags_len
    h.keys_len = s.keys_len
    h.props_len = s.props_len
    h.body_len = s.body_len
    h.reserved = 0
    if s.topic_len:
        memcpy(p, s.topic, s.topic_len)
        p += s.topic_len
    if s.tags_len:
        memcpy(p, s.tags, s.tags_len)
        p += s.tags_len
    if s.keys_len:
        memcpy(p, s.keys, s.keys_len)
        p += s.keys_len
    if s.props_len:
        memcpy(p, s.props, s.props_len)
        p += s.props_len
    return p


cdef inline void encode_record(char *dst, const RecSrc *s, uint8_t rtype, uint32_t flags,
                               uint64_t index, uint64_t term, uint64_t position,
                               uint64_t queue_offset, int64_t born, int64_t store,
                               uint32_t queue_id, uint32_t size) noexcept nogil:
    cdef char *p = encode_head(dst, s, rtype, flags, index, term, position, queue_offset,
                               born, store, queue_id, size)
    if s.body_len:
        memcpy(p, s.body, s.body_len)
    (<RecHeader *>dst).crc = ql_crc32c(dst + 4, size - 4)


cdef inline char *encode_staged(char *dst, const RecSrc *s, uint64_t index, uint64_t term,
                                uint64_t position, uint64_t queue_offset, int64_t born,
                                int64_t store, uint32_t queue_id, uint32_t size,
                                uint32_t flags, bint body_apart) noexcept nogil:
    # A MESSAGE into the staging buffer, its body too unless `body_apart` (the caller then
    # writes the body from s.body) -> the end of what was staged. The CRC is left unset:
    # the caller sets it with crc_staged once the next record is encoded, because reading
    # bytes back right after storing them in 1-8 byte pieces stalls (a wide load cannot
    # be forwarded from several narrower stores): ~9 ns of a 100 B record's ~25.
    cdef char *p = encode_head(dst, s, T_MESSAGE, flags, index, term, position, queue_offset,
                               born, store, queue_id, size)
    if body_apart:
        return p
    if s.body_len:
        memcpy(p, s.body, s.body_len)
    return p + s.body_len


cdef inline void crc_staged(char *dst, size_t staged, const char *body,
                            uint32_t body_len) noexcept nogil:
    # The CRC of a record encode_staged put at dst: its `staged` bytes, then `body_len`
    # bytes at `body` when the body was left apart (else body_len is 0). A staged record
    # is CRC'd in one pass (one call over ~200 B of a small record runs the interleaved
    # tier; two calls would run two serial chains).
    cdef uint32_t c = ql_crc32c_update(0xFFFFFFFFu, dst + 4, staged - 4)
    if body_len:
        c = ql_crc32c_update(c, body, body_len)
    (<RecHeader *>dst).crc = c ^ 0xFFFFFFFFu


cdef bint _entries_fill(const char *p, Py_ssize_t n, int per_entry) noexcept:
    """True when `n` bytes at p are exactly a sequence of u16-length-prefixed strings
    (`per_entry` of them per entry: 1 for keys, 2 for properties)."""
    cdef Py_ssize_t off = 0
    cdef uint16_t ln
    cdef int r
    while off < n:
        for r in range(per_entry):
            if n - off < 2:
                return False
            memcpy(&ln, p + off, 2)
            off += 2 + ln
            if off > n:
                return False
    return off == n


cdef str _replicated_fault(const char *p, int64_t max_body):
    """What is wrong with the (CRC-checked, length-consistent) record at p beyond what
    verify_record checks -- the format limits an append enforces -- or None."""
    cdef const RecHeader *h = <const RecHeader *>p
    cdef const char *q = p + HDR
    cdef int tf
    if h.reserved != 0:
        return "reserved field is not 0"
    if h.body_len > max_body:
        return f"body of {h.body_len} bytes is over max_message_bytes ({max_body})"
    if h.type != T_MESSAGE:
        if (h.topic_len or h.tags_len or h.keys_len or h.props_len or h.queue_id or
                h.queue_offset or h.flags or h.tag_hash):
            return "a non-MESSAGE record has message fields set"
        if h.type == T_NOOP and h.body_len:
            return "a NOOP record has a body"
        return None
    tf = topic_fault(q, h.topic_len)
    if tf == TOPIC_LENGTH:
        return f"topic_len {h.topic_len} outside 1..{MAX_TOPIC}"
    if tf == TOPIC_CHARS:
        return "topic contains NUL or '/'"
    if tf == TOPIC_DOTS:
        return "topic is '.' or '..'"
    try:
        q[:h.topic_len].decode("utf-8")
        if h.tags_len:
            q[h.topic_len:h.topic_len + h.tags_len].decode("utf-8")
    except UnicodeDecodeError:
        return "topic or tags are not valid UTF-8"
    if h.queue_id >= MAX_QUEUE_ID:
        return f"queue_id {h.queue_id} is not below {MAX_QUEUE_ID}"
    if h.tags_len > MAX_TAGS:
        return f"tags_len {h.tags_len} over {MAX_TAGS}"
    if <int64_t>h.tag_hash != <int64_t>fnv1a(q + h.topic_len, h.tags_len):
        return "tag_hash does not match the tags"
    if h.keys_len > MAX_KEYS_FIELD or h.props_len > MAX_PROPS_FIELD:
        return "keys or properties field over 32768 bytes"
    q += h.topic_len + h.tags_len
    if not _entries_fill(q, h.keys_len, 1):
        return "keys field is not a whole number of length-prefixed keys"
    if not _entries_fill(q + h.keys_len, h.props_len, 2):
        return "properties field is not a whole number of length-prefixed pairs"
    return None


# ---------------------------------------------------------------------------------------
# decoding into the Record class decode_at/record return
# ---------------------------------------------------------------------------------------
from quorumlog.format import Record as _Record


cdef str _utf8_at(const char *p, Py_ssize_t n):
    return p[:n].decode("utf-8")


cdef Py_ssize_t _string_end(const char *p, Py_ssize_t o, Py_ssize_t end) except -1:
    """End of the u16-length-prefixed string at offset o, which must lie before `end`."""
    cdef uint16_t n
    if end - o < 2:
        raise ValueError("a key or property runs past its field")
    memcpy(&n, p + o, 2)
    if o + 2 + n > end:
        raise ValueError("a key or property runs past its field")
    return o + 2 + n


def _decode(view):
    """A Record from one whole (already CRC-checked) record's bytes."""
    cdef const unsigned char[::1] v = view
    cdef const char *p
    cdef const RecHeader *h
    cdef Py_ssize_t o, e, end
    if v.shape[0] < HDR:
        raise ValueError(f"a record is at least {HDR} bytes, not {v.shape[0]}")
    p = <const char *>&v[0]
    h = <const RecHeader *>p
    if (<int64_t>HDR + h.topic_len + h.tags_len + h.keys_len + h.props_len + h.body_len >
            v.shape[0]):
        raise ValueError("the record's field lengths run past its bytes")
    o = HDR
    topic = _utf8_at(p + o, h.topic_len)
    o += h.topic_len
    tags = _utf8_at(p + o, h.tags_len) if h.tags_len else None
    o += h.tags_len
    keys = []
    end = o + h.keys_len
    while o < end:
        e = _string_end(p, o, end)
        keys.append(_utf8_at(p + o + 2, e - o - 2))
        o = e
    props = {}
    end = o + h.props_len
    while o < end:
        e = _string_end(p, o, end)
        k = _utf8_at(p + o + 2, e - o - 2)
        o = e
        e = _string_end(p, o, end)
        props[k] = _utf8_at(p + o + 2, e - o - 2)
        o = e
    body = p[o:o + h.body_len]
    return _Record(type=h.type, flags=h.flags, index=h.raft_index, term=h.raft_term,
                   position=h.position, queue_offset=h.queue_offset,
                   born_timestamp_ms=h.born_ts, store_timestamp_ms=h.store_ts,
                   tag_hash=h.tag_hash, queue_id=h.queue_id, topic=topic, tags=tags,
                   keys=tuple(keys), properties=props, body=body, size=h.total_size)
