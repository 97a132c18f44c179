"""The asyncio TCP transport between replicas (and the server side of client connections).

Thin by design: the bytes are framing.FrameDecoder's job, the messages codec.py's, the
handshake auth.Handshake's; this module moves bytes between them and the sockets.

    PeerTransport(node_id, auth, on_message, listen=("0.0.0.0", 9000), peers={id: (host, port)})
    await t.start()
    t.send(peer_id, message) -> bool     # False: dropped (no connection, or backpressure)
    on_message(peer_id, message)         # called in the event loop for every message
    await t.close();  t.stats()

* One connection per peer pair: both sides dial; when both connections authenticate, the
  one initiated by the lower node id wins on both sides (the other is retired: half-closed,
  and read until the peer closes it too, so nothing the peer sent on it is lost). With
  `control_lane`, a second one per pair (role PEER_CONTROL, same handshake, same rule)
  carries the CONTROL-lane Raft messages (votes, heartbeats, their answers, timeout-now), so
  a backlogged data connection never holds up the heartbeats that keep a leader in office.
* Reconnect with exponential backoff and jitter while the peer is a member.
  `on_peer_lost(peer_id, refused)`, when set, hears of a peer lost: a connection of its
  closed (refused False), or a dial refused (True: ECONNREFUSED, nothing listens at its
  address -- its process is gone; a partition or a dead host times out instead). The node
  gives up a leader whose process is gone at once (raft/election.py on_peer_down).
* asyncio.BufferedProtocol: the kernel writes straight into the decoder's buffer; a large
  APPEND payload lands in a buffer of its own and reaches on_message as a memoryview of it.
* Every connection authenticates first (HMAC handshake, handshake_timeout_ms), with small
  frames only (handshake_max_frame_bytes), and at most max_unauthenticated inbound
  connections may be in that state at once: a newcomer evicts the oldest that has not sent
  its HELLO (within hello_timeout_ms), so a flood cannot lock replicas or clients out.
  At most max_clients client connections (the one idle longest gives way); their large
  frames share a budget (max_buffered_frame_bytes) and must finish in frame_timeout_ms.
  Refused connections are logged rate-limited (net/ratelog.py), naming address and reason.
* Flow control: per peer, the bytes we hold for it (our queue + the transport's write
  buffer) never exceed max_send_queue_bytes (+ control_reserve_bytes for small Raft
  control messages, which also jump the queue of bulk APPENDs); past that `send` drops the
  message and counts it: Raft tolerates loss, and a stalled follower cannot grow the
  leader's memory.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
import socket
import ssl as _ssl
import sys
from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigError
from ..raft.messages import CONTROL, DATA, Append
from . import codec
from .auth import AuthConfig, Handshake
from . import messages as m
from .errors import (AuthError, CodecError, FrameTimeoutError, FrameTooLargeError,
                     HandshakeTimeoutError, NetError, ProtocolError, TooManyConnectionsError,
                     TransportClosedError)
from .framing import (DEFAULT_MAX_FRAME_BYTES, DEFAULT_RECV_BUFFER_BYTES, HEADER_SIZE,
                      BufferPool, FrameDecoder, encode_header)
from .messages import PEER_ROLES, RejectReason, Role, check_node_id
from .ratelog import RateLimitedLog
from .seam import report_peer_lost

log = logging.getLogger(__name__)

__all__ = ["TransportConfig", "PeerTransport", "ClientChannel", "connect_client"]

# frames up to this size are joined into one write (one syscall, one segment)
_JOIN_BELOW_BYTES = 64 << 10
# the most buffers one writev takes (Linux's IOV_MAX); a turn with more goes the
# transport's way
try:
    _MAX_IOV = min(os.sysconf("SC_IOV_MAX"), 1024)
except (AttributeError, ValueError, OSError):
    _MAX_IOV = 16


@dataclass
class TransportConfig:
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    handshake_max_frame_bytes: int = 4096
    handshake_timeout_ms: int = 5000
    max_unauthenticated: int = 64          # inbound connections still in their handshake
    max_send_queue_bytes: int = 64 << 20   # per peer: our queue + the transport's buffer
    control_reserve_bytes: int = 1 << 20   # extra room for non-APPEND messages
    write_high_water_bytes: int = 1 << 20  # asyncio pause_writing threshold
    write_low_water_bytes: int = 256 << 10
    connect_timeout_ms: int = 2000
    reconnect_initial_ms: int = 50
    reconnect_max_ms: int = 2000
    large_payload_bytes: int = 64 << 10    # payloads this big get a buffer of their own
    # A new connection from a peer replaces the one we hold if that one has received nothing
    # for this long: the peer dials only when it has no connection, so ours is half-open
    # (the peer restarted or its host died without a FIN). Below it, the lower-id rule.
    replace_silent_after_ms: int = 1000
    # The losing one of two duplicate connections is half-closed, not closed: the peer may
    # not have resolved the pair yet and still send on it. We read (and deliver) until the
    # peer closes it too, for at most this long (docs/net.md "Connections").
    duplicate_drain_ms: int = 2000
    # Dial a second connection per peer for CONTROL-lane Raft messages (raft.messages.lane).
    # Off: everything shares one connection (a peer's control connection is still accepted).
    control_lane: bool = False
    control_max_frame_bytes: int = 4096            # a vote or a heartbeat is under 100 bytes
    control_max_send_queue_bytes: int = 256 << 10  # per peer, on its control connection
    # peer frames may name a Raft group (the header's group field; a process hosting many
    # groups, node/host.py): off, a nonzero group from a peer is a FrameError
    allow_groups: bool = False
    # -- limits against floods (docs/net.md "Limits") -------------------------------------
    max_clients: int = 1024               # client connections past their HELLO, at once
    # at max_clients, a new client takes the place of the one idle longest (nothing received
    # or sent) if that one has been idle this long; else it is refused
    client_idle_evict_ms: int = 5000
    hello_timeout_ms: int = 1000          # accept -> the initiator's AUTH_HELLO
    max_handshakes_per_peer: int = 2      # inbound handshakes claiming one peer id and role
    # per listener: bytes reserved for large client frames not received whole yet; past it
    # a connection stops being read until another's frame ends (or times out)
    max_buffered_frame_bytes: int = 32 << 20
    frame_timeout_ms: int = 10_000        # a large client frame's header -> its last byte
    client_recv_buffer_bytes: int = 16 << 10  # a client connection's receive buffer
    client_large_payload_bytes: int = 8 << 10
    log_interval_ms: int = 10_000         # connection-event lines: a summary per interval
    log_burst: int = 5                    # lines logged one by one per interval

    def validate(self) -> "TransportConfig":
        for name in ("max_frame_bytes", "handshake_max_frame_bytes", "handshake_timeout_ms",
                     "max_unauthenticated", "max_send_queue_bytes", "write_high_water_bytes",
                     "connect_timeout_ms", "reconnect_initial_ms", "reconnect_max_ms",
                     "large_payload_bytes", "replace_silent_after_ms", "duplicate_drain_ms",
                     "control_max_frame_bytes", "control_max_send_queue_bytes",
                     "max_clients", "client_idle_evict_ms", "hello_timeout_ms",
                     "max_handshakes_per_peer",
                     "max_buffered_frame_bytes", "frame_timeout_ms", "client_recv_buffer_bytes",
                     "client_large_payload_bytes", "log_interval_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"TransportConfig.{name} must be > 0")
        if self.handshake_max_frame_bytes < HEADER_SIZE + 256:
            raise ConfigError("TransportConfig.handshake_max_frame_bytes is too small for a "
                              "handshake message")
        if self.max_send_queue_bytes < self.max_frame_bytes:
            raise ConfigError(f"TransportConfig.max_send_queue_bytes={self.max_send_queue_bytes}"
                              f" < max_frame_bytes={self.max_frame_bytes}: a full frame could "
                              f"never be sent")
        if not 0 <= self.write_low_water_bytes <= self.write_high_water_bytes:
            raise ConfigError("TransportConfig: need 0 <= write_low_water_bytes <= "
                              "write_high_water_bytes")
        if self.reconnect_max_ms < self.reconnect_initial_ms:
            raise ConfigError("TransportConfig.reconnect_max_ms < reconnect_initial_ms")
        if not HEADER_SIZE + 64 <= self.control_max_frame_bytes <= self.max_frame_bytes:
            raise ConfigError(f"TransportConfig.control_max_frame_bytes="
                              f"{self.control_max_frame_bytes} must be in "
                              f"[{HEADER_SIZE + 64}, max_frame_bytes={self.max_frame_bytes}]")
        if self.control_max_send_queue_bytes < self.control_max_frame_bytes:
            raise ConfigError("TransportConfig.control_max_send_queue_bytes < "
                              "control_max_frame_bytes: a control frame could never be sent")
        if self.max_buffered_frame_bytes < self.max_frame_bytes:
            raise ConfigError(f"TransportConfig.max_buffered_frame_bytes="
                              f"{self.max_buffered_frame_bytes} < max_frame_bytes="
                              f"{self.max_frame_bytes}: a full frame could never be received")
        if self.log_burst < 0:
            raise ConfigError("TransportConfig.log_burst must be >= 0")
        return self


_AUTH_TYPES = codec.types_of_channel(codec.AUTH)
_PEER_TYPES = codec.types_of_channel(codec.RAFT)
_CLIENT_REQ_TYPES = codec.types_of_channel(codec.CLIENT)
_CONTROL_TYPES = frozenset(t for t in _PEER_TYPES if codec.spec_of_type(t).cls.lane == CONTROL)
_CH_AUTH, _CH_RAFT, _CH_CLIENT = (codec.AUTH,), (codec.RAFT,), (codec.CLIENT,)
# the whole-frame decoders the C frame scan runs per channel (FrameDecoder.codecs): a hot
# frame reaches _on_frames decoded, with no Python call of its own
_DECODERS = {_CH_RAFT: codec.frame_decoders(codec.RAFT),
             _CH_CLIENT: codec.frame_decoders(codec.CLIENT)}
# and the whole-frame encoders of the Raft messages that have one (codec.encode's fast
# path, called without codec.encode's frame): a message class -> its encoder
_ENCODERS = codec.frame_encoders(codec.RAFT)


def _nbytes(parts) -> int:
    n = 0
    for p in parts:
        n += p.nbytes if type(p) is memoryview else len(p)
    return n


# Event loops whose transports keep what the socket refused as the caller's buffer (a view
# of it), not a copy: uvloop, and asyncio since 3.12 (a deque of memoryviews; 3.11 copies the
# rest into a bytearray). What they keep is sent later, as the memory then reads.
_ASYNCIO_KEEPS_VIEWS = sys.version_info >= (3, 12)


def _unsent(parts: list, sent: int) -> list:
    """The buffers of `parts` after its first `sent` bytes (a partial one as a view)."""
    out = []
    for p in parts:
        mv = p if type(p) is memoryview else memoryview(p)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        k = mv.nbytes
        if sent >= k:
            sent -= k
            continue
        out.append(mv[sent:] if sent else p)
        sent = 0
    return out


def _owned(parts: list) -> list:
    """`parts` with each memoryview copied, for bytes held past this call. An APPEND's payload
    is a view of the leader's mapped log, which a truncation zeroes and the next leader's
    entries overwrite: held as a view while a deposed leader's log changed, a slow peer got
    other bytes than were read -- refused ("bad magic/version"), or, with same-sized records,
    a newer leader's entries under the old leader's prev (nodesim seed 15370)."""
    return [bytes(p) if type(p) is memoryview else p for p in parts]


class _Conn(asyncio.BufferedProtocol):
    """One TCP connection: handshake, then frames <-> messages, and its send queue."""

    def __init__(self, owner, outbound: bool, target: str | None, role: Role = Role.PEER):
        self.owner = owner
        self.cfg: TransportConfig = owner.config
        self.outbound = outbound
        self.target = target
        self.transport: asyncio.Transport | None = None
        self.peername = "?"
        loop = owner.loop
        deadline = loop.time() + self.cfg.handshake_timeout_ms / 1000
        self.hs = Handshake.initiator(owner.auth, target, role=role, deadline=deadline) \
            if outbound else Handshake.responder(owner.auth, deadline=deadline)
        # a handshake-sized receive buffer until authenticated (a flood of connections
        # costs little memory); sized for the role after (_authenticated)
        hs_max = self.cfg.handshake_max_frame_bytes
        self.decoder = FrameDecoder(hs_max, known_types=_AUTH_TYPES, large_payload_bytes=hs_max,
                                    recv_buffer_bytes=hs_max)
        self.decoder.limit_name = "handshake_max_frame_bytes"
        # the frame that completes the handshake changes the types and limits allowed
        self.decoder.one_at_a_time = True
        self.channels = _CH_AUTH
        self.authenticated = False
        self.closed = False
        # the losing duplicate: nothing more is sent on it, what still arrives is delivered
        self.retired = False
        self.peer_id: str | None = None
        self.role = role
        self.finished: asyncio.Future = loop.create_future()   # True: authenticated
        self._timer = None
        self._scratch = None
        self._paused = False
        self._ctrl: collections.deque = collections.deque()
        self._bulk: collections.deque = collections.deque()
        self.queued_bytes = 0
        self.max_held_bytes = 0
        self.send_budget = self._budget(role)
        self.last_heard = 0.0          # loop time of the last bytes received (after auth)
        self.last_sent = 0.0           # loop time of the last frames sent (client sessions)
        self._uv = False
        self._keeps_views = True       # (set from the transport in connection_made)
        # the socket's descriptor for _write_direct; -1: none (TLS, no socket, or a test's
        # stand-in transport)
        self._fd = -1
        self.copied_bytes = 0          # bytes of views copied because the socket was full
        self.hello_deadline = loop.time() + self.cfg.hello_timeout_ms / 1000
        self.reserved = 0              # bytes of the listener's frame budget this one holds
        self._frame_timer = None
        # frames sent during this loop turn, written together at its end (_flush_turn): one
        # write per connection per turn, not one per message
        self._turn: list = []
        self._turn_bytes = 0
        self.writes = 0                # transport.write/writelines calls (~ send syscalls)

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        pn = transport.get_extra_info("peername")
        self.peername = f"{pn[0]}:{pn[1]}" if isinstance(pn, tuple) else str(pn)
        self._uv = type(transport).__module__.startswith("uvloop")
        self._keeps_views = self._uv or _ASYNCIO_KEEPS_VIEWS
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            except OSError:
                pass
            if transport.get_extra_info("ssl_object") is None:
                try:
                    self._fd = sock.fileno()
                except (AttributeError, OSError, ValueError):
                    self._fd = -1
        transport.set_write_buffer_limits(self.cfg.write_high_water_bytes,
                                          self.cfg.write_low_water_bytes)
        if not self.owner._conn_opened(self):
            return
        first = self.hs.deadline if self.outbound else min(self.hs.deadline, self.hello_deadline)
        self._timer = self.owner.loop.call_at(first, self._on_timeout)
        try:
            for msg in self.hs.start():
                self._write(codec.encode(msg, max_frame_bytes=self.cfg.handshake_max_frame_bytes))
        except NetError as e:  # (a bad local config: reported like a refused handshake)
            self._reject(e)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.closed:
            # Discard what still arrives; raising here would make asyncio log a traceback.
            if self._scratch is None:
                self._scratch = memoryview(bytearray(4096))
            return self._scratch
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self.closed:
            return
        if self.authenticated:
            self.last_heard = self.owner.loop.time()
        try:
            frames = self.decoder.buffer_updated(nbytes)
            if self.authenticated and len(frames) == 1 and frames[0].message is not None:
                # the usual read of a replica or a client: one frame, decoded by the C scan
                self.owner._deliver(self, frames)
                frames = None
            while frames:
                handshake = not self.authenticated
                self._on_frames(frames)
                if not handshake or self.closed:
                    break
                # one handshake frame per call: what follows it in this read (the peer's
                # first Raft frames behind its AUTH_OK) is parsed with the new state's types
                frames = self.decoder.parse_buffered()
        except (ProtocolError, AuthError) as e:
            self._reject(e)
            return
        if self.reserved:
            self._frame_budget_check()

    def _on_frames(self, frames) -> None:
        """Hand a read's frames on, in order: decoded ones (the C scan's) go to the owner as
        one list (one call per read, not per frame); a frame not decoded yet is decoded by
        the reference (codec.decode), which raises the precise CodecError."""
        if not self.authenticated:
            for i, fr in enumerate(frames):
                if self.closed:
                    return
                if self.authenticated:      # (one_at_a_time: the handshake's last frame
                    frames = frames[i:]     # ends its list; the rest, if any, as any read)
                    break
                self._on_handshake_frame(fr)
            else:
                return
        ready = frames
        for i, fr in enumerate(frames):
            if fr.message is None:
                ready = self._decode_each(frames, i)
                break
        if ready and not self.closed:
            self.owner._deliver(self, ready)

    def _decode_each(self, frames, i: int) -> list:
        """_on_frames from frame i, the first one not decoded: the frames before it are
        delivered first, each not-decoded one alone after its reference decode (a bad
        client request answered with an error in its turn); -> the decoded rest."""
        if i:
            self.owner._deliver(self, frames[:i])
        ready: list = []
        for fr in frames[i:]:
            if self.closed:
                return []
            if fr.message is not None:
                ready.append(fr)
                continue
            if ready:
                self.owner._deliver(self, ready)
                ready = []
            try:
                msg = codec.decode(fr.type, fr.payload, self.peer_id, self.owner.node_id,
                                   channels=self.channels)
            except CodecError as e:
                if self.outbound or self.role != Role.CLIENT:
                    raise
                # a client's bad request: answered with an error, the stream is intact
                self._bad_request(fr.request_id, e)
                continue
            if not self.closed:
                self.owner._deliver(self, [fr._replace(message=msg)])
        return ready

    def _bad_request(self, request_id: int, err: CodecError) -> None:
        self.owner._count("malformed request")
        log.debug("client %r at %s: malformed request %d: %s", self.peer_id, self.peername,
                  request_id, err)
        self.reply(request_id, m.ErrorResponse.from_exception(m.MalformedRequestError(str(err))))

    def eof_received(self):
        return False   # close our side too

    def connection_lost(self, exc) -> None:
        was_closed = self.closed
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._release_frame()
        self.decoder.release()
        self._ctrl.clear()
        self._bulk.clear()
        self._turn = []
        self._turn_bytes = 0
        self.queued_bytes = 0
        if not self.finished.done():
            self.finished.set_result(False)
        if not self.authenticated and not was_closed and self.hs.error is None:
            self.owner._event(logging.INFO, "closed during the handshake",
                              "connection %s %s closed during the handshake%s", self._dir(),
                              self.peername, f": {exc}" if exc else "")
        self.owner._conn_lost(self)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._drain()

    # -- handshake ---------------------------------------------------------------------------

    def _on_handshake_frame(self, fr) -> None:
        msg = codec.decode(fr.type, fr.payload, channels=_CH_AUTH)
        hello = not self.outbound and self.hs.waiting_hello
        if hello and type(msg) is m.AuthHello and msg.role == Role.CLIENT:
            self.owner._check_client_slot(self)
        out = self.hs.receive(msg)
        if hello:
            self.owner._hello_received(self)   # (it passed: ids, cluster and mode checked)
        for o in out:
            self._write(codec.encode(o, max_frame_bytes=self.cfg.handshake_max_frame_bytes))
        if self.hs.done:
            self._authenticated()

    def _authenticated(self) -> None:
        self.authenticated = True
        self.last_heard = self.owner.loop.time()
        self.peer_id = self.hs.peer_id
        self.role = self.hs.role
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        limit, limit_name = self.cfg.max_frame_bytes, "max_frame_bytes"
        if self.role == Role.PEER:
            self.channels, types = _CH_RAFT, _PEER_TYPES
        elif self.role == Role.PEER_CONTROL:
            self.channels, types = _CH_RAFT, _CONTROL_TYPES
            limit, limit_name = self.cfg.control_max_frame_bytes, "control_max_frame_bytes"
        else:
            self.channels, types = _CH_CLIENT, _CLIENT_REQ_TYPES
        if self.role == Role.CLIENT and not self.outbound:
            # many clients: a small receive buffer each, and a shared budget for the
            # large frames they are sending (docs/net.md "Limits")
            self.decoder.resize(self.cfg.client_recv_buffer_bytes,
                                self.cfg.client_large_payload_bytes)
            self.decoder.reserve = self._reserve_frame
            self.decoder.lazy_big_buffers = True
        else:
            self.decoder.resize(DEFAULT_RECV_BUFFER_BYTES, self.cfg.large_payload_bytes)
        self.send_budget = self._budget(self.role)
        self.decoder.pool = self.owner.rx_pool
        self.decoder.known_types = types
        self.decoder.max_frame_bytes = limit
        self.decoder.limit_name = limit_name
        self.decoder.one_at_a_time = False
        self.decoder.allow_groups = self.cfg.allow_groups and self.role != Role.CLIENT
        self.decoder.codecs = _DECODERS[self.channels]
        self.decoder.src, self.decoder.dst = self.peer_id, self.owner.node_id
        if not self.finished.done():
            self.finished.set_result(True)
        self.owner._conn_authenticated(self)

    def _on_timeout(self) -> None:
        self._timer = None
        if self.closed or self.authenticated:
            return
        now = self.owner.loop.time()
        if not self.outbound and self.hs.waiting_hello and now >= self.hello_deadline:
            # a connection that has not even said who it is within hello_timeout_ms holds
            # a handshake slot for nothing (a slow-loris flood): free the slot at once
            self._reject(HandshakeTimeoutError(
                f"no AUTH_HELLO within hello_timeout_ms={self.cfg.hello_timeout_ms}"))
            return
        try:
            self.hs.check_timeout(now)
        except HandshakeTimeoutError as e:
            self._reject(e)
            return
        self._timer = self.owner.loop.call_at(self.hs.deadline, self._on_timeout)

    # -- the listener's budget for large client frames -----------------------------------------

    def _reserve_frame(self, nbytes: int) -> bool:
        """FrameDecoder.reserve: may a large frame of `nbytes` be buffered? No: stop reading
        until the listener's budget has room (the owner calls _retry_frame)."""
        self._release_frame()       # (the decoder asks only once the previous one ended)
        if not self.owner._reserve_frame(self, nbytes):
            if self.transport is not None:
                self.transport.pause_reading()
            return False
        self.reserved = nbytes
        self._frame_timer = self.owner.loop.call_later(self.cfg.frame_timeout_ms / 1000,
                                                       self._on_frame_timeout)
        return True

    def _release_frame(self) -> None:
        if self._frame_timer is not None:
            self._frame_timer.cancel()
            self._frame_timer = None
        if self.reserved:
            n, self.reserved = self.reserved, 0
            self.owner._release_frame(n)

    def _frame_budget_check(self) -> None:
        if self.reserved and not self.decoder.big_pending_bytes:
            self._release_frame()

    def _retry_frame(self) -> None:
        """The budget has room again: parse the waiting header, read on if it was granted."""
        if self.closed:
            return
        try:
            self._on_frames(self.decoder.parse_buffered())
        except (ProtocolError, AuthError) as e:
            self._reject(e)
            return
        if not self.decoder.waiting and not self.closed and self.transport is not None:
            self.transport.resume_reading()
        self._frame_budget_check()

    def _on_frame_timeout(self) -> None:
        self._frame_timer = None
        if self.closed or not self.decoder.big_pending_bytes:
            return
        self._reject(FrameTimeoutError(
            f"frame of {self.reserved} bytes not received whole within frame_timeout_ms="
            f"{self.cfg.frame_timeout_ms} ({self.decoder.buffered_bytes} bytes received)"))

    def _reject(self, err: NetError) -> None:
        """Log one line naming the peer and the reason, tell the peer (handshake failures)
        and close."""
        if self.closed:
            return
        who = f"{self.role.name.lower()} {self.peer_id!r} at {self.peername}" \
            if self.peer_id else self.peername
        reason = getattr(err, "reason", None) or type(err).__name__
        args = ("dropped" if self.authenticated else "refused", self._dir(), who,
                type(err).__name__, err)
        if self.authenticated and self.role in PEER_ROLES:
            log.warning("%s connection %s %s: %s: %s", *args)   # a replica: always logged
        else:
            self.owner._event(logging.WARNING, reason, "%s connection %s %s: %s: %s", *args)
        self.owner._count_reject(err)
        reject = getattr(self.hs, "reject", None)
        if isinstance(err, AuthError) and reject is not None and not self.authenticated:
            try:
                self._write(codec.encode(reject, max_frame_bytes=self.cfg.handshake_max_frame_bytes))
            except NetError:
                pass
            self.close()
        else:
            self.abort()

    def _dir(self) -> str:
        return f"to {self.target!r} at" if self.outbound else "from"

    # -- sending -----------------------------------------------------------------------------

    def _budget(self, role: Role) -> tuple[int, int]:
        """(bytes held for the peer at most, extra room for control messages)."""
        if role == Role.PEER_CONTROL:
            return self.cfg.control_max_send_queue_bytes, 0
        return self.cfg.max_send_queue_bytes, self.cfg.control_reserve_bytes

    def held_bytes(self) -> int:
        """Bytes held for this peer: our queue + the transport's write buffer."""
        t = self.transport
        return self.queued_bytes + (t.get_write_buffer_size() if t is not None else 0)

    def send_parts(self, parts: list, control: bool, n: int = -1) -> bool:
        """Queue a frame's buffers (n: their size, when the caller knows it)."""
        if self.closed or self.retired:
            return False
        if n < 0:
            n = len(parts[0]) if len(parts) == 1 and type(parts[0]) is bytes else \
                _nbytes(parts)
        t = self.transport          # (held_bytes(), inline: a call per frame sent)
        held = self.queued_bytes + (t.get_write_buffer_size() if t is not None else 0)
        budget, reserve = self.send_budget
        if held + n > budget + (reserve if control else 0):
            return False
        if self.role == Role.CLIENT:
            self.last_sent = self.owner.loop.time()
        if not self._paused and not self._ctrl and not self._bulk:
            # written at the end of the loop turn with whatever else this turn sends here
            # (or when the owner's hold_writes ends: release_writes)
            if not self._turn:
                hold = self.owner._held
                if hold is not None:
                    hold.append(self)
                else:
                    self.owner.loop.call_soon(self._flush_turn)
            self._turn.extend(parts)
            self._turn_bytes += n
            self.queued_bytes += n
        else:
            (self._ctrl if control else self._bulk).append((_owned(parts), n))
            self.queued_bytes += n
        held += n
        if held > self.max_held_bytes:
            self.max_held_bytes = held
        return True

    def _flush_turn(self) -> None:
        """Write the frames this loop turn sent (in order) as one write. Runs from call_soon,
        after the callbacks that sent them; the queues (_ctrl/_bulk) only fill while the
        transport is paused, and a pause only follows a write, so nothing queued can be
        older than these frames."""
        parts, n = self._turn, self._turn_bytes
        if not parts:
            return
        self._turn = []
        self._turn_bytes = 0
        self.queued_bytes -= n
        if not self.closed:
            self._write(parts, n)

    def _drain(self) -> None:
        self._flush_turn()
        ctrl, bulk = self._ctrl, self._bulk
        while not self._paused and not self.closed and (ctrl or bulk):
            parts, n = (ctrl or bulk).popleft()
            self.queued_bytes -= n
            self._write(parts, n)

    def _write(self, parts: list, n: int = -1) -> None:
        t = self.transport
        self.writes += 1
        if len(parts) == 1:
            p = parts[0]
            # (_owned, inline: one small frame per write is the single message's case)
            t.write(bytes(p) if self._keeps_views and type(p) is memoryview else p)
            return
        if n < 0:
            n = _nbytes(parts)
        if n < _JOIN_BELOW_BYTES:
            t.write(b"".join(parts))
            return
        if self._fd >= 0:
            parts = self._write_direct(parts, n)
            if not parts:
                return
        if self._uv:
            t.writelines(_owned(parts))   # uvloop: vectored send, no join (it keeps views)
        else:
            # asyncio (3.11) joins writelines' buffers: write each large part as it is, so a
            # memoryview goes to send() without a copy (asyncio 3.11 copies only what the
            # socket refused; 3.12 keeps a view of it, so it gets a copy), and the small ones
            # between them (frame heads) joined
            run: list = []
            for p in (_owned(parts) if self._keeps_views else parts):
                if len(p) >= _JOIN_BELOW_BYTES:
                    if run:
                        t.write(b"".join(run))
                        run = []
                    t.write(p)
                else:
                    run.append(p)
            if run:
                t.write(b"".join(run))

    def _write_direct(self, parts: list, n: int) -> list:
        """Write a large turn's buffers to the socket now, with one writev, when the
        transport holds nothing for it (so the order of the stream is kept), and return
        what the socket did not take (then copied: the transport would keep views of it).
        An APPEND's payload is a view of the log's pages: the kernel copies it into the
        socket once and nothing of it is copied in user space or kept past this call (the
        transport's own write would copy each view first, see _owned). A socket error
        leaves everything to the transport, which meets the same error and reports it."""
        t = self.transport
        if t.is_closing() or t.get_write_buffer_size() or len(parts) > _MAX_IOV:
            sent = 0
        else:
            try:
                sent = os.writev(self._fd, parts)
            except OSError:          # (EAGAIN included: nothing was written)
                sent = 0
        if sent >= n:
            return []
        rest = _unsent(parts, sent)
        self.copied_bytes += sum(p.nbytes for p in rest if type(p) is memoryview)
        return rest

    def retire(self) -> None:
        """Give this connection up as the losing duplicate without losing what is on its way.
        The peer may not have seen the other connection yet and go on sending here until it
        does (it then closes this one too): closed at once, those frames were lost -- a vote
        or heartbeat, or an APPEND, right after every restart. So: flush what we sent, send
        our FIN (write_eof), keep reading and delivering until the peer's FIN (eof_received
        then closes), and abort after duplicate_drain_ms should the peer never close it.
        TLS has no half-close: closed at once, as before."""
        if self.closed or self.retired:
            return
        t = self.transport
        if t is None or not t.can_write_eof():
            self.close()
            return
        self._flush_turn()
        # queued behind a full socket: accepted by send, so written too (bounded by the
        # send budget); no write may follow write_eof
        for q in (self._ctrl, self._bulk):
            while q:
                parts, n = q.popleft()
                self.queued_bytes -= n
                self._write(parts, n)
        self.retired = True
        try:
            t.write_eof()
        except OSError:
            self.abort()
            return
        self._timer = self.owner.loop.call_later(self.cfg.duplicate_drain_ms / 1000, self.abort)

    def close(self) -> None:
        if not self.closed:
            self._flush_turn()       # (what was sent before the close still goes out)
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()

    # -- client sessions (server side) -----------------------------------------------------

    @property
    def client_id(self) -> str | None:
        return self.peer_id if self.role == Role.CLIENT else None

    def reply(self, request_id: int, message) -> bool:
        """Send a response on a client connection; False if it was dropped (closed, or the
        client is not reading and its budget is full)."""
        try:
            parts = codec.encode(message, request_id, max_frame_bytes=self.cfg.max_frame_bytes)
        except NetError:
            log.exception("cannot encode a reply to client %r", self.peer_id)
            return False
        return self.send_parts(parts, control=False)


