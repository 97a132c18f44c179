"""Dispatch: recovery of the consume queues, committed records -> consume queues, and the
replicated-mode offset counting that keeps queue offsets unique.

Dispatch never passes the log's committed position. Own batches are placed from their append
results in one Cython loop when they are the whole undispatched committed tail and lie in one
segment; everything else (recovery, rollover with a BLANK, replicated records) goes through
CommitLog.scan columns and the same kind of loop.

Durable dispatch: the dispatched position is handed to the log (set_dispatched_position, saved
in its checkpoint) only after the consume-queue files covering it were msync'd; on reopen every
entry pointing at or past min(dispatched, end of log) is dropped and re-dispatched from the log.

Nothing in a record is trusted (it may come from another replica): a topic name breaking the
rule or a queue id outside [0, max_queues_per_topic) is rejected (stats "dispatch_rejected"), a
record claiming an offset its queue holds for another position is reported (stats
"dispatch_conflicts"); neither is dispatched, both are logged as errors.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import numpy as np

from .. import _consumequeue as _cq
from ..config import StoreConfig
from ..errors import DiskFullError, InvalidTopicError, StorageError
from ..format import TYPE_MESSAGE, TYPE_META, check_topic_name
from .schedule import SCHEDULE_TOPIC
from .topics import TOPICS_FILE, Topic, TopicRegistry

log = logging.getLogger(__name__)

MAX_SCAN_RECORDS = 65536


class TagHashes:
    """FNV-1a 64 of tag strings, cached (a put names the same few tags again and again)."""
    MAX_ENTRIES = 4096

    def __init__(self):
        self._cache: dict[str, int] = {}

    def of(self, tags) -> int:
        if not tags:
            return 0
        h = self._cache.get(tags)
        if h is None:
            if len(self._cache) >= self.MAX_ENTRIES:
                self._cache.clear()
            h = self._cache[tags] = _cq.fnv1a64(tags.encode())
        return h


class OffsetCounter:
    """Replicated mode: the topics' counters (next queue offset to hand out) must account for
    every record of the log, including records that arrived by replication and are not
    committed yet, so a leader never hands an offset out twice.

    The counters account for the log up to raft index `counted_index` (of term
    `counted_term`). Before an own append `sync` counts what replication added since; after a
    Raft truncation (detected by the term check, or told by `recount`) it starts over from the
    consume queues (what is dispatched is committed and stays) plus a scan of the tail."""

    def __init__(self, commitlog, topics: TopicRegistry, max_queues_per_topic: int):
        self.log = commitlog
        self.topics = topics
        self.max_queues = max_queues_per_topic
        self.counted_index = 0
        self.counted_term = 0

    def count_from(self, pos: int) -> None:
        """Raise the counters past every MESSAGE record in [pos, end of log)."""
        lg = self.log
        end = lg.end_position
        topics = self.topics
        while pos < end:
            info, nxt = lg.scan(pos, end, MAX_SCAN_RECORDS)
            if nxt == pos:
                break
            msg = info[info["type"] == TYPE_MESSAGE]
            for th, qid, qo in zip(msg["topic_hash"].tolist(), msg["queue_id"].tolist(),
                                   msg["queue_offset"].tolist()):
                t = topics.by_hash.get(th)
                if t is not None and 0 <= qid < len(t.counters):
                    if qo >= t.counters[qid]:
                        t.counters[qid] = qo + 1
                elif 0 <= qid < self.max_queues:
                    topics.note_unregistered(th, qid, qo + 1)
            pos = nxt
        last = lg.last_index
        self.counted_index = last
        self.counted_term = lg.term_at(last) if last and last >= lg.first_index else 0

    def recount(self, dispatched_position: int) -> None:
        """Start over: the consume queues' ends, then every record past them."""
        for t in self.topics.all():
            t.counters = np.array([cq.next_offset for cq in t.queues], dtype=np.int64)
        self.topics.unregistered.clear()
        self.count_from(dispatched_position)

    def sync(self, dispatched_position: int) -> None:
        """Before an own append: count the records replication added since the last count."""
        lg = self.log
        ci = self.counted_index
        last = lg.last_index
        first = lg.first_index
        if ci and ci >= first and (ci > last or lg.term_at(ci) != self.counted_term):
            self.recount(dispatched_position)      # the log was truncated under the count
            return
        if last == ci:
            return
        start = dispatched_position
        if ci and ci >= first:
            start = max(start, lg.position_of(ci) + lg.size_of(ci))
        self.count_from(start)

    def appended(self, first_index: int, last_index: int, term: int) -> None:
        """An own append (or a control record) right after the counted records extends them."""
        if self.counted_index == first_index - 1:
            self.counted_index = last_index
            self.counted_term = term


