"""quorumlog's network layer: frames (framing.py), the message codec (codec.py, messages.py),
the HMAC handshake (auth.py), the asyncio TCP transport (transport.py) and its simulated twin
(simnet.py). docs/net.md describes the bytes and the behaviour."""
from .auth import AuthConfig
from .errors import (AuthError, CodecError, FrameError, FrameTooLargeError, NetError,
                     ProtocolError)
from .simnet import SimNetwork, SimTransport
from .transport import ClientChannel, PeerTransport, TransportConfig, connect_client

__all__ = ["AuthConfig", "PeerTransport", "TransportConfig", "SimNetwork", "SimTransport",
           "ClientChannel", "connect_client", "NetError", "ProtocolError", "FrameError",
           "FrameTooLargeError", "CodecError", "AuthError"]