class _Lane:
    """One of a peer's connections (data, or control) and the dialler that keeps it up."""
    __slots__ = ("role", "conn", "task", "wake", "stats")

    def __init__(self, role: Role):
        self.role = role
        self.conn: _Conn | None = None
        self.task: asyncio.Task | None = None
        self.wake = asyncio.Event()     # set: the dialler should look again (its own)
        self.stats = dict(sent=0, sent_bytes=0, received=0, received_bytes=0,
                          dropped_no_connection=0, dropped_backpressure=0, dropped_encode=0,
                          connects=0, disconnects=0, dial_failures=0, duplicates_closed=0,
                          max_held_bytes=0)

    def live(self) -> "_Conn | None":
        c = self.conn
        return c if c is not None and not c.closed else None

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.conn is not None:
            self.conn.close()


class _Peer:
    __slots__ = ("id", "address", "data", "ctrl", "changed")

    def __init__(self, peer_id: str, address):
        self.id = peer_id
        self.address = address
        self.data = _Lane(Role.PEER)            # everything (but control when ctrl is up)
        self.ctrl = _Lane(Role.PEER_CONTROL)    # CONTROL-lane Raft messages
        self.changed = asyncio.Event()  # set and replaced on every connect/disconnect

    def lane_of(self, c: _Conn) -> _Lane:
        return self.ctrl if c.role == Role.PEER_CONTROL else self.data

    @property
    def conn(self) -> "_Conn | None":
        return self.data.conn

    @property
    def stats(self) -> dict:
        return self.data.stats


