"""Writes: PutRequest (a validated put), queue choice, queue offsets, the one append path, and
the requests pending their commit.

Every data record enters the log through `Writer.append(term, request)`, called under the
store's lock: it resolves (or auto-creates) the topic, chooses the queues, assigns the queue
offsets from the topic's counters, calls CommitLog.append / append_batch once, advances the
counters only when the log accepted the batch (bad input changes nothing), and registers the
request as pending its commit. A single replica calls it with the store's term; a replicated
leader calls it through its Raft core (RaftCore.propose -> StoreRaftLog.append_as_leader) with
the core's term. `PendingRequests` then hands each request to the store's apply_committed once
its last index is committed; `complete` replies.
"""
from __future__ import annotations

import itertools
import logging
import threading
import warnings
import zlib
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .. import _consumequeue as _cq
from ..config import StoreConfig, parse_delay_levels
from ..errors import (BatchTooLargeError, InvalidArgumentError, InvalidDelayLevelError,
                      InvalidQueueError, InvalidTypeError, QueueTypeError)
from .dispatch import Dispatcher, OffsetCounter
from .nativelog import PER_MESSAGE
from .schedule import SCHEDULE_TOPIC, check_delay_properties, delayed_properties
from .topics import Topic, TopicRegistry

log = logging.getLogger(__name__)


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated; use {new} (units last, as everywhere)",
                  DeprecationWarning, stacklevel=3)


class PutResult(NamedTuple):
    index: int                # raft index of the record
    position: int             # log position of the record
    topic: str                # where it is stored (the schedule topic for a delayed message)
    queue_id: int
    queue_offset: int
    store_timestamp_ms: int   # ms since the epoch (Message.store_timestamp_ms of the record)

    @property
    def store_timestamp(self) -> int:
        """Deprecated alias of store_timestamp_ms."""
        _deprecated("PutResult.store_timestamp", "store_timestamp_ms")
        return self.store_timestamp_ms


class BatchResult:
    """put_batch's result: one entry per message as arrays (no Python object per message).
    Also a sequence of PutResult: len(r), r[i], iteration."""
    __slots__ = ("first_index", "positions", "topic", "queue_ids", "queue_offsets",
                 "store_timestamp_ms")

    def __init__(self, first_index, positions, topic, queue_ids, queue_offsets,
                 store_timestamp_ms):
        self.first_index = first_index          # raft index of the first message
        self.positions = positions              # int64 array
        self.topic = topic
        self.queue_ids = queue_ids              # int64 array
        self.queue_offsets = queue_offsets      # int64 array
        self.store_timestamp_ms = store_timestamp_ms  # ms since the epoch, one per batch

    @property
    def store_timestamp(self) -> int:
        """Deprecated alias of store_timestamp_ms."""
        _deprecated("BatchResult.store_timestamp", "store_timestamp_ms")
        return self.store_timestamp_ms

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
                         self.store_timestamp_ms)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return (f"BatchResult(first_index={self.first_index}, n={len(self)}, "
                f"topic={self.topic!r}, store_timestamp_ms={self.store_timestamp_ms})")


_WAITERS = threading.Lock()     # creation of a request's Event (two waiters, one Event)
_OK = object()                  # PutRequest._outcome of a request completed with its result


