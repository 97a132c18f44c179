"""Mutual HMAC-SHA256 challenge-response over a shared secret, as a pure state machine.

No I/O and no clock reads: the transport feeds it decoded handshake messages and sends what
it returns; `check_timeout(now)` is called by the transport's timer. Four messages:

    initiator                                         responder
    HELLO(mode, role, cluster, me, target, Ni) ---->  cluster id checked first, then node ids
                                               <----  CHALLENGE(cluster, me, Nr)
    PROOF(HMAC(k, "initiator" | T))            ---->  verified (hmac.compare_digest)
                                               <----  OK(HMAC(k, "responder" | T))
    verified: done                                    done

T binds the cluster id, the role, the mode, both node ids (initiator first) and both nonces,
so a proof is good for one connection, one direction and one pair of ids only: a replayed
proof meets a fresh nonce, a proof reflected back at its author fails on the direction label
or the id order. The responder proves only after the initiator has, so an unauthenticated
party cannot use a node as an HMAC oracle. k is the cluster secret for peers and the client
secret for clients (a client cannot pass as a peer). Any failure raises an AuthError subclass
and sets `reject`, the AUTH_REJECT to send before closing.

Without a secret the node refuses to start unless `insecure=True`; then both sides run the
same exchange in AuthMode.NONE (ids and cluster id still checked, empty proofs), and a side
with a secret refuses a side without one.
"""
from __future__ import annotations

import hashlib
import hmac
import os

from . import messages as m
from .errors import (AuthConfigError, AuthError, AuthRejectedError, BadProofError,
                     CredentialsRejectedError, GeometryMismatchError, HandshakeTimeoutError,
                     TooManyConnectionsError, UnknownNodeError, WrongClusterError)
from .messages import PEER_ROLES, AuthMode, RejectReason, Role

__all__ = ["AuthConfig", "Handshake", "MIN_SECRET_BYTES", "transcript", "proof", "DIR_INITIATOR",
           "DIR_RESPONDER"]

MIN_SECRET_BYTES = 16
_LABEL = b"quorumlog-auth-v1\x00"
# direction labels: a proof is good for one direction only (no reflection)
DIR_INITIATOR = b"initiator->responder\x00"
DIR_RESPONDER = b"responder->initiator\x00"

# what an AUTH_REJECT's reason means to the side that receives it: credentials refused can
# never succeed on a retry (a client gives up at once); a connection limit may clear
_REJECT_ERRORS = {reason: CredentialsRejectedError for reason in (
    RejectReason.WRONG_CLUSTER, RejectReason.UNKNOWN_NODE, RejectReason.BAD_PROOF,
    RejectReason.MODE_MISMATCH, RejectReason.ROLE_REFUSED)}
_REJECT_ERRORS[RejectReason.TOO_MANY_CONNECTIONS] = TooManyConnectionsError


def _secret_bytes(secret, what: str) -> bytes | None:
    if secret is None:
        return None
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    if not isinstance(secret, (bytes, bytearray)):
        raise AuthConfigError(f"{what} must be bytes or str")
    if len(secret) < MIN_SECRET_BYTES:
        raise AuthConfigError(f"{what} of {len(secret)} bytes is too short "
                              f"(at least {MIN_SECRET_BYTES})")
    return bytes(secret)


