"""The client listener of a replica: `ClientService` serves the client protocol
(quorumlog.net.messages: produce, fetch with long-poll, offsets, admin) for one Node on its
own listener (client_addr). `quorumlog serve` (quorumlog.server) and `open_replica` run it
next to the node.

Requests on a follower: reads (fetch, offsets, status) are served from its own committed,
dispatched data; writes and leadership/membership changes answer NOT_LEADER with the leader's
id and client address, which clients follow.

Many groups (node/host.py NodeHost): each request goes to the Node of the group that holds
its (topic, queue) (node/groups.py); a NOT_LEADER then names that group's leader. Find by
key asks every group; AdminRequest is group 0's, GroupAdminRequest names its group.
"""
from __future__ import annotations

import asyncio
import logging
import time

from ..errors import ConfigError, InvalidArgumentError, QuorumlogError
from ..net import codec
from ..net import messages as m
from ..net.auth import AuthConfig
from ..net.errors import NetError
from ..net.transport import PeerTransport, TransportConfig
from ..store.writes import BatchResult
from .config import NodeConfig, parse_address, read_secret
from .driver import Node
from .host import NodeHost
from .pipeline import SyncFuture

log = logging.getLogger(__name__)

__all__ = ["ClientService", "records_next"]

# the produce acknowledgement's whole-frame encoder (codec.encode's fast path, called without
# codec.encode's frame): None -> codec.encode decides
_ACK_ENCODE = codec.frame_encoders(codec.CLIENT)[m.ProduceResponse].encode


