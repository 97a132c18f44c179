# cython: language_level=3
"""The fixed-size fields of a wire message (quorumlog.net.codec) packed and unpacked in one C
loop: the range of every field checked in C instead of one Python call per field (a Raft
APPEND and its answer carry 7-8 such fields each, and every produce costs four of these
messages per replica).

codec.py keeps the pure-Python reference (Fixed.check per field). This is only a fast path:
whenever it meets anything it does not handle exactly -- a value outside its field's range,
a value that is not an int, a conversion (enum) that refuses the value -- it returns None
and codec.py runs the reference, which raises the precise error (or handles the value, e.g.
a numpy integer). A differential test and a fuzz test hold the two equal."""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.dict cimport PyDict_SetItem
from cpython.long cimport PyLong_Check
from libc.stdint cimport int64_t, uint64_t, uint8_t
from libc.stdlib cimport malloc, free

from enum import IntEnum

# a field's width and signedness, from its struct format character (little-endian, no padding)
cdef enum:
    K_U8 = 0
    K_U16 = 1
    K_U32 = 2
    K_U64 = 3
    K_I32 = 4
    K_I64 = 5

cdef dict _KINDS = {"B": (K_U8, 1), "H": (K_U16, 2), "I": (K_U32, 4), "Q": (K_U64, 8),
                    "i": (K_I32, 4), "q": (K_I64, 8)}


