"""Clients of a quorumlog replica group: AsyncClient (asyncio) and Client (plain threads).

    with quorumlog.Client(["127.0.0.1:8001", "127.0.0.1:8002"], secret=...) as c:
        r = c.produce("orders", [b"a", b"b"])          # committed on a majority when it returns
        msgs = c.fetch("orders", r.queue_id, r.first_queue_offset, wait_ms=1000)

* Connects to any member and follows NOT_LEADER redirects to the leader (the error names the
  leader's client address); with no address known it tries the other members.
* Idempotent producer (docs/node.md "Idempotent produce"): the client has a random 63-bit
  producer id and numbers its batches; a retried batch keeps its sequence number, so a
  leader (a new one after failover too) that already holds it answers with the original
  result instead of appending it twice. At most `max_in_flight` (<= MAX_PRODUCER_IN_FLIGHT,
  8, what a leader remembers per producer) sequences are unresolved at once: a new batch
  waits until the oldest unresolved one is less than max_in_flight behind it. Each attempt
  tells the leader the lowest unresolved sequence (base_sequence), so a leader that lacks
  the batch before this one while the client still has it in flight answers
  OUT_OF_ORDER_SEQUENCE. After a retriable error no batch is sent while an older one waits
  to be sent again, so the batches reach the leader oldest first and pipelining resumes
  behind them (as Kafka's producer does); the oldest handles the error. Retries go on
  for NOT_LEADER, LEADER_TRANSFERRING, BACKPRESSURE, OUT_OF_ORDER_SEQUENCE, timeouts and
  lost connections, until `retry_timeout` runs out; a batch that fails is given up (its
  outcome is unknown unless the error refused it) and the next one goes on. A redirect is
  followed at once, a broken connection retried at once on the next member, and while no
  member names a leader (an election) they are asked again every <= 50 ms; BACKPRESSURE and
  timeouts back off up to 500 ms (_after_failure; docs/node.md "Resend in order").
* produce_many(topic, batches, window=8) keeps up to `window` (<= max_in_flight) batches in
  flight.
* Many concurrent single-message produce() calls on one client (while others are in flight)
  go as one request per loop turn and topic/queue/tags; each caller gets its own message's
  acknowledgement (`coalesce=False` sends one request per message).
* The batch's bodies are framed by a Cython loop (quorumlog._clientframe), not a Python loop
  per message.
* Reads (fetch, offsets) go to the member the client is connected to (a follower serves its
  own committed data); fetch long-polls with wait_ms.
* Many Raft groups per member (node/groups.py): `groups=G` (or None: asked of the first
  member that answers) routes every request on (topic, queue) to the group that holds it,
  through one sub-client per group, which caches that group's leader, follows its
  redirects and numbers its own producer's batches (a group's leader keeps the producer
  table of its own log). A produce with queue_id -1 picks the queue here: round-robin over
  `topic_queues` (default max(4, G): what an auto-created topic gets on a G-group member),
  32 small produces in a row to one queue (they coalesce), one large batch per queue.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import random
import threading
import time
from typing import NamedTuple

from .errors import (AuthenticationError, ConnectionLimitError, InvalidArgumentError,
                     OutOfOrderSequenceError, QuorumlogError)
from .format import fnv1a64
from ._clientframe import decode_fetched, encode_bodies
from .net import codec
from .net import messages as m
from .net.auth import AuthConfig
from .net.errors import EncodeError, NetError, TransportClosedError
from .net.transport import TransportConfig, connect_client
from .node.groups import check_groups, group_of
from .raft.errors import BackpressureError, LeaderTransferringError, NotLeaderError

log = logging.getLogger(__name__)

__all__ = ["AsyncClient", "Client", "FetchResult", "IncompleteAcknowledgementError"]

_RETRYABLE = (NotLeaderError, LeaderTransferringError, BackpressureError, TimeoutError,
              TransportClosedError, ConnectionError, OSError, m.RequestTimeoutError,
              OutOfOrderSequenceError)
_PRODUCE_TYPE = codec.spec_for(m.ProduceRequest("t", [])).type_code


class IncompleteAcknowledgementError(QuorumlogError):
    """The server acknowledged a produce with fewer (or more) positions than the batch has
    messages: the batch is not known to be stored whole (a server that answers a retried
    batch with the part its log holds). `response` is the server's answer."""

    def __init__(self, message: str, response=None):
        super().__init__(message)
        self.response = response


class FetchResult(NamedTuple):
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list           # FetchedMessage (quorumlog._clientframe), one per message


def _check_window(name: str, n) -> int:
    if type(n) is not int or not 1 <= n <= m.MAX_PRODUCER_IN_FLIGHT:
        raise InvalidArgumentError(
            f"{name}={n!r}: an idempotent producer keeps 1..{m.MAX_PRODUCER_IN_FLIGHT} batches "
            f"in flight (MAX_PRODUCER_IN_FLIGHT: a leader remembers the last "
            f"{m.MAX_PRODUCER_IN_FLIGHT} batches of each producer, and a retry of an older one "
            "could not be told from a new batch)")
    return n