class PeerTransport:
    """TCP transport between the replicas of one Raft group (see the module docstring)."""

    def __init__(self, node_id: str, auth: AuthConfig, on_message: Callable, *,
                 listen: tuple | None = ("127.0.0.1", 0), peers: dict | None = None,
                 config: TransportConfig | None = None,
                 ssl_server: _ssl.SSLContext | None = None,
                 ssl_client: _ssl.SSLContext | None = None,
                 on_client_request: Callable | None = None, rng: random.Random | None = None):
        self.node_id = check_node_id(node_id, "node id", ConfigError)
        if auth.node_id != node_id:
            raise ConfigError(f"auth config is for node {auth.node_id!r}, transport for "
                              f"{node_id!r}")
        self.auth = auth
        self.config = (config or TransportConfig()).validate()
        # the large payloads' receive buffers, reused once no view of them is left
        self.rx_pool = BufferPool()
        self.on_message = on_message
        # on_group_message(peer_id, group, message), when set, takes every peer message
        # instead of on_message (a process hosting many groups: node/host.py demultiplexes)
        self.on_group_message: Callable | None = None
        # on_peer_lost(peer_id, refused), when set: see the module docstring
        self.on_peer_lost: Callable | None = None
        # hold_writes() .. release_writes(): connections sent to meanwhile, written at the
        # release (None: not holding; each connection's turn is written at the turn's end)
        self._held: list | None = None
        self.on_client_request = on_client_request
        if on_client_request is None:
            auth.accept_clients = False
        self.listen = listen
        self.ssl_server = ssl_server
        self.ssl_client = ssl_client
        self.rng = rng or random.Random()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.address: tuple | None = None
        self._server = None
        self._peers: dict[str, _Peer] = {}
        self._init_peers = dict(peers or {})
        self._unauth: dict = {}        # inbound connections in their handshake, oldest first
        self._clients: set = set()
        self._client_slots: set = set()   # client connections past their HELLO
        self._all: set = set()
        self._started = False
        self._closed = False
        self._rejects: collections.Counter = collections.Counter()
        self._buffered_frames = 0      # bytes reserved by large client frames in progress
        self._frame_waiters: collections.deque = collections.deque()
        # refused/evicted/timed-out connections and client connects: rate-limited lines
        self._events = RateLimitedLog(log, f"node {node_id!r} connections",
                                      self.config.log_interval_ms / 1000, self.config.log_burst)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            raise NetError("transport already started")
        self._started = True
        self.loop = asyncio.get_running_loop()
        self._events.loop = self.loop
        if self.listen is not None:
            host, port = self.listen
            self._server = await self.loop.create_server(
                lambda: _Conn(self, outbound=False, target=None), host, port,
                ssl=self.ssl_server, reuse_address=True)
            self.address = self._server.sockets[0].getsockname()[:2]
        for pid, addr in self._init_peers.items():
            self.add_peer(pid, addr)
        log.info("node %r transport listening on %s", self.node_id, self.address)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = []
        for p in self._peers.values():
            for lane in (p.data, p.ctrl):
                if lane.task is not None:
                    lane.task.cancel()
                    tasks.append(lane.task)
        if self._server is not None:
            self._server.close()
        for c in list(self._all):
            c.close()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        # connection_lost callbacks run on the next loop iterations: give them a bounded
        # number of turns so close() returns with every connection accounted for
        for _ in range(100):
            if not self._all:
                break
            await asyncio.sleep(0.001)
        if self._server is not None:
            await self._server.wait_closed()
        self._events.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- membership --------------------------------------------------------------------------

    def add_peer(self, peer_id: str, address: tuple | None) -> None:
        """Add (or re-address) a peer; we dial it while it is a member (twice with
        control_lane: its data and its control connection)."""
        check_node_id(peer_id, "peer id", ConfigError)
        if peer_id == self.node_id:
            raise ConfigError("a node is not its own peer")
        self.auth.peers.add(peer_id)
        p = self._peers.get(peer_id)
        if p is None:
            p = self._peers[peer_id] = _Peer(peer_id, address)
        else:
            p.address = address
        if self.loop is not None and not self._closed:
            lanes = (p.data, p.ctrl) if self.config.control_lane else (p.data,)
            for lane in lanes:
                if lane.task is None and address is not None:
                    lane.task = self.loop.create_task(self._dial_loop(p, lane))
                lane.wake.set()

    def remove_peer(self, peer_id: str) -> None:
        self.auth.peers.discard(peer_id)
        p = self._peers.pop(peer_id, None)
        if p is None:
            return
        p.data.stop()
        p.ctrl.stop()

    def peers(self) -> list:
        return sorted(self._peers)

    def is_connected(self, peer_id: str, lane: int = DATA) -> bool:
        """An authenticated connection to peer_id exists (lane=CONTROL: its control one)."""
        p = self._peers.get(peer_id)
        return p is not None and (p.ctrl if lane == CONTROL else p.data).live() is not None

    # -- sending -----------------------------------------------------------------------------

    def send(self, peer_id: str, message, group: int = 0) -> bool:
        """Queue `message` for `peer_id`. Never blocks; False when the message was dropped
        (unknown peer, no connection, or the peer's byte budget is full). A CONTROL-lane
        message goes on the peer's control connection while there is one, else on the data
        connection. group: the Raft group it belongs to (the frame header names it)."""
        if self._closed:
            raise TransportClosedError("transport is closed")
        p = self._peers.get(peer_id)
        if p is None:
            return False
        lane = p.data
        c = None
        if getattr(type(message), "lane", DATA) == CONTROL:
            c = p.ctrl.live()
            if c is not None:
                lane = p.ctrl
        if c is None:
            c = p.data.conn             # (_Lane.live, inline: a call per frame sent)
            if c is not None and c.closed:
                c = None
        st = lane.stats
        if c is None:
            st["dropped_no_connection"] += 1
            return False
        enc = _ENCODERS.get(type(message))
        parts = None if enc is None else enc.encode(
            message, 0, group, self.config.max_frame_bytes, codec.ZERO_COPY_MIN_BYTES)
        if parts is None:       # (not a hot frame, or declined: the reference decides)
            try:
                parts = codec.encode(message, max_frame_bytes=self.config.max_frame_bytes,
                                     group=group)
            except NetError as e:
                st["dropped_encode"] += 1
                log.error("cannot send %s to %r: %s", type(message).__name__, peer_id, e)
                return False
        n = len(parts[0]) if len(parts) == 1 and type(parts[0]) is bytes else _nbytes(parts)
        if lane is p.ctrl and n > self.config.control_max_frame_bytes:
            lane, c = p.data, p.data.live()   # (never for a Raft control message)
            st = lane.stats
            if c is None:
                st["dropped_no_connection"] += 1
                return False
        if not c.send_parts(parts, control=type(message) is not Append, n=n):
            st["dropped_backpressure"] += 1
            return False
        st["sent"] += 1
        st["sent_bytes"] += n
        return True

    def hold_writes(self) -> bool:
        """From now until release_writes(), what is sent is written at the release, one
        write per connection, instead of at the end of the loop turn (a driver's drain:
        its messages leave when it ends, not a loop turn later). False (and nothing
        changes) while a hold is on already: its release writes."""
        if self._held is not None:
            return False
        self._held = []
        return True

    def release_writes(self) -> None:
        """Write what was sent since hold_writes(), in the order the connections were
        first sent to."""
        held, self._held = self._held, None
        if held:
            for c in held:
                try:        # (one connection's failure must not keep the others' frames)
                    c._flush_turn()
                except Exception:
                    log.exception("cannot write to %s", c.peername)

    def pause_reading(self, peer_id: str) -> bool:
        """Stop reading the peer's data connection (its control connection keeps reading:
        heartbeats and votes still arrive)."""
        p = self._peers.get(peer_id)
        if p is None or p.conn is None or p.conn.transport is None:
            return False
        p.conn.transport.pause_reading()
        return True

    def resume_reading(self, peer_id: str) -> bool:
        p = self._peers.get(peer_id)
        if p is None or p.conn is None or p.conn.transport is None:
            return False
        p.conn.transport.resume_reading()
        return True

    # -- stats -------------------------------------------------------------------------------

    def held_bytes(self, peer_id: str) -> int:
        """Bytes held for `peer_id` right now (our queues + the socket transports' buffers,
        both connections)."""
        p = self._peers.get(peer_id)
        if p is None:
            return 0
        return sum(lane.conn.held_bytes() for lane in (p.data, p.ctrl) if lane.conn is not None)

    @staticmethod
    def _lane_stats(lane: _Lane) -> dict:
        s = dict(lane.stats)
        c = lane.conn
        s["connected"] = c is not None and not c.closed
        s["dialled"] = c is not None and c.outbound       # which side's dial was kept
        s["tls"] = c is not None and c.transport is not None and \
            c.transport.get_extra_info("ssl_object") is not None
        s["held_bytes"] = c.held_bytes() if c is not None else 0
        s["queued_bytes"] = c.queued_bytes if c is not None else 0
        s["writes"] = c.writes if c is not None else 0
        s["copied_bytes"] = c.copied_bytes if c is not None else 0
        if c is not None:
            s["max_held_bytes"] = max(s["max_held_bytes"], c.max_held_bytes)
        return s

    def stats(self) -> dict:
        peers = {}
        for pid, p in self._peers.items():
            s = self._lane_stats(p.data)
            s["control"] = self._lane_stats(p.ctrl)
            peers[pid] = s
        return {"node_id": self.node_id, "address": self.address, "peers": peers,
                "connections": len(self._all), "unauthenticated": len(self._unauth),
                "clients": len(self._clients), "client_slots": len(self._client_slots),
                "client_writes": sum(c.writes for c in self._clients),
                "buffered_frame_bytes": self._buffered_frames,
                "frame_waiters": len(self._frame_waiters),
                "rejected": dict(self._rejects)}

    async def wait_connected(self, peer_id: str, timeout: float, lane: int = DATA) -> None:
        """Wait (at most `timeout` s) until an authenticated connection to peer_id exists
        (lane=CONTROL: its control connection)."""
        deadline = self.loop.time() + timeout
        while not self.is_connected(peer_id, lane):
            p = self._peers.get(peer_id)
            left = deadline - self.loop.time()
            if left <= 0 or p is None:
                raise TimeoutError(f"{self.node_id!r}: no {'control ' if lane == CONTROL else ''}"
                                   f"connection to {peer_id!r} after {timeout} s")
            try:
                await asyncio.wait_for(p.changed.wait(), left)
            except TimeoutError:
                pass

    # -- connection bookkeeping (called by _Conn) --------------------------------------------

    def _conn_opened(self, c: _Conn) -> bool:
        if self._closed:
            c.abort()
            return False
        self._all.add(c)
        if not c.outbound:
            if len(self._unauth) >= self.config.max_unauthenticated:
                # Full. A flood of connections that never finish their handshake must not
                # lock out a replica or a client: the newcomer takes the slot of the oldest
                # one that has not sent its HELLO yet (a real peer or client sends it at
                # once), else of the oldest client handshake. Peers past their HELLO are
                # never evicted here (their number is capped per peer id: _hello_received).
                victim = next((o for o in self._unauth if o.hs.waiting_hello), None) or \
                    next((o for o in self._unauth if o.hs.role == Role.CLIENT), None)
                if victim is None:
                    self._event(logging.WARNING, "handshake slots full",
                                "refused connection from %s: too many unauthenticated "
                                "connections (max_unauthenticated=%d)", c.peername,
                                self.config.max_unauthenticated)
                    self._rejects["too many unauthenticated"] += 1
                    c.abort()
                    return False
                self._evict(victim, "handshake slots full: oldest evicted")
            self._unauth[c] = None
        return True

    def _evict(self, c: _Conn, reason: str) -> None:
        self._event(logging.WARNING, reason, "closed connection from %s in its handshake: %s",
                    c.peername, reason)
        self._rejects[reason] += 1
        self._unauth.pop(c, None)
        c.abort()

    def _event(self, level: int, reason: str, msg: str, *args) -> None:
        self._events.log(level, reason, msg, *args)

    def _count(self, reason: str) -> None:
        self._rejects[reason] += 1

    def _count_reject(self, err: Exception) -> None:
        self._rejects[getattr(err, "reason", None) or type(err).__name__] += 1

    def _check_client_slot(self, c: _Conn) -> None:
        """At a client's HELLO: refuse it (AUTH_REJECT TOO_MANY_CONNECTIONS) when max_clients
        client connections are open or past their HELLO already."""
        n = self.config.max_clients
        if len(self._client_slots) >= n and not self._evict_idle_client():
            c.hs.refuse(TooManyConnectionsError(
                f"too many client connections (max_clients={n}): refused {c.peername}"),
                RejectReason.TOO_MANY_CONNECTIONS, f"too many client connections ({n})")

    def _evict_idle_client(self) -> bool:
        """Close the client connection idle longest, if idle for client_idle_evict_ms: a
        flood of idle authenticated connections then cannot lock new clients out (a client
        whose connection was closed reconnects on its next request)."""
        victim, since = None, None
        for o in self._clients:
            t = max(o.last_heard, o.last_sent)
            if since is None or t < since:
                victim, since = o, t
        if victim is None or self.loop.time() - since < self.config.client_idle_evict_ms / 1000:
            return False
        self._event(logging.WARNING, "idle client evicted (max_clients)",
                    "closed idle client %r at %s: max_clients=%d reached", victim.peer_id,
                    victim.peername, self.config.max_clients)
        self._rejects["idle client evicted (max_clients)"] += 1
        self._clients.discard(victim)
        self._client_slots.discard(victim)
        victim.close()
        return True

    def _hello_received(self, c: _Conn) -> None:
        if c.hs.role == Role.CLIENT:
            self._client_slots.add(c)
            return
        # Peer ids are not secret: a flood may claim to be a known peer and stall. Keep the
        # newest max_handshakes_per_peer handshakes per (peer id, role); a real peer's fresh
        # dial then always finds room.
        same = [o for o in self._unauth if o is not c and not o.hs.waiting_hello
                and o.hs.peer_id == c.hs.peer_id and o.hs.role == c.hs.role]
        for o in same[:max(0, len(same) + 1 - self.config.max_handshakes_per_peer)]:
            self._evict(o, "more handshakes for one peer id than max_handshakes_per_peer")

    def _reserve_frame(self, c: _Conn, nbytes: int) -> bool:
        if self._buffered_frames + nbytes > self.config.max_buffered_frame_bytes:
            if c not in self._frame_waiters:
                self._frame_waiters.append(c)
                self._event(logging.INFO, "client frame waits for the buffer budget",
                            "client %r at %s: frame of %d bytes waits (max_buffered_frame_bytes"
                            "=%d in use)", c.peer_id, c.peername, nbytes,
                            self.config.max_buffered_frame_bytes)
            return False
        self._buffered_frames += nbytes
        return True

    def _release_frame(self, nbytes: int) -> None:
        self._buffered_frames -= nbytes
        if self._frame_waiters and self.loop is not None and not self._closed:
            self.loop.call_soon(self._wake_frame_waiters)

    def _wake_frame_waiters(self) -> None:
        waiters = self._frame_waiters
        while waiters:
            c = waiters[0]
            c._retry_frame()          # (asks _reserve_frame again: still first in line)
            if c.decoder.waiting and not c.closed:
                return                # no room yet: wait for the next release
            if waiters and waiters[0] is c:
                waiters.popleft()

    def _conn_authenticated(self, c: _Conn) -> None:
        self._unauth.pop(c, None)
        if c.role == Role.CLIENT:
            self._clients.add(c)
            self._event(logging.INFO, "client connected", "client %r connected from %s",
                        c.peer_id, c.peername)
            return
        p = self._peers.get(c.peer_id)
        if p is None:  # removed during the handshake
            c.close()
            return
        lane = p.lane_of(c)
        what = "control connection" if lane is p.ctrl else "connection"
        old = lane.conn
        if old is not None and not old.closed:
            # Two connections with one peer. Both dialled at once: the same rule on both
            # sides keeps the same connection, the one initiated by the lower node id. But a
            # peer dials only when it has no connection: if ours has been silent, it is
            # half-open (the peer restarted) and the new one wins. Same direction: the newer.
            low_is_me = self.node_id < c.peer_id
            silent = self.loop.time() - old.last_heard > \
                self.config.replace_silent_after_ms / 1000

            def initiated_by_low(x: _Conn) -> bool:
                return x.outbound == low_is_me
            if initiated_by_low(old) and not initiated_by_low(c) and not silent:
                keep, drop = old, c
            else:
                keep, drop = c, old
            log.info("%r: two %ss with %r: keeping the one %s%s", self.node_id, what,
                     c.peer_id, "we dialled" if keep.outbound else "it dialled",
                     " (the old one was silent)" if silent and keep is c else "")
            lane.stats["duplicates_closed"] += 1
            lane.conn = keep
            drop.retire()
        else:
            lane.conn = c
            lane.stats["connects"] += 1
            log.info("%r connected to peer %r (%s %s, %s)", self.node_id, c.peer_id,
                     "dialled" if c.outbound else "accepted", c.peername, what)
        self._changed(p, lane)

    def _conn_lost(self, c: _Conn) -> None:
        self._all.discard(c)
        self._unauth.pop(c, None)
        self._clients.discard(c)
        self._client_slots.discard(c)
        if c in self._frame_waiters:
            self._frame_waiters.remove(c)
        if c.role not in PEER_ROLES or c.peer_id is None:
            return
        p = self._peers.get(c.peer_id)
        if p is None:
            return
        lane = p.lane_of(c)
        if lane.conn is c:
            lane.stats["max_held_bytes"] = max(lane.stats["max_held_bytes"], c.max_held_bytes)
            lane.conn = None
            lane.stats["disconnects"] += 1
            if not self._closed:
                log.info("%r lost its %s to peer %r", self.node_id,
                         "control connection" if lane is p.ctrl else "connection", c.peer_id)
                self._peer_lost(p.id, False)
            self._changed(p, lane)

    def _peer_lost(self, peer_id: str, refused: bool) -> None:
        report_peer_lost(self, peer_id, refused)

    @staticmethod
    def _changed(p: _Peer, lane: _Lane) -> None:
        lane.wake.set()
        p.changed.set()
        p.changed = asyncio.Event()

    def _deliver(self, c: _Conn, frames: list) -> None:
        """A read's decoded frames (`message` set), in order, to on_client_request or
        on_message / on_group_message; each checked as it comes (a callback may close the
        connection, retire it or remove the peer)."""
        peer_id = c.peer_id
        if c.role == Role.CLIENT:
            for fr in frames:
                if c.closed:
                    return
                try:
                    self.on_client_request(c, fr.request_id, fr.message)
                except Exception:
                    log.exception("on_client_request failed for client %r", peer_id)
            return
        peers = self._peers
        p = peers.get(peer_id)
        if p is None:
            return
        lane = p.ctrl if c.role == Role.PEER_CONTROL else p.data     # (_Peer.lane_of)
        st = lane.stats
        for fr in frames:
            if c.closed or peers.get(peer_id) is not p:
                return
            if lane.conn is not c and not c.retired:
                continue   # (not the peer's connection now, nor its retired duplicate)
            st["received"] += 1
            st["received_bytes"] += len(fr.payload) + HEADER_SIZE
            try:
                if self.on_group_message is not None:
                    self.on_group_message(peer_id, fr.group, fr.message)
                else:
                    self.on_message(peer_id, fr.message)
            except Exception:
                log.exception("on_message failed for a message from %r", peer_id)

    # -- dialling ----------------------------------------------------------------------------

    async def _dial_loop(self, p: _Peer, lane: _Lane) -> None:
        cfg = self.config
        delay = cfg.reconnect_initial_ms / 1000
        while not self._closed:
            if lane.live() is not None:
                lane.wake.clear()
                await lane.wake.wait()
                delay = cfg.reconnect_initial_ms / 1000
                continue
            if p.address is None:
                lane.wake.clear()
                await lane.wake.wait()
                continue
            host, port = p.address
            ok = False
            try:
                _, conn = await asyncio.wait_for(
                    self.loop.create_connection(
                        lambda: _Conn(self, outbound=True, target=p.id, role=lane.role),
                        host, port, ssl=self.ssl_client,
                        server_hostname=(host if self.ssl_client is not None else None)),
                    cfg.connect_timeout_ms / 1000)
                ok = await conn.finished
            except (OSError, TimeoutError, _ssl.SSLError) as e:
                log.debug("%r: dialling %r at %s:%s (%s) failed: %s", self.node_id, p.id, host,
                          port, lane.role.name, e)
                if isinstance(e, ConnectionRefusedError) and not self._closed:
                    self._peer_lost(p.id, True)
            if ok:
                continue
            lane.stats["dial_failures"] += 1
            # Exponential backoff with "equal jitter": half the delay fixed, half random, so
            # two nodes that lost each other at the same moment do not redial in lockstep.
            pause = delay / 2 + self.rng.random() * delay / 2
            delay = min(delay * 2, cfg.reconnect_max_ms / 1000)
            lane.wake.clear()
            try:
                await asyncio.wait_for(lane.wake.wait(), pause)
            except TimeoutError:
                pass


