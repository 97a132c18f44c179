"""Length-prefixed binary frames: the 24-byte header, a pure incremental decoder, the encoder.

No I/O here. The decoder is fed by an asyncio.BufferedProtocol (get_buffer/buffer_updated:
the kernel writes straight into the decoder's memory) or by `feed(bytes)` (tests, fuzzers);
both paths run the same code. Every header is validated -- magic, version, checksum, type,
flags, the group field, and the length against max_frame_bytes -- BEFORE anything is allocated
for its body, so a peer cannot make us allocate more than the limit, and garbage is refused
after at most 24 bytes.

Zero copy: a payload of at least `large_payload_bytes` (an APPEND batch) is received into a
buffer of its own, sized once the header has been validated, and handed out as a memoryview
of that buffer: the bytes are written by the kernel once and never copied again by us. Smaller
frames are parsed out of a fixed receive buffer and copied out (a few hundred bytes). With a
`BufferPool` those buffers are reused once nothing refers to them any more (a new bytearray
is zero-filled and, on a fresh heap, faulted in page by page: per MB replicated).

Layout (little-endian; docs/net.md has the table and a golden vector):

    0  u16 magic 0x4E51 (bytes 51 4E, "QN")   8  u64 request id
    2  u8  version (1)                       16  u32 payload length
    3  u8  frame type                        20  u32 CRC-32 (zlib) of bytes 0..19
    4  u16 flags (none defined: must be 0)
    6  u16 group: the Raft group a peer frame belongs to (many groups per process,
       node/groups.py); 0 on every other frame, and on a connection that does not
       allow groups (FrameDecoder.allow_groups) a nonzero value is refused
"""
from __future__ import annotations

import mmap
import struct
import sys
import zlib
from typing import NamedTuple

from .errors import FrameError, FrameTooLargeError

__all__ = ["MAGIC", "VERSION", "HEADER_SIZE", "DEFAULT_MAX_FRAME_BYTES", "KNOWN_FLAGS",
           "Frame", "FrameDecoder", "BufferPool", "encode_header", "encode_frame", "frame_parts",
           "parse_header", "parse_group_header", "MAX_GROUP_ID"]

MAGIC = 0x4E51                 # bytes 51 4E on the wire: "QN" (records on disk use "QL")
VERSION = 1
HEADER_SIZE = 24
MAX_REQUEST_ID = (1 << 64) - 1
MAX_GROUP_ID = 0xFFFF          # the header's u16 group field
# 16 MiB of payload: a produce batch of max_proposal_bytes or an APPEND of a 4 MiB message
# (max_message_bytes) fits with room to spare.
DEFAULT_MAX_FRAME_BYTES = (16 << 20) + HEADER_SIZE
KNOWN_FLAGS = 0                # no flag is defined in version 1: a set bit is refused
DEFAULT_LARGE_PAYLOAD_BYTES = 64 << 10
DEFAULT_RECV_BUFFER_BYTES = 256 << 10
# lazy_big_buffers: payloads from this size are received into an anonymous mmap (smaller
# ones are not worth an mmap/munmap pair)
LAZY_BUFFER_FROM_BYTES = 1 << 20

# BufferPool defaults: buffers kept, the largest kept (an APPEND of max_batch_bytes, 1 MiB by
# default, and its framing fit), the size granule
POOL_BUFFERS = 8
POOL_MAX_BUFFER_BYTES = 2 << 20
POOL_GRANULE_BYTES = 256 << 10

_PREFIX = struct.Struct("<HBBHHQI")      # the 20 bytes the checksum covers
_CRC = struct.Struct("<I")
_HEADER = struct.Struct("<HBBHHQII")
assert _PREFIX.size == 20 and _HEADER.size == HEADER_SIZE


try:
    from .._wirecodec import scan_frames as _scan_frames
except ImportError:   # not built: FrameDecoder._parse_loop does it all
    _scan_frames = None


class Frame(NamedTuple):
    type: int
    flags: int
    request_id: int
    payload: bytes | memoryview
    group: int = 0           # header bytes 6..7: the Raft group of a peer frame
    # the decoded message, when the C scan decoded it (FrameDecoder.codecs); None: not
    # decoded yet -- codec.decode (the reference) decides
    message: object = None