class ClientService:
    """Serves client connections for one Node on its own listener (client_addr)."""

    def __init__(self, node: Node | NodeHost, cfg: NodeConfig):
        # a NodeHost: requests are routed to its groups' Nodes; a Node: it serves them all
        self.host = node if isinstance(node, NodeHost) else None
        self._node = None if self.host is not None else node
        self.cfg = cfg
        self.transport: PeerTransport | None = None
        self._rr: dict[str, list] = {}     # topic -> [requests that let us choose, queue]
        self._tasks: set = set()
        # the loop it serves on (start): asyncio.get_running_loop() makes a getpid() system
        # call on every call (Python 3.11), once per reply on the produce path
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stats = {"requests": 0, "errors": 0}
        # one group: a server-chosen queue's run needs no routing (_on_request)
        self._one_group = self.host is None or self.host.groups == 1
        # per _hold_answers not yet matched by its _write_answers: whether it took the hold
        self._holds: list[bool] = []

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for node in (self.host.nodes if self.host is not None else [self._node]):
            node.pipeline.on_completing = self._hold_answers
            node.pipeline.on_completed = self._write_answers
        cfg = self.cfg
        secret = read_secret(cfg)
        auth = AuthConfig(cfg.cluster_id, cfg.node_id, secret,
                          client_secret=cfg.client_secret or secret, peers=(),
                          accept_clients=True, insecure=cfg.insecure)
        host, port = parse_address(cfg.client_addr, "client_addr")
        tcfg = TransportConfig(max_frame_bytes=cfg.max_frame_bytes,
                               handshake_timeout_ms=cfg.handshake_timeout_ms,
                               max_send_queue_bytes=max(64 << 20, cfg.max_frame_bytes),
                               max_clients=cfg.max_client_connections,
                               client_idle_evict_ms=cfg.client_idle_evict_ms,
                               max_buffered_frame_bytes=max(cfg.max_client_buffered_bytes,
                                                            cfg.max_frame_bytes),
                               frame_timeout_ms=cfg.client_frame_timeout_ms)
        self.transport = PeerTransport(cfg.node_id, auth, self._on_peer_message,
                                       listen=(host, port), peers={}, config=tcfg,
                                       on_client_request=self._on_request)
        await self.transport.start()

    @property
    def address(self):
        return self.transport.address if self.transport is not None else None

    @property
    def node(self) -> Node:
        """The single group's Node (group 0 of a host)."""
        return self._node if self.host is None else self.host.nodes[0]

    def node_for(self, topic: str, queue_id: int) -> Node:
        return self._node if self.host is None else self.host.node_for(topic, queue_id)

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.transport is not None:
            await self.transport.close()

    @staticmethod
    def _on_peer_message(peer, msg) -> None:   # (no peers on the client listener)
        log.warning("client listener: unexpected peer message from %r dropped", peer)

    def _on_request(self, conn, request_id: int, msg) -> None:
        """A client request. A produce starts at once (the node's put_batch_future) and is
        answered as its future completes (a SyncFuture: in the loop turn that applied it):
        per request no task, no coroutine frames, no done-callback."""
        self.stats["requests"] += 1
        if type(msg) is not m.ProduceRequest:
            t = self._loop.create_task(self._serve(conn, request_id, msg))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
            return
        # answered as the put completes (in the loop turn that applied it), however it does
        reply = SyncFuture(self._answer, conn, request_id, msg, loop=self._loop)
        try:
            qid = msg.queue_id
            if qid < 0 or msg.delay_level:
                rr = None if msg.delay_level else self._rr.get(msg.topic)
                if rr is not None and rr[0] & 31 and self._one_group:
                    qid = rr[1]     # (the run's queue: no lookup of the topic per request)
                    rr[0] += 1
                else:               # (a run's first request; a delay level raises)
                    qid = self._chosen_queue(msg)
            node = self._node if self.host is None else self.host.node_for(msg.topic, qid)
            # (the node's pipeline itself: Node.put_batch_future only passes the call on)
            fut = node.pipeline.put_batch_future(
                msg.topic, msg.bodies, future=reply, queue_id=qid, tags=msg.tags,
                producer_id=msg.producer_id, sequence=msg.sequence,
                base_sequence=msg.base_sequence)
        except Exception as e:
            self._reply_later(conn, request_id, self._error_response(conn, msg, e))
            return
        if fut is not reply:    # (a retry, or a new leader's table read: a future of its own)
            fut.add_done_callback(lambda f: self._answer(f, conn, request_id, msg))

    def _answer(self, fut, conn, request_id: int, req) -> None:
        """Reply to a completed produce (its result, error or cancellation). Called from
        inside the node's apply (SyncFuture): it must not raise into it, whatever the
        result. An acknowledgement goes by its whole-frame encoder (without codec.encode's
        frame; None: declined, _reply_later's codec.encode decides)."""
        try:
            try:
                r = fut.result()        # (one call: no cancelled() / exception() first)
            except (Exception, asyncio.CancelledError) as e:
                self._reply_later(conn, request_id, self._error_response(conn, req, e))
                return
            resp = self._produce_response(r)
            parts = _ACK_ENCODE(resp, request_id, 0, self.cfg.max_frame_bytes,
                                codec.ZERO_COPY_MIN_BYTES)
            if parts is None:
                self._reply_later(conn, request_id, resp)
            elif not conn.send_parts(parts, control=False):
                log.debug("client %r: reply dropped (connection closed or its send budget "
                          "full)", conn.client_id)
        except Exception:
            log.exception("client %r: cannot answer a produce", conn.client_id)

    def _hold_answers(self) -> None:
        """The pipeline is about to complete proposals (Pipeline.on_completing): hold what
        is sent to the clients until _write_answers, so that an answer leaves with no
        end-of-turn write scheduled for it (a loop callback per answered connection, run in
        a turn of its own after the answers were written). A hold already on (hold_writes
        False) is its taker's to release: this pair then releases nothing."""
        t = self.transport
        self._holds.append(t is not None and t.hold_writes())

    def _write_answers(self) -> None:
        """The pipeline completed proposals (Pipeline.on_completed, in the loop turn of the
        commit): write the acknowledgements queued since, one write per connection, now --
        not at the end of the turn, after the rest of the commit's work -- if the matching
        _hold_answers took the hold."""
        if self._holds.pop():
            self.transport.release_writes()

    def _error_response(self, conn, req, e: BaseException) -> m.ErrorResponse:
        """The ErrorResponse for a failed request (what _serve answers)."""
        if isinstance(e, TimeoutError):
            return m.ErrorResponse(m.ErrorCode.TIMEOUT, str(e) or "timed out")
        self.stats["errors"] += 1
        if not isinstance(e, QuorumlogError):
            log.error("client %r: request %s failed", conn.client_id, type(req).__name__,
                      exc_info=e)
        return m.ErrorResponse.from_exception(e)

    def _reply_later(self, conn, request_id: int, resp) -> None:
        """Queue a reply: the transport writes every frame of one loop turn to one
        connection as one write (a round of 64 coalesced puts would otherwise cost 64
        send() calls; transport.stats()["client_writes"] counts them). (A produce's
        acknowledgement takes _answer's whole-frame encoder first.)"""
        try:
            parts = codec.encode(resp, request_id, max_frame_bytes=self.cfg.max_frame_bytes)
        except NetError:
            log.exception("cannot encode a reply to client %r", conn.client_id)
            return
        if not conn.send_parts(parts, control=False):
            log.debug("client %r: reply dropped (connection closed or its send budget "
                      "full)", conn.client_id)

    async def _serve(self, conn, request_id: int, msg) -> None:
        try:
            if isinstance(msg, m.FetchRequest):
                resp = await self._fetch(msg)
            elif isinstance(msg, m.OffsetsRequest):
                resp = self._offsets(msg)
            elif isinstance(msg, m.AdminRequest):
                resp = await self._admin(msg)
            elif isinstance(msg, m.GroupAdminRequest):
                resp = await self._group_admin(msg)
            elif isinstance(msg, m.ConsumerOffsetRequest):
                resp = await self._consumer_offset(msg)
            elif isinstance(msg, m.FindByKeyRequest):
                resp = self._find_by_key(msg)
            else:
                raise m.UnsupportedRequestError(f"{type(msg).__name__} is not a request")
        except asyncio.CancelledError:
            raise
        except TimeoutError as e:
            resp = m.ErrorResponse(m.ErrorCode.TIMEOUT, str(e) or "timed out")
        except Exception as e:
            self.stats["errors"] += 1
            if not isinstance(e, QuorumlogError):
                log.exception("client %r: request %s failed", conn.client_id, type(msg).__name__)
            resp = m.ErrorResponse.from_exception(e)
        conn.reply(request_id, resp)

    def _chosen_queue(self, req: m.ProduceRequest) -> int:
        """The queue of a produce (_on_request, outside a run of one group's server-chosen
        queue, which it takes inline); a delay level raises."""
        if req.delay_level:
            raise InvalidArgumentError("delay levels are not served by the replicated "
                                       "client protocol yet")
        qid = req.queue_id
        if qid < 0:
            # the whole batch goes to one queue (round-robin per batch), so the response's
            # (queue_id, first_queue_offset) names every message of it; 32 requests in a row
            # to one queue (a run; one group: _on_request takes the run's queue without this
            # call): concurrent small puts to one queue coalesce into one proposal
            # (Pipeline._queue_put); over time every queue gets its share
            rr = self._rr.get(req.topic)        # [requests to the topic, their queue]
            node = self.node
            nq = node.store.queue_count(req.topic) or node.store_cfg.default_topic_queues
            k = 0 if rr is None else rr[0]
            qid = (k >> 5) % nq
            if not self._one_group:
                qid = self._led_queue(req.topic, nq, k >> 5)
            self._rr[req.topic] = [k + 1, qid]
        return qid

    def _led_queue(self, topic: str, nq: int, k: int) -> int:
        """Many groups, a produce that lets the server choose: the k-th (round-robin) of the
        topic's queues whose group this member leads (none: of a group it opened, whose
        Node answers NOT_LEADER naming its leader; NodeHost.pick_queue)."""
        q = self.host.pick_queue(topic, nq, k)
        return k % nq if q is None else q

    @staticmethod
    def _produce_response(r) -> m.ProduceResponse:
        if type(r) is BatchResult or hasattr(r, "positions"):   # (the first: no call)
            # positions: the batch's int64 array as it is -- encoded in one C pass
            # (codec._OneAckFrame), not as a tuple of Python ints packed one by one
            return m.ProduceResponse(r.first_index, int(r.queue_ids[0]),
                                     int(r.queue_offsets[0]), r.store_timestamp_ms,
                                     r.positions)
        return m.ProduceResponse(r.index, r.queue_id, r.queue_offset, r.store_timestamp_ms,
                                 (r.position,))

    async def _fetch(self, req: m.FetchRequest) -> m.FetchResponse:
        node = self.node_for(req.topic, req.queue_id)
        st = node.store
        wait = min(req.wait_ms, self.cfg.max_fetch_wait_ms) / 1000
        deadline = time.monotonic() + wait
        while True:
            msgs = st.get(req.topic, req.queue_id, req.offset, req.max_messages)
            if msgs or time.monotonic() >= deadline:
                break
            await node.wait_for_data(max(0.0, deadline - time.monotonic()))
        records, total = [], 0
        for msg in msgs:
            raw = msg.raw()
            if records and total + raw.nbytes > req.max_bytes:
                break
            records.append(raw)
            total += raw.nbytes
        nxt = records_next(msgs, len(records)) if records else req.offset
        return m.FetchResponse(nxt, st.min_offset(req.topic, req.queue_id),
                               st.max_offset(req.topic, req.queue_id), records)

    def _offsets(self, req: m.OffsetsRequest) -> m.OffsetsResponse:
        st = self.node_for(req.topic, req.queue_id).store
        ts = -1
        if req.timestamp_ms >= 0:
            ts = st.offset_for_timestamp(req.topic, req.queue_id, req.timestamp_ms)
        return m.OffsetsResponse(st.min_offset(req.topic, req.queue_id),
                                 st.max_offset(req.topic, req.queue_id), ts)

    async def _consumer_offset(self, req: m.ConsumerOffsetRequest) -> m.ConsumerOffsetResponse:
        """A commit goes through the Raft core (leader only, else NOT_LEADER); a read is
        served from this member's applied offsets."""
        node = self.node_for(req.topic, req.queue_id)   # (offsets live with their queue)
        if req.offset >= 0:
            await node.commit_offsets(req.group, [(req.topic, req.queue_id, req.offset)])
        got = node.store.committed_offset(req.group, req.topic, req.queue_id)
        return m.ConsumerOffsetResponse(-1 if got is None else got)

    def _find_by_key(self, req: m.FindByKeyRequest) -> m.FindByKeyResponse:
        nodes = self.host.nodes if self.host is not None else [self._node]
        msgs = []
        for node in nodes:      # (a key may be on any queue of the topic: every group)
            msgs.extend(node.store.find_by_key(req.topic, req.key, req.max_hits))
        if len(nodes) > 1:
            msgs.sort(key=lambda x: x.store_timestamp_ms, reverse=True)
        return m.FindByKeyResponse([msg.raw() for msg in msgs[:req.max_hits]])

    async def _group_admin(self, req: m.GroupAdminRequest) -> m.GroupAdminResponse:
        if self.host is None:
            if req.group != 0:
                raise m.UnknownGroupError(f"node {self.cfg.node_id} hosts group 0 only, not "
                                          f"{req.group}")
            node, groups = self._node, 1
        else:
            node, groups = self.host.node(req.group), self.host.groups
        await self._admin(req, node)
        s = self.status_response(node)
        return m.GroupAdminResponse(groups, req.group, s.node_id, s.role, s.term, s.leader_id,
                                    s.leader_address, s.commit_index, s.last_index, s.voters,
                                    ready_to_serve=s.ready_to_serve)

    async def _admin(self, req, node: Node | None = None) -> m.AdminResponse:
        node = node or self.node
        op = req.op
        if op == m.AdminOp.TRANSFER_LEADERSHIP:
            if not req.node_id:
                raise InvalidArgumentError("transfer_leadership needs a node id")
            node.transfer_leadership(req.node_id)
        elif op == m.AdminOp.ADD_MEMBER:
            if not req.node_id or not req.address:
                raise InvalidArgumentError("add_member needs a node id and its peer address")
            try:   # bad input is the caller's: INVALID_ARGUMENT naming it, nothing changed
                parse_address(req.address, f"peer address of {req.node_id!r}")
            except ConfigError as e:
                raise InvalidArgumentError(str(e)) from None
            node.add_member(req.node_id, req.address)
        elif op == m.AdminOp.REMOVE_MEMBER:
            if not req.node_id:
                raise InvalidArgumentError("remove_member needs a node id")
            node.remove_member(req.node_id)
        return self.status_response(node)

    def status_response(self, node: Node | None = None) -> m.AdminResponse:
        node = node or self.node
        core = node.core
        lid = core.leader_id
        return m.AdminResponse(node.id, int(core.role), core.term, lid,
                               self.cfg.client_addrs.get(lid) if lid else None,
                               core.commit_index, node.store.commitlog.last_index,
                               tuple(core.voters), ready_to_serve=bool(node.ready_to_serve))


def records_next(msgs, n: int) -> int:
    """The queue offset after the n-th message returned."""
    return msgs[n - 1].queue_offset + 1
