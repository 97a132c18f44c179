# Whole frames of the replication hot path (APPEND, its answer, HEARTBEAT and its answer) in
# one C call each way: frame header (with its CRC32), fixed fields, the APPEND's empty CONFIG
# list and its payload on encode; fixed fields, the empty CONFIG list, the payload view, the
# message object and the APPEND consistency checks on decode. Per single-message produce a
# replica encodes or decodes ~4 of these frames; the generic Python codec (net/codec.py)
# spent ~3 us on each.
#
# Like FixedLayout this is only a fast path: anything it does not handle exactly (CONFIG
# entries, a value out of range, an odd buffer, a frame over the limit, an APPEND whose
# fields disagree) makes it return None, and codec.py runs its reference, which produces the
# same bytes or raises the precise error. tests/net/test_wirecodec.py holds the two equal.

from cpython.buffer cimport PyBUF_ANY_CONTIGUOUS
from libc.stdint cimport int32_t, uint32_t
from libc.string cimport memcpy

cdef uint32_t _CRC_TABLE[256]


cdef void _crc_table_init() noexcept:
    cdef uint32_t c
    cdef int n, k
    for n in range(256):
        c = <uint32_t>n
        for k in range(8):
            c = (0xEDB88320U ^ (c >> 1)) if (c & 1) else (c >> 1)
        _CRC_TABLE[n] = c


_crc_table_init()