class ClientChannel:
    """The client side of one authenticated connection: request/response by request id."""

    def __init__(self, conn: _Conn):
        self._conn = conn
        self._next_id = 1
        self._waiting: dict[int, asyncio.Future] = {}

    @property
    def server_id(self) -> str | None:
        return self._conn.peer_id

    @property
    def closed(self) -> bool:
        return self._conn.closed

    async def request(self, message, timeout: float):
        """Send a request and wait (at most `timeout` s) for its response message."""
        return await self._exchange(
            lambda rid: codec.encode(message, rid, max_frame_bytes=self._conn.cfg.max_frame_bytes),
            timeout)

    def request_encoded(self, type_code: int, payload_parts: list, timeout: float):
        """request() for a message whose frame payload is already encoded (`payload_parts`,
        buffers in order: quorumlog.client frames a produce batch's bodies in Cython). Not a
        coroutine itself: a frame too large raises here, else the exchange's coroutine is
        returned for the caller to await (a coroutine frame less per produce)."""
        n = _nbytes(payload_parts)
        limit = self._conn.cfg.max_frame_bytes
        if n + HEADER_SIZE > limit:
            raise FrameTooLargeError(f"frame of {n + HEADER_SIZE} bytes is over "
                                     f"max_frame_bytes={limit}", n + HEADER_SIZE, limit)

        def frame(rid):
            head = encode_header(type_code, n, rid)
            return [head + payload_parts[0], *payload_parts[1:]] if payload_parts else [head]
        return self._exchange(frame, timeout, n + HEADER_SIZE)

    async def _exchange(self, make_parts, timeout: float, n: int = -1):
        """Send make_parts(request id) (n: its size, when the caller knows it) and wait for
        the response."""
        if self._conn.closed:
            raise TransportClosedError("client connection is closed")
        rid = self._next_id
        self._next_id += 1
        loop = self._conn.owner.loop
        fut = loop.create_future()
        self._waiting[rid] = fut
        # one timer on the response's own future (asyncio.wait_for would add a second future
        # and two callbacks per request: a visible share of a small request's client CPU)
        timer = loop.call_later(timeout, _expire, fut, timeout)
        try:
            if not self._conn.send_parts(make_parts(rid), control=False, n=n):
                raise TransportClosedError("client connection closed or its send budget is full")
            return await fut
        finally:
            timer.cancel()
            self._waiting.pop(rid, None)

    def _on_response(self, request_id: int, msg) -> None:
        fut = self._waiting.get(request_id)
        if fut is not None and not fut.done():
            fut.set_result(msg)

    def _on_lost(self) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(TransportClosedError("connection lost"))

    async def close(self) -> None:
        self._conn.close()
        await asyncio.sleep(0)

    async def close_when_idle(self, timeout: float) -> None:
        """Close once every request sent on it has its answer (at most `timeout` s): a
        client moving to another member lets the answers on their way arrive -- closing
        at once would turn each into a lost connection, retried after later requests
        (a producer's pipelined batches would reach the leader out of order)."""
        try:
            waiting = [f for f in self._waiting.values() if not f.done()]
            if waiting and not self._conn.closed:
                await asyncio.wait(waiting, timeout=timeout)
        finally:
            self._conn.close()


