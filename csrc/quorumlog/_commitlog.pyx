# The native commit log (issue 2): mmap'd fixed-size segments, the record codec of
# docs/format.md, leader/follower appends, the raft index, zero-copy reads, the RECORD_INFO
# scan, flushing (async / group commit) and recovery. The contract is docs/architecture.md.
#
# Threading model: every structural change (append, truncate, segment deletion, close) runs
# under `_wlock` (a raw PyThread lock, cheap when uncontended) and updates the Python-visible
# state (end position, last index, segment lists) while holding the GIL, so readers and the
# flusher always see a consistent snapshot. Big copies + CRCs, fallocate, msync run without
# the GIL while holding references to the mappings they touch.
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE,
                             PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES)
from cpython.pythread cimport (PyThread_type_lock, PyThread_allocate_lock,
                               PyThread_free_lock, PyThread_acquire_lock,
                               PyThread_release_lock, NOWAIT_LOCK, WAIT_LOCK)
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, int32_t
from libc.string cimport memcpy, memset, memchr
from libc.stdlib cimport malloc, free, calloc
from libc.errno cimport ENOSPC, EDQUOT
cimport numpy as cnp

import errno as _errno
import fcntl
import logging
import os
import struct
import sys
import threading
import time

import numpy as np

from quorumlog.errors import (CorruptLogError, DiskFullError, IndexOutOfRangeError,
                              InvalidArgumentError, InvalidQueueError, InvalidTopicError,
                              LockedError, LogClosedError, MessageTooLargeError,
                              ReplicationError, ConfigError, TopicTypeError, QueueTypeError)
# wrong types: InvalidTypeError (alias ArgumentTypeError) is both TypeError and
# InvalidArgumentError; the topic/queue variants derive from InvalidTopicError/InvalidQueueError
from quorumlog.errors import InvalidTypeError as ArgumentTypeError

cnp.import_array()
log = logging.getLogger(__name__)



if sys.byteorder != "little":  # the format is little-endian and the codec writes natively
    raise ImportError("quorumlog's native commit log needs a little-endian CPU")

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL

cdef extern from "qlsys.h" nogil:
    int64_t ql_now_ms()
    int ql_map_file(const char *path, int64_t size, int create, int always_allocate,
                    void **out_addr, int *created)
    int ql_msync(char *base, int64_t off, int64_t length)
    int ql_zero_range(const char *path, char *base, int64_t off, int64_t length)
    int ql_populate_write(char *base, int64_t off, int64_t length)
    void ql_copy_nt(char *dst, const char *src, size_t n)
    void ql_store_fence()

cdef extern from "<sys/mman.h>" nogil:
    int munmap(void *addr, size_t length)

# ---------------------------------------------------------------------------------------
# format constants (docs/format.md)
# ---------------------------------------------------------------------------------------
cdef enum:
    HDR = 96
    IDX_ENTRY = 24
    MAGIC = 0x4C51
    VERSION = 1
    T_MESSAGE = 1
    T_NOOP = 2
    T_CONFIG = 3
    T_META = 4
    T_BLANK = 5
    MAX_TOPIC = 255
    MAX_TAGS = 255
    MAX_KEYS_FIELD = 32768
    MAX_PROPS_FIELD = 32768
    MAX_QUEUE_ID = 65536
    CP_SIZE = 128
    CP_MAGIC = 0x50434C51
    NOGIL_BYTES = 262144      # release the GIL for batches at least this big
    NT_BODY = 2048            # batch bodies at least this big are copied with streaming stores
    POPULATE_AHEAD = 1048576  # the writer's own populate step ahead of single appends
    # The preparer thread keeps pages faulted in up to BG_POPULATE_AHEAD bytes past the end
    # of the log, in BG_POPULATE_CHUNK steps, and is woken again when fewer than
    # BG_POPULATE_LOW bytes are left: writing through the mapping then finds its pages
    # present instead of paying page allocation + zero fill + page_mkwrite on the append path.
    BG_POPULATE_AHEAD = 67108864
    BG_POPULATE_LOW = 50331648
    BG_POPULATE_CHUNK = 4194304

HEADER_SIZE = HDR
MESSAGE = T_MESSAGE
NOOP = T_NOOP
CONFIG = T_CONFIG
META = T_META
BLANK = T_BLANK
CHECKPOINT_SIZE = CP_SIZE
MAX_BATCH_RECORDS = 1 << 24

cdef packed struct RecHeader:
    uint32_t crc
    uint32_t total_size
    uint16_t magic
    uint8_t version
    uint8_t type
    uint32_t flags
    uint64_t raft_index
    uint64_t raft_term
    uint64_t position
    uint64_t queue_offset
    int64_t born_ts
    int64_t store_ts
    int64_t tag_hash
    uint32_t queue_id
    uint16_t topic_len
    uint16_t tags_len
    uint32_t keys_len
    uint32_t props_len
    uint32_t body_len
    uint32_t reserved

cdef packed struct IdxEntry:
    uint64_t position
    uint64_t term
    uint32_t size
    uint8_t type
    uint8_t pad0
    uint8_t pad1
    uint8_t pad2

cdef packed struct RecInfo:
    int64_t index
    int64_t term
    int64_t position
    int64_t queue_offset
    int64_t born_ts
    int64_t store_ts
    int64_t tag_hash
    int64_t topic_hash
    int32_t size
    int32_t queue_id
    int32_t body_offset
    int32_t body_len
    uint32_t flags
    uint8_t type
    uint8_t pad0
    uint8_t pad1
    uint8_t pad2

RECORD_INFO = np.dtype([
    ("index", "<i8"), ("term", "<i8"), ("position", "<i8"), ("queue_offset", "<i8"),
    ("born_ts", "<i8"), ("store_ts", "<i8"), ("tag_hash", "<i8"), ("topic_hash", "<i8"),
    ("size", "<i4"), ("queue_id", "<i4"), ("body_offset", "<i4"), ("body_len", "<i4"),
    ("flags", "<u4"), ("type", "u1"), ("pad", "u1", (3,)),
])
assert RECORD_INFO.itemsize == sizeof(RecInfo) == 88
assert sizeof(RecHeader) == HDR and sizeof(IdxEntry) == IDX_ENTRY


# ---------------------------------------------------------------------------------------
# small pure functions
# ---------------------------------------------------------------------------------------
cdef inline uint64_t fnv1a(const char *p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 0xcbf29ce484222325ULL
    cdef Py_ssize_t i
    if n == 0:
        return 0
    for i in range(n):
        h = (h ^ <uint8_t>p[i]) * 0x100000001b3ULL
    return h


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


def fnv1a64(data):
    """FNV-1a 64 of bytes (str is UTF-8 encoded) as a signed int; 0 for empty input."""
    if isinstance(data, str):
        data = data.encode()
    cdef const unsigned char[::1] v = data
    if v.shape[0] == 0:
        return 0
    return <int64_t>fnv1a(<const char *>&v[0], v.shape[0])


cdef inline int64_t floordiv(int64_t a, int64_t b) noexcept nogil:
    return a // b


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


cdef inline void encode_record(char *dst, const RecSrc *s, uint8_t rtype, uint32_t flags,
                               uint64_t index, uint64_t term, uint64_t position,
                               uint64_t queue_offset, int64_t born, int64_t store,
                               uint32_t queue_id, uint32_t size, bint nt=False) noexcept nogil:
    # nt: copy a big body with streaming stores and CRC it from the source (the copy is
    # then not read back from the mapping); the caller fences before publishing
    cdef RecHeader *h = <RecHeader *>dst
    cdef char *p = dst + HDR
    cdef uint32_t c
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
    if nt and s.body_len >= NT_BODY:
        ql_copy_nt(p, s.body, s.body_len)
        c = ql_crc32c_update(0xFFFFFFFFu, dst + 4, <size_t>(p - dst) - 4)
        h.crc = ql_crc32c_update(c, s.body, s.body_len) ^ 0xFFFFFFFFu
        return
    if s.body_len:
        memcpy(p, s.body, s.body_len)
    h.crc = ql_crc32c(dst + 4, size - 4)


# ---------------------------------------------------------------------------------------
# argument encoding (validation happens here; nothing is written yet)
# ---------------------------------------------------------------------------------------
cdef dict _topic_cache = {}


cdef bytes _check_topic(object topic):
    """UTF-8 bytes of a valid topic (cached per str object value)."""
    cdef bytes b
    cdef Py_ssize_t n
    cdef const char *p
    r = _topic_cache.get(topic)
    if r is not None:
        return <bytes>r
    if not isinstance(topic, str):
        raise TopicTypeError(f"topic must be str, not {type(topic).__name__}")
    try:
        b = (<str>topic).encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidTopicError(f"topic is not valid UTF-8: {e}") from None
    n = len(b)
    if n < 1 or n > MAX_TOPIC:
        raise InvalidTopicError(f"topic must be 1..{MAX_TOPIC} bytes of UTF-8, got {n}")
    p = b
    if memchr(p, 0, n) != NULL or memchr(p, ord("/"), n) != NULL:
        raise InvalidTopicError(f"topic {topic!r} contains NUL or '/'")
    if b == b"." or b == b"..":
        raise InvalidTopicError(f"topic {topic!r} is not a usable directory name")
    if len(_topic_cache) > 4096:
        _topic_cache.clear()
    _topic_cache[topic] = b
    return b


cdef bytes _encode_tags(object tags):
    cdef bytes b
    if not isinstance(tags, str):
        raise ArgumentTypeError(f"tags must be str or None, not {type(tags).__name__}")
    try:
        b = (<str>tags).encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"tags are not valid UTF-8: {e}") from None
    if len(b) > MAX_TAGS:
        raise InvalidArgumentError(f"tags are {len(b)} bytes; the limit is {MAX_TAGS}")
    return b


cdef bytes _encode_keys(object keys):
    cdef list parts = []
    cdef Py_ssize_t total = 0
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (tuple, list)):
        raise ArgumentTypeError(f"keys must be a tuple or list of str, not {type(keys).__name__}")
    for k in keys:
        if not isinstance(k, str):
            raise ArgumentTypeError(f"each key must be str, not {type(k).__name__}")
        try:
            kb = (<str>k).encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(f"key is not valid UTF-8: {e}") from None
        if len(kb) > 65535:
            raise InvalidArgumentError(f"a key is {len(kb)} bytes; the limit is 65535")
        parts.append(struct.pack("<H", len(kb)))
        parts.append(kb)
        total += 2 + len(kb)
        if total > MAX_KEYS_FIELD:
            raise InvalidArgumentError(f"keys field over {MAX_KEYS_FIELD} bytes")
    return b"".join(parts)


cdef bytes _encode_props(object props):
    cdef list parts = []
    cdef Py_ssize_t total = 0
    if not isinstance(props, dict):
        raise ArgumentTypeError(f"properties must be a dict of str to str, not {type(props).__name__}")
    for k, v in (<dict>props).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ArgumentTypeError("property keys and values must be str")
        try:
            kb = (<str>k).encode("utf-8")
            vb = (<str>v).encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(f"property is not valid UTF-8: {e}") from None
        if len(kb) > 65535 or len(vb) > 65535:
            raise InvalidArgumentError("a property key or value is over 65535 bytes")
        parts.append(struct.pack("<H", len(kb)))
        parts.append(kb)
        parts.append(struct.pack("<H", len(vb)))
        parts.append(vb)
        total += 4 + len(kb) + len(vb)
        if total > MAX_PROPS_FIELD:
            raise InvalidArgumentError(f"properties field over {MAX_PROPS_FIELD} bytes")
    return b"".join(parts)


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
    cdef bytes topic
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
    if h.topic_len < 1 or h.topic_len > MAX_TOPIC:
        return f"topic_len {h.topic_len} outside 1..{MAX_TOPIC}"
    topic = q[:h.topic_len]
    if memchr(q, 0, h.topic_len) != NULL or memchr(q, ord("/"), h.topic_len) != NULL:
        return "topic contains NUL or '/'"
    if topic == b"." or topic == b"..":
        return "topic is '.' or '..'"
    try:
        topic.decode("utf-8")
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