def _addr(a) -> tuple[str, int]:
    """("host", port) or "host:port" -> (host, port); InvalidArgumentError saying what a
    server address looks like otherwise (e.g. "localhost" without its port)."""
    if isinstance(a, tuple) and len(a) == 2:
        host, port = a
    else:
        host, sep, port = str(a).rpartition(":")
        if not sep:
            raise InvalidArgumentError(f"server address {a!r} has no port: give "
                                       "'host:port' of a replica's client listener, e.g. "
                                       f"'{a}:8001'")
        host = host.strip("[]")
    try:
        p = int(port)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"server address {a!r}: port {port!r} is not a number "
                                   "(give 'host:port')") from None
    if not host or not 0 < p <= 65535:
        raise InvalidArgumentError(f"server address {a!r}: need a host and a port in "
                                   "1..65535 ('host:port')")
    return host, p


def _after(addresses: list, a) -> list:
    """The addresses other than `a`, starting with the one after it."""
    if a not in addresses:
        return list(addresses)
    i = addresses.index(a)
    return addresses[i + 1:] + addresses[:i]


class _EncodedProduce:
    """A ProduceRequest whose frame payload was built by the Cython framer (sent with
    ClientChannel.request_encoded). `parts` is made per attempt: the fixed fields carry the
    window's lowest unresolved sequence at the time of sending (base_sequence)."""

    __slots__ = ("vals", "rest", "window", "seq")

    def __init__(self, vals: list, rest: list, window: "_ProducerWindow | None", seq: int):
        self.vals, self.rest, self.window, self.seq = vals, rest, window, seq

    @property
    def parts(self) -> list:
        return _produce_frame_parts(self.vals, self.rest, self.window)


def _produce_frame_parts(vals: list, rest: list, window: "_ProducerWindow | None") -> list:
    """A produce's frame payload for one attempt: the fixed fields with the window's lowest
    unresolved sequence at the time of sending (base_sequence), then the encoded rest."""
    if window is not None:
        vals[_BASE_FIELD] = window.base()
    return [_PRODUCE_SPEC.fixed_struct.pack(*vals) + rest[0], *rest[1:]]


class _ProducerWindow:
    """The sequences of this client's producer id that are unresolved (sent, neither
    acknowledged nor given up). A new sequence is handed out only while it is less than
    `limit` above the lowest unresolved one, so every batch a client may retry is among the
    last `limit` batches the leader remembers (node/producers.py): a retry is never too old to
    tell. Sequences start at 1, are never reused, and go to callers in the order they asked
    (first come, first numbered: a producer's batches are numbered in the order it made them).

    Sending in order: a batch whose attempt failed is `failed` until it is sent again; no
    batch is sent while an older one is failed (`turn`), so after an error the batches reach
    the leader oldest first and pipelining resumes behind them (Kafka's producer: one request
    in flight until the oldest succeeds, learned from, not copied)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.next = 1
        self._low = 1
        self._open: set = set()
        self._failed: set = set()
        self._queue: collections.deque = collections.deque()   # futures waiting for a number
        self._waiters: list = []          # (seq, future) waiting for a change

    def base(self) -> int:
        """The lowest unresolved sequence (self.next if none is)."""
        while self._low < self.next and self._low not in self._open:
            self._low += 1
        return self._low

    def _room(self) -> bool:
        return not self._open or self.next - self.base() < self.limit

    def _take(self) -> int:
        seq = self.next
        self.next += 1
        self._open.add(seq)
        return seq

    def take_now(self) -> int:
        """A sequence at once if one is free and nobody waits for one, else 0 (acquire)."""
        if not self._queue and (not self._open or self._room()):
            seq = self.next         # (_take, inline: once per produce)
            self.next += 1
            self._open.add(seq)
            return seq
        return 0

    @property
    def failing(self) -> bool:
        """Some batch's attempt failed and waits to be sent again (turn)."""
        return bool(self._failed)

    async def acquire(self) -> int:
        if not self._queue and self._room():
            return self._take()
        fut = asyncio.get_running_loop().create_future()
        self._queue.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())      # numbered, never sent: given up
            raise

    def release(self, seq: int) -> None:
        self._open.discard(seq)
        self._failed.discard(seq)
        while self._queue and self._room():
            fut = self._queue.popleft()
            if not fut.done():
                fut.set_result(self._take())
        if self._waiters:
            self._notify()

    def failed(self, seq: int) -> None:
        self._failed.add(seq)

    def older_failed(self, seq: int) -> bool:
        return any(s < seq for s in self._failed)

    async def after_error(self, seq: int, e: BaseException, deadline: float) -> bool:
        """Batch `seq`'s attempt failed with a retriable error -> True if an older batch of
        the producer leads the way (its resend goes first: turn holds this one until then),
        False if this batch handles the error itself (redirect, backoff). (Also used by the
        simulated producers of testing/nodesim.py.)"""
        self.failed(seq)
        try:
            if self.older_failed(seq):
                return True
            if isinstance(e, OutOfOrderSequenceError) and self.base() < seq:
                # an older batch is still in flight (not failed yet): once it moves
                await self.changed(deadline)
                return True
        except TimeoutError:
            raise e from None
        return False

    async def turn(self, seq: int, deadline: float) -> None:
        """Until no batch older than `seq` waits to be sent again; then `seq` is being sent
        (TimeoutError at `deadline`, loop time)."""
        while self.older_failed(seq):
            await self.changed(deadline, seq)
        if seq in self._failed:
            self._failed.discard(seq)
            self._notify()

    async def changed(self, deadline: float, seq: int = 0) -> None:
        """Until the next release or resend (TimeoutError at `deadline`). Waiters wake in
        sequence order, so their resends go out oldest first."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, fut))
        try:
            await asyncio.wait_for(fut, max(0.0, deadline - asyncio.get_running_loop().time()))
        finally:
            if not fut.done():
                fut.cancel()

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        waiters.sort(key=lambda w: w[0])
        for _, fut in waiters:
            if not fut.done():
                fut.set_result(None)


_MAX_IMMEDIATE_REDIRECTS = 3    # per request, before the retry backoff applies
# retry backoff: from _FIRST_BACKOFF_S, doubling, up to _ELECTION_BACKOFF_S while no leader is
# known or a member's connection broke (an election: poll the members, as etcd's client
# retries every 25 ms), up to _MAX_BACKOFF_S for an overloaded or slow leader (BACKPRESSURE,
# timeouts). Each pause is drawn from [0.8, 1.2] x the step, so clients that lost one leader
# together do not ask the members in lockstep.
_FIRST_BACKOFF_S = 0.01
_ELECTION_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 0.5
# a connection that broke (the member's process died, or it closed us): not a slow member
_BROKEN = (TransportClosedError, ConnectionError)


class _Retry:
    """One request's retries so far."""
    __slots__ = ("tries", "redirects", "moved", "step")

    def __init__(self):
        self.tries = 0
        self.redirects = 0
        self.moved = False        # retried at once on another member after a broken connection
        self.step = _FIRST_BACKOFF_S

    def backoff(self, cap: float) -> float:
        d = min(self.step, cap)
        self.step = min(self.step * 2, _MAX_BACKOFF_S)
        return d * (0.8 + 0.4 * random.random())


