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
    flush = "sync": a Flusher thread runs one CommitLog.flush() (msync, GIL released) for
    everything appended so far and posts the report back to the loop; a request that arrives
    during a flush is covered by the next one (group commit), which starts at once on a
    second thread with NodeConfig.flushes_in_flight = 2. A follower therefore
    acknowledges an entry only once it is on its disk, and a put returns only after a
    majority flushed it. flush = "async": report at once (the entry is in the page cache:
    core.ready(persisted=True), so the acknowledgement leaves with the Ready of the append);
    the log's own background thread flushes every flush_interval_ms (DLedger's behaviour).
    The index reported is the log's last index when the Ready was drained; the core ignores
    a report whose gen predates a truncation.
 4. commit_index: apply -- at the end of the drain, once the messages of its Readies are
    written (a follower's acknowledgement does not wait for the apply), and before any event
    of a Ready: pipeline.on_applied(i) completes the clients' requests waiting on those
    indexes (the pipeline's tracker, node/pipeline.py; the client service writes their
    answers then), then the store's seam -- store.apply_committed(i) commits up to i in the
    log, applies META records and dispatches (consume queues) -- then
    core.on_dispatched(dispatched).
    The commit index is durable on a quorum: a follower's never runs ahead of its own
    flush (the core caps it), a leader's counts the followers' durable copies and may run
    ahead of its own flush (docs/raft.md deviation 19) -- it applies and answers then, as
    in async mode: the checkpoint never records a committed or dispatched position past the
    flushed one, and a power loss of this replica alone loses nothing acknowledged.
    A follower applies at most every FOLLOWER_APPLY_DELAY_MS instead (Node._apply_soon: it
    answers no put), at once when someone waits for its apply, before any event, at stop.
 5. events: RoleChanged / ReadyToServe / LeaseExpired / ConfigChanged / TransferAborted /
    BehindRetention / LogInstalled go to the listeners (the embedding API runs them on a
    thread of its own). Leaving LEADER fails every request still waiting for a commit
    (pipeline.on_lost(NotLeaderError): it may or may not commit under the next leader; an
    idempotent producer retries safely). LogInstalled (a follower behind the leader's retention received its
    retained log): the store already reopened on the new log inside core.step (the flush
    thread follows it at once); the driver applies what is committed of it.

Inputs, each followed by draining the core (at most once per loop iteration: the inputs of
one iteration -- a socket read full of appends, several puts -- share one Ready, one flush
request and one cumulative acknowledgement; the drain's messages are written when it ends,
not a loop iteration later: transport.hold_writes / release_writes):
  * transport on_message(peer, msg) -> core.step(msg); on_peer_lost(peer, refused=True)
    (nothing listens at the peer's address) -> core.on_peer_down(peer)
  * a tick every tick_ms of the node's clock (node/clock.py; time.monotonic in production)
    -> core.tick(now_ms) -- only when the core's next deadline is due (core.next_tick_ms():
    a follower's leak timeout; a leader's next heartbeat, check-quorum, lease end or append
    time-out), at least every heartbeat interval (metrics, the log check), every tick_ms
    while it has work each tick (a candidate, a transfer, a learner, an install); the
    core's clock is set before every input (core.set_clock: a follower notes heartbeats and
    a leader checks its lease at it) -- an idle replica wakes ~10 times a second instead of
    100. An input that brings a deadline forward (a role change, ReadyToServe,
    BehindRetention, a transfer, a new learner) brings the next tick to tick_ms.
  * writes (put, create_topic, commit_offsets) -> the proposal pipeline (node/pipeline.py:
    checks, backpressure, coalescing, producer idempotence, core.propose, and ONE tracker of
    the proposals in flight), which asks for a drain; the driver tells it what was applied
    (on_applied), truncated (the seam's on_truncated), replaced by an install, or lost
    (on_lost: not the leader any more, failed; close: stopped)
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

from ..errors import LogClosedError, LogFailedError, QuorumlogError
from ..metrics import ReplicaMetrics
from ..net.seam import Transport
from ..net.transport import TransportConfig
from ..raft.core import (BehindRetention, ConfigChanged, LeaseExpired, LogInstalled,
                         RaftConfig, RaftCore, ReadyToServe, RoleChanged, TransferAborted)
from ..raft.log import decode_config
from ..raft.messages import Role
from ..raft.ready import Duties, run_readies
from ..store.nativeinstall import read_head
from .clock import Clock, MonotonicClock
from .config import NodeConfig, parse_address
from .flusher import FlushService
from .hardstate import HardStateFile
from .pipeline import Pipeline
from .storebridge import MetaSeam
from .wiring import tcp_transport, thread_flusher

log = logging.getLogger(__name__)

__all__ = ["Node", "config_history", "PRODUCTION_FLUSHER"]

PRODUCTION_FLUSHER = "production"   # Node(flusher=...) default: see Node.__init__
_METRICS_EVERY_MS = 1000     # transport counters and follower lag copied for /metrics
# a follower applies (commits its log, dispatches into the consume queues) at most this long
# after its commit index moved, not in every drain: Node._apply_soon
FOLLOWER_APPLY_DELAY_MS = 5


def _stop_http(server) -> None:
    server.shutdown()
    server.server_close()


def config_history(commitlog, initial_voters) -> list:
    """[(0, initial voters), (index, voters, learners), ...] from the log's CONFIG records; a
    log with a head (log_head.json: installed, or retention deleted CONFIG records) starts
    from the configuration in effect before the head's first entry instead."""
    from ..commitlog import CONFIG
    hist = [(0, tuple(sorted(initial_voters)))]
    cl = commitlog
    head = read_head(cl.path)
    first = 0
    if head is not None:
        first = head["first_index"]
        if "config" in head:     # retention's head: the body of the CONFIG record it deleted
            hist = [(first - 1, *decode_config(head["config"].encode()))]
        else:
            hist = [(first - 1, tuple(head["voters"]), tuple(head["learners"]))]
    if cl.last_index <= 0:
        return hist
    # found through the raft index: a scan of the records read the whole log at every start
    # (those below the head are left over by a retention a crash cut short: the head says them)
    for idx in cl.indexes_of_type(CONFIG).tolist():
        if idx < first:
            continue
        p = cl.position_of(idx)
        info, _ = cl.scan(p, p + cl.size_of(idx), 1)
        off, n = int(info["body_offset"][0]), int(info["body_len"][0])
        hist.append((idx, *decode_config(bytes(cl.record_at(p)[off:off + n]))))
    return hist


class Node:
    """One replica. Build, then `await start()` inside the loop that will run it; every
    method below runs on that loop (quorumlog.open_replica wraps it for threads)."""

    def __init__(self, path, cfg: NodeConfig, raft_cfg: RaftConfig | None = None, *,
                 store_cfg=None, transport_config: TransportConfig | None = None,
                 rng: random.Random | None = None, transport: Transport | None = None,
                 clock: Clock | None = None, flusher=PRODUCTION_FLUSHER,
                 own_ticker: bool = True):
        """transport, clock, flusher: the seams (net/seam.py, node/clock.py,
        node/flusher.py). transport and clock None: the production ones (node/wiring.py:
        TCP, time.monotonic). flusher: PRODUCTION_FLUSHER (the default) is the flush thread
        in sync mode and none in async mode; None is none (every flush reported at once, as
        async mode does); anything else is the FlushService to use. own_ticker False: the
        owner calls tick(now_ms) every tick_ms instead (node/host.py: one timer for every
        group of a process)."""
        self.path = os.fspath(path)
        self.cfg = cfg
        self.raft_cfg = raft_cfg or RaftConfig()
        self.store_cfg = store_cfg
        self.transport_config = transport_config
        self.rng = rng or random.Random()
        self.clock = clock or MonotonicClock()
        self._given_transport = transport
        self._given_flusher = flusher
        self._own_ticker = own_ticker
        self._last_tick_ms: int | None = None
        self._next_metrics_ms = 0
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
        self._listeners: list = []
        self._drain_pending = False
        self._hold_writes = self._release_writes = None     # (transport.hold_writes, ...)
        self._duties: Duties | None = None
        self._ticker: asyncio.TimerHandle | None = None   # the next tick (own_ticker)
        self._tick_due_ms = 0
        self._commit_target = 0
        self._applied = 0
        # set by the next apply; made when someone waits for it (_applied_event), not per apply
        self._applied_changed: asyncio.Event | None = None
        self._apply_timer: asyncio.TimerHandle | None = None    # a follower's deferred apply
        self._stopped = False
        self._added_peers: set = set()     # members added after start (add_member, CONFIG)
        self._failed: BaseException | None = None
        self.ready_to_serve = False
        self.stats = {"proposals": 0, "messages_put": 0, "duplicates": 0, "readies": 0,
                      "hard_state_saves": 0, "flush_requests": 0, "elections_won": 0, "loop_stalls": 0,
                      "coalesced_proposals": 0, "installs": 0, "ticks": 0}
        # every write goes through the pipeline; its tracker completes them (node/pipeline.py)
        self.pipeline = Pipeline(self, wake=self._schedule_drain, fail=self._fail,
                                 drain=self._drain_now)

    # ---------------------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        from ..store import MessageStore
        self.loop = asyncio.get_running_loop()
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
            # (the mode of the run that acknowledged them: a replica restarted in sync mode
            # after an async run's power loss recovers too; an older marker names none)
            recovering = cl.lost_writes_possible and (
                cl.previous_flush_mode or self.store_cfg.flush) == "async"
            self.core = RaftCore(self.id, rlog, self.rng, self.raft_cfg, hard_state=hs,
                                 config_history=hist, peers=tuple(cfg.peers),
                                 now_ms=self.clock.now_ms(),
                                 commit_index=cl.committed_index, restarted=restarted,
                                 recovering=recovering)
            if self.core.recovering_term != hs.recovering_term:
                # R1: the floor is durable before anything else happens. This open already
                # rewrote the commit log's abort marker with this page cache's identity, so
                # after a kill the next open would not see the power loss again, and a floor
                # left for the first Ready (which a kill can beat) would be gone: the replica
                # would vote and lead with a log short of what it acknowledged (nodesim
                # seed 7476; tests/node/test_node_recovery_floor.py)
                self.hsfile.save(self.core.hard_state)
            if cl.lost_writes_possible:
                # ... and only then may the commit log forget that this open saw lost writes:
                # until here a kill (or a failed start's close) leaves its abort marker
                # saying so, and the next open sets the floor again (the window between
                # the open's marker and this save: tests/node/test_node_recovery_floor.py)
                cl.settle_lost_writes()
            self._applied = self._commit_target = cl.committed_index
            self.metrics = ReplicaMetrics(term=self.core.term)
            self.metrics.set_commit_index(cl.committed_index)
            log.info("node %s: opened %s: log %d..%d (term %d), committed %d, hard state "
                     "term %d vote %s, voters %s", self.id, self.path, cl.first_index,
                     cl.last_index, cl.last_term if cl.last_index else 0, cl.committed_index,
                     hs.term, hs.voted_for, hist[-1][1])
            self.flusher = self._given_flusher
            if self.flusher is PRODUCTION_FLUSHER:
                self.flusher = thread_flusher(self.store_cfg.flush, self.cfg.flushes_in_flight)
            if self.flusher is not None:
                self.flusher.start(cl, self.loop, self._on_flushed, self._on_flush_error)
            self.seam.on_log_replaced = self._on_log_replaced
            self.seam.on_truncated = self.pipeline.on_truncated
            self._duties = Duties(self._save_hard_state, self._send, self._flush_to,
                                  self._commit, self._on_events)
            self.transport = self._given_transport or tcp_transport(
                cfg, transport_config=self.transport_config, rng=self.rng,
                segment_size_bytes=cl.segment_size_bytes)
            self._listen_to(self.transport)
            await self.transport.start()
            if cfg.metrics_addr is not None:
                from ..metrics import serve
                mhost, mport = parse_address(cfg.metrics_addr, "metrics_addr")
                self._metrics_server, port = serve(self.store, mport, mhost, self.metrics)
                self.metrics_address = (mhost, port)
            if self._own_ticker:
                self._last_tick_ms = self._next_metrics_ms = self.clock.now_ms()
                self._arm_tick(self._last_tick_ms, cfg.tick_ms)
        except BaseException:
            if self.transport is not None:
                await self.transport.close()
            self.store.close()
            raise

    def _listen_to(self, t: Transport) -> None:
        """Take the transport's inputs; and its optional part (net/seam.py): the messages
        of a drain written when it ends (hold_writes / release_writes)."""
        t.on_message = self._on_message
        t.on_peer_lost = self.on_peer_lost
        self._hold_writes = getattr(t, "hold_writes", None)
        self._release_writes = getattr(t, "release_writes", None)

    @property
    def peer_address(self):
        return self.transport.address if self.transport is not None else None

    async def stop(self) -> None:
        """Stop ticking, fail waiting requests, close the transport, flush and close the
        store. Idempotent."""
        if self._stopped:
            return
        if self._apply_timer is not None:      # (a follower's deferred apply: made now)
            self._apply_timer.cancel()
            self._apply_deferred()
        self._stopped = True
        if self._ticker is not None:
            self._ticker.cancel()
        self.pipeline.close(LogClosedError(f"node {self.id} is stopping"))
        if self._metrics_server is not None:
            server, self._metrics_server = self._metrics_server, None
            await self.loop.run_in_executor(None, _stop_http, server)
        if self.transport is not None:
            await self.transport.close()
        if self.flusher is not None:
            await self.flusher.close()
        if self.store is not None:
            self.store.close()
        self._wake_waiters_stopped()
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
        if self._apply_timer is not None:
            self._apply_timer.cancel()
        if self.transport is not None:
            await self.transport.close()
        if self.store is not None:
            self.store.crash_for_testing()
        self.pipeline.close(LogClosedError(f"node {self.id} crashed"))
        if self.flusher is not None:
            await self.flusher.close()
        self._wake_waiters_stopped()

    def _wake_waiters_stopped(self) -> None:
        if self.loop is not None:
            self._applied_event().set()     # (waiters see the stop; set from now on)

    # ---------------------------------------------------------------------------- inputs
    def _arm_tick(self, now: int, delay_ms: int) -> None:
        self._tick_due_ms = now + delay_ms
        self._ticker = self.clock.call_later_ms(self.loop, delay_ms, self._on_tick)

    def _on_tick(self) -> None:
        self._ticker = None
        now = self.clock.now_ms()
        if self.tick(now):
            self._arm_tick(now, self._tick_delay_ms(now))

    def _tick_delay_ms(self, now: int) -> int:
        """Until the core's next deadline (core.next_tick_ms: a follower's leak timeout, a
        leader's next heartbeat, lease end or time-out), at least tick_ms, at most a
        heartbeat interval and a second (what else a tick does: metrics, the log check);
        tick_ms when the core has work every tick (a candidate)."""
        iv = self.cfg.tick_ms
        due = self.core.next_tick_ms()
        if due is None:
            return iv
        d = min(due - now, self.raft_cfg.heartbeat_interval_ms, _METRICS_EVERY_MS)
        return d if d > iv else iv

    def _retick(self) -> None:
        """The role changed by a message: tick at tick_ms again from now, not at a
        follower's later time."""
        if self._ticker is None or self._stopped:
            return
        now = self.clock.now_ms()
        if self._tick_due_ms > now + self.cfg.tick_ms:
            self._ticker.cancel()
            self._arm_tick(now, self.cfg.tick_ms)

    def tick(self, now: int) -> bool:
        """One tick of the core at `now` (the node's clock) and a drain; False once the node
        failed or stopped (no more ticks needed)."""
        if self._failed is not None or self._stopped:
            return False
        last = self._last_tick_ms
        if last is None:
            last = self._next_metrics_ms = now
        if self._own_ticker and now - max(last, self._tick_due_ms - self.cfg.tick_ms) > 250:
            # the loop did not run for that long (a blocked call, or an overloaded
            # machine): heartbeats stopped too, followers may have started an election
            # (an owner's ticks -- node/host.py -- skip a quiesced core: it counts stalls)
            self.stats["loop_stalls"] += 1
            log.info("node %s: event loop stalled for %d ms", self.id, now - last)
        self._last_tick_ms = now
        self.stats["ticks"] += 1
        try:
            self.core.tick(now)
            self._drain()
        except Exception as e:
            self._fail(e)
            return False
        if now >= self._next_metrics_ms:
            self._next_metrics_ms = now + _METRICS_EVERY_MS
            self._sample_metrics()
            return self._check_log()
        return True

    def _check_log(self) -> bool:
        """Stop when the log failed where no write saw it (async mode: a background flush):
        an idle leader would otherwise go on heartbeating with a log that refuses every
        write, and its group stay without a writable leader until a put arrived."""
        why = self.store.commitlog.failure if self.store is not None else None
        if why is None:
            return True
        self._fail(LogFailedError(f"node {self.id}: the commit log refuses writes: {why}",
                                  self.path))
        return False

    # ---------------------------------------------------------------------------- quiescence
    def quiescable(self) -> bool:
        """May this group's leader quiesce (raft/quiesce.py Q1, and nothing of the node's
        in flight: no request waiting, everything committed applied)?"""
        return (self._failed is None and not self._stopped and self.core.quiescable()
                and self.pipeline.pending_messages == 0
                and self._applied == self.core.commit_index)

    def quiet_heartbeat(self, peer: str, term: int, commit_index: int, now: int) -> bool:
        """raft/quiesce.py Q4 on this follower; a commit it learned is applied."""
        if self._failed is not None or self._stopped:
            return False
        was = self.core.quiesced
        held = self.core.quiet_heartbeat(peer, term, commit_index, now)
        if not (was and held) and self.core.has_ready():     # (held again: nothing new)
            self._schedule_drain()
        return held

    def _on_message(self, peer: str, msg) -> None:
        if self._stopped or self._failed is not None:
            return
        try:
            core = self.core
            core.set_clock(self.clock.now_ms())     # (a follower's ticks are sparse)
            core.step(msg)
        except QuorumlogError as e:
            # the core refused the message (e.g. a RaftInvariantError: a peer claims
            # something that contradicts our committed log): nothing was changed by it
            log.error("node %s: message %s from %s refused: %s", self.id, msg.describe(), peer, e)
            # an install that failed while replacing the log, or a log whose flush failed
            # (async mode: found at the next write): not the peer's fault -- stop
            if self.store.closed or isinstance(e, LogFailedError):
                self._fail(e)
            return
        if core.has_ready():     # (a leader's second acknowledgement of an entry: nothing)
            self._schedule_drain()

    def on_peer_lost(self, peer: str, refused: bool) -> None:
        """The transport lost `peer`; refused: its process is gone (the core may give up
        its leader now: raft/election.py on_peer_down)."""
        if refused and not self._stopped and self._failed is None:
            self.core.set_clock(self.clock.now_ms())     # (ticks are sparse: _tick_delay_ms)
            self.core.on_peer_down(peer)
            self._schedule_drain()

    def _schedule_drain(self) -> None:
        if not self._drain_pending:
            self._drain_pending = True
            self.loop.call_soon(self._drain_soon)

    def _drain_soon(self) -> None:
        self._drain_pending = False
        self._drain_now()

    def _drain_now(self) -> None:
        self._guarded(self._drain)

    def _guarded(self, step) -> None:
        """step() unless the node stopped or failed; an error in it fails the node."""
        if self._stopped or self._failed is not None:
            return
        try:
            step()
        except Exception as e:
            self._fail(e)

    def _fail(self, e: BaseException) -> None:
        """An error the driver cannot continue after (a failed flush or hard-state write, a
        broken invariant): stop participating; the process must restart to recover."""
        if self._failed is None:
            self._failed = e
            log.critical("node %s: stopping Raft after an unrecoverable error: %r", self.id, e)
            self.pipeline.on_lost(LogClosedError(f"node {self.id} failed: {e}"))

    # ---------------------------------------------------------------------------- duties
    def _drain(self) -> None:
        """Every Ready (duties 1-5), then what they committed applied: the messages of the
        drain are written first (hold_writes .. release_writes: at the drain's end, not the
        loop turn's), then the apply -- a leader answers its clients before the store
        applies and dispatches (node/pipeline.py on_applied, then seam.apply_committed), a
        follower acknowledges before it dispatches what the leader's commit index brought.
        Neither waits for the other's work; the apply still precedes any event of a
        Ready (_on_events), as it did in duty order."""
        core = self.core
        hold = self._hold_writes
        while True:
            held = hold is not None and hold()
            try:
                self.stats["readies"] += run_readies(core, self._duties, self.flusher is None)
            finally:
                if held:
                    self._release_writes()
            if core.role == Role.FOLLOWER and self._applied_changed is None:
                self._apply_soon()
            else:
                self._apply()
            if not core.has_ready():
                return

    def _save_hard_state(self, hs) -> None:                    # duty 1
        self.hsfile.save(hs)
        self.stats["hard_state_saves"] += 1
        self.metrics.set_term(hs.term)

    def _send(self, m) -> None:                                # duty 2
        self.transport.send(m.dst, m)

    def _flush_to(self, flush_to: int, gen: int) -> None:      # duty 3
        self._flush(gen)

    def _commit(self, commit_index: int) -> None:              # duty 4
        # applied at the end of the drain, after its messages are written (_drain)
        self._commit_target = commit_index
        self.metrics.set_commit_index(commit_index)

    def _flush(self, gen: int) -> None:
        last = self.core.log.last_index()
        self.stats["flush_requests"] += 1
        if self.flusher is None:
            # async: acknowledged at page-cache level; the log flushes in the background
            # (what this commits is applied at the drain's end)
            self.core.on_persisted(last, gen)
        else:
            self.flusher.request(last, gen)

    def _on_flushed(self, index: int, gen: int) -> None:
        if self._stopped or self._failed is not None:
            return
        try:
            core = self.core
            core.set_clock(self.clock.now_ms())     # (ticks are sparse: _tick_delay_ms)
            core.on_persisted(index, gen)
            self._drain()       # (applies what became committed)
        except Exception as e:
            self._fail(e)

    def _on_log_replaced(self) -> None:
        """An install replaced the store's log (inside core.step): the flush thread follows,
        and nothing in flight can commit from the old log."""
        self.pipeline.on_log_replaced()
        if self.flusher is not None:
            self.flusher.retarget(self.store.commitlog)
        self.stats["installs"] += 1

    def _on_flush_error(self, e: BaseException) -> None:
        self._fail(e)

    def _apply(self) -> None:
        """Apply what is committed (duty 4): the clients' puts are completed first (the
        client service writes their answers: they are committed, durable on a quorum),
        then the store commits its log and dispatches up to it."""
        upto = self._commit_target
        if upto <= self._applied:
            return
        self.pipeline.on_applied(upto)
        d = self.seam.apply_committed(upto)
        self._applied = upto
        self.core.on_dispatched(d)
        ev = self._applied_changed
        if ev is not None:
            self._applied_changed = None
            ev.set()

    def _apply_soon(self) -> None:
        """A follower's apply, deferred by FOLLOWER_APPLY_DELAY_MS: its commit index moves
        with every APPEND (the leader's commit of the entry before), and dispatching one
        record per APPEND cost each follower ~70 µs of CPU that, on a machine with fewer
        cores than processes, ran while the leader handled the acknowledgement and the
        other follower the same APPEND. Deferred, the dispatch runs once for every entry
        committed in that time. Applied at once, as before, when someone waits for it
        (_applied_event: wait_applied, a long-poll fetch) and before any event of a Ready
        (_on_events: a role change sees everything committed applied). Nothing waits for a
        follower's apply: it answers no put, and its acknowledgement is already written."""
        if self._apply_timer is None and self._commit_target > self._applied:
            self._apply_timer = self.clock.call_later_ms(self.loop, FOLLOWER_APPLY_DELAY_MS,
                                                         self._apply_deferred)

    def _apply_deferred(self) -> None:
        self._apply_timer = None
        self._guarded(self._apply)

    def _applied_event(self) -> asyncio.Event:
        """The event the next apply sets (a deferred apply is made now: someone waits)."""
        ev = self._applied_changed
        if ev is None:
            ev = self._applied_changed = asyncio.Event()
        if self._apply_timer is not None:
            self._apply_timer.cancel()
            self._apply_deferred()
        return ev

    def _on_events(self, events) -> None:
        self._apply()       # (what this Ready committed first, as in duty order)
        for ev in events:
            if isinstance(ev, RoleChanged):
                log.info("node %s: %s in term %d (leader %s)", self.id, ev.role.name, ev.term,
                         ev.leader_id)
                self.metrics.set_role(ev.role.name, ev.term)
                if ev.role == Role.LEADER:
                    self.stats["elections_won"] += 1
                else:
                    self.pipeline.on_lost(self.pipeline.not_leader())
                if ev.role != Role.FOLLOWER:
                    self._retick()
                self.ready_to_serve = False
            elif isinstance(ev, ReadyToServe):
                log.info("node %s: ready to serve as leader of term %d", self.id, ev.term)
                self.ready_to_serve = True
                self._retick()      # (its lease's end is a deadline now)
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
                self._retick()      # (an install is driven every tick)
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
    # (the pipeline's: node/pipeline.py; these are the node's API for them)
    def put_batch_future(self, topic, bodies, **kw) -> asyncio.Future:
        """Pipeline.put_batch_future: checks and proposes now -> the result's future."""
        return self.pipeline.put_batch_future(topic, bodies, **kw)

    async def put_batch(self, topic, bodies, **kw):
        """Pipeline.put_batch: a batch's BatchResult once committed and dispatched."""
        return await self.pipeline.put_batch(topic, bodies, **kw)

    async def put(self, topic, body, **kw):
        """One message -> its PutResult, once committed and dispatched."""
        return await self.pipeline.put(topic, body, **kw)

    async def create_topic(self, name: str, queues: int = 8) -> int:
        """Create (or extend) a topic on every replica; returns the META entry's index."""
        return await self.pipeline.create_topic(name, queues)

    async def commit_offsets(self, group: str, offsets) -> int:
        """Pipeline.commit_offsets: one META record, its index once applied here."""
        return await self.pipeline.commit_offsets(group, offsets)

    def result_from_log(self, first: int, last: int):
        """A BatchResult for log entries first..last (Pipeline.result_from_log)."""
        return self.pipeline.result_from_log(first, last)

    @property
    def pending_puts(self) -> int:
        """Messages proposed here and not completed yet (the pipeline's tracker)."""
        return self.pipeline.pending_messages

    @property
    def pending_bytes(self) -> int:
        return self.pipeline.pending_bytes

    @property
    def closed_reason(self) -> str | None:
        """Why this node takes no writes (stopped, failed), or None."""
        if self._stopped:
            return f"node {self.id} is stopped"
        if self._failed is not None:
            return f"node {self.id} failed: {self._failed}"
        return None

    async def wait_applied(self, index: int, timeout: float) -> None:
        deadline = self.loop.time() + timeout
        while self._applied < index:
            if self._stopped:
                raise LogClosedError(f"node {self.id} is stopped")
            left = deadline - self.loop.time()
            if left <= 0:
                raise TimeoutError(f"entry {index} not applied within {timeout} s")
            try:
                await asyncio.wait_for(self._applied_event().wait(), left)
            except TimeoutError:
                pass

    async def wait_for_data(self, timeout: float) -> None:
        """Wait (at most timeout s) until something more is applied (long polls)."""
        try:
            await asyncio.wait_for(self._applied_event().wait(), timeout)
        except TimeoutError:
            pass

    # ---------------------------------------------------------------------------- admin
    def end_recovery(self, reason: str) -> None:
        """The operator's override (raft/recovery.py R5): stop waiting for a peer that holds
        what this replica lost to a power loss, accepting that it may be lost for good."""
        self._admin_clock()
        self.core.end_recovery(reason)
        self._schedule_drain()

    def transfer_leadership(self, to: str) -> None:
        self.pipeline.check_writable()
        self._admin_clock()
        self.core.transfer_leadership(to)
        self._schedule_drain()
        self._retick()          # (a transfer is checked every tick)

    def _admin_clock(self) -> None:
        """Set the core's clock before an admin call (its time-outs start now)."""
        self.core.set_clock(self.clock.now_ms())

    def _accept_new_members(self, members) -> None:
        """Members a CONFIG entry names that this node has no address for (added on another
        node, the leader): accept their connections -- they dial us, they have our address --
        instead of refusing each as an unknown node until they are started again."""
        for peer in members:
            if peer != self.id and peer not in self.cfg.peers and peer not in self._added_peers:
                self._added_peers.add(peer)
                self.transport.add_peer(peer, None)

    def add_member(self, peer: str, address: str) -> None:
        self.pipeline.check_writable()
        host, port = parse_address(address, f"address of {peer!r}")
        self._added_peers.add(peer)
        self.transport.add_peer(peer, (host, port))
        self._admin_clock()
        try:
            self.core.add_member(peer)
        except LogFailedError as e:
            self._fail(e)      # (a failed async flush found by this append: as in a put)
            raise
        self._schedule_drain()
        self._retick()          # (a learner is checked every tick)

    def remove_member(self, peer: str) -> int:
        self.pipeline.check_writable()
        self._admin_clock()
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