class Dispatcher:
    """Committed records -> consume queues. Not thread-safe: called under the store's lock.

    `slow_path(pos, size, qid, qoff, tag_hash, topic_hash)` places one record the Cython loop
    could not (normally `place_slow`; the store routes it through a method tests can patch)."""

    def __init__(self, commitlog, topics: TopicRegistry, config: StoreConfig,
                 monotonic: Callable[[], float], clock_ms: Callable[[], int],
                 tag_hashes: TagHashes, slow_path: Callable | None = None):
        self.log = commitlog
        self.topics = topics
        self.config = config
        # counters for MessageStore.stats()
        self.dispatched_records = 0
        self.rebuilt = False         # the consume queues were rebuilt from the log at open
        self.stalls = 0              # dispatch stopped: a consume-queue file could not grow
        self.conflicts = 0           # records claiming an offset their queue holds elsewhere
        self.rejected = 0            # records naming a bad topic / queue id / offset
        self.queue_rebuilds = 0      # topics whose queues were rebuilt from the log
        self.durable_failed = None   # why consume-queue files are no longer made durable
        self.path = commitlog.path
        self.segment_size = commitlog.segment_size_bytes
        self._monotonic = monotonic
        self._clock_ms = clock_ms
        self.tag_hashes = tag_hashes
        self.slow_path = slow_path or self.place_slow
        self.position = 0           # dispatched up to here (a record boundary)
        # called (under the store lock) whenever dispatch moved the position: readers
        # waiting in a long-poll get() are woken
        self.on_advance: Callable[[], None] | None = None
        # META records dispatched (RECORD_INFO rows, called when a scanned chunk holds one)
        # and the derived state saved with each checkpoint (consumer offsets)
        self.meta_sink: Callable | None = None
        self.before_checkpoint: Callable[[int], None] | None = None
        self.index = 0              # raft index of the last dispatched record (0: unknown)
        self._checkpoint_due = monotonic() + config.dispatch_checkpoint_interval_ms / 1000.0

    # -- recovery ----------------------------------------------------------------------------
    def recover(self, rebuild: bool, replicated: bool, counter: OffsetCounter) -> None:
        """On open: trust consume-queue entries only below what the log confirms, rebuild or
        catch up from the log, and set the counters (and round-robin cursors)."""
        lg = self.log
        limit = max(min(lg.dispatched_position, lg.end_position), lg.min_position)
        rebuild = rebuild and lg.end_position > lg.min_position
        for t in self.topics.all():
            for cq in t.queues:
                cq.recover(limit)
        if not replicated and lg.last_index > lg.committed_index:
            # Single replica: every intact record the log recovered is ours and committed.
            lg.commit(lg.last_index)
        if rebuild:
            log.warning("store %s: consume queues missing, rebuilding from the log", self.path)
            self.rebuilt = True
            self.position = lg.min_position
        else:
            self.position = limit
        self.dispatch(checkpoint=True)
        for t in self.topics.all():
            for q, cq in enumerate(t.queues):
                t.counters[q] = cq.next_offset
            # Resume round-robin at the first least-filled queue: where an uninterrupted
            # round-robin sequence would continue.
            t.rr = int(np.argmin(t.counters)) if len(t.counters) else 0
        # Records appended but not yet committed (replicated mode) already hold offsets.
        counter.count_from(self.position)

    # -- dispatch ----------------------------------------------------------------------------
    def dispatched_index(self) -> int:
        """Raft index up to which every record is dispatched (what the Raft core's
        on_dispatched wants); 0 when not known (a stalled dispatch right after open)."""
        lg = self.log
        if self.position >= lg.committed_position:
            return lg.committed_index
        return self.index

    def dispatch(self, checkpoint: bool = False) -> None:
        """Dispatch every committed record not dispatched yet (scan path)."""
        lg = self.log
        limit = lg.committed_position
        start = self.position
        try:
            self._dispatch_to(lg, limit)
        finally:
            if self.position != start and self.on_advance is not None:
                self.on_advance()
        if checkpoint or self._monotonic() >= self._checkpoint_due:
            self.checkpoint()

    def _dispatch_to(self, lg, limit: int) -> None:
        while self.position < limit:
            info, nxt = lg.scan(self.position, limit, MAX_SCAN_RECORDS)
            if nxt == self.position:
                break
            if len(info):
                try:
                    self._place_columns(info["position"], info["size"], info["queue_id"],
                                        info["queue_offset"], info["tag_hash"],
                                        info["topic_hash"], info["type"])
                    self.dispatched_records += len(info)
                except DiskFullError as exc:
                    self._stalled(exc)
                    return
                self.index = int(info["index"][-1])
                if self.meta_sink is not None and (info["type"] == TYPE_META).any():
                    self.meta_sink(info)
            self.position = nxt

    def commit(self, index: int, own: Iterable) -> None:
        """Commit the log up to raft index `index` and dispatch up to the new commit limit.
        `own`: requests (writes.PutRequest) committed by it, in log order; while each is
        exactly the next undispatched committed stretch of one segment, its append results
        are placed directly (no re-read, no re-CRC of headers); the rest is scanned."""
        lg = self.log
        lg.commit(index)
        committed = lg.committed_position
        seg = self.segment_size
        start = self.position
        try:
            self._commit_own(own, committed, seg)
        finally:
            if self.position != start and self.on_advance is not None:
                self.on_advance()

    def _commit_own(self, own: Iterable, committed: int, seg: int) -> None:
        for req in own:
            pos, end = req.position, req.end_position
            if self.position != pos or end > committed or pos // seg != (end - 1) // seg:
                break
            try:
                if req.positions is None:          # one message (a put's hot path)
                    t, q, off, tags = req.target, req.queue, req.first_offset, req.tags
                    th = self.tag_hashes.of(tags) if tags else 0
                    if not _cq.dispatch_one(t.queues[q], off, pos, end - pos, th):
                        self.slow_path(pos, end - pos, q, off, th, t.hash)
                    self.dispatched_records += 1
                else:
                    self._place_batch(req)
            except DiskFullError as exc:
                self._stalled(exc)
                return
            self.position = end
            self.index = req.last_index
        if self.position < committed:
            self.dispatch()
        elif self._monotonic() >= self._checkpoint_due:
            self.checkpoint()

    def _place_batch(self, req) -> None:
        t: Topic = req.target
        tags = req.tags
        if tags is None:
            shared, per = 0, None
        elif isinstance(tags, str):
            shared, per = self.tag_hashes.of(tags), None
        else:
            shared, per = 0, _cq.tag_hashes(list(tags))
        positions, end = req.positions, req.end_position
        queue_ids, offsets = req.queue_ids, req.queue_offsets
        n = len(positions)
        i = 0
        while True:
            i = _cq.dispatch_batch(t.queues, positions, end, queue_ids, offsets, shared, per, i)
            if i >= n:
                break
            size = (int(positions[i + 1]) if i + 1 < n else end) - int(positions[i])
            self.slow_path(int(positions[i]), size, int(queue_ids[i]), int(offsets[i]),
                           shared if per is None else int(per[i]), t.hash)
            i += 1
        self.dispatched_records += n

    def _place_columns(self, position, size, queue_id, queue_offset, tag_hash, topic_hash,
                       rtype) -> None:
        n = len(position)
        i = 0
        while i < n:
            i = _cq.dispatch(self.topics.queues_by_hash, position, size, queue_id, queue_offset,
                             tag_hash, topic_hash, rtype, i)
            if i >= n:
                break
            self.slow_path(int(position[i]), int(size[i]), int(queue_id[i]),
                           int(queue_offset[i]), int(tag_hash[i]), int(topic_hash[i]))
            i += 1
        # Records that arrived by replication advance the queues, not the counters: keep the
        # counters at or past every queue's end so no offset is handed out twice.
        for th in np.unique(topic_hash[rtype == TYPE_MESSAGE]).tolist():
            t = self.topics.by_hash.get(th)
            if t is not None:
                np.maximum(t.counters, np.fromiter((cq.next_offset for cq in t.queues),
                                                   dtype=np.int64, count=len(t.queues)),
                           out=t.counters)

    def rebuild_topic(self, name: str) -> None:
        """Rebuild the consume queues of topic `name` from the log (a wrong entry was found:
        the queues are derived data, the log is the truth). The log is verified first, so a
        damaged log raises CorruptLogError naming its file and offset and nothing changes;
        then the topic's queue files are dropped and its dispatched records placed again.
        The counters never go down (an offset once handed out is not handed out again)."""
        lg = self.log
        t = self.topics.by_name[name]
        lg.verify(lg.min_position)
        for cq in t.queues:
            cq.reset()
        pos, limit = lg.min_position, self.position
        while pos < limit:
            info, nxt = lg.scan(pos, limit, MAX_SCAN_RECORDS)
            if nxt == pos:
                break
            mine = info[(info["topic_hash"] == t.hash) & (info["type"] == TYPE_MESSAGE)]
            if len(mine):
                self._place_columns(mine["position"], mine["size"], mine["queue_id"],
                                    mine["queue_offset"], mine["tag_hash"],
                                    mine["topic_hash"], mine["type"])
            pos = nxt
        self.checkpoint()            # entries below the dispatched position are durable again
        self.queue_rebuilds += 1
        log.warning("store %s: consume queues of topic %r rebuilt from the log", self.path, name)

    def place_slow(self, pos, size, qid, qoff, th, topic_hash) -> None:
        """One record the Cython loop could not place: unknown topic or queue, an empty queue,
        a new consume-queue file, a gap, an offset the queue already holds.

        Records may come from another replica, so nothing in them is trusted: a topic name
        that breaks the naming rule, a queue id outside [0, max_queues_per_topic) or a
        negative offset is rejected (logged as an error, counted in stats
        "dispatch_rejected", not dispatched) before any directory is created; a second record
        at an offset the queue holds for another position is a broken log (two records
        claim one offset): logged as an error, counted in "dispatch_conflicts", not
        dispatched, never silently skipped."""
        maxq = self.config.max_queues_per_topic
        topics = self.topics
        t = topics.by_hash.get(topic_hash)
        if not 0 <= qid < maxq or qoff < 0:
            name = t.name if t is not None else self.log.topic_at(pos)
            return self._reject(pos, f"topic {name!r} queue {qid} offset {qoff}: queue id "
                                     f"outside [0, {maxq}) or negative offset")
        if t is None:
            name = self.log.topic_at(pos)
            try:
                check_topic_name(name)
                log.warning("store %s: topic %r found in the log but not in %s; "
                            "registering it", self.path, name, TOPICS_FILE)
                t = topics.add(name, min(max(self.config.default_topic_queues, qid + 1), maxq),
                               name == SCHEDULE_TOPIC, self._clock_ms(), self.position)
            except InvalidTopicError as exc:
                return self._reject(pos, str(exc))
        if qid >= len(t.queues):
            log.warning("store %s: topic %r has a record in queue %d; extending to %d queues",
                        self.path, t.name, qid, qid + 1)
            topics.extend(t, qid + 1, self.position)
        cq = t.queues[qid]
        if not cq.empty and qoff < cq.next_offset:
            held = cq.position_of(qoff)
            if held is not None and held[0] == pos:
                return                          # re-dispatch of a record already in place
            self.conflicts += 1
            log.error("store %s: CONFLICT: record at position %d claims %s/%d offset %d, but "
                      "the queue already holds %s for it; record not dispatched (two records "
                      "were given one queue offset)", self.path, pos, t.name, qid, qoff,
                      f"position {held[0]}" if held is not None else "a hole")
            return
        cq.put(qoff, pos, size, th)
        if cq.next_offset > t.counters[qid]:
            t.counters[qid] = cq.next_offset

    def _reject(self, pos, reason) -> None:
        self.rejected += 1
        log.error("store %s: REJECTED record at position %d: %s; not dispatched", self.path,
                  pos, reason)

    def _stalled(self, exc) -> None:
        """A consume-queue file could not be preallocated (disk full). The records are in the
        log and committed, so their puts succeeded; dispatch stops where it is (readers see
        what was dispatched) and resumes from the log on the next put, read or timer tick."""
        self.stalls += 1
        log.error("store %s: dispatch stalled at position %d: %s", self.path, self.position,
                  exc)

    # -- durability --------------------------------------------------------------------------
    def checkpoint(self) -> None:
        """msync the consume-queue files, then tell the log how far they are durable. Dispatch
        calls it every dispatch_checkpoint_interval_ms (the next time is set here).

        A failed msync (StorageError) is never retried into success: the kernel reports a
        write-back error once, so the durable dispatched position stays where it was for
        as long as this store is open (stats "dispatch_durable_failed"); puts and reads go
        on (the queues are derived data and the log is intact), and the next open
        re-dispatches from that position."""
        if getattr(self.log, "read_only", False):
            return      # a read-only store dispatches into memory only
        if self.durable_failed is None:
            try:
                for t in self.topics.all():
                    for cq in t.queues:
                        cq.flush()
            except StorageError as exc:
                self.durable_failed = str(exc)
                log.error("store %s: %s; the consume queues are not made durable again until "
                          "the store is reopened (it re-dispatches from position %d)",
                          self.path, exc, self.log.dispatched_position)
        if self.durable_failed is None and self.before_checkpoint is not None:
            self.before_checkpoint(self.position)
        if self.durable_failed is None and self.position != self.log.dispatched_position:
            self.log.set_dispatched_position(self.position)
        self._checkpoint_due = (self._monotonic()
                                + self.config.dispatch_checkpoint_interval_ms / 1000.0)

    def segments_deleted(self, min_position: int) -> int:
        """Consume-queue files follow the log's new min position -> files deleted."""
        deleted = 0
        for t in self.topics.all():
            for cq in t.queues:
                deleted += cq.delete_files_before(min_position)
        return deleted