def _int64_array(value, str name, exc):
    """A contiguous int64 copy of an integer array-like; `exc` (a TypeError subclass)
    for anything else. Floats would be truncated and bools are not integers here, so
    only integer dtypes are accepted (values must fit an int64)."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        raise exc(f"{name} must be an int or a sequence of int") from None
    if a.dtype.kind == "f" and a.size == 0 and not isinstance(value, np.ndarray):
        a = a.astype(np.int64)      # [] is float64 to numpy
    if a.dtype.kind not in "iu":
        raise exc(f"{name} must hold integers, not {a.dtype}")
    if a.dtype.kind == "u" and a.size and a.max() > 0x7FFFFFFFFFFFFFFF:
        raise InvalidArgumentError(f"{name} has a value beyond int64")
    return np.ascontiguousarray(a, dtype=np.int64)


def _disk_error(int err, str what):
    if err == ENOSPC or err == EDQUOT:
        return DiskFullError(err, f"no space to preallocate {what}", what)
    return OSError(err, os.strerror(err), what)


# ---------------------------------------------------------------------------------------
# Mapping: one mmap'd file exporting a read-only buffer
# ---------------------------------------------------------------------------------------
@cython.final
cdef class Mapping:
    def __cinit__(self):
        self.addr = NULL
        self.size = 0
        self._stride = 1
        self.populated = 0

    def __dealloc__(self):
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
        raise _disk_error(err, f"{what} {path}")
    cdef Mapping m = Mapping.__new__(Mapping)
    m.addr = <char *>addr
    m.size = size
    m.start = start
    m.path = path
    return m


# ---------------------------------------------------------------------------------------
# the record class decode_at/record return
# ---------------------------------------------------------------------------------------
from quorumlog.format import Record as _Record

_HDR_STRUCT = struct.Struct("<IIHBBIQQQQqqqIHHIIII")


def _decode(view):
    """A Record from one whole (already CRC-checked) record's bytes."""
    (crc, size, magic, version, rtype, flags, index, term, position, queue_offset, born,
     store, tag_hash, queue_id, topic_len, tags_len, keys_len, props_len, body_len,
     reserved) = _HDR_STRUCT.unpack_from(view, 0)
    o = HDR
    topic = bytes(view[o:o + topic_len]).decode("utf-8")
    o += topic_len
    tags = bytes(view[o:o + tags_len]).decode("utf-8") if tags_len else None
    o += tags_len
    keys = []
    end = o + keys_len
    while o < end:
        (n,) = struct.unpack_from("<H", view, o)
        keys.append(bytes(view[o + 2:o + 2 + n]).decode("utf-8"))
        o += 2 + n
    props = {}
    end = o + props_len
    while o < end:
        (n,) = struct.unpack_from("<H", view, o)
        k = bytes(view[o + 2:o + 2 + n]).decode("utf-8")
        o += 2 + n
        (n,) = struct.unpack_from("<H", view, o)
        props[k] = bytes(view[o + 2:o + 2 + n]).decode("utf-8")
        o += 2 + n
    body = bytes(view[o:o + body_len])
    return _Record(type=rtype, flags=flags, index=index, term=term, position=position,
                   queue_offset=queue_offset, born_timestamp_ms=born,
                   store_timestamp_ms=store, tag_hash=tag_hash, queue_id=queue_id,
                   topic=topic, tags=tags, keys=tuple(keys), properties=props, body=body,
                   size=size)


def _segment_name(int64_t start):
    return "%020d" % start


