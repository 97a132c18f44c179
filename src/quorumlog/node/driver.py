"""Node: the asyncio driver of one replica -- RaftCore + the store's commit log + the TCP
transport. It owns the event loop's time, the sockets and the flush thread, and does what
each Ready says, in the order the core's docstring gives, and nothing else.

THE DRIVER'S DUTIES (for each Ready drained from the core, in this order):

 1. hard_state: write it to <dir>/raft-state (atomic: temporary file, fsync, rename, fsync of
    the directory) BEFORE any message of the same Ready leaves. A vote or a term announced and
    then forgotten by a crash would let this node vote twice in one term. (Done on the loop:
    it happens once per election, never per entry.)
 2. messages: hand each to the transport (PeerTransport.send never blocks; a message it drops
    is a lost message, which Raft tolerates). A leader may send entries it has not flushed:
    its own copy counts towards commit only once duty 3 reported it.
 3. flush_to: make the log durable and then call core.on_persisted(index, flush_gen).
    flush = "sync": the Flusher thread runs one CommitLog.flush() (msync, GIL released) for
    everything appended so far -- group commit: every Ready that asked while a flush ran is
    covered by the next one -- and posts the report back to the loop. A follower therefore
    acknowledges an entry only once it is on its disk, and a put returns only after a
    majority flushed it. flush = "async": report at once (the entry is in the page cache);
    the log's own background thread flushes every flush_interval_ms (DLedger's behaviour).
    The index reported is the log's last index when the Ready was drained; the core ignores
    a report whose gen predates a truncation.
 4. commit_index: apply through the store's seam -- store.apply_committed(i) commits up to i
    in the log, applies META records, dispatches (consume queues) and completes the clients'
    requests waiting on those indexes, in that order -- then core.on_dispatched(dispatched).
    Only entries that are both committed and durable here are applied:
    i = min(commit_index, core.persisted_index) (a follower learns the commit index from its
    leader and may hold it before its own flush finished); a later on_persisted applies the
    rest.
 5. events: RoleChanged / ReadyToServe / LeaseExpired / ConfigChanged / TransferAborted /
    BehindRetention / LogInstalled go to the listeners (the embedding API runs them on a
    thread of its own). Leaving LEADER fails every request still waiting for a commit
    (NotLeaderError: it may or may not commit under the next leader; an idempotent producer
    retries safely). LogInstalled (a follower behind the leader's retention received its
    retained log): the store already reopened on the new log inside core.step (the flush
    thread follows it at once); the driver applies what is committed of it.

Inputs, each followed by draining the core (at most once per loop iteration: the inputs of
one iteration -- a socket read full of appends, several puts -- share one Ready, one flush
request and one cumulative acknowledgement):
  * transport on_message(peer, msg) -> core.step(msg)
  * a tick every tick_ms of the node's clock (node/clock.py; time.monotonic in production)
    -> core.tick(now_ms)
  * propose (put) -> core.propose(request, count, nbytes) (leader only: NotLeaderError naming
    the leader and its client address, LeaderTransferringError, BackpressureError over
    max_pending_puts / max_pending_bytes)
  * the Flusher's report -> core.on_persisted(index, gen), then duty 4 for what became durable

Restart: the store recovers the log (torn tail cut, CRCs checked); the hard state comes from
raft-state; the CONFIG history is rebuilt by scanning the log's CONFIG records; the core
starts as CANDIDATE with commit_index = the log's committed index and rejoins. A follower
whose log diverged is truncated back to the match point by the protocol (never below its
commit index).
"""
from __future__ import annotations

import asyncio
import logging
import os
import random

from ..errors import InvalidArgumentError, LogClosedError, LogFailedError, QuorumlogError
from ..metrics import ReplicaMetrics
from ..net.messages import LeaderRedirectError
from ..net.seam import Transport
from ..net.transport import TransportConfig
from ..raft.core import (BehindRetention, ConfigChanged, LeaseExpired, LogInstalled,
                         RaftConfig, RaftCore, ReadyToServe, RoleChanged, TransferAborted)
from ..raft.errors import BackpressureError, NotLeaderError
from ..raft.log import decode_config
from ..raft.messages import Role
from ..raft.ready import Duties, run_readies
from ..store.nativeinstall import read_head
from ..store.nativelog import PER_MESSAGE, RESERVED_PROPERTIES, producer_properties
from ..store.topics import check_user_topic
from . import meta
from .clock import Clock, MonotonicClock
from .config import NodeConfig, parse_address
from .flusher import FlushService
from .hardstate import HardStateFile
from .producers import (BatchMismatchError, KnownBatchError, ProducerTable,
                        UncompletableBatchError, table_for_term)
