# The native commit log: mmap'd fixed-size segments, the record codec of docs/format.md,
# leader/follower appends, the raft index, zero-copy reads, the RECORD_INFO scan, flushing
# (async / group commit) and recovery. The contract is docs/architecture.md.
#
# One extension module cut into included files, one concern each (listed below, in the
# order they are included). This file holds the CommitLog class: its state, its properties
# and one thin method per entry point. Cython allows no `include` inside a class body, so
# the work lives in module-level cdef functions of the included files, which take the log
# as `self`. The record header, raft-index entry and format limits are declared once in
# _format.pxd (shared with _consumequeue).
#
# Threading model: every structural change (append, truncate, segment deletion, close) runs
# under `_wlock` (a raw PyThread lock, cheap when uncontended) and updates the Python-visible
# state (end position, last index, segment lists) while holding the GIL, so readers and the
# flusher always see a consistent snapshot. Big copies + CRCs, fallocate, msync run without
# the GIL while holding references to the mappings they touch.
cimport cython
from cpython.ref cimport Py_REFCNT
from cpython.bytes cimport (PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact,
                            PyBytes_FromStringAndSize)
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE,
                             PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES)
from cpython.pythread cimport (PyThread_type_lock, PyThread_allocate_lock,
                               PyThread_free_lock, PyThread_acquire_lock,
                               PyThread_release_lock, NOWAIT_LOCK, WAIT_LOCK)
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, int32_t
from libc.string cimport memcmp, memcpy, memset
from libc.stdlib cimport malloc, free, calloc, realloc
from libc.errno cimport ENOSPC, EDQUOT
cimport numpy as cnp

from quorumlog._format cimport (
    HDR, IDX_ENTRY, MAGIC, VERSION, T_MESSAGE, T_NOOP, T_CONFIG, T_META, T_BLANK, MAX_TOPIC,
    MAX_TAGS, MAX_KEYS_FIELD, MAX_PROPS_FIELD, MAX_STRING, MAX_QUEUE_ID, RecHeader, IdxEntry,
    fnv1a, topic_fault, TOPIC_OK, TOPIC_LENGTH, TOPIC_CHARS, TOPIC_DOTS, numbered_name,
    is_numbered_name)

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
                              LockedError, LogClosedError, LogFailedError,
                              MessageTooLargeError, ReplicationError, ConfigError,
                              StorageError, TopicTypeError, QueueTypeError,
                              NotAStoreError, ReadOnlyError)
# wrong types: InvalidTypeError (alias ArgumentTypeError) is both TypeError and
# InvalidArgumentError; the topic/queue variants derive from InvalidTopicError/InvalidQueueError
from quorumlog.errors import InvalidTypeError as ArgumentTypeError

cnp.import_array()
log = logging.getLogger(__name__)


if sys.byteorder != "little":  # the format is little-endian and the codec writes natively
    raise ImportError("quorumlog's native commit log needs a little-endian CPU")

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len

cdef extern from "qlsys.h" nogil:
    int64_t ql_now_ms()
    int ql_map_file(const char *path, int64_t size, int create, int always_allocate,
                    void **out_addr, int *created)
    int ql_msync(char *base, int64_t off, int64_t length)
    int ql_zero_range(const char *path, char *base, int64_t off, int64_t length)
    int ql_map_file_private(const char *path, int64_t size, void **out_addr)
    int ql_populate_write(char *base, int64_t off, int64_t length)
    void ql_fail_msync(int err, int skip)
    void ql_gate_arm()
    int ql_gate_get()
    void ql_gate_release(int err)
    int ql_pwritev_all(int fd, iovec *iov, int n, int64_t off)
    int ql_pwrite_all(int fd, const char *buf, int64_t length, int64_t off)
    void ql_fail_write(int err)

