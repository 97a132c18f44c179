# Included by _commitlog.pyx: the checkpoint file (format.md "Checkpoint") -- flushed position
# and index, commit index and position, dispatched position, min position and the file
# geometry, CRC32C-protected, replaced atomically (write, fsync, rename, fsync the dir).

# The 124 bytes the CRC covers; the CRC (u32) follows at byte 124.
_CHECKPOINT = struct.Struct("<IHHQQQQQQQQq44x")


cdef write_checkpoint(CommitLog self, bint clean, int64_t min_position=-1):
    """Write the checkpoint (flushed_position as of the last flush). min_position >= 0
    records that instead of the log's (retention writes its intent before unlinking). An
    I/O error fails the log (LogFailedError); a full disk (ENOSPC) leaves the old
    checkpoint and raises DiskFullError."""
    cdef int64_t ci, cp
    if self._failed is not None:
        _raise_failed(self)
    # the checkpoint's flushed_index is recovery's anchor: its raft-index entries (and
    # all before it) must be durable first (see flush_log)
    if self._idx_synced > self._flushed_index:
        self._idx_synced = self._flushed_index     # truncated below: entries were zeroed
    if self._flushed_index > self._idx_synced:
        _msync_index(self, max(self._idx_synced + 1, self._first_index, 1), self._flushed_index)
        self._idx_synced = self._flushed_index
    if (self._flushed_index - 1) // self.index_file_entries > self._dir_synced_idxf:
        # the anchor's raft-index file is new: its name must be durable too (see flush_log)
        _sync_dir_or_fail(self, self._idxdir)
        self._dir_synced_idxf = (self._flushed_index - 1) // self.index_file_entries
    ci = self._committed_index
    cp = self._committed_pos
    if ci > self._flushed_index:   # committed never exceeds flushed in one checkpoint
        ci = self._flushed_index
        cp = self._flushed_pos
    body = _CHECKPOINT.pack(CP_MAGIC, 1, 1 if clean else 0,
                            self._flushed_pos, self._flushed_index, ci, cp,
                            min(self._dispatched, self._flushed_pos),
                            self.min_position if min_position < 0 else min_position,
                            self.segment_size_bytes, self.index_file_entries,
                            int(time.time() * 1000))
    data = body + struct.pack("<I", crc32c(body))
    tmp = os.path.join(self.path, "checkpoint.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(_errno.ENOSPC, "short write")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(self.path, "checkpoint"))
        _fsync_dir(self.path)
    except OSError as exc:
        if exc.errno in (ENOSPC, EDQUOT):
            raise DiskFullError(exc.errno, f"no space to write the checkpoint of {self.path}",
                                tmp) from None
        # an fsync error cannot be retried into success: the log stops here
        _fail(self, f"writing the checkpoint {tmp}", exc.errno or _errno.EIO)
    self._last_cp = time.monotonic()
    self.n_checkpoints += 1


cdef dict read_checkpoint(CommitLog self):
    """The checkpoint's fields, or None when there is none. Adopts the stored
    index_file_entries, and the stored segment size when none was given; a different
    segment size is a ConfigError."""
    cp = os.path.join(self.path, "checkpoint")
    try:
        with open(cp, "rb") as f:
            data = f.read(CP_SIZE + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptLogError(f"{cp}: the checkpoint cannot be read: {exc.strerror or exc}",
                              cp, 0) from None
    if len(data) != CP_SIZE:
        raise CorruptLogError(f"{cp}: checkpoint is {len(data)} bytes, not {CP_SIZE}", cp, 0)
    (magic, version, flags, flushed_pos, flushed_index, committed_index, committed_pos,
     dispatched, min_pos, seg_size, idx_entries, written_at) = _CHECKPOINT.unpack_from(data, 0)
    (crc,) = struct.unpack_from("<I", data, _CHECKPOINT.size)
    if magic != CP_MAGIC:
        raise CorruptLogError(f"{cp}: bad checkpoint magic", cp, 0)
    if crc != crc32c(data[:_CHECKPOINT.size]):
        raise CorruptLogError(f"{cp}: checkpoint CRC mismatch", cp, _CHECKPOINT.size)
    if version != 1:
        raise CorruptLogError(f"{cp}: unknown checkpoint version {version}", cp, 4)
    if seg_size != self.segment_size_bytes or idx_entries != self.index_file_entries:
        _adopt_geometry(self, cp, seg_size, idx_entries)
    return dict(flags=flags, flushed_position=flushed_pos, flushed_index=flushed_index,
                committed_index=committed_index, committed_position=committed_pos,
                dispatched_position=dispatched, min_position=min_pos)


cdef _adopt_geometry(CommitLog self, str cp, seg_size, idx_entries):
    # The raft index geometry of an existing log is the one it was created with,
    # whatever the caller passes (it only names files).
    if (seg_size < 65536 or seg_size % 4096 or seg_size > 0xFFFFFFFF or
            idx_entries < 1 or idx_entries > (1 << 30)):
        raise CorruptLogError(f"{cp}: implausible segment/index geometry", cp, 56)
    if seg_size != self.segment_size_bytes and self._adopt_segment_size:
        log.info("%s: using the stored segment_size_bytes=%d", self.path, seg_size)
        self.max_message_bytes = min(self.max_message_bytes, seg_size - 2 * HDR)
    elif seg_size != self.segment_size_bytes:
        # segment boundaries decide where records are: never reinterpret them
        raise ConfigError(f"{self.path} was written with segment_size_bytes="
                          f"{seg_size}; opened with {self.segment_size_bytes}")
    if idx_entries != self.index_file_entries:
        log.info("%s: using the stored index_file_entries=%d (asked %d)", self.path,
                 idx_entries, self.index_file_entries)
    self.segment_size_bytes = seg_size
    self.index_file_entries = idx_entries
