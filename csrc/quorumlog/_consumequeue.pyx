"""Consume queues: RocketMQ's per-(topic, queue) index over the commit log, in Cython.

- CQFile: one preallocated (posix_fallocate) mmap'd file of `capacity` 20-byte entries
  (log position i64, record size i32, tag hash i64; little-endian, packed), named by the queue
  offset of its first entry (20 digits) under <dir>/consumequeue/<topic>/<queue>/. Exposed to
  Python as a numpy structured array over the mapping (zero copy).
- ConsumeQueue: the files of one queue, its next offset, repair on reopen, retention.
- dispatch(): the ReputMessageService loop. It walks columns of commit-log record headers
  (CommitLog.scan's RECORD_INFO, or the store's own append results) and writes one entry per
  MESSAGE record, with no Python object per record. Anything unusual (unknown topic, new file,
  gap, empty queue) stops the loop at that record and the Python caller handles it.
- Message / collect(): get()'s hot path. A Message is a pointer into a read-only mapping of a
  commit-log segment; every field is decoded from the record bytes on access.

Entries of a queue hold committed records only (the store dispatches up to the log's commit
limit), so they are derived data: on reopen anything at or past the durable dispatched
position is dropped and re-dispatched from the log.

One extension module cut into included files, one concern each (listed at the includes);
the record header comes from _format.pxd, the entry layout (CQEntry) from _consumequeue.pxd.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_CheckExact, PyBytes_GET_SIZE
from libc.string cimport memcpy, memset, memcmp
from libc.stdint cimport int64_t, int32_t, uint32_t, uint16_t, uint8_t, uint64_t, INT64_MAX

from quorumlog._format cimport (HDR, MAGIC, VERSION, T_MESSAGE, RecHeader, fnv1a,
                                numbered_name, is_numbered_name)

import bisect
import logging
import mmap
import os
import shutil

import numpy as np

from .errors import CorruptLogError, CorruptQueueError, DiskFullError, StorageError

log = logging.getLogger(__name__)

ENTRY_SIZE = sizeof(CQEntry)
DEFAULT_FILE_ENTRIES = 300_000
CQ_DTYPE = np.dtype([("position", "<i8"), ("size", "<i4"), ("tag_hash", "<i8")])
assert CQ_DTYPE.itemsize == ENTRY_SIZE == 20
assert sizeof(RecHeader) == HDR

cdef enum:
    MAX_TAG_FILTER = 32       # tags one get() may filter on
    PREFETCH_AHEAD = 6        # collect(): records whose cache misses are started early
    PREFETCH_BYTES = 4096     # ... up to this many bytes of each
    ZERO_CHUNK = 4096         # recovery zeroes stale entries chunk by chunk

MAX_TAG_FILTER_TAGS = MAX_TAG_FILTER


cdef extern from "crc32c.h" nogil:
    uint32_t ql_crc32c(const void *buf, size_t length)

cdef extern from "qlsys.h" nogil:
    int ql_msync(char *base, int64_t off, int64_t length)
    void ql_fail_msync(int err, int skip)


def _fail_msync(int err, int skip=0):
    """Test hook: after `skip` more msyncs of consume-queue files, one fails with `err` (see
    qlsys.h)."""
    ql_fail_msync(err, skip)

cdef extern from *:
    """
    #define ql_prefetch(p) __builtin_prefetch((const void *)(p), 0, 0)
    """
    void ql_prefetch(const void *p) noexcept nogil


include "consumequeue_read.pxi"       # SegmentView, Message, collect(): the read side
include "consumequeue_files.pxi"      # CQFile, ConsumeQueue: the files of one queue
include "consumequeue_dispatch.pxi"   # dispatch loops: entries for committed records
include "consumequeue_assign.pxi"     # a batch's queues, offsets, tag hashes, body bytes