cdef extern from "qlwriter.h" nogil:
    enum: QL_WRITER_SLOTS
    ctypedef struct ql_writer:
        int64_t n_jobs, n_taken_back
    ql_writer *ql_writer_new()
    int ql_writer_wait(ql_writer *w, int keep)
    void ql_writer_post(ql_writer *w, int fd, iovec *iov, int n, int64_t off)
    void ql_writer_free(ql_writer *w)

cdef extern from "<sys/mman.h>" nogil:
    int munmap(void *addr, size_t length)

cdef extern from "<unistd.h>" nogil:
    int close(int fd)

# Tuning of this implementation (the format's constants are in _format.pxd).
cdef enum:
    CP_SIZE = 128
    CP_MAGIC = 0x50434C51
    NOGIL_BYTES = 262144      # release the GIL for batches at least this big
    APART_BODY = 2048         # batch bodies at least this big are written from the caller's
                              # buffer (an iovec of their own), smaller ones are staged
    # append_batch and append_replicated write the log with pwritev (see qlsys.h), records
    # encoded into a staging buffer of STAGE_BYTES, written out when less than STAGE_ROOM is
    # left (room for any record's header and fields plus a staged body) or IOV_MAX_N iovecs
    STAGE_BYTES = 1048576
    STAGE_ROOM = 73728
    IOV_MAX_N = 1000
    # A batch of at least PAR_WRITE_BYTES has its pwritev calls done by the log's writer
    # thread (qlwriter.h) in pieces of PAR_PIECE_BYTES, overlapping the encoding of the
    # next pieces; smaller batches (a cluster leader's usual ones) write inline, where two
    # thread hand-offs would cost more than they hide. Each piece queued for the thread
    # has a staging buffer of SLOT_STAGE bytes (the piece's staged bytes never exceed
    # PAR_PIECE_BYTES plus one record's).
    PAR_WRITE_BYTES = 524288
    PAR_PIECE_BYTES = 262144
    SLOT_STAGE = PAR_PIECE_BYTES + STAGE_ROOM
    POPULATE_AHEAD = 1048576  # the writer's own populate step ahead of single appends
    # The preparer thread keeps pages faulted in up to BG_POPULATE_AHEAD bytes past the end
    # of the log, in BG_POPULATE_CHUNK steps, and is woken again when fewer than
    # BG_POPULATE_LOW bytes are left: writing through the mapping then finds its pages
    # present instead of paying page allocation + zero fill + page_mkwrite on the append path.
    BG_POPULATE_AHEAD = 67108864
    BG_POPULATE_LOW = 50331648
    BG_POPULATE_CHUNK = 4194304

# Fork: a child process inherits every open log's mappings, file descriptors and the open
# file description its lock is held on, but none of its threads (the writer, preparer and
# flusher run in the parent only). Each log records the fork generation it was opened in;
# a forked child's generation moves on, so there an inherited log may be read but refuses
# writes, and its close only lets go of the child's references: no flush, no checkpoint, no
# abort-marker removal, no unlink, no thread join (a join of the parent's writer thread hung
# the child for good), no lock release -- the log still belongs to the parent.
cdef int64_t _fork_generation = 0


def _after_fork_in_child():
    global _fork_generation
    _fork_generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


# Test hook: the name of a step of a multi-step file operation (truncation, retention) at
# which the process exits at once, as kill -9 there would (tests crash at each step in a
# subprocess and check that the store opens).
cdef object _crash_at = None


def _set_crash_point(name):
    """Test hook: os._exit(137) when the step `name` is reached (None: never)."""
    global _crash_at
    _crash_at = name


cdef inline void crash_point(str name):
    if _crash_at is not None and _crash_at == name:
        os._exit(137)


def _fail_msync(int err, int skip=0):
    """Test hook: after `skip` more msyncs of this module, one fails with `err` (see qlsys.h)."""
    ql_fail_msync(err, skip)


def _gate_msync():
    """Test hook: the next msync of this module waits until _gate_release (see qlsys.h)."""
    ql_gate_arm()