class AuthConfig:
    """Who this side is and whom it accepts.

    node_id: this node's id (a client: its client id). peers: node ids allowed to connect as
    PEER (a live set: the transport adds and removes members). secret: the cluster secret
    (a client: the client secret). client_secret: what clients prove (None: clients are
    refused unless insecure). client_ids: allowed client ids (None: any valid id).
    """

    def __init__(self, cluster_id: str, node_id: str, secret=None, *, peers=(),
                 client_secret=None, client_ids=None, accept_clients: bool = True,
                 insecure: bool = False, segment_size_bytes: int = 0):
        if not isinstance(cluster_id, str) or not \
                1 <= len(cluster_id.encode("utf-8", "replace")) <= m.MAX_CLUSTER_ID_BYTES:
            raise AuthConfigError(f"cluster id must be a str of 1..{m.MAX_CLUSTER_ID_BYTES} "
                                  f"bytes, got {cluster_id!r}")
        self.cluster_id = cluster_id
        self.node_id = m.check_node_id(node_id, "node id")
        self.secret = _secret_bytes(secret, "secret")
        self.client_secret = _secret_bytes(client_secret, "client_secret")
        self.insecure = bool(insecure)
        if self.secret is None and not self.insecure:
            raise AuthConfigError("no cluster secret configured: refusing to run without "
                                  "authentication (pass insecure=True to allow it)")
        self.peers = set(m.check_node_id(p, "peer id") for p in peers)
        self.client_ids = None if client_ids is None else \
            frozenset(m.check_node_id(c, "client id") for c in client_ids)
        self.accept_clients = bool(accept_clients)
        # a replica's log geometry, checked against its peers' at the handshake (0: none)
        self.segment_size_bytes = int(segment_size_bytes)

    @property
    def mode(self) -> AuthMode:
        return AuthMode.NONE if self.secret is None else AuthMode.HMAC_SHA256

    def key_for(self, role: Role) -> bytes | None:
        """The secret a connection of `role` proves (responder side)."""
        if role in PEER_ROLES:
            return self.secret
        return self.client_secret if self.client_secret is not None else \
            (None if self.insecure else b"")   # b"": no client secret -> clients refused


def _lp(s: str) -> bytes:
    b = s.encode("utf-8")
    return len(b).to_bytes(2, "little") + b


def transcript(cluster_id: str, role: Role, mode: AuthMode, initiator_id: str,
               responder_id: str, nonce_i: bytes, nonce_r: bytes) -> bytes:
    return (_LABEL + _lp(cluster_id) + bytes((int(role), int(mode))) + _lp(initiator_id)
            + _lp(responder_id) + nonce_i + nonce_r)


def proof(key: bytes, direction: bytes, tr: bytes) -> bytes:
    return hmac.new(key, direction + tr, hashlib.sha256).digest()


_WAIT_HELLO, _WAIT_CHALLENGE, _WAIT_PROOF, _WAIT_OK, _DONE, _FAILED = range(6)