_PRODUCE_SPEC = codec.spec_for(m.ProduceRequest("t", []))
_SEQUENCE_FIELD = [name for name, _ in _PRODUCE_SPEC.fixed].index("sequence")
_BASE_FIELD = [name for name, _ in _PRODUCE_SPEC.fixed].index("base_sequence")
_MAX_HEAD_CACHE = 1024           # (topic, tags) pairs whose encoded header part is kept


def _produce_head_parts(topic, tags) -> bytes:
    """The topic + tags part of a ProduceRequest payload, validated and encoded once per
    (topic, tags) by the codec itself (a producer sends to few topics)."""
    key = (topic, tags)
    v = _HEAD_CACHE.get(key)
    if v is None:
        code, head = codec.encode_payload(m.ProduceRequest(topic, [], -1, tags, 0, 0, 0, 0))
        if len(head) != 1:
            raise QuorumlogError("unexpected produce header layout")
        # fixed fields, topic, tags, the empty bodies list's u32 count 0: keep the middle
        v = head[0][_PRODUCE_SPEC.fixed_struct.size:-4]
        if len(_HEAD_CACHE) >= _MAX_HEAD_CACHE:
            _HEAD_CACHE.clear()
        if type(topic) is str and (tags is None or type(tags) is str):
            _HEAD_CACHE[key] = v
    return v


_HEAD_CACHE: dict = {}


def encode_produce(topic: str, bodies, queue_id: int, tags, producer_id: int, sequence: int,
                   delay_level: int = 0, base_sequence: int = 0) -> list:
    """The ProduceRequest payload (codec.py's layout) as buffers: the fixed fields (checked
    by the codec's own field kinds), topic and tags (encoded once per pair), the bodies by
    the Cython framer (one C loop over the messages)."""
    vals, rest = _encode_produce_parts(topic, bodies, queue_id, tags, producer_id, sequence,
                                       delay_level, base_sequence)
    return [_PRODUCE_SPEC.fixed_struct.pack(*vals) + rest[0], *rest[1:]]


def _encode_produce_parts(topic, bodies, queue_id, tags, producer_id, sequence,
                          delay_level=0, base_sequence=0) -> tuple[list, list]:
    """-> (the fixed fields' values, checked; the payload's buffers after them)."""
    spec = _PRODUCE_SPEC
    vals = [queue_id, delay_level, producer_id, sequence, base_sequence]
    for i, (name, kind) in enumerate(spec.fixed):
        v = vals[i]
        if type(v) is not int or not kind.lo <= v <= kind.hi:
            # (raises naming the field, or converts an IntEnum / numpy integer)
            vals[i] = kind.check(f"{spec.name}.{name}", v, EncodeError)
    body_list = encode_bodies(bodies, m.MAX_BATCH_MESSAGES)
    head = _HEAD_CACHE.get((topic, tags))       # (_produce_head_parts' usual case, inline)
    return vals, [_produce_head_parts(topic, tags) if head is None else head, body_list]