def _gate_state() -> int:
    """Test hook: 0 off, 1 armed, 2 an msync is held, 3 released."""
    return ql_gate_get()


def _gate_release(int err=0):
    """Test hook: the held msync goes on (err 0) or fails with `err`."""
    ql_gate_release(err)


def _fail_write(int err):
    """Test hook: the next pwrite of an append (batch or replicated) fails with `err`."""
    ql_fail_write(err)


HEADER_SIZE = HDR
MESSAGE = T_MESSAGE
NOOP = T_NOOP
CONFIG = T_CONFIG
META = T_META
BLANK = T_BLANK
CHECKPOINT_SIZE = CP_SIZE
MAX_BATCH_RECORDS = 1 << 24

assert sizeof(RecHeader) == HDR and sizeof(IdxEntry) == IDX_ENTRY

include "commitlog_codec.pxi"       # record encode / verify / decode, checksum functions
include "commitlog_args.pxi"        # argument validation and encoding (nothing written)
include "commitlog_mapping.pxi"     # Mapping (one mmap'd file), segment files
include "commitlog_producer.pxi"    # producer batches' properties, one loop per batch
include "commitlog_recycle.pxi"     # segment files retention freed, reused as new segments
include "commitlog_preparer.pxi"    # next segment + page population off the append path
include "commitlog_index.pxi"       # raft-index files and entries
include "commitlog_append.pxi"      # leader appends: append, append_control, append_batch
include "commitlog_replicate.pxi"   # follower appends: append_replicated
include "commitlog_read.pxi"        # read, record_at, decode_at, record, topic_at
include "commitlog_scan.pxi"        # RECORD_INFO scan and CRC verification (nogil loop)
include "commitlog_truncate.pxi"    # truncate_after, delete_segments_before
include "commitlog_flush.pxi"       # flush, group commit, the flusher thread, commit
include "commitlog_checkpoint.pxi"  # the checkpoint file
include "commitlog_lifecycle.pxi"   # directory lock, threads, close, crash
include "commitlog_recovery.pxi"    # recovery at open