def encode_header(ftype: int, length: int, request_id: int = 0, flags: int = 0,
                  group: int = 0) -> bytes:
    """The 24 header bytes of a frame whose payload is `length` bytes long. No limit check
    beyond the field widths (see encode_frame / frame_parts for max_frame_bytes)."""
    if not 0 <= ftype <= 0xFF:
        raise FrameError(f"frame type {ftype!r} outside 0..255")
    if flags & ~KNOWN_FLAGS or flags < 0:
        raise FrameError(f"frame flags {flags:#x}: no flag is defined in version {VERSION}")
    if not 0 <= request_id <= MAX_REQUEST_ID:
        raise FrameError(f"request id {request_id!r} outside 0..2**64-1")
    if not 0 <= length <= 0xFFFFFFFF:
        raise FrameTooLargeError(f"frame payload of {length} bytes does not fit a u32 length",
                                 length, 0xFFFFFFFF)
    if not 0 <= group <= MAX_GROUP_ID:
        raise FrameError(f"frame group {group!r} outside 0..{MAX_GROUP_ID}")
    prefix = _PREFIX.pack(MAGIC, VERSION, ftype, flags, group, request_id, length)
    return prefix + _CRC.pack(zlib.crc32(prefix))


def _check_limit(length: int, max_frame_bytes: int, limit_name: str = "max_frame_bytes") -> None:
    if length + HEADER_SIZE > max_frame_bytes:
        raise FrameTooLargeError(
            f"frame of {length + HEADER_SIZE} bytes (payload {length}) is over "
            f"{limit_name}={max_frame_bytes}", length + HEADER_SIZE, max_frame_bytes)