class Handshake:
    """One side of one connection's handshake. Create with `initiator(...)` or
    `responder(...)`; call `start()` once, then `receive(msg)` for each handshake message
    received; send every message either returns. `done` once the peer is authenticated,
    then `peer_id` and `role` say who it is."""

    def __init__(self, cfg: AuthConfig, initiator: bool, *, target_id: str | None,
                 role: Role, nonce: bytes | None, deadline: float | None):
        self.cfg = cfg
        self.is_initiator = initiator
        self.target_id = target_id
        self.role = role
        self.nonce = os.urandom(m.NONCE_BYTES) if nonce is None else bytes(nonce)
        if len(self.nonce) != m.NONCE_BYTES:
            raise AuthConfigError(f"nonce must be {m.NONCE_BYTES} bytes")
        self.deadline = deadline
        self.peer_id: str | None = None
        self.reject: m.AuthReject | None = None
        self.error: AuthError | None = None
        self._state = _WAIT_CHALLENGE if initiator else _WAIT_HELLO
        self._key: bytes | None = None
        self._tr = b""
        self._started = False

    @classmethod
    def initiator(cls, cfg: AuthConfig, target_id: str | None, *, role: Role = Role.PEER,
                  nonce: bytes | None = None, deadline: float | None = None) -> "Handshake":
        if target_id is not None:
            m.check_node_id(target_id, "target node id")
        elif role in PEER_ROLES:
            raise AuthConfigError("a peer connection must name the node it dials")
        return cls(cfg, True, target_id=target_id, role=role, nonce=nonce, deadline=deadline)

    @classmethod
    def responder(cls, cfg: AuthConfig, *, nonce: bytes | None = None,
                  deadline: float | None = None) -> "Handshake":
        return cls(cfg, False, target_id=None, role=Role.PEER, nonce=nonce, deadline=deadline)

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def failed(self) -> bool:
        return self._state == _FAILED

    def start(self) -> list:
        if self._started:
            raise AuthError("handshake already started")
        self._started = True
        if not self.is_initiator:
            return []
        c = self.cfg
        return [m.AuthHello(c.mode, self.role, c.cluster_id, c.node_id, self.target_id,
                            self.nonce, c.segment_size_bytes)]

    @property
    def waiting_hello(self) -> bool:
        """A responder that has not received the initiator's AUTH_HELLO yet."""
        return self._state == _WAIT_HELLO

    def refuse(self, err: AuthError, reason: RejectReason, text: str):
        """Fail the handshake for a reason of the caller's (a limit of the transport's):
        `reject` is then the AUTH_REJECT to send. Raises `err`."""
        self._fail(err, reason, text)

    def check_timeout(self, now: float) -> None:
        """Raise HandshakeTimeoutError if the deadline passed before the handshake finished."""
        if self._state in (_DONE, _FAILED) or self.deadline is None or now < self.deadline:
            return
        self._fail(HandshakeTimeoutError("handshake did not complete in time"),
                   RejectReason.OTHER, "handshake timeout")

    def receive(self, msg) -> list:
        """Process one received handshake message; returns the messages to send."""
        if self._state == _FAILED:
            raise self.error
        if not self._started:
            raise AuthError("receive() before start()")
        if isinstance(msg, m.AuthReject):
            self._state = _FAILED
            klass = _REJECT_ERRORS.get(msg.reason, AuthRejectedError)
            self.error = klass(f"peer rejected the handshake: {msg.reason.name}: {msg.text}")
            raise self.error
        st = self._state
        if st == _WAIT_HELLO and type(msg) is m.AuthHello:
            return self._on_hello(msg)
        if st == _WAIT_CHALLENGE and type(msg) is m.AuthChallenge:
            return self._on_challenge(msg)
        if st == _WAIT_PROOF and type(msg) is m.AuthProof:
            return self._on_proof(msg)
        if st == _WAIT_OK and type(msg) is m.AuthOk:
            return self._on_ok(msg)
        self._fail(AuthError(f"unexpected {type(msg).__name__} in handshake state "
                             f"{['hello', 'challenge', 'proof', 'ok', 'done'][st]}"),
                   RejectReason.OTHER, "unexpected handshake message")

    # -- responder ---------------------------------------------------------------------------

    def _on_hello(self, h: m.AuthHello) -> list:
        c = self.cfg
        if h.cluster_id != c.cluster_id:
            self._fail(WrongClusterError(f"peer {h.sender_id!r} is in cluster {h.cluster_id!r}, "
                                         f"this node in {c.cluster_id!r}"),
                       RejectReason.WRONG_CLUSTER, "wrong cluster id")
        if h.target_id is not None and h.target_id != c.node_id:
            self._fail(UnknownNodeError(f"{h.sender_id!r} dialled node {h.target_id!r}, "
                                        f"this is {c.node_id!r}"),
                       RejectReason.UNKNOWN_NODE, "wrong target node id")
        if h.role in PEER_ROLES:
            if h.target_id is None or h.sender_id == c.node_id or h.sender_id not in c.peers:
                self._fail(UnknownNodeError(f"unknown peer node id {h.sender_id!r}"),
                           RejectReason.UNKNOWN_NODE, "unknown node id")
            self._check_geometry(h.sender_id, h.segment_size_bytes)
        else:
            if not c.accept_clients or c.key_for(Role.CLIENT) == b"":
                self._fail(AuthError(f"client {h.sender_id!r} refused: this endpoint takes no "
                                     f"clients"), RejectReason.ROLE_REFUSED, "clients refused")
            if c.client_ids is not None and h.sender_id not in c.client_ids:
                self._fail(UnknownNodeError(f"unknown client id {h.sender_id!r}"),
                           RejectReason.UNKNOWN_NODE, "unknown client id")
        key = c.key_for(h.role)
        want = AuthMode.NONE if key is None else AuthMode.HMAC_SHA256
        if h.mode != want:
            self._fail(AuthError(f"{h.sender_id!r} offers auth mode {h.mode.name}, this node "
                                 f"requires {want.name}"),
                       RejectReason.MODE_MISMATCH, f"auth mode {want.name} required")
        self.peer_id = h.sender_id
        self.role = h.role
        self._key = key
        self._tr = transcript(c.cluster_id, h.role, want, h.sender_id, c.node_id, h.nonce,
                              self.nonce)
        self._state = _WAIT_PROOF
        return [m.AuthChallenge(c.cluster_id, c.node_id, self.nonce, c.segment_size_bytes)]

    def _on_proof(self, p: m.AuthProof) -> list:
        if not self._verify(p.proof, DIR_INITIATOR):
            self._fail(BadProofError(f"bad proof from {self.peer_id!r} "
                                     f"(wrong secret, or a replayed/reflected proof)"),
                       RejectReason.BAD_PROOF, "bad proof")
        self._state = _DONE
        return [m.AuthOk(self._make(DIR_RESPONDER))]

    # -- initiator ---------------------------------------------------------------------------

    def _on_challenge(self, ch: m.AuthChallenge) -> list:
        c = self.cfg
        if ch.cluster_id != c.cluster_id:
            self._fail(WrongClusterError(f"node {ch.responder_id!r} is in cluster "
                                         f"{ch.cluster_id!r}, this node in {c.cluster_id!r}"),
                       RejectReason.WRONG_CLUSTER, "wrong cluster id")
        if self.target_id is not None and ch.responder_id != self.target_id:
            self._fail(UnknownNodeError(f"dialled {self.target_id!r}, {ch.responder_id!r} "
                                        f"answered"), RejectReason.UNKNOWN_NODE,
                       "unexpected node id")
        if self.role in PEER_ROLES:
            self._check_geometry(ch.responder_id, ch.segment_size_bytes)
        self.peer_id = ch.responder_id
        self._key = c.secret
        self._tr = transcript(c.cluster_id, self.role, c.mode, c.node_id, ch.responder_id,
                              self.nonce, ch.nonce)
        self._state = _WAIT_OK
        return [m.AuthProof(self._make(DIR_INITIATOR))]

    def _on_ok(self, ok: m.AuthOk) -> list:
        if not self._verify(ok.proof, DIR_RESPONDER):
            self._fail(BadProofError(f"bad proof from {self.peer_id!r} "
                                     f"(wrong secret, or a replayed/reflected proof)"),
                       RejectReason.BAD_PROOF, "bad proof")
        self._state = _DONE
        return []

    # -- both --------------------------------------------------------------------------------

    def _check_geometry(self, peer: str, theirs: int) -> None:
        """Replicas copy the leader's bytes to the leader's positions: a peer whose segments
        have another size would stall at its first segment end. Refused, naming both."""
        ours = self.cfg.segment_size_bytes
        if ours and theirs and theirs != ours:
            self._fail(GeometryMismatchError(
                f"peer {peer!r} has segment_size_bytes={theirs}, this node "
                f"({self.cfg.node_id!r}) has segment_size_bytes={ours}: every member of a "
                "group must be created with the same segment size"),
                RejectReason.GEOMETRY,
                f"segment_size_bytes {theirs} differs from {ours} ({self.cfg.node_id})")

    def _make(self, direction: bytes) -> bytes:
        return b"" if self._key is None else proof(self._key, direction, self._tr)

    def _verify(self, got: bytes, direction: bytes) -> bool:
        if self._key is None:
            return len(got) == 0
        return hmac.compare_digest(got, proof(self._key, direction, self._tr))

    def _fail(self, err: AuthError, reason: RejectReason, text: str):
        self._state = _FAILED
        self.error = err
        self.reject = m.AuthReject(reason, text)
        raise err
