"""quorumlog's network layer: frames (framing.py), the message codec (codec.py), the HMAC
handshake (auth.py), the asyncio TCP transport (transport.py) and its simulated twin
(simnet.py). docs/net.md describes the bytes and the behaviour."""