class PutRequest:
    """One put of `count` messages of one topic (`nbytes` body bytes), validated and not
    written yet: made by MessageStore.prepare_put for a Raft driver to propose (and inside
    the store by put, put_batch and the schedule service's deliveries).

    After the append (the store's one append path) it holds where the messages went:
    `target` (the topic written: the schedule topic for a delayed put), `first_index`,
    `last_index`, `store_timestamp_ms`, `position` (of the first record), `end_position` (after
    the last), and per message either `queue` + `first_offset` (a `single` request, put's one
    message: `positions`, `queue_ids`, `queue_offsets` stay None) or the int64 arrays
    `positions`, `queue_ids`, `queue_offsets`; `queue` is -1 when the messages went to
    several queues (`counters_after`: the topic's counters once the batch is in). `result`
    is the BatchResult.

    A request appended through a Raft core waits for its commit: MessageStore.apply_committed
    completes it once its last index is committed and dispatched (`on_done(result)` is called
    outside the store lock, `wait()` returns the result); MessageStore.abandon_pending, a Raft
    truncation of its entries or close() complete it with an exception instead (`on_done(exc)`,
    `wait()` raises it). put / put_batch return their results themselves."""

    __slots__ = ("owner", "topic", "bodies", "count", "nbytes", "queue_id", "tags", "keys",
                 "properties", "born", "single", "sharding_key", "explicit_queue_ids",
                 "delay_level", "flags", "on_done",
                 "target", "first_index", "last_index", "store_timestamp_ms", "position",
                 "end_position", "positions", "queue", "first_offset", "queue_ids",
                 "queue_offsets", "counters_after", "_result", "_outcome", "_event")

    def __init__(self, owner, topic, bodies, count, nbytes, queue_id=None, tags=None, keys=None,
                 properties=None, born=None, single=False):
        self.owner = owner                  # the Writer that may append it
        self.topic = topic
        self.bodies = bodies
        self.count = count
        self.nbytes = nbytes
        self.queue_id = queue_id
        # single (one message, CommitLog.append): tags str|None, keys tuple, properties
        # mapping|None, born int|None. Otherwise append_batch's forms: one value for all
        # messages or a list with one per message.
        self.tags = tags
        self.keys = keys
        self.properties = properties
        self.born = born
        self.single = single
        # sharding_key ... on_done: set after construction by the makers that use them;
        # first_index (0 until appended) ... counters_after: the append's outcome (see the
        # class docstring); _outcome: None until completed, then _OK or the exception.
        self.sharding_key = self.explicit_queue_ids = self.on_done = self.positions = \
            self.queue_ids = self.queue_offsets = self.counters_after = self._result = \
            self._outcome = self._event = None
        self.delay_level = self.flags = self.first_index = 0

    # -- outcome -----------------------------------------------------------------------------
    @property
    def store_timestamp(self) -> int:
        """Deprecated alias of store_timestamp_ms."""
        _deprecated("PutRequest.store_timestamp", "store_timestamp_ms")
        return self.store_timestamp_ms

    @property
    def appended(self) -> bool:
        return self.first_index > 0

    @property
    def done(self) -> bool:
        """Completed: committed and dispatched (result), or abandoned (exception)."""
        return self._outcome is not None

    @property
    def result(self) -> BatchResult | None:
        """Where the messages went (None until appended)."""
        if self._result is None and self.first_index:
            if self.positions is None:
                self._result = BatchResult(
                    self.first_index, np.array([self.position], dtype=np.int64),
                    self.target.name, np.array([self.queue], dtype=np.int64),
                    np.array([self.first_offset], dtype=np.int64), self.store_timestamp_ms)
            else:
                self._result = BatchResult(self.first_index, self.positions, self.target.name,
                                           self.queue_ids, self.queue_offsets,
                                           self.store_timestamp_ms)
        return self._result

    def wait(self, timeout: float | None = None) -> BatchResult:
        """Block until completed -> result; raises the exception it was completed with, or
        TimeoutError after `timeout` seconds."""
        if self._outcome is None:
            with _WAITERS:
                if self._event is None:
                    self._event = threading.Event()
                ev = self._event
            # complete() sets _outcome before it reads _event: either it sees our Event or
            # we see _outcome here.
            if self._outcome is None and not ev.wait(timeout):
                raise TimeoutError(f"put request not completed within {timeout} s")
        if self._outcome is not _OK:
            raise self._outcome
        return self.result

    def complete(self, error: BaseException | None = None) -> None:
        """Called by the store: done with the result (committed and dispatched), or with
        `error` (abandoned). Wakes waiters, then calls on_done; the store calls it without
        its lock held, so a callback may use the store."""
        self._outcome = _OK if error is None else error
        ev = self._event
        if ev is not None:
            ev.set()
        cb = self.on_done
        if cb is not None:
            try:
                cb(self.result if error is None else error)
            except Exception:     # one broken callback must not lose the other replies
                log.exception("on_done callback of %r failed", self)

    def __repr__(self):
        where = f" [{self.first_index}..{self.last_index}]" if self.first_index else ""
        done = " done" if self._outcome is not None else ""
        return f"<PutRequest {self.topic!r} x{self.count}{where}{done}>"


