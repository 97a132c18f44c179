"""The proposal pipeline of a node: every write a client asks of the leader -- a produce, a
topic's creation, a consumer-offset commit -- goes through here, and its completion is
tracked in one place, the `Tracker`.

Path of a produce: client -> ClientService -> Pipeline.put_batch_future (checks: leader,
topic name, reserved properties, producer arguments) -> [producer table: a retried batch is
answered from the log (node/producers.py); a new leader reads its log's window into the
table first] -> [coalescing: the small puts of one loop iteration with the same topic,
queue and tags become one proposal] -> Pipeline._propose (backpressure: max_pending_puts /
max_pending_bytes) -> core.propose -> the store's log. Completion: the Tracker holds every
proposal in flight, keyed by its last log index (what was proposed, its term, its future);
the driver calls `on_applied(index)` once entries up to `index` are committed, durable here
and applied, which completes each proposal whose entries are still of its term (its result:
the request's `result`), and `on_lost(exc)` when this node stops being the leader (or stops,
or fails), which fails every proposal in flight with `exc` (NotLeaderError: it may or may
not commit under the next leader; an idempotent producer retries safely). A truncation of a
leader's entries only follows its loss of the leadership, so on_lost has failed them by then;
the term check at apply is the guard that a replaced entry is never answered as committed.

The interface the driver (node/driver.py) uses: put_batch_future / create_topic /
commit_offsets (the node's write API), check_writable / not_leader, on_applied, on_lost,
close, pending_messages / pending_bytes. The client service passes put_batch_future a
SyncFuture (its answer, built as the put completes) and sets on_completing / on_completed
(called before and after on_applied completes proposals: it holds their answers' writes, then
writes them).
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque

import numpy as np

from ..commitlog import MESSAGE
from ..errors import InvalidArgumentError, LogClosedError, LogFailedError, TopicNotFoundError
from ..net.messages import LeaderRedirectError
from ..raft.errors import BackpressureError, NotLeaderError
from ..raft.messages import Role
from ..store.nativelog import PER_MESSAGE, RESERVED_PROPERTIES, producer_properties
from ..store.topics import check_user_topic
from ..store.writes import BatchResult
from . import meta
from .producers import (BatchMismatchError, KnownBatchError, ProducerTable,
                        UncompletableBatchError, table_for_term)

log = logging.getLogger(__name__)

__all__ = ["Pipeline", "SyncFuture", "Tracker"]

_COALESCIBLE = frozenset(("queue_id", "tags", "properties"))
_COALESCE_BELOW_MESSAGES = 64        # bigger puts are batches already: proposed as they are
_COALESCE_MAX_MESSAGES = 4096        # per coalesced proposal (the core allows 8192)
_COALESCE_MAX_BYTES = 4 << 20        # (the core allows max_proposal_bytes, 16 MiB)
_PRODUCER_READ_STEP = 4096           # log entries read into a new leader's table per step
_MAX_TOPIC_NAMES_REMEMBERED = 4096


class _InFlight:
    __slots__ = ("req", "term", "last", "fut")

    def __init__(self, req, term: int, fut: asyncio.Future):
        self.req, self.term, self.last, self.fut = req, term, req.last_index, fut


class Tracker:
    """THE record of this leader's proposals in flight, in log order (keyed by last index):
    each one's request (its `result` is what a committed proposal answers), term and future,
    and the messages and bytes they hold (what backpressure counts). Proposals enter after
    core.propose appended them; they leave when applied (on_applied) or lost (fail_all)."""

    def __init__(self):
        self._q: deque[_InFlight] = deque()
        self.messages = 0
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._q)

    def add(self, req, term: int, fut: asyncio.Future) -> None:
        self._q.append(_InFlight(req, term, fut))
        self.messages += req.count
        self.bytes += req.nbytes

    def _pop(self) -> _InFlight:
        p = self._q.popleft()
        self.messages -= p.req.count
        self.bytes -= p.req.nbytes
        return p

    def on_applied(self, upto: int, term_at) -> None:
        """Entries up to `upto` are committed and applied: complete the proposals they end,
        each with its result if its last entry is still of its term (term_at(index) -> the
        log's term there), else with NotLeaderError (replaced by a newer leader's entry)."""
        q = self._q
        while q and q[0].last <= upto:
            p = q.popleft()           # (_pop, inline: once per proposal on every commit)
            self.messages -= p.req.count
            self.bytes -= p.req.nbytes
            if p.fut.done():
                continue
            if term_at(p.last) == p.term:
                p.fut.set_result(p.req.result)
            else:
                p.fut.set_exception(NotLeaderError(
                    f"entry {p.last} was replaced by a newer leader's: not committed"))

    def fail_after(self, index: int, exc: BaseException) -> None:
        """A truncation dropped the entries after `index`: their proposals fail with exc."""
        q = self._q
        dropped = []
        while q and q[-1].last > index:
            p = q.pop()
            self.messages -= p.req.count
            self.bytes -= p.req.nbytes
            dropped.append(p)
        for p in reversed(dropped):
            if not p.fut.done():
                p.fut.set_exception(exc)

    def fail_all(self, exc: BaseException) -> None:
        while self._q:
            p = self._pop()
            if not p.fut.done():
                p.fut.set_exception(exc)


class _Queued:
    __slots__ = ("topic", "queue_id", "tags", "bodies", "props", "fut", "batch", "pid", "table",
                 "lo", "hi")

    def __init__(self, topic, queue_id, tags, bodies, props, fut):
        self.topic, self.queue_id, self.tags = topic, queue_id, tags
        self.bodies, self.props, self.fut = bodies, props, fut
        self.batch = self.pid = self.table = None   # a producer batch reserved in `table`
        self.lo = self.hi = 0


def _relay(src: asyncio.Future, dst: asyncio.Future) -> None:
    """dst completes as src does."""
    def done(f):
        if dst.done():
            return
        if f.cancelled():
            dst.cancel()
        elif f.exception() is not None:
            dst.set_exception(f.exception())
        else:
            dst.set_result(f.result())
    src.add_done_callback(done)


def _split_result(f: asyncio.Future, items) -> None:
    """Hand each coalesced put its slice of the batch's result (or the batch's error)."""
    if f.cancelled():
        return
    e = f.exception()
    if e is not None:
        for it in items:
            if not it.fut.done():
                it.fut.set_exception(e)
        return
    r = f.result()
    for it in items:
        if not it.fut.done():
            lo, hi = it.lo, it.hi
            it.fut.set_result(BatchResult(r.first_index + lo, r.positions[lo:hi], r.topic,
                                          r.queue_ids[lo:hi], r.queue_offsets[lo:hi],
                                          r.store_timestamp_ms))


class SyncFuture(asyncio.Future):
    """A future that calls `fn(self, *args)` as it completes (result, exception or
    cancellation), in the completing call -- not from a done-callback a loop turn later.
    A coalesced proposal's future splits its result among its puts so (_split_result), and
    the client service answers a produce so: in the loop turn that applied it. That call is
    the node's apply: what fn raises is logged, never raised into it (a done-callback's
    error would have been the loop's to log)."""

    def __init__(self, fn, *args, loop):
        super().__init__(loop=loop)
        self._fn, self._args = fn, args

    def _act(self) -> None:
        try:
            self._fn(self, *self._args)
        except Exception:
            log.exception("completing a proposal's future failed")

    def set_result(self, result) -> None:
        super().set_result(result)
        try:                # (_act, inline: once per answered put)
            self._fn(self, *self._args)
        except Exception:
            log.exception("completing a proposal's future failed")

    def set_exception(self, exception) -> None:
        super().set_exception(exception)
        self._act()

    def cancel(self, msg=None) -> bool:
        if not super().cancel(msg):
            return False
        self._act()
        return True


