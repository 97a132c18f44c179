# cython: language_level=3
"""Client-side framing of a produce batch: the bodies list of a ProduceRequest payload
(u32 count, then u32 length + bytes per body, as quorumlog.net.codec lays it out) built in one
C loop, so a batch of many small messages costs no Python bytecode per message; and the
leader's side of it: a batch's acknowledged positions as wire bytes in one C pass."""
import sys

from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_FORMAT,
                             PyBUF_C_CONTIGUOUS)
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t, uint8_t
from libc.string cimport memcpy, memset


cdef inline void st32(uint8_t *p, uint32_t v) nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = (v >> 24) & 0xFF


def encode_bodies(bodies, Py_ssize_t max_count):
    """bodies: list or tuple of bytes-like objects -> bytes of the encoded list.

    EncodeError (nothing produced) when there are more than max_count bodies, a body is not
    a contiguous bytes-like object, or a body does not fit a u32 length."""
    # (imported here: quorumlog.net's codec imports this module)
    from quorumlog.net.errors import EncodeError
    if not isinstance(bodies, (list, tuple)):
        raise EncodeError(f"bodies: expected a list or tuple, got {type(bodies).__name__}")
    cdef Py_ssize_t n = len(bodies), i, total = 4, k = 0
    if n > max_count:
        raise EncodeError(f"bodies: {n} items > {max_count}")
    cdef Py_buffer *bufs = <Py_buffer *>PyMem_Malloc(max(n, 1) * sizeof(Py_buffer))
    if bufs == NULL:
        raise MemoryError()
    cdef uint8_t *out
    cdef bytes result
    try:
        for i in range(n):
            try:
                PyObject_GetBuffer(bodies[i], &bufs[i], PyBUF_SIMPLE)
            except (TypeError, BufferError):
                raise EncodeError(f"bodies[{i}]: expected a contiguous bytes-like object, got "
                                  f"{type(bodies[i]).__name__}") from None
            k = i + 1
            if bufs[i].len > 0xFFFFFFFF:
                raise EncodeError(f"bodies[{i}]: {bufs[i].len} bytes does not fit a u32 length")
            total += 4 + bufs[i].len
        result = PyBytes_FromStringAndSize(NULL, total)
        out = <uint8_t *>PyBytes_AS_STRING(result)
        with nogil:
            st32(out, <uint32_t>n)
            out += 4
            for i in range(n):
                st32(out, <uint32_t>bufs[i].len)
                memcpy(out + 4, bufs[i].buf, bufs[i].len)
                out += 4 + bufs[i].len
        return result
    finally:
        for i in range(k):
            PyBuffer_Release(&bufs[i])
        PyMem_Free(bufs)


# ---------------------------------------------------------------------------------------------
# Fetch responses: records as stored (docs/format.md), checked and wrapped without a Python
# decoder per record.

cdef extern from "crc32c.h":
    uint32_t ql_crc32c(const void *buf, size_t len) nogil

from libc.stdint cimport int64_t, uint64_t, uint16_t
from quorumlog.errors import CorruptLogError

DEF REC_HEADER = 96
DEF REC_MAGIC = 0x4C51
DEF TYPE_MESSAGE = 1

cdef inline uint32_t ld32(const uint8_t *p) nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)

cdef inline uint16_t ld16(const uint8_t *p) nogil:
    return p[0] | (<uint16_t>p[1] << 8)

cdef inline int64_t ld64(const uint8_t *p) nogil:
    return <int64_t>(<uint64_t>ld32(p) | (<uint64_t>ld32(p + 4) << 32))


cdef class FetchedMessage:
    """One fetched message: the record's header fields as attributes, the variable part
    decoded on access (`body` is a zero-copy memoryview of the response frame)."""
    cdef readonly object raw
    cdef readonly int64_t index, term, position, queue_offset, born_timestamp_ms
    cdef readonly int64_t store_timestamp_ms, tag_hash
    cdef readonly uint32_t flags, queue_id, body_len
    cdef uint16_t _topic_len, _tags_len
    cdef uint32_t _keys_len, _props_len

    @property
    def topic(self):
        return str(self.raw[REC_HEADER:REC_HEADER + self._topic_len], "utf-8")

    @property
    def tags(self):
        cdef Py_ssize_t o = REC_HEADER + self._topic_len
        return str(self.raw[o:o + self._tags_len], "utf-8") if self._tags_len else None

    @property
    def body(self):
        cdef Py_ssize_t o = (REC_HEADER + self._topic_len + self._tags_len + self._keys_len
                             + self._props_len)
        return self.raw[o:o + self.body_len]

    @property
    def keys(self):
        from quorumlog.format import decode_record
        return decode_record(self.raw).keys

    @property
    def properties(self):
        from quorumlog.format import decode_record
        return decode_record(self.raw).properties

    def __repr__(self):
        return (f"FetchedMessage(index={self.index}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, body_len={self.body_len})")