def frame_parts(ftype: int, payload, request_id: int = 0, flags: int = 0, *,
                max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> list:
    """[header, payload] without joining them: for transport.write() of each part, so a large
    payload (a memoryview of the log's mapping) is never copied in user space."""
    n = memoryview(payload).nbytes
    _check_limit(n, max_frame_bytes)
    return [encode_header(ftype, n, request_id, flags), payload]


def encode_frame(ftype: int, payload=b"", request_id: int = 0, flags: int = 0, *,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, group: int = 0) -> bytes:
    """One frame as one bytes object (small frames: one write, one segment)."""
    n = memoryview(payload).nbytes
    _check_limit(n, max_frame_bytes)
    return encode_header(ftype, n, request_id, flags, group) + bytes(payload)


def parse_header(buf, offset: int = 0, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 known_types=None, limit_name: str = "max_frame_bytes"
                 ) -> tuple[int, int, int, int]:
    """Validate the 24 header bytes at buf[offset:] and return (type, flags, request_id,
    payload_length). Raises FrameError / FrameTooLargeError; never allocates. A nonzero
    group field is refused (see parse_group_header for connections that carry groups)."""
    return parse_group_header(buf, offset, max_frame_bytes=max_frame_bytes,
                              known_types=known_types, limit_name=limit_name)[:4]


def parse_group_header(buf, offset: int = 0, *,
                       max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, known_types=None,
                       limit_name: str = "max_frame_bytes", allow_groups: bool = False
                       ) -> tuple[int, int, int, int, int]:
    """parse_header's checks, and the group field: (type, flags, request_id, length,
    group). allow_groups False: a nonzero group is a FrameError (handshake and client
    frames, and peers of a single-group process, always carry 0)."""
    magic, version, ftype, flags, group, request_id, length, crc = \
        _HEADER.unpack_from(buf, offset)
    if magic != MAGIC:
        raise FrameError(f"bad frame magic {magic:#06x} (expected {MAGIC:#06x}): "
                         f"not a quorumlog peer, or a corrupt stream")
    if version != VERSION:
        raise FrameError(f"unsupported frame version {version} (this node speaks {VERSION})")
    if crc != zlib.crc32(memoryview(buf)[offset:offset + 20]):
        raise FrameError("frame header checksum mismatch")
    if flags & ~KNOWN_FLAGS:
        raise FrameError(f"unknown frame flags {flags:#x}")
    if group and not allow_groups:
        raise FrameError(f"frame group field is {group:#x}, must be 0 on this connection")
    if known_types is not None and ftype not in known_types:
        raise FrameError(f"frame type {ftype:#04x} not allowed here")
    _check_limit(length, max_frame_bytes, limit_name)
    return ftype, flags, request_id, length, group


class BufferPool:
    """Receive buffers for large payloads, shared by the connections of one transport and
    reused once nothing refers to them: a payload is handed out as a memoryview of its
    buffer, every view (and every slice, numpy array or other export made from one) holds a
    reference to that buffer, so a buffer whose only references are the pool's own has no
    reader left and its old bytes can be overwritten. At most `max_buffers` buffers of at most
    `max_buffer_bytes` each are kept (a larger payload, or one arriving while every kept
    buffer is in use, gets a buffer of its own as before). `taken` / `reused` count."""

    __slots__ = ("max_buffers", "max_buffer_bytes", "_bufs", "taken", "reused")

    def __init__(self, max_buffers: int = POOL_BUFFERS,
                 max_buffer_bytes: int = POOL_MAX_BUFFER_BYTES):
        if max_buffers < 0 or max_buffer_bytes < 1:
            raise ValueError("BufferPool: max_buffers >= 0 and max_buffer_bytes >= 1")
        self.max_buffers = max_buffers
        self.max_buffer_bytes = max_buffer_bytes
        self._bufs: list[bytearray] = []
        self.taken = 0
        self.reused = 0

    @property
    def pooled_bytes(self) -> int:
        return sum(len(b) for b in self._bufs)

    def take(self, length: int) -> memoryview:
        """A writable view of exactly `length` bytes (contents undefined: the caller fills
        all of it before anyone reads it)."""
        self.taken += 1
        bufs = self._bufs
        if length > self.max_buffer_bytes:
            return memoryview(bytearray(length))
        small = -1
        for i in range(len(bufs)):
            # 2 references: the list's and getrefcount's argument -- no view, no reader
            if sys.getrefcount(bufs[i]) == 2:
                if len(bufs[i]) >= length:
                    self.reused += 1
                    return memoryview(bufs[i])[:length]
                if small < 0 or len(bufs[i]) < len(bufs[small]):
                    small = i
        if len(bufs) < self.max_buffers or small >= 0:
            size = min(-(-length // POOL_GRANULE_BYTES) * POOL_GRANULE_BYTES,
                       self.max_buffer_bytes)
            buf = bytearray(size)
            if small >= 0:
                bufs[small] = buf          # a free one too small: the bigger one takes its place
            else:
                bufs.append(buf)
            return memoryview(buf)[:length]
        return memoryview(bytearray(length))      # every kept buffer in use


class FrameDecoder:
    """Incremental frame decoder with no I/O (tigerbeetle's MessageBuffer idea).

    Drive it with either
      * `buf = get_buffer()` -> write up to len(buf) bytes into it -> `buffer_updated(n)`
        (exactly asyncio.BufferedProtocol's contract), or
      * `feed(data)` which does the same with a copy.
    Both return the list of frames completed by the new bytes. The first invalid header
    raises FrameError; the decoder then stays failed (every later call raises the same
    error) because the stream has lost its framing.

    `max_frame_bytes`, `known_types` and `limit_name` (the setting a FrameTooLargeError
    names) may be changed between calls: the transport allows only handshake frames, with
    a small limit, until the peer has authenticated. Because the frames of one read are
    checked against the types allowed when they are parsed, a connection whose state
    changes with a frame sets `one_at_a_time`: each call then returns at most one frame, and
    `parse_buffered()` returns what follows it once the new limits are set (a peer's first
    Raft frame may arrive in the same read as the AUTH_OK before it).
    """

    __slots__ = ("max_frame_bytes", "known_types", "limit_name", "large_payload_bytes",
                 "allow_groups", "pool", "codecs", "src", "dst",
                 "one_at_a_time", "reserve", "waiting", "lazy_big_buffers", "_buf", "_mv",
                 "_start", "_end", "_big", "_big_view", "_big_filled", "_big_head", "_after_big",
                 "_error",
                 "frames", "bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, *, known_types=None,
                 large_payload_bytes: int = DEFAULT_LARGE_PAYLOAD_BYTES,
                 recv_buffer_bytes: int = DEFAULT_RECV_BUFFER_BYTES):
        if max_frame_bytes < HEADER_SIZE:
            raise ValueError(f"max_frame_bytes={max_frame_bytes} < header size {HEADER_SIZE}")
        if large_payload_bytes < 1:
            raise ValueError("large_payload_bytes must be >= 1")
        # a frame below the large threshold must fit the receive buffer whole
        recv_buffer_bytes = max(recv_buffer_bytes, large_payload_bytes + HEADER_SIZE)
        self.max_frame_bytes = max_frame_bytes
        self.known_types = known_types
        self.limit_name = "max_frame_bytes"
        self.large_payload_bytes = large_payload_bytes
        # frames may name a Raft group (header bytes 6..7): set on an authenticated peer
        # connection of a process that hosts many groups; otherwise a nonzero group is refused
        self.allow_groups = False
        self.one_at_a_time = False
        # codecs: None, or a tuple of 256 whole-frame decoders by frame type (codec.py
        # frame_decoders: the hot Raft frames', a one-message produce's): the C scan then
        # hands out those frames with `message` decoded (src, dst: a Raft message's sender
        # and receiver); anything else, and whatever a decoder declines, has message None
        self.codecs = None
        self.src = self.dst = None
        # reserve(n) -> bool, asked before a large payload's buffer is allocated: False
        # leaves the header unparsed and sets `waiting` (the caller stops reading, and calls
        # parse_buffered() once it can grant the bytes) -- a budget across connections
        self.reserve = None
        self.waiting = False
        # payloads of 1 MiB or more in anonymous mmaps: pages are backed only once received,
        # and given back to the OS when the buffer dies (a bytearray is zero-filled -- every
        # page resident at once -- and malloc keeps freed 16 MiB chunks); for connections
        # that may announce big frames and stall
        self.lazy_big_buffers = False
        # a BufferPool for the large payloads' buffers (not those of lazy_big_buffers' mmaps);
        # None: a new bytearray each
        self.pool: BufferPool | None = None
        # Fixed size on purpose: asyncio keeps the view returned by get_buffer alive while it
        # calls buffer_updated, and a bytearray with live exports cannot be resized. We only
        # move bytes inside it (same-size slice assignment is allowed with exports).
        self._buf = bytearray(recv_buffer_bytes)
        self._mv = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._big = None           # the view being filled with one large payload
        self._big_view = None
        self._big_filled = 0
        self._big_head = None      # (type, flags, request_id) of that frame
        self._after_big = False    # the last frame was large (see get_buffer)
        self._error: FrameError | None = None
        self.frames = 0            # frames decoded
        self.bytes = 0             # bytes consumed

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return (self._end - self._start) + self._big_filled

    @property
    def big_pending_bytes(self) -> int:
        """The length of the large payload being received (0: none)."""
        return len(self._big) if self._big is not None else 0

    def resize(self, recv_buffer_bytes: int, large_payload_bytes: int) -> None:
        """Use a receive buffer of another size (a new one: the old may still be exported)
        and another large-payload threshold, keeping the bytes not parsed yet. The transport
        starts a connection with a buffer the size of a handshake frame and sizes it for its
        role once it has authenticated."""
        if large_payload_bytes < 1:
            raise ValueError("large_payload_bytes must be >= 1")
        pending = bytes(self._mv[self._start:self._end])
        size = max(recv_buffer_bytes, large_payload_bytes + HEADER_SIZE, len(pending))
        self._buf = bytearray(size)
        self._mv = memoryview(self._buf)
        self._buf[:len(pending)] = pending
        self._start, self._end = 0, len(pending)
        self.large_payload_bytes = large_payload_bytes

    @property
    def failed(self) -> bool:
        return self._error is not None

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        if self._error is not None:
            raise self._error
        if self._big is not None:
            return self._big_view[self._big_filled:]
        start, end = self._start, self._end
        if start and len(self._buf) - end < (len(self._buf) >> 1):
            # Compact: move the partial frame to the front. It is smaller than the buffer
            # (a header is 24 bytes; a small frame fits whole by construction).
            n = end - start
            # via a bytes copy: source and destination may overlap, and a bytearray slice
            # assignment from a view of itself is a plain memcpy
            self._buf[0:n] = bytes(self._mv[start:end])
            self._start, self._end = start, end = 0, n
        if self._after_big and start == end:
            # The last frame was large: the next one probably is too. Read only its header,
            # so its body goes straight into a buffer of its own instead of being received
            # here and copied (one extra read per large frame, no user-space copy).
            return self._mv[end:end + HEADER_SIZE]
        return self._mv[end:]

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        if self._error is not None:
            raise self._error
        self.bytes += nbytes
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled < len(self._big):
                return []
            # (the view handed out was this body only: the small buffer is empty)
            return [self._finish_big()]
        self._end += nbytes
        if _scan_frames is not None:
            # the usual read -- whole small frames only -- taken by one C call here, without
            # the loop's call (the per-frame Python of a single message's path)
            out, start = _scan_frames(self._buf, self._start, self._end, self.max_frame_bytes,
                                      self.known_types, self.allow_groups,
                                      self.large_payload_bytes, self.one_at_a_time, Frame,
                                      self.codecs, self.src, self.dst)
            if out:
                self.frames += len(out)
                self.waiting = self._after_big = False
            if start == self._end:
                self._start = self._end = 0
                return out
            self._start = start
            if out and self.one_at_a_time:
                return out
            return self._parse_loop(out)
        return self._parse_loop([])

    def parse_buffered(self) -> list[Frame]:
        """Frames already received but not returned yet (after a call in `one_at_a_time`
        mode), checked against the current limits."""
        # (a partial large payload is still being received: nothing to parse; else the same
        # path as a read of 0 bytes)
        return self.buffer_updated(0)

    def feed(self, data) -> list[Frame]:
        """Copying entry point: the same path as get_buffer/buffer_updated."""
        src = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) \
            else memoryview(data)
        out: list[Frame] = []
        pos, n = 0, len(src)
        while pos < n:
            dst = self.get_buffer(n - pos)
            k = min(len(dst), n - pos)
            dst[:k] = src[pos:pos + k]
            pos += k
            out.extend(self.buffer_updated(k))
        return out

    def _finish_big(self) -> Frame:
        ftype, flags, rid, group = self._big_head
        payload = self._big_view
        self._big = self._big_view = self._big_head = None
        self._big_filled = 0
        self.frames += 1
        return Frame(ftype, flags, rid, payload, group)

    def _parse_loop(self, out: list) -> list[Frame]:
        """The reference loop: the frames from self._start on, appended to `out` (the C
        scan's), and the precise FrameError of a bad header; large payloads."""
        buf, mv = self._buf, self._mv
        start, end = self._start, self._end
        try:
            while end - start >= HEADER_SIZE and not (out and self.one_at_a_time):
                ftype, flags, rid, length, group = parse_group_header(
                    buf, start, max_frame_bytes=self.max_frame_bytes,
                    known_types=self.known_types, limit_name=self.limit_name,
                    allow_groups=self.allow_groups)
                body = start + HEADER_SIZE
                large = length >= self.large_payload_bytes
                if large and self.reserve is not None and not self.reserve(length):
                    self.waiting = True        # the header stays: parsed again when granted
                    break
                self.waiting = False
                self._after_big = large
                if large:
                    # Allocate only now that the length is known to be within the limit.
                    have = min(end - body, length)
                    if self.lazy_big_buffers and length >= LAZY_BUFFER_FROM_BYTES:
                        big = memoryview(mmap.mmap(-1, length))
                    elif self.pool is not None:
                        big = self.pool.take(length)
                    else:
                        big = memoryview(bytearray(length))
                    big[:have] = mv[body:body + have]
                    self._big, self._big_view = big, big
                    self._big_filled, self._big_head = have, (ftype, flags, rid, group)
                    start = body + have
                    if have < length:
                        break                       # the rest goes straight into `big`
                    out.append(self._finish_big())
                    if self.one_at_a_time:
                        break
                    continue
                if end - body < length:
                    break
                out.append(Frame(ftype, flags, rid, bytes(mv[body:body + length]), group))
                self.frames += 1
                start = body + length
                if self.one_at_a_time:
                    break
        except FrameError as e:
            self._fail(e)
            raise
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        return out

    def release(self) -> None:
        """Drop the partial large payload (the connection is gone): its memory goes back
        at once, not when the connection object is collected."""
        self._big = self._big_view = self._big_head = None
        self._big_filled = 0

    def _fail(self, e: FrameError) -> None:
        self._error = e
        self._big = self._big_view = None
        self._start = self._end = 0
