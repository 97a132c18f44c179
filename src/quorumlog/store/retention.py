"""Retention: which commit-log segments to delete and when (RocketMQ's CleanCommitLogService,
seed 004), and the disk-full write gate.

Rules (settings in StoreConfig):
- a segment is *expired* when its last write is older than `file_reserved_hours` (72 h);
- expired segments are deleted at the `delete_when` hour(s) of the local day ("04"), or at any
  time once disk use exceeds `disk_clean_ratio` (75 %);
- above `disk_force_clean_ratio` (85 %) the oldest segments go even if unexpired, one at a time,
  re-measuring disk use after each, until use is back under that ratio;
- above `disk_reject_ratio` (90 %) puts fail with DiskFullError; they are accepted again as soon
  as a later measurement is back under it;
- whole segments only, oldest first, at most `max_segment_deletes_per_run` per run, never the
  segment being written, never one holding records not yet committed and dispatched;
- consume-queue files and queue min offsets follow the log's new min position;
- a CONFIG record (membership) among the deleted segments leaves its configuration in
  log_head.json first (nativeinstall.keep_head), so a restarted replica keeps its voters.

A segment's last write time is taken as the store timestamp of the first record of the next
segment (an upper bound, so a segment is never deleted early); mmap'd writes do not update file
mtimes reliably. The wall clock (`clock_ms`) and `disk_usage(path) -> used fraction` are
injected through the store, so tests drive every threshold.

Retention sees the store only through StoreServices (services.py); the write gate's state
(`disk_full`, `disk_ratio`) is its own, and the store asks it before each write
(`check_writes`).
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from ..config import parse_delete_when
from ..errors import DiskFullError
from .nativeinstall import keep_head
from .services import StoreServices

log = logging.getLogger(__name__)

EXPIRED = "expired"
FORCE = "force"


def default_disk_usage(path: str) -> float:
    """Used fraction as df reports it: used / (used + available to unprivileged users)."""
    fs = os.statvfs(path)
    used = fs.f_blocks - fs.f_bfree
    denom = used + fs.f_bavail
    return used / denom if denom > 0 else 0.0


class Retention:
    def __init__(self, store: StoreServices, disk_usage: Callable[[str], float],
                 monotonic: Callable[[], float]):
        self.store = store
        cfg = store.config
        self.delete_hours = parse_delete_when(cfg.delete_when)
        self.reserved_ms = int(cfg.file_reserved_hours * 3_600_000)
        self._disk_usage = disk_usage
        self._monotonic = monotonic
        self.disk_full = False          # the write gate: puts raise DiskFullError
        self.disk_ratio = 0.0           # the last measurement
        self.rejects = 0                # puts refused by the gate
        self.segments_deleted = 0
        self._next_check = -1e18       # monotonic time of the next measurement
        self._checked_end = 0          # the log's end position at the last measurement

    def check_disk(self, force: bool = False) -> float:
        """Measure disk use, update the write gate -> used fraction."""
        s = self.store
        ratio = float(self._disk_usage(s.path))
        full = ratio > s.config.disk_reject_ratio
        if full != self.disk_full:
            if full:
                log.error("store %s: disk use %.1f%% above %.0f%%: rejecting writes", s.path,
                          ratio * 100, s.config.disk_reject_ratio * 100)
            else:
                log.warning("store %s: disk use %.1f%%: accepting writes again", s.path,
                            ratio * 100)
        self.disk_full = full
        self.disk_ratio = ratio
        self._next_check = self._monotonic() + s.config.disk_check_interval_ms / 1000.0
        self._checked_end = s.commitlog.end_position
        return ratio

    def check_writes(self) -> None:
        """Before a write: re-measure when the last measurement is older than
        disk_check_interval_ms or the log grew by disk_check_bytes since (a burst fills a
        disk faster than any interval); DiskFullError while the gate is closed."""
        if (self._monotonic() >= self._next_check or self.store.commitlog.end_position
                - self._checked_end >= self.store.config.disk_check_bytes):
            self.check_disk()
        if self.disk_full:
            self.rejects += 1
            raise DiskFullError(
                f"disk use {self.disk_ratio:.1%} above disk_reject_ratio "
                f"{self.store.config.disk_reject_ratio:.0%}; writes resume when space is "
                "freed")

    def mode(self, now_ms: int, ratio: float):
        cfg = self.store.config
        if ratio > cfg.disk_force_clean_ratio:
            return FORCE
        if ratio > cfg.disk_clean_ratio:
            return EXPIRED
        if time.localtime(now_ms / 1000.0).tm_hour in self.delete_hours:
            return EXPIRED
        return None

    def _last_write_ms(self, next_start: int):
        """Store timestamp of the first record at or after `next_start`, read from its header
        (scan() of one record: no body copy, unlike decode_at)."""
        lg = self.store.commitlog
        end = lg.end_position
        if next_start >= end:
            return None                      # the next segment holds nothing yet
        info, _ = lg.scan(next_start, end, 1)
        if not len(info):
            return None
        return int(info["store_ts"][0])

    def run(self, now_ms: int) -> int:
        s = self.store
        lg = s.commitlog
        ratio = self.check_disk()
        mode = self.mode(now_ms, ratio)
        deleted = 0
        if mode is not None:
            # Only what the consume queues hold durably may go (the queue summary then
            # names a position inside the log at the next open): make it durable first.
            s.checkpoint_dispatch()
            limit = min(s.dispatched_position, lg.committed_position, lg.dispatched_position)
            while deleted < s.config.max_segment_deletes_per_run:
                segs = lg.segments()
                if len(segs) < 2:
                    break
                next_start = segs[1][0]
                if next_start > limit:
                    break                    # holds undispatched / uncommitted records
                if mode == EXPIRED:
                    last = self._last_write_ms(next_start)
                    if last is None or now_ms - last < self.reserved_ms:
                        break
                # the configuration those segments' CONFIG records set survives them
                keep_head(lg, next_start)
                if lg.delete_segments_before(next_start) == 0:
                    break
                deleted += 1
                log.info("store %s: deleted segment %d (%s, disk use %.1f%%)", s.path,
                         segs[0][0], mode, ratio * 100)
                if mode == FORCE:
                    ratio = self.check_disk()
                    mode = self.mode(now_ms, ratio)
                    if mode is None:
                        break
        if deleted:
            self.segments_deleted += deleted
            s.segments_deleted(deleted)
            self.check_disk()
        return deleted
