"""The message store: what a broker embeds (RocketMQ's DefaultMessageStore on our commit log).

    with quorumlog.open("/var/lib/broker") as store:
        r = store.put("orders", b"...", tags="paid")
        for m in store.get("orders", r.queue_id, r.queue_offset):
            m.body

All topics' messages go into one CommitLog; each (topic, queue) has a consume queue
(_consumequeue.pyx) of 20-byte entries pointing into it. The store assigns queue offsets from its
own per-queue counters and writes them into the records; the consume queues are derived data,
filled by dispatch from the log's record headers and rebuilt from the log when lost.

The commit seam (single replica now, Raft later). A record may be read through a consume queue
only once the log calls it committed; dispatch never goes past `commit_limit`
(= CommitLog.committed_position). In single-replica mode (`replicated=False`) the store itself
commits what it appends: in async flush mode right after the append, in sync mode after the flush
that covers it. A Raft driver opens the store with `replicated=True`, calls CommitLog.commit(i)
when a majority holds index i, and then `store.dispatch()`.

Durable dispatch: the dispatched position is handed to the log (set_dispatched_position, saved
in its checkpoint) only after the consume-queue files covering it were msync'd; on reopen every
entry pointing at or past min(dispatched, end of log) is dropped and re-dispatched from the log.

Topic metadata lives in <dir>/topics.json (written atomically: tmp + fsync + rename + fsync dir),
written before the first record of a new topic is appended. It is a cache, not the truth: a
record of a topic missing from it (the file was lost) registers the topic again at dispatch,
from CommitLog.topic_at.

Reads map commit-log segment files read-only themselves (one mmap per segment, shared by every
Message made from it) so that get() costs no native call per message; retention unlinks the
files, and the mappings live on until the last Message referring to them is gone.

Thread safety: every public method takes the store's lock; the optional background thread
(retention, delay delivery, consume-queue flush) takes it too. In replicated mode the thread
does not deliver delayed messages (that appends; only the leader may): the driver calls
deliver_due() on the leader.

Replicated mode and queue offsets: records that arrive through CommitLog.append_replicated
carry queue offsets the store did not hand out. Dispatch raises the counters past every queue's
end, and before each own append the store counts the records replicated since its last count,
uncommitted ones included (recounting from the consume queues after a Raft truncation), so an
offset is never handed out twice. Dispatch trusts nothing in a replicated record: a topic name
breaking the rules or a queue id outside [0, max_queues_per_topic) is rejected (stats
"dispatch_rejected"), and a record claiming an offset its queue holds for another position is
reported (stats "dispatch_conflicts"); neither is dispatched, both are logged as errors.
"""
from __future__ import annotations

import json
import logging
import mmap
import os
import shutil
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

import numpy as np

from . import _consumequeue as _cq
from ._consumequeue import ConsumeQueue, Message, SegmentView
from .config import StoreConfig, load_config
from .errors import (
    BatchTooLargeError,
    DiskFullError,
    InvalidArgumentError,
    InvalidDelayLevelError,
    InvalidQueueError,
    InvalidTopicError,
    LogClosedError,
    OffsetOutOfRangeError,
    QuorumlogError,
    TopicNotFoundError,
)

log = logging.getLogger(__name__)
_builtin_open = open

__all__ = ["open", "MessageStore", "PutResult", "Message", "SCHEDULE_TOPIC"]

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"      # RocketMQ's TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_DELAY = "DELAY"
PROP_SCHEDULE_OFFSET = "SCHEDULE_OFFSET"     # "<level>:<offset in the schedule queue>"
FLAG_FROM_SCHEDULE = 1                       # record flag: delivered by the schedule service
TYPE_MESSAGE = 1
TOPICS_FILE = "topics.json"
MAX_SCAN_RECORDS = 65536


class PutResult(NamedTuple):
    index: int             # raft index of the record
    position: int          # log position of the record
    topic: str             # where it is stored (the schedule topic for a delayed message)
    queue_id: int
    queue_offset: int
    store_timestamp: int   # ms since the epoch


class BatchResult:
    """put_batch's result: one entry per message as arrays (no Python object per message).
    Also a sequence of PutResult: len(r), r[i], iteration."""
    __slots__ = ("first_index", "positions", "topic", "queue_ids", "queue_offsets",
                 "store_timestamp")

    def __init__(self, first_index, positions, topic, queue_ids, queue_offsets,
                 store_timestamp):
        self.first_index = first_index          # raft index of the first message
        self.positions = positions              # int64 array
        self.topic = topic
        self.queue_ids = queue_ids              # int64 array
        self.queue_offsets = queue_offsets      # int64 array
        self.store_timestamp = store_timestamp  # ms, one per batch

    def __len__(self):
        return len(self.positions)

    def __getitem__(self, i):
        n = len(self.positions)
        if not isinstance(i, int):
            raise TypeError("BatchResult indices must be int")
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return PutResult(self.first_index + i, int(self.positions[i]), self.topic,
                         int(self.queue_ids[i]), int(self.queue_offsets[i]),
                         self.store_timestamp)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return (f"BatchResult(first_index={self.first_index}, n={len(self)}, "
                f"topic={self.topic!r}, store_timestamp={self.store_timestamp})")


class _Topic:
    __slots__ = ("name", "hash", "queues", "counters", "rr", "system", "created_ms")

    def __init__(self, name, nqueues, system, created_ms):
        self.name = name
        self.hash = _cq.fnv1a64(name.encode())
        self.queues: list[ConsumeQueue] = []
        self.counters = np.zeros(nqueues, dtype=np.int64)   # next queue offset to hand out
        self.rr = 0
        self.system = system
        self.created_ms = created_ms


def _sharding_queue(key, nqueues: int) -> int:
    """Same key, same queue: CRC32 (zlib) of the key's bytes modulo the queue count."""
    if isinstance(key, str):
        key = key.encode()
    elif isinstance(key, int) and not isinstance(key, bool):
        key = str(key).encode()
    elif not isinstance(key, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"sharding_key must be str, bytes or int, got {type(key)}")
    return zlib.crc32(key) % nqueues


def _check_topic_name(topic) -> None:
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic must be a str, got {type(topic).__name__}")
    try:
        b = topic.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidTopicError(f"topic {topic!r} is not valid UTF-8") from None
    if not 1 <= len(b) <= 255 or "/" in topic or "\0" in topic or topic in (".", ".."):
        raise InvalidTopicError(f"topic {topic!r}: 1..255 UTF-8 bytes, no '/' or NUL, "
                                "not '.' or '..'")


