"""The topic registry: topics and their consume queues, <dir>/topics.json, the naming rule.

Topic metadata lives in <dir>/topics.json (written atomically: tmp + fsync + rename + fsync
dir, with its own checksum, files.write_checked_json), written before the first record of a new
topic is appended. It is a cache, not the truth: a file that is missing, damaged or not what
the format says (a queue count that is not an int in [1, max_queues_per_topic], ...) is not
used -- the topic list is rebuilt from queue_offsets.json, the queue directories and the log
(dispatch.Dispatcher.recover) -- and a record of a topic missing from it registers the topic
again at dispatch.

The topic-name rule is quorumlog.format.check_topic_name (one rule for the log, the reference
codec and the store); the store adds one reservation: SCHEDULE_TOPIC belongs to delay levels.
"""
from __future__ import annotations

import errno
import logging
import os
import shutil

import numpy as np

from .._consumequeue import ConsumeQueue, fnv1a64
from ..config import StoreConfig
from ..errors import (CorruptLogError, DiskFullError, InvalidArgumentError, InvalidQueueError,
                      InvalidTopicError, InvalidTypeError, QueueTypeError, StorageError,
                      TopicNotFoundError, TopicTypeError)
from ..format import check_topic_name
from .files import read_checked_json, write_checked_json
from .schedule import SCHEDULE_TOPIC

log = logging.getLogger(__name__)

TOPICS_FILE = "topics.json"


class Topic:
    """One topic: its consume queues and the next queue offset to hand out in each."""
    __slots__ = ("name", "hash", "queues", "counters", "rr", "system", "created_ms", "staged")

    def __init__(self, name: str, nqueues: int, system: bool, created_ms: int):
        self.name = name
        self.hash = fnv1a64(name.encode())      # the records' topic_hash (FNV-1a 64)
        self.queues: list[ConsumeQueue] = []
        self.counters = np.zeros(nqueues, dtype=np.int64)   # next queue offset to hand out
        self.rr = 0                                         # round-robin cursor
        self.system = system
        self.created_ms = created_ms
        # Replicated leader: created by a META record not committed yet (TopicRegistry.stage):
        # in memory only -- not in topics.json, the queue summary or an install image -- until
        # the record commits (create confirms it) or is truncated (unstage drops it).
        self.staged = False


def check_user_topic(name) -> None:
    """The naming rule, plus the reservation of the delay levels' topic."""
    check_topic_name(name)
    if name == SCHEDULE_TOPIC:
        raise InvalidTopicError(f"{SCHEDULE_TOPIC} is reserved for delay levels")