def complete(requests, error: BaseException | None = None) -> None:
    """Complete requests in order (see PutRequest.complete)."""
    for r in requests:
        r.complete(error)


class PendingRequests:
    """Appended requests waiting for their commit, in log order."""

    def __init__(self):
        self._queue: deque[PutRequest] = deque()

    def __len__(self):
        return len(self._queue)

    def add(self, req: PutRequest) -> None:
        self._queue.append(req)

    def take_upto(self, index: int) -> list[PutRequest]:
        """Every request whose last index <= index."""
        q = self._queue
        out = []
        while q and q[0].last_index <= index:
            out.append(q.popleft())
        return out

    def take_after(self, index: int) -> list[PutRequest]:
        """Every request with an entry after `index` (a truncation dropped them), in order."""
        q = self._queue
        out = []
        while q and q[-1].last_index > index:
            out.append(q.pop())
        out.reverse()
        return out

    def take_all(self) -> list[PutRequest]:
        out = list(self._queue)
        self._queue.clear()
        return out


def sharding_queue(key, nqueues: int) -> int:
    """Same key, same queue: CRC32 (zlib) of the key's bytes modulo the queue count."""
    if isinstance(key, str):
        key = key.encode()
    elif isinstance(key, int) and not isinstance(key, bool):
        key = str(key).encode()
    elif not isinstance(key, (bytes, bytearray, memoryview)):
        raise InvalidTypeError(f"sharding_key must be str, bytes or int, got "
                               f"{type(key).__name__}")
    return zlib.crc32(key) % nqueues