_COALESCE_MAX_MESSAGES = 1024    # single messages per coalesced request
_SMALL_PRODUCE = 64              # (the leader coalesces puts of fewer messages: node.md)
_COALESCE_MAX_BYTES = 1 << 20


class _Group:
    """Single-message produces of one loop turn sent as one batch; each caller's future
    gets its message's slice of the batch's acknowledgement (or the batch's error)."""

    __slots__ = ("bodies", "futures", "nbytes", "task")

    def __init__(self):
        self.bodies: list = []
        self.futures: list = []
        self.nbytes = 0
        self.task: asyncio.Task | None = None

    def distribute(self, task: asyncio.Task) -> None:
        futs = self.futures
        if task.cancelled():
            for f in futs:
                f.cancel()
            return
        exc = task.exception()
        if exc is None:
            r = task.result()
            if len(r.positions) != len(futs):
                exc = QuorumlogError(f"produce acknowledgement names {len(r.positions)} "
                                     f"positions for a batch of {len(futs)}")
        if exc is not None:
            for f in futs:
                if not f.done():
                    f.set_exception(exc)
            return
        for i, f in enumerate(futs):
            if not f.done():
                f.set_result(m.ProduceResponse(r.first_index + i, r.queue_id,
                                               r.first_queue_offset + i, r.store_timestamp_ms,
                                               (r.positions[i],)))