def _expire(fut: asyncio.Future, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(f"no response within {timeout} s"))


class _ClientOwner:
    """What a client connection needs of an owner (no peers, no server)."""

    def __init__(self, auth: AuthConfig, config: TransportConfig, loop):
        self.auth = auth
        self.config = config
        self.loop = loop
        self.node_id = auth.node_id
        self.channel: ClientChannel | None = None
        self.rejects: collections.Counter = collections.Counter()
        self.rx_pool = BufferPool(max_buffers=2)
        self._held = None       # (never holds: a connection's turn ends with the loop's)

    def _conn_opened(self, c) -> bool:
        return True

    def _conn_authenticated(self, c) -> None:
        pass

    def _conn_lost(self, c) -> None:
        if self.channel is not None:
            self.channel._on_lost()

    def _count_reject(self, err) -> None:
        self.rejects[type(err).__name__] += 1

    def _count(self, reason: str) -> None:
        self.rejects[reason] += 1

    @staticmethod
    def _event(level: int, reason: str, msg: str, *args) -> None:
        # the caller gets the error itself (connect_client raises it): a line at DEBUG only,
        # so a client that retries does not flood its application's log
        log.debug(msg, *args)

    def _deliver(self, c, frames: list) -> None:
        for fr in frames:
            if self.channel is None or c.closed:
                return
            self.channel._on_response(fr.request_id, fr.message)


async def connect_client(host: str, port: int, auth: AuthConfig, *, server_id: str | None = None,
                         timeout: float = 5.0, config: TransportConfig | None = None,
                         ssl: _ssl.SSLContext | None = None) -> ClientChannel:
    """Open an authenticated client connection (role CLIENT, `auth.node_id` is the client id,
    `auth.secret` the client secret). Raises the handshake's AuthError, OSError or
    TimeoutError."""
    loop = asyncio.get_running_loop()
    owner = _ClientOwner(auth, (config or TransportConfig()).validate(), loop)
    _, conn = await asyncio.wait_for(
        loop.create_connection(lambda: _Conn(owner, True, server_id, Role.CLIENT), host, port,
                               ssl=ssl, server_hostname=(host if ssl is not None else None)),
        timeout)
    ok = await asyncio.wait_for(conn.finished, timeout)
    if not ok:
        raise conn.hs.error or TransportClosedError("connection closed during the handshake")
    owner.channel = ClientChannel(conn)
    return owner.channel
