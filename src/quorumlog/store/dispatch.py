"""Dispatch: recovery of the consume queues, committed records -> consume queues, and the
replicated-mode offset counting that keeps queue offsets unique.

Dispatch never passes the log's committed position. Own batches are placed from their append
results in one Cython loop when they are the whole undispatched committed tail and lie in one
segment; everything else (recovery, rollover with a BLANK, replicated records) goes through
CommitLog.scan columns and the same kind of loop.

Durable dispatch: the dispatched position P is recorded in queue_offsets.json (with each
queue's next offset and last entry) and handed to the log (set_dispatched_position, saved in
its checkpoint) only after the consume-queue files covering it were msync'd; on reopen every
entry pointing at or past P is dropped and re-dispatched from the log, and the entries below
P are checked against that file and the log: a topic whose queues disagree is rebuilt from
the log (see Dispatcher.recover). The consume queues are derived data: never trusted into
loss.

Nothing in a record is trusted (it may come from another replica): a topic name breaking the
rule or a queue id outside [0, max_queues_per_topic) is rejected (stats "dispatch_rejected"), a
record claiming an offset its queue holds for another position is reported (stats
"dispatch_conflicts"); neither is dispatched, both are logged as errors.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable

import numpy as np

from .. import _consumequeue as _cq
from ..config import StoreConfig
from ..errors import (CorruptLogError, DiskFullError, InvalidArgumentError, InvalidTopicError,
                      QuorumlogError, StorageError)
from ..format import TYPE_MESSAGE, TYPE_META, check_topic_name
from .files import read_checked_json, write_checked_json
from .schedule import SCHEDULE_TOPIC
from .topics import TOPICS_FILE, Topic, TopicRegistry

log = logging.getLogger(__name__)

MAX_SCAN_RECORDS = 65536

# header columns of at most this many records are handled as Python lists (a numpy call
# costs microseconds of fixed overhead: a follower applies a few records per round)
_SMALL_BATCH = 64


def _has_type(types, rtype: int) -> bool:
    if len(types) <= _SMALL_BATCH:
        return rtype in types.tolist()
    return bool((types == rtype).any())


QUEUE_OFFSETS_FILE = "queue_offsets.json"   # what checkpoint() made durable (see recover)


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
        self.rebuild_skipped = 0     # damaged log records passed over by a rebuild at open
        self._summary = None         # what queue_offsets.json holds now
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
        # True while a thread of the store checkpoints every interval (checkpoint_unlocked):
        # dispatch on the put/commit path then never does the checkpoint's msync and fsyncs
        # itself -- on a replica's event loop they stalled acknowledgements for seconds when
        # the disk was slow (docs/reliability.md, "Floods")
        self.background = False
        # held by a checkpoint's disk writes (msyncs, queue_offsets.json): one at a time;
        # each checkpoint() bumps _cp_gen under it
        self._cp_lock = threading.Lock()
        self._cp_gen = 0

    # -- recovery ----------------------------------------------------------------------------
    def recover(self, topics_untrusted: bool, replicated: bool, counter: OffsetCounter) -> None:
        """On open: check the consume queues against what the store recorded and the log,
        rebuild what does not agree, catch up from the log, set the counters (and round-robin
        cursors).

        queue_offsets.json (written by checkpoint() after the queue files were msync'd) names
        the dispatched position P it describes and, per queue, the next offset and the
        position of the last entry. With it, entries below P are trusted only if each queue
        holds exactly that many entries below P, the last one naming that position, whose
        record (CRC-checked) is of that topic, queue and offset; a topic whose queues do not
        agree (a file missing, short, truncated, damaged; a directory gone) is rebuilt from
        the log. Topics it names that topics.json lacks (or has fewer queues of) are
        registered again. Without it (missing, damaged, or P outside the log), every queue is
        rebuilt from the log."""
        lg = self.log
        topics = self.topics
        lo, end = lg.min_position, lg.end_position
        summary = self._load_summary(lo, end)
        if not replicated and lg.last_index > lg.committed_index:
            # Single replica: every intact record the log recovered is ours and committed.
            lg.commit(lg.last_index)
        adopted = self._adopt_topics(summary, topics_untrusted)
        if summary is None and end > lo:
            log.warning("store %s: %s missing or not usable: rebuilding every consume queue "
                        "from the log", self.path, QUEUE_OFFSETS_FILE)
            self.rebuilt = True
            floors = self._floors(topics.all(), max(min(lg.dispatched_position, end), lo))
            self._rebuild(list(topics.all()), lo, lo, skip_damage=True)
            topics.damaged.clear()
            self.position = lo
        else:
            limit = summary[0] if summary is not None else lo
            expected = summary[1] if summary is not None else {}
            damaged = [t for t in topics.all()
                       if t.name in topics.damaged or not self._queues_agree(t, limit,
                                                                             expected)]
            if damaged:
                names = sorted(t.name for t in damaged)
                log.error("store %s: consume queues of %s do not agree with %s and the log: "
                          "rebuilding them from the log", self.path, names, QUEUE_OFFSETS_FILE)
                self.rebuilt = True
                self._rebuild(damaged, lo, limit, skip_damage=True)
            topics.damaged.clear()
            self.position = limit
            floors = {t.name: [n for n, _ in expected.get(t.name, ())] for t in topics.all()}
        if adopted or topics_untrusted:
            topics.save()
        self.dispatch(checkpoint=True, skip_damage=True)
        if self.durable_failed is not None:
            # at open this is not a device going bad under a running store: say it now
            raise StorageError(f"store {self.path}: {self.durable_failed}",
                               os.path.join(self.log.path, QUEUE_OFFSETS_FILE))
        for t in topics.all():
            floor = floors.get(t.name, ())
            for q, cq in enumerate(t.queues):
                # Never below what was handed out before, as far as the store knows: a queue
                # whose every record went with retention keeps its end.
                f = floor[q] if q < len(floor) else 0
                if cq.empty and f > cq.next_offset:
                    cq.next_offset = f
                t.counters[q] = max(cq.next_offset, f)
            # Resume round-robin at the first least-filled queue: where an uninterrupted
            # round-robin sequence would continue.
            t.rr = int(np.argmin(t.counters)) if len(t.counters) else 0
        # Records appended but not yet committed (replicated mode) already hold offsets.
        counter.count_from(self.position)

    @staticmethod
    def _floors(topics, limit: int) -> dict:
        """{topic: [next offset of each queue]} from the queue files as they are, trusted up
        to `limit` (before a rebuild that distrusts them: what they say was handed out is a
        floor for the counters, never a ceiling)."""
        out = {}
        for t in topics:
            ends = []
            for cq in t.queues:
                try:
                    cq.recover(limit)
                    ends.append(int(cq.next_offset))
                except (CorruptLogError, StorageError, OSError):
                    ends.append(0)
            out[t.name] = ends
        return out

    def _load_summary(self, lo: int, end: int):
        """(P, {topic: [(next_offset, last_position), ...]}) from queue_offsets.json, or None
        when it is missing, damaged or describes a position outside the log."""
        path = os.path.join(self.log.path, QUEUE_OFFSETS_FILE)
        try:
            obj = read_checked_json(path)
            if obj is None:
                return None
            pos, queues = obj.get("position"), obj.get("queues")
            if obj.get("version") != 1 or type(pos) is not int or not isinstance(queues, dict):
                raise CorruptLogError(f"{path}: not a version-1 queue summary", path, 0)
            out = {}
            for name, qs in queues.items():
                if not isinstance(qs, list) or not all(
                        isinstance(x, list) and len(x) == 2 and all(type(v) is int for v in x)
                        for x in qs):
                    raise CorruptLogError(f"{path}: bad entry for topic {name!r}", path, 0)
                out[name] = [tuple(x) for x in qs]
        except CorruptLogError as exc:
            log.error("store %s: %s", self.path, exc)
            return None
        if not lo <= pos <= end:
            log.error("store %s: %s describes position %d, outside the log [%d, %d]",
                      self.path, path, pos, lo, end)
            return None
        return pos, out

    def _adopt_topics(self, summary, topics_untrusted: bool) -> bool:
        """Topics the summary (or, when topics.json was lost, the queue directories) names
        but the registry lacks, or has fewer queues of, are registered -> True if any."""
        topics = self.topics
        want = {}
        if summary is not None:
            want = {name: len(qs) for name, qs in summary[1].items()}
        if topics_untrusted:
            for name, n in topics.disk_queue_counts().items():
                want[name] = max(want.get(name, 0), n)
        changed = False
        for name, n in want.items():
            t = topics.by_name.get(name)
            if t is not None and len(t.queues) >= n:
                continue
            try:
                check_topic_name(name)
                if t is None and not topics_untrusted:
                    log.error("store %s: topic %r is not in %s; registering it", self.path,
                              name, TOPICS_FILE)
                elif t is not None:
                    log.error("store %s: topic %r has %d queues in %s, %d in use; extending",
                              self.path, name, len(t.queues), TOPICS_FILE, n)
                topics.adopt(name, max(n, 1), self._clock_ms())
                changed = True
            except (InvalidTopicError, QuorumlogError) as exc:
                log.error("store %s: topic %r not registered again: %s", self.path, name, exc)
        return changed

    def _queues_agree(self, t: Topic, limit: int, expected: dict) -> bool:
        """Drop t's entries at or past `limit`, then: does each queue hold what the summary
        says it held below `limit` (a queue it does not name: nothing)?"""
        want = expected.get(t.name, ())
        lg = self.log
        for q, cq in enumerate(t.queues):
            try:
                cq.recover(limit)
            except (CorruptLogError, StorageError, OSError) as exc:
                log.error("store %s: consume queue %s/%d: %s", self.path, t.name, q, exc)
                return False
            n, last = want[q] if q < len(want) else (0, -1)
            if last < 0:
                if not cq.empty:
                    return False
                continue
            if cq.empty or cq.next_offset != n:
                return False
            e = cq.position_of(n - 1)
            if e is None or e[0] != last:
                return False
            if last < lg.min_position:
                continue                    # its record went with retention
            try:
                info, _ = lg.scan(last, last + e[1], 1)
            except InvalidArgumentError:
                return False                # no record starts there
            except CorruptLogError as exc:
                # the log's record is damaged: the queue is not; reading it will say so
                log.error("store %s: the last entry of %s/%d names a damaged record: %s",
                          self.path, t.name, q, exc)
                continue
            if (len(info) != 1 or int(info["size"][0]) != e[1]
                    or int(info["topic_hash"][0]) != t.hash or int(info["queue_id"][0]) != q
                    or int(info["queue_offset"][0]) != n - 1):
                return False
        return True

    def _rebuild(self, targets: list, lo: int, limit: int, skip_damage: bool) -> None:
        """Reset the queues of the topics `targets` and place their records in [lo, limit)
        again from the log. skip_damage: a damaged record (CorruptLogError) is logged and
        passed over (the raft index says where the next one starts) instead of raised."""
        lg = self.log
        for t in targets:
            for cq in t.queues:
                cq.reset()
        hashes = np.array([t.hash for t in targets], dtype=np.int64)
        pos = lo
        while pos < limit:
            try:
                info, nxt = lg.scan(pos, limit, MAX_SCAN_RECORDS)
            except CorruptLogError as exc:
                if not skip_damage:
                    raise
                nxt = self._after_damage(pos, exc)
                if nxt is None or nxt <= pos:
                    break
                pos = nxt
                continue
            if nxt == pos:
                break
            mine = info[np.isin(info["topic_hash"], hashes) & (info["type"] == TYPE_MESSAGE)]
            if len(mine):
                self._place_columns(mine["position"], mine["size"], mine["queue_id"],
                                    mine["queue_offset"], mine["tag_hash"],
                                    mine["topic_hash"], mine["type"])
            pos = nxt
        self.queue_rebuilds += len(targets)

    def _after_damage(self, pos: int, exc) -> int | None:
        """Where the record after the damaged one at `pos` starts, from the raft index; None
        when that cannot be found."""
        lg = self.log
        lo, hi = lg.first_index, lg.last_index
        while lo < hi:                      # the first index whose record starts at >= pos
            mid = (lo + hi) // 2
            if lg.position_of(mid) < pos:
                lo = mid + 1
            else:
                hi = mid
        self.rebuild_skipped += 1
        log.error("store %s: rebuilding consume queues: %s; the record is skipped", self.path,
                  exc)
        if lo + 1 > lg.last_index:
            return None
        return lg.position_of(lo + 1)

    # -- dispatch ----------------------------------------------------------------------------
    def dispatched_index(self) -> int:
        """Raft index up to which every record is dispatched (what the Raft core's
        on_dispatched wants); 0 when not known (a stalled dispatch right after open)."""
        lg = self.log
        if self.position >= lg.committed_position:
            return lg.committed_index
        return self.index

    def dispatch(self, checkpoint: bool = False, skip_damage: bool = False) -> None:
        """Dispatch every committed record not dispatched yet (scan path). skip_damage (at
        open): a damaged record is logged and passed over instead of raised."""
        lg = self.log
        limit = lg.committed_position
        start = self.position
        try:
            self._dispatch_to(lg, limit, skip_damage)
        finally:
            if self.position != start and self.on_advance is not None:
                self.on_advance()
        if checkpoint or (not self.background and self._monotonic() >= self._checkpoint_due):
            self.checkpoint()

    def _dispatch_to(self, lg, limit: int, skip_damage: bool = False) -> None:
        while self.position < limit:
            try:
                info, nxt = lg.scan(self.position, limit, MAX_SCAN_RECORDS)
            except CorruptLogError as exc:
                nxt = self._after_damage(self.position, exc) if skip_damage else None
                if nxt is None or nxt <= self.position:
                    raise
                self.position = nxt
                continue
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
                if self.meta_sink is not None and _has_type(info["type"], TYPE_META):
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
        elif not self.background and self._monotonic() >= self._checkpoint_due:
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
        if n <= _SMALL_BATCH:
            # (a follower applies a few records per round: plain ints, no numpy set ops)
            hashes = {th for th, r in zip(topic_hash.tolist(), rtype.tolist())
                      if r == TYPE_MESSAGE}
        else:
            hashes = np.unique(topic_hash[rtype == TYPE_MESSAGE]).tolist()
        for th in hashes:
            t = self.topics.by_hash.get(th)
            if t is not None:
                counters = t.counters
                have = counters.tolist()
                for q, cq in enumerate(t.queues):
                    if cq.next_offset > have[q]:
                        counters[q] = cq.next_offset

    def rebuild_topic(self, name: str) -> None:
        """Rebuild the consume queues of topic `name` from the log (a wrong entry was found:
        the queues are derived data, the log is the truth). The log is verified first, so a
        damaged log raises CorruptLogError naming its file and offset and nothing changes;
        then the topic's queue files are dropped and its dispatched records placed again.
        The counters never go down (an offset once handed out is not handed out again)."""
        lg = self.log
        t = self.topics.by_name[name]
        lg.verify(lg.min_position)
        self._rebuild([t], lg.min_position, self.position, skip_damage=False)
        self.checkpoint()            # entries below the dispatched position are durable again
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
        # (_cp_lock: a checkpoint_unlocked still msyncing files whose `dirty` it cleared
        # finishes first -- cq.flush() here skips them)
        with self._cp_lock:
            self._cp_gen += 1
            saved = self._checkpoint_files()
        if saved and self.position != self.log.dispatched_position:
            self.log.set_dispatched_position(self.position)
        self._checkpoint_due = (self._monotonic()
                                + self.config.dispatch_checkpoint_interval_ms / 1000.0)

    def _checkpoint_files(self) -> bool:
        """checkpoint()'s disk writes (store lock and _cp_lock held) -> the summary saved."""
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
        return self.durable_failed is None and self._save_summary(self._summary_now())

    def checkpoint_unlocked(self, lock) -> None:
        """checkpoint() for the store's timer thread, which holds `lock` (the store's) only
        to take and to publish the snapshot: the msyncs and the summary's write run without
        it, so puts, commits and reads go on while the disk is slow.

        Under the lock: dispatch, the position P, the queue files written since the last
        checkpoint (their `dirty` cleared: an entry placed meanwhile marks its file again
        for the next one), the summary of the queues at P, the derived state
        (before_checkpoint). Without it: msync those files, write the summary -- unless a
        checkpoint() ran meanwhile (it covered a later position). Under the lock again: P
        is handed to the log, as checkpoint() does, unless a checkpoint ran meanwhile."""
        with lock:
            if getattr(self.log, "closed", False):
                return                # (replaced: an install reopened the store meanwhile)
            if getattr(self.log, "read_only", False) or self.durable_failed is not None:
                self.checkpoint()
                return
            self.dispatch()
            position = self.position
            files = [f for t in self.topics.all() for cq in t.queues
                     for f in cq.files.values() if f.dirty]
            for f in files:
                f.dirty = False
            summary = self._summary_now()
            gen, lg = self._cp_gen, self.log
            if self.before_checkpoint is not None:
                self.before_checkpoint(position)
            self._checkpoint_due = (self._monotonic()
                                    + self.config.dispatch_checkpoint_interval_ms / 1000.0)
        with self._cp_lock:       # (the store's lock is never taken while holding this one)
            try:
                for f in files:
                    f.msync()
            except StorageError as exc:
                self.durable_failed = str(exc)
                log.error("store %s: %s; the consume queues are not made durable again until "
                          "the store is reopened (it re-dispatches from position %d)",
                          self.path, exc, lg.dispatched_position)
                return
            saved = gen == self._cp_gen and self._save_summary(summary)
        with lock:
            if saved and gen == self._cp_gen and self.log is lg \
                    and self.durable_failed is None and position > lg.dispatched_position:
                lg.set_dispatched_position(position)

    def _summary_now(self) -> dict:
        """What queue_offsets.json says of the queues as dispatched now (store lock held)."""
        queues = {}
        for t in self.topics.durable():       # (a staged topic: not until its META commits)
            qs = []
            for cq in t.queues:
                e = None if cq.empty else cq.position_of(cq.next_offset - 1)
                qs.append([int(cq.next_offset), -1 if e is None else e[0]])
            queues[t.name] = qs
        return {"version": 1, "position": self.position, "queues": queues}

    def _save_summary(self, summary: dict) -> bool:
        """Write queue_offsets.json (`summary`: the queue files are durable up to its
        position) -> False when it could not be written (the durable dispatched position then
        stays where it was; a full disk is retried at the next checkpoint). _cp_lock held."""
        if summary == self._summary:
            return True
        try:
            write_checked_json(os.path.join(self.log.path, QUEUE_OFFSETS_FILE), summary)
        except DiskFullError as exc:
            log.warning("store %s: %s", self.path, exc)
            return False
        except StorageError as exc:
            self.durable_failed = str(exc)
            log.error("store %s: %s; the consume queues are not made durable again until the "
                      "store is reopened", self.path, exc)
            return False
        self._summary = summary
        return True

    def segments_deleted(self, min_position: int) -> int:
        """Consume-queue files follow the log's new min position -> files deleted."""
        deleted = 0
        for t in self.topics.all():
            for cq in t.queues:
                deleted += cq.delete_files_before(min_position)
        return deleted