cdef class CommitLog:
    """The commit log of one store directory; see docs/architecture.md for the contract."""

    cdef readonly str path
    cdef readonly int64_t segment_size_bytes
    cdef readonly int64_t index_file_entries
    cdef readonly str flush_mode
    # the flush mode of the run whose abort marker this open found (None: a clean close
    # before, or a marker older than the mode line)
    cdef readonly object previous_flush_mode
    cdef readonly int64_t max_message_bytes
    cdef readonly bint unclean_open
    # Opened with read_only=True: no LOCK, no abort marker, no threads, nothing written;
    # files are mapped copy-on-write, so recovery's repairs stay in memory.
    cdef readonly bint read_only
    cdef bint _adopt_segment_size  # segment_size_bytes=None: take the checkpoint's
    # unclean open whose unflushed writes may have been lost (see page_cache_identity)
    cdef bint _lost_writeback
    # the abort marker says "lost-writes" for this open until settle_lost_writes(): a kill or
    # a clean close before the owner made durable what it must remember of it (a replica's
    # recovery floor) leaves the next open seeing lost writes again
    cdef bint _lost_mark
    cdef int64_t flush_interval_ms, checkpoint_interval_ms
    cdef bint preallocate_next
    # at most this many segment files retention frees are kept for reuse (the pool: their
    # old starts, oldest first; guarded by _prep_cv)
    cdef readonly int64_t recycle_segments
    cdef list _pool
    cdef str _segdir, _idxdir

    # segments: self._segs[k - self._first_seg] maps segment k (start k * S)
    cdef list _segs
    cdef list _views
    cdef int64_t _first_seg
    cdef Mapping _cur
    cdef int64_t _cur_start
    # the segment whose mapping reads without readahead from offset _random_lo to its end
    # (commitlog_scan.pxi _no_readahead), -1: none
    cdef int64_t _random_seg
    cdef int64_t _random_lo
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
    cdef int64_t _dir_synced_seg   # segment files through this number have durable names
    cdef int64_t _dir_synced_idxf  # raft-index files through this number have durable names
    cdef int64_t _committed_index, _committed_pos, _dispatched
    cdef int64_t _pop_want         # preparer: keep pages faulted in up to this position
    # ... in the segment itself: only for appends through the mapping (single records);
    # pwrite appends (batches, replication) need no populated pages
    cdef int64_t _seg_pop_want
    cdef char *_stage              # append_batch's staging buffer (STAGE_BYTES), write lock
    cdef char *_ring               # ... with the writer thread: QL_WRITER_SLOTS x SLOT_STAGE
    cdef iovec *_ring_iov          # ... and QL_WRITER_SLOTS x IOV_MAX_N iovecs
    cdef ql_writer *_writer        # append_batch's writer thread (NULL until a big batch)
    cdef int64_t n_wpieces, n_wtaken   # pieces of stopped writers: queued, written inline
    cdef bint _no_writer           # test hook: big batches write inline too

    cdef int64_t n_append_calls, n_records, n_bytes, n_flushes, n_checkpoints
    cdef int64_t n_segments_created, n_prepared_used, n_sync_created, n_blank
    cdef int64_t n_recycled, n_pooled
    cdef list _flush_hist          # flush latency: counts per FLUSH_LATENCY_BUCKETS_NS + Inf
    cdef int64_t _flush_ns_total

    cdef PyThread_type_lock _wlock
    cdef object _flush_lock      # threading.Condition: flush snapshots, publication, exclusion
    cdef int64_t _flush_seq      # the next flush's number (flush_log)
    cdef int64_t _flush_oldest   # the oldest flush not ended: results publish in this order
    cdef set _flush_ended        # numbers of ended flushes above _flush_oldest
    cdef int64_t _flushes_running
    cdef int64_t _flush_started_to   # the end the newest flush started with
    cdef int64_t _flush_excl     # truncation / checkpoint / close waiting or running
    cdef object _cv              # threading.Condition: flusher wake-up + group commit
    cdef bint _flush_parked      # the flusher waits for an append (the log was clean)
    cdef int64_t n_flush_wakeups # the flusher's turns (idle cost: see flush_loop)
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
    # why the log failed (a flush hit an I/O error): then it refuses every write
    cdef object _failed
    # the fork generation this log was opened in (see _fork_generation)
    cdef int64_t _gen

    def __cinit__(self, *args, **kwargs):
        self._wlock = PyThread_allocate_lock()
        if self._wlock == NULL:
            raise MemoryError()
        self._lock_fd = -1
        self._closed = True
        self._random_seg = -1

    def __dealloc__(self):
        if self._gen == _fork_generation:
            ql_writer_free(self._writer)
        # (in a forked child the writer thread is the parent's: its struct is left alone)
        free(self._stage)
        free(self._ring)
        free(self._ring_iov)
        if self._wlock != NULL:
            PyThread_free_lock(self._wlock)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)

    def __init__(self, path, *, segment_size_bytes=None, index_file_entries=1 << 20,
                 flush="async", flush_interval_ms=200, checkpoint_interval_ms=1000,
                 max_message_bytes=4 << 20, preallocate_next=True, read_only=False,
                 recycle_segments=2):
        path = os.fspath(path)
        if not isinstance(path, str):
            path = os.fsdecode(path)
        # None: an existing log's own segment size (from its checkpoint), 1 GiB for a new one
        self._adopt_segment_size = segment_size_bytes is None
        if segment_size_bytes is None:
            segment_size_bytes = 1 << 30
        check_config(segment_size_bytes, index_file_entries, flush, flush_interval_ms,
                     checkpoint_interval_ms, max_message_bytes)
        check_recycle(recycle_segments)
        self.recycle_segments = recycle_segments
        self._pool = []
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
        self._flush_lock = threading.Condition(threading.Lock())
        self._flush_ended = set()
        self._cv = threading.Condition(threading.Lock())
        self._prep_cv = threading.Condition(threading.Lock())
        self._prepared = None
        self._prep_request = -1
        self._cur_idxf = -1
        self._flush_hist = [0] * (len(FLUSH_LATENCY_BUCKETS_NS) + 1)
        self.read_only = bool(read_only)
        self._gen = _fork_generation
        if self.read_only:
            # Read-only: the directory must hold a log already; nothing is created.
            if not os.path.isdir(self._segdir):
                raise NotAStoreError(f"{path}: no commitlog/ directory (read_only=True "
                                     "opens an existing log only)")
            try:
                recover(self)
            except BaseException:
                drop_mappings(self)
                raise
            self._closed = False
            return
        for d in (self._segdir, self._idxdir):
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"{d}: cannot be the log's directory: "
                                   f"{exc.strerror or exc}", d, exc.errno) from None
        take_lock(self)
        try:
            recover(self)
        except BaseException:
            drop_mappings(self)
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise
        self._closed = False
        start_threads(self)

    # ------------------------------------------------------------------ properties
    @property
    def closed(self):
        return self._closed

    @property
    def inherited(self):
        """True in a process forked after this log was opened: readable, not writable, and
        close() only lets go of this process's references (the parent owns the log)."""
        return self._gen != _fork_generation

    @property
    def lost_writes_possible(self):
        """This open was unclean and the page cache that held the last opener's unflushed
        writes did not survive (a new boot, or a copy of the device): what was written but
        never flushed may be gone. A replica in flush = "async" mode acknowledged such writes,
        so it must recover them from its peers (docs/raft.md "Recovery after power loss")."""
        return self._lost_writeback

    def settle_lost_writes(self):
        """The owner has made durable what it must remember of this open's possibly lost
        writes (a replica: its recovery floor, docs/raft.md R1): the abort marker drops its
        lost-writes mark, so later opens decide from the page cache's identity alone. Until
        then a kill, or a clean close, leaves the mark for the next open.
        lost_writes_possible keeps describing this open."""
        _check_open(self)
        if self.read_only or not self._lost_mark:
            return                       # (a read-only open wrote no marker)
        _check_writable(self)            # (a forked child's inherited log: ReadOnlyError)
        _write_marker(os.path.join(self.path, "abort"),
                      marker_content(self, page_cache_identity(self.path), False))
        self._lost_mark = False

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

    @property
    def failure(self):
        """None, or why the log refuses writes: a flush failed (see LogFailedError)."""
        return self._failed

    def stats(self):
        """Counters for benchmarks: flushes << appends under load shows group commit."""
        return {
            "appends": self.n_append_calls, "records": self.n_records, "bytes": self.n_bytes,
            "flushes": self.n_flushes, "flushes_in_flight": self._flushes_running,
            "checkpoints": self.n_checkpoints,
            "segments": len(self._segs), "segments_created": self.n_segments_created,
            "segments_prepared_used": self.n_prepared_used,
            "segments_created_sync": self.n_sync_created, "blanks": self.n_blank,
            # segments written into a file retention freed, files kept for that, kept now
            "segments_recycled": self.n_recycled, "segments_pooled": self.n_pooled,
            "recycle_pool": len(self._pool),
            "end_position": self._end, "flushed_position": self._flushed_pos,
            "flushed_index": self._flushed_index,
            "last_index": self._next_index - 1,
            # per bucket of FLUSH_LATENCY_BUCKETS_NS (upper bounds in ns), the last one +Inf
            "flush_latency_counts": list(self._flush_hist),
            "flush_latency_ns_total": self._flush_ns_total,
            "flush_thread_wakeups": self.n_flush_wakeups,
            "flush_thread_parked": self._flush_parked,
            # big batches' pieces queued for the writer thread, and those of them the
            # appending thread took back and wrote itself (the thread had not started them)
            "writer_pieces": self.n_wpieces + (self._writer.n_jobs if self._writer != NULL else 0),
            "writer_pieces_taken_back": self.n_wtaken + (
                self._writer.n_taken_back if self._writer != NULL else 0),
        }

    def __repr__(self):
        return (f"<CommitLog {self.path!r} last_index={self._next_index - 1} "
                f"end={self._end}{' closed' if self._closed else ''}>")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ leader appends
    def append(self, topic, body, *, queue_id=0, queue_offset=0, term, tags=None, keys=(),
               properties=None, born_timestamp_ms=None, flags=0):
        """Append one MESSAGE -> (index, position, store_timestamp_ms)."""
        _check_writable(self)
        return append_message(self, topic, body, queue_id, queue_offset, term, tags, keys,
                              properties, born_timestamp_ms, flags)

    def append_control(self, int rtype, payload=b"", *, term):
        """Append a NOOP / CONFIG / META record -> (index, position)."""
        _check_writable(self)
        return append_control_record(self, rtype, payload, term)

    def append_batch(self, topic, bodies, *, queue_ids=0, queue_offsets=0, term, tags=None,
                     keys=None, properties=None, born_timestamps_ms=None, flags=0):
        """Append many MESSAGE records in one call
        -> (first_index, positions: int64 array, store_timestamp_ms)."""
        _check_writable(self)
        return append_messages(self, topic, bodies, queue_ids, queue_offsets, term, tags,
                               keys, properties, born_timestamps_ms, flags)

    # ------------------------------------------------------------------ follower appends
    def append_replicated(self, raw):
        """Append whole records copied verbatim from a leader's read() -> last_index.
        Every record is validated first; on any failure ReplicationError and no change."""
        _check_writable(self)
        return append_replicated_range(self, raw)

    # ------------------------------------------------------------------ raft index
    def term_at(self, int64_t i):
        """Term of entry i (IndexOutOfRangeError outside [first_index, last_index])."""
        _check_open(self)
        return _entry_checked(self, i).term

    def position_of(self, int64_t i):
        _check_open(self)
        return _entry_checked(self, i).position

    def size_of(self, int64_t i):
        _check_open(self)
        return _entry_checked(self, i).size

    # ------------------------------------------------------------------ reads
    def read(self, int64_t lo_index, int64_t hi_index, int64_t max_bytes=1 << 20):
        """Zero-copy view of whole records lo_index .. lo_index+count-1 (one segment, at
        most max_bytes but at least one record) -> (memoryview, count)."""
        return read_records(self, lo_index, hi_index, max_bytes)

    def record_at(self, int64_t position):
        """One whole record (CRC checked) as a read-only memoryview."""
        return record_view(self, position)

    def decode_at(self, int64_t position):
        """The record at `position` decoded (CRC checked) into a Record."""
        return _decode(self.record_at(position))

    def record(self, int64_t index):
        """The record of raft index `index`, decoded."""
        _check_open(self)
        return _decode(self.record_at(_entry_checked(self, index).position))

    def topic_at(self, int64_t position):
        return record_topic(self, position)

    def scan(self, int64_t from_position, int64_t limit_position, Py_ssize_t max_records=65536):
        """Headers of consecutive records from `from_position` (BLANK skipped, CRC checked)
        that end at or before `limit_position` -> (RECORD_INFO array, next_position)."""
        return scan_headers(self, from_position, limit_position, max_records)

    def indexes_of_type(self, int rtype, lo=None, hi=None):
        """The raft indexes (int64 array, ascending) in [lo, hi] (default and at most
        [first_index, last_index]) whose record is of type `rtype`, from the raft index
        alone (no record is read)."""
        return indexes_of_type(self, rtype, self._first_index if lo is None else lo,
                               self._next_index - 1 if hi is None else hi)

    def verify(self, from_position=None):
        """CRC-check every record from `from_position` (default min_position) to the end;
        CorruptLogError naming file and offset on the first damaged one -> end position."""
        return verify_log(self, from_position)

    # ------------------------------------------------------------------ truncation, retention
    def truncate_after(self, int64_t i):
        """Drop entries > i: their bytes, any BLANK after i, later segments and their raft
        index entries are zeroed/unlinked. Durable before returning when it cuts into
        flushed data (a crash must not resurrect the dropped records)."""
        _check_writable(self)
        truncate_log(self, i)

    def segments(self):
        """[(start_position, path)] of the segments the log holds, oldest first."""
        _check_open(self)
        return [((<Mapping>m).start, (<Mapping>m).path) for m in self._segs]

    def delete_segments_before(self, int64_t position):
        """Unlink whole segments that end at or before `position` (never the segment being
        written). Live views of them stay valid. -> number deleted."""
        _check_writable(self)
        return delete_segments(self, position)

    # ------------------------------------------------------------------ durability
    def flush(self):
        """msync (GIL released) everything appended so far -> flushed_position."""
        _check_writable(self)
        _check_open(self)
        return flush_log(self)

    def _flush(self):
        return flush_log(self)

    def wait_flushed(self, int64_t position, timeout=None):
        """Block until every byte before `position` is durable (group commit: one msync
        covers all waiters) -> True, or False on timeout. InvalidArgumentError when
        `position` is beyond end_position: no flush could ever reach it (the flusher
        would spin on the request, and timeout=None would block forever)."""
        _check_writable(self)
        return wait_flushed_to(self, position, timeout)

    def _flush_loop(self):
        flush_loop(self)

    def commit(self, int64_t index):
        """Advance committed_index (never backwards, never beyond last_index). In memory
        only (the checkpoint records it), so a read-only log may advance it too."""
        commit_to(self, index)

    def set_dispatched_position(self, int64_t pos):
        _check_open(self)
        if pos < 0 or pos > self._end:
            raise IndexOutOfRangeError(f"dispatched position {pos} beyond end {self._end}")
        self._dispatched = pos

    def checkpoint(self):
        """Write the checkpoint file now (flushed position as of the last flush)."""
        _check_writable(self)
        _check_open(self)
        # serialised with flushes and truncation so an older snapshot never lands last
        _flush_exclusive(self)
        try:
            write_checkpoint(self, False)
        finally:
            _flush_exclusive_end(self)

    def _write_checkpoint(self, bint clean):
        write_checkpoint(self, clean)

    # ------------------------------------------------------------------ lifecycle
    def _write_inline(self, bint inline):
        """Test hook: write big batches inline too (True), or through the writer thread
        (False, the default) -- both must leave the same bytes."""
        self._no_writer = inline

    def close(self):
        """Flush, write a clean checkpoint, unmap (views stay valid), remove the abort
        marker, release the lock. Idempotent. A read-only log only unmaps."""
        close_log(self)

    def crash_for_testing(self):
        """Test hook: drop the log as kill -9 would — no flush, no checkpoint, abort marker
        left, mappings dropped, lock released. The page cache keeps what was written."""
        crash_log(self)

    def _prepare_duplicate_for_testing(self):
        """Test hook: leave the state a preparer race once left -- a second mapping of the
        log's newest segment offered as the prepared next one."""
        with self._prep_cv:
            self._prepared = map_file(self._cur.path, self.segment_size_bytes,
                                      self._cur_start, True, True, "segment")

    def _take_lock(self):
        take_lock(self)

    def _start_threads(self):
        start_threads(self)

    def _stop_threads(self):
        stop_threads(self)

    def _prepare_loop(self):
        prepare_loop(self)

    def _populate_ahead(self):
        populate_ahead(self)

    # ------------------------------------------------------------------ recovery
    def _recover(self):
        recover(self)

    def _read_checkpoint(self):
        return read_checkpoint(self)

    def _list_numbered(self, str d):
        return list_numbered(d)

    def _raise_stop(self, int64_t stop_pos, int rc, str why):
        raise_stop(self, stop_pos, rc, why)