class TopicRegistry:
    """Topics by name and by hash, their queues, and topics.json. Not thread-safe: the store
    calls it under its lock."""

    def __init__(self, root: str, config: StoreConfig, read_only: bool = False):
        self.root = root
        self.config = config
        # read_only: nothing created, saved or removed; queues mapped copy-on-write (topics
        # found in the log are registered in memory only)
        self.read_only = read_only
        self.cq_root = os.path.join(root, "consumequeue")
        self.by_name: dict[str, Topic] = {}
        self.by_hash: dict[int, Topic] = {}
        # topic hash -> the topic's list of ConsumeQueue (what the Cython dispatch loop takes)
        self.queues_by_hash: dict[int, list] = {}
        # Replicated mode: next offsets implied by counted log records for (topic hash, queue)
        # pairs that have no queue here yet; adopted when the queue is created.
        self.unregistered: dict[tuple[int, int], int] = {}
        # topics whose queue files were found missing or damaged at load: rebuilt from the log
        self.damaged: set[str] = set()

    # -- loading and saving ------------------------------------------------------------------
    def load(self) -> bool:
        """Read topics.json and list each queue's files -> True when the topic list cannot be
        trusted (missing or damaged: the dispatcher rebuilds it). Queues whose directory is
        missing or whose files are damaged are put in `damaged` (rebuilt from the log)."""
        meta_path = os.path.join(self.root, TOPICS_FILE)
        try:
            topics = self._parse(read_checked_json(meta_path), meta_path)
        except CorruptLogError as exc:
            log.error("store %s: %s; the topic list is rebuilt from the log", self.root, exc)
            topics = None
        self._makedirs(self.cq_root)
        for name, (nqueues, system, created_ms) in (topics or {}).items():
            self._register(Topic(name, nqueues, system, created_ms))
        for t in self.by_name.values():
            self.load_queues(t, 0)
        return topics is None

    def _parse(self, meta, path) -> dict | None:
        """topics.json's object -> {name: (queues, system, created_ms)}; CorruptLogError for
        anything the format does not allow."""
        if meta is None:
            return None
        topics = meta.get("topics")
        if meta.get("version") != 1 or not isinstance(topics, dict):
            raise CorruptLogError(f"{path}: not a version-1 topic list", path, 0)
        out = {}
        maxq = self.config.max_queues_per_topic
        for name, info in topics.items():
            try:
                check_topic_name(name)
            except InvalidTopicError as exc:
                raise CorruptLogError(f"{path}: topic {name!r}: {exc}", path, 0) from None
            q = info.get("queues") if isinstance(info, dict) else None
            system = info.get("system", False) if isinstance(info, dict) else None
            created = info.get("created_ms", 0) if isinstance(info, dict) else None
            if (type(q) is not int or not 1 <= q <= maxq or type(system) is not bool
                    or system != (name == SCHEDULE_TOPIC) or type(created) is not int):
                raise CorruptLogError(f"{path}: topic {name!r} has a bad entry {info!r}",
                                      path, 0)
            out[name] = (q, system, created)
        hashes = {}
        for name in out:
            other = hashes.setdefault(fnv1a64(name.encode()), name)
            if other != name:
                raise CorruptLogError(f"{path}: topics {name!r} and {other!r} have one hash",
                                      path, 0)
        return out

    def load_queues(self, t: Topic, first_q: int) -> None:
        """List the files of t's queues from `first_q` on; a queue whose directory is missing
        or whose files are damaged puts the topic in `damaged`."""
        for cq in t.queues[first_q:]:
            try:
                if not cq.load():
                    self.damaged.add(t.name)
                    self._makedirs(cq.dir)
            except (CorruptLogError, StorageError, OSError) as exc:
                log.error("store %s: consume queue %s/%d: %s", self.root, t.name,
                          cq.queue_id, exc)
                self.damaged.add(t.name)

    def disk_queue_counts(self) -> dict[str, int]:
        """{topic: 1 + the highest queue id} of the queue directories under consumequeue/
        (what a lost topic list is rebuilt from, with the log)."""
        out = {}
        try:
            names = os.listdir(self.cq_root)
        except OSError:
            return out
        for name in names:
            try:
                check_topic_name(name)
                ids = [int(q) for q in os.listdir(os.path.join(self.cq_root, name))
                       if q.isdigit() and len(q) <= 6]
            except (InvalidTopicError, OSError):
                continue
            if ids:
                out[name] = min(max(ids) + 1, self.config.max_queues_per_topic)
        return out

    def adopt(self, name: str, nqueues: int, created_ms: int) -> Topic:
        """Recovery: make sure topic `name` exists with at least `nqueues` queues (registered
        from what the store's other files show), listing their files; not saved."""
        nqueues = min(nqueues, self.config.max_queues_per_topic)
        t = self.by_name.get(name)
        if t is None:
            t = self._register(Topic(name, nqueues, name == SCHEDULE_TOPIC, created_ms))
            self.load_queues(t, 0)
        elif nqueues > len(t.queues):
            old = len(t.queues)
            t.queues.extend(self._new_queue(t, q) for q in range(old, nqueues))
            t.counters = np.concatenate([t.counters, np.zeros(nqueues - old, dtype=np.int64)])
            self.queues_by_hash[t.hash] = t.queues
            self.load_queues(t, old)
        return t

    def _makedirs(self, d: str) -> None:
        if not self.read_only:
            _make_dirs(d)

    def save(self) -> None:
        if self.read_only:
            return
        meta = {"version": 1, "topics": {
            t.name: {"queues": len(t.queues), "system": t.system, "created_ms": t.created_ms}
            for t in self.durable()}}
        write_checked_json(os.path.join(self.root, TOPICS_FILE), meta)

    # -- creating ----------------------------------------------------------------------------
    def _new_queue(self, t: Topic, q: int) -> ConsumeQueue:
        return ConsumeQueue(t.name, q, os.path.join(self.cq_root, t.name, str(q)),
                            self.config.consume_queue_file_entries, read_only=self.read_only)

    def _register(self, t: Topic) -> Topic:
        other = self.by_hash.get(t.hash)
        if other is not None and other.name != t.name:
            raise InvalidTopicError(f"topic {t.name!r} collides with {other.name!r} "
                                    "(same FNV-1a 64 hash); choose another name")
        t.queues = [self._new_queue(t, q) for q in range(len(t.counters))]
        self.by_name[t.name] = t
        self.by_hash[t.hash] = t
        self.queues_by_hash[t.hash] = t.queues
        return t

    def add(self, name: str, nqueues: int, system: bool, created_ms: int,
            dispatched_position: int) -> Topic:
        """Register a new topic and save topics.json. Queue files already on disk (the metadata
        was lost) keep what the log confirms: entries below `dispatched_position`."""
        existed = os.path.isdir(os.path.join(self.cq_root, name))
        t = self._register(Topic(name, nqueues, system, created_ms))
        try:
            for q, cq in enumerate(t.queues):
                if cq.load():
                    cq.recover(dispatched_position)
                    t.counters[q] = cq.next_offset
                self._makedirs(cq.dir)
            self.save()
        except BaseException:
            self._unregister(t, remove_files=not existed)   # it could not be created
            raise
        self._adopt_unregistered(t, 0)
        return t

    def extend(self, t: Topic, nqueues: int, dispatched_position: int) -> None:
        """Give `t` more queues (never fewer) and save topics.json."""
        old = len(t.queues)
        added = []
        for q in range(old, nqueues):
            cq = self._new_queue(t, q)
            self._makedirs(cq.dir)
            cq.load()
            cq.recover(dispatched_position)
            added.append(cq)
        t.queues.extend(added)
        try:
            self.save()
        except BaseException:
            del t.queues[old:]        # the queues that could not be recorded are not there
            raise
        t.counters = np.concatenate([t.counters, np.array(
            [cq.next_offset for cq in added], dtype=np.int64)])
        self._adopt_unregistered(t, old)
        self.queues_by_hash[t.hash] = t.queues

    def drop(self, t: Topic) -> None:
        """Undo the auto-creation of a topic whose first put was rejected (bad input changes
        nothing)."""
        self._unregister(t)
        self.save()

    def _unregister(self, t: Topic, remove_files: bool = True) -> None:
        self.by_name.pop(t.name, None)
        self.by_hash.pop(t.hash, None)
        self.queues_by_hash.pop(t.hash, None)
        if remove_files and not self.read_only:
            shutil.rmtree(os.path.join(self.cq_root, t.name), ignore_errors=True)

    def create(self, name: str, nqueues, system: bool, created_ms: int,
               dispatched_position: int) -> Topic:
        """create_topic: new, or extended to `nqueues`; never shrunk."""
        if not isinstance(nqueues, int) or isinstance(nqueues, bool):
            raise InvalidTypeError(f"queues must be an int, got {type(nqueues).__name__}")
        if not 1 <= nqueues <= self.config.max_queues_per_topic:
            raise InvalidArgumentError(
                f"queues must be an int in [1, {self.config.max_queues_per_topic}], "
                f"got {nqueues!r}")
        t = self.by_name.get(name)
        if t is None:
            return self.add(name, nqueues, system, created_ms, dispatched_position)
        if t.staged:
            self._confirm(t)
        if nqueues < len(t.queues):
            raise InvalidArgumentError(f"topic {name!r} has {len(t.queues)} queues; "
                                       f"cannot shrink to {nqueues}")
        if nqueues > len(t.queues):
            self.extend(t, nqueues, dispatched_position)
        return t

    def stage(self, name: str, nqueues: int, created_ms: int,
              dispatched_position: int) -> Topic:
        """A replicated leader's new topic, named by a META record it is appending: registered
        in memory (its first messages need its queues) but not saved until the record commits
        (create() then confirms it), and dropped by unstage() if a truncation takes the record.
        Saved at once, a topic whose record was lost to a power loss or replaced by another
        leader's entries stayed on this replica alone (nodesim seeds 13546, 15370)."""
        t = self._register(Topic(name, nqueues, False, created_ms))
        t.staged = True
        for cq in t.queues:
            if cq.load():                     # (files left by an earlier incarnation)
                cq.recover(dispatched_position)
        t.counters = np.array([cq.next_offset for cq in t.queues], dtype=np.int64)
        self._adopt_unregistered(t, 0)
        return t

    def _confirm(self, t: Topic) -> None:
        """A staged topic's META record committed: its directories and topics.json."""
        for cq in t.queues:
            self._makedirs(cq.dir)
        t.staged = False
        try:
            self.save()
        except BaseException:
            t.staged = True
            raise

    def unstage(self, name: str) -> bool:
        """Drop topic `name` if it is still staged (its META record was truncated) -> True if
        dropped. Its queues hold nothing: no record after an uncommitted one was dispatched."""
        t = self.by_name.get(name)
        if t is None or not t.staged:
            return False
        self._unregister(t, remove_files=False)
        return True

    def durable(self) -> list[Topic]:
        """The topics that are not staged: what topics.json, the queue summary and an install
        image describe."""
        return [t for t in self.by_name.values() if not t.staged]

    # -- replicated offsets of queues not created yet ----------------------------------------
    def note_unregistered(self, topic_hash: int, queue_id: int, next_offset: int) -> None:
        key = (topic_hash, queue_id)
        if next_offset > self.unregistered.get(key, 0):
            self.unregistered[key] = next_offset

    def _adopt_unregistered(self, t: Topic, first_q: int) -> None:
        """Queues created after their records were counted adopt those records' offsets."""
        if self.unregistered:
            for q in range(first_q, len(t.counters)):
                nxt = self.unregistered.pop((t.hash, q), 0)
                if nxt > t.counters[q]:
                    t.counters[q] = nxt

    # -- lookups -----------------------------------------------------------------------------
    def check_writable(self, name) -> Topic | None:
        """The topic a put may write to, or None when it would be auto-created (the name
        checked). System topics, bad names and unknown topics without auto-creation raise."""
        t = self.by_name.get(name)
        if t is not None:
            if t.system:
                raise InvalidTopicError(f"{name} is reserved for delay levels")
            return t
        check_user_topic(name)
        if not self.config.auto_create_topics:
            raise TopicNotFoundError(name)
        return None

    def queue(self, name, queue_id) -> ConsumeQueue:
        """The consume queue a read names; TopicNotFoundError / InvalidQueueError."""
        t = self.by_name.get(name)
        if t is None:
            if not isinstance(name, str):
                raise TopicTypeError(f"topic must be a str, got {type(name).__name__}")
            raise TopicNotFoundError(name)
        if type(queue_id) is not int:
            raise QueueTypeError(f"queue_id must be an int, got {type(queue_id).__name__} "
                                 f"{queue_id!r}")
        if not 0 <= queue_id < len(t.queues):
            raise InvalidQueueError(f"queue_id {queue_id!r} outside [0, {len(t.queues)}) "
                                    f"for topic {name!r}")
        return t.queues[queue_id]

    def user_topics(self) -> dict[str, int]:
        return {t.name: len(t.queues) for t in self.by_name.values() if not t.system}

    def all(self):
        return self.by_name.values()


def _make_dirs(path: str) -> None:
    """os.makedirs, with an OS error as a quorumlog error naming the directory."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(exc.errno, f"no space to create {path}", path) from None
        raise StorageError(f"{path}: cannot create the directory: {exc.strerror or exc}",
                           path, exc.errno) from None