def decode_fetched(records):
    """records: list of bytes-like whole MESSAGE records -> list of FetchedMessage.

    Each record's magic, version, type, length fields and CRC32C are checked;
    CorruptLogError names the first bad one (nothing is returned)."""
    cdef list out = []
    cdef Py_buffer b
    cdef const uint8_t *p
    cdef Py_ssize_t i = 0, n
    cdef uint32_t total
    cdef FetchedMessage fm
    cdef object mv
    for rec in records:
        mv = memoryview(rec)
        PyObject_GetBuffer(mv, &b, PyBUF_SIMPLE)
        try:
            p = <const uint8_t *>b.buf
            n = b.len
            if n < REC_HEADER:
                raise CorruptLogError(f"fetched record {i}: {n} bytes < header")
            total = ld32(p + 4)
            if total != n or ld16(p + 8) != REC_MAGIC or p[10] != 1 or p[11] != TYPE_MESSAGE:
                raise CorruptLogError(f"fetched record {i}: bad size, magic, version or type")
            if (<uint64_t>REC_HEADER + ld16(p + 76) + ld16(p + 78) + ld32(p + 80) + ld32(p + 84)
                    + ld32(p + 88)) != total:
                raise CorruptLogError(f"fetched record {i}: length fields do not add up")
            with nogil:
                total = ql_crc32c(p + 4, n - 4)
            if total != ld32(p):
                raise CorruptLogError(f"fetched record {i}: CRC32C mismatch")
            fm = FetchedMessage.__new__(FetchedMessage)
            fm.raw = mv
            fm.flags = ld32(p + 12)
            fm.index = ld64(p + 16)
            fm.term = ld64(p + 24)
            fm.position = ld64(p + 32)
            fm.queue_offset = ld64(p + 40)
            fm.born_timestamp_ms = ld64(p + 48)
            fm.store_timestamp_ms = ld64(p + 56)
            fm.tag_hash = ld64(p + 64)
            fm.queue_id = ld32(p + 72)
            fm._topic_len = ld16(p + 76)
            fm._tags_len = ld16(p + 78)
            fm._keys_len = ld32(p + 80)
            fm._props_len = ld32(p + 84)
            fm.body_len = ld32(p + 88)
            out.append(fm)
        finally:
            PyBuffer_Release(&b)
        i += 1
    return out


def split_blobs(buf, Py_ssize_t off, Py_ssize_t end, Py_ssize_t n, Py_ssize_t max_bytes,
                str name="bodies"):
    """Decode n items of `u32 length + bytes` from buf[off:end] (a 1-D byte memoryview) ->
    (list of memoryview slices of buf, offset after the last). The server's side of
    encode_bodies: one C loop for the lengths and bounds; quorumlog.net.codec's List decoder
    calls it for lists of u32-length blobs. CodecError names the first bad item."""
    from quorumlog.net.errors import CodecError
    cdef Py_buffer b
    cdef const uint8_t *p
    cdef Py_ssize_t i, ln
    cdef list out = []
    PyObject_GetBuffer(buf, &b, PyBUF_SIMPLE)
    try:
        p = <const uint8_t *>b.buf
        if end > b.len or off < 0 or off > end:
            raise CodecError(f"{name}: bad bounds {off}..{end} of {b.len} bytes")
        if n * 4 > end - off:
            raise CodecError(f"{name}: {n} items cannot fit in {end - off} bytes")
        for i in range(n):
            if off + 4 > end:
                raise CodecError(f"{name}[{i}]: needs 4 bytes at offset {off}, payload ends "
                                 f"at {end}")
            ln = ld32(p + off)
            off += 4
            if ln > max_bytes:
                raise CodecError(f"{name}[{i}]: {ln} bytes, expected <= {max_bytes}")
            if off + ln > end:
                raise CodecError(f"{name}[{i}]: needs {ln} bytes at offset {off}, payload "
                                 f"ends at {end}")
            out.append(buf[off:off + ln])
            off += ln
    finally:
        PyBuffer_Release(&b)
    return out, off


def record_indexes_of_type(payload, int rtype):
    """Raft indexes of the records of type `rtype` in `payload` (whole records back to back,
    as a leader's read() returns and append_replicated takes them). A walk over the headers'
    size fields in C -- no CRC (append_replicated checks those): the node uses it to find the
    rare META records among replicated messages without scanning the log again."""
    cdef Py_buffer b
    cdef const uint8_t *p
    cdef Py_ssize_t off = 0, n
    cdef uint32_t size
    cdef list out = []
    PyObject_GetBuffer(payload, &b, PyBUF_SIMPLE)
    try:
        p = <const uint8_t *>b.buf
        n = b.len
        while off + REC_HEADER <= n:
            size = ld32(p + off + 4)
            if size < REC_HEADER:
                break            # not a record: append_replicated refuses the payload
            if p[off + 11] == rtype:
                out.append(ld64(p + off + 16))
            off += size
    finally:
        PyBuffer_Release(&b)
    return out