from .storebridge import MetaSeam
from .wiring import tcp_transport, thread_flusher

log = logging.getLogger(__name__)

__all__ = ["Node", "config_history", "PRODUCTION_FLUSHER"]

PRODUCTION_FLUSHER = "production"   # Node(flusher=...) default: see Node.__init__

_COALESCIBLE = frozenset(("queue_id", "tags", "properties"))
_COALESCE_BELOW_MESSAGES = 64        # bigger puts are batches already: proposed as they are
_COALESCE_MAX_MESSAGES = 4096        # per coalesced proposal (the core allows 8192)
_COALESCE_MAX_BYTES = 4 << 20        # (the core allows max_proposal_bytes, 16 MiB)
_PRODUCER_READ_STEP = 4096           # log entries read into a new leader's table per step
_MAX_TOPIC_NAMES_REMEMBERED = 4096


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
    if len(items) == 1:
        if not items[0].fut.done():
            items[0].fut.set_result(r)
        return
    from ..store import BatchResult
    for it in items:
        if not it.fut.done():
            lo, hi = it.lo, it.hi
            it.fut.set_result(BatchResult(r.first_index + lo, r.positions[lo:hi], r.topic,
                                          r.queue_ids[lo:hi], r.queue_offsets[lo:hi],
                                          r.store_timestamp_ms))


_METRICS_EVERY_MS = 1000     # transport counters and follower lag copied for /metrics


def _stop_http(server) -> None:
    server.shutdown()
    server.server_close()


def config_history(commitlog, initial_voters) -> list:
    """[(0, initial voters), (index, voters, learners), ...] from the log's CONFIG records; an
    installed log starts from the configuration in effect before its first entry instead."""
    from ..commitlog import CONFIG
    hist = [(0, tuple(sorted(initial_voters)))]
    cl = commitlog
    head = read_head(cl.path)
    if head is not None:
        hist = [(head["first_index"] - 1, tuple(head["voters"]), tuple(head["learners"]))]
    if cl.last_index <= 0:
        return hist
    pos, end = cl.min_position, cl.end_position
    while pos < end:
        info, nxt = cl.scan(pos, end, 65536)
        if nxt == pos:
            break
        cfgs = info[info["type"] == CONFIG]
        for p, idx, off, n in zip(cfgs["position"].tolist(), cfgs["index"].tolist(),
                                  cfgs["body_offset"].tolist(), cfgs["body_len"].tolist()):
            hist.append((idx, *decode_config(bytes(cl.record_at(p)[off:off + n]))))
        pos = nxt
    return hist