class Writer:
    """Requests in, records out: validation, queue choice, offsets, the one append path.
    Not thread-safe: `append` and friends are called under the store's lock."""

    def __init__(self, commitlog, topics: TopicRegistry, dispatcher: Dispatcher,
                 counter: OffsetCounter, config: StoreConfig,
                 clock_ms: Callable[[], int], *, replicated: bool):
        self.log = commitlog
        self.topics = topics
        self.dispatcher = dispatcher
        self.counter = counter
        self.config = config
        self.puts = 0                # counters for MessageStore.stats()
        self.messages_put = 0
        self._clock_ms = clock_ms
        self.replicated = replicated
        self.delay_levels = len(parse_delay_levels(config.delay_levels))
        self.pending = PendingRequests()
        # Appended requests wait in `pending` for apply_committed only on a store driven by a
        # Raft core (MessageStore.raft_log()). A single replica's put applies its own commit
        # before it returns; a replicated store committed by hand (CommitLog.commit +
        # dispatch()) has nobody to reply to. (The node sets no on_done: its pipeline's
        # tracker replies, node/pipeline.py; the list then only feeds Dispatcher.commit's
        # fast path, which places its own appends without re-reading them.)
        self.track_pending = False

    # -- validation --------------------------------------------------------------------------
    def batch_bodies(self, bodies) -> list | tuple:
        """A batch's bodies as a list or tuple: any iterable of bytes-like objects (a
        generator is read up to one past max_batch_messages, so an endless one is refused,
        not exhausted). A single bytes-like object or str is not a batch: InvalidTypeError."""
        if isinstance(bodies, (list, tuple)):
            return bodies
        if isinstance(bodies, (bytes, bytearray, memoryview, str)):
            raise InvalidTypeError(f"bodies must be an iterable of bytes-like objects, not one "
                                   f"{type(bodies).__name__} (use put() for one message)")
        try:
            it = iter(bodies)
        except TypeError:
            raise InvalidTypeError(f"bodies must be an iterable of bytes-like objects, got "
                                   f"{type(bodies).__name__}") from None
        out = list(itertools.islice(it, self.config.max_batch_messages + 1))
        if len(out) > self.config.max_batch_messages:
            raise BatchTooLargeError(f"more than max_batch_messages "
                                     f"{self.config.max_batch_messages} messages")
        return out

    def prepare(self, topic, bodies, *, queue_id=None, tags=None, keys=None, properties=None,
                delay_level=0, sharding_key=None, born_timestamps_ms=None, on_done=None,
                ) -> PutRequest:
        """Validate a put of many messages (limits, types, topic name, queue) -> PutRequest.
        Writes nothing; the log checks each record's own limits again at append."""
        cfg = self.config
        bodies = self.batch_bodies(bodies)
        n = len(bodies)
        if n == 0:
            raise InvalidArgumentError("empty batch: nothing to append")
        if n > cfg.max_batch_messages:
            raise BatchTooLargeError(f"{n} messages > max_batch_messages "
                                     f"{cfg.max_batch_messages}")
        try:
            total = _cq.body_bytes(bodies)
        except TypeError:
            raise InvalidTypeError("every body must be a bytes-like object") from None
        if total > cfg.max_batch_bytes and n > 1:   # one message: max_message_bytes rules
            raise BatchTooLargeError(f"{total} body bytes > max_batch_bytes {cfg.max_batch_bytes}")
        if type(delay_level) is not int:
            raise InvalidTypeError(f"delay_level must be an int, got {type(delay_level).__name__}")
        if not 0 <= delay_level <= self.delay_levels:
            raise InvalidDelayLevelError(
                f"delay_level {delay_level!r} outside [0, {self.delay_levels}]")
        if (tags is not None or keys is not None or properties is not None
                or sharding_key is not None or born_timestamps_ms is not None):
            for name, v in (("tags", tags), ("keys", keys), ("properties", properties),
                            ("sharding_key", sharding_key),
                            ("born_timestamps_ms", born_timestamps_ms)):
                if isinstance(v, PER_MESSAGE) and len(v) != n:
                    raise InvalidArgumentError(f"{name}: {len(v)} values for {n} messages")
        if delay_level:
            check_delay_properties(properties, n)
        if on_done is not None and not callable(on_done):
            raise InvalidArgumentError("on_done must be callable")
        t = self.topics.check_writable(topic)
        nq = len(t.queues) if t is not None else cfg.default_topic_queues
        if queue_id is not None:
            check_queue_id(queue_id, nq, topic)
            if sharding_key is not None:
                raise InvalidArgumentError("give queue_id or sharding_key, not both")
        req = PutRequest(self, topic, bodies, n, total, queue_id, tags, keys, properties,
                         born_timestamps_ms)
        if sharding_key is not None:
            req.sharding_key = sharding_key
        if delay_level:
            req.delay_level = delay_level
        if on_done is not None:
            req.on_done = on_done
        return req

    def prepare_delivery(self, topic, bodies, queue_ids, tags, keys, properties,
                         born_timestamps_ms, flags) -> PutRequest:
        """A schedule-service delivery: explicit queues, created at append if missing."""
        ids = np.asarray(queue_ids, dtype=np.int64)
        if len(ids) != len(bodies) or not len(ids) or int(ids.min()) < 0 or \
                int(ids.max()) >= self.config.max_queues_per_topic:
            raise InvalidArgumentError(f"delivery queue ids {queue_ids!r} outside "
                                       f"[0, {self.config.max_queues_per_topic})")
        req = PutRequest(self, topic, bodies, len(bodies), _cq.body_bytes(bodies), None, tags,
                         keys, properties, born_timestamps_ms)
        req.explicit_queue_ids = ids
        req.flags = flags
        return req

    # -- the one append path -----------------------------------------------------------------
    def append(self, term: int, req: PutRequest) -> int:
        """Append `req` with `term` -> its last raft index. The request's queues and offsets
        are chosen here, under the store lock, right before the one log call."""
        if getattr(req, "owner", None) is not self or req.first_index:
            raise InvalidArgumentError(
                f"{req!r} was appended already" if getattr(req, "owner", None) is self else
                f"{req!r} is not a PutRequest of this store (make it with "
                "MessageStore.prepare_put)")
        if self.replicated:
            self.counter.sync(self.dispatcher.position)
        t = self.topics.by_name.get(req.topic)
        created = False
        if t is None or t.system or req.explicit_queue_ids is not None:
            t, created = self._topic_for(req, t)
        lg = self.log
        try:
            next_rr = self._place(t, req)
            target, properties = t, req.properties
            if req.delay_level:
                target, properties = self._delay(t, req)
            if req.single:
                index, pos, ts = lg.append(
                    target.name, req.bodies[0], queue_id=req.queue,
                    queue_offset=req.first_offset, term=term, tags=req.tags, keys=req.keys,
                    properties=properties, born_timestamp_ms=req.born, flags=req.flags)
            else:
                one_queue = req.queue >= 0
                index, positions, ts = lg.append_batch(
                    target.name, req.bodies,
                    queue_ids=req.queue if one_queue else req.queue_ids,
                    queue_offsets=req.first_offset if one_queue else req.queue_offsets,
                    term=term, tags=req.tags, keys=req.keys, properties=properties,
                    born_timestamps_ms=req.born, flags=req.flags)
        except BaseException:
            if created and req.topic in self.topics.by_name and not t.counters.any():
                self.topics.drop(t)       # an auto-created topic of a rejected put
            raise
        # The log accepted the batch: now the request learns where it went, and the counters
        # and the round-robin cursor move (bad input changes nothing).
        n = req.count
        req.target = target
        req.first_index = index
        req.last_index = last = index + n - 1
        req.store_timestamp_ms = ts
        req.end_position = lg.end_position
        if req.single:
            req.position = pos
        else:
            req.positions = positions
            req.position = int(positions[0])
            if one_queue:
                # (empty + fill: two C calls; np.full is a Python function around them)
                req.queue_ids = ids = np.empty(n, dtype=np.int64)
                ids.fill(req.queue)
                req.queue_offsets = np.arange(req.first_offset, req.first_offset + n,
                                              dtype=np.int64)
        if req.queue >= 0:
            target.counters[req.queue] = req.first_offset + n
        else:
            target.counters = req.counters_after
        if next_rr is not None:
            t.rr = next_rr
        if self.replicated:
            self.counter.appended(index, last, term)
        self.puts += 1
        self.messages_put += n
        if self.track_pending:
            self.pending.add(req)
        return last

    def _topic_for(self, req: PutRequest, t: Topic | None) -> tuple[Topic, bool]:
        """The topic `req` writes to (`t`: the registered one of its name, if any), auto-created
        (True) when missing."""
        topics = self.topics
        dispatched = self.dispatcher.position
        ids = req.explicit_queue_ids
        if ids is not None:             # a delivery: its topic and queues must exist
            need = int(ids.max()) + 1
            if t is None:
                return topics.add(req.topic, max(self.config.default_topic_queues, need),
                                  False, self._clock_ms(), dispatched), True
            if need > len(t.queues):
                topics.extend(t, need, dispatched)
            return t, False
        if t is not None and not t.system:
            return t, False
        t = topics.check_writable(req.topic)   # raises for a system topic or a bad name
        return topics.add(req.topic, self.config.default_topic_queues, False, self._clock_ms(),
                          dispatched), True

    def _place(self, t: Topic, req: PutRequest) -> int | None:
        """Choose the queues of `req`'s messages in `t` and their offsets (into req.queue /
        first_offset, or queue_ids / queue_offsets and the counters after the batch) -> the
        round-robin cursor after the batch (None when the cursor does not move). Queue:
        `queue_id`, else the queue of `sharding_key` (same key -> same queue), else
        round-robin (RocketMQ's default MessageQueueSelector: an incrementing index)."""
        n = req.count
        nq = len(t.queues)
        next_rr = None
        queue_ids = None            # one queue id per message (int64), or None: all in `queue`
        if req.explicit_queue_ids is not None:
            queue_ids = req.explicit_queue_ids
        elif req.queue_id is not None:
            check_queue_id(req.queue_id, nq, t.name)
            if req.sharding_key is not None:
                raise InvalidArgumentError("give queue_id or sharding_key, not both")
            queue = req.queue_id
        elif req.sharding_key is not None:
            key = req.sharding_key
            if isinstance(key, list):
                queue_ids = np.fromiter((sharding_queue(k, nq) for k in key), dtype=np.int64,
                                        count=n)
            else:
                queue = sharding_queue(key, nq)
        else:
            queue = t.rr
            next_rr = (queue + n) % nq
            if n > 1 and nq > 1:
                req.queue = -1
                req.queue_ids, req.queue_offsets, req.counters_after = _cq.round_robin(
                    t.counters, queue, n)
                return next_rr
        if queue_ids is None:
            req.queue = queue
            req.first_offset = t.counters.item(queue)     # (a Python int, no numpy scalar)
        else:
            req.queue = -1
            req.queue_ids = queue_ids
            req.queue_offsets, req.counters_after = _cq.queue_offsets(t.counters, queue_ids)
        return next_rr

    def _delay(self, t: Topic, req: PutRequest):
        """A delayed put, placed in its real topic `t` already: stored under the schedule
        topic, queue level-1, with the real topic and queue in properties (RocketMQ
        CommitLog#putMessage); the schedule service delivers it. -> (schedule topic, the
        records' properties); the request's placement becomes the schedule queue's."""
        real = (req.queue_ids.tolist() if req.queue < 0 else [req.queue] * req.count)
        properties = delayed_properties(t.name, real, req.delay_level, req.properties)
        sched = self.topics.by_name.get(SCHEDULE_TOPIC)
        dispatched = self.dispatcher.position
        if sched is None:
            sched = self.topics.add(SCHEDULE_TOPIC, self.delay_levels, True, self._clock_ms(),
                                    dispatched)
        elif len(sched.queues) < self.delay_levels:
            self.topics.extend(sched, self.delay_levels, dispatched)
        q = req.delay_level - 1
        req.queue, req.first_offset = q, int(sched.counters[q])
        req.queue_ids = req.queue_offsets = req.counters_after = None
        return sched, properties

    # -- the other appends a Raft leader's log sees ------------------------------------------
    def append_control(self, term: int, rtype: int, data: bytes) -> int:
        """A NOOP / CONFIG record (no queue offset) -> its index."""
        index, _pos = self.log.append_control(rtype, data, term=term)
        if self.replicated:
            self.counter.appended(index, index, term)
        return index

    def truncate_after(self, index: int) -> list[PutRequest]:
        """Raft dropped the log's tail after `index` -> the pending requests it dropped. The
        counters start over (offsets of dropped records may be handed out again)."""
        self.log.truncate_after(index)
        if self.replicated:
            self.counter.recount(self.dispatcher.position)
        return self.pending.take_after(index)


def check_queue_id(queue_id, nqueues: int, topic) -> None:
    """queue_id must be an int (QueueTypeError, a TypeError) in [0, nqueues)."""
    if type(queue_id) is not int:
        raise QueueTypeError(f"queue_id must be an int, got {type(queue_id).__name__} "
                             f"{queue_id!r}")
    if not 0 <= queue_id < nqueues:
        raise InvalidQueueError(f"queue_id {queue_id!r} outside [0, {nqueues}) for topic "
                                f"{topic!r}")
