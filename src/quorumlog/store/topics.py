"""The topic registry: topics and their consume queues, <dir>/topics.json, the naming rule.

Topic metadata lives in <dir>/topics.json (written atomically: tmp + fsync + rename + fsync
dir), written before the first record of a new topic is appended. It is a cache, not the truth:
a record of a topic missing from it (the file was lost) registers the topic again at dispatch.

The topic-name rule is quorumlog.format.check_topic_name (one rule for the log, the reference
codec and the store); the store adds one reservation: SCHEDULE_TOPIC belongs to delay levels.
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np

from .._consumequeue import ConsumeQueue, fnv1a64
from ..config import StoreConfig
from ..errors import (InvalidArgumentError, InvalidQueueError, InvalidTopicError, QuorumlogError,
                      TopicNotFoundError)
from ..format import check_topic_name
from .files import atomic_write
from .schedule import SCHEDULE_TOPIC

TOPICS_FILE = "topics.json"


class Topic:
    """One topic: its consume queues and the next queue offset to hand out in each."""
    __slots__ = ("name", "hash", "queues", "counters", "rr", "system", "created_ms")

    def __init__(self, name: str, nqueues: int, system: bool, created_ms: int):
        self.name = name
        self.hash = fnv1a64(name.encode())      # the records' topic_hash (FNV-1a 64)
        self.queues: list[ConsumeQueue] = []
        self.counters = np.zeros(nqueues, dtype=np.int64)   # next queue offset to hand out
        self.rr = 0                                         # round-robin cursor
        self.system = system
        self.created_ms = created_ms


def check_user_topic(name) -> None:
    """The naming rule, plus the reservation of the delay levels' topic."""
    check_topic_name(name)
    if name == SCHEDULE_TOPIC:
        raise InvalidTopicError(f"{SCHEDULE_TOPIC} is reserved for delay levels")


class TopicRegistry:
    """Topics by name and by hash, their queues, and topics.json. Not thread-safe: the store
    calls it under its lock."""

    def __init__(self, root: str, config: StoreConfig):
        self.root = root
        self.config = config
        self.cq_root = os.path.join(root, "consumequeue")
        self.by_name: dict[str, Topic] = {}
        self.by_hash: dict[int, Topic] = {}
        # topic hash -> the topic's list of ConsumeQueue (what the Cython dispatch loop takes)
        self.queues_by_hash: dict[int, list] = {}
        # Replicated mode: next offsets implied by counted log records for (topic hash, queue)
        # pairs that have no queue here yet; adopted when the queue is created.
        self.unregistered: dict[tuple[int, int], int] = {}

    # -- loading and saving ------------------------------------------------------------------
    def load(self) -> bool:
        """Read topics.json and list each queue's files -> True when consume queues must be
        rebuilt from the log (the file or a queue directory is missing)."""
        meta_path = os.path.join(self.root, TOPICS_FILE)
        rebuild = not os.path.isdir(self.cq_root)
        try:
            with open(meta_path, "rb") as fh:
                meta = json.loads(fh.read())
            topics = meta["topics"]
        except FileNotFoundError:
            topics = {}
            rebuild = True      # no topic list: rebuild the queues (and the list) from the log
        except (ValueError, KeyError, TypeError) as exc:
            raise QuorumlogError(f"{meta_path} is damaged ({exc}); delete it to rebuild the "
                                 "topic list from the log") from None
        os.makedirs(self.cq_root, exist_ok=True)
        for name, info in topics.items():
            t = self._register(Topic(name, int(info["queues"]), bool(info.get("system", False)),
                                     int(info.get("created_ms", 0))))
            for cq in t.queues:
                if not cq.load():
                    rebuild = True
                    os.makedirs(cq.dir, exist_ok=True)
        return rebuild

    def save(self) -> None:
        meta = {"version": 1, "topics": {
            t.name: {"queues": len(t.queues), "system": t.system, "created_ms": t.created_ms}
            for t in self.by_name.values()}}
        atomic_write(os.path.join(self.root, TOPICS_FILE),
                     json.dumps(meta, indent=1, sort_keys=True).encode())

    # -- creating ----------------------------------------------------------------------------
    def _new_queue(self, t: Topic, q: int) -> ConsumeQueue:
        return ConsumeQueue(t.name, q, os.path.join(self.cq_root, t.name, str(q)),
                            self.config.consume_queue_file_entries)

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
        t = self._register(Topic(name, nqueues, system, created_ms))
        for q, cq in enumerate(t.queues):
            if cq.load():
                cq.recover(dispatched_position)
                t.counters[q] = cq.next_offset
            os.makedirs(cq.dir, exist_ok=True)
        self._adopt_unregistered(t, 0)
        self.save()
        return t

    def extend(self, t: Topic, nqueues: int, dispatched_position: int) -> None:
        """Give `t` more queues (never fewer) and save topics.json."""
        old = len(t.queues)
        for q in range(old, nqueues):
            cq = self._new_queue(t, q)
            os.makedirs(cq.dir, exist_ok=True)
            cq.load()
            cq.recover(dispatched_position)
            t.queues.append(cq)
        t.counters = np.concatenate([t.counters, np.array(
            [cq.next_offset for cq in t.queues[old:]], dtype=np.int64)])
        self._adopt_unregistered(t, old)
        self.queues_by_hash[t.hash] = t.queues
        self.save()

    def drop(self, t: Topic) -> None:
        """Undo the auto-creation of a topic whose first put was rejected (bad input changes
        nothing)."""
        self.by_name.pop(t.name, None)
        self.by_hash.pop(t.hash, None)
        self.queues_by_hash.pop(t.hash, None)
        shutil.rmtree(os.path.join(self.cq_root, t.name), ignore_errors=True)
        self.save()

    def create(self, name: str, nqueues, system: bool, created_ms: int,
               dispatched_position: int) -> Topic:
        """create_topic: new, or extended to `nqueues`; never shrunk."""
        if (not isinstance(nqueues, int) or isinstance(nqueues, bool)
                or not 1 <= nqueues <= self.config.max_queues_per_topic):
            raise InvalidArgumentError(
                f"queues must be an int in [1, {self.config.max_queues_per_topic}], "
                f"got {nqueues!r}")
        t = self.by_name.get(name)
        if t is None:
            return self.add(name, nqueues, system, created_ms, dispatched_position)
        if nqueues < len(t.queues):
            raise InvalidArgumentError(f"topic {name!r} has {len(t.queues)} queues; "
                                       f"cannot shrink to {nqueues}")
        if nqueues > len(t.queues):
            self.extend(t, nqueues, dispatched_position)
        return t

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
                raise InvalidTopicError(f"topic must be a str, got {type(name).__name__}")
            raise TopicNotFoundError(name)
        if type(queue_id) is not int or not 0 <= queue_id < len(t.queues):
            raise InvalidQueueError(f"queue_id {queue_id!r} outside [0, {len(t.queues)}) "
                                    f"for topic {name!r}")
        return t.queues[queue_id]

    def user_topics(self) -> dict[str, int]:
        return {t.name: len(t.queues) for t in self.by_name.values() if not t.system}

    def all(self):
        return self.by_name.values()
