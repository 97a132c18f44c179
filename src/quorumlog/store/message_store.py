"""MessageStore, the facade a broker embeds (lock, lifecycle, timer, public API), and open().

The work is done by the package's parts (see quorumlog/store/__init__.py for the map and the
commit seam): writes.Writer appends, dispatch.Dispatcher fills the consume queues,
reads.SegmentReader reads, topics.TopicRegistry keeps topics; the schedule service and
retention see the store through services.StoreServices, implemented here by `Services`.

Thread safety: every public method takes the store's lock; the optional background thread
(retention, delay delivery, consume-queue flush) takes it too. In replicated mode the thread
does not deliver delayed messages (that appends; only the leader may): the driver calls
deliver_due() on the leader. Request callbacks (on_done) run without the lock.
"""
from __future__ import annotations

import builtins
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np

from .. import _consumequeue as _cq
from .._consumequeue import Message
from ..config import StoreConfig, load_config
from ..errors import (DiskFullError, DrivenStoreError, IndexOutOfRangeError,
                      InvalidArgumentError, InvalidTypeError, LogClosedError, NotAStoreError,
                      OffsetOutOfRangeError, QuorumlogError, ReadOnlyError,
                      TooManyWaitersError)
from ..raft.errors import NotLeaderError
from .nativeinstall import complete_install, finish_head_drop
from .dispatch import Dispatcher, OffsetCounter, TagHashes
from ..format import TYPE_META as META
from ..format import check_topic_name
from .installmeta import INSTALL_DERIVED, install_meta, write_install_meta
from .keyindex import KeyIndex
from .offsets import ConsumerOffsets, encode_commit
from .raftlog import StoreRaftLog
from .reads import SegmentReader, tag_filter
from .retention import Retention, default_disk_usage
from .schedule import ScheduleService
from .topics import TopicRegistry, check_user_topic
from .writes import BatchResult, PutRequest, PutResult, Writer, check_queue_id, complete

_new_tuple = tuple.__new__
# log bytes the timer thread indexes by key per turn, holding the store's lock (a turn is
# every schedule_interval_ms at most: 4 MiB per 100 ms outruns any put rate of this store)
_KEYS_PER_TURN_BYTES = 4 << 20

log = logging.getLogger(__name__)


class Services:
    """StoreServices (services.py) over the store's parts: what the schedule service and
    retention may use."""

    def __init__(self, config: StoreConfig, path: str, commitlog, replicated: bool,
                 topics: TopicRegistry, dispatcher: Dispatcher, reader: SegmentReader,
                 writer: Writer, read_queue: Callable, segments_deleted: Callable[[int], None]):
        self.config = config
        self.path = path
        self.commitlog = commitlog
        self.replicated = replicated
        self.topics = topics
        self.dispatcher = dispatcher
        self.reader = reader
        self.writer = writer
        self.read_queue = read_queue
        self.segments_deleted = segments_deleted

    @property
    def dispatched_position(self) -> int:
        return self.dispatcher.position

    def checkpoint_dispatch(self) -> None:
        # With the timer thread's checkpoints (background) the log's durable dispatched
        # position is at most one interval old, and retention deletes only below it: no
        # checkpoint here, whose msyncs and fsyncs would run under the store's lock (every
        # retention run while the disk is past disk_clean_ratio)
        if not self.dispatcher.background:
            self.dispatcher.checkpoint()

    def queue_count(self, topic: str) -> int:
        t = self.topics.by_name.get(topic)
        return 0 if t is None else len(t.queues)

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        cq = self.topics.queue(topic, queue_id)
        return self.reader.min_offset(cq), cq.next_offset

    def queue_position(self, topic: str, queue_id: int, offset: int) -> int | None:
        e = self.topics.queue(topic, queue_id).position_of(offset)
        return None if e is None else e[0]

    def prepare_delivery(self, topic, bodies, queue_ids, tags, keys, properties,
                         born_timestamps_ms, flags) -> PutRequest:
        return self.writer.prepare_delivery(topic, bodies, queue_ids, tags, keys, properties,
                                            born_timestamps_ms, flags)


