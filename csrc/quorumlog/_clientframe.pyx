# cython: language_level=3
"""Client-side framing of a produce batch: the bodies list of a ProduceRequest payload
(u32 count, then u32 length + bytes per body, as quorumlog.net.codec lays it out) built in one
C loop, so a batch of many small messages costs no Python bytecode per message."""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.stdint cimport uint32_t, uint8_t
from libc.string cimport memcpy, memset

from quorumlog.net.errors import EncodeError

cdef inline void st32(uint8_t *p, uint32_t v) nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = (v >> 24) & 0xFF


def encode_bodies(bodies, Py_ssize_t max_count):
    """bodies: list or tuple of bytes-like objects -> bytes of the encoded list.

    EncodeError (nothing produced) when there are more than max_count bodies, a body is not
    a contiguous bytes-like object, or a body does not fit a u32 length."""
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