cdef inline uint32_t _crc32(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    """zlib.crc32 (IEEE 802.3) of n bytes: what the frame header's checksum is."""
    cdef uint32_t c = 0xFFFFFFFFU
    cdef Py_ssize_t i
    for i in range(n):
        c = _CRC_TABLE[(c ^ p[i]) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFFU


def crc32(data):
    """zlib.crc32(data) (for the differential test of the table above)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _crc32(<const uint8_t *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


cdef enum:
    FRAME_HEADER = 24          # (net/framing.py: HEADER_SIZE, MAGIC, VERSION, MAX_GROUP_ID)
    FRAME_MAGIC = 0x4E51
    FRAME_VERSION = 1
    MAX_GROUP = 0xFFFF

# where a constructor argument of the message class comes from (FrameCodec `args`)
ARG_SRC = -1
ARG_DST = -2
ARG_PAYLOAD = -3
ARG_NBYTES = -4
ARG_CONFIGS = -5


cdef inline void _header(uint8_t *p, int ftype, int group, uint64_t request_id,
                         uint64_t length) noexcept:
    _st(p, FRAME_MAGIC, 2)
    p[2] = FRAME_VERSION
    p[3] = <uint8_t>ftype
    _st(p + 4, 0, 2)                  # flags: none defined in version 1
    _st(p + 6, <uint64_t>group, 2)
    _st(p + 8, request_id, 8)
    _st(p + 16, length, 4)
    _st(p + 20, _crc32(p, 20), 4)


cdef class FrameCodec:
    """One Raft message type's frames. fixed: its FixedLayout; type_code: the frame type;
    cls: the message class, called with positional arguments taken, in `args` order, from
    the fixed fields (an index into them) or ARG_SRC / ARG_DST / ARG_PAYLOAD / ARG_NBYTES /
    ARG_CONFIGS; append: the APPEND layout (fixed fields, u32 CONFIG count, payload to the
    end) and its consistency checks (first = prev + 1, last >= prev, payload iff a batch),
    whose field positions among the fixed fields are `checks` (prev, first, last)."""
    cdef FixedLayout fixed
    cdef int type_code
    cdef object cls
    cdef tuple args
    cdef bint append
    cdef Py_ssize_t i_prev, i_first, i_last

    def __cinit__(self, FixedLayout fixed, int type_code, cls, args, bint append=False,
                  checks=(0, 0, 0)):
        if not 0 < type_code <= 0xFF:
            raise ValueError(f"type code {type_code} outside 1..255")
        self.fixed = fixed
        self.type_code = type_code
        self.cls = cls
        self.args = tuple(args)
        for a in self.args:
            if not (ARG_CONFIGS <= a < fixed.count):
                raise ValueError(f"constructor argument source {a} unknown")
            if not append and a in (ARG_PAYLOAD, ARG_NBYTES, ARG_CONFIGS):
                raise ValueError("payload, nbytes and configs are an APPEND's only")
        self.append = append
        self.i_prev, self.i_first, self.i_last = checks
        for i in checks:
            if not 0 <= i < fixed.count:
                raise ValueError(f"check field {i} outside the fixed fields")

    def encode(self, msg, request_id, group, Py_ssize_t max_frame_bytes,
               Py_ssize_t zero_copy_min_bytes):
        """The frame of msg as codec.encode returns it -- [header + fields (+ a payload under
        zero_copy_min_bytes)] or [header + fields, memoryview of the payload] -- or None."""
        cdef Py_ssize_t fixed_size = self.fixed.size, var = 0, tail = 0, head_size
        cdef uint64_t rid, length
        cdef int grp
        cdef object payload = None, configs, tail_part = None
        cdef Py_buffer view
        cdef bint have_view = False
        cdef bytes head
        cdef uint8_t *p
        if type(request_id) is not int or type(group) is not int:
            return None
        if request_id < 0 or request_id > 0xFFFFFFFFFFFFFFFF or group < 0 or group > MAX_GROUP:
            return None
        rid = request_id
        grp = group
        if self.append:
            try:
                configs = msg.configs
                payload = msg.payload
            except AttributeError:
                return None
            if (type(configs) is not tuple and type(configs) is not list) or len(configs):
                return None                     # CONFIG entries: the reference encodes them
            var = 4
            if payload is not None:
                if type(payload) is memoryview:
                    if payload.ndim != 1 or payload.itemsize != 1 or not payload.c_contiguous:
                        return None
                elif type(payload) is not bytes and type(payload) is not bytearray:
                    return None
                PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
                have_view = True
                tail = view.len
        try:
            length = fixed_size + var + tail
            if <Py_ssize_t>length + FRAME_HEADER > max_frame_bytes or length > 0xFFFFFFFF:
                return None                     # (the reference raises FrameTooLargeError)
            large = tail >= zero_copy_min_bytes
            head_size = FRAME_HEADER + fixed_size + var + (0 if large else tail)
            head = PyBytes_FromStringAndSize(NULL, head_size)
            p = <uint8_t *>PyBytes_AS_STRING(head)
            if not self.fixed._pack_to(msg, p + FRAME_HEADER):
                return None
            _header(p, self.type_code, grp, rid, length)
            if var:
                _st(p + FRAME_HEADER + fixed_size, 0, 4)      # no CONFIG entries
            if tail and not large:
                memcpy(p + FRAME_HEADER + fixed_size + var, view.buf, tail)
            elif tail:
                tail_part = memoryview(payload)             # zero copy: the log's view
        finally:
            if have_view:
                PyBuffer_Release(&view)
        if tail_part is not None:
            return [head, tail_part]
        return [head]

    def decode(self, payload, src, dst):
        """The message of a frame payload (bytes or a contiguous byte memoryview), or None."""
        return self._decode(payload, src, dst)

    cdef object _decode(self, object payload, object src, object dst):
        cdef Py_buffer view
        cdef Py_ssize_t n, fixed_size = self.fixed.size, i
        cdef list vals
        cdef object tail = None, a
        cdef int64_t prev, first, last
        if type(payload) is memoryview:
            if payload.ndim != 1 or payload.itemsize != 1:
                return None
        elif type(payload) is not bytes:
            return None
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            n = view.len
            if n < fixed_size:
                return None
            vals = self.fixed._values(<const uint8_t *>view.buf)
            if vals is None:
                return None
            if self.append:
                if n < fixed_size + 4 or _ld(<const uint8_t *>view.buf + fixed_size, 4) != 0:
                    return None                 # CONFIG entries: the reference decodes them
            elif n != fixed_size:
                return None
        finally:
            PyBuffer_Release(&view)
        if self.append:
            prev, first, last = vals[self.i_prev], vals[self.i_first], vals[self.i_last]
            if first != prev + 1 or last < prev:
                return None
            if n > fixed_size + 4:
                tail = memoryview(payload)[fixed_size + 4:]
            if (last < first) != (tail is None):
                return None                     # a probe has no payload, a batch one
        args = []
        for i in range(len(self.args)):
            a = self.args[i]
            if a >= 0:
                args.append(vals[a])
            elif a == ARG_SRC:
                args.append(src)
            elif a == ARG_DST:
                args.append(dst)
            elif a == ARG_PAYLOAD:
                args.append(tail)
            elif a == ARG_NBYTES:
                args.append(0 if tail is None else n - fixed_size - 4)
            else:
                args.append(())
        return self.cls(*args)


def scan_frames(buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_frame_bytes,
                known_types, bint allow_groups, Py_ssize_t large_payload_bytes,
                bint one_at_a_time, frame_cls, tuple codecs=None, src=None, dst=None):
    """The complete small frames in buf[start:end] (net/framing.py FrameDecoder._parse's
    loop, in C) -> (frames, new start). Stops before anything it does not take exactly: a
    header that fails a check (the caller's loop raises the precise FrameError), a large
    payload (the caller receives it into its own buffer), an incomplete frame; after one
    frame with one_at_a_time. Each frame is frame_cls(type, flags, request_id, payload
    bytes, group, message).

    codecs: None, or a tuple of 256 entries, one per frame type: None, or the type's whole
    frame decoder (a FrameCodec, or any object with decode(payload, src, dst) -> message or
    None, codec.py's `spec.frame`). A frame of a type that has one comes out with its
    `message` already decoded (src, dst: a Raft message's sender and receiver), so the
    caller makes no Python call per frame to decode it; a frame it declines (None, or an
    exception: the reference decides, and raises that again) has message None and the
    caller's reference decode (codec.decode) runs, with its precise error."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef list out = []
    cdef uint64_t length, rid
    cdef int ftype, flags, group
    cdef object payload, dec, msg
    if codecs is not None and len(codecs) != 256:
        raise ValueError("codecs: a tuple of 256 entries (one per frame type) or None")
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if start < 0 or end > view.len or start > end:
            return out, start
        while end - start >= FRAME_HEADER:
            p = <const uint8_t *>view.buf + start
            if _ld(p, 2) != FRAME_MAGIC or p[2] != FRAME_VERSION:
                break
            if _ld(p + 20, 4) != _crc32(p, 20):
                break
            ftype = p[3]
            flags = <int>_ld(p + 4, 2)
            group = <int>_ld(p + 6, 2)
            rid = _ld(p + 8, 8)
            length = _ld(p + 16, 4)
            if flags != 0 or (group and not allow_groups):
                break
            if known_types is not None and ftype not in known_types:
                break
            if <Py_ssize_t>length + FRAME_HEADER > max_frame_bytes:
                break
            if <Py_ssize_t>length >= large_payload_bytes:
                break
            if end - start - FRAME_HEADER < <Py_ssize_t>length:
                break
            payload = PyBytes_FromStringAndSize(<const char *>p + FRAME_HEADER, length)
            msg = None
            if codecs is not None:
                dec = codecs[ftype]
                if dec is not None:
                    msg = _decode_or_none(dec, payload, src, dst)
            out.append(tuple.__new__(frame_cls, (ftype, flags, rid, payload, group, msg)))
            start += FRAME_HEADER + length
            if one_at_a_time:
                break
    finally:
        PyBuffer_Release(&view)
    return out, start


cdef object _decode_or_none(object dec, object payload, object src, object dst):
    """dec's message of payload, or None when it declines or raises (the caller's reference
    decode then runs and decides: the same message, or the precise error)."""
    try:
        if type(dec) is FrameCodec:
            return (<FrameCodec>dec)._decode(payload, src, dst)
        return dec.decode(payload, src, dst)
    except Exception:
        return None


try:
    from quorumlog._clientframe import ack_positions as _ack_positions
except ImportError:       # (built together; without it a batch's array is declined)
    _ack_positions = None

cdef enum:
    ACK_FIXED = 28            # ProduceResponse: first_index q, queue_id i, offset q, ts q


cdef class OneAckFrame:
    """A ProduceResponse frame in one C call each way: codec.py's _OneAckFrame (its Python
    twin, used when this is not built) without its Python frames -- encode: one message's
    acknowledgement, or a batch's whose positions are the leader's int64 array (packed by
    _clientframe.ack_positions); decode: one message's. The same bytes and message, or None
    for anything else (a field out of bounds or not an int, positions in another form, a
    frame over the limit, another payload), and the reference decides with its precise
    errors. tests/net/test_produce_frames.py holds the three equal."""
    cdef object cls
    cdef int type_code
    cdef int64_t max_q
    cdef Py_ssize_t max_count

    def __cinit__(self, cls, int type_code, int64_t max_q, Py_ssize_t max_count):
        self.cls = cls
        self.type_code = type_code
        self.max_q = max_q
        self.max_count = max_count

    def encode(self, msg, request_id, group, Py_ssize_t max_frame_bytes, _zero_copy_min_bytes):
        cdef uint64_t u[4]
        cdef int64_t one = 0
        cdef Py_ssize_t k, blen
        cdef object items = None
        cdef bytes out
        cdef uint8_t *p
        fi, q, fo, ts = msg.first_index, msg.queue_id, msg.first_queue_offset, \
            msg.store_timestamp_ms
        pos = msg.positions
        if type(fi) is not int or type(q) is not int or type(fo) is not int or \
                type(ts) is not int or type(request_id) is not int or type(group) is not int:
            return None
        if not (0 <= fi <= 0x7FFFFFFFFFFFFFFF and 0 <= q <= self.max_q and
                0 <= fo <= 0x7FFFFFFFFFFFFFFF and
                -0x8000000000000000 <= ts <= 0x7FFFFFFFFFFFFFFF and
                0 <= request_id <= 0xFFFFFFFFFFFFFFFF and 0 <= group <= MAX_GROUP):
            return None
        if type(pos) is tuple:
            if len(pos) != 1 or type(pos[0]) is not int or \
                    not 0 <= pos[0] <= 0x7FFFFFFFFFFFFFFF:
                return None
            one = pos[0]
            k = 1
        else:
            items = _ack_positions(pos, self.max_count) if _ack_positions is not None else None
            if items is None:
                return None
            k = len(items) >> 3
        blen = ACK_FIXED + 4 + 8 * k
        if blen + FRAME_HEADER > max_frame_bytes:
            return None
        out = PyBytes_FromStringAndSize(NULL, FRAME_HEADER + blen)
        p = <uint8_t *>PyBytes_AS_STRING(out) + FRAME_HEADER
        _st(p, <uint64_t><int64_t>fi, 8)
        _st(p + 8, <uint64_t><int64_t>q, 4)
        _st(p + 12, <uint64_t><int64_t>fo, 8)
        _st(p + 20, <uint64_t><int64_t>ts, 8)
        _st(p + 28, <uint64_t>k, 4)
        if items is None:
            _st(p + 32, <uint64_t>one, 8)
        else:
            memcpy(p + 32, PyBytes_AS_STRING(items), 8 * k)
        _header(<uint8_t *>PyBytes_AS_STRING(out), self.type_code, group, request_id, blen)
        return [out]

    def decode(self, payload, _src, _dst):
        cdef Py_buffer view
        cdef const uint8_t *p
        cdef int64_t fi, fo, ts, one
        cdef int32_t q
        if type(payload) is memoryview:
            if payload.ndim != 1 or payload.itemsize != 1:
                return None
        elif type(payload) is not bytes:
            return None
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            if view.len != ACK_FIXED + 12:
                return None
            p = <const uint8_t *>view.buf
            fi = <int64_t>_ld(p, 8)
            q = <int32_t><uint32_t>_ld(p + 8, 4)
            fo = <int64_t>_ld(p + 12, 8)
            ts = <int64_t>_ld(p + 20, 8)
            one = <int64_t>_ld(p + 32, 8)
            if _ld(p + 28, 4) != 1 or fi < 0 or fo < 0 or one < 0 or q < 0 or q > self.max_q:
                return None
        finally:
            PyBuffer_Release(&view)
        return self.cls(fi, q, fo, ts, (one,))