def ack_positions(positions, Py_ssize_t max_count):
    """A produce acknowledgement's positions (the leader's int64 array, one per message,
    native little-endian, contiguous) -> bytes of them as the wire's list items (i64 each,
    little-endian), in one C pass that checks each is >= 0 (the field's lower bound); None
    when they are anything else -- not such an array, empty, more than max_count, a
    negative one -- and the reference encoder (codec.py List) decides."""
    cdef Py_buffer view
    cdef Py_ssize_t n, i
    cdef const int64_t *p
    cdef bytes out
    if isinstance(positions, (bytes, bytearray, str)):
        return None
    try:
        PyObject_GetBuffer(positions, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)
    except (TypeError, BufferError, ValueError):
        return None
    try:
        if view.ndim != 1 or view.itemsize != 8 or view.format == NULL or \
                not _native_i64(view.format) or sys.byteorder != "little":
            return None
        n = view.len // 8
        if n < 1 or n > max_count:
            return None
        p = <const int64_t *>view.buf
        for i in range(n):
            if p[i] < 0:
                return None
        out = PyBytes_FromStringAndSize(<const char *>view.buf, view.len)
        return out
    finally:
        PyBuffer_Release(&view)


cdef bint _native_i64(const char *fmt) noexcept:
    """A buffer format of a native or little-endian signed 64-bit integer ('q', 'l' on
    LP64, with '@', '=' or '<')."""
    if fmt[0] == b'@' or fmt[0] == b'=' or fmt[0] == b'<':
        fmt += 1
    return (fmt[0] == b'q' or fmt[0] == b'l') and fmt[1] == 0


cdef class OneBodyProduce:
    """The decoder of a ProduceRequest frame of one message (every single-message produce)
    in one C call: codec.py's _OneBodyProduceFrame (the Python twin, used when this module is
    not built) without its Python frame and its ~8 struct and slicing calls. The same
    message -- its body a view of the payload -- or None for anything else (more or fewer
    bodies, a field out of its bounds, text that is not UTF-8, a short or long payload): the
    reference decides, with its precise errors. tests/net/test_produce_frames.py holds the
    three equal."""
    cdef object cls
    cdef Py_ssize_t max_topic, max_tags, max_body
    cdef int64_t max_queue_id

    def __cinit__(self, cls, Py_ssize_t max_topic, Py_ssize_t max_tags, Py_ssize_t max_body,
                  int64_t max_queue_id):
        self.cls = cls
        self.max_topic, self.max_tags, self.max_body = max_topic, max_tags, max_body
        self.max_queue_id = max_queue_id

    @staticmethod
    def encode(*_args):
        return None             # (clients encode produces with client.encode_produce)

    def decode(self, payload, _src, _dst):
        cdef Py_buffer b
        cdef const uint8_t *p
        cdef Py_ssize_t end, off = 29, n, tn, count
        cdef int32_t q
        cdef object topic, tags = None
        if type(payload) is memoryview:
            if payload.ndim != 1 or payload.itemsize != 1:
                return None
        elif type(payload) is not bytes:
            return None
        PyObject_GetBuffer(payload, &b, PyBUF_SIMPLE)
        try:
            p = <const uint8_t *>b.buf
            end = b.len
            if end < off + 10:
                return None
            q = <int32_t>ld32(p)
            n = p[off]
            if q < -1 or q > self.max_queue_id or n < 1 or n > self.max_topic or \
                    off + 1 + n + 9 > end:
                return None
            try:
                topic = PyUnicode_DecodeUTF8(<const char *>p + off + 1, n, NULL)
                off += 1 + n
                tn = p[off]
                if tn > self.max_tags or off + 1 + tn + 8 > end:
                    return None
                if tn:
                    tags = PyUnicode_DecodeUTF8(<const char *>p + off + 1, tn, NULL)
            except UnicodeDecodeError:
                return None
            off += 1 + tn
            count = ld32(p + off)
            n = ld32(p + off + 4)
            off += 8
            if count != 1 or off + n != end or n > self.max_body:
                return None
            return self.cls(topic, [memoryview(payload)[off:end]], q, tags, p[4],
                            <uint64_t>ld64(p + 5), <uint64_t>ld64(p + 13),
                            <uint64_t>ld64(p + 21))
        finally:
            PyBuffer_Release(&b)
