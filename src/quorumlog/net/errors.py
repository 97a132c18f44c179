"""Errors the network layer raises on purpose (all subclasses of quorumlog.errors.QuorumlogError).

Anything a peer can send us that breaks the protocol raises a ProtocolError subclass (FrameError,
CodecError) or an AuthError subclass, never IndexError/struct.error/UnicodeDecodeError: the
transport catches exactly these, logs one line naming the reason and closes the connection.
They live here (as the Raft core's live in raft/errors.py) so the package stays self-contained.
"""
from __future__ import annotations

from ..errors import (AuthenticationError, ConfigError, ConnectionLimitError,
                      InvalidArgumentError, QuorumlogError)


class NetError(QuorumlogError):
    """Base class of the network layer's errors."""


class ProtocolError(NetError):
    """The bytes received break the wire protocol (docs/net.md); the connection is closed."""


class FrameError(ProtocolError):
    """A frame header is invalid (magic, version, type, flags, checksum) or a length is over
    a limit. Raised by the decoder before it allocates or reads the frame body."""


class FrameTooLargeError(FrameError):
    """A frame's length is over max_frame_bytes (the message names the limit)."""

    def __init__(self, message: str, length: int = 0, limit: int = 0):
        super().__init__(message)
        self.length = length
        self.limit = limit


class CodecError(ProtocolError):
    """A frame payload does not decode to a valid message (short, trailing bytes, a field out
    of range, an unknown enum value, a bad node id)."""


class EncodeError(CodecError, InvalidArgumentError):
    """A message cannot be encoded (a field out of range, a payload that is not bytes-like);
    nothing was sent. A local bug or bad input rather than a peer's fault."""


class AuthError(NetError):
    """The connection handshake failed; the connection is closed before any message of the
    peer reaches Raft or the server."""

    reason = "auth failed"


class WrongClusterError(AuthError):
    """The peer belongs to another cluster (cluster id mismatch)."""

    reason = "wrong cluster id"


class UnknownNodeError(AuthError):
    """The peer claims a node id (or client id) this side does not know, or dialled another
    node than the one that answered."""

    reason = "unknown node id"


class BadProofError(AuthError):
    """The peer's HMAC proof does not verify: wrong secret, or a replayed/reflected proof."""

    reason = "bad proof (wrong secret?)"


class GeometryMismatchError(AuthError):
    """A peer whose log has another segment size: it cannot store the leader's bytes at the
    leader's positions (replicas are byte-identical), so it is refused at the handshake."""


class AuthRejectedError(AuthError):
    """The other side rejected our handshake (it sent AUTH_REJECT with a reason)."""

    reason = "rejected by peer"


class CredentialsRejectedError(AuthRejectedError, AuthenticationError):
    """The other side refused our credentials (bad proof, wrong cluster id, unknown id, auth
    mode mismatch, role refused): retrying with the same settings cannot succeed."""


class TooManyConnectionsError(AuthError, ConnectionLimitError):
    """The responder is at its limit of client connections (max_clients) and refused this
    one at its AUTH_HELLO (raised on both sides: the refusal names the limit)."""

    reason = "too many client connections"


class HandshakeTimeoutError(AuthError):
    """The handshake did not complete within handshake_timeout_ms."""

    reason = "handshake timeout"


class FrameTimeoutError(ProtocolError):
    """A frame was not received whole within frame_timeout_ms of its header (a peer that
    announces a large frame and stalls): the connection is dropped and its buffer freed."""


class AuthConfigError(NetError, ConfigError):
    """The authentication settings are unusable (no secret without insecure=True, an empty
    secret, a bad node id)."""


class TransportClosedError(NetError):
    """The transport has been closed."""
