"""Reads: read-only mappings of commit-log segments and consume-queue lookups (get, offsets,
timestamps).

Reads map segment files read-only themselves (one mmap per segment, shared by every Message
made from it) so that get() costs no native call per message; retention unlinks the files, and
the mappings live on until the last Message referring to them is gone. A Message is a pointer
into that mapping decoded on access.

Nothing read is trusted: for every record get() returns, the consume-queue entry must name a
MESSAGE of its queue and offset inside the dispatched part of the log, and the record's CRC32C
must hold (as Kafka consumers check by default). A record whose CRC fails raises
CorruptLogError naming the segment file and offset. A wrong entry (CorruptQueueError: the
consume queue is derived data) makes the reader have the topic's queues rebuilt from the log
(`repair`) and read again; if the log itself is damaged the rebuild raises CorruptLogError.
"""
from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable

from .. import _consumequeue as _cq
from .._consumequeue import ConsumeQueue, SegmentView
from ..errors import CorruptLogError, CorruptQueueError, InvalidArgumentError, \
    OffsetOutOfRangeError
from ..format import segment_name

log = logging.getLogger(__name__)


def tag_filter(tags) -> tuple[tuple[int, ...], set[bytes]]:
    """get's `tags` (a str or a collection of str) -> (their FNV-1a 64 hashes, their UTF-8
    bytes): the hash selects candidates, the string confirms (as RocketMQ's consumer does)."""
    if isinstance(tags, str):
        tags = (tags,)
    try:
        encoded = {tag.encode() for tag in tags}
    except (TypeError, AttributeError):
        raise InvalidArgumentError("tags must be a str or a collection of str") from None
    if not 1 <= len(encoded) <= _cq.MAX_TAG_FILTER_TAGS:
        raise InvalidArgumentError(f"tags filter: 1..{_cq.MAX_TAG_FILTER_TAGS} tags")
    return tuple(_cq.fnv1a64(b) for b in encoded), encoded


class SegmentReader:
    """Messages out of consume queues, through read-only mappings of the segment files.
    Not thread-safe: called under the store's lock."""

    def __init__(self, root: str, segment_size_bytes: int, min_position: int,
                 limit_position: Callable[[], int] | None = None,
                 repair: Callable[[str], None] | None = None):
        self.dir = os.path.join(root, "commitlog")
        self.segment_size_bytes = segment_size_bytes
        self.min_position = min_position     # the log's: queue entries below it are gone
        # entries must point below this: the dispatched position (records in the queues)
        self._limit_position = limit_position or (lambda: 1 << 62)
        # repair(topic): rebuild the topic's consume queues from the log
        self._repair = repair
        self.repairs = 0                     # queues rebuilt because of a wrong entry
        self._views: dict[int, SegmentView] = {}

    def segment_for(self, pos: int) -> SegmentView:
        start = pos - pos % self.segment_size_bytes
        v = self._views.get(start)
        if v is None:
            path = os.path.join(self.dir, segment_name(start))
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError as exc:
                raise CorruptLogError(f"{path}: segment holding position {pos} cannot be "
                                      f"read: {exc.strerror}", path, pos - start) from None
            try:
                mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            v = SegmentView(mm, start, path)
            self._views[start] = v
        return v

    def min_offset(self, cq: ConsumeQueue) -> int:
        return cq.min_offset(self.min_position)

    def read(self, cq: ConsumeQueue, offset: int, max_messages: int, tags=None,
             make_filter=tag_filter) -> list:
        """Up to max_messages messages from `offset`, only those with one of `tags` when
        given (make_filter(tags) -> (hashes, names)); [] at the queue's end,
        OffsetOutOfRangeError outside [min_offset, end]. A wrong consume-queue entry has the
        topic's queues rebuilt from the log, then the read is done again."""
        try:
            return self._read(cq, offset, max_messages, tags, make_filter)
        except CorruptQueueError as exc:
            if self._repair is None:
                raise
            log.error("%s; rebuilding the consume queues of topic %r from the log", exc,
                      cq.topic)
        self._repair(cq.topic)          # CorruptLogError when the log itself is damaged
        self.repairs += 1
        return self._read(cq, offset, max_messages, tags, make_filter)

    def _read(self, cq: ConsumeQueue, offset: int, max_messages: int, tags,
              make_filter) -> list:
        end = cq.next_offset
        if offset >= end or offset < self.min_offset(cq):
            if offset == end:
                return []
            lo = self.min_offset(cq)
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{lo}, {end}] of {cq.topic}/{cq.queue_id}", lo, end)
        hashes = names = None
        if tags is not None:
            hashes, names = make_filter(tags)
        out: list = []
        lo, hi = self.min_position, self._limit_position()
        while offset < end and len(out) < max_messages:
            f = cq.file_for(offset)
            if f is None:    # a missing file inside the range: skip to the next one
                offset += cq.file_entries - offset % cq.file_entries
                continue
            first = f.first_offset
            stop = _cq.collect(self.segment_for, cq, f, offset - first,
                               min(end - first, f.capacity), out, max_messages, hashes, names,
                               lo, hi)
            offset = first + stop
        return out

    def offset_for_timestamp(self, cq: ConsumeQueue, timestamp_ms: int) -> int:
        """The first offset whose store timestamp is >= timestamp_ms: binary search over the
        queue, reading each probe's store timestamp from its record (store timestamps never
        decrease along the log); the queue's end when every message is older."""
        lo, hi = self.min_offset(cq), cq.next_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = cq.position_of(mid)
            if e is None:          # hole: treat as older than anything
                lo = mid + 1
                continue
            if self.segment_for(e[0]).store_timestamp_at(e[0], e[1]) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def segments_deleted(self, min_position: int) -> None:
        """Drop the mappings of deleted segments (live Messages keep theirs)."""
        self.min_position = min_position
        for start in [s for s in self._views if s < min_position]:
            del self._views[start]

    def close(self) -> None:
        self._views.clear()
