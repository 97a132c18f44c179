# Declarations other Cython modules may cimport from quorumlog._commitlog: the CRC32C
# functions (linked into every extension by setup.py) and the mapping object whose buffer
# the log's memoryviews export.
from libc.stdint cimport uint32_t, int64_t

cdef extern from "crc32c.h" nogil:
    uint32_t ql_crc32c_update(uint32_t state, const void *buf, size_t length)
    uint32_t ql_crc32c(const void *buf, size_t length)
    uint32_t ql_crc32c_sw(const void *buf, size_t length)
    int ql_crc32c_hw()
    int ql_crc32c_paths()
    uint32_t ql_crc32c_update_path(int path, uint32_t state, const void *buf, size_t length)


cdef class Mapping:
    """One mmap(2)'d file. munmap happens only in __dealloc__, i.e. when neither the log
    nor any exported memoryview refers to it any more."""
    cdef char *addr
    cdef Py_ssize_t size
    cdef Py_ssize_t _stride
    # bytes from the start already faulted in for writing (a hint: pages can be dropped
    # again, e.g. by truncation; correctness never depends on it)
    cdef int64_t populated
    # descriptor the log writes the file through (pwrite), opened on first use and closed
    # once the segment is no longer the one appended to; -1 when not open
    cdef int fd
    # the segment start this file had before retention freed it and a new segment reused it
    # (commitlog_recycle.pxi); -1 for a file created for its segment
    cdef int64_t recycled_from
    cdef readonly int64_t start
    cdef readonly str path
