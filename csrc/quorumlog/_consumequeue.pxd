# Consume queues (the store layer's per-(topic, queue) index) and the lazily decoded Message.
# What other Cython modules may cimport: the entry layout, the mapped-file wrappers, Message.
from libc.stdint cimport int64_t, int32_t


# One consume-queue entry (format.md "Store layer"): 20 bytes, little-endian, packed.
cdef packed struct CQEntry:
    int64_t position          # log position of the record
    int32_t size              # its total size; 0: a hole (no entry)
    int64_t tag_hash          # its tag hash (FNV-1a 64 of the tags; 0: none)


cdef class SegmentView:
    """A read-only buffer over one commit-log segment file; keeps the mapping alive while any
    Message made from it lives (so retention may unlink the file underneath readers)."""
    cdef Py_buffer _buf
    cdef bint _has_buf
    cdef const unsigned char *base
    cdef readonly int64_t start
    cdef readonly int64_t length
    cdef readonly object owner
    cdef readonly object path         # the segment file (named in errors)


cdef class Message:
    cdef SegmentView _seg
    cdef const unsigned char *_p
    cdef readonly int64_t position
    cdef readonly int32_t size
    cdef object _props


cdef class CQFile:
    """One preallocated, mmap'd consume-queue file of `capacity` 20-byte entries."""
    cdef Py_buffer _buf
    cdef bint _has_buf
    cdef unsigned char *base
    cdef readonly int64_t first_offset
    cdef readonly Py_ssize_t capacity
    cdef readonly object path
    cdef readonly object mm
    cdef public bint dirty


cdef class ConsumeQueue:
    cdef public object topic
    cdef public int queue_id
    cdef public object dir
    cdef public Py_ssize_t file_entries
    cdef public int64_t next_offset
    cdef public bint empty
    cdef public CQFile cur
    cdef public dict files
    cdef public list starts
    cdef public object min_offset_cache
    cdef public bint read_only
    cdef public bint detached     # read-only and reset: files are not read again (zeros)