class Node:
    """One replica. Build, then `await start()` inside the loop that will run it; every
    method below runs on that loop (quorumlog.open_replica wraps it for threads)."""

    def __init__(self, path, cfg: NodeConfig, raft_cfg: RaftConfig | None = None, *,
                 store_cfg=None, transport_config: TransportConfig | None = None,
                 rng: random.Random | None = None, transport: Transport | None = None,
                 clock: Clock | None = None, flusher=PRODUCTION_FLUSHER):
        """transport, clock, flusher: the seams (net/seam.py, node/clock.py,
        node/flusher.py). transport and clock None: the production ones (node/wiring.py:
        TCP, time.monotonic). flusher: PRODUCTION_FLUSHER (the default) is the flush thread
        in sync mode and none in async mode; None is none (every flush reported at once, as
        async mode does); anything else is the FlushService to use."""
        self.path = os.fspath(path)
        self.cfg = cfg
        self.raft_cfg = raft_cfg or RaftConfig()
        self.store_cfg = store_cfg
        self.transport_config = transport_config
        self.rng = rng or random.Random()
        self.clock = clock or MonotonicClock()
        self._given_transport = transport
        self._given_flusher = flusher
        self.id = cfg.node_id
        self.store = None          # MessageStore
        self.seam = None           # the store's seam (bridge_for)
        self.core: RaftCore | None = None
        self.transport: Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.hsfile = HardStateFile(self.path)
        self.flusher: FlushService | None = None
        self.metrics = ReplicaMetrics()     # role, term, commit, links: what /metrics shows
        self.metrics_address: tuple | None = None
        self._metrics_server = None
        self._topic_names_ok: set = set()
        self._producers: ProducerTable | None = None    # the leader's (this term's) table
        self._producer_backlog: list = []   # producer puts waiting for the table, in arrival order
        self._backlog_task: asyncio.Task | None = None
        self._listeners: list = []
        self._drain_pending = False
        self._duties: Duties | None = None
        self._queued: list = []
        self._queued_pending = False
        self._ticker: asyncio.Task | None = None
        self._commit_target = 0
        self._applied = 0
        self._applied_changed: asyncio.Event | None = None
        self._stopped = False
        self._added_peers: set = set()     # members added after start (add_member, CONFIG)
        self._failed: BaseException | None = None
        self.ready_to_serve = False
        self.pending_puts = 0        # messages proposed here and not completed yet
        self.pending_bytes = 0
        self.stats = {"proposals": 0, "messages_put": 0, "duplicates": 0, "readies": 0,
                      "hard_state_saves": 0, "flush_requests": 0, "elections_won": 0, "loop_stalls": 0,
                      "coalesced_proposals": 0, "installs": 0}

    # ---------------------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        from ..store import MessageStore
        self.loop = asyncio.get_running_loop()
        self._applied_changed = asyncio.Event()
        cfg = self.cfg
        os.makedirs(self.path, exist_ok=True)
        if self.store_cfg is None:
            from ..config import load_config
            self.store_cfg = load_config(None, {})
        self.store = MessageStore(self.path, self.store_cfg, replicated=True)
        try:
            self.seam = MetaSeam(self.store)
            cl = self.store.commitlog
            rlog = self.seam.raft_log()
            hs = self.hsfile.load()
            hist = config_history(cl, cfg.peers.keys())
            # a replica that ran before may have acknowledged a leader whose lease still
            # runs: the core then grants no vote for one leak period (docs/raft.md, leases)
            restarted = hs.term > 0 or cl.last_index > 0
            # async mode acknowledged at page-cache level: after a power loss (the page
            # cache did not survive) entries this replica acknowledged may be gone, and the
            # core must recover them from its peers before it votes or leads (raft/recovery.py)
            recovering = self.store_cfg.flush == "async" and cl.lost_writes_possible
            self.core = RaftCore(self.id, rlog, self.rng, self.raft_cfg, hard_state=hs,
                                 config_history=hist, peers=tuple(cfg.peers),
                                 now_ms=self.clock.now_ms(),
                                 commit_index=cl.committed_index, restarted=restarted,
                                 recovering=recovering)
            self._applied = self._commit_target = cl.committed_index
            self.metrics = ReplicaMetrics(term=self.core.term)
            self.metrics.set_commit_index(cl.committed_index)
            log.info("node %s: opened %s: log %d..%d (term %d), committed %d, hard state "
                     "term %d vote %s, voters %s", self.id, self.path, cl.first_index,
                     cl.last_index, cl.last_term if cl.last_index else 0, cl.committed_index,
                     hs.term, hs.voted_for, hist[-1][1])
            self.flusher = self._given_flusher
            if self.flusher is PRODUCTION_FLUSHER:
                self.flusher = thread_flusher(self.store_cfg.flush)
            if self.flusher is not None:
                self.flusher.start(cl, self.loop, self._on_flushed, self._on_flush_error)
            self.seam.on_log_replaced = self._on_log_replaced
            self._duties = Duties(self._save_hard_state, self._send, self._flush_to,
                                  self._commit, self._on_events)
            self.transport = self._given_transport or tcp_transport(
                cfg, transport_config=self.transport_config, rng=self.rng,
                segment_size_bytes=cl.segment_size_bytes)
            self.transport.on_message = self._on_message
            await self.transport.start()
            if cfg.metrics_addr is not None:
                from ..metrics import serve
                mhost, mport = parse_address(cfg.metrics_addr, "metrics_addr")
                self._metrics_server, port = serve(self.store, mport, mhost, self.metrics)
                self.metrics_address = (mhost, port)
            self._ticker = self.loop.create_task(self._tick_loop())
        except BaseException:
            if self.transport is not None:
                await self.transport.close()
            self.store.close()
            raise

    @property
    def peer_address(self):
        return self.transport.address if self.transport is not None else None

    async def stop(self) -> None:
        """Stop ticking, fail waiting requests, close the transport, flush and close the
        store. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._ticker is not None:
            self._ticker.cancel()
            try:
                await self._ticker
            except (asyncio.CancelledError, Exception):
                pass
        stopping = LogClosedError(f"node {self.id} is stopping")
        for it in self._queued:
            if not it.fut.done():
                it.fut.set_exception(stopping)
        self._queued = []
        if self.seam is not None:
            self.seam.abandon_pending(stopping)
        if self._metrics_server is not None:
            server, self._metrics_server = self._metrics_server, None
            await self.loop.run_in_executor(None, _stop_http, server)
        if self.transport is not None:
            await self.transport.close()
        if self.flusher is not None:
            await self.flusher.close()
        if self.store is not None:
            self.store.close()
        if self._applied_changed is not None:
            self._applied_changed.set()
        log.info("node %s stopped", self.id)

    async def crash_for_testing(self) -> None:
        """Test hook (the simulator's kill -9): stop ticking and receiving, drop the store
        with no flush and no checkpoint (the page cache keeps what was written), fail
        waiting requests. The directory then opens as after a process crash."""
        if self._stopped:
            return
        self._stopped = True
        if self._ticker is not None:
            self._ticker.cancel()
        if self.transport is not None:
            await self.transport.close()
        if self.store is not None:
            self.store.crash_for_testing()
        crashed = LogClosedError(f"node {self.id} crashed")
        for it in self._queued:
            if not it.fut.done():
                it.fut.set_exception(crashed)
        self._queued = []
        if self.seam is not None:
            self.seam.abandon_pending(crashed)
        if self.flusher is not None:
            await self.flusher.close()
        if self._applied_changed is not None:
            self._applied_changed.set()

    # ---------------------------------------------------------------------------- inputs
    async def _tick_loop(self) -> None:
        clock = self.clock
        interval = self.cfg.tick_ms
        last = clock.now_ms()
        next_metrics = last
        while True:
            await clock.sleep_ms(interval)
            if self._failed is not None:
                return
            now = clock.now_ms()
            if now - last > 250:
                # the loop did not run for that long (a blocked call, or an overloaded
                # machine): heartbeats stopped too, followers may have started an election
                self.stats["loop_stalls"] += 1
                log.info("node %s: event loop stalled for %d ms", self.id, now - last)
            last = now
            try:
                self.core.tick(now)
                self._drain()
            except Exception as e:
                self._fail(e)
                return
            if now >= next_metrics:
                next_metrics = now + _METRICS_EVERY_MS
                self._sample_metrics()

    def _on_message(self, peer: str, msg) -> None:
        if self._stopped or self._failed is not None:
            return
        try:
            self.core.step(msg)
        except QuorumlogError as e:
            # the core refused the message (e.g. a RaftInvariantError: a peer claims
            # something that contradicts our committed log): nothing was changed by it
            log.error("node %s: message %s from %s refused: %s", self.id, msg.describe(), peer, e)
            # an install that failed while replacing the log, or a log whose flush failed
            # (async mode: found at the next write): not the peer's fault -- stop
            if self.store.closed or isinstance(e, LogFailedError):
                self._fail(e)
            return
        self._schedule_drain()

    def _schedule_drain(self) -> None:
        if not self._drain_pending:
            self._drain_pending = True
            self.loop.call_soon(self._drain_soon)

    def _drain_soon(self) -> None:
        self._drain_pending = False
        if self._stopped or self._failed is not None:
            return
        try:
            self._drain()
        except Exception as e:
            self._fail(e)

    def _fail(self, e: BaseException) -> None:
        """An error the driver cannot continue after (a failed flush or hard-state write, a
        broken invariant): stop participating; the process must restart to recover."""
        if self._failed is None:
            self._failed = e
            log.critical("node %s: stopping Raft after an unrecoverable error: %r", self.id, e)
            if self.seam is not None:
                self.seam.abandon_pending(LogClosedError(f"node {self.id} failed: {e}"))

    # ---------------------------------------------------------------------------- duties
    def _drain(self) -> None:
        self.stats["readies"] += run_readies(self.core, self._duties)

    def _save_hard_state(self, hs) -> None:                    # duty 1
        self.hsfile.save(hs)
        self.stats["hard_state_saves"] += 1
        self.metrics.set_term(hs.term)

    def _send(self, m) -> None:                                # duty 2
        self.transport.send(m.dst, m)

    def _flush_to(self, flush_to: int, gen: int) -> None:      # duty 3
        self._flush(gen)

    def _commit(self, commit_index: int) -> None:              # duty 4
        self._commit_target = commit_index
        self.metrics.set_commit_index(commit_index)
        self._apply()

    def _flush(self, gen: int) -> None:
        last = self.core.log.last_index()
        self.stats["flush_requests"] += 1
        if self.flusher is None:
            # async: acknowledged at page-cache level; the log flushes in the background
            self.core.on_persisted(last, gen)
            self._apply()
        else:
            self.flusher.request(last, gen)

    def _on_flushed(self, index: int, gen: int) -> None:
        if self._stopped or self._failed is not None:
            return
        try:
            self.core.on_persisted(index, gen)
            self._apply()
            self._drain()
        except Exception as e:
            self._fail(e)

    def _on_log_replaced(self) -> None:
        """An install replaced the store's log (inside core.step): the flush thread follows."""
        if self.flusher is not None:
            self.flusher.retarget(self.store.commitlog)
        self.stats["installs"] += 1

    def _on_flush_error(self, e: BaseException) -> None:
        self._fail(e)

    def _apply(self) -> None:
        core = self.core
        upto = self._commit_target
        p = core.persisted_index
        if p < upto:
            upto = p
        if upto <= self._applied:
            return
        d = self.seam.apply_committed(upto)
        self._applied = upto
        core.on_dispatched(d)
        ev = self._applied_changed
        ev.set()
        self._applied_changed = asyncio.Event()

    def _on_events(self, events) -> None:
        for ev in events:
            if isinstance(ev, RoleChanged):
                log.info("node %s: %s in term %d (leader %s)", self.id, ev.role.name, ev.term,
                         ev.leader_id)
                self.metrics.set_role(ev.role.name, ev.term)
                if ev.role == Role.LEADER:
                    self.stats["elections_won"] += 1
                else:
                    self.seam.abandon_pending(self._not_leader())
                self.ready_to_serve = False
            elif isinstance(ev, ReadyToServe):
                log.info("node %s: ready to serve as leader of term %d", self.id, ev.term)
                self.ready_to_serve = True
            elif isinstance(ev, LeaseExpired):
                log.info("node %s: leader lease of term %d expired: not serving", self.id,
                         ev.term)
                self.ready_to_serve = False
            elif isinstance(ev, ConfigChanged):
                log.info("node %s: voters are now %s (CONFIG entry %d)", self.id, ev.voters,
                         ev.index)
                self._accept_new_members((*ev.voters, *ev.learners))
            elif isinstance(ev, TransferAborted):
                log.warning("node %s: leadership transfer to %s aborted: %s", self.id,
                            ev.transferee, ev.reason)
            elif isinstance(ev, BehindRetention):
                log.warning("node %s: follower %s needs entries from %d, which this log no "
                            "longer holds: installing it from the retained log", self.id,
                            ev.peer, ev.next_index)
            elif isinstance(ev, LogInstalled):
                log.warning("node %s: log replaced by the leader's [%d..%d]", self.id,
                            ev.first_index, ev.last_index)
                # apply what is committed of the new log (duty 4 of this Ready may have met
                # the old log's applied index)
                self._applied = self.store.commitlog.committed_index
                self._commit_target = max(self._commit_target, self.core.commit_index)
                self._apply()
            for fn in self._listeners:
                try:
                    fn(ev)
                except Exception:
                    log.exception("node %s: event listener failed", self.id)

    def _sample_metrics(self) -> None:
        """What the core and the transport count, copied for /metrics (its thread reads the
        copy, never the loop's own structures)."""
        m = self.metrics
        m.set_loop_stalls(self.stats["loop_stalls"])
        for peer, st in self.transport.stats()["peers"].items():
            for lane, s in (("data", st), ("control", st.get("control"))):
                if s is not None:       # (a simulated transport has one lane, no counters)
                    m.set_link(peer, lane, s["connected"], s.get("connects", 0),
                               s.get("disconnects", 0))
        core = self.core
        if core.role == Role.LEADER:
            last = core.log.last_index()
            for p, pr in core.progress.items():
                m.set_follower_lag(p, last - pr.match)

    def add_listener(self, fn) -> None:
        """fn(event) is called on the loop for every core event (keep it short)."""
        self._listeners.append(fn)

    # ---------------------------------------------------------------------------- writes
    def _not_leader(self) -> NotLeaderError:
        core = self.core
        lid = core.leader_id if core.leader_id != self.id else None
        addr = self.cfg.client_addrs.get(lid) if lid is not None else None
        return LeaderRedirectError(
            f"node {self.id} is not the leader (term {core.term}; leader "
            f"{lid or 'unknown'}{' at ' + addr if addr else ''})", lid, core.term, addr)

    def _check_writable(self) -> None:
        if self._stopped:
            raise LogClosedError(f"node {self.id} is stopped")
        if self._failed is not None:
            raise LogClosedError(f"node {self.id} failed: {self._failed}")
        if self.core.role != Role.LEADER:
            raise self._not_leader()

    def _propose(self, req) -> None:
        core = self.core
        seam = self.seam
        cfg = self.cfg
        if self.pending_puts + req.count > cfg.max_pending_puts:
            raise BackpressureError(
                f"node {self.id}: {self.pending_puts} messages awaiting commit + {req.count} "
                f"> max_pending_puts={cfg.max_pending_puts}")
        if self.pending_bytes + req.nbytes > cfg.max_pending_bytes:
            raise BackpressureError(
                f"node {self.id}: {self.pending_bytes} bytes awaiting commit + {req.nbytes} > "
                f"max_pending_bytes={cfg.max_pending_bytes}")
        try:
            core.propose(req, req.count, req.nbytes)
        except LogFailedError as e:
            # async mode: the log's background flush failed and it refuses every write; a
            # failed flush is never retried into success, so this node stops (and another
            # leads) instead of staying a leader that can append nothing
            self._fail(e)
            raise
        if req.on_done is not None:     # (counted until _completion's callback runs)
            self.pending_puts += req.count
            self.pending_bytes += req.nbytes
        self.stats["proposals"] += 1
        self._schedule_drain()

    def _ensure_topic(self, topic: str) -> None:
        """A topic this replica has never seen: replicate its creation (META) first."""
        if self.seam.has_topic(topic):
            return
        if not self.store_cfg.auto_create_topics:
            from ..errors import TopicNotFoundError
            raise TopicNotFoundError(topic)
        self._propose(self.seam.prepare_meta(
            meta.encode_topic(topic, self.store_cfg.default_topic_queues)))

    async def create_topic(self, name: str, queues: int = 8) -> int:
        """Create (or extend) a topic on every replica; returns the META entry's index."""
        self._check_writable()
        if type(queues) is not int or not 1 <= queues <= self.store_cfg.max_queues_per_topic:
            raise InvalidArgumentError(f"queues must be an int in [1, "
                                       f"{self.store_cfg.max_queues_per_topic}]")
        self._check_topic(name)
        req = self.seam.prepare_meta(meta.encode_topic(name, queues))
        return await self._submit(req)

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

    def _completion(self, req) -> asyncio.Future:
        """A future completed by req.on_done (called on the loop: apply_committed,
        abandon_pending and truncations all run there)."""
        fut = self.loop.create_future()
        count, nbytes = req.count, req.nbytes

        def done(value):
            self.pending_puts -= count
            self.pending_bytes -= nbytes
            if not fut.done():
                if isinstance(value, BaseException):
                    fut.set_exception(value)
                else:
                    fut.set_result(value)
        req.on_done = done
        return fut

    async def _submit(self, req):
        fut = self._completion(req)
        self._propose(req)
        return await fut

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
                         base_sequence: int = 0, **kw) -> asyncio.Future:
        """put_batch without a coroutine: checks and proposes (or queues) now and returns the
        future of the result (shared: never cancel it). The client service's produce path:
        no task and no coroutine frames per request (a retried batch, and a put while a new
        leader still reads its log into the producer table, take a task). Bad input and a
        non-leader raise here."""
        self._check_writable()
        self._check_topic(topic)
        props = kw.get("properties")
        if props is not None:
            ps = props if isinstance(props, list) else [props]
            for p in ps:
                if p and RESERVED_PROPERTIES.intersection(p):
                    raise InvalidArgumentError(f"properties {sorted(RESERVED_PROPERTIES)} are "
                                               "reserved")
        coalesce = (self.cfg.coalesce_puts and kw.keys() <= _COALESCIBLE
                    and isinstance(bodies, list) and 0 < len(bodies) < _COALESCE_BELOW_MESSAGES
                    and not isinstance(props, list))
        if producer_id:
            if type(producer_id) is not int or type(sequence) is not int or sequence < 0 \
                    or producer_id < 0 or type(base_sequence) is not int \
                    or not 0 <= base_sequence <= sequence:
                raise InvalidArgumentError("producer_id, sequence and base_sequence must be "
                                           "ints >= 0, base_sequence <= sequence")
            bodies = bodies if isinstance(bodies, list) else list(bodies)
            table = self._producer_table()
            seq = (producer_id, sequence, base_sequence)
            if table.pending or self._backlog_task is not None:
                # a new leader still reading its log's window into the table: wait in line
                return self._put_after_table_read((topic, bodies, kw, seq, coalesce))
            return self._put_producer_batch(table, topic, bodies, kw, seq, coalesce)
        if coalesce:
            return self._queue_put(topic, bodies, kw, None, 0, 0)
        return self._propose_put(topic, bodies, kw)[1]

    def _propose_put(self, topic, bodies, kw):
        self._ensure_topic(topic)
        req = self.seam.prepare_put(topic, bodies, **kw)
        fut = self._completion(req)
        self._propose(req)
        self.stats["messages_put"] += req.count
        return req, fut

    def _put_after_table_read(self, args) -> asyncio.Future:
        """Queue a producer put until the table is read. One task reads it, then proposes
        the queued puts in their arrival order in one go: a producer's pipelined batches
        must reach the table in sequence order (it refuses a sequence below one it already
        took), so no put may overtake one that waited."""
        fut = self.loop.create_future()
        self._producer_backlog.append((args, fut))
        if self._backlog_task is None:
            self._backlog_task = self.loop.create_task(self._propose_backlog())
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
                            coalesce) -> asyncio.Future:
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
            return self._queue_put(topic, bodies, kw, table, producer_id, sequence)
        req, fut = self._propose_put(topic, bodies, kw)
        b = table.record(producer_id, sequence, req.first_index, req.last_index, self.core.term)
        b.waiter = fut
        return fut

    def _producer_table(self) -> ProducerTable:
        """This term's table; a leader's first producer put of its term builds it from its
        own log (read later, a slice at a time: _read_producer_table). Every producer batch
        of the term goes through it, so the log's tail then holds all the table needs."""
        core = self.core
        if core.role != Role.LEADER:
            raise self._not_leader()
        cfg = self.cfg
        self._producers = table_for_term(
            self._producers, self.seam.raft_log(), core.term,
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
            self._check_writable()
            t = self._producer_table()
        return t

    # -- coalescing: the puts of one loop iteration become one proposal per (topic, queue, tags)
    def _queue_put(self, topic, bodies, kw, table, producer_id, sequence) -> asyncio.Future:
        """Many small concurrent puts (64 producers of single messages) would each be a
        proposal, an Append per follower, an acknowledgement and a store append. Puts that
        arrive in the same loop iteration with the same topic, queue and tags are proposed
        as one batch at the end of the iteration; each gets its slice of the result. A
        producer's batch is reserved in the table at once (a retry meanwhile waits for it)."""
        fut = self.loop.create_future()
        item = _Queued(topic, kw.get("queue_id"), kw.get("tags"), bodies, kw.get("properties"),
                       fut)
        if table is not None:
            item.batch = table.reserve(producer_id, sequence, len(bodies))
            item.batch.waiter = fut
            item.pid, item.table = producer_id, table
        self._queued.append(item)
        if not self._queued_pending:
            self._queued_pending = True
            self.loop.call_soon(self._propose_queued)
        return fut

    def _propose_queued(self) -> None:
        self._queued_pending = False
        queued, self._queued = self._queued, []
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
                nbytes += sum(len(b) for b in it.bodies)
            self._propose_group(topic, qid, tags, part)

    def _propose_group(self, topic, qid, tags, items) -> None:
        if len(items) == 1:
            bodies, props = items[0].bodies, items[0].props
        else:
            bodies = [b for it in items for b in it.bodies]
            if any(it.props for it in items):
                props = [p for it in items for p in (
                    it.props if isinstance(it.props, PER_MESSAGE) else [it.props] * len(it.bodies))]
            else:
                props = None
        kw = {}
        if qid is not None:
            kw["queue_id"] = qid
        if tags is not None:
            kw["tags"] = tags
        if props is not None:
            kw["properties"] = props
        try:
            self._check_writable()
            if any(it.table is not None and it.table is not self._producer_table()
                   for it in items):   # (reserved under an earlier term's table)
                raise self._not_leader()
            self._ensure_topic(topic)
            req = self.seam.prepare_put(topic, bodies, **kw)
            done = self._completion(req)
            self._propose(req)
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
                it.table.place(it.batch, first + a, first + b - 1, self.core.term)
            a = b
        done.add_done_callback(lambda f, items=items: _split_result(f, items))

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
                 "messages, entries %s)", self.id, pid, seq, batch.held, n, batch.ranges)
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
        kw2["queue_id"] = self.store.commitlog.record(batch.first_index).queue_id
        kw2["properties"] = producer_properties(pid, seq, n, k, kw2.get("properties"))
        self._ensure_topic(topic)
        req = self.seam.prepare_put(topic, bodies[k:], **kw2)
        fut = self._completion(req)
        self._propose(req)
        self.stats["messages_put"] += req.count
        self._producer_table().place(batch, req.first_index, req.last_index,
                                    self.core.term)
        log.warning("node %s: batch (producer %d, sequence %d): the log held %d of its %d "
                    "messages; appended the other %d at %d..%d", self.id, pid, seq, k, n,
                    n - k, req.first_index, req.last_index)
        await asyncio.shield(fut)

    async def _result_of(self, ranges):
        """The BatchResult of a batch at `ranges` ([first, last, term] runs) once committed
        here, each run still of its term (else NotLeaderError: replaced by a newer leader)."""
        ranges = [tuple(r) for r in ranges]
        await self.wait_applied(max(r[1] for r in ranges),
                                timeout=self.cfg.put_timeout_ms / 1000)
        self._check_writable()
        cl = self.store.commitlog
        for first, last, term in ranges:
            if cl.term_at(last) != term:
                raise NotLeaderError(f"entries {first}..{last} of the batch were replaced by a "
                                     "newer leader's", self.core.leader_id, self.core.term)
        return self.result_from_ranges([(f, la) for f, la, _ in ranges])

    def result_from_log(self, first: int, last: int):
        """A BatchResult for log entries first..last (a duplicate batch's original)."""
        return self.result_from_ranges([(first, last)])

    def result_from_ranges(self, ranges):
        """A BatchResult for the MESSAGE records of the runs of entries [(first, last), ...]
        (a batch the log holds in several runs: the positions name every message)."""
        import numpy as np

        from ..commitlog import MESSAGE
        from ..store import BatchResult
        cl = self.store.commitlog
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

    async def wait_applied(self, index: int, timeout: float) -> None:
        deadline = self.loop.time() + timeout
        while self._applied < index:
            if self._stopped:
                raise LogClosedError(f"node {self.id} is stopped")
            left = deadline - self.loop.time()
            if left <= 0:
                raise TimeoutError(f"entry {index} not applied within {timeout} s")
            try:
                await asyncio.wait_for(self._applied_changed.wait(), left)
            except TimeoutError:
                pass

    async def wait_for_data(self, timeout: float) -> None:
        """Wait (at most timeout s) until something more is applied (long polls)."""
        try:
            await asyncio.wait_for(self._applied_changed.wait(), timeout)
        except TimeoutError:
            pass

    # ------------------------------------------------------------------- consumer offsets
    async def commit_offsets(self, group: str, offsets) -> int:
        """Commit consumer offsets of `group` (as MessageStore.commit_offsets) as one META
        record through the Raft core; returns its index once it is committed and applied
        here (committed_offset shows it on every replica that applied it)."""
        self._check_writable()
        reqs = []
        self.store.commit_offsets(group, offsets,
                                  propose=lambda p: reqs.append(self.seam.prepare_meta(p)))
        return await self._submit(reqs[0])

    # ---------------------------------------------------------------------------- admin
    def end_recovery(self, reason: str) -> None:
        """The operator's override (raft/recovery.py R5): stop waiting for a peer that holds
        what this replica lost to a power loss, accepting that it may be lost for good."""
        self.core.end_recovery(reason)
        self._schedule_drain()

    def transfer_leadership(self, to: str) -> None:
        self._check_writable()
        self.core.transfer_leadership(to)
        self._schedule_drain()

    def _accept_new_members(self, members) -> None:
        """Members a CONFIG entry names that this node has no address for (added on another
        node, the leader): accept their connections -- they dial us, they have our address --
        instead of refusing each as an unknown node until they are started again."""
        for peer in members:
            if peer != self.id and peer not in self.cfg.peers and peer not in self._added_peers:
                self._added_peers.add(peer)
                self.transport.add_peer(peer, None)

    def add_member(self, peer: str, address: str) -> None:
        self._check_writable()
        host, port = parse_address(address, f"address of {peer!r}")
        self._added_peers.add(peer)
        self.transport.add_peer(peer, (host, port))
        try:
            self.core.add_member(peer)
        except LogFailedError as e:
            self._fail(e)      # (a failed async flush found by this append: as in a put)
            raise
        self._schedule_drain()

    def remove_member(self, peer: str) -> int:
        self._check_writable()
        try:
            idx = self.core.remove_member(peer)
        except LogFailedError as e:
            self._fail(e)      # (nodesim seed 2929: an idle leader kept leading, unable to add)
            raise
        self._schedule_drain()
        return idx

    # ---------------------------------------------------------------------------- status
    @property
    def role(self) -> Role:
        return self.core.role

    @property
    def leader_id(self):
        return self.core.leader_id

    @property
    def term(self) -> int:
        return self.core.term

    @property
    def applied_index(self) -> int:
        return self._applied

    def status(self) -> dict:
        core = self.core
        cl = self.store.commitlog
        st = {"node_id": self.id, "role": core.role.name, "term": core.term,
              "leader_id": core.leader_id, "voted_for": core.voted_for,
              "commit_index": core.commit_index, "applied_index": self._applied,
              "persisted_index": core.persisted_index, "last_index": cl.last_index,
              "end_position": cl.end_position, "voters": list(core.voters),
              "ready_to_serve": self.ready_to_serve,
              "recovering_term": core.recovering_term,
              "pending_puts": self.pending_puts, "pending_bytes": self.pending_bytes,
              "failed": repr(self._failed) if self._failed else None, **self.stats}
        if core.role == Role.LEADER:
            st["followers"] = {p: {"match": pr.match, "lag": cl.last_index - pr.match,
                                   "state": pr.state.name}
                               for p, pr in core.progress.items()}
        st["transport"] = self.transport.stats() if self.transport is not None else None
        return st