class MessageStore:
    """See quorumlog/store/__init__.py. Create with quorumlog.open()."""

    def __init__(self, path, config: StoreConfig, *, replicated: bool = False,
                 clock_ms=None, monotonic=None, disk_usage=None, commitlog_factory=None,
                 read_only: bool = False):
        from ..commitlog import CommitLog  # the native log; imported late for a clear error

        self._path = os.fspath(path)
        self.config = config
        self._replicated = bool(replicated)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._monotonic = monotonic or time.monotonic
        self._lock = threading.RLock()
        # long-poll get(): readers wait here for dispatch to move (notified by the dispatcher
        # under the lock, only while someone waits)
        self._arrived = threading.Condition(self._lock)
        self._waiters = 0
        self._closed = True
        self._gets = self._messages_got = self._cq_files_deleted = 0   # for stats()
        self._raft_log: StoreRaftLog | None = None
        self._timer = None
        self._stop_event = threading.Event()
        # the timer sleeps on this: set by stop, and by a commit while the timer naps
        self._timer_wake = threading.Event()
        self._timer_napping = False
        self._timer_turns = 0
        self._read_only = bool(read_only)
        if not self._read_only:
            os.makedirs(self._path, exist_ok=True)
        self._factory = commitlog_factory or CommitLog
        self._disk_usage = disk_usage
        if not self._read_only:
            # an install of a leader's log that a crash cut short: finish it (or drop an
            # unfinished one) before the log opens (quorumlog.store.nativeinstall)
            complete_install(self._path, INSTALL_DERIVED, write_install_meta)
        self._log = self._open_log()
        if not self._read_only:
            finish_head_drop(self._log)   # a retention a crash cut short after its head
        self._build(self._log)
        if config.background and not self._read_only:
            self._start_timer()

    def _open_log(self):
        extra = {"read_only": True} if self._read_only else {}
        c = self.config
        return self._factory(
            self._path, segment_size_bytes=c.segment_size_bytes,
            index_file_entries=c.index_file_entries, flush=c.flush,
            flush_interval_ms=c.flush_interval_ms,
            checkpoint_interval_ms=c.checkpoint_interval_ms,
            max_message_bytes=c.max_message_bytes, recycle_segments=c.recycle_segments,
            **extra)

    def _build(self, lg) -> None:
        """The store's parts over the open log `lg`: topics, consume queues (recovered, or
        rebuilt from the log), consumer offsets, key index, writer, retention, delay levels.
        On failure the log is closed and the store stays closed."""
        config = self.config
        disk_usage = self._disk_usage
        try:
            self._term = max(lg.last_term, 1)
            self._sync_flush = lg.flush_mode == "sync"
            self._closed = False
            self._topics = TopicRegistry(self._path, config, self._read_only)
            rebuild = self._topics.load()
            # Dispatch's slow path goes through self._dispatch_slow, so a test can make it
            # fail as a consume-queue file that cannot be preallocated does.
            self._dispatcher = Dispatcher(lg, self._topics, config, self._monotonic,
                                          self._clock_ms, TagHashes(),
                                          slow_path=lambda *rec: self._dispatch_slow(*rec))
            self._dispatcher.on_advance = self._wake_readers
            # the timer thread checkpoints (outside the lock): never the put/commit path
            self._dispatcher.background = bool(config.background) and not self._read_only
            self._offsets = ConsumerOffsets(self._path, config.max_consumer_offsets,
                                            self._read_only)
            self._offsets.load()
            # META records below where dispatch restarts but past the offsets file
            self._offsets.catch_up(lg, max(min(lg.dispatched_position, lg.end_position),
                                           lg.min_position))
            self._dispatcher.meta_sink = lambda info: self._offsets.apply_records(lg, info)
            self._dispatcher.before_checkpoint = self._before_checkpoint
            self._keys = None
            counter = OffsetCounter(lg, self._topics, config.max_queues_per_topic)
            self._dispatcher.recover(rebuild, self._replicated, counter)
            self._reader = SegmentReader(self._path, lg.segment_size_bytes, lg.min_position,
                                         lambda: self._dispatcher.position,
                                         self._dispatcher.rebuild_topic)
            if config.key_index:
                self._keys = KeyIndex(self._path, lg, self._reader.segment_for,
                                      slots=config.key_index_slots,
                                      capacity=config.key_index_file_entries,
                                      read_only=self._read_only)
                self._keys.load()
            self._writer = Writer(lg, self._topics, self._dispatcher, counter, config,
                                  self._clock_ms, replicated=self._replicated)
            services = Services(config, self._path, lg, self._replicated, self._topics,
                                self._dispatcher, self._reader, self._writer, self.get,
                                self._segments_deleted)
            self.retention = Retention(services, disk_usage or default_disk_usage,
                                       self._monotonic)
            self.schedule = ScheduleService(services)
            self.retention.check_disk(force=True)
        except BaseException:
            self._closed = True
            lg.close()
            raise

    # ------------------------------------------------------------------ properties
    @property
    def path(self) -> str:
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def read_only(self) -> bool:
        """Opened with read_only=True: reads only; no lock, nothing written to the directory
        (dispatch of records the owner has not dispatched yet happens in memory)."""
        return self._read_only

    @property
    def commitlog(self):
        """The underlying CommitLog (for tools, and a Raft driver's reads)."""
        return self._log

    @property
    def commit_limit(self) -> int:
        """Dispatch (and so every read) stops here: the log's committed position."""
        return self._log.committed_position

    @property
    def term(self) -> int:
        """Raft term written into records put without a Raft core (1 for a single replica).
        Settable for a replicated store written without a driver; a driven store follows its
        core's term. Never decreases."""
        return self._term

    @term.setter
    def term(self, value: int) -> None:
        if type(value) is not int or value < self._term:
            raise InvalidArgumentError(f"term must be an int >= {self._term}, got {value!r}")
        with self._lock:
            self._term = value

    @property
    def dispatched_position(self) -> int:
        return self._dispatcher.position

    @property
    def disk_full(self) -> bool:
        return self.retention.disk_full

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<MessageStore {self._path!r}{' closed' if self._closed else ''}>"

    def _check_open(self):
        if self._closed:
            raise LogClosedError(f"store {self._path} is closed")

    def _check_writable(self):
        self._check_open()
        if self._read_only:
            raise ReadOnlyError(f"store {self._path} was opened read-only")

    # ------------------------------------------------------------------ topics
    def create_topic(self, name: str, queues: int = 8) -> None:
        """Create `name` with `queues` queues (RocketMQ's default is 8). Creating an existing
        topic with the same queue count is a no-op; more queues extend it; fewer is an error."""
        check_user_topic(name)
        with self._lock:
            self._check_writable()
            self._topics.create(name, queues, False, self._clock_ms(), self._dispatcher.position)

    def stage_topic(self, name: str, queues: int) -> bool:
        """Replicated leader: topic `name`, new, named by a META record not committed yet ->
        True if staged (in memory until create_topic confirms it at the record's commit, or
        unstage_topic drops it at its truncation); False if the topic exists already (nothing
        done). topics.TopicRegistry.stage says why."""
        check_user_topic(name)
        if type(queues) is not int or not 1 <= queues <= self.config.max_queues_per_topic:
            raise InvalidArgumentError(f"queues must be an int in [1, "
                                       f"{self.config.max_queues_per_topic}], got {queues!r}")
        with self._lock:
            self._check_writable()
            if name in self._topics.by_name:
                return False
            self._topics.stage(name, queues, self._clock_ms(), self._dispatcher.position)
            return True

    def unstage_topic(self, name: str) -> bool:
        """Drop a staged topic whose META record a truncation took -> True if dropped."""
        with self._lock:
            self._check_open()
            return self._topics.unstage(name)

    def topics(self) -> dict[str, int]:
        """{topic: number of queues} of the user topics."""
        with self._lock:
            self._check_open()
            return self._topics.user_topics()

    def queue_count(self, topic: str) -> int:
        """The number of queues of user topic `topic` (0: no such user topic). One lookup,
        no copy of the topic table (the replica's produce path asks it per request)."""
        with self._lock:
            self._check_open()
            t = self._topics.by_name.get(topic)
            return 0 if t is None or t.system else len(t.queues)

    # ------------------------------------------------------------------ writes
    def put(self, topic: str, body, *, queue_id: int | None = None, tags: str | None = None,
            keys: Iterable[str] = (), properties: Mapping[str, str] | None = None,
            delay_level: int = 0, sharding_key=None,
            born_timestamp_ms: int | None = None) -> PutResult:
        """Append one message; returns where it went. Queue: `queue_id`, else the queue of
        `sharding_key` (same key -> same queue), else round-robin."""
        if delay_level or type(body) is not bytes or isinstance(keys, str):
            req = self._put_request(topic, body, queue_id, tags, keys, properties,
                                    delay_level, born_timestamp_ms)
        else:
            # One message: CommitLog.append and one consume-queue entry, no arrays; the topic,
            # the queue and the log's own limits are checked by the append path.
            req = PutRequest(self._writer, topic, (body,), 1, len(body), queue_id, tags,
                             tuple(keys) if keys else (), properties, born_timestamp_ms, True)
        if sharding_key is not None:
            req.sharding_key = sharding_key
        self._submit(req)
        if req.positions is None:
            # (tuple.__new__: the NamedTuple's own __new__ is a Python call; a hot path)
            return _new_tuple(PutResult, (req.first_index, req.position, req.target.name,
                                          req.queue, req.first_offset, req.store_timestamp_ms))
        return req.result[0]

    def _put_request(self, topic, body, queue_id, tags, keys, properties, delay_level,
                     born_timestamp_ms) -> PutRequest:
        """put's request when it is not the plain one: a delayed message (validated as a
        batch of one), keys given as one str, a body that is not bytes."""
        if isinstance(keys, str):
            keys = (keys,)
        if delay_level:
            return self._writer.prepare(
                topic, (body,), queue_id=queue_id, tags=tags,
                keys=[tuple(keys)] if keys else None,
                properties=None if properties is None else [properties],
                delay_level=delay_level,
                born_timestamps_ms=None if born_timestamp_ms is None else [born_timestamp_ms])
        try:
            nbytes = _cq.body_bytes((body,))
        except TypeError:
            raise InvalidTypeError(f"body must be a bytes-like object, got "
                                   f"{type(body).__name__}") from None
        return PutRequest(self._writer, topic, (body,), 1, nbytes, queue_id, tags,
                          tuple(keys) if keys else (), properties, born_timestamp_ms, True)

    def put_batch(self, topic: str, bodies, *, queue_id: int | None = None, tags=None,
                  keys=None, properties=None, delay_level: int = 0, sharding_key=None,
                  born_timestamps_ms=None) -> BatchResult:
        """Append many messages of one topic in one native call. `tags`, `keys`, `properties`
        and `sharding_key` are one value for all messages or a list with one per message; with
        neither `queue_id` nor `sharding_key`, consecutive messages go round-robin.

        `bodies` is any iterable of bytes-like objects (a list, a tuple, a generator; at most
        max_batch_messages). An empty batch is a no-op: nothing is written (not even an
        auto-created topic) and the result has no entries."""
        bodies = self._writer.batch_bodies(bodies)
        if not bodies:
            return self._empty_batch(topic, queue_id)
        req = self._writer.prepare(topic, bodies, queue_id=queue_id, tags=tags, keys=keys,
                                   properties=properties, delay_level=delay_level,
                                   sharding_key=sharding_key,
                                   born_timestamps_ms=born_timestamps_ms)
        self._submit(req)
        return req.result

    def _empty_batch(self, topic, queue_id) -> BatchResult:
        """put_batch of nothing: the arguments are checked as for any put, nothing is
        written; first_index is the index the next record would get."""
        with self._lock:
            self._check_writable()
            t = self._topics.check_writable(topic)
            if queue_id is not None:
                check_queue_id(queue_id, len(t.queues) if t is not None
                               else self.config.default_topic_queues, topic)
            empty = np.zeros(0, dtype=np.int64)
            return BatchResult(self._log.last_index + 1, empty, topic, empty, empty.copy(),
                               self._clock_ms())

    def _submit(self, req: PutRequest) -> None:
        """Append `req` with the store's term (put, put_batch, deliveries of a store without a
        Raft core). A single replica then applies its own commit: async flush mode at once;
        sync mode after the flush covering the batch, waited for *outside* the lock so that
        one flush covers every producer waiting meanwhile (group commit)."""
        with self._lock:
            if self._closed or self._read_only:
                self._check_writable()          # (raises the error that says which)
            if self._raft_log is not None:
                raise DrivenStoreError(
                    f"store {self._path} is written through its Raft core: propose "
                    "store.prepare_put(...) with RaftCore.propose instead of put()")
            self.retention.check_writes()
            last = self._writer.append(self._term, req)
            if self._replicated:
                return          # committed by whoever runs Raft (commitlog.commit + dispatch)
            if not self._sync_flush:
                self._dispatcher.commit(last, (req,))
                return
        if not self._log.wait_flushed(req.end_position):
            raise QuorumlogError(f"store {self._path}: flush up to {req.end_position} did "
                                 "not complete")
        with self._lock:
            if self._closed:
                raise LogClosedError(f"store {self._path} closed while waiting for a flush; "
                                     "the batch was flushed but not dispatched before close")
            self._dispatcher.commit(last, (req,))

    def prepare_put(self, topic: str, bodies, *, queue_id: int | None = None, tags=None,
                    keys=None, properties=None, delay_level: int = 0, sharding_key=None,
                    born_timestamps_ms=None, on_done=None) -> PutRequest:
        """Validate a put of `bodies` (the arguments as for put_batch) -> a PutRequest, for a
        Raft driver to propose: core.propose(req, req.count, req.nbytes). Writes nothing.
        `on_done(result_or_exception)` is called once the request completes (see
        apply_committed / abandon_pending)."""
        with self._lock:
            self._check_writable()
            return self._writer.prepare(topic, bodies, queue_id=queue_id, tags=tags, keys=keys,
                                        properties=properties, delay_level=delay_level,
                                        sharding_key=sharding_key,
                                        born_timestamps_ms=born_timestamps_ms, on_done=on_done)

    # ------------------------------------------------------------------ the Raft seam
    def raft_log(self) -> StoreRaftLog:
        """The RaftLog for this replica's Raft core (replicated stores only; the same object
        on every call). From the first call on, the log is written only through the core:
        put / put_batch raise DrivenStoreError, deliver_due needs `propose`."""
        with self._lock:
            self._check_writable()
            if not self._replicated:
                raise InvalidArgumentError("raft_log(): the store was opened with "
                                           "replicated=False (a single replica commits its "
                                           "own appends)")
            if self._raft_log is None:
                self._writer.track_pending = True
                self._raft_log = StoreRaftLog(self._log, append_request=self._append_request,
                                              append_control=self._append_control,
                                              truncate_after=self._truncate_after,
                                              install_meta=self._install_meta,
                                              replace_log=self._replace_log,
                                              max_install_bytes=self.config.max_install_bytes)
            return self._raft_log

    def _append_request(self, term: int, req: PutRequest) -> int:
        """The leader's append (StoreRaftLog.append_as_leader): the one append path."""
        with self._lock:
            self._check_open()
            self.retention.check_writes()
            last = self._writer.append(term, req)
            if term > self._term:
                self._term = term
            return last

    def _append_control(self, term: int, rtype: int, data: bytes) -> int:
        with self._lock:
            self._check_open()
            index = self._writer.append_control(term, rtype, data)
            if term > self._term:
                self._term = term
            return index

    def _truncate_after(self, index: int) -> None:
        """Raft dropped the log's tail: the queue counters start over, and every pending
        request with an entry after `index` fails (its entries were never committed)."""
        with self._lock:
            self._check_open()
            dropped = self._writer.truncate_after(index)
        complete(dropped, NotLeaderError(
            f"entries after index {index} were truncated (a newer leader's log replaced "
            "them): the put was not committed"))

    def _install_meta(self) -> dict:
        """Leader: the store state an install image carries (installmeta.py)."""
        with self._lock:
            self._check_open()
            return install_meta(self._topics, self._offsets)

    def _replace_log(self):
        """Follower (StoreRaftLog.finish_install, after the staged image was committed in
        install/READY): close the log and the store's parts, let the installed log replace
        the old one's files (nativeinstall.complete_install: crash-safe, finished at the next
        open if cut short), open it and rebuild the derived state from it (consume queues,
        topics and consumer offsets from the leader's state) -> the new CommitLog. Pending
        requests fail: their entries were replaced."""
        with self._lock:
            self._check_writable()
            pending = self._writer.pending.take_all()
            self._closed = True
            self._arrived.notify_all()
            if self._keys is not None:
                self._keys.close()
            self._reader.close()
            self._log.close()
            complete_install(self._path, INSTALL_DERIVED, write_install_meta)
            self._log = self._open_log()
            self._build(self._log)
            self._writer.track_pending = self._raft_log is not None
        complete(pending, NotLeaderError("the log was replaced by an install of the leader's "
                                         "log: the put was not committed here"))
        return self._log

    def apply_committed(self, index: int) -> int:
        """Entries up to raft index `index` are committed: commit the log up to it, dispatch
        the committed records into the consume queues, then complete every pending request
        whose last index <= index (on_done(result) / wait() returns, outside the lock: a
        get() there sees the messages). Returns the raft index dispatched up to, what the
        driver passes to RaftCore.on_dispatched. A dispatch stalled by a full disk does not
        hold replies back (the records are committed); it resumes on the next call."""
        if type(index) is not int or index < 0:
            raise InvalidArgumentError(f"index must be an int >= 0, got {index!r}")
        with self._lock:
            self._check_writable()
            if index > self._log.last_index:
                raise IndexOutOfRangeError(f"apply_committed({index}): the log ends at "
                                           f"{self._log.last_index}")
            if index < self._log.first_index:
                # below an installed log's first entry: committed, and in the state the
                # install brought; nothing of this log to commit
                return index
            done = self._writer.pending.take_upto(index)
            self._dispatcher.commit(index, done)
            upto = self._dispatcher.dispatched_index()
        if self._timer_napping:
            # the log moves again: back to the timer's period at once (key index, checkpoint)
            self._timer_napping = False
            self._timer_wake.set()
        complete(done)
        return upto

    def abandon_pending(self, exc: BaseException) -> int:
        """Complete every pending request with `exc` (a leader that lost leadership: whether
        its entries will commit is unknown to it) -> number of requests."""
        if not isinstance(exc, BaseException):
            raise InvalidArgumentError(f"abandon_pending needs an exception, got {exc!r}")
        with self._lock:
            reqs = self._writer.pending.take_all()
        complete(reqs, exc)
        return len(reqs)

    def dispatch(self) -> int:
        """Dispatch committed records into the consume queues (for a driver that commits
        through commitlog.commit itself). Returns the dispatched position."""
        with self._lock:
            self._check_open()
            self._dispatcher.dispatch()
            return self._dispatcher.position

    def flush(self) -> int:
        """Make everything put so far durable (log and consume queues) -> flushed position."""
        with self._lock:
            self._check_writable()
            pos = self._log.flush()
            self._dispatcher.checkpoint()
            return pos

    # ------------------------------------------------------------------ consumer offsets
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, *,
                      propose=None) -> None:
        """Store that consumer group `group` has consumed (topic, queue_id) up to `offset`
        (the next offset it will read), as RocketMQ's consumerOffset. See commit_offsets."""
        self.commit_offsets(group, [(topic, queue_id, offset)], propose=propose)

    def commit_offsets(self, group: str, offsets, *, propose=None) -> None:
        """Store several offsets of `group` at once: `offsets` is a mapping {(topic, queue):
        offset} or an iterable of (topic, queue, offset); one log record (at most 64
        offsets). The commit is a META record appended through the store's one append path
        and applied when it is committed and dispatched, so it is as durable as a message
        put in the store's flush mode, and replicates with the log.

        Single replica: applied (committed_offset shows it) when this returns. A store
        written through its Raft core: `propose(payload)` must propose the META payload
        through the core (the node wraps it in its META request); without it
        DrivenStoreError. Replicated without a core: appended with `store.term`, applied
        once whoever commits dispatches it."""
        items = offsets.items() if isinstance(offsets, Mapping) else offsets
        rows = [(t, q, o) for (t, q), o in items] if isinstance(offsets, Mapping) \
            else list(items)
        payload = encode_commit(group, rows)
        with self._lock:
            self._check_writable()
            if self._raft_log is not None:
                if propose is None:
                    raise DrivenStoreError(
                        f"store {self._path} is written through its Raft core: pass "
                        "propose= to commit offsets as a META record through the core")
                submit = propose
            elif propose is not None:
                raise InvalidArgumentError("commit_offsets: propose is for a store written "
                                           "through its Raft core (raft_log())")
            else:
                submit = None
                index = self._writer.append_control(self._term, META, payload)
                if self._replicated:
                    return
                if not self._sync_flush:
                    self._dispatcher.commit(index, ())
                    return
                end = self._log.end_position
        if submit is not None:
            submit(payload)
            return
        if not self._log.wait_flushed(end):
            raise QuorumlogError(f"store {self._path}: flush up to {end} did not complete")
        with self._lock:
            self._check_open()
            self._dispatcher.commit(index, ())

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The offset `group` last committed for (topic, queue_id); None when it never did."""
        with self._lock:
            self._check_open()
            self._dispatcher.dispatch()
            return self._offsets.get(group, topic, queue_id)

    def consumer_offsets(self, group: str | None = None) -> dict:
        """{group: {topic: {queue: offset}}}, or {topic: {queue: offset}} of one group."""
        with self._lock:
            self._check_open()
            self._dispatcher.dispatch()
            return self._offsets.as_dict(group)

    # ------------------------------------------------------------------ key index
    def find_by_key(self, topic: str, key: str, max_hits: int | None = None, *,
                    begin_ms=None, end_ms=None) -> list[Message]:
        """Messages of `topic` whose keys include `key` (RocketMQ's queryMessage by key),
        newest first, at most `max_hits` (<= max_key_hits; default 32 or max_key_hits when
        that is smaller), optionally only those with
        begin_ms <= store_timestamp_ms < end_ms. Committed messages only; served by the key
        index (keyindex/, derived from the log and rebuilt from it)."""
        check_topic_name(topic)
        if not isinstance(key, str):
            raise InvalidTypeError(f"key must be a str, got {type(key).__name__}")
        if not 1 <= len(key.encode()) <= 65535:
            raise InvalidArgumentError("key must be 1..65535 bytes of UTF-8")
        if max_hits is None:
            max_hits = min(32, self.config.max_key_hits)
        if type(max_hits) is not int:
            raise InvalidTypeError(f"max_hits must be an int, got {max_hits!r}")
        if not 1 <= max_hits <= self.config.max_key_hits:
            raise InvalidArgumentError(f"max_hits must be in [1, {self.config.max_key_hits}]")
        for name, v in (("begin_ms", begin_ms), ("end_ms", end_ms)):
            if v is not None and type(v) is not int:
                raise InvalidTypeError(f"{name} must be an int or None, got {v!r}")
        with self._lock:
            self._check_open()
            if self._keys is None:
                raise InvalidArgumentError("find_by_key: the store was opened with "
                                           "key_index=False")
            self._dispatcher.dispatch()
            self._keys.catch_up(self._dispatcher.position)
            return self._keys.find(topic, key, max_hits, begin_ms, end_ms)

    def _before_checkpoint(self, position: int) -> None:
        """Derived state saved with each consume-queue checkpoint."""
        self._offsets.save(position)
        if self._keys is not None:
            self._keys.checkpoint()

    # ------------------------------------------------------------------ reads
    def _wake_readers(self) -> None:
        if self._waiters:
            self._arrived.notify_all()

    def get(self, topic: str, queue_id: int, offset: int, max_messages: int = 32, *,
            tags=None, wait_ms: int = 0) -> list[Message]:
        """Up to `max_messages` messages of (topic, queue) from queue offset `offset`.

        [] when offset == max_offset (caught up); OffsetOutOfRangeError outside
        [min_offset, max_offset]. With `tags` (a str or a collection of str), only messages
        with one of those tags are returned; the scan goes on past non-matching entries until
        max_messages match or the queue ends.

        Long poll: with `wait_ms` > 0 (at most max_get_wait_ms), a get that finds nothing
        waits up to that long for messages to be dispatched into the queue and returns as
        soon as there are some ([] on timeout). At most max_get_waiters gets wait at once
        (TooManyWaitersError beyond); close() wakes them with LogClosedError."""
        if wait_ms:
            if type(wait_ms) is not int:
                raise InvalidTypeError(f"wait_ms must be an int, got {wait_ms!r}")
            if not 0 <= wait_ms <= self.config.max_get_wait_ms:
                raise InvalidArgumentError(f"wait_ms must be in [0, "
                                           f"{self.config.max_get_wait_ms}]")
        out = self._get(topic, queue_id, offset, max_messages, tags)
        if out or not wait_ms:
            return out
        deadline = time.monotonic() + wait_ms / 1000.0      # a real wait: the real clock
        with self._lock:
            if self._waiters >= self.config.max_get_waiters:
                raise TooManyWaitersError(f"{self._waiters} gets already wait (max_get_waiters)")
            self._waiters += 1
            try:
                while not out:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._arrived.wait(remaining)
                    out = self._get(topic, queue_id, offset, max_messages, tags)
            finally:
                self._waiters -= 1
        return out

    def _get(self, topic, queue_id, offset, max_messages, tags) -> list[Message]:
        with self._lock:
            if self._closed:
                raise LogClosedError(f"store {self._path} is closed")
            cq = self._topics.queue(topic, queue_id)
            if type(max_messages) is not int:
                raise InvalidTypeError(f"max_messages must be an int, got {max_messages!r}")
            if not 1 <= max_messages <= self.config.max_get_messages:
                raise InvalidArgumentError(f"max_messages must be in [1, "
                                           f"{self.config.max_get_messages}]")
            if type(offset) is not int:
                raise InvalidTypeError(f"offset must be an int, got {offset!r}")
            dispatcher = self._dispatcher
            if dispatcher.position < self._log.committed_position:
                dispatcher.dispatch()
            out = self._reader.read(cq, offset, max_messages, tags, self._tag_filter)
            self._gets += 1
            self._messages_got += len(out)
            return out

    def _tag_filter(self, tags):
        """get's tag filter (a method of its own so a test can fake a hash collision)."""
        return tag_filter(tags)

    def iter_messages(self, topic: str, queue_id: int, start: int = 0, stop: int | None = None,
                      *, tags=None, batch: int = 256) -> Iterator[Message]:
        """Messages with queue offsets in [start, stop) (stop=None: the max offset when the
        iteration starts). Offsets already deleted by retention are skipped."""
        with self._lock:
            self._check_open()
            cq = self._topics.queue(topic, queue_id)
            if type(start) is not int or (stop is not None and type(stop) is not int):
                raise InvalidTypeError(f"start and stop must be ints, got {start!r}, {stop!r}")
            if start < 0 or (stop is not None and stop < 0):
                raise InvalidArgumentError(f"start and stop must be >= 0, got {start!r}, "
                                           f"{stop!r}")
            self._dispatcher.dispatch()
            if stop is None:
                stop = cq.next_offset
        return self._iter(topic, queue_id, cq, start, stop, tags, batch)

    def _iter(self, topic, queue_id, cq, start, stop, tags, batch):
        pos = start
        while pos < stop:
            with self._lock:
                self._check_open()
                pos = max(pos, self._reader.min_offset(cq))
                end = min(stop, cq.next_offset)
                if pos >= end:
                    return
                n = min(batch, end - pos) if tags is None else batch
                msgs = self.get(topic, queue_id, pos, n, tags=tags)
            if not msgs:
                return
            for m in msgs:
                if m.queue_offset >= stop:
                    return
                yield m
            pos = msgs[-1].queue_offset + 1

    def _dispatched_queue(self, topic, queue_id):
        """A read's consume queue, after dispatching what is committed (with the lock)."""
        self._check_open()
        cq = self._topics.queue(topic, queue_id)
        self._dispatcher.dispatch()
        return cq

    def min_offset(self, topic: str, queue_id: int) -> int:
        with self._lock:
            return self._reader.min_offset(self._dispatched_queue(topic, queue_id))

    def max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last readable offset (the next offset a consumer waits for)."""
        with self._lock:
            return self._dispatched_queue(topic, queue_id).next_offset

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset whose store timestamp is >= timestamp_ms; max_offset when every
        message is older. Store timestamps never decrease along the log."""
        if type(timestamp_ms) is not int:
            raise InvalidTypeError(f"timestamp_ms must be an int, got {timestamp_ms!r}")
        with self._lock:
            return self._reader.offset_for_timestamp(
                self._dispatched_queue(topic, queue_id), timestamp_ms)

    def consume_queue(self, topic: str, queue_id: int, offset: int):
        """Zero-copy read-only numpy view (fields position, size, tag_hash) of the dispatched
        consume-queue entries from `offset` to the end of the file holding it."""
        with self._lock:
            cq = self._dispatched_queue(topic, queue_id)
            lo = self._reader.min_offset(cq)
            if type(offset) is not int or not lo <= offset <= cq.next_offset:
                raise OffsetOutOfRangeError(f"offset {offset!r} outside the queue", lo,
                                            cq.next_offset)
            return cq.view(offset, cq.next_offset)

    # ------------------------------------------------------------------ delay & retention
    def deliver_due(self, now_ms: int | None = None, *, propose=None) -> int:
        """Move delayed messages whose time has come to their real topic -> count. On a
        Raft-driven store (raft_log() taken) each delivery batch is a PutRequest that
        `propose(request)` must append through the core, e.g.
        `propose=lambda r: core.propose(r, r.count, r.nbytes)` (leader only)."""
        with self._lock:
            self._check_writable()
            if self._raft_log is None:
                if propose is not None:
                    raise InvalidArgumentError("deliver_due: propose is for a store written "
                                               "through its Raft core (raft_log())")
                submit = self._submit
            elif propose is None:
                raise InvalidArgumentError("deliver_due: this store is written through its "
                                           "Raft core; pass propose=")
            else:
                submit = propose
            return self.schedule.deliver_due(self._clock_ms() if now_ms is None else now_ms,
                                             submit)

    def run_retention(self, now_ms: int | None = None) -> int:
        """Apply the retention rules now -> number of commit-log segments deleted."""
        with self._lock:
            self._check_writable()
            return self.retention.run(self._clock_ms() if now_ms is None else now_ms)

    def _segments_deleted(self, count: int) -> None:
        """Consume-queue files, min offsets and read mappings follow the log's new min
        position."""
        min_position = self._log.min_position
        if self._keys is not None:
            self._keys.drop_deleted(min_position)
        self._reader.segments_deleted(min_position)
        self._cq_files_deleted += self._dispatcher.segments_deleted(min_position)

    def _dispatch_slow(self, pos, size, qid, qoff, tag_hash, topic_hash) -> None:
        """Dispatch's slow path for one record (Dispatcher.place_slow)."""
        self._dispatcher.place_slow(pos, size, qid, qoff, tag_hash, topic_hash)

    # ------------------------------------------------------------------ stats & lifecycle
    def stats(self) -> dict:
        """Counters since this open, and the current state (disk use measured now)."""
        with self._lock:
            self._check_open()
            self.retention.check_disk()
            lg = self._log
            topics = self._topics.all()
            d, w, r = self._dispatcher, self._writer, self.retention
            out = dict(puts=w.puts, messages_put=w.messages_put, gets=self._gets,
                       messages_got=self._messages_got, dispatched_records=d.dispatched_records,
                       rebuilt=d.rebuilt, segments_deleted=r.segments_deleted,
                       cq_files_deleted=self._cq_files_deleted, disk_full_rejects=r.rejects,
                       dispatch_stalls=d.stalls, dispatch_conflicts=d.conflicts,
                       dispatch_rejected=d.rejected, delay_rejected=self.schedule.rejected,
                       queue_rebuilds=d.queue_rebuilds, rebuild_skipped=d.rebuild_skipped,
                       dispatch_durable_failed=d.durable_failed,
                       topics=len([t for t in topics if not t.system]),
                       queues=sum(len(t.queues) for t in topics),
                       messages=int(sum(int(t.counters.sum()) for t in topics)),
                       dispatched_position=self._dispatcher.position,
                       committed_position=lg.committed_position,
                       end_position=lg.end_position, min_position=lg.min_position,
                       flushed_position=lg.flushed_position, disk_full=r.disk_full,
                       disk_used_ratio=r.disk_ratio,
                       pending_requests=len(self._writer.pending),
                       consumer_offsets=len(self._offsets.table),
                       offset_commits_applied=self._offsets.applied,
                       offset_commits_rejected=self._offsets.rejected,
                       delayed_pending=self.schedule.pending(),
                       timer_turns=self._timer_turns, log=lg.stats())
            return out

    def _start_timer(self):
        self._timer = threading.Thread(target=self._timer_loop, name="quorumlog-store-timer",
                                       daemon=True)
        self._timer.start()

    def _timer_loop(self):
        cfg = self.config
        next_ret = next_sched = next_cp = self._monotonic()
        period = min(cfg.schedule_interval_ms, cfg.retention_interval_ms) / 1000.0
        # replicated, while the log stands still: nothing to deliver, dispatch or index;
        # retention's turn is the only one due (64 idle groups of a process woke this
        # timer 640 times a second at period, 64 at a second)
        nap = max(period, cfg.retention_interval_ms / 1000.0)
        wait, seen = period, None
        while True:
            self._timer_wake.wait(wait)
            if self._stop_event.is_set():
                return
            self._timer_wake.clear()
            now = self._monotonic()
            self._timer_turns += 1
            try:
                with self._lock:
                    if self._closed:
                        return
                    if self._replicated:
                        # back off while the log stands still, up to nap; a commit
                        # (apply_committed) wakes a napping timer, and the turn after a
                        # change is back at period
                        end = self._log.end_position
                        wait = period if end != seen else min(nap, wait * 2)
                        seen = end
                        self._timer_napping = wait > period
                    # Replicated: only the leader may append; the Raft driver calls
                    # deliver_due() there.
                    if now >= next_sched and not self._replicated:
                        self.schedule.deliver_due(self._clock_ms(), self._submit)
                        next_sched = now + cfg.schedule_interval_ms / 1000.0
                    if now >= next_ret:
                        self.retention.run(self._clock_ms())
                        next_ret = now + cfg.retention_interval_ms / 1000.0
                    checkpoint = now >= next_cp
                    if self._keys is not None:    # behind dispatch, off the put path
                        self._dispatcher.dispatch()
                        # a bounded stretch per turn: after a restart the key index may be
                        # the whole log behind, and every put waits for this lock
                        keys, upto = self._keys, self._dispatcher.position
                        before = keys.position
                        keys.catch_up(min(upto, before + _KEYS_PER_TURN_BYTES))
                        if keys.position == before:     # one record larger than the stretch
                            keys.catch_up(upto)
                    if checkpoint:
                        next_cp = now + cfg.dispatch_checkpoint_interval_ms / 1000.0
                    dispatcher = self._dispatcher
                if checkpoint:
                    # its msyncs and fsyncs without the lock: puts and commits go on
                    dispatcher.checkpoint_unlocked(self._lock)
            except DiskFullError as exc:
                log.warning("store %s: background task: %s", self._path, exc)
            except Exception:   # keep the timer alive; report
                log.exception("store %s: background task failed", self._path)

    def _stop_timer(self):
        self._stop_event.set()
        self._timer_wake.set()
        t = self._timer
        if t is not None and t is not threading.current_thread():
            t.join()
        self._timer = None

    def close(self) -> None:
        """Flush consume queues, save delay progress, close the log. Idempotent. Requests
        still pending their commit fail with LogClosedError."""
        if self._log.inherited:
            # A child forked while the store was open: the store, its files and threads are
            # the parent's. Let go without a dispatch, checkpoint, progress save or thread
            # join (and without the store lock, which a parent thread may have held at fork).
            self._closed = True
            self._log.close()
            return
        self._stop_timer()
        with self._lock:
            if self._closed:
                return
            try:
                if not self._read_only:
                    self._dispatcher.dispatch()
                    self._dispatcher.checkpoint()
                    self.schedule.save()
            finally:
                self._closed = True
                self._arrived.notify_all()       # long-poll gets raise LogClosedError
                if self._keys is not None:
                    self._keys.close()
                self._reader.close()
                self._log.close()
                pending = self._writer.pending.take_all()
        complete(pending, LogClosedError(f"store {self._path} closed before the put was "
                                         "committed"))

    def crash_for_testing(self) -> None:
        """Test hook: drop the store as kill -9 would (no flush, no checkpoint, no progress
        save); the page cache keeps what was written."""
        self._stop_timer()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._reader.close()
            self._log.crash_for_testing()      # the native log's own kill -9 test hook


# What a store directory may hold (format.md "Directory layout", the store layer's files and
# a replica's). A directory holding anything else is not a store and is never made into one.
STORE_ENTRIES = frozenset({
    "LOCK", "abort", "checkpoint", "checkpoint.tmp", "commitlog", "index", "consumequeue",
    "topics.json", "topics.json.tmp", "delay_offsets.json", "delay_offsets.json.tmp",
    "consumer_offsets.json", "consumer_offsets.json.tmp", "keyindex", "raft-state",
    "raft-state.tmp", "queue_offsets.json", "queue_offsets.json.tmp",
    "install", "log_head.json", "log_head.json.tmp"})
REPAIR_DIR_PREFIX = "repair-"     # what `quorumlog repair` removed (quorumlog.repair)


def _stored_geometry(path: str) -> dict:
    """segment_size_bytes / index_file_entries recorded in an existing store's checkpoint
    (the defaults of a reopen: an explicit different segment size is still an error)."""
    from ..format import decode_checkpoint
    f = os.path.join(path, "checkpoint")
    try:
        with builtins.open(f, "rb") as fh:
            data = fh.read(4096)
    except FileNotFoundError:
        return {}
    cp = decode_checkpoint(data, f)      # CorruptLogError names the file
    return {"segment_size_bytes": cp.segment_size_bytes,
            "index_file_entries": cp.index_file_entries}


def _classify(path: str, create_if_missing: bool, read_only: bool) -> str:
    """'store' (open it), 'new' (create a store in an empty or missing directory), or
    NotAStoreError: a regular file, a missing or empty directory when creating is not asked
    for, a directory holding files that are not a store's."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotAStoreError(f"not a quorumlog store: {path} (not a directory)")
    entries = set(os.listdir(path)) if os.path.isdir(path) else None
    if entries:
        foreign = sorted(e for e in entries - STORE_ENTRIES
                         if not e.startswith(REPAIR_DIR_PREFIX))
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise NotAStoreError(f"not a quorumlog store: {path} holds other files ({shown}); "
                                 "refusing to turn it into a store")
        if read_only and "checkpoint" not in entries and "commitlog" not in entries:
            raise NotAStoreError(f"not a quorumlog store: {path} (no checkpoint, no commitlog/)")
        return "store"
    what = "no such directory" if entries is None else "empty directory"
    if read_only:
        raise NotAStoreError(f"not a quorumlog store: {path} ({what}; read_only=True opens "
                             "an existing store only)")
    if not create_if_missing:
        raise NotAStoreError(f"not a quorumlog store: {path} ({what}; pass "
                             "create_if_missing=True to create one)")
    return "new"


def _undo_open(path: str, before: set | None) -> None:
    """A failed open leaves the directory as it found it: what it created goes again (the
    whole directory when it did not exist, else the entries that were not there)."""
    try:
        if before is None:
            shutil.rmtree(path)
            return
        for name in set(os.listdir(path)) - before:
            p = os.path.join(path, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
    except OSError as exc:
        log.warning("store %s: could not remove what a failed open created: %s", path, exc)


def open(path, *, create_if_missing: bool = True, read_only: bool = False, config_file=None,
         replicated: bool = False, clock_ms=None, monotonic=None, disk_usage=None,
         environ=None, **settings) -> MessageStore:  # noqa: A001
    """Open the message store in directory `path` (as plyvel / lmdb open a database).

    - An existing store opens with the segment size and raft-index geometry it was created
      with (recorded in its checkpoint); only an explicit different segment_size_bytes is a
      ConfigError.
    - A missing or empty directory becomes a new store when `create_if_missing` (default);
      otherwise NotAStoreError. A regular file, or a directory holding files that are not a
      store's, is refused with NotAStoreError and left alone.
    - `read_only=True`: no lock, nothing written (not even the abort marker); works on a store
      another process has open and on read-only media. Writes raise ReadOnlyError.
    - A failed open (a damaged checkpoint, a full disk, ...) removes what it created.

    Settings (see quorumlog.config.StoreConfig, and its `profile`, e.g. profile="small") come
    from `settings`, else QUORUMLOG_* environment variables, else the TOML `config_file`,
    else the profile's or built-in defaults. `clock_ms` (wall clock in ms), `monotonic`
    (seconds) and `disk_usage(path) -> used fraction` are injectable for tests;
    `replicated=True` leaves committing to a Raft driver (see quorumlog/store/__init__.py)."""
    p = os.fspath(path)
    if not isinstance(p, str):
        p = os.fsdecode(p)
    kind = _classify(p, create_if_missing, read_only)
    cfg = load_config(config_file, environ,
                      defaults=_stored_geometry(p) if kind == "store" else None, **settings)
    existed = os.path.isdir(p)
    before = set(os.listdir(p)) if existed else None
    try:
        return MessageStore(p, cfg, replicated=replicated, clock_ms=clock_ms,
                            monotonic=monotonic, disk_usage=disk_usage, read_only=read_only)
    except BaseException:
        if not read_only:
            _undo_open(p, before)
        raise