def _atomic_write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with _builtin_open(tmp, "wb") as fh:   # this module defines its own open()
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _default_disk_usage(path: str) -> float:
    """Used fraction as df reports it: used / (used + available to unprivileged users)."""
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    denom = used + st.f_bavail
    return used / denom if denom > 0 else 0.0


class MessageStore:
    """See the module docstring. Create with quorumlog.open()."""

    def __init__(self, path, config: StoreConfig, *, replicated: bool = False,
                 clock_ms=None, monotonic=None, disk_usage=None, commitlog_factory=None):
        from .commitlog import CommitLog  # the native log; imported late for a clear error
        from .retention import Retention
        from .schedule import ScheduleService

        self._path = os.fspath(path)
        self.config = config
        self._replicated = bool(replicated)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._monotonic = monotonic or time.monotonic
        self._disk_usage = disk_usage or _default_disk_usage
        self._lock = threading.RLock()
        self._closed = True
        self._topics: dict[str, _Topic] = {}
        self._by_hash: dict[int, list] = {}       # topic hash -> list of ConsumeQueue
        self._topic_by_hash: dict[int, _Topic] = {}
        self._segviews: dict[int, SegmentView] = {}
        self._tag_hashes: dict[str, int] = {}
        self._cqdir = os.path.join(self._path, "consumequeue")
        self._stats = {"puts": 0, "messages_put": 0, "gets": 0, "messages_got": 0,
                       "dispatched_records": 0, "rebuilt": False,
                       "segments_deleted": 0, "cq_files_deleted": 0, "disk_full_rejects": 0,
                       "dispatch_stalls": 0, "dispatch_conflicts": 0, "dispatch_rejected": 0,
                       "delay_rejected": 0}
        # Replicated mode: the counters account for every record of the log up to raft index
        # _counted_idx (of term _counted_term); records arriving by replication past it are
        # counted before the next own append (_sync_counters). _tail holds what the counted
        # records imply for (topic hash, queue) pairs this store has no queue for yet.
        self._counted_idx = 0
        self._counted_term = 0
        self._tail: dict[tuple[int, int], int] = {}
        self._disk_full = False
        self._disk_ratio = 0.0
        self._last_disk_check = -1e18
        self._last_dispatch_cp = self._monotonic()
        self._timer = None
        self._stop_event = threading.Event()
        os.makedirs(self._path, exist_ok=True)
        factory = commitlog_factory or CommitLog
        self._log = factory(
            self._path, segment_size_bytes=config.segment_size_bytes,
            index_file_entries=config.index_file_entries, flush=config.flush,
            flush_interval_ms=config.flush_interval_ms,
            checkpoint_interval_ms=config.checkpoint_interval_ms,
            max_message_bytes=config.max_message_bytes)
        try:
            self._seg_size = self._log.segment_size_bytes
            self._term = max(self._log.last_term, 1)
            self._closed = False
            self._open_topics()
            self._recover()
            self.retention = Retention(self)
            self.schedule = ScheduleService(self)
            self.retention.check_disk(force=True)
        except BaseException:
            self._closed = True
            self._log.close()
            raise
        if config.background:
            self._start_timer()

    # ------------------------------------------------------------------ properties
    @property
    def path(self) -> str:
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def commitlog(self):
        """The underlying CommitLog (for the Raft driver and tools)."""
        return self._log

    @property
    def commit_limit(self) -> int:
        """Dispatch (and so every read) stops here: the log's committed position."""
        return self._log.committed_position

    @property
    def term(self) -> int:
        """Raft term written into appended records (1 for a single replica). The Raft driver
        sets it when this replica becomes leader; it never decreases."""
        return self._term

    @term.setter
    def term(self, value: int) -> None:
        if type(value) is not int or value < self._term:
            raise InvalidArgumentError(f"term must be an int >= {self._term}, got {value!r}")
        with self._lock:
            self._term = value

    @property
    def dispatched_position(self) -> int:
        return self._dispatched

    @property
    def disk_full(self) -> bool:
        return self._disk_full

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<MessageStore {self._path!r}{' closed' if self._closed else ''}>"

    def _check_open(self):
        if self._closed:
            raise LogClosedError(f"store {self._path} is closed")

    # ------------------------------------------------------------------ topics
    def _open_topics(self):
        meta_path = os.path.join(self._path, TOPICS_FILE)
        self._cq_missing = not os.path.isdir(self._cqdir)
        try:
            with _builtin_open(meta_path, "rb") as fh:
                meta = json.loads(fh.read())
            topics = meta["topics"]
        except FileNotFoundError:
            topics = {}
            # No topic list: rebuild the consume queues (and the list) from the whole log.
            self._cq_missing = True
        except (ValueError, KeyError, TypeError) as exc:
            raise QuorumlogError(f"{meta_path} is damaged ({exc}); delete it to rebuild the "
                                 "topic list from the log") from None
        os.makedirs(self._cqdir, exist_ok=True)
        for name, info in topics.items():
            t = self._add_topic(name, int(info["queues"]), bool(info.get("system", False)),
                                int(info.get("created_ms", 0)), persist=False)
            for cq in t.queues:
                if not cq.load():
                    self._cq_missing = True
                    os.makedirs(cq.dir, exist_ok=True)

    def _add_topic(self, name, nqueues, system, created_ms, persist=True) -> _Topic:
        t = _Topic(name, nqueues, system, created_ms)
        other = self._topic_by_hash.get(t.hash)
        if other is not None and other.name != name:
            raise InvalidTopicError(f"topic {name!r} collides with {other.name!r} "
                                    "(same FNV-1a 64 hash); choose another name")
        tdir = os.path.join(self._cqdir, name)
        for q in range(nqueues):
            cq = ConsumeQueue(name, q, os.path.join(tdir, str(q)),
                              self.config.consume_queue_file_entries)
            if persist and cq.load():
                # A topic new to topics.json whose queue files exist (the metadata was lost):
                # keep what the log confirms, re-dispatch the rest.
                cq.recover(getattr(self, "_dispatched", 0))
                t.counters[q] = cq.next_offset
            t.queues.append(cq)
        self._apply_tail(t, 0)
        self._topics[name] = t
        self._topic_by_hash[t.hash] = t
        self._by_hash[t.hash] = t.queues
        if persist:
            for cq in t.queues:
                os.makedirs(cq.dir, exist_ok=True)
            self._save_topics()
        return t

    def _drop_topic(self, t: _Topic):
        """Undo the auto-creation of a topic whose first put was rejected (bad input
        changes nothing)."""
        self._topics.pop(t.name, None)
        self._topic_by_hash.pop(t.hash, None)
        self._by_hash.pop(t.hash, None)
        shutil.rmtree(os.path.join(self._cqdir, t.name), ignore_errors=True)
        self._save_topics()

    def _save_topics(self):
        meta = {"version": 1, "topics": {
            t.name: {"queues": len(t.queues), "system": t.system, "created_ms": t.created_ms}
            for t in self._topics.values()}}
        _atomic_write(os.path.join(self._path, TOPICS_FILE),
                      json.dumps(meta, indent=1, sort_keys=True).encode())

    def create_topic(self, name: str, queues: int = 8) -> None:
        """Create `name` with `queues` queues (RocketMQ's default is 8). Creating an existing
        topic with the same queue count is a no-op; more queues extend it; fewer is an error."""
        _check_topic_name(name)
        if name == SCHEDULE_TOPIC:
            raise InvalidTopicError(f"{SCHEDULE_TOPIC} is reserved for delay levels")
        with self._lock:
            self._check_open()
            self._create_topic(name, queues, system=False)

    def _create_topic(self, name, queues, system):
        if (not isinstance(queues, int) or isinstance(queues, bool)
                or not 1 <= queues <= self.config.max_queues_per_topic):
            raise InvalidArgumentError(
                f"queues must be an int in [1, {self.config.max_queues_per_topic}], "
                f"got {queues!r}")
        t = self._topics.get(name)
        if t is None:
            return self._add_topic(name, queues, system, self._clock_ms())
        if queues < len(t.queues):
            raise InvalidArgumentError(f"topic {name!r} has {len(t.queues)} queues; "
                                       f"cannot shrink to {queues}")
        if queues > len(t.queues):
            self._extend_topic(t, queues)
        return t

    def _extend_topic(self, t: _Topic, queues: int, persist=True):
        tdir = os.path.join(self._cqdir, t.name)
        for q in range(len(t.queues), queues):
            cq = ConsumeQueue(t.name, q, os.path.join(tdir, str(q)),
                              self.config.consume_queue_file_entries)
            os.makedirs(cq.dir, exist_ok=True)
            cq.load()
            cq.recover(getattr(self, "_dispatched", 0))
            t.queues.append(cq)
        old = len(t.counters)
        t.counters = np.concatenate([t.counters, np.array(
            [cq.next_offset for cq in t.queues[old:]], dtype=np.int64)])
        self._apply_tail(t, old)
        self._by_hash[t.hash] = t.queues
        if persist:
            self._save_topics()

    def topics(self) -> dict[str, int]:
        """{topic: number of queues} of the user topics."""
        with self._lock:
            self._check_open()
            return {t.name: len(t.queues) for t in self._topics.values() if not t.system}

    def _topic_for_write(self, name) -> _Topic:
        t = self._topics.get(name)
        if t is not None:
            if t.system:
                raise InvalidTopicError(f"{name} is reserved for delay levels")
            return t
        _check_topic_name(name)
        if name == SCHEDULE_TOPIC:
            raise InvalidTopicError(f"{SCHEDULE_TOPIC} is reserved for delay levels")
        if not self.config.auto_create_topics:
            raise TopicNotFoundError(name)
        return self._add_topic(name, self.config.default_topic_queues, False, self._clock_ms())

    def _topic_for_read(self, name, queue_id) -> ConsumeQueue:
        t = self._topics.get(name)
        if t is None:
            if not isinstance(name, str):
                raise InvalidTopicError(f"topic must be a str, got {type(name).__name__}")
            raise TopicNotFoundError(name)
        if type(queue_id) is not int or not 0 <= queue_id < len(t.queues):
            raise InvalidQueueError(f"queue_id {queue_id!r} outside [0, {len(t.queues)}) "
                                    f"for topic {name!r}")
        return t.queues[queue_id]

    # ------------------------------------------------------------------ recovery & dispatch
    def _recover(self):
        lg = self._log
        # Never trust consume-queue entries beyond what the log confirms.
        limit = max(min(lg.dispatched_position, lg.end_position), lg.min_position)
        rebuild = self._cq_missing and lg.end_position > lg.min_position
        for t in self._topics.values():
            for cq in t.queues:
                cq.recover(limit)
        if not self._replicated and lg.last_index > lg.committed_index:
            # Single replica: every intact record the log recovered is ours and committed.
            lg.commit(lg.last_index)
        if rebuild:
            log.warning("store %s: consume queues missing, rebuilding from the log", self._path)
            self._stats["rebuilt"] = True
            self._dispatched = lg.min_position
        else:
            self._dispatched = limit
        self._dispatch(checkpoint=True)
        for t in self._topics.values():
            for q, cq in enumerate(t.queues):
                t.counters[q] = cq.next_offset
            # Resume round-robin at the first least-filled queue: where an uninterrupted
            # round-robin sequence would continue.
            t.rr = int(np.argmin(t.counters)) if len(t.counters) else 0
        # Records appended but not yet committed (replicated mode) already hold offsets.
        self._count_tail(self._dispatched)
        self._min_position = lg.min_position

    def _count_tail(self, pos):
        """Raise the counters past every MESSAGE record in [pos, end of log): the offsets
        those records hold (committed or not) must never be handed out again."""
        lg = self._log
        end = lg.end_position
        while pos < end:
            info, nxt = lg.scan(pos, end, MAX_SCAN_RECORDS)
            if nxt == pos:
                break
            msg = info[info["type"] == TYPE_MESSAGE]
            for th, qid, qo in zip(msg["topic_hash"].tolist(), msg["queue_id"].tolist(),
                                   msg["queue_offset"].tolist()):
                t = self._topic_by_hash.get(th)
                if t is not None and 0 <= qid < len(t.counters):
                    if qo >= t.counters[qid]:
                        t.counters[qid] = qo + 1
                elif 0 <= qid < self.config.max_queues_per_topic:
                    key = (th, qid)
                    if qo + 1 > self._tail.get(key, 0):
                        self._tail[key] = qo + 1
            pos = nxt
        last = lg.last_index
        self._counted_idx = last
        self._counted_term = lg.term_at(last) if last and last >= lg.first_index else 0

    def _apply_tail(self, t: _Topic, first_q: int):
        """A topic (or queues) created after its records were counted: adopt their offsets."""
        if self._tail:
            for q in range(first_q, len(t.counters)):
                nxt = self._tail.pop((t.hash, q), 0)
                if nxt > t.counters[q]:
                    t.counters[q] = nxt

    def _sync_counters(self):
        """Replicated mode, before an own append: count the records that arrived by
        replication since the last count (the uncommitted tail included), and start over from
        the consume queues when the log was truncated under the counted records."""
        lg = self._log
        ci = self._counted_idx
        last = lg.last_index
        first = lg.first_index
        if ci and ci >= first and (ci > last or lg.term_at(ci) != self._counted_term):
            # Truncated (Raft dropped a tail): what is dispatched is committed and stays.
            for t in self._topics.values():
                t.counters = np.array([cq.next_offset for cq in t.queues], dtype=np.int64)
            self._tail.clear()
            self._count_tail(self._dispatched)
            return
        if last == ci:
            return
        start = self._dispatched
        if ci and ci >= first:
            start = max(start, lg.position_of(ci) + lg.size_of(ci))
        self._count_tail(start)

    def _counted_own(self, first_index, last_index):
        """Replicated mode: an own append right after the counted records extends them."""
        if self._counted_idx == first_index - 1:
            self._counted_idx = last_index
            self._counted_term = self._term

    def dispatch(self) -> int:
        """Dispatch committed records into the consume queues (the Raft driver calls this
        after advancing the commit index). Returns the dispatched position."""
        with self._lock:
            self._check_open()
            self._dispatch()
            return self._dispatched

    def _dispatch(self, checkpoint=False):
        lg = self._log
        limit = lg.committed_position
        while self._dispatched < limit:
            info, nxt = lg.scan(self._dispatched, limit, MAX_SCAN_RECORDS)
            if nxt == self._dispatched:
                break
            if len(info):
                try:
                    self._dispatch_columns(info["position"], info["size"], info["queue_id"],
                                           info["queue_offset"], info["tag_hash"],
                                           info["topic_hash"], info["type"])
                except DiskFullError as exc:
                    self._dispatch_stalled(exc)
                    return
            self._dispatched = nxt
        if checkpoint or (self._monotonic() - self._last_dispatch_cp) * 1000 >= \
                self.config.dispatch_checkpoint_interval_ms:
            self._checkpoint_dispatch()

    def _dispatch_columns(self, position, size, queue_id, queue_offset, tag_hash, topic_hash,
                          rtype):
        n = len(position)
        i = 0
        while i < n:
            i = _cq.dispatch(self._by_hash, position, size, queue_id, queue_offset, tag_hash,
                             topic_hash, rtype, i)
            if i >= n:
                break
            self._dispatch_slow(int(position[i]), int(size[i]), int(queue_id[i]),
                                int(queue_offset[i]), int(tag_hash[i]), int(topic_hash[i]))
            i += 1
        self._stats["dispatched_records"] += n
        # Records that arrived by replication advance the queues, not the counters: keep the
        # counters at or past every queue's end so no offset is handed out twice.
        for th in np.unique(topic_hash[rtype == TYPE_MESSAGE]).tolist():
            t = self._topic_by_hash.get(th)
            if t is not None:
                np.maximum(t.counters, np.fromiter((cq.next_offset for cq in t.queues),
                                                   dtype=np.int64, count=len(t.queues)),
                           out=t.counters)

    def _dispatch_slow(self, pos, size, qid, qoff, th, topic_hash):
        """One record the Cython loop could not place: unknown topic or queue, an empty queue,
        a new consume-queue file, a gap, an offset the queue already holds.

        Records may come from another replica, so nothing in them is trusted: a topic name
        that breaks the naming rules, a queue id outside [0, max_queues_per_topic) or a
        negative offset is rejected (logged as an error, counted in stats
        "dispatch_rejected", not dispatched) before any directory is created; a second record
        at an offset the queue holds for another position is a broken log (two records
        claim one offset): logged as an error, counted in "dispatch_conflicts", not
        dispatched, never silently skipped."""
        maxq = self.config.max_queues_per_topic
        t = self._topic_by_hash.get(topic_hash)
        if not 0 <= qid < maxq or qoff < 0:
            name = t.name if t is not None else self._log.topic_at(pos)
            return self._reject(pos, f"topic {name!r} queue {qid} offset {qoff}: queue id "
                                     f"outside [0, {maxq}) or negative offset")
        if t is None:
            name = self._log.topic_at(pos)
            try:
                _check_topic_name(name)
                log.warning("store %s: topic %r found in the log but not in %s; "
                            "registering it", self._path, name, TOPICS_FILE)
                t = self._add_topic(name, min(max(self.config.default_topic_queues, qid + 1),
                                              maxq),
                                    name == SCHEDULE_TOPIC, self._clock_ms())
            except InvalidTopicError as exc:
                return self._reject(pos, str(exc))
        if qid >= len(t.queues):
            log.warning("store %s: topic %r has a record in queue %d; extending to %d queues",
                        self._path, t.name, qid, qid + 1)
            self._extend_topic(t, qid + 1)
        cq = t.queues[qid]
        if not cq.empty and qoff < cq.next_offset:
            held = cq.position_of(qoff)
            if held is not None and held[0] == pos:
                return                          # re-dispatch of a record already in place
            self._stats["dispatch_conflicts"] += 1
            log.error("store %s: CONFLICT: record at position %d claims %s/%d offset %d, but "
                      "the queue already holds %s for it; record not dispatched (two records "
                      "were given one queue offset)", self._path, pos, t.name, qid, qoff,
                      f"position {held[0]}" if held is not None else "a hole")
            return
        cq.put(qoff, pos, size, th)
        if cq.next_offset > t.counters[qid]:
            t.counters[qid] = cq.next_offset

    def _reject(self, pos, reason):
        self._stats["dispatch_rejected"] += 1
        log.error("store %s: REJECTED record at position %d: %s; not dispatched", self._path,
                  pos, reason)

    def _checkpoint_dispatch(self):
        """msync the consume-queue files, then tell the log how far they are durable."""
        for t in self._topics.values():
            for cq in t.queues:
                cq.flush()
        pos = self._dispatched
        if pos > self._log.dispatched_position or pos < self._log.dispatched_position:
            self._log.set_dispatched_position(pos)
        self._last_dispatch_cp = self._monotonic()

    # ------------------------------------------------------------------ writes
    def put(self, topic: str, body, *, queue_id: int | None = None, tags: str | None = None,
            keys: Iterable[str] = (), properties: Mapping[str, str] | None = None,
            delay_level: int = 0, sharding_key=None,
            born_timestamp_ms: int | None = None) -> PutResult:
        """Append one message; returns where it went. Queue: `queue_id`, else the queue of
        `sharding_key` (same key -> same queue), else round-robin."""
        if isinstance(keys, str):
            keys = (keys,)
        if delay_level:
            r = self._put(topic, (body,), queue_id, tags, [tuple(keys)] if keys else None,
                          None if properties is None else [properties], delay_level,
                          sharding_key, None if born_timestamp_ms is None
                          else [born_timestamp_ms], 0)
            return PutResult(r[0], int(r[1][0]), r[2], int(r[3][0]), int(r[4][0]), r[5])
        # One message: CommitLog.append and one consume-queue entry, no arrays.
        with self._lock:
            if self._closed:
                raise LogClosedError(f"store {self._path} is closed")
            self._check_disk()
            if self._replicated:
                self._sync_counters()
            t = self._topics.get(topic)
            created = t is None
            if t is None or t.system:
                t = self._topic_for_write(topic)
            lg = self._log
            try:
                q, rr = self._choose_queues(t, 1, queue_id, sharding_key)
                off = int(t.counters[q])
                index, pos, ts = lg.append(t.name, body, queue_id=q, queue_offset=off,
                                           term=self._term, tags=tags,
                                           keys=tuple(keys) if keys else (),
                                           properties=properties,
                                           born_timestamp_ms=born_timestamp_ms)
            except BaseException:
                if created:
                    self._drop_topic(t)
                raise
            t.counters[q] = off + 1
            if rr is not None:
                t.rr = rr
            if self._replicated:
                self._counted_own(index, index)
            st = self._stats
            st["puts"] += 1
            st["messages_put"] += 1
            if not self._replicated:
                end = lg.end_position
                if lg.flush_mode == "sync":
                    pending = (t, np.array([pos], dtype=np.int64), end,
                               np.array([q], dtype=np.int64), np.array([off], dtype=np.int64),
                               tags, 1, index)
                else:
                    pending = None
            else:
                pending = None
            if not self._replicated and pending is None:
                lg.commit(index)
                S = self._seg_size
                if (self._dispatched == pos and lg.committed_position == end
                        and pos // S == (end - 1) // S):
                    th = self._tag_hash(tags)
                    try:
                        if not _cq.dispatch_one(t.queues[q], off, pos, end - pos, th):
                            self._dispatch_slow(pos, end - pos, q, off, th, t.hash)
                    except DiskFullError as exc:
                        self._dispatch_stalled(exc)
                        return PutResult(index, pos, t.name, q, off, ts)
                    st["dispatched_records"] += 1
                    self._dispatched = end
                    if (self._monotonic() - self._last_dispatch_cp) * 1000 >= \
                            self.config.dispatch_checkpoint_interval_ms:
                        self._checkpoint_dispatch()
                else:
                    self._dispatch()
        if pending is not None:
            self._finish_sync(pending)
        return PutResult(index, pos, t.name, q, off, ts)

    def _tag_hash(self, tags) -> int:
        if not tags:
            return 0
        h = self._tag_hashes.get(tags)
        if h is None:
            if len(self._tag_hashes) >= 4096:
                self._tag_hashes.clear()
            h = self._tag_hashes[tags] = _cq.fnv1a64(tags.encode())
        return h

    def put_batch(self, topic: str, bodies, *, queue_id: int | None = None, tags=None,
                  keys=None, properties=None, delay_level: int = 0, sharding_key=None,
                  born_timestamps_ms=None) -> BatchResult:
        """Append many messages of one topic in one native call. `tags`, `keys`, `properties`
        and `sharding_key` are one value for all messages or a list with one per message; with
        neither `queue_id` nor `sharding_key`, consecutive messages go round-robin."""
        if not isinstance(bodies, (list, tuple)):
            raise InvalidArgumentError("bodies must be a list or tuple of bytes-like objects")
        r = self._put(topic, bodies, queue_id, tags, keys, properties, delay_level,
                      sharding_key, born_timestamps_ms, 0)
        return BatchResult(*r)

    def _put(self, topic, bodies, queue_id, tags, keys, properties, delay_level, sharding_key,
             born, flags, *, internal_queue_ids=None):
        cfg = self.config
        n = len(bodies)
        if n == 0:
            raise InvalidArgumentError("empty batch")
        if n > cfg.max_batch_messages:
            raise BatchTooLargeError(f"{n} messages > max_batch_messages "
                                     f"{cfg.max_batch_messages}")
        try:
            total = _cq.body_bytes(bodies)
        except TypeError:
            raise InvalidArgumentError("every body must be a bytes-like object") from None
        if total > cfg.max_batch_bytes and n > 1:   # one message: max_message_bytes rules
            raise BatchTooLargeError(f"{total} body bytes > max_batch_bytes {cfg.max_batch_bytes}")
        if type(delay_level) is not int or not 0 <= delay_level <= len(self.schedule.levels_ms):
            raise InvalidDelayLevelError(
                f"delay_level {delay_level!r} outside [0, {len(self.schedule.levels_ms)}]")
        if (tags is not None or keys is not None or properties is not None
                or sharding_key is not None or born is not None):
            for name, v in (("tags", tags), ("keys", keys), ("properties", properties),
                            ("sharding_key", sharding_key), ("born_timestamps_ms", born)):
                if isinstance(v, list) and len(v) != n:
                    raise InvalidArgumentError(f"{name}: {len(v)} values for {n} messages")
        with self._lock:
            if self._closed:
                raise LogClosedError(f"store {self._path} is closed")
            self._check_disk()
            rr = None
            if self._replicated:
                self._sync_counters()
            created = topic not in self._topics
            if internal_queue_ids is None:
                t = self._topic_for_write(topic)
            else:
                t = self._topics[topic]
            try:
                if internal_queue_ids is None:
                    qids, rr = self._choose_queues(t, n, queue_id, sharding_key)
                else:
                    qids = internal_queue_ids
                if delay_level > 0:
                    res = self._put_delayed(t, bodies, qids, tags, keys, properties,
                                            delay_level, born)
                else:
                    res = self._append(t, bodies, qids, tags, keys, properties, born, flags)
            except BaseException:
                if created and t.name in self._topics and not t.counters.any():
                    self._drop_topic(t)      # an auto-created topic of a rejected put
                raise
            if rr is not None:      # the round-robin cursor moves only for accepted puts
                t.rr = rr
        res, pending = res
        if pending is not None:
            self._finish_sync(pending)
        return res

    def _choose_queues(self, t: _Topic, n, queue_id, sharding_key):
        nq = len(t.queues)
        if queue_id is not None:
            if type(queue_id) is not int or not 0 <= queue_id < nq:
                raise InvalidQueueError(f"queue_id {queue_id!r} outside [0, {nq}) for topic "
                                        f"{t.name!r}")
            if sharding_key is not None:
                raise InvalidArgumentError("give queue_id or sharding_key, not both")
            return queue_id, None
        if sharding_key is not None:
            if isinstance(sharding_key, list):
                return np.fromiter((_sharding_queue(k, nq) for k in sharding_key),
                                   dtype=np.int64, count=n), None
            return _sharding_queue(sharding_key, nq), None
        # Round-robin (RocketMQ's default MessageQueueSelector: an incrementing index).
        start = t.rr
        if n == 1 or nq == 1:
            return start, (start + n) % nq
        # (qids, offsets, counters) precomputed in one Cython loop; _offsets_for passes it on
        return _cq.round_robin(t.counters, start, n), (start + n) % nq

    def _offsets_for(self, t: _Topic, qids, n):
        """Queue offsets for a batch (consecutive per queue) and the new counters."""
        if isinstance(qids, (int, np.integer)):
            first = int(t.counters[qids])
            return first, None
        if isinstance(qids, tuple):          # from _cq.round_robin
            return qids[1], qids[2]
        return _cq.queue_offsets(t.counters, qids)

    def _append(self, t: _Topic, bodies, qids, tags, keys, properties, born, flags):
        n = len(bodies)
        offs, counts = self._offsets_for(t, qids, n)
        if isinstance(qids, tuple):
            qids = qids[0]
        lg = self._log
        first_index, positions, store_ts = lg.append_batch(
            t.name, bodies, queue_ids=qids, queue_offsets=offs, term=self._term, tags=tags,
            keys=keys, properties=properties, born_timestamps_ms=born, flags=flags)
        # Counters advance only once the log accepted the batch (bad input changes nothing).
        if counts is None:
            t.counters[qids] += n
            offs = np.arange(offs, offs + n, dtype=np.int64)
            qids = np.full(n, qids, dtype=np.int64)
        else:
            t.counters = counts
        if self._replicated:
            self._counted_own(first_index, first_index + n - 1)
        self._stats["puts"] += 1
        self._stats["messages_put"] += n
        res = (first_index, positions, t.name, qids, offs, store_ts)
        if self._replicated:
            return res, None
        pending = (t, positions, lg.end_position, qids, offs, tags, n, first_index + n - 1)
        if lg.flush_mode == "sync":
            return res, pending          # committed by _finish_sync, outside the lock
        self._commit_and_dispatch(*pending)
        return res, None

    def _commit_and_dispatch(self, t, positions, end, qids, offs, tags, n, last):
        """Single replica: commit our own batch and dispatch it (called with the lock)."""
        lg = self._log
        lg.commit(last)
        S = self._seg_size
        p0 = int(positions[0])
        if (self._dispatched == p0 and lg.committed_position == end
                and p0 // S == (end - 1) // S):
            # Fast path: the batch is the whole committed, undispatched tail and sits in one
            # segment (no BLANK inside), so the append results describe every record; no
            # need to re-read and re-CRC the headers through scan().
            try:
                self._dispatch_own(t, positions, end, qids, offs, tags, n)
            except DiskFullError as exc:
                self._dispatch_stalled(exc)
        else:
            self._dispatch()

    def _dispatch_stalled(self, exc):
        """A consume-queue file could not be preallocated (disk full). The records are in the
        log and committed, so the put succeeded; dispatch stops where it is (readers see what
        was dispatched) and resumes from the log on the next put, read or timer tick."""
        self._stats["dispatch_stalls"] += 1
        log.error("store %s: dispatch stalled at position %d: %s", self._path,
                  self._dispatched, exc)

    def _finish_sync(self, pending):
        """Sync mode: wait for the flush covering the batch *without* the store lock, so
        other producers append meanwhile and one msync covers them all (group commit); then
        commit and dispatch."""
        end = pending[2]
        if not self._log.wait_flushed(end):
            raise QuorumlogError(f"store {self._path}: flush up to {end} did not complete")
        with self._lock:
            if self._closed:
                raise LogClosedError(f"store {self._path} closed while waiting for a flush; "
                                     "the batch was flushed but not dispatched before close")
            self._commit_and_dispatch(*pending)

    def _dispatch_own(self, t, positions, end, qids, offs, tags, n):
        if tags is None:
            shared, per = 0, None
        elif isinstance(tags, str):
            shared, per = self._tag_hash(tags), None
        else:
            shared, per = 0, _cq.tag_hashes(list(tags))
        i = 0
        while True:
            i = _cq.dispatch_batch(t.queues, positions, end, qids, offs, shared, per, i)
            if i >= n:
                break
            size = (int(positions[i + 1]) if i + 1 < n else end) - int(positions[i])
            self._dispatch_slow(int(positions[i]), size, int(qids[i]), int(offs[i]),
                                shared if per is None else int(per[i]), t.hash)
            i += 1
        self._stats["dispatched_records"] += n
        self._dispatched = end
        if (self._monotonic() - self._last_dispatch_cp) * 1000 >= \
                self.config.dispatch_checkpoint_interval_ms:
            self._checkpoint_dispatch()

    def _put_delayed(self, t: _Topic, bodies, qids, tags, keys, properties, level, born):
        """Store under the schedule topic, queue level-1, with the real topic and queue in
        properties (RocketMQ CommitLog#putMessage); the schedule service delivers it."""
        n = len(bodies)
        st = self._schedule_topic()
        if isinstance(qids, tuple):          # round-robin (qids, offsets, counters)
            qids = qids[0]
        qarr = np.broadcast_to(np.asarray(qids, dtype=np.int32), (n,))
        props = []
        for i in range(n):
            p = properties[i] if isinstance(properties, list) else properties
            d = dict(p) if p else {}
            for k in (PROP_REAL_TOPIC, PROP_REAL_QID, PROP_DELAY, PROP_SCHEDULE_OFFSET):
                if k in d:
                    raise InvalidArgumentError(f"property {k!r} is reserved")
            d[PROP_REAL_TOPIC] = t.name
            d[PROP_REAL_QID] = str(int(qarr[i]))
            d[PROP_DELAY] = str(level)
            props.append(d)
        return self._append(st, bodies, level - 1, tags, keys, props, born, 0)

    def _schedule_topic(self) -> _Topic:
        st = self._topics.get(SCHEDULE_TOPIC)
        nlev = len(self.schedule.levels_ms)
        if st is None:
            st = self._add_topic(SCHEDULE_TOPIC, nlev, True, self._clock_ms())
        elif len(st.queues) < nlev:
            self._extend_topic(st, nlev)
        return st

    def _check_disk(self):
        now = self._monotonic()
        if (now - self._last_disk_check) * 1000 >= self.config.disk_check_interval_ms:
            self.retention.check_disk()
        if self._disk_full:
            self._stats["disk_full_rejects"] += 1
            raise DiskFullError(
                f"disk use {self._disk_ratio:.1%} above disk_reject_ratio "
                f"{self.config.disk_reject_ratio:.0%}; writes resume when space is freed")

    def flush(self) -> int:
        """Make everything put so far durable (log and consume queues) -> flushed position."""
        with self._lock:
            self._check_open()
            pos = self._log.flush()
            self._checkpoint_dispatch()
            return pos

    # ------------------------------------------------------------------ reads
    def _segment_for(self, pos: int) -> SegmentView:
        start = pos - pos % self._seg_size
        v = self._segviews.get(start)
        if v is None:
            path = os.path.join(self._path, "commitlog", "%020d" % start)
            fd = os.open(path, os.O_RDONLY)
            try:
                mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            v = SegmentView(mm, start)
            self._segviews[start] = v
        return v

    def get(self, topic: str, queue_id: int, offset: int, max_messages: int = 32, *,
            tags=None) -> list[Message]:
        """Up to `max_messages` messages of (topic, queue) from queue offset `offset`.

        [] when offset == max_offset (caught up); OffsetOutOfRangeError outside
        [min_offset, max_offset]. With `tags` (a str or a collection of str), only messages
        with one of those tags are returned; the scan goes on past non-matching entries until
        max_messages match or the queue ends."""
        with self._lock:
            if self._closed:
                raise LogClosedError(f"store {self._path} is closed")
            cq = self._topic_for_read(topic, queue_id)
            if (type(max_messages) is not int or not
                    1 <= max_messages <= self.config.max_get_messages):
                raise InvalidArgumentError(f"max_messages must be in [1, "
                                           f"{self.config.max_get_messages}]")
            if type(offset) is not int:
                raise InvalidArgumentError(f"offset must be an int, got {offset!r}")
            if self._dispatched < self._log.committed_position:
                self._dispatch()
            end = cq.next_offset
            if offset >= end or offset < self._cq_min(cq):
                if offset == end:
                    return []
                raise OffsetOutOfRangeError(
                    f"offset {offset} outside [{self._cq_min(cq)}, {end}] of {topic}/{queue_id}",
                    self._cq_min(cq), end)
            hashes = names = None
            if tags is not None:
                hashes, names = self._tag_filter(tags)
            out: list = []
            while offset < end and len(out) < max_messages:
                f = cq.file_for(offset)
                if f is None:    # a missing file inside the range: skip to the next one
                    offset += cq.file_entries - offset % cq.file_entries
                    continue
                first = f.first_offset
                stop = _cq.collect(self._segment_for, f, offset - first,
                                   min(end - first, f.capacity), out, max_messages,
                                   hashes, names)
                offset = first + stop
            self._stats["gets"] += 1
            self._stats["messages_got"] += len(out)
            return out

    def _tag_filter(self, tags):
        if isinstance(tags, str):
            tags = (tags,)
        try:
            encoded = {s.encode() for s in tags}
        except (TypeError, AttributeError):
            raise InvalidArgumentError("tags must be a str or a collection of str") from None
        if not 1 <= len(encoded) <= _cq.MAX_TAG_FILTER_TAGS:
            raise InvalidArgumentError(f"tags filter: 1..{_cq.MAX_TAG_FILTER_TAGS} tags")
        return tuple(_cq.fnv1a64(b) for b in encoded), encoded

    def _cq_min(self, cq: ConsumeQueue) -> int:
        return cq.min_offset(self._min_position)

    def iter_messages(self, topic: str, queue_id: int, start: int = 0, stop: int | None = None,
                      *, tags=None, batch: int = 256) -> Iterator[Message]:
        """Messages with queue offsets in [start, stop) (stop=None: the max offset when the
        iteration starts). Offsets already deleted by retention are skipped."""
        with self._lock:
            self._check_open()
            cq = self._topic_for_read(topic, queue_id)
            if type(start) is not int or start < 0:
                raise InvalidArgumentError(f"start must be an int >= 0, got {start!r}")
            if stop is not None and (type(stop) is not int or stop < 0):
                raise InvalidArgumentError(f"stop must be an int >= 0 or None, got {stop!r}")
            self._dispatch()
            if stop is None:
                stop = cq.next_offset
        return self._iter(topic, queue_id, cq, start, stop, tags, batch)

    def _iter(self, topic, queue_id, cq, start, stop, tags, batch):
        pos = start
        while pos < stop:
            with self._lock:
                self._check_open()
                pos = max(pos, self._cq_min(cq))
                end = min(stop, cq.next_offset)
                if pos >= end:
                    return
                n = min(batch, end - pos) if tags is None else batch
                msgs = self.get(topic, queue_id, pos, n, tags=tags)
            if not msgs:
                return
            for m in msgs:
                off = m.queue_offset
                if off >= stop:
                    return
                yield m
            pos = msgs[-1].queue_offset + 1

    def min_offset(self, topic: str, queue_id: int) -> int:
        with self._lock:
            self._check_open()
            cq = self._topic_for_read(topic, queue_id)
            self._dispatch()
            return self._cq_min(cq)

    def max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last readable offset (the next offset a consumer waits for)."""
        with self._lock:
            self._check_open()
            cq = self._topic_for_read(topic, queue_id)
            self._dispatch()
            return cq.next_offset

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset whose store timestamp is >= timestamp_ms (binary search over the
        consume queue, reading each probe's store timestamp from its record); max_offset when
        every message is older. Store timestamps never decrease along the log."""
        if type(timestamp_ms) is not int:
            raise InvalidArgumentError(f"timestamp_ms must be an int, got {timestamp_ms!r}")
        with self._lock:
            self._check_open()
            cq = self._topic_for_read(topic, queue_id)
            self._dispatch()
            lo, hi = self._cq_min(cq), cq.next_offset
            while lo < hi:
                mid = (lo + hi) // 2
                e = cq.position_of(mid)
                if e is None:          # hole: treat as older than anything
                    lo = mid + 1
                    continue
                if self._segment_for(e[0]).store_timestamp_at(e[0]) < timestamp_ms:
                    lo = mid + 1
                else:
                    hi = mid
            return lo

    def consume_queue(self, topic: str, queue_id: int, offset: int):
        """Zero-copy read-only numpy view (fields position, size, tag_hash) of the dispatched
        consume-queue entries from `offset` to the end of the file holding it."""
        with self._lock:
            self._check_open()
            cq = self._topic_for_read(topic, queue_id)
            self._dispatch()
            if type(offset) is not int or not self._cq_min(cq) <= offset <= cq.next_offset:
                raise OffsetOutOfRangeError(f"offset {offset!r} outside the queue",
                                            self._cq_min(cq), cq.next_offset)
            return cq.view(offset, cq.next_offset)

    # ------------------------------------------------------------------ delay & retention
    def deliver_due(self, now_ms: int | None = None) -> int:
        """Move delayed messages whose time has come to their real topic -> count."""
        with self._lock:
            self._check_open()
            return self.schedule.deliver_due(self._clock_ms() if now_ms is None else now_ms)

    def run_retention(self, now_ms: int | None = None) -> int:
        """Apply the retention rules now -> number of commit-log segments deleted."""
        with self._lock:
            self._check_open()
            return self.retention.run(self._clock_ms() if now_ms is None else now_ms)

    def _after_segments_deleted(self):
        """Consume-queue files and min offsets follow the log's new min position."""
        self._min_position = self._log.min_position
        for start in [s for s in self._segviews if s < self._min_position]:
            del self._segviews[start]   # live Messages keep their mapping
        deleted = 0
        for t in self._topics.values():
            for cq in t.queues:
                deleted += cq.delete_files_before(self._min_position)
        self._stats["cq_files_deleted"] += deleted

    # ------------------------------------------------------------------ stats & lifecycle
    def stats(self) -> dict:
        with self._lock:
            self._check_open()
            s = dict(self._stats)
            lg = self._log
            s.update(topics=len([t for t in self._topics.values() if not t.system]),
                     queues=sum(len(t.queues) for t in self._topics.values()),
                     messages=int(sum(int(t.counters.sum()) for t in self._topics.values())),
                     dispatched_position=self._dispatched,
                     committed_position=lg.committed_position,
                     end_position=lg.end_position, min_position=lg.min_position,
                     flushed_position=lg.flushed_position, disk_full=self._disk_full,
                     disk_used_ratio=self._disk_ratio,
                     delayed_pending=self.schedule.pending(), log=lg.stats())
            return s

    def _start_timer(self):
        def loop():
            cfg = self.config
            next_ret = next_sched = next_cp = self._monotonic()
            while not self._stop_event.wait(min(cfg.schedule_interval_ms,
                                                cfg.retention_interval_ms) / 1000.0):
                now = self._monotonic()
                try:
                    with self._lock:
                        if self._closed:
                            return
                        # Replicated: only the leader may append; the Raft driver
                        # calls deliver_due() there.
                        if now >= next_sched and not self._replicated:
                            self.schedule.deliver_due(self._clock_ms())
                            next_sched = now + cfg.schedule_interval_ms / 1000.0
                        if now >= next_ret:
                            self.retention.run(self._clock_ms())
                            next_ret = now + cfg.retention_interval_ms / 1000.0
                        if now >= next_cp:
                            self._dispatch(checkpoint=True)
                            next_cp = now + cfg.dispatch_checkpoint_interval_ms / 1000.0
                except DiskFullError as exc:
                    log.warning("store %s: background task: %s", self._path, exc)
                except Exception:   # keep the timer alive; report
                    log.exception("store %s: background task failed", self._path)

        self._timer = threading.Thread(target=loop, name="quorumlog-store-timer", daemon=True)
        self._timer.start()

    def _stop_timer(self):
        self._stop_event.set()
        t = self._timer
        if t is not None and t is not threading.current_thread():
            t.join()
        self._timer = None

    def close(self) -> None:
        """Flush consume queues, save delay progress, close the log. Idempotent."""
        self._stop_timer()
        with self._lock:
            if self._closed:
                return
            try:
                self._dispatch()
                self._checkpoint_dispatch()
                self.schedule.save()
            finally:
                self._closed = True
                self._segviews.clear()
                self._log.close()

    def _crash(self) -> None:
        """Test hook: drop the store as kill -9 would (no flush, no checkpoint, no progress
        save); the page cache keeps what was written."""
        self._stop_timer()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._segviews.clear()
            self._log._crash()


def open(path, *, config_file=None, replicated: bool = False, clock_ms=None, monotonic=None,
         disk_usage=None, environ=None, **settings) -> MessageStore:  # noqa: A001
    """Open (creating if needed) the message store in directory `path`.

    Settings (see quorumlog.config.StoreConfig) come from `settings`, else QUORUMLOG_*
    environment variables, else the TOML `config_file`, else defaults. `clock_ms` (wall clock in
    ms), `monotonic` (seconds) and `disk_usage(path) -> used fraction` are injectable for tests;
    `replicated=True` leaves committing to a Raft driver (see the module docstring)."""
    cfg = load_config(config_file, environ, **settings)
    return MessageStore(path, cfg, replicated=replicated, clock_ms=clock_ms,
                        monotonic=monotonic, disk_usage=disk_usage)