# ---------------------------------------------------------------------------------------
# CommitLog
# ---------------------------------------------------------------------------------------
cdef class CommitLog:
    """The commit log of one store directory; see docs/architecture.md for the contract."""

    cdef readonly str path
    cdef readonly int64_t segment_size_bytes
    cdef readonly int64_t index_file_entries
    cdef readonly str flush_mode
    cdef readonly int64_t max_message_bytes
    cdef readonly bint unclean_open
    cdef int64_t flush_interval_ms, checkpoint_interval_ms
    cdef bint preallocate_next
    cdef str _segdir, _idxdir

    # segments: self._segs[k - self._first_seg] maps segment k (start k * S)
    cdef list _segs
    cdef list _views
    cdef int64_t _first_seg
    cdef Mapping _cur
    cdef int64_t _cur_start
    # raft index files: self._idx[f - self._first_idxf] holds indexes [f*N+1, (f+1)*N]
    cdef list _idx
    cdef int64_t _first_idxf
    cdef Mapping _cur_idx
    cdef int64_t _cur_idxf

    cdef int64_t _end, _next_index, _first_index, _last_term
    # store timestamp of the last record: leader appends never stamp below it, so store
    # timestamps never decrease along the log (the store binary-searches them in
    # offset_for_timestamp) even when the wall clock steps back or a new leader's clock
    # is behind the old leader's.
    cdef int64_t _last_store_ms
    cdef int64_t _flushed_pos, _flushed_index
    cdef int64_t _idx_synced       # raft-index entries durable through this index
    cdef int64_t _committed_index, _committed_pos, _dispatched
    cdef int64_t _idx_dirty_lo     # lowest raft index whose entry may be unflushed
    cdef int64_t _pop_want         # preparer: keep pages faulted in up to this position

    cdef int64_t n_append_calls, n_records, n_bytes, n_flushes, n_checkpoints
    cdef int64_t n_segments_created, n_prepared_used, n_sync_created, n_blank

    cdef PyThread_type_lock _wlock
    cdef object _flush_lock      # threading.Lock: one flush at a time
    cdef object _cv              # threading.Condition: flusher wake-up + group commit
    cdef int64_t _flush_request
    cdef object _prep_cv
    cdef object _prepared        # Mapping of the next segment or None
    cdef int64_t _prep_request   # start position asked for (-1: none)
    cdef bint _prep_busy
    cdef object _prep_error
    cdef list _threads
    cdef bint _stopping
    cdef bint _closed
    cdef int _lock_fd
    cdef double _last_cp
    cdef object _flush_error

    def __cinit__(self, *args, **kwargs):
        self._wlock = PyThread_allocate_lock()
        if self._wlock == NULL:
            raise MemoryError()
        self._lock_fd = -1
        self._closed = True

    def __dealloc__(self):
        if self._wlock != NULL:
            PyThread_free_lock(self._wlock)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)

    def __init__(self, path, *, segment_size_bytes=1 << 30, index_file_entries=1 << 20,
                 flush="async", flush_interval_ms=200, checkpoint_interval_ms=1000,
                 max_message_bytes=4 << 20, preallocate_next=True):
        path = os.fspath(path)
        if not isinstance(path, str):
            path = os.fsdecode(path)
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
        self.path = path
        self.segment_size_bytes = segment_size_bytes
        self.index_file_entries = index_file_entries
        self.flush_mode = flush
        self.flush_interval_ms = flush_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        # No body larger than a segment less two headers can ever be stored (the record
        # and a BLANK header must fit); capping here also keeps every record size far
        # below 2**32, so size arithmetic cannot wrap (sizes are summed in int64 anyway).
        self.max_message_bytes = min(max_message_bytes, segment_size_bytes - 2 * HDR)
        self.preallocate_next = preallocate_next
        self._segdir = os.path.join(path, "commitlog")
        self._idxdir = os.path.join(path, "index")
        self._segs = []
        self._views = []
        self._idx = []
        self._threads = []
        self._flush_lock = threading.Lock()
        self._cv = threading.Condition(threading.Lock())
        self._prep_cv = threading.Condition(threading.Lock())
        self._prepared = None
        self._prep_request = -1
        self._cur_idxf = -1
        os.makedirs(self._segdir, exist_ok=True)
        os.makedirs(self._idxdir, exist_ok=True)
        self._take_lock()
        try:
            self._recover()
        except BaseException:
            self._drop_mappings()
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise
        self._closed = False
        self._start_threads()

    # ------------------------------------------------------------------ properties
    @property
    def closed(self):
        return self._closed

    @property
    def first_index(self):
        return self._first_index if self._next_index > self._first_index else (
            0 if self._next_index <= 1 else self._first_index)

    @property
    def last_index(self):
        return self._next_index - 1

    @property
    def last_term(self):
        return self._last_term

    @property
    def min_position(self):
        return self._first_seg * self.segment_size_bytes

    @property
    def end_position(self):
        return self._end

    @property
    def flushed_position(self):
        return self._flushed_pos

    @property
    def committed_index(self):
        return self._committed_index

    @property
    def committed_position(self):
        return self._committed_pos

    @property
    def dispatched_position(self):
        return self._dispatched

    def stats(self):
        """Counters for benchmarks: flushes << appends under load shows group commit."""
        return {
            "appends": self.n_append_calls, "records": self.n_records, "bytes": self.n_bytes,
            "flushes": self.n_flushes, "checkpoints": self.n_checkpoints,
            "segments": len(self._segs), "segments_created": self.n_segments_created,
            "segments_prepared_used": self.n_prepared_used,
            "segments_created_sync": self.n_sync_created, "blanks": self.n_blank,
            "end_position": self._end, "flushed_position": self._flushed_pos,
            "flushed_index": self._flushed_index,
            "last_index": self._next_index - 1,
        }

    def __repr__(self):
        return (f"<CommitLog {self.path!r} last_index={self._next_index - 1} "
                f"end={self._end}{' closed' if self._closed else ''}>")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    cdef inline int _check_open(self) except -1:
        if self._closed:
            raise LogClosedError(f"commit log {self.path} is closed")
        return 0

    # ------------------------------------------------------------------ locking
    cdef inline void _acquire(self) noexcept:
        if not PyThread_acquire_lock(self._wlock, NOWAIT_LOCK):
            with nogil:
                PyThread_acquire_lock(self._wlock, WAIT_LOCK)

    cdef inline void _release(self) noexcept:
        PyThread_release_lock(self._wlock)

    def _take_lock(self):
        fd = os.open(os.path.join(self.path, "LOCK"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockedError(f"{self.path} is open elsewhere (LOCK is held)") from None
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    # ------------------------------------------------------------------ segments
    cdef str _seg_path(self, int64_t k):
        return os.path.join(self._segdir, _segment_name(k * self.segment_size_bytes))

    cdef Mapping _seg(self, int64_t k):
        """Segment k, or None when the log does not hold it."""
        cdef int64_t j = k - self._first_seg
        if j < 0 or j >= len(self._segs):
            return None
        return <Mapping>self._segs[j]

    cdef Mapping _new_segment_mapping(self, int64_t k):
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
                return m
            if self._prepared is not None:
                self._discard_prepared()
            # keep the preparer off this file while it is created here
            self._prep_busy = True
            if self._prep_request <= start:
                self._prep_request = -1
        try:
            m = map_file(self._seg_path(k), self.segment_size_bytes, start, True, True,
                         "segment")
        finally:
            with self._prep_cv:
                self._prep_busy = False
                self._prep_cv.notify_all()
        self.n_segments_created += 1
        self.n_sync_created += 1
        return m

    cdef _discard_prepared(self):
        # Called with _prep_cv held. A prepared file the log will not use is unlinked so it
        # cannot look like a later segment at recovery.
        m = <Mapping>self._prepared
        self._prepared = None
        if any(x is m or (<Mapping>x).start == m.start for x in self._segs):
            return      # never unlink a segment the log holds
        try:
            os.unlink(m.path)
        except OSError:
            pass

    cdef _install_segment(self, Mapping m):
        self._segs.append(m)
        self._views.append(memoryview(m))
        self._cur = m
        self._cur_start = m.start

    cdef void _populate(self, int64_t upto):
        # Fault the next pages of the current segment in for writing with one madvise
        # instead of one page fault per 4 KiB (the page-fault path is most of the cost of
        # writing through a shared mapping into fresh page cache). Normally the preparer
        # thread has done this already; this is the fallback when it is behind or absent.
        cdef Mapping m = self._cur
        cdef int64_t a = m.populated & ~(<int64_t>4095), b
        cdef int64_t e = max(self._end - m.start, 0)   # _end may still be in the last segment
        if a < e:
            a = e & ~(<int64_t>4095)
        b = min(max(upto - m.start, a + POPULATE_AHEAD), m.size)
        b = (b + 4095) & ~(<int64_t>4095)
        if b > m.size:
            b = m.size
        if b > a:
            with nogil:
                ql_populate_write(m.addr, a, b - a)
            if b > m.populated:
                m.populated = b
        self._want_populated(upto)

    cdef inline void _want_populated(self, int64_t upto):
        # Ask the preparer to keep pages faulted in ahead of `upto`; it is woken only when
        # the populated margin falls below BG_POPULATE_LOW (once per ~16 MiB written).
        if not self.preallocate_next or self._stopping:
            return
        if self._pop_want - upto >= BG_POPULATE_LOW:
            return
        self._pop_want = upto + BG_POPULATE_AHEAD
        with self._prep_cv:
            self._prep_cv.notify_all()

    cdef bint _pop_span(self, bint index_file, int64_t cap, int64_t *lo, int64_t *hi):
        # Preparer side, GIL held: the next range [lo, hi) (offsets in the current segment,
        # or in the current raft-index file) to fault in, at most `cap` bytes; False when
        # nothing is due. The same arithmetic decides "due" and "do", so the loop cannot spin.
        cdef Mapping m
        cdef int64_t a, b, written, want, mean
        if index_file:
            m = self._cur_idx
            if m is None or self.n_records == 0:
                return False
            written = (self._next_index - m.start) * IDX_ENTRY
            # as many entries ahead as records fit in the wanted segment bytes at the mean
            # record size appended so far (24 B of index per record)
            mean = max(self.n_bytes // self.n_records, 1)
            want = written + max(self._pop_want - self._end, 0) // mean * IDX_ENTRY
        else:
            m = self._cur
            if m is None:
                return False
            written = self._end - m.start
            want = self._pop_want - m.start
        a = m.populated & ~(<int64_t>4095)   # the hint may be mid-page (madvise needs pages)
        if a < written:
            a = written & ~(<int64_t>4095)
        b = min(want, a + cap)
        b = (b + 4095) & ~(<int64_t>4095)
        if b > m.size:
            b = m.size
        lo[0] = a
        hi[0] = b
        return b > a and b > m.populated   # (a mapping may end mid-page: small index files)

    cdef bint _populate_due(self):
        cdef int64_t a, b
        return self._pop_span(False, 1 << 40, &a, &b) or self._pop_span(True, 1 << 40, &a, &b)

    def _populate_ahead(self):
        # Preparer side: fault pages in BG_POPULATE_CHUNK at a time with the GIL released
        # until the current segment is populated up to _pop_want and the raft-index file
        # correspondingly. Holding `m` keeps the mapping alive while the GIL is released.
        cdef Mapping m
        cdef int64_t a, b
        cdef bint idx
        cdef int k
        for k in range(2):
            idx = k == 1
            while not self._stopping and self._pop_span(idx, BG_POPULATE_CHUNK, &a, &b):
                m = self._cur_idx if idx else self._cur
                with nogil:
                    ql_populate_write(m.addr, a, b - a)
                if b > m.populated:
                    m.populated = b

    cdef inline void _maybe_request_prepare(self):
        # Prepare the next segment once the current one is half full, off the append path.
        cdef int64_t nxt
        if not self.preallocate_next or self._stopping:
            return
        if self._end - self._cur_start < (self.segment_size_bytes >> 1):
            return
        nxt = self._cur_start + self.segment_size_bytes
        if self._prep_request == nxt:
            return
        self._prep_request = nxt
        with self._prep_cv:
            self._prep_cv.notify_all()

    def _prepare_loop(self):
        cdef int64_t want
        cdef Mapping m
        while True:
            with self._prep_cv:
                while not self._stopping and (
                        self._prep_busy or self._prep_request < 0 or
                        (self._prepared is not None and
                         (<Mapping>self._prepared).start == self._prep_request) or
                        self._prep_request <= self._cur_start) and not self._populate_due():
                    self._prep_cv.wait()
                if self._stopping:
                    return
                populate = (self._prep_busy or self._prep_request < 0 or
                            (self._prepared is not None and
                             (<Mapping>self._prepared).start == self._prep_request) or
                            self._prep_request <= self._cur_start)
                if not populate:
                    # claim the preparation in the same critical section as the check
                    want = self._prep_request
                    if self._prepared is not None:
                        self._discard_prepared()
                    self._prep_busy = True
            if populate:        # only page population is due
                self._populate_ahead()
                continue
            m = None
            try:
                m = map_file(self._seg_path(want // self.segment_size_bytes),
                             self.segment_size_bytes, want, True, True, "segment")
                # Fault in the first pages for writing, so the first appends into the new
                # segment do not pay for page-cache allocation.
                with nogil:
                    ql_populate_write(m.addr, 0, min(m.size, 4 << 20))
                m.populated = min(m.size, 4 << 20)
            except Exception as e:  # DiskFullError: the append path retries and reports it
                log.debug("preparing segment %d failed: %s", want, e)
                self._prep_error = e
            with self._prep_cv:
                self._prep_busy = False
                if m is not None:
                    if want == self._cur_start + self.segment_size_bytes and \
                            self._seg(want // self.segment_size_bytes) is None:
                        self._prepared = m
                        self.n_segments_created += 1
                    elif self._seg(want // self.segment_size_bytes) is None:
                        # no longer the next segment (the log was truncated meanwhile):
                        # a file past the end would break segment contiguity at recovery
                        try:
                            os.unlink(m.path)
                        except OSError:
                            pass
                    # else: the log already holds that segment; drop this second mapping
                else:
                    self._prep_request = -1 if self._prep_request == want else self._prep_request
                self._prep_cv.notify_all()
                if m is None:
                    # avoid spinning on a full disk: wait for a new request
                    self._prep_cv.wait(0.5)

    # ------------------------------------------------------------------ raft index files
    cdef str _idx_path(self, int64_t f):
        return os.path.join(self._idxdir, _segment_name(f * self.index_file_entries + 1))

    cdef Mapping _idx_file(self, int64_t f, bint create):
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
        m = map_file(self._idx_path(f), self.index_file_entries * IDX_ENTRY,
                     f * self.index_file_entries + 1, True, True, "raft index file")
        self._idx.append(m)
        return m

    cdef char *_entry(self, int64_t i, bint create) except? NULL:
        """Pointer to the raft-index entry of index i (None/NULL when its file is absent)."""
        cdef int64_t f = (i - 1) // self.index_file_entries
        cdef Mapping m
        if f == self._cur_idxf:
            return self._cur_idx.addr + ((i - 1) - f * self.index_file_entries) * IDX_ENTRY
        m = self._idx_file(f, create)
        if m is None:
            return NULL
        if create:
            self._cur_idx = m
            self._cur_idxf = f
        return m.addr + ((i - 1) - f * self.index_file_entries) * IDX_ENTRY

    cdef int64_t _stamp(self, int64_t now_ms) noexcept:
        """The store timestamp for a leader append made now (caller holds the lock)."""
        return now_ms if now_ms > self._last_store_ms else self._last_store_ms

    cdef void _note_last_store(self) noexcept:
        """Re-read the last record's store timestamp (after recovery or a replicated
        append); keeps the larger of it and what was already noted."""
        cdef int64_t i = self._next_index - 1
        cdef char *ep
        cdef const IdxEntry *e
        cdef Mapping m
        cdef int64_t ts
        if i < 1 or i < self._first_index:
            return
        ep = self._entry(i, False)
        if ep == NULL:
            return
        e = <const IdxEntry *>ep
        m = self._seg(<int64_t>e.position // self.segment_size_bytes)
        if m is None:
            return
        ts = (<const RecHeader *>(m.addr + (<int64_t>e.position - m.start))).store_ts
        if ts > self._last_store_ms:
            self._last_store_ms = ts

    cdef const IdxEntry *_entry_checked(self, int64_t i) except NULL:
        if i < self._first_index or i >= self._next_index or i < 1:
            raise IndexOutOfRangeError(
                f"raft index {i} outside [{self._first_index}, {self._next_index - 1}]")
        cdef char *e = self._entry(i, False)
        if e == NULL:
            raise CorruptLogError(f"raft index file for {i} is missing", self._idxdir, None)
        return <const IdxEntry *>e

    def term_at(self, int64_t i):
        """Term of entry i (IndexOutOfRangeError outside [first_index, last_index])."""
        self._check_open()
        return self._entry_checked(i).term

    def position_of(self, int64_t i):
        self._check_open()
        return self._entry_checked(i).position

    def size_of(self, int64_t i):
        self._check_open()
        return self._entry_checked(i).size

    # ------------------------------------------------------------------ leader appends
    cdef int64_t _ensure_room(self, uint32_t size) except -1:
        """Make sure a record of `size` bytes can go at the end: the index slot exists and,
        when the record does not fit in the current segment, the next segment is mapped
        and a BLANK closes the current one. Raises (DiskFullError) before writing.
        -> the position the record goes to. _end is NOT moved past the BLANK here: the
        caller publishes _end only once the record is written, because it may release
        the GIL in between and the flusher's (_end, last index) snapshot must always be
        a record end and its index (the checkpoint anchor recovery relies on)."""
        cdef int64_t off = self._end - self._cur_start
        cdef Mapping m
        self._entry(self._next_index, True)
        if off < 0:
            return self._cur_start  # a BLANK closed the last segment; nothing written since
        if <int64_t>size + HDR <= self.segment_size_bytes - off:
            return self._end
        m = self._new_segment_mapping(self._cur_start // self.segment_size_bytes + 1)
        write_blank(self._cur.addr + off, self._end, <uint32_t>(self.segment_size_bytes - off))
        self.n_blank += 1
        self._install_segment(m)
        return m.start

    def append(self, topic, body, *, queue_id=0, queue_offset=0, term, tags=None, keys=(),
               properties=None, born_timestamp_ms=None, flags=0):
        """Append one MESSAGE -> (index, position, store_timestamp_ms)."""
        cdef RecSrc s
        cdef Py_buffer buf
        cdef bint have_buf = False
        cdef bytes tb, gb = None, kb = None, pb = None
        cdef int64_t qid, qoff, t, born, store, pos, index
        cdef uint32_t fl, size
        cdef int64_t size64
        cdef char *e
        self._check_open()
        tb = _check_topic(topic)
        s.topic = PyBytes_AS_STRING(tb)
        s.topic_len = <uint32_t>PyBytes_GET_SIZE(tb)
        if tags is None:
            s.tags_len = 0
            s.tags = NULL
            s.tag_hash = 0
        else:
            gb = _encode_tags(tags)
            s.tags = PyBytes_AS_STRING(gb)
            s.tags_len = <uint32_t>PyBytes_GET_SIZE(gb)
            s.tag_hash = <int64_t>fnv1a(s.tags, s.tags_len)
        if keys is None or (type(keys) is tuple and len(<tuple>keys) == 0):
            s.keys_len = 0
            s.keys = NULL
        else:
            kb = _encode_keys(keys)
            s.keys = PyBytes_AS_STRING(kb)
            s.keys_len = <uint32_t>PyBytes_GET_SIZE(kb)
        if properties is None:
            s.props_len = 0
            s.props = NULL
        else:
            pb = _encode_props(properties)
            s.props = PyBytes_AS_STRING(pb)
            s.props_len = <uint32_t>PyBytes_GET_SIZE(pb)
        if type(queue_id) is not int:
            raise QueueTypeError(f"queue_id must be int, not {type(queue_id).__name__}")
        if type(queue_offset) is not int or type(term) is not int or type(flags) is not int:
            raise ArgumentTypeError("queue_offset, term and flags must be int")
        if not (0 <= queue_id < MAX_QUEUE_ID):
            raise InvalidQueueError(f"queue_id {queue_id} outside [0, {MAX_QUEUE_ID})")
        if queue_offset < 0 or queue_offset >= (1 << 63):
            raise InvalidArgumentError(f"queue_offset {queue_offset} out of range")
        if term < 0 or term >= (1 << 63):
            raise InvalidArgumentError(f"term {term} out of range")
        if flags < 0 or flags > 0xFFFFFFFF:
            raise InvalidArgumentError(f"flags {flags} not a u32")
        qid = queue_id
        qoff = queue_offset
        t = term
        fl = <uint32_t>flags
        store = ql_now_ms()
        born_default = born_timestamp_ms is None
        if born_default:
            born = store
        elif type(born_timestamp_ms) is int:
            if not (-(1 << 63) <= born_timestamp_ms < (1 << 63)):
                raise InvalidArgumentError(f"born_timestamp_ms {born_timestamp_ms} is not an i64")
            born = born_timestamp_ms
        else:
            raise ArgumentTypeError("born_timestamp_ms must be int or None")
        if PyBytes_CheckExact(body):
            s.body = PyBytes_AS_STRING(body)
            s.body_len = <uint32_t>min(PyBytes_GET_SIZE(body), 0xFFFFFFFF)
            if PyBytes_GET_SIZE(body) > self.max_message_bytes:
                raise MessageTooLargeError(
                    f"body is {PyBytes_GET_SIZE(body)} bytes; max_message_bytes is "
                    f"{self.max_message_bytes}")
        else:
            if isinstance(body, str):
                raise ArgumentTypeError("body must be bytes-like, not str")
            try:
                PyObject_GetBuffer(body, &buf, PyBUF_SIMPLE)
            except TypeError:
                raise ArgumentTypeError(
                    f"body must be bytes-like, not {type(body).__name__}") from None
            have_buf = True
            if buf.len > self.max_message_bytes:
                PyBuffer_Release(&buf)
                raise MessageTooLargeError(
                    f"body is {buf.len} bytes; max_message_bytes is {self.max_message_bytes}")
            s.body = <const char *>buf.buf
            s.body_len = <uint32_t>buf.len
        try:
            # int64: a u32 sum could wrap past the segment check (memcpy past the mapping)
            size64 = (<int64_t>HDR + s.topic_len + s.tags_len + s.keys_len + s.props_len +
                      s.body_len)
            if size64 > self.segment_size_bytes - HDR:
                raise MessageTooLargeError(
                    f"record of {size64} bytes does not fit a segment of "
                    f"{self.segment_size_bytes} bytes")
            size = <uint32_t>size64
            self._acquire()
            try:
                self._check_open()
                if t < self._last_term:
                    raise InvalidArgumentError(
                        f"term {t} is below the log's last term {self._last_term}")
                pos = self._ensure_room(size)
                store = self._stamp(store)
                if born_default:
                    born = store
                index = self._next_index
                if pos + size > self._cur_start + self._cur.populated:
                    self._populate(pos + size)      # the preparer is behind (or absent)
                elif self._pop_want - (pos + size) < BG_POPULATE_LOW:
                    self._want_populated(pos + size)
                encode_record(self._cur.addr + (pos - self._cur_start), &s, T_MESSAGE, fl,
                              index, t, pos, qoff, born, store, <uint32_t>qid, size)
                e = self._entry(index, True)
                write_index(e, pos, t, size, T_MESSAGE)
                self._end = pos + size
                self._next_index = index + 1
                self._last_term = t
                self._last_store_ms = store
                self.n_append_calls += 1
                self.n_records += 1
                self.n_bytes += size
                self._maybe_request_prepare()
            finally:
                self._release()
        finally:
            if have_buf:
                PyBuffer_Release(&buf)
        return (index, pos, store)

    def append_control(self, int rtype, payload=b"", *, term):
        """Append a NOOP / CONFIG / META record -> (index, position)."""
        cdef RecSrc s
        cdef const unsigned char[::1] v
        cdef int64_t t, pos, index, store
        cdef uint32_t size
        self._check_open()
        if rtype not in (T_NOOP, T_CONFIG, T_META):
            raise InvalidArgumentError(f"append_control type must be NOOP, CONFIG or META, not {rtype}")
        if isinstance(payload, str) or payload is None:
            raise ArgumentTypeError("payload must be bytes-like")
        if type(term) is not int:
            raise ArgumentTypeError("term must be int")
        if term < 0 or term >= (1 << 63):
            raise InvalidArgumentError(f"term {term} out of range")
        t = term
        payload = bytes(payload)
        if rtype == T_NOOP and len(payload):
            raise InvalidArgumentError("a NOOP record has an empty body")
        if len(payload) > self.max_message_bytes:
            raise MessageTooLargeError(f"payload is {len(payload)} bytes; max_message_bytes "
                                       f"is {self.max_message_bytes}")
        memset(&s, 0, sizeof(RecSrc))
        s.body = PyBytes_AS_STRING(payload)
        s.body_len = <uint32_t>len(payload)
        size = HDR + s.body_len
        store = ql_now_ms()
        self._acquire()
        try:
            self._check_open()
            if t < self._last_term:
                raise InvalidArgumentError(
                    f"term {t} is below the log's last term {self._last_term}")
            pos = self._ensure_room(size)
            store = self._stamp(store)
            index = self._next_index
            encode_record(self._cur.addr + (pos - self._cur_start), &s, <uint8_t>rtype, 0,
                          index, t, pos, 0, store, store, 0, size)
            write_index(self._entry(index, True), pos, t, size, <uint8_t>rtype)
            self._end = pos + size
            self._next_index = index + 1
            self._last_term = t
            self._last_store_ms = store
            self.n_append_calls += 1
            self.n_records += 1
            self.n_bytes += size
            self._maybe_request_prepare()
        finally:
            self._release()
        return (index, pos)

    cdef list _map_range_for(self, int64_t last_pos, int64_t last_index):
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
                self._idx_file(f, True)
            for k in range(k_cur + 1, k_last + 1):
                new.append(self._new_segment_mapping(k))
        except BaseException:
            for m in new:
                try:
                    os.unlink(m.path)
                except OSError:
                    pass
            raise
        return new

    def append_batch(self, topic, bodies, *, queue_ids=0, queue_offsets=0, term, tags=None,
                     keys=None, properties=None, born_timestamps_ms=None, flags=0):
        """Append many MESSAGE records in one call
        -> (first_index, positions: int64 array, store_timestamp_ms)."""
        cdef tuple bt
        cdef bint per_tags, per_keys, per_props
        cdef Py_ssize_t n, j, nbuf = 0
        cdef bytes tb, shared_tags = None, shared_keys = None, shared_props = None
        cdef list keep = []
        cdef RecSrc *src = NULL
        cdef Py_buffer *bufs = NULL
        cdef char *bufmask = NULL
        cdef uint32_t *sizes = NULL
        cdef int64_t *qids_p = NULL
        cdef int64_t *qoffs_p = NULL
        cdef int64_t *borns_p = NULL
        cdef int64_t qid0 = 0, qoff0 = 0, born0 = 0, t, store, pos, cs, S, total = 0
        cdef int64_t first_index, k_cur, idx
        cdef uint32_t fl, size
        cdef cnp.ndarray positions
        cdef int64_t *posp
        cdef list new_segs
        cdef char **segaddr = NULL
        cdef char **idxaddr = NULL
        cdef int64_t nseg, nidx, f0, N
        cdef Mapping m
        cdef object qids_arr = None, qoffs_arr = None, borns_arr = None
        cdef bint release_gil
        cdef bytes b
        cdef Py_ssize_t blen
        cdef int64_t pop_from, batch_end, ipop_from, ipop_to, size64

        self._check_open()
        if not isinstance(bodies, (list, tuple)):
            raise ArgumentTypeError("bodies must be a list or tuple of bytes-like objects")
        bt = tuple(bodies)
        n = len(bt)
        if n > MAX_BATCH_RECORDS:
            raise InvalidArgumentError(f"batch of {n} records over the {MAX_BATCH_RECORDS} limit")
        tb = _check_topic(topic)
        if type(term) is not int or type(flags) is not int:
            raise ArgumentTypeError("term and flags must be int")
        if term < 0 or term >= (1 << 63):
            raise InvalidArgumentError(f"term {term} out of range")
        if flags < 0 or flags > 0xFFFFFFFF:
            raise InvalidArgumentError(f"flags {flags} not a u32")
        t = term
        fl = <uint32_t>flags
        store = ql_now_ms()
        S = self.segment_size_bytes
        N = self.index_file_entries

        # per-batch arguments: scalars or one value per message
        if isinstance(queue_ids, int) and not isinstance(queue_ids, bool):
            if not (0 <= queue_ids < MAX_QUEUE_ID):
                raise InvalidQueueError(f"queue_id {queue_ids} outside [0, {MAX_QUEUE_ID})")
            qid0 = queue_ids
        else:
            qids_arr = _int64_array(queue_ids, "queue_ids", QueueTypeError)
            if qids_arr.ndim != 1 or qids_arr.shape[0] != n:
                raise InvalidArgumentError(f"queue_ids must have one entry per body ({n})")
            if n and (qids_arr.min() < 0 or qids_arr.max() >= MAX_QUEUE_ID):
                raise InvalidQueueError(f"a queue_id is outside [0, {MAX_QUEUE_ID})")
            qids_p = <int64_t *>cnp.PyArray_DATA(qids_arr)
        if isinstance(queue_offsets, int) and not isinstance(queue_offsets, bool):
            if queue_offsets < 0 or queue_offsets + n >= (1 << 63):
                raise InvalidArgumentError(f"queue_offsets {queue_offsets} out of range")
            qoff0 = queue_offsets
        else:
            qoffs_arr = _int64_array(queue_offsets, "queue_offsets", ArgumentTypeError)
            if qoffs_arr.ndim != 1 or qoffs_arr.shape[0] != n:
                raise InvalidArgumentError(f"queue_offsets must have one entry per body ({n})")
            if n and qoffs_arr.min() < 0:
                raise InvalidArgumentError("a queue_offset is negative")
            qoffs_p = <int64_t *>cnp.PyArray_DATA(qoffs_arr)
        if born_timestamps_ms is None:
            born0 = store
        elif isinstance(born_timestamps_ms, int) and not isinstance(born_timestamps_ms, bool):
            if not (-(1 << 63) <= born_timestamps_ms < (1 << 63)):
                raise InvalidArgumentError("born_timestamps_ms is not an i64")
            born0 = born_timestamps_ms
        else:
            borns_arr = _int64_array(born_timestamps_ms, "born_timestamps_ms", ArgumentTypeError)
            if borns_arr.ndim != 1 or borns_arr.shape[0] != n:
                raise InvalidArgumentError(f"born_timestamps_ms must have one entry per body ({n})")
            borns_p = <int64_t *>cnp.PyArray_DATA(borns_arr)
        per_tags = tags is not None and not isinstance(tags, str)
        per_keys = keys is not None and isinstance(keys, list)
        per_props = properties is not None and isinstance(properties, list)
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

        positions = cnp.PyArray_EMPTY(1, [n], cnp.NPY_INT64, 0)
        posp = <int64_t *>cnp.PyArray_DATA(positions)
        if n == 0:
            return (self._next_index, positions, store)
        src = <RecSrc *>calloc(n, sizeof(RecSrc))
        sizes = <uint32_t *>malloc(n * sizeof(uint32_t))
        if src == NULL or sizes == NULL:
            free(src)
            free(sizes)
            raise MemoryError()
        try:
            # pass 1: every message's pointers and lengths, all limits checked
            for j in range(n):
                o = bt[j]
                if PyBytes_CheckExact(o):
                    src[j].body = PyBytes_AS_STRING(o)
                    blen = PyBytes_GET_SIZE(o)
                else:
                    if isinstance(o, str) or o is None:
                        raise ArgumentTypeError(f"bodies[{j}] must be bytes-like, not {type(o).__name__}")
                    if bufs == NULL:
                        bufs = <Py_buffer *>calloc(n, sizeof(Py_buffer))
                        bufmask = <char *>calloc(n, 1)
                        if bufs == NULL or bufmask == NULL:
                            raise MemoryError()
                    try:
                        PyObject_GetBuffer(o, &bufs[j], PyBUF_SIMPLE)
                    except BufferError:
                        raise
                    except TypeError:
                        raise ArgumentTypeError(f"bodies[{j}] must be bytes-like, "
                                        f"not {type(o).__name__}") from None
                    bufmask[j] = 1
                    nbuf += 1
                    src[j].body = <const char *>bufs[j].buf
                    blen = bufs[j].len
                if blen > self.max_message_bytes:
                    raise MessageTooLargeError(
                        f"bodies[{j}] is {blen} bytes; max_message_bytes is "
                        f"{self.max_message_bytes}")
                src[j].body_len = <uint32_t>blen
                src[j].topic = PyBytes_AS_STRING(tb)
                src[j].topic_len = <uint32_t>PyBytes_GET_SIZE(tb)
                if per_tags:
                    g = tags[j]
                    if g is not None:
                        b = _encode_tags(g)
                        keep.append(b)
                        src[j].tags = PyBytes_AS_STRING(b)
                        src[j].tags_len = <uint32_t>PyBytes_GET_SIZE(b)
                        src[j].tag_hash = <int64_t>fnv1a(src[j].tags, src[j].tags_len)
                elif shared_tags is not None and PyBytes_GET_SIZE(shared_tags):
                    src[j].tags = PyBytes_AS_STRING(shared_tags)
                    src[j].tags_len = <uint32_t>PyBytes_GET_SIZE(shared_tags)
                    if j == 0:
                        src[j].tag_hash = <int64_t>fnv1a(src[j].tags, src[j].tags_len)
                    else:
                        src[j].tag_hash = src[0].tag_hash
                if per_keys:
                    g = keys[j]
                    if g is not None and len(g):
                        b = _encode_keys(g)
                        keep.append(b)
                        src[j].keys = PyBytes_AS_STRING(b)
                        src[j].keys_len = <uint32_t>PyBytes_GET_SIZE(b)
                if per_props:
                    g = properties[j]
                    if g is not None:
                        b = _encode_props(g)
                        keep.append(b)
                        src[j].props = PyBytes_AS_STRING(b)
                        src[j].props_len = <uint32_t>PyBytes_GET_SIZE(b)
                elif shared_props is not None:
                    src[j].props = PyBytes_AS_STRING(shared_props)
                    src[j].props_len = <uint32_t>PyBytes_GET_SIZE(shared_props)
                # int64: a u32 sum could wrap past the segment check
                size64 = (<int64_t>HDR + src[j].topic_len + src[j].tags_len +
                          src[j].keys_len + src[j].props_len + src[j].body_len)
                if size64 > S - HDR:
                    raise MessageTooLargeError(
                        f"record {j} of {size64} bytes does not fit a segment of {S} bytes")
                sizes[j] = <uint32_t>size64
                total += size64

            self._acquire()
            try:
                self._check_open()
                if t < self._last_term:
                    raise InvalidArgumentError(
                        f"term {t} is below the log's last term {self._last_term}")
                if store < self._last_store_ms:     # see _last_store_ms
                    if born_timestamps_ms is None:
                        born0 = self._last_store_ms
                    store = self._last_store_ms
                # pass 2: layout (positions, BLANKs at segment tails), arithmetic only
                pos = self._end
                cs = self._cur_start
                for j in range(n):
                    if <int64_t>sizes[j] + HDR > cs + S - pos:
                        pos = cs + S
                        cs = pos
                    posp[j] = pos
                    pos += sizes[j]
                first_index = self._next_index
                # every file the batch needs exists before one byte is written
                new_segs = self._map_range_for(posp[n - 1], first_index + n - 1)
                k_cur = self._cur_start // S
                nseg = 1 + len(new_segs)
                segaddr = <char **>malloc(nseg * sizeof(char *))
                f0 = (first_index - 1) // N
                nidx = (first_index + n - 2) // N - f0 + 1
                idxaddr = <char **>malloc(nidx * sizeof(char *))
                if segaddr == NULL or idxaddr == NULL:
                    raise MemoryError()
                segaddr[0] = self._cur.addr
                for j in range(1, nseg):
                    segaddr[j] = (<Mapping>new_segs[j - 1]).addr
                for j in range(nidx):
                    idxaddr[j] = self._idx_file(f0 + j, False).addr
                release_gil = total >= NOGIL_BYTES
                # Pages the preparer has not faulted in yet are populated by the batch
                # itself (one madvise instead of a page fault per 4 KiB); the hints are
                # advanced before the write, which cannot fail.
                pop_from = max(self._cur_start + self._cur.populated, self._end)
                batch_end = posp[n - 1] + sizes[n - 1]
                if pop_from < min(batch_end, self._cur_start + S):
                    self._cur.populated = min(batch_end, self._cur_start + S) - self._cur_start
                m = self._idx_file(f0, False)
                ipop_from = max(m.populated, (first_index - m.start) * IDX_ENTRY)
                ipop_to = min(first_index + n - m.start, N) * IDX_ENTRY
                if ipop_to > m.populated:
                    m.populated = ipop_to
                # pass 3: encode straight into the mappings
                with nogil:
                    _write_batch(src, sizes, posp, n, segaddr, k_cur, S, self._end,
                                 idxaddr, f0, N, first_index, t, fl, store,
                                 qids_p, qid0, qoffs_p, qoff0, borns_p, born0,
                                 pop_from, ipop_from, ipop_to)
                for m in new_segs:
                    self._install_segment(m)
                    self.n_blank += 1
                self._end = posp[n - 1] + sizes[n - 1]
                self._next_index = first_index + n
                self._last_term = t
                self._last_store_ms = store
                idx = first_index + n - 1
                self._entry(idx, True)   # keep the cached index file current
                self.n_append_calls += 1
                self.n_records += n
                self.n_bytes += total
                self._maybe_request_prepare()
                self._want_populated(self._end)
            finally:
                self._release()
        finally:
            if bufs != NULL:
                for j in range(n):
                    if bufmask[j]:
                        PyBuffer_Release(&bufs[j])
                free(bufs)
                free(bufmask)
            free(src)
            free(sizes)
            free(segaddr)
            free(idxaddr)
        return (first_index, positions, store)

    # ------------------------------------------------------------------ follower appends
    def append_replicated(self, raw):
        """Append whole records copied verbatim from a leader's read() -> last_index.
        Every record is validated first; on any failure ReplicationError and no change."""
        cdef const unsigned char[::1] v
        cdef const char *p
        cdef Py_ssize_t n, off = 0
        cdef int64_t pos, cs, S, expect, term, count = 0, last_pos = -1
        cdef const RecHeader *h
        cdef int rc
        cdef list runs = []      # (src offset, dst position, length) per segment run
        cdef list blanks = []
        cdef int64_t run_src = 0, run_dst = -1, run_len = 0, first_index
        cdef list new_segs
        cdef Mapping m
        cdef int64_t r_src, r_dst, r_len, k, i, bp
        cdef bint release_gil
        cdef char *e
        self._check_open()
        if isinstance(raw, str) or raw is None:
            raise ArgumentTypeError("raw must be bytes-like")
        try:
            v = raw
        except (TypeError, ValueError, BufferError):
            raise ArgumentTypeError(f"raw must be bytes-like, not {type(raw).__name__}") from None
        n = v.shape[0]
        if n == 0:
            return self._next_index - 1
        p = <const char *>&v[0]
        S = self.segment_size_bytes
        self._acquire()
        try:
            self._check_open()
            pos = self._end
            cs = self._cur_start
            expect = self._next_index
            term = self._last_term
            first_index = expect
            release_gil = n >= NOGIL_BYTES
            while off < n:
                if n - off < HDR:
                    raise ReplicationError(f"truncated record header at byte {off} of the range")
                h = <const RecHeader *>(p + off)
                if h.magic != MAGIC or h.version != VERSION:
                    raise ReplicationError(f"bad magic/version at byte {off} of the range")
                if h.type < T_MESSAGE or h.type > T_META:
                    raise ReplicationError(f"record type {h.type} at byte {off} cannot be replicated")
                if h.total_size < HDR or h.total_size > n - off:
                    raise ReplicationError(f"bad total_size {h.total_size} at byte {off}")
                if <int64_t>h.total_size + HDR > S:
                    raise ReplicationError(f"record of {h.total_size} bytes does not fit a segment")
                if h.raft_index != <uint64_t>expect:
                    raise ReplicationError(
                        f"raft index {h.raft_index} at byte {off}; expected {expect}")
                if h.raft_term < <uint64_t>term:
                    raise ReplicationError(
                        f"term {h.raft_term} of index {expect} is below the previous term {term}")
                if <int64_t>h.total_size + HDR > cs + S - pos:
                    blanks.append(pos)
                    pos = cs + S
                    cs = pos
                if h.position != <uint64_t>pos:
                    raise ReplicationError(
                        f"index {expect} carries position {h.position}; it lands at {pos}")
                rc = verify_record(p + off, h.total_size, pos, False)
                if rc != V_OK:
                    raise ReplicationError(f"index {expect}: {_VERIFY_REASONS.get(rc, rc)}")
                # the format limits an append enforces, so a follower never stores what
                # its own append would refuse (or what readers cannot decode)
                fault = _replicated_fault(p + off, self.max_message_bytes)
                if fault is not None:
                    raise ReplicationError(f"index {expect} at byte {off}: {fault}")
                if release_gil:
                    with nogil:
                        rc = ql_crc32c(p + off + 4, h.total_size - 4) != h.crc
                else:
                    rc = ql_crc32c(p + off + 4, h.total_size - 4) != h.crc
                if rc:
                    raise ReplicationError(f"CRC mismatch in index {expect} at byte {off}")
                if run_dst >= 0 and run_dst + run_len == pos:
                    run_len += h.total_size
                else:
                    if run_dst >= 0:
                        runs.append((run_src, run_dst, run_len))
                    run_src = off
                    run_dst = pos
                    run_len = h.total_size
                term = h.raft_term
                last_pos = pos
                pos += h.total_size
                off += h.total_size
                expect += 1
            runs.append((run_src, run_dst, run_len))
            new_segs = self._map_range_for(last_pos, expect - 1)
            # all checks passed and every file exists: write
            for bpos in blanks:
                bp = bpos
                k = bp // S
                if k == self._cur_start // S:
                    m = self._cur
                else:
                    m = <Mapping>new_segs[k - self._cur_start // S - 1]
                write_blank(m.addr + (bp - m.start), <uint64_t>bp, <uint32_t>(m.start + S - bp))
                self.n_blank += 1
            for r in runs:
                r_src, r_dst, r_len = r
                k = r_dst // S
                if k == self._cur_start // S:
                    m = self._cur
                else:
                    m = <Mapping>new_segs[k - self._cur_start // S - 1]
                if release_gil:
                    with nogil:
                        memcpy(m.addr + (r_dst - m.start), p + r_src, r_len)
                else:
                    memcpy(m.addr + (r_dst - m.start), p + r_src, r_len)
            off = 0
            i = first_index
            while off < n:
                h = <const RecHeader *>(p + off)
                e = self._entry(i, True)
                write_index(e, h.position, h.raft_term, h.total_size, h.type)
                off += h.total_size
                i += 1
            for m in new_segs:
                self._install_segment(m)
            self._end = pos
            self._next_index = expect
            self._last_term = term
            if self._first_index == 0 or first_index == 1:
                self._first_index = min(self._first_index or first_index, first_index)
            self.n_append_calls += 1
            self.n_records += expect - first_index
            self.n_bytes += n
            self._note_last_store()      # a later leader term on this node stamps above it
            self._maybe_request_prepare()
            self._want_populated(self._end)
        finally:
            self._release()
        return expect - 1

    # ------------------------------------------------------------------ reads
    cdef Mapping _seg_for_pos(self, int64_t position):
        cdef int64_t k = position // self.segment_size_bytes
        cdef Mapping m = self._seg(k)
        if m is None or position < 0:
            raise IndexOutOfRangeError(
                f"position {position} outside [{self.min_position}, {self._end})")
        return m

    cdef _raise_bad(self, Mapping m, int64_t position, int rc):
        raise CorruptLogError(
            f"{m.path} offset {position - m.start}: {_VERIFY_REASONS.get(rc, rc)}",
            m.path, position - m.start)

    def read(self, int64_t lo_index, int64_t hi_index, int64_t max_bytes=1 << 20):
        """Zero-copy view of whole records lo_index .. lo_index+count-1 (one segment, at
        most max_bytes but at least one record) -> (memoryview, count)."""
        cdef int64_t hi, p0, k, lo2, hi2, mid, endb, seg_end
        cdef const IdxEntry *e
        self._check_open()
        if max_bytes < 0:
            raise InvalidArgumentError("max_bytes must be >= 0")
        if lo_index > self._next_index - 1 and lo_index >= 1:
            return (memoryview(b""), 0)
        if lo_index < self._first_index or lo_index < 1:
            raise IndexOutOfRangeError(
                f"raft index {lo_index} below first_index {self._first_index}")
        hi = min(hi_index, self._next_index)
        if hi <= lo_index:
            return (memoryview(b""), 0)
        e = self._entry_checked(lo_index)
        p0 = e.position
        k = p0 // self.segment_size_bytes
        seg_end = (k + 1) * self.segment_size_bytes
        # largest j in [lo, hi) with end(j) - p0 <= max_bytes and j in segment k
        lo2 = lo_index
        hi2 = hi - 1
        while lo2 < hi2:
            mid = (lo2 + hi2 + 1) >> 1
            e = self._entry_checked(mid)
            if <int64_t>e.position < seg_end and <int64_t>e.position + e.size - p0 <= max_bytes:
                lo2 = mid
            else:
                hi2 = mid - 1
        e = self._entry_checked(lo2)
        endb = e.position + e.size
        m = self._seg(k)
        if m is None:       # deleted by delete_segments_before between checks
            raise IndexOutOfRangeError(
                f"raft index {lo_index} below first_index {self._first_index}")
        # The view is taken before _verify_span releases the GIL: a concurrent
        # delete_segments_before / truncate_after shifts _views and _first_seg.
        view = <object>self._views[k - self._first_seg]
        # CRC on read too: a leader never ships damaged bytes
        self._verify_span(p0, endb, lo_index)
        return (view[p0 - m.start:endb - m.start], lo2 - lo_index + 1)

    cdef Mapping _checked_record(self, int64_t position):
        cdef Mapping m = self._seg_for_pos(position)
        cdef int rc
        if position >= self._end:
            raise IndexOutOfRangeError(f"position {position} at or beyond end {self._end}")
        rc = verify_record(m.addr + (position - m.start),
                           m.start + self.segment_size_bytes - position, position, True)
        if rc != V_OK:
            self._raise_bad(m, position, rc)
        return m

    def record_at(self, int64_t position):
        """One whole record (CRC checked) as a read-only memoryview."""
        cdef Mapping m
        cdef int64_t size
        self._check_open()
        m = self._checked_record(position)
        size = (<const RecHeader *>(m.addr + (position - m.start))).total_size
        off = position - m.start
        return (<object>self._views[m.start // self.segment_size_bytes - self._first_seg])[
            off:off + size]

    def decode_at(self, int64_t position):
        """The record at `position` decoded (CRC checked) into a Record."""
        return _decode(self.record_at(position))

    def record(self, int64_t index):
        """The record of raft index `index`, decoded."""
        self._check_open()
        return _decode(self.record_at(self._entry_checked(index).position))

    def topic_at(self, int64_t position):
        cdef Mapping m
        self._check_open()
        m = self._checked_record(position)
        h = <const RecHeader *>(m.addr + (position - m.start))
        return (m.addr + (position - m.start) + HDR)[:h.topic_len].decode("utf-8")

    def scan(self, int64_t from_position, int64_t limit_position, Py_ssize_t max_records=65536):
        """Headers of consecutive records from `from_position` (BLANK skipped, CRC checked)
        that end at or before `limit_position` -> (RECORD_INFO array, next_position)."""
        cdef int64_t S = self.segment_size_bytes, limit, pos, cap
        cdef Py_ssize_t nseg, j, count = 0
        cdef char **addrs = NULL
        cdef int64_t k0
        cdef int rc = 0
        cdef cnp.ndarray out
        cdef RecInfo *infos
        self._check_open()
        if max_records < 0:
            raise InvalidArgumentError("max_records must be >= 0")
        if from_position < self.min_position or from_position > self._end:
            raise IndexOutOfRangeError(
                f"position {from_position} outside [{self.min_position}, {self._end}]")
        limit = min(limit_position, self._end)
        if limit <= from_position or max_records == 0:
            return (np.empty(0, dtype=RECORD_INFO), from_position)
        cap = min(<int64_t>max_records, (limit - from_position) // HDR + 1)
        out = np.empty(cap, dtype=RECORD_INFO)
        k0 = from_position // S
        nseg = (limit - 1) // S - k0 + 1
        segs = self._segs[k0 - self._first_seg:k0 - self._first_seg + nseg]  # references
        addrs = <char **>malloc(nseg * sizeof(char *))
        if addrs == NULL:
            raise MemoryError()
        try:
            for j in range(nseg):
                addrs[j] = (<Mapping>segs[j]).addr
            pos = from_position
            infos = <RecInfo *>cnp.PyArray_DATA(out)
            if cap > 64:
                with nogil:
                    rc = _scan_loop(addrs, k0, nseg, S, &pos, limit, infos, cap, &count, -1)
            else:
                rc = _scan_loop(addrs, k0, nseg, S, &pos, limit, infos, cap, &count, -1)
        finally:
            free(addrs)
        if rc != V_OK:
            if count == 0:
                m = self._seg_for_pos(pos)
                if rc in (V_MAGIC, V_POSITION, V_SHORT) and pos == from_position:
                    raise InvalidArgumentError(f"no record starts at position {from_position}")
                self._raise_bad(m, pos, rc)
            # return the intact prefix; the next call reports the damage
        return (out[:count], pos)

    def verify(self, from_position=None):
        """CRC-check every record from `from_position` (default min_position) to the end;
        CorruptLogError naming file and offset on the first damaged one -> end position."""
        cdef int64_t pos
        self._check_open()
        pos = self.min_position if from_position is None else from_position
        if pos < self.min_position or pos > self._end:
            raise IndexOutOfRangeError(
                f"position {pos} outside [{self.min_position}, {self._end}]")
        self._verify_span(pos, self._end, -1)
        return self._end

    cdef int _verify_span(self, int64_t from_pos, int64_t limit, int64_t expect_index) except -1:
        """Verify every record in [from_pos, limit) (GIL released); CorruptLogError at the
        first bad one. expect_index > 0 also checks the raft index sequence."""
        cdef int64_t S = self.segment_size_bytes, k0, pos = from_pos
        cdef Py_ssize_t nseg, j, count = 0
        cdef char **addrs
        cdef int rc
        if limit <= from_pos:
            return 0
        k0 = from_pos // S
        nseg = (limit - 1) // S - k0 + 1
        if k0 < self._first_seg:
            raise IndexOutOfRangeError(f"position {from_pos} below min_position {self.min_position}")
        segs = self._segs[k0 - self._first_seg:k0 - self._first_seg + nseg]
        if len(segs) != nseg:
            raise IndexOutOfRangeError(f"[{from_pos}, {limit}) is not all in the log")
        addrs = <char **>malloc(nseg * sizeof(char *))
        if addrs == NULL:
            raise MemoryError()
        try:
            for j in range(nseg):
                addrs[j] = (<Mapping>segs[j]).addr
            with nogil:
                rc = _scan_loop(addrs, k0, nseg, S, &pos, limit, NULL, limit, &count,
                                expect_index)
        finally:
            free(addrs)
        if rc != V_OK or pos < limit:
            self._raise_bad(self._seg_for_pos(pos), pos, rc if rc != V_OK else V_SIZE)
        return 0

    # ------------------------------------------------------------------ truncation, retention
    def truncate_after(self, int64_t i):
        """Drop entries > i: their bytes, any BLANK after i, later segments and their raft
        index entries are zeroed/unlinked. Durable before returning when it cuts into
        flushed data (a crash must not resurrect the dropped records)."""
        cdef int64_t new_end, old_end, k_new, S = self.segment_size_bytes, j
        cdef const IdxEntry *e
        cdef Mapping m
        cdef int err
        cdef const char *cpath
        cdef bytes bpath
        cdef int64_t seg_old_end, new_term
        cdef bint lowered
        self._check_open()
        if i >= self._next_index - 1:
            return      # nothing after i
        if i < self._first_index - 1 or i < 0:
            raise IndexOutOfRangeError(f"cannot truncate after {i}: first_index is {self._first_index}")
        if i < self._committed_index:
            raise InvalidArgumentError(
                f"cannot truncate after {i}: entries up to {self._committed_index} are committed")
        self._acquire()
        # no flush may be in flight: it would raise flushed_position past the new end
        self._flush_lock.acquire()
        try:
            old_end = self._end
            if i >= self._first_index:
                e = self._entry_checked(i)
                new_end = e.position + e.size
                new_term = e.term
            else:
                new_end = self.min_position
                new_term = 0
            lowered = new_end < self._flushed_pos
            if lowered:
                # the checkpoint must never claim records that are about to disappear
                self._flushed_pos = new_end
                self._flushed_index = i
                self._write_checkpoint(False)
            k_new = new_end // S
            m = self._seg(k_new)
            seg_old_end = min(old_end, m.start + S)
            bpath = os.fsencode(m.path)
            cpath = bpath
            # The zeroed range is synced whether or not it was flushed: the kernel may
            # have written the dropped records back on its own, and a crash must not bring
            # them back (recovery would find intact records after the end, or resurrect
            # dropped entries). Truncation is rare; one sync each is cheap.
            with nogil:
                err = ql_zero_range(cpath, m.addr, new_end - m.start, seg_old_end - new_end)
                if err == 0:
                    err = ql_msync(m.addr, new_end - m.start, seg_old_end - new_end)
            if err:
                raise OSError(err, os.strerror(err), m.path)
            # later segments: unlink now; their memory goes with the last view
            while len(self._segs) > k_new - self._first_seg + 1:
                m = <Mapping>self._segs.pop()
                self._views.pop()
                try:
                    os.unlink(m.path)
                except FileNotFoundError:
                    pass
            self._cur = <Mapping>self._segs[len(self._segs) - 1]
            self._cur_start = self._cur.start
            for j in range(i + 1, self._next_index):
                ep = self._entry(j, False)
                if ep != NULL:
                    memset(ep, 0, IDX_ENTRY)
            self._msync_index(i + 1, self._next_index - 1)
            self._end = new_end
            self._next_index = i + 1
            self._last_term = new_term if i >= 1 else 0
            if self._dispatched > new_end:
                self._dispatched = new_end
            with self._cv:
                # no flush request may stay beyond the new end (the flusher would spin)
                if self._flush_request > new_end:
                    self._flush_request = new_end
            with self._prep_cv:
                # a preparation in flight targets the old next segment: let it land, then
                # drop it (a file past the new end would break the contiguity of segments)
                while self._prep_busy:
                    self._prep_cv.wait()
                self._prep_request = -1
                if self._prepared is not None:
                    self._discard_prepared()
            self._fsync_dir(self._segdir)
            self._fsync_dir(self._idxdir)
        finally:
            self._flush_lock.release()
            self._release()

    def segments(self):
        """[(start_position, path)] of the segments the log holds, oldest first."""
        self._check_open()
        return [((<Mapping>m).start, (<Mapping>m).path) for m in self._segs]

    def delete_segments_before(self, int64_t position):
        """Unlink whole segments that end at or before `position` (never the segment being
        written). Live views of them stay valid. -> number deleted."""
        cdef int64_t S = self.segment_size_bytes, count = 0
        cdef Mapping m
        self._check_open()
        self._acquire()
        try:
            while len(self._segs) > 1:
                m = <Mapping>self._segs[0]
                if m.start + S > position or m is self._cur:
                    break
                os.unlink(m.path)
                self._segs.pop(0)
                self._views.pop(0)
                self._first_seg += 1
                count += 1
            if count:
                m = <Mapping>self._segs[0]
                h = <const RecHeader *>m.addr
                if self._end > m.start and h.magic == MAGIC and h.type != T_BLANK:
                    self._first_index = h.raft_index
                # raft index files wholly below first_index go too
                while len(self._idx) > 1 and (self._first_idxf + 1) * self.index_file_entries < self._first_index:
                    mi = <Mapping>self._idx.pop(0)
                    os.unlink(mi.path)
                    self._first_idxf += 1
                self._fsync_dir(self._segdir)
        finally:
            self._release()
        if count:
            self.checkpoint()
        return count

    # ------------------------------------------------------------------ durability
    cdef _msync_index(self, int64_t lo, int64_t hi):
        """msync the raft-index entries lo..hi (inclusive)."""
        cdef int64_t f, a, b, N = self.index_file_entries
        cdef Mapping m
        if hi < lo or lo < 1:
            return
        for f in range((lo - 1) // N, (hi - 1) // N + 1):
            m = self._idx_file(f, False)
            if m is None:
                continue
            a = max(lo - 1, f * N) - f * N
            b = min(hi - 1, f * N + N - 1) - f * N + 1
            with nogil:
                ql_msync(m.addr, a * IDX_ENTRY, (b - a) * IDX_ENTRY)

    def flush(self):
        """msync (GIL released) everything appended so far -> flushed_position."""
        self._check_open()
        return self._flush()

    def _flush(self):
        cdef int64_t target, tindex, lo, S = self.segment_size_bytes, a, b, k
        cdef Mapping m
        cdef int err = 0
        with self._flush_lock:
            # a consistent snapshot: both values change together under the GIL
            target = self._end
            tindex = self._next_index - 1
            lo = self._flushed_pos
            if target <= lo and tindex <= self._flushed_index:
                return self._flushed_pos
            segs = [self._seg(k) for k in range(lo // S, (max(target, lo + 1) - 1) // S + 1)]
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
                        raise OSError(err, os.strerror(err), m.path)
            # The raft-index entries are not synced here: recovery rewrites the entries of
            # every record after the checkpoint's flushed position from the log itself, so
            # they only need to be durable up to the checkpoint's flushed_index, which
            # _write_checkpoint ensures. One device flush per group commit instead of two
            # (each costs a journal commit) doubles the flushes per second.
            self.n_flushes += 1
            with self._cv:
                if target > self._flushed_pos:
                    self._flushed_pos = target
                    self._flushed_index = tindex
                self._cv.notify_all()
        return self._flushed_pos

    def wait_flushed(self, int64_t position, timeout=None):
        """Block until every byte before `position` is durable (group commit: one msync
        covers all waiters) -> True, or False on timeout. InvalidArgumentError when
        `position` is beyond end_position: no flush could ever reach it (the flusher
        would spin on the request, and timeout=None would block forever)."""
        cdef double deadline
        if self._flushed_pos >= position:
            return True
        self._check_open()
        if position > self._end:
            raise InvalidArgumentError(
                f"wait_flushed({position}) is beyond end_position {self._end}")
        deadline = time.monotonic() + (timeout if timeout is not None else 1e18)
        with self._cv:
            if position > self._flush_request:
                self._flush_request = position
                self._cv.notify_all()
            while self._flushed_pos < position:
                if self._closed or self._stopping:
                    return self._flushed_pos >= position
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cv.wait(min(remaining, 1.0))
        return True

    def _flush_loop(self):
        # Flush when a waiter asks (group commit: everything appended so far goes in one
        # msync) or when flush_interval_ms has passed with unflushed data.
        interval = self.flush_interval_ms / 1000.0
        while True:
            deadline = time.monotonic() + interval
            with self._cv:
                while not self._stopping and self._flush_request <= self._flushed_pos:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        if self._end > self._flushed_pos:
                            break
                        deadline = time.monotonic() + interval
                        remaining = interval
                    self._cv.wait(remaining)
                if self._stopping:
                    return
            try:
                self._flush()
                if self.checkpoint_interval_ms >= 0 and (
                        time.monotonic() - self._last_cp) * 1000 >= self.checkpoint_interval_ms:
                    self.checkpoint()
            except Exception as e:   # keep flushing; report once per distinct error
                if repr(e) != repr(self._flush_error):
                    log.error("background flush of %s failed: %s", self.path, e)
                self._flush_error = e
                with self._cv:
                    self._cv.wait(interval)

    def commit(self, int64_t index):
        """Advance committed_index (never backwards, never beyond last_index)."""
        cdef const IdxEntry *e
        self._check_open()
        if index > self._next_index - 1:
            raise IndexOutOfRangeError(f"commit {index} beyond last_index {self._next_index - 1}")
        if index <= self._committed_index:
            return
        e = self._entry_checked(index)
        self._committed_pos = e.position + e.size
        self._committed_index = index

    def set_dispatched_position(self, int64_t pos):
        self._check_open()
        if pos < 0 or pos > self._end:
            raise IndexOutOfRangeError(f"dispatched position {pos} beyond end {self._end}")
        self._dispatched = pos

    def checkpoint(self):
        """Write the checkpoint file now (flushed position as of the last flush)."""
        self._check_open()
        # serialised with flushes and truncation so an older snapshot never lands last
        with self._flush_lock:
            self._write_checkpoint(False)

    cdef _fsync_dir(self, str d):
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_checkpoint(self, bint clean):
        cdef int64_t ci, cp
        # the checkpoint's flushed_index is recovery's anchor: its raft-index entries (and
        # all before it) must be durable first (see _flush)
        if self._idx_synced > self._flushed_index:
            self._idx_synced = self._flushed_index     # truncated below: entries were zeroed
        if self._flushed_index > self._idx_synced:
            self._msync_index(max(self._idx_synced + 1, self._first_index, 1), self._flushed_index)
            self._idx_synced = self._flushed_index
        ci = self._committed_index
        cp = self._committed_pos
        if ci > self._flushed_index:   # committed never exceeds flushed in one checkpoint
            ci = self._flushed_index
            cp = self._flushed_pos
        body = struct.pack("<IHHQQQQQQQQq44x", CP_MAGIC, 1, 1 if clean else 0,
                           self._flushed_pos, self._flushed_index, ci, cp,
                           min(self._dispatched, self._flushed_pos), self.min_position,
                           self.segment_size_bytes, self.index_file_entries,
                           int(time.time() * 1000))
        data = body + struct.pack("<I", crc32c(body))
        tmp = os.path.join(self.path, "checkpoint.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(self.path, "checkpoint"))
        self._fsync_dir(self.path)
        self._last_cp = time.monotonic()
        self.n_checkpoints += 1

    # ------------------------------------------------------------------ lifecycle
    def _start_threads(self):
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

    def _stop_threads(self):
        self._stopping = True
        with self._cv:
            self._cv.notify_all()
        with self._prep_cv:
            self._prep_cv.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()
        self._threads = []

    cdef _drop_mappings(self):
        self._segs = []
        self._views = []
        self._idx = []
        self._cur = None
        self._cur_idx = None
        self._cur_idxf = -1
        with self._prep_cv:
            if self._prepared is not None:
                self._discard_prepared()

    def close(self):
        """Flush, write a clean checkpoint, unmap (views stay valid), remove the abort
        marker, release the lock. Idempotent."""
        if self._closed:
            return
        self._stop_threads()
        self._acquire()
        try:
            self._flush()
            with self._flush_lock:
                self._write_checkpoint(True)
            self._closed = True
            self._drop_mappings()
            try:
                os.unlink(os.path.join(self.path, "abort"))
            except FileNotFoundError:
                pass
            self._fsync_dir(self.path)
        finally:
            self._release()
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1
            self._closed = True
            with self._cv:
                self._cv.notify_all()

    def _crash(self):
        """Test hook: drop the log as kill -9 would — no flush, no checkpoint, abort marker
        left, mappings dropped, lock released. The page cache keeps what was written."""
        if self._closed:
            return
        self._stop_threads()
        self._acquire()
        try:
            self._closed = True
            self._segs = []
            self._views = []
            self._idx = []
            self._cur = None
            self._cur_idx = None
            self._cur_idxf = -1
            self._prepared = None
        finally:
            self._release()
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1
            with self._cv:
                self._cv.notify_all()

    # ------------------------------------------------------------------ recovery
    def _read_checkpoint(self):
        cp = os.path.join(self.path, "checkpoint")
        try:
            with open(cp, "rb") as f:
                data = f.read(CP_SIZE + 1)
        except FileNotFoundError:
            return None
        if len(data) != CP_SIZE:
            raise CorruptLogError(f"{cp}: checkpoint is {len(data)} bytes, not {CP_SIZE}", cp, 0)
        (magic, version, flags, flushed_pos, flushed_index, committed_index, committed_pos,
         dispatched, min_pos, seg_size, idx_entries, written_at) = struct.unpack_from(
            "<IHHQQQQQQQQq", data, 0)
        (crc,) = struct.unpack_from("<I", data, 124)
        if magic != CP_MAGIC:
            raise CorruptLogError(f"{cp}: bad checkpoint magic", cp, 0)
        if crc != crc32c(data[:124]):
            raise CorruptLogError(f"{cp}: checkpoint CRC mismatch", cp, 124)
        if version != 1:
            raise CorruptLogError(f"{cp}: unknown checkpoint version {version}", cp, 4)
        if seg_size != self.segment_size_bytes or idx_entries != self.index_file_entries:
            # The raft index geometry of an existing log is the one it was created with,
            # whatever the caller passes (it only names files).
            if (seg_size < 65536 or seg_size % 4096 or seg_size > 0xFFFFFFFF or
                    idx_entries < 1 or idx_entries > (1 << 30)):
                raise CorruptLogError(f"{cp}: implausible segment/index geometry", cp, 56)
            if seg_size != self.segment_size_bytes:
                # segment boundaries decide where records are: never reinterpret them
                raise ConfigError(f"{self.path} was written with segment_size_bytes="
                                  f"{seg_size}; opened with {self.segment_size_bytes}")
            if idx_entries != self.index_file_entries:
                log.info("%s: using the stored index_file_entries=%d (asked %d)", self.path,
                         idx_entries, self.index_file_entries)
            self.segment_size_bytes = seg_size
            self.index_file_entries = idx_entries
        return dict(flags=flags, flushed_position=flushed_pos, flushed_index=flushed_index,
                    committed_index=committed_index, committed_position=committed_pos,
                    dispatched_position=dispatched, min_position=min_pos)

    def _list_numbered(self, str d):
        out = []
        for name in os.listdir(d):
            if len(name) == 20 and name.isdigit():
                out.append(int(name))
            elif name.endswith(".tmp"):
                os.unlink(os.path.join(d, name))
        out.sort()
        return out

    def _recover(self):
        cdef int64_t S, N
        cdef int64_t start, k, pos, idx, term, end, last_index, stop_pos, first_index
        cdef int rc, stop_rc
        cdef Mapping m
        cdef const RecHeader *h
        cdef const IdxEntry *e
        cdef char *ep
        abort_path = os.path.join(self.path, "abort")
        self.unclean_open = os.path.exists(abort_path)
        with open(abort_path, "wb"):
            pass
        cp = self._read_checkpoint()
        S = self.segment_size_bytes
        N = self.index_file_entries
        starts = self._list_numbered(self._segdir)
        for s in starts:
            if s % S:
                raise CorruptLogError(f"segment {s} is not aligned to segment_size_bytes {S}",
                                      os.path.join(self._segdir, _segment_name(s)), 0)
        for a, b in zip(starts, starts[1:]):
            if b != a + S:
                raise CorruptLogError(f"segment files are not contiguous: {a} then {b}",
                                      os.path.join(self._segdir, _segment_name(b)), 0)
        if not starts:
            start = cp["min_position"] if cp else 0
            if start % S:
                raise CorruptLogError("checkpoint min_position not segment-aligned",
                                      os.path.join(self.path, "checkpoint"), 48)
            starts = [start]
        # Durable bytes (before the checkpoint's flushed position) must all be there: a
        # missing or short segment below it is lost data, not a torn tail.
        if cp:
            fp = cp["flushed_position"]
            if fp > cp["min_position"]:
                if starts[0] > cp["min_position"] and starts[0] < fp:
                    miss = os.path.join(self._segdir, _segment_name(cp["min_position"]))
                    raise CorruptLogError(f"{miss}: segment holding durable data is missing",
                                          miss, 0)
                need_last = ((fp - 1) // S) * S
                if starts[len(starts) - 1] < need_last:
                    miss = os.path.join(self._segdir, _segment_name(starts[len(starts) - 1] + S))
                    raise CorruptLogError(f"{miss}: segment holding durable data is missing",
                                          miss, 0)
                for s0 in starts:
                    if s0 < fp:
                        f = os.path.join(self._segdir, _segment_name(s0))
                        sz = os.path.getsize(f)
                        if sz < S and s0 + sz < fp:
                            raise CorruptLogError(
                                f"{f}: segment is {sz} bytes, shorter than {S}, and held "
                                f"durable data", f, sz)
        self._first_seg = starts[0] // S
        for s in starts:
            # a short file past the durable point (cut by a crash of a file tool) is
            # re-extended; its missing bytes read as zero, i.e. a torn tail
            m = map_file(os.path.join(self._segdir, _segment_name(s)), S, s, True, False,
                         "segment")
            self._segs.append(m)
            self._views.append(memoryview(m))
        idx_starts = self._list_numbered(self._idxdir)
        for a in idx_starts:
            if (a - 1) % N:
                raise CorruptLogError(f"raft index file {a} is misaligned",
                                      os.path.join(self._idxdir, _segment_name(a)), 0)
        for a, b in zip(idx_starts, idx_starts[1:]):
            if b != a + N:
                raise CorruptLogError(f"raft index files are not contiguous: {a} then {b}",
                                      os.path.join(self._idxdir, _segment_name(b)), 0)
        if idx_starts:
            self._first_idxf = (idx_starts[0] - 1) // N
            for a in idx_starts:
                self._idx.append(map_file(os.path.join(self._idxdir, _segment_name(a)),
                                          N * IDX_ENTRY, a, False, False, "raft index file"))

        # where the scan starts: the checkpoint's flushed position when its anchor record
        # (the last one before it) checks out; else the first segment
        min_pos = self._first_seg * S
        start = min_pos
        idx = -1          # expected next raft index (-1: take the first record's)
        term = 0
        if cp and cp["flushed_position"] > min_pos and cp["flushed_index"] > 0:
            fi = cp["flushed_index"]
            ep = self._entry(fi, False)
            if ep != NULL:
                e = <const IdxEntry *>ep
                m = self._seg(<int64_t>e.position // S)
                if (m is not None and e.position + e.size == cp["flushed_position"] and
                        verify_record(m.addr + (e.position - m.start),
                                      m.start + S - e.position, e.position, True) == V_OK and
                        (<const RecHeader *>(m.addr + (e.position - m.start))).raft_index == fi):
                    start = cp["flushed_position"]
                    idx = fi + 1
                    term = e.term
        elif cp and cp["flushed_position"] == min_pos and cp["flushed_index"] > 0:
            idx = cp["flushed_index"] + 1   # empty after retention + truncation

        # pass 1: verify only (nothing changes until the corruption checks pass)
        pos = start
        end = start
        last_index = idx - 1 if idx > 0 else 0
        first_index = 0
        stop_rc = V_OK
        while True:
            k = pos // S
            m = self._seg(k)
            if m is None:
                break
            rc = verify_record(m.addr + (pos - m.start), m.start + S - pos, pos, True)
            if rc != V_OK:
                stop_rc = rc
                break
            h = <const RecHeader *>(m.addr + (pos - m.start))
            if h.type == T_BLANK:
                pos = m.start + S    # counts only once a record follows it
                continue
            if idx > 0 and h.raft_index != <uint64_t>idx:
                stop_rc = V_LENGTHS
                break
            if h.raft_term < <uint64_t>term:
                stop_rc = V_LENGTHS
                break
            if first_index == 0:
                first_index = h.raft_index
            idx = h.raft_index + 1
            term = h.raft_term
            last_index = h.raft_index
            pos += h.total_size
            end = pos
        stop_pos = end
        # an intact record beyond the stop point means damage in the middle
        i = last_index + 1
        while True:
            ep = self._entry(i, False)
            if ep == NULL:
                break
            e = <const IdxEntry *>ep
            if e.size == 0:
                break
            m = self._seg(<int64_t>e.position // S)
            if m is not None and e.position >= <uint64_t>stop_pos and verify_record(
                    m.addr + (e.position - m.start), m.start + S - e.position,
                    e.position, True) == V_OK and (<const RecHeader *>(
                    m.addr + (e.position - m.start))).raft_index == <uint64_t>i:
                self._raise_stop(stop_pos, stop_rc, f"raft index {i} at position {e.position} is intact")
            i += 1
        for j in range(stop_pos // S + 1 - self._first_seg, len(self._segs)):
            m = <Mapping>self._segs[j]
            if verify_record(m.addr, S, m.start, True) == V_OK:
                self._raise_stop(stop_pos, stop_rc, f"segment {m.path} starts with an intact record")

        # pass 2: the tail is torn (or clean): cut it, then make the raft index agree
        k = stop_pos // S
        m = self._seg(k)
        if m is None:        # stop exactly at a segment start that has no file
            m = map_file(self._seg_path(k), S, k * S, True, True, "segment")
            self._segs.append(m)
            self._views.append(memoryview(m))
        tail_dirty = self.unclean_open or any(
            (<const unsigned char *>(m.addr + (stop_pos - m.start)))[x] != 0
            for x in range(min(HDR, m.start + S - stop_pos)))
        if tail_dirty:
            bpath = os.fsencode(m.path)
            ql_zero_range(bpath, m.addr, stop_pos - m.start, m.start + S - stop_pos)
            ql_msync(m.addr, stop_pos - m.start, m.start + S - stop_pos)
            log.warning("%s: %s open; log ends at position %d (index %d)", self.path,
                        "unclean" if self.unclean_open else "clean", stop_pos, last_index)
        while len(self._segs) > k - self._first_seg + 1:
            mm = <Mapping>self._segs.pop()
            self._views.pop()
            os.unlink(mm.path)
        self._cur = <Mapping>self._segs[len(self._segs) - 1]
        self._cur_start = self._cur.start
        if first_index == 0:
            # nothing scanned: the first record of the log (if any) names first_index
            m = <Mapping>self._segs[0]
            if stop_pos > min_pos and verify_record(m.addr, S, m.start, False) == V_OK:
                first_index = (<const RecHeader *>m.addr).raft_index
            elif last_index > 0:
                first_index = last_index + 1 if stop_pos == min_pos else 1
            else:
                first_index = 1
        if start > min_pos:
            m = <Mapping>self._segs[0]
            if verify_record(m.addr, S, m.start, False) == V_OK:
                first_index = (<const RecHeader *>m.addr).raft_index
        self._first_index = first_index
        self._end = stop_pos
        self._next_index = last_index + 1 if last_index > 0 else first_index
        self._last_term = term
        # index entries of the scanned records, rewritten where they disagree
        pos = start
        while pos < stop_pos:
            m = self._seg(pos // S)
            h = <const RecHeader *>(m.addr + (pos - m.start))
            if h.type == T_BLANK:
                pos = m.start + S
                continue
            ep = self._entry(h.raft_index, True)
            e = <const IdxEntry *>ep
            if (e.position != <uint64_t>pos or e.term != h.raft_term or e.size != h.total_size
                    or e.type != h.type or e.pad0 or e.pad1 or e.pad2):
                write_index(ep, pos, h.raft_term, h.total_size, h.type)
            pos += h.total_size
        # entries beyond the last record are zeroed
        i = self._next_index
        while True:
            ep = self._entry(i, False)
            if ep == NULL or (<const IdxEntry *>ep).size == 0:
                break
            memset(ep, 0, IDX_ENTRY)
            i += 1
        if self._next_index >= 1:
            self._entry(self._next_index, True)
        # durable state after recovery
        self._flushed_pos = start
        if start > min_pos:
            self._flushed_index = cp["flushed_index"]   # the verified anchor
        else:
            self._flushed_index = 0 if idx <= 0 or cp is None else min(cp["flushed_index"], last_index)
        self._idx_dirty_lo = 0
        if cp:
            self._committed_index = min(cp["committed_index"], last_index)
            if self._committed_index >= self._first_index and self._committed_index > 0:
                e = <const IdxEntry *>self._entry(self._committed_index, False)
                self._committed_pos = e.position + e.size
            else:
                self._committed_index = 0 if self._committed_index < self._first_index else self._committed_index
                self._committed_pos = min_pos
            self._dispatched = min(cp["dispatched_position"], stop_pos)
        else:
            self._committed_pos = min_pos
            self._dispatched = min_pos
        self._flush_lock = threading.Lock()
        self._idx_synced = 0        # entries were rewritten above: the checkpoint syncs them
        self._flushed_pos = min(self._flushed_pos, stop_pos)
        if self._flushed_pos < stop_pos or self._flushed_index < last_index:
            self._flushed_index = min(self._flushed_index, last_index)
            self._flush()
        else:
            self._msync_index(1 if last_index else 0, 0)
        self._write_checkpoint(False)
        self._note_last_store()

    def _raise_stop(self, int64_t stop_pos, int rc, str why):
        m = self._seg(stop_pos // self.segment_size_bytes)
        path = m.path if m is not None else self._seg_path(stop_pos // self.segment_size_bytes)
        off = stop_pos - (stop_pos // self.segment_size_bytes) * self.segment_size_bytes
        raise CorruptLogError(
            f"{path} offset {off}: damaged record ({_VERIFY_REASONS.get(rc, 'bad record')}) "
            f"with intact data after it: {why}", path, off)


# ---------------------------------------------------------------------------------------
# nogil loops
# ---------------------------------------------------------------------------------------
cdef inline void _populate_span(char *base, int64_t cs, int64_t S, int64_t pos,
                                int64_t batch_end) noexcept nogil:
    # one madvise(MADV_POPULATE_WRITE) for the pages a batch writes in this segment
    cdef int64_t a = pos & ~(<int64_t>4095)
    cdef int64_t b = batch_end if batch_end < cs + S else cs + S
    if b - a >= 65536:
        ql_populate_write(base, a - cs, b - a)


cdef void _write_batch(const RecSrc *src, const uint32_t *sizes, const int64_t *posp,
                       Py_ssize_t n, char **segaddr, int64_t k_cur, int64_t S,
                       int64_t end, char **idxaddr, int64_t f0, int64_t N,
                       int64_t first_index, int64_t term, uint32_t flags, int64_t store,
                       const int64_t *qids, int64_t qid0, const int64_t *qoffs, int64_t qoff0,
                       const int64_t *borns, int64_t born0, int64_t pop_from,
                       int64_t ipop_from, int64_t ipop_to) noexcept nogil:
    # pop_from: position from which the first segment's pages still need populating;
    # [ipop_from, ipop_to): offsets in the first raft-index file still to populate
    cdef Py_ssize_t j
    cdef int64_t pos = end, cs = k_cur * S, seg = 0, index, fi, slot
    cdef char *base = segaddr[0]
    cdef int64_t fcur = 0
    cdef char *ibase = idxaddr[0]
    cdef int64_t islot = (first_index - 1) - f0 * N
    cdef int64_t batch_end = posp[n - 1] + sizes[n - 1]
    if pop_from < batch_end:
        _populate_span(base, cs, S, pop_from, batch_end)
    if ipop_to - ipop_from >= 4096:
        ql_populate_write(ibase, ipop_from & ~(<int64_t>4095), ipop_to - (ipop_from & ~(<int64_t>4095)))
    for j in range(n):
        if posp[j] != pos:
            # the rest of this segment becomes a BLANK; the record starts the next one
            write_blank(base + (pos - cs), <uint64_t>pos, <uint32_t>(cs + S - pos))
            seg += 1
            cs += S
            base = segaddr[seg]
            pos = cs
            _populate_span(base, cs, S, pos, batch_end)
        index = first_index + j
        encode_record(base + (pos - cs), &src[j], T_MESSAGE, flags, <uint64_t>index,
                      <uint64_t>term, <uint64_t>pos,
                      <uint64_t>(qoffs[j] if qoffs != NULL else qoff0 + j),
                      borns[j] if borns != NULL else born0, store,
                      <uint32_t>(qids[j] if qids != NULL else qid0), sizes[j], True)
        if islot == N:
            fcur += 1
            ibase = idxaddr[fcur]
            islot = 0
        write_index(ibase + islot * IDX_ENTRY, <uint64_t>pos, <uint64_t>term, sizes[j],
                    T_MESSAGE)
        islot += 1
        pos += sizes[j]
    ql_store_fence()     # streaming stores are weakly ordered: complete them before _end moves


cdef int _scan_loop(char **addrs, int64_t k0, Py_ssize_t nseg, int64_t S, int64_t *pos_io,
                    int64_t limit, RecInfo *out, int64_t cap, Py_ssize_t *count_out,
                    int64_t expect_index) noexcept nogil:
    # Verifies consecutive records (CRC included) and, when `out` is not NULL, fills one
    # RECORD_INFO per non-BLANK record. expect_index > 0: raft indexes must continue it.
    cdef int64_t pos = pos_io[0], k, off
    cdef Py_ssize_t count = 0
    cdef const RecHeader *h
    cdef const char *p
    cdef RecInfo *r
    cdef int rc = V_OK
    while count < cap and pos < limit:
        k = pos // S - k0
        if k >= nseg:
            break
        off = pos - (pos // S) * S
        p = addrs[k] + off
        rc = verify_record(p, S - off, <uint64_t>pos, True)
        if rc != V_OK:
            break
        h = <const RecHeader *>p
        if h.type == T_BLANK:
            pos += h.total_size
            continue
        if pos + h.total_size > limit:
            break
        if expect_index > 0:
            if h.raft_index != <uint64_t>expect_index:
                rc = V_INDEX
                break
            expect_index += 1
        if out == NULL:
            count += 1
            pos += h.total_size
            continue
        r = &out[count]
        r.index = h.raft_index
        r.term = h.raft_term
        r.position = pos
        r.queue_offset = h.queue_offset
        r.born_ts = h.born_ts
        r.store_ts = h.store_ts
        r.tag_hash = h.tag_hash
        r.topic_hash = <int64_t>fnv1a(p + HDR, h.topic_len)
        r.size = h.total_size
        r.queue_id = h.queue_id
        r.body_offset = h.total_size - h.body_len
        r.body_len = h.body_len
        r.flags = h.flags
        r.type = h.type
        r.pad0 = 0
        r.pad1 = 0
        r.pad2 = 0
        count += 1
        pos += h.total_size
    pos_io[0] = pos
    count_out[0] = count
    return rc