class AsyncClient:
    def __init__(self, addresses, *, client_id: str | None = None, secret=None,
                 cluster_id: str = "quorumlog", insecure: bool = False,
                 request_timeout: float = 10.0, retry_timeout: float = 30.0,
                 producer_id: int | None = None, max_frame_bytes: int = (16 << 20) + 24,
                 connect_timeout: float = 1.0, coalesce: bool = True,
                 max_in_flight: int = m.MAX_PRODUCER_IN_FLIGHT, groups: int | None = 1,
                 topic_queues: int | None = None, trace=None):
        if isinstance(addresses, str):
            addresses = [addresses]
        self.addresses = [_addr(a) for a in addresses]
        if not self.addresses:
            raise QuorumlogError("AsyncClient needs at least one server address")
        self.client_id = client_id or f"client-{random.getrandbits(40):010x}"
        self.auth = AuthConfig(cluster_id, self.client_id, secret, insecure=insecure)
        self.request_timeout = request_timeout
        self.retry_timeout = retry_timeout
        self.producer_id = producer_id if producer_id is not None else \
            random.getrandbits(63) or 1
        self._window = _ProducerWindow(_check_window("max_in_flight", max_in_flight))
        # a member that accepts TCP but does not answer (stopped, overloaded) must not hold
        # a request for long: give up on it after connect_timeout and try the next one
        self.connect_timeout = min(connect_timeout, request_timeout)
        self._tconfig = TransportConfig(max_frame_bytes=max_frame_bytes,
                                        max_send_queue_bytes=max(64 << 20, max_frame_bytes),
                                        handshake_timeout_ms=int(self.connect_timeout * 1000),
                                        connect_timeout_ms=int(self.connect_timeout * 1000))
        self._channel = None
        self._channel_addr = None
        self._leader_addr = None
        self._connecting: asyncio.Lock | None = None
        self._connect_waiters = 0
        self._retiring: set = set()     # channels left for another member, closing once idle
        # single-message produces that start in one loop turn while others are in flight
        # share one request (see produce)
        self.coalesce = coalesce
        self._inflight = 0
        self._groups: dict = {}
        self._group_tasks: set = set()
        self.stats = {"requests": 0, "retries": 0, "redirects": 0, "reconnects": 0,
                      "coalesced_messages": 0}
        # many groups: None until learned from a member (GroupAdminRequest)
        self.groups = None if groups is None else check_groups(groups)
        self.topic_queues = topic_queues
        # trace(event, address, detail), if given, is told each step of a request: "send"
        # an attempt (detail: a retry?), "error" its failure, "sleep" a backoff -- how the
        # bench's failover workload splits a failover into phases
        self._trace = trace
        self._subs: dict[int, AsyncClient] = {}
        self._rr: dict[str, list] = {}    # topic -> [produces so far, start queue]
        self._sub_kw = dict(secret=secret, cluster_id=cluster_id, insecure=insecure,
                            request_timeout=request_timeout, retry_timeout=retry_timeout,
                            max_frame_bytes=max_frame_bytes, connect_timeout=connect_timeout,
                            coalesce=coalesce, max_in_flight=max_in_flight, trace=trace)

    # -- connection --------------------------------------------------------------------------
    async def _connect(self, prefer=None, exact=False):
        ch = self._channel
        if ch is not None and not ch.closed and not self._connect_waiters and (
                prefer is None or prefer == self._channel_addr):
            return ch                 # the usual case: no lock taken per request
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        # while requests wait for the lock, later ones wait behind them: a producer's
        # pipelined batches reach the leader in the order they were sent (the leader takes
        # a producer's sequences in increasing order only)
        self._connect_waiters += 1
        try:
            await self._connecting.acquire()
        finally:
            self._connect_waiters -= 1
        try:
            ch = self._channel
            if ch is not None and not ch.closed and (prefer is None
                                                           or prefer == self._channel_addr):
                return ch
            if ch is not None:
                self._channel = None
                if ch.closed:
                    await ch.close()
                else:       # moving to another member: answers on their way still arrive
                    t = asyncio.get_running_loop().create_task(
                        ch.close_when_idle(self.request_timeout))
                    self._retiring.add(t)
                    t.add_done_callback(self._retiring.discard)
            # then the others from the one after `prefer` on: a client that keeps losing
            # its member moves round the members, not back to the first of the list
            order = ([prefer] if prefer else []) + ([] if exact else _after(self.addresses, prefer))
            last = None
            for host, port in order:
                try:
                    ch = await connect_client(host, port, self.auth,
                                              timeout=self.connect_timeout,
                                              config=self._tconfig)
                except AuthenticationError:
                    raise        # every member shares the credentials: no retry can succeed
                except (OSError, TimeoutError, NetError) as e:
                    last = e
                    if self._trace is not None:
                        self._trace("connect_error", (host, port), type(e).__name__)
                    continue
                self._channel, self._channel_addr = ch, (host, port)
                self.stats["reconnects"] += 1
                return ch
            if isinstance(last, ConnectionLimitError):
                raise last       # (the last member tried is full: say so, not "unreachable")
            raise ConnectionError(f"no server reachable among {order}: {last}")
        finally:
            self._connecting.release()

    def _ready_channel(self, prefer):
        """The channel to send on as it is (it serves `prefer`, None: any member), or None:
        connect first (_connect)."""
        ch = self._channel
        if ch is None or ch.closed or self._connect_waiters or (
                prefer is not None and prefer != self._channel_addr):
            return None
        return ch

    def _send(self, ch, msg, timeout, retry=False):
        """Send `msg` on `ch` -> the awaitable of its response (ClientChannel's exchange)."""
        self.stats["requests"] += 1
        if self._trace is not None:
            self._trace("send", self._channel_addr, retry)
        if isinstance(msg, _EncodedProduce):
            return ch.request_encoded(_PRODUCE_TYPE, msg.parts, timeout or self.request_timeout)
        return ch.request(msg, timeout or self.request_timeout)

    async def _request(self, msg, prefer=None, timeout=None, exact=False, retry=False):
        ch = None if exact else self._ready_channel(prefer)
        if ch is None:
            ch = await self._connect(prefer, exact)
        resp = await self._send(ch, msg, timeout, retry)
        if isinstance(resp, m.ErrorResponse):
            raise resp.to_exception()
        return resp

    async def _with_retries(self, msg, *, to_leader: bool, timeout=None):
        window = getattr(msg, "window", None)
        if window is None or not window.failing:
            # the usual case, first: no retry state, no deadline (asyncio.get_running_loop()
            # is a getpid() system call per request on Python 3.11), no window turn to wait
            started = time.monotonic()
            try:
                return await self._request(msg, self._leader_addr if to_leader else None,
                                           timeout)
            except _RETRYABLE as e:
                first = e
        else:
            started, first = time.monotonic(), None
        return await self._retrying(msg, to_leader, timeout, first,
                                    started + self.retry_timeout - time.monotonic())

    async def _retrying(self, msg, to_leader: bool, timeout, first, left: float):
        """_with_retries after its first attempt failed with `first` (None: it waits for its
        turn first), `left` seconds before the request's retry_timeout runs out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + left
        st = _Retry()
        window = getattr(msg, "window", None)
        trace = self._trace
        while True:
            prefer = self._leader_addr if to_leader else None
            try:
                if first is not None:
                    e, first = first, None
                    raise e
                if window is not None:
                    await window.turn(msg.seq, deadline)
                return await self._request(msg, prefer, timeout, retry=st.tries > 0)
            except _RETRYABLE as e:
                st.tries += 1
                if trace is not None:
                    trace("error", self._channel_addr or prefer,
                          f"{type(e).__name__} {getattr(e, 'leader_address', '') or ''}")
                if window is not None and await window.after_error(msg.seq, e, deadline):
                    self.stats["retries"] += 1
                    continue
                delay = await self._after_failure(e, to_leader, st)
                self.stats["retries"] += 1
                if delay == 0:
                    if loop.time() > deadline:
                        raise
                    continue
                if loop.time() + delay > deadline:
                    raise
                if trace is not None:
                    trace("sleep", None, delay)
                await asyncio.sleep(delay)

    async def _after_failure(self, e: BaseException, to_leader: bool, st: "_Retry") -> float:
        """Where the next attempt of a failed request goes, and after how long (seconds; 0:
        at once). A redirect goes to the named leader at once; a connection that broke is
        retried at once on the next member (a process that died says nothing of the
        others); while no leader is known (an election runs) the members are asked again
        every few tens of ms (the short backoff: an election takes that long when the
        leader's process exited, raft/election.py on_peer_down); an overloaded or slow
        leader gets the long one."""
        if isinstance(e, OutOfOrderSequenceError):
            return st.backoff(_MAX_BACKOFF_S)     # (the leader answered: stay with it)
        if isinstance(e, NotLeaderError):
            addr = getattr(e, "leader_address", None)
            if addr and st.redirects < _MAX_IMMEDIATE_REDIRECTS:
                # a redirect: go to the named leader at once (also when another request
                # moved there already: the pipelined requests behind it must follow it in
                # order, not try the next member after a pause). A few in a row at most:
                # members that disagree on the leader get the backoff.
                st.redirects += 1
                self._leader_addr = _addr(addr)
                self.stats["redirects"] += 1
                return 0
            # (after a few at once: the named leader, or the next member if none is named,
            # after the backoff -- never a rotation away from a named leader)
            self._leader_addr = _addr(addr) if addr else self._next_address()
            return st.backoff(_ELECTION_BACKOFF_S)
        if isinstance(e, (BackpressureError, LeaderTransferringError)):
            return st.backoff(_MAX_BACKOFF_S)
        # the member may be gone: drop the connection, try the others
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        if to_leader:
            self._leader_addr = self._next_address()
        if isinstance(e, _BROKEN) and not st.moved:
            st.moved = True          # (once per request: a dead member is skipped at once)
            return 0
        return st.backoff(_ELECTION_BACKOFF_S if isinstance(e, _BROKEN) else _MAX_BACKOFF_S)

    def _next_address(self):
        cur = self._channel_addr or self._leader_addr
        if cur in self.addresses:
            return self.addresses[(self.addresses.index(cur) + 1) % len(self.addresses)]
        return self.addresses[0]

    # -- groups ------------------------------------------------------------------------------
    async def _learn_groups(self) -> int:
        if self.groups is None:
            r = await self._with_retries(m.GroupAdminRequest(0, m.AdminOp.STATUS),
                                         to_leader=False)
            self.groups = r.groups
        return self.groups

    async def _route(self, topic: str, queue_id: int) -> "AsyncClient | None":
        """The sub-client of the group that holds (topic, queue_id); None: one group (this
        client serves it)."""
        groups = self.groups or await self._learn_groups()
        if groups == 1:
            return None
        g = group_of(topic, queue_id, groups)
        sub = self._subs.get(g)
        if sub is None:
            sub = self._subs[g] = AsyncClient(self.addresses, client_id=f"{self.client_id}-g{g}",
                                              groups=1, **self._sub_kw)
        return sub

    def _choose_queue(self, topic: str, small: bool) -> int:
        """queue_id -1 with many groups: round-robin over the topic's queues, 32 small
        produces (under 64 messages) in a row to one queue -- concurrent ones coalesce,
        here and in the leader (node.md "Coalescing") -- and one large batch per queue."""
        nq = self.topic_queues or max(4, self.groups)
        rr = self._rr.get(topic)
        if rr is None:
            # each client starts at a queue of its own (from its id): clients that all began
            # at queue 0 moved from queue to queue in step, so all of them wrote to one group
            # -- one leader -- at a time (bench cluster --groups 8, 16 single-message
            # producers)
            rr = self._rr[topic] = [0, fnv1a64(f"{self.client_id}/{topic}".encode())]
        k = rr[0]
        rr[0] = k + 1
        return (((k >> 5) if small else k) + rr[1]) % nq

    async def group_status(self, group: int, address=None) -> m.GroupAdminResponse:
        """The status of `group` on `address` (default: the member we are connected to)."""
        return await self._request(m.GroupAdminRequest(group, m.AdminOp.STATUS),
                                   _addr(address) if address else None, exact=bool(address))

    async def close(self) -> None:
        for sub in list(self._subs.values()):
            await sub.close()
        self._subs.clear()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        for t in list(self._retiring):
            t.cancel()
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # -- produce -----------------------------------------------------------------------------
    @property
    def max_in_flight(self) -> int:
        return self._window.limit

    async def produce(self, topic: str, bodies, *, queue_id: int = -1,
                      tags: str | None = None) -> m.ProduceResponse:
        """Append one message (bytes) or a batch (list of bytes) to one queue of `topic`
        (queue_id -1: the server picks, round-robin per batch). Returns once committed;
        IncompleteAcknowledgementError if the answer does not name every message.

        One message while other produces of this client are in flight (many concurrent
        producers on one client): it waits for the end of the loop turn and goes in one
        request with the other single messages of that turn for the same topic, queue and
        tags (one batch: one sequence number, one queue, retried as a whole); each caller
        gets its own message's acknowledgement. `coalesce=False` turns this off.

        Waits first while max_in_flight batches of this client are unresolved (module
        docstring); its sequence is taken when it is sent."""
        if self.groups != 1:
            small = isinstance(bodies, (bytes, bytearray, memoryview)) or \
                len(bodies) < _SMALL_PRODUCE
            if self.groups is None:
                await self._learn_groups()
            if self.groups > 1:
                if queue_id < 0:
                    queue_id = self._choose_queue(topic, small)
                sub = await self._route(topic, queue_id)
                return await sub.produce(topic, bodies, queue_id=queue_id, tags=tags)
        if isinstance(bodies, (bytes, bytearray, memoryview)):
            if self.coalesce and self._inflight:
                return await self._produce_coalesced(topic, bodies, queue_id, tags)
            bodies = [bodies]
        elif not isinstance(bodies, (list, tuple)):
            bodies = list(bodies)
        return await self._produce_batch(topic, bodies, queue_id, tags)

    async def _produce_batch(self, topic, bodies, queue_id, tags) -> m.ProduceResponse:
        # (encoded before a sequence is taken: bad input costs no sequence)
        vals, rest = _encode_produce_parts(topic, bodies, queue_id, tags, self.producer_id, 0)
        w = self._window
        self._inflight += 1
        try:
            seq = w.take_now() or await w.acquire()
            try:
                vals[_SEQUENCE_FIELD] = seq
                ch = None if w._failed or self._trace is not None else \
                    self._ready_channel(self._leader_addr)
                if ch is None:
                    r = await self._with_retries(_EncodedProduce(vals, rest, w, seq),
                                                 to_leader=True)
                else:
                    # _with_retries' first attempt, inline: _send's, without its and
                    # _request's coroutine frames and the message object (~7 Python calls)
                    started = time.monotonic()
                    self.stats["requests"] += 1
                    try:
                        r = await ch.request_encoded(
                            _PRODUCE_TYPE, _produce_frame_parts(vals, rest, w),
                            self.request_timeout)
                        if isinstance(r, m.ErrorResponse):
                            raise r.to_exception()
                    except _RETRYABLE as e:
                        r = await self._retrying(_EncodedProduce(vals, rest, w, seq), True,
                                                 None, e, started + self.retry_timeout -
                                                 time.monotonic())
            finally:
                w.release(seq)      # acknowledged, or given up: the next ones go on
        finally:
            self._inflight -= 1
        if len(r.positions) != len(bodies):
            raise IncompleteAcknowledgementError(
                f"produce to {topic!r} (producer {self.producer_id}, sequence {seq}): the "
                f"server acknowledged {len(r.positions)} positions for {len(bodies)} "
                "messages; the batch is not known to be stored whole", r)
        return r

    async def _produce_coalesced(self, topic, body, queue_id, tags) -> m.ProduceResponse:
        loop = asyncio.get_running_loop()
        key = (topic, queue_id, tags)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group()
            loop.call_soon(self._send_group, key, group)
        fut = loop.create_future()
        group.bodies.append(body)
        group.futures.append(fut)
        group.nbytes += len(body)
        if len(group.bodies) >= _COALESCE_MAX_MESSAGES or group.nbytes >= _COALESCE_MAX_BYTES:
            self._send_group(key, group)
        return await fut

    def _send_group(self, key, group: "_Group") -> None:
        if group.task is not None:
            return                       # sent already (full before the turn ended)
        if self._groups.get(key) is group:
            del self._groups[key]
        topic, queue_id, tags = key
        self.stats["coalesced_messages"] += len(group.bodies)
        group.task = asyncio.get_running_loop().create_task(
            self._produce_batch(topic, group.bodies, queue_id, tags))
        group.task.add_done_callback(group.distribute)
        self._group_tasks.add(group.task)
        group.task.add_done_callback(self._group_tasks.discard)

    async def produce_many(self, topic: str, batches, *, window: int = 8, queue_id: int = -1,
                           tags: str | None = None) -> list:
        """Produce every batch of `batches`, at most `window` (<= max_in_flight) in flight;
        results in order."""
        if _check_window("window", window) > self.max_in_flight:
            raise InvalidArgumentError(f"window={window} > this client's max_in_flight="
                                       f"{self.max_in_flight}")
        sem = asyncio.Semaphore(window)

        async def one(b):
            async with sem:
                return await self.produce(topic, b, queue_id=queue_id, tags=tags)
        return await asyncio.gather(*(one(b) for b in batches))

    # -- reads -------------------------------------------------------------------------------
    async def fetch(self, topic: str, queue_id: int, offset: int, *, max_messages: int = 32,
                    max_bytes: int = 1 << 20, wait_ms: int = 0) -> FetchResult:
        """Messages of (topic, queue) from `offset`; wait_ms > 0 long-polls for the first."""
        if self.groups != 1 and (sub := await self._route(topic, queue_id)) is not None:
            return await sub.fetch(topic, queue_id, offset, max_messages=max_messages,
                                   max_bytes=max_bytes, wait_ms=wait_ms)
        req = m.FetchRequest(topic, queue_id, offset, max_messages, max_bytes, wait_ms)
        resp = await self._with_retries(req, to_leader=False,
                                        timeout=self.request_timeout + wait_ms / 1000)
        return FetchResult(resp.next_offset, resp.min_offset, resp.max_offset,
                           decode_fetched(resp.records))

    async def offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        if self.groups != 1 and (sub := await self._route(topic, queue_id)) is not None:
            return await sub.offsets(topic, queue_id)
        r = await self._with_retries(m.OffsetsRequest(topic, queue_id), to_leader=False)
        return r.min_offset, r.max_offset

    async def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        if self.groups != 1 and (sub := await self._route(topic, queue_id)) is not None:
            return await sub.offset_for_timestamp(topic, queue_id, timestamp_ms)
        r = await self._with_retries(m.OffsetsRequest(topic, queue_id, timestamp_ms),
                                     to_leader=False)
        return r.offset_for_timestamp

    async def get(self, topic: str, queue_id: int, offset: int, max_messages: int = 32, *,
                  wait_ms: int = 0) -> list:
        """The store's get(): the messages of (topic, queue) from `offset` (long-polls
        wait_ms for the first one)."""
        return (await self.fetch(topic, queue_id, offset, max_messages=max_messages,
                                 wait_ms=wait_ms)).messages

    # -- consumers (the store's consumer API) --------------------------------------------------
    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit `group`'s progress on (topic, queue_id) (the next offset it will read):
        replicated through the log, returns once committed on a majority."""
        if type(offset) is not int or offset < 0:
            raise InvalidArgumentError(f"offset must be an int >= 0, got {offset!r}")
        if self.groups != 1 and (sub := await self._route(topic, queue_id)) is not None:
            return await sub.commit_offset(group, topic, queue_id, offset)
        await self._with_retries(m.ConsumerOffsetRequest(group, topic, queue_id, offset),
                                 to_leader=True)

    async def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The offset `group` last committed for (topic, queue_id) (None: never), as the
        member the client is connected to applied it (after a commit_offset: the leader)."""
        if self.groups != 1 and (sub := await self._route(topic, queue_id)) is not None:
            return await sub.committed_offset(group, topic, queue_id)
        r = await self._with_retries(m.ConsumerOffsetRequest(group, topic, queue_id, -1),
                                     to_leader=False)
        return None if r.offset < 0 else r.offset

    async def find_by_key(self, topic: str, key: str, max_hits: int = 32) -> list:
        """Committed messages of `topic` whose keys include `key`, newest first."""
        r = await self._with_retries(m.FindByKeyRequest(topic, key, max_hits), to_leader=False)
        return decode_fetched(r.records)

    # -- admin -------------------------------------------------------------------------------
    async def status(self, address=None) -> m.AdminResponse:
        """The status of `address` (default: the member we are connected to)."""
        return await self._request(m.AdminRequest(m.AdminOp.STATUS),
                                   _addr(address) if address else None, exact=bool(address))

    async def members(self) -> tuple:
        return (await self._with_retries(m.AdminRequest(m.AdminOp.STATUS),
                                         to_leader=False)).voters

    async def transfer_leadership(self, to: str) -> m.AdminResponse:
        return await self._with_retries(m.AdminRequest(m.AdminOp.TRANSFER_LEADERSHIP, to),
                                        to_leader=True)

    async def add_member(self, node_id: str, peer_address: str) -> m.AdminResponse:
        return await self._with_retries(
            m.AdminRequest(m.AdminOp.ADD_MEMBER, node_id, peer_address), to_leader=True)

    async def remove_member(self, node_id: str) -> m.AdminResponse:
        return await self._with_retries(m.AdminRequest(m.AdminOp.REMOVE_MEMBER, node_id),
                                        to_leader=True)


class Client:
    """AsyncClient for plain threads: its own event loop in a background thread."""

    def __init__(self, addresses, **kw):
        self._ac = AsyncClient(addresses, **kw)       # (bad arguments: no thread started)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="quorumlog-client",
                                        daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def aclient(self) -> AsyncClient:
        return self._ac

    @property
    def producer_id(self) -> int:
        return self._ac.producer_id

    def _run(self, coro):
        if self._closed:
            coro.close()
            raise QuorumlogError("client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def produce(self, topic, bodies, **kw):
        return self._run(self._ac.produce(topic, bodies, **kw))

    def produce_many(self, topic, batches, **kw):
        return self._run(self._ac.produce_many(topic, batches, **kw))

    def fetch(self, topic, queue_id, offset, **kw) -> FetchResult:
        return self._run(self._ac.fetch(topic, queue_id, offset, **kw))

    def offsets(self, topic, queue_id):
        return self._run(self._ac.offsets(topic, queue_id))

    def offset_for_timestamp(self, topic, queue_id, timestamp_ms):
        return self._run(self._ac.offset_for_timestamp(topic, queue_id, timestamp_ms))

    def get(self, topic, queue_id, offset, max_messages=32, **kw) -> list:
        return self._run(self._ac.get(topic, queue_id, offset, max_messages, **kw))

    def commit_offset(self, group, topic, queue_id, offset) -> None:
        return self._run(self._ac.commit_offset(group, topic, queue_id, offset))

    def committed_offset(self, group, topic, queue_id):
        return self._run(self._ac.committed_offset(group, topic, queue_id))

    def find_by_key(self, topic, key, max_hits=32) -> list:
        return self._run(self._ac.find_by_key(topic, key, max_hits))

    def status(self, address=None):
        return self._run(self._ac.status(address))

    def group_status(self, group, address=None):
        return self._run(self._ac.group_status(group, address))

    def members(self):
        return self._run(self._ac.members())

    def transfer_leadership(self, to):
        return self._run(self._ac.transfer_leadership(to))

    def add_member(self, node_id, peer_address):
        return self._run(self._ac.add_member(node_id, peer_address))

    def remove_member(self, node_id):
        return self._run(self._ac.remove_member(node_id))

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._run(self._ac.close())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