cdef inline uint64_t _ld(const uint8_t *p, int w) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(w - 1, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef inline void _st(uint8_t *p, uint64_t v, int w) noexcept nogil:
    cdef int i
    for i in range(w):
        p[i] = v & 0xFF
        v >>= 8


cdef bint _signed_in(object v, int64_t lo, int64_t hi, uint64_t *out) except -1:
    """v (an int) within [lo, hi] -> its two's complement bits in out; False if not."""
    cdef int64_t s
    try:
        s = v
    except OverflowError:
        return False
    if s < lo or s > hi:
        return False
    out[0] = <uint64_t>s
    return True


cdef bint _unsigned_in(object v, uint64_t lo, uint64_t hi, uint64_t *out) except -1:
    cdef uint64_t u
    if v < 0:
        return False
    try:
        u = v
    except OverflowError:
        return False
    if u < lo or u > hi:
        return False
    out[0] = u
    return True


cdef object _members_of(conv):
    """An IntEnum's value -> member map (what Enum.__call__ looks a value up in first), else
    None. A dict of int keys only: bool (an int's conversion, not an enum) has none."""
    if isinstance(conv, type) and issubclass(conv, IntEnum):
        members = conv._value2member_map_
        if type(members) is dict and all(type(k) is int for k in members):
            return members
    return None


cdef class FixedLayout:
    """The fixed fields of one message type: names, struct format characters, inclusive
    bounds, and the optional conversion of each (an IntEnum, bool, or None)."""
    cdef readonly Py_ssize_t count, size
    cdef int *kind
    cdef int *width
    cdef int64_t *lo          # signed kinds: bounds as int64
    cdef int64_t *hi
    cdef uint64_t *ulo        # unsigned kinds: bounds as uint64
    cdef uint64_t *uhi
    cdef tuple names, convs
    # per field: an IntEnum conversion's value -> member map (its _value2member_map_), or
    # None: a value found there is converted by one dict lookup in C, not by Enum.__call__
    # (two Python frames per field; Code of every APPEND answer); any other value, and any
    # other conversion, still goes through the conversion itself
    cdef tuple members
    cdef bint any_conv

    def __cinit__(self, names, fmts, los, his, convs):
        cdef Py_ssize_t n = len(names), i
        if not (len(fmts) == len(los) == len(his) == len(convs) == n):
            raise ValueError("names, fmts, los, his and convs must have one entry per field")
        self.count = n
        self.kind = <int *>malloc(max(n, 1) * sizeof(int))
        self.width = <int *>malloc(max(n, 1) * sizeof(int))
        self.lo = <int64_t *>malloc(max(n, 1) * sizeof(int64_t))
        self.hi = <int64_t *>malloc(max(n, 1) * sizeof(int64_t))
        self.ulo = <uint64_t *>malloc(max(n, 1) * sizeof(uint64_t))
        self.uhi = <uint64_t *>malloc(max(n, 1) * sizeof(uint64_t))
        if not (self.kind and self.width and self.lo and self.hi and self.ulo and self.uhi):
            raise MemoryError()
        self.names = tuple(names)
        self.convs = tuple(convs)
        self.members = tuple(_members_of(c) for c in self.convs)
        self.any_conv = any(c is not None for c in self.convs)
        self.size = 0
        for i in range(n):
            if fmts[i] not in _KINDS:
                raise ValueError(f"unsupported field format {fmts[i]!r}")
            k, w = _KINDS[fmts[i]]
            self.kind[i] = k
            self.width[i] = w
            self.size += w
            if k == K_I32 or k == K_I64:
                self.lo[i] = los[i]
                self.hi[i] = his[i]
            else:
                if los[i] < 0:
                    raise ValueError("an unsigned field cannot have a negative bound")
                self.ulo[i] = los[i]
                self.uhi[i] = his[i]

    def __dealloc__(self):
        free(self.kind)
        free(self.width)
        free(self.lo)
        free(self.hi)
        free(self.ulo)
        free(self.uhi)

    cdef list _values(self, const uint8_t *p):
        """The fixed fields at p (at least `size` bytes), each converted, in order; None
        when one is outside its bounds or its conversion refuses it."""
        cdef Py_ssize_t i
        cdef uint64_t u
        cdef int64_t s
        cdef list out = []
        cdef object v, conv, members, got
        for i in range(self.count):
            u = _ld(p, self.width[i])
            p += self.width[i]
            if self.kind[i] == K_I64:
                s = <int64_t>u
                if s < self.lo[i] or s > self.hi[i]:
                    return None
                v = s
            elif self.kind[i] == K_I32:
                s = <int64_t>(<int>(<unsigned int>u))
                if s < self.lo[i] or s > self.hi[i]:
                    return None
                v = s
            else:
                if u < self.ulo[i] or u > self.uhi[i]:
                    return None
                v = u
            if self.any_conv:
                conv = self.convs[i]
                if conv is not None:
                    members = self.members[i]
                    got = (<dict>members).get(v) if members is not None else None
                    if got is not None:
                        v = got
                    else:
                        try:
                            v = conv(v)
                        except ValueError:
                            return None
            out.append(v)
        return out

    cdef bint _pack_to(self, object msg, uint8_t *p) except -1:
        """The fixed fields of msg's attributes written at p (`size` bytes); False (p's
        bytes undefined) when one is missing, not an int, out of bounds or refused by its
        conversion."""
        cdef Py_ssize_t i
        cdef object v, conv
        cdef uint64_t u
        cdef bint ok
        cdef object members
        for i in range(self.count):
            try:
                v = getattr(msg, self.names[i])
            except AttributeError:
                return False
            if not PyLong_Check(v):
                return False
            if self.any_conv:
                conv = self.convs[i]
                if conv is not None:
                    members = self.members[i]
                    if members is None or v not in <dict>members:
                        try:
                            conv(v)
                        except ValueError:
                            return False
            if self.kind[i] == K_I64 or self.kind[i] == K_I32:
                ok = _signed_in(v, self.lo[i], self.hi[i], &u)
            else:
                ok = _unsigned_in(v, self.ulo[i], self.uhi[i], &u)
            if not ok:
                return False
            _st(p, u, self.width[i])
            p += self.width[i]
        return True

    def unpack(self, buf):
        """{name: value} of the fixed fields at the start of `buf` (a contiguous bytes-like
        object of at least `size` bytes), or None when a field is outside its bounds or its
        conversion refuses it (the caller's reference path then raises the error)."""
        cdef Py_buffer view
        cdef list vals
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            if view.len < self.size:
                return None
            vals = self._values(<const uint8_t *>view.buf)
        finally:
            PyBuffer_Release(&view)
        if vals is None:
            return None
        return dict(zip(self.names, vals))

    def pack(self, msg):
        """bytes of the fixed fields read from `msg`'s attributes, or None when one is
        missing, not an int, outside its bounds, or refused by its conversion."""
        cdef bytes out = PyBytes_FromStringAndSize(NULL, self.size)
        if not self._pack_to(msg, <uint8_t *>PyBytes_AS_STRING(out)):
            return None
        return out


include "wirecodec_frame.pxi"
