"""Limits of a real replica process: max_client_connections is
enforced with an error the client names, a stalled large frame is timed out and logged,
bad requests get specific errors on a connection that stays usable, and a wrong client
secret fails at once with AuthenticationError. One single-replica group, its settings
from the environment (QUORUMLOG_*), for the whole module."""
from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from cluster_support import SEGMENT, wait_until

from quorumlog.client import AsyncClient, Client
from quorumlog.errors import AuthenticationError, ConnectionLimitError, InvalidArgumentError
from quorumlog.localcluster import LocalCluster
from quorumlog.net import codec
from quorumlog.net import messages as m
from quorumlog.net.auth import AuthConfig, Handshake
from quorumlog.net.framing import FrameDecoder, encode_frame, encode_header

MAX_CLIENTS = 4


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("limits"), 1, segment_size_bytes=SEGMENT,
                     env={"QUORUMLOG_MAX_CLIENT_CONNECTIONS": str(MAX_CLIENTS),
                          "QUORUMLOG_CLIENT_IDLE_EVICT_MS": "600000",
                          "QUORUMLOG_CLIENT_FRAME_TIMEOUT_MS": "500"})
    try:
        c.start()
        c.wait_started(timeout=60)
        c.wait_leader(timeout=30)
        yield c
    finally:
        c.kill_all()


def _addr(c):
    host, _, port = c.client_addresses()[0].rpartition(":")
    return host, int(port)


class _Raw:
    """A blocking client socket that runs the client handshake by hand."""

    def __init__(self, c: LocalCluster):
        self.sock = socket.create_connection(_addr(c), timeout=10)
        self.dec = FrameDecoder()
        self.frames: list = []
        hs = Handshake.initiator(AuthConfig("quorumlog", "raw", c.secret()), None,
                                 role=m.Role.CLIENT)
        for msg in hs.start():
            self.send_msg(msg)
        while not hs.done:
            for msg in hs.receive(codec.decode_frame(self.recv_frame(), "s", "raw")):
                self.send_msg(msg)

    def send_msg(self, msg, rid=0):
        self.sock.sendall(b"".join(bytes(p) for p in codec.encode(msg, rid)))

    def recv_frame(self):
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the server")
            self.frames.extend(self.dec.feed(data))
        return self.frames.pop(0)

    def closed_by_server(self) -> bool:
        try:
            while self.sock.recv(65536):
                pass
            return True
        except (ConnectionResetError, BrokenPipeError):
            return True

    def close(self):
        self.sock.close()


def test_max_client_connections_is_enforced(single):
    async def main():
        addr = single.client_addresses()
        held = [AsyncClient(addr, secret=single.secret()) for _ in range(MAX_CLIENTS)]
        extra = AsyncClient(addr, secret=single.secret(), retry_timeout=3)
        try:
            for cl in held:
                await cl.status()
            with pytest.raises(ConnectionLimitError):
                await extra.status()
            await held.pop().close()
            late = AsyncClient(addr, secret=single.secret(), retry_timeout=10)
            held.append(late)
            # the server notices the closed connection within a moment: retry until it did
            deadline = asyncio.get_running_loop().time() + 10
            while True:
                try:
                    await late.status()
                    break
                except ConnectionLimitError:
                    assert asyncio.get_running_loop().time() < deadline
                    await asyncio.sleep(0.05)
        finally:
            for cl in held + [extra]:
                await cl.close()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_bad_requests_get_specific_errors_and_the_connection_stays_usable(single):
    raw = _Raw(single)
    try:
        bad = [struct.pack("<iqIII", 0, -1, 1, 1 << 20, 0) + b"\x01t",
               struct.pack("<iqIII", 0, 0, 0, 1 << 20, 0) + b"\x01t"]
        for rid, payload in enumerate(bad, 1):
            raw.sock.sendall(encode_frame(0x42, payload, rid))
            fr = raw.recv_frame()
            resp = codec.decode_frame(fr, "s", "raw")
            assert fr.request_id == rid
            assert resp.code == m.ErrorCode.MALFORMED_REQUEST, resp
        raw.send_msg(m.AdminRequest(m.AdminOp.STATUS), 3)
        assert isinstance(codec.decode_frame(raw.recv_frame(), "s", "raw"), m.AdminResponse)
    finally:
        raw.close()
    with Client(single.client_addresses(), secret=single.secret()) as cl:
        with pytest.raises(InvalidArgumentError) as ei:
            cl.add_member("n9", "not-an-address")
        assert type(ei.value) is InvalidArgumentError and "not-an-address" in str(ei.value)
        assert cl.members() == ("n1",)           # nothing changed


def test_a_stalled_large_frame_is_timed_out_and_logged(single):
    raw = _Raw(single)
    try:
        raw.sock.sendall(encode_header(0x40, 8 << 20, 1) + b"\0" * (1 << 20))
        assert raw.closed_by_server()
    finally:
        raw.close()
    wait_until(lambda: "FrameTimeoutError" in single.tail_log("n1", 20000), 10,
               "the frame timeout logged")


def test_a_wrong_client_secret_fails_at_once(single):
    with Client(single.client_addresses(), secret="x" * 32, retry_timeout=5) as cl:
        with pytest.raises(AuthenticationError) as ei:
            cl.status()
    assert "BAD_PROOF" in str(ei.value)