class Pipeline:
    """The proposal pipeline of one node (see the module docstring). `node`: the driver
    (its core, seam, store, configs, loop, stats and wait_applied are read from it); `wake()`
    asks the driver to drain the core soon; `drain()` drains it now (None: wake() instead);
    `fail(exc)` stops the node (a log that refuses every write)."""

    def __init__(self, node, *, wake, fail, drain=None):
        self._node = node
        self._wake = wake
        self._drain = drain
        self._fail = fail
        self._proposing_queued = False    # in _propose_queued: it drains once at its end
        self.stats = node.stats
        self.tracker = Tracker()
        self._topic_names_ok: set = set()
        self._producers: ProducerTable | None = None    # the leader's (this term's) table
        self._producer_backlog: list = []   # producer puts waiting for the table, in arrival order
        self._backlog_task: asyncio.Task | None = None
        self._queued: list = []
        self._queued_pending = False
        # called before and after on_applied completes proposals (the client service holds
        # their acknowledgements' writes, then writes them, in this loop turn)
        self.on_completing = None
        self.on_completed = None

    # -- what the driver calls -------------------------------------------------------------
    @property
    def pending_messages(self) -> int:
        return self.tracker.messages

    @property
    def pending_bytes(self) -> int:
        return self.tracker.bytes

    def on_applied(self, upto: int) -> None:
        """The driver applied the log up to `upto`: complete the proposals it commits."""
        t = self.tracker
        if t._q:
            if self.on_completing is not None:
                self.on_completing()
            try:
                t.on_applied(upto, self._node.seam.raft_log().term_at)
            finally:
                if self.on_completed is not None:
                    self.on_completed()

    def on_lost(self, exc: BaseException) -> None:
        """Leadership lost (or the node failed): every proposal in flight fails with exc."""
        self.tracker.fail_all(exc)
        if self._node.seam is not None:
            self._node.seam.abandon_pending(exc)

    def on_truncated(self, index: int) -> None:
        """The log dropped its entries after `index` (a newer leader's replaced them)."""
        if len(self.tracker):
            self.tracker.fail_after(index, NotLeaderError(
                f"entries after index {index} were truncated (a newer leader's log replaced "
                "them): the put was not committed"))

    def on_log_replaced(self) -> None:
        """An install replaced the log: nothing in flight can commit from this log."""
        if len(self.tracker):
            self.tracker.fail_all(NotLeaderError("the log was replaced by an install of the "
                                                 "leader's log: the put was not committed here"))

    def close(self, exc: BaseException) -> None:
        """The node stops: the queued puts and every proposal in flight fail with exc."""
        queued, self._queued = self._queued, []
        for it in queued:
            if not it.fut.done():
                it.fut.set_exception(exc)
        self.on_lost(exc)

    # -- checks, backpressure, proposing ---------------------------------------------------
    def not_leader(self) -> NotLeaderError:
        node = self._node
        core = node.core
        lid = core.leader_id if core.leader_id != node.id else None
        addr = node.cfg.client_addrs.get(lid) if lid is not None else None
        return LeaderRedirectError(
            f"node {node.id} is not the leader (term {core.term}; leader "
            f"{lid or 'unknown'}{' at ' + addr if addr else ''})", lid, core.term, addr)

    def check_writable(self) -> None:
        node = self._node
        why = node.closed_reason
        if why is not None:
            raise LogClosedError(why)
        if node.core.role != Role.LEADER:
            raise self.not_leader()

    def _propose(self, req, track: bool = True,
                 fut: asyncio.Future | None = None) -> asyncio.Future | None:
        """Propose req (backpressure first) -> its future (`fut`, or a new one), kept by the
        tracker until the request is applied or lost; track=False: nobody waits (a topic's
        META before its first message), no future."""
        node = self._node
        core = node.core
        cfg = node.cfg
        t = self.tracker
        if t.messages + req.count > cfg.max_pending_puts:
            raise BackpressureError(
                f"node {node.id}: {t.messages} messages awaiting commit + {req.count} "
                f"> max_pending_puts={cfg.max_pending_puts}")
        if t.bytes + req.nbytes > cfg.max_pending_bytes:
            raise BackpressureError(
                f"node {node.id}: {t.bytes} bytes awaiting commit + {req.nbytes} > "
                f"max_pending_bytes={cfg.max_pending_bytes}")
        try:
            core.set_clock(node.clock.now_ms())   # (the node's ticks are sparse: driver.py)
            core.propose(req, req.count, req.nbytes)
        except LogFailedError as e:
            # async mode: the log's background flush failed and it refuses every write; a
            # failed flush is never retried into success, so this node stops (and another
            # leads) instead of staying a leader that can append nothing
            self._fail(e)
            raise
        if track:
            if fut is None:
                fut = node.loop.create_future()
            t.add(req, core.term, fut)
        self.stats["proposals"] += 1
        if not self._proposing_queued:
            self._wake()
        return fut

    def _ensure_topic(self, topic: str) -> None:
        """A topic this replica has never seen: replicate its creation (META) first."""
        if self._node.seam.has_topic(topic):
            return
        if not self._node.store_cfg.auto_create_topics:
            raise TopicNotFoundError(topic)
        self._propose(self._node.seam.prepare_meta(
            meta.encode_topic(topic, self._node.store_cfg.default_topic_queues)), track=False)

    async def create_topic(self, name: str, queues: int = 8) -> int:
        """Create (or extend) a topic on every replica; returns the META entry's index."""
        self.check_writable()
        if type(queues) is not int or not 1 <= queues <= self._node.store_cfg.max_queues_per_topic:
            raise InvalidArgumentError(f"queues must be an int in [1, "
                                       f"{self._node.store_cfg.max_queues_per_topic}]")
        self._check_topic(name)
        req = self._node.seam.prepare_meta(meta.encode_topic(name, queues))
        return await self.submit(req)

    def _check_topic(self, name) -> None:
        # a name that passed once passes again: remembered (a bounded set) so that the
        # produce path does not re-run the naming rule per request
        ok = self._topic_names_ok
        if type(name) is str and name in ok:
            return
        check_user_topic(name)
        if len(ok) >= _MAX_TOPIC_NAMES_REMEMBERED:
            ok.clear()
        ok.add(name)

    async def submit(self, req):
        """Propose a prepared request (the seam's prepare_put / prepare_meta) -> its result
        once applied here."""
        return await self._propose(req)

    async def put_batch(self, topic, bodies, *, producer_id: int = 0, sequence: int = 0,
                        base_sequence: int = 0, **kw):
        """Append a batch; returns once it is committed (and durable per the flush mode) and
        dispatched: BatchResult (PutResult for a one-message batch). With a producer id, a
        batch whose (producer_id, sequence) this leader already holds is not appended again:
        the original's result is returned -- after appending the messages the log misses if
        it holds only part of the batch; a batch whose predecessor this leader does not hold
        while the client has it in flight (base_sequence < sequence) raises
        OutOfOrderSequenceError (node/producers.py: the table this leader builds from its
        log when it first serves a producer batch of its term)."""
        return await asyncio.shield(self.put_batch_future(
            topic, bodies, producer_id=producer_id, sequence=sequence,
            base_sequence=base_sequence, **kw))

    def put_batch_future(self, topic, bodies, *, producer_id: int = 0, sequence: int = 0,
                         base_sequence: int = 0, future: asyncio.Future | None = None,
                         **kw) -> asyncio.Future:
        """put_batch without a coroutine: checks and proposes (or queues) now and returns the
        future of the result (shared: never cancel it). The client service's produce path:
        no task and no coroutine frames per request (a retried batch, and a put while a new
        leader still reads its log into the producer table, take a task). Bad input and a
        non-leader raise here. `future`: a future of the caller's (a subclass that acts in
        its set_result: the client service's reply) to complete instead of a new one, where
        the put takes the direct path (proposed or queued now); the caller tells by the
        future returned."""
        node = self._node
        if node.core.role != Role.LEADER or node.closed_reason is not None:
            self.check_writable()             # (raises the reason)
        if type(topic) is not str or topic not in self._topic_names_ok:
            self._check_topic(topic)
        props = kw.get("properties")
        if props is not None:
            ps = props if isinstance(props, list) else [props]
            for p in ps:
                if p and RESERVED_PROPERTIES.intersection(p):
                    raise InvalidArgumentError(f"properties {sorted(RESERVED_PROPERTIES)} are "
                                               "reserved")
        coalesce = (self._node.cfg.coalesce_puts and kw.keys() <= _COALESCIBLE
                    and isinstance(bodies, list) and 0 < len(bodies) < _COALESCE_BELOW_MESSAGES
                    and not isinstance(props, list))
        if producer_id:
            if type(producer_id) is not int or type(sequence) is not int or sequence < 0 \
                    or producer_id < 0 or type(base_sequence) is not int \
                    or not 0 <= base_sequence <= sequence:
                raise InvalidArgumentError("producer_id, sequence and base_sequence must be "
                                           "ints >= 0, base_sequence <= sequence")
            bodies = bodies if isinstance(bodies, list) else list(bodies)
            table = self._producers       # (this term's: _producer_table's usual case)
            if table is None or table.term != node.core.term:
                table = self._producer_table()
            seq = (producer_id, sequence, base_sequence)
            if table.pending or self._backlog_task is not None:
                # a new leader still reading its log's window into the table: wait in line
                return self._put_after_table_read((topic, bodies, kw, seq, coalesce))
            return self._put_producer_batch(table, topic, bodies, kw, seq, coalesce, future)
        if coalesce:
            return self._queue_put(topic, bodies, kw, None, 0, 0, future)
        return self._propose_put(topic, bodies, kw, future)[1]

    def _propose_put(self, topic, bodies, kw, future=None):
        self._ensure_topic(topic)
        req = self._node.seam.prepare_put(topic, bodies, **kw)
        fut = self._propose(req, fut=future)
        self.stats["messages_put"] += req.count
        return req, fut

    def _put_after_table_read(self, args) -> asyncio.Future:
        """Queue a producer put until the table is read. One task reads it, then proposes
        the queued puts in their arrival order in one go: a producer's pipelined batches
        must reach the table in sequence order (it refuses a sequence below one it already
        took), so no put may overtake one that waited."""
        fut = self._node.loop.create_future()
        self._producer_backlog.append((args, fut))
        if self._backlog_task is None:
            self._backlog_task = self._node.loop.create_task(self._propose_backlog())
        return fut

    async def _propose_backlog(self) -> None:
        try:
            table, err = await self._read_producer_table(), None
        except Exception as e:        # not the leader any more, closed
            table, err = None, e
        self._backlog_task = None
        backlog, self._producer_backlog = self._producer_backlog, []
        for args, fut in backlog:
            try:
                if err is not None:
                    raise err
                _relay(self._put_producer_batch(table, *args), fut)
            except Exception as e:
                if not fut.done():
                    fut.set_exception(e)

    def _put_producer_batch(self, table, topic, bodies, kw, seq,
                            coalesce, future=None) -> asyncio.Future:
        producer_id, sequence, base = seq
        try:
            # OutOfOrderSequenceError (retriable), ProducerSequenceError: refused
            table.check(producer_id, sequence, base)
        except KnownBatchError as e:
            self.stats["duplicates"] += 1
            return asyncio.ensure_future(self._retried_batch(e.batch, topic, bodies, kw,
                                                             producer_id, sequence))
        kw["properties"] = producer_properties(producer_id, sequence, len(bodies), 0,
                                               kw.get("properties"))
        if coalesce:
            return self._queue_put(topic, bodies, kw, table, producer_id, sequence, future)
        req, fut = self._propose_put(topic, bodies, kw, future)
        b = table.record(producer_id, sequence, req.first_index, req.last_index,
                         self._node.core.term)
        b.waiter = fut
        return fut

    def _producer_table(self) -> ProducerTable:
        """This term's table; a leader's first producer put of its term builds it from its
        own log (read later, a slice at a time: _read_producer_table). Every producer batch
        of the term goes through it, so the log's tail then holds all the table needs."""
        core = self._node.core
        if core.role != Role.LEADER:
            raise self.not_leader()
        t = self._producers
        if t is not None and t.term == core.term:
            return t                  # (the usual case: table_for_term would return it)
        cfg = self._node.cfg
        self._producers = table_for_term(
            self._producers, self._node.seam.raft_log(), core.term,
            window_entries=cfg.producer_window_entries,
            batches_per_producer=cfg.producer_batches_remembered,
            max_producers=cfg.max_producers)
        return self._producers

    async def _read_producer_table(self):
        """The producer table once the new leader has read its log's window into it: a
        slice per loop iteration (a whole 65,536-entry window at once held the loop long
        enough to lose the leadership; producers.py, rebuild). Puts that arrive
        meanwhile wait here together."""
        t = self._producer_table()
        while t.pending:
            t.read_step(_PRODUCER_READ_STEP)
            await asyncio.sleep(0)
            self.check_writable()
            t = self._producer_table()
        return t

    # -- coalescing: the puts of one loop iteration become one proposal per (topic, queue, tags)
    def _queue_put(self, topic, bodies, kw, table, producer_id, sequence,
                   fut=None) -> asyncio.Future:
        """Many small concurrent puts (64 producers of single messages) would each be a
        proposal, an Append per follower, an acknowledgement and a store append. Puts that
        arrive in the same loop iteration with the same topic, queue and tags are proposed
        as one batch at the end of the iteration; each gets its slice of the result. A
        producer's batch is reserved in the table at once (a retry meanwhile waits for it)."""
        if fut is None:
            fut = self._node.loop.create_future()
        item = _Queued(topic, kw.get("queue_id"), kw.get("tags"), bodies, kw.get("properties"),
                       fut)
        if table is not None:
            item.batch = table.reserve(producer_id, sequence, len(bodies))
            item.batch.waiter = fut
            item.pid, item.table = producer_id, table
        self._queued.append(item)
        if not self._queued_pending:
            self._queued_pending = True
            self._node.loop.call_soon(self._propose_queued)
        return fut

    def _propose_queued(self) -> None:
        """Propose the puts queued in the last loop iteration, then drain the core at once:
        their APPENDs leave in this iteration (a drain scheduled for the next one cost each
        produce a loop turn on the leader)."""
        self._queued_pending = False
        queued, self._queued = self._queued, []
        before = self.stats["proposals"]
        self._proposing_queued = self._drain is not None
        try:
            self._propose_groups(queued)
        finally:
            self._proposing_queued = False
        if self.stats["proposals"] != before:
            if self._drain is not None:
                self._drain()
            else:
                self._wake()

    def _propose_groups(self, queued: list) -> None:
        if len(queued) == 1:           # (one producer, one message at a time)
            it = queued[0]
            self._propose_group(it.topic, it.queue_id, it.tags, queued)
            return
        groups: dict = {}
        for it in queued:
            groups.setdefault((it.topic, it.queue_id, it.tags), []).append(it)
        for (topic, qid, tags), items in groups.items():
            part, n, nbytes = [], 0, 0
            for it in items:
                k = len(it.bodies)
                if part and (n + k > _COALESCE_MAX_MESSAGES or nbytes > _COALESCE_MAX_BYTES):
                    self._propose_group(topic, qid, tags, part)
                    part, n, nbytes = [], 0, 0
                part.append(it)
                n += k
                bs = it.bodies
                nbytes += len(bs[0]) if k == 1 else sum(map(len, bs))
            self._propose_group(topic, qid, tags, part)

    def _propose_group(self, topic, qid, tags, items) -> None:
        if len(items) == 1:
            bodies, props = items[0].bodies, items[0].props
        else:
            bodies = [b for it in items for b in it.bodies]
            props = None
            for it in items:            # (any(), without a generator step per put)
                if it.props:
                    props = [p for it in items for p in (
                        it.props if isinstance(it.props, PER_MESSAGE)
                        else [it.props] * len(it.bodies))]
                    break
        kw = {}
        if qid is not None:
            kw["queue_id"] = qid
        if tags is not None:
            kw["tags"] = tags
        if props is not None:
            kw["properties"] = props
        try:
            self.check_writable()
            # (this term's table, as _producer_table returns it when current: the leader's
            # role was checked just above)
            cur = self._producers
            if cur is None or cur.term != self._node.core.term:
                cur = None
            for it in items:
                t = it.table
                if t is not None and t is not (cur if cur is not None else
                                               self._producer_table()):
                    raise self.not_leader()   # (reserved under an earlier term's table)
            self._ensure_topic(topic)
            req = self._node.seam.prepare_put(topic, bodies, **kw)
            # one put alone (one producer, one message at a time): the tracker completes its
            # own future, no second future and callback to hand it the result
            self._propose(req, fut=items[0].fut if len(items) == 1 else
                          SyncFuture(_split_result, items, loop=self._node.loop))
        except Exception as e:
            if len(items) > 1 and not isinstance(e, (NotLeaderError, LogClosedError,
                                                     BackpressureError)):
                for it in items:       # one bad put must not fail the others: one by one
                    self._propose_group(topic, qid, tags, [it])
                return
            for it in items:
                if it.batch is not None:
                    it.table.forget(it.pid, it.batch)    # nothing of it was appended
                if not it.fut.done():
                    it.fut.set_exception(e)
            return
        self.stats["messages_put"] += req.count
        self.stats["coalesced_proposals"] += len(items) > 1
        first = req.first_index
        a = 0
        for it in items:
            b = a + len(it.bodies)
            it.lo, it.hi = a, b
            if it.batch is not None:
                it.table.place(it.batch, first + a, first + b - 1, self._node.core.term)
            a = b

    async def put(self, topic, body, **kw):
        """One message -> its PutResult, once committed and dispatched."""
        r = await self.put_batch(topic, [body], **kw)
        return r[0]

    async def _retried_batch(self, batch, topic, bodies, kw, pid: int, seq: int):
        """A retry of (pid, seq), which the table knows as `batch`: its original's result,
        once every message of it is in the log and committed -- appending the messages the
        log misses (a new leader that holds part of it). Never a result for part of it."""
        n = len(bodies)
        if batch.waiter is not None and not batch.ranges:     # queued here, not appended yet
            return await asyncio.shield(batch.waiter)
        if batch.count is None:
            if batch.held != n:
                raise UncompletableBatchError(
                    f"producer {pid} sequence {seq}: the log holds {batch.held} message(s) of "
                    f"this {n}-message batch in records that do not say the batch's size: "
                    "it cannot be completed (not stored whole)")
        elif batch.count != n:
            raise BatchMismatchError(
                f"producer {pid} sequence {seq} is a batch of {batch.count} messages in the "
                f"log; the retry has {n}: refused, nothing appended")
        if not batch.prefix_known:
            raise UncompletableBatchError(
                f"producer {pid} sequence {seq}: the log holds {batch.held} of its {n} "
                "messages, the first ones before the window the producer table was rebuilt "
                "from: it cannot be answered or completed")
        if batch.waiter is not None and batch.complete:       # appended whole by this leader
            return await asyncio.shield(batch.waiter)
        log.info("node %s: batch (producer %d, sequence %d) is in the log already (%d of %d "
                 "messages, entries %s)", self._node.id, pid, seq, batch.held, n, batch.ranges)
        if not batch.complete:
            if self._producer_table().latest(pid) is not batch:
                raise UncompletableBatchError(
                    f"producer {pid} sequence {seq}: the log holds {batch.held} of its {n} "
                    "messages and later batches of the producer: it cannot be completed (the "
                    "log keeps a producer's records in sequence order)")
            await self._complete_batch(batch, topic, bodies, kw, pid, seq)
        return await self._result_of(batch.ranges)

    async def _complete_batch(self, batch, topic, bodies, kw, pid: int, seq: int) -> None:
        """Append the messages batch.held.. of a batch the log holds in part, to the queue of
        the part, under the same (pid, seq); returns once they are committed."""
        k, n = batch.held, len(bodies)
        if kw.get("delay_level"):
            raise UncompletableBatchError(f"producer {pid} sequence {seq}: a delayed batch "
                                          "held in part cannot be completed")
        kw2 = {name: (v[k:] if isinstance(v, list) else v) for name, v in kw.items()
               if name != "sharding_key"}
        kw2["queue_id"] = self._node.store.commitlog.record(batch.first_index).queue_id
        kw2["properties"] = producer_properties(pid, seq, n, k, kw2.get("properties"))
        self._ensure_topic(topic)
        req = self._node.seam.prepare_put(topic, bodies[k:], **kw2)
        fut = self._propose(req)
        self.stats["messages_put"] += req.count
        self._producer_table().place(batch, req.first_index, req.last_index,
                                    self._node.core.term)
        log.warning("node %s: batch (producer %d, sequence %d): the log held %d of its %d "
                    "messages; appended the other %d at %d..%d", self._node.id, pid, seq, k, n,
                    n - k, req.first_index, req.last_index)
        await asyncio.shield(fut)

    async def _result_of(self, ranges):
        """The BatchResult of a batch at `ranges` ([first, last, term] runs) once committed
        here, each run still of its term (else NotLeaderError: replaced by a newer leader)."""
        ranges = [tuple(r) for r in ranges]
        await self._node.wait_applied(max(r[1] for r in ranges),
                                timeout=self._node.cfg.put_timeout_ms / 1000)
        self.check_writable()
        cl = self._node.store.commitlog
        core = self._node.core
        for first, last, term in ranges:
            if cl.term_at(last) != term:
                raise NotLeaderError(f"entries {first}..{last} of the batch were replaced by a "
                                     "newer leader's", core.leader_id, core.term)
        return self.result_from_ranges([(f, la) for f, la, _ in ranges])

    def result_from_log(self, first: int, last: int):
        """A BatchResult for log entries first..last (a duplicate batch's original)."""
        return self.result_from_ranges([(first, last)])

    def result_from_ranges(self, ranges):
        """A BatchResult for the MESSAGE records of the runs of entries [(first, last), ...]
        (a batch the log holds in several runs: the positions name every message)."""
        cl = self._node.store.commitlog
        parts = []
        for first, last in ranges:
            pos = cl.position_of(first)
            end = cl.position_of(last) + cl.size_of(last)
            info, _ = cl.scan(pos, end, last - first + 1 + 16)
            parts.append(info[info["type"] == MESSAGE])
        info = np.concatenate(parts) if len(parts) > 1 else parts[0]
        topic = cl.topic_at(int(info["position"][0]))
        return BatchResult(ranges[0][0], info["position"].copy(), topic,
                           info["queue_id"].astype("int64"), info["queue_offset"].copy(),
                           int(info["store_ts"][0]))

    async def commit_offsets(self, group: str, offsets) -> int:
        """Commit consumer offsets of `group` (as MessageStore.commit_offsets) as one META
        record through the Raft core; returns its index once it is committed and applied
        here (committed_offset shows it on every replica that applied it)."""
        self.check_writable()
        reqs = []
        seam = self._node.seam
        self._node.store.commit_offsets(group, offsets,
                                        propose=lambda p: reqs.append(seam.prepare_meta(p)))
        return await self.submit(reqs[0])
