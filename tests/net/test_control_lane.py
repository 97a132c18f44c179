"""The transport's control lane (a second connection per peer pair for votes and heartbeats)
and the handshake's hand-over to Raft frames, on asyncio and on uvloop: CONTROL-lane messages
travel on their own connection and keep flowing while the data connection is stalled, the
control connection accepts control frames only (small ones), falls back to the data
connection while it is down, reconnects after a restart; and a peer's first Raft frame that
arrives in the same read as its AUTH_OK is delivered, not refused."""
import asyncio
import logging
import socket
import threading

import pytest

from quorumlog.net import codec
from quorumlog.net import messages as m
from quorumlog.net.auth import Handshake
from quorumlog.net.framing import FrameDecoder, encode_frame
from quorumlog.raft.messages import (CONTROL, AppendResponse, Code, Heartbeat,
                                     VoteRequest, VoteResponse, VoteResult)

from net_support import Node, RawPeer, auth, close_all, fast_config, run, same, wait_until
from test_transport import append, hb

LOG = "quorumlog.net.transport"


def _wire(msg) -> bytes:
    return b"".join(bytes(p) for p in codec.encode(msg))


def lanes(**kw):
    return fast_config(control_lane=True, **kw)


async def start_pair(cfg_a, cfg_b, *, a_dials=True, b_dials=True):
    a, b = Node("a", "ab", config=cfg_a), Node("b", "ab", config=cfg_b)
    await a.t.start()
    await b.t.start()
    a.t.add_peer("b", b.t.address if a_dials else None)
    b.t.add_peer("a", a.t.address if b_dials else None)
    return a, b


def test_control_messages_travel_on_their_own_connection(loop_factory):
    async def body():
        a, b = await start_pair(lanes(), lanes())
        try:
            for x, y in ((a, "b"), (b, "a")):
                await x.t.wait_connected(y, 10)
                await x.t.wait_connected(y, 10, lane=CONTROL)
            # both pairs of duplicate dials resolved the same way on both sides: 2 each
            await wait_until(lambda: a.t.stats()["connections"] == 2 and
                             b.t.stats()["connections"] == 2, 5, "duplicates closed")
            assert a.t.stats()["peers"]["b"]["control"]["dialled"]
            assert not b.t.stats()["peers"]["a"]["control"]["dialled"]
            sent = [hb("a", "b", 1), VoteRequest(3, "a", "b", 9, 2, pre=True),
                    append("a", "b", 1, 100_000), hb("a", "b", 2),
                    AppendResponse(2, "a", "b", Code.SUCCESS, 1, 0, 1, 0, 0, 1),
                    VoteResponse(3, "a", "b", 3, VoteResult.ACCEPT, pre=True)]
            for x in sent:
                assert a.t.send("b", x)
            await wait_until(lambda: len(b.inbox) == len(sent), 10, "all delivered")
            st = a.t.stats()["peers"]["b"]
            assert st["control"]["sent"] == 4 and st["sent"] == 2
            rst = b.t.stats()["peers"]["a"]
            assert rst["control"]["received"] == 4 and rst["received"] == 2
            got = b.from_peer("a")
            control = [x for x in got if x.lane == CONTROL]
            data = [x for x in got if x.lane != CONTROL]
            # FIFO within a lane (the lanes are not ordered with each other)
            assert all(same(g, w) for g, w in zip(control, [sent[i] for i in (0, 1, 3, 5)]))
            assert all(same(g, w) for g, w in zip(data, [sent[2], sent[4]]))
            assert control[1].pre and control[3].pre
        finally:
            await close_all([a, b])
    run(loop_factory, body)


def test_heartbeats_flow_while_the_data_connection_is_stalled(loop_factory):
    """b stops reading a's data connection (a slow or stalled socket): a's APPENDs back up
    to the byte budget, and the heartbeats and votes a sends meanwhile still arrive."""
    async def body():
        cfg = lanes(max_send_queue_bytes=2 << 20, max_frame_bytes=1 << 20,
                    write_high_water_bytes=256 << 10, write_low_water_bytes=64 << 10)
        a, b = await start_pair(cfg, cfg)
        try:
            for x, y in ((a, "b"), (b, "a")):
                await x.t.wait_connected(y, 10, lane=CONTROL)
                await x.t.wait_connected(y, 10)
            await wait_until(lambda: a.t.stats()["connections"] == 2, 5, "duplicates closed")
            assert b.t.pause_reading("a")             # the data connection only
            dropped = 0
            for i in range(40):                        # 40 x 256 KiB: past the 2 MiB budget
                if not a.t.send("b", append("a", "b", i + 1, 256 << 10)):
                    dropped += 1
                if i % 8 == 0:
                    await asyncio.sleep(0)
            assert dropped > 0                         # the data connection is full
            assert a.t.stats()["peers"]["b"]["queued_bytes"] > 0
            for seq in range(1, 6):
                assert a.t.send("b", hb("a", "b", seq))
                assert a.t.send("b", VoteRequest(4, "a", "b", 7, 2))
            await wait_until(lambda: len(b.from_peer("a")) == 10, 10,
                             "heartbeats and votes past the stalled data connection")
            assert all(x.lane == CONTROL for x in b.from_peer("a"))
            assert [x.seq for x in b.from_peer("a") if isinstance(x, Heartbeat)] == \
                [1, 2, 3, 4, 5]
            b.t.resume_reading("a")
            accepted = 40 - dropped
            await wait_until(lambda: len(b.from_peer("a")) == 10 + accepted, 20, "drain")
        finally:
            await close_all([a, b])
    run(loop_factory, body, timeout=60)


def test_control_messages_fall_back_to_the_data_connection(loop_factory):
    """Without a control connection (the peer does not dial one and this side does not
    either, or it is down) CONTROL-lane messages go on the data connection."""
    async def body():
        a, b = await start_pair(fast_config(), lanes(), b_dials=False)
        try:
            await a.t.wait_connected("b", 10)
            assert not a.t.is_connected("b", lane=CONTROL)
            assert a.t.send("b", hb("a", "b", 1))
            await wait_until(lambda: len(b.from_peer("a")) == 1, 10, "heartbeat")
            assert a.t.stats()["peers"]["b"]["sent"] == 1
            assert a.t.stats()["peers"]["b"]["control"]["sent"] == 0
            # b (control_lane) dials its control connection too once it knows a's address
            b.t.add_peer("a", a.t.address)
            await a.t.wait_connected("b", 10, lane=CONTROL)
            assert a.t.send("b", hb("a", "b", 2))
            await wait_until(lambda: len(b.from_peer("a")) == 2, 10, "second heartbeat")
            assert a.t.stats()["peers"]["b"]["control"]["sent"] == 1
        finally:
            await close_all([a, b])
    run(loop_factory, body)


def test_both_lanes_reconnect_after_a_restart(loop_factory):
    async def body():
        a, b = await start_pair(lanes(), lanes())
        b2 = None
        try:
            await a.t.wait_connected("b", 10, lane=CONTROL)
            port = b.t.address
            await b.t.close()
            await wait_until(lambda: not a.t.is_connected("b") and
                             not a.t.is_connected("b", lane=CONTROL), 5, "a to notice")
            b2 = Node("b", "ab", config=lanes(), listen=port)
            await b2.t.start()
            b2.t.add_peer("a", a.t.address)
            await a.t.wait_connected("b", 10, lane=CONTROL)
            await a.t.wait_connected("b", 10)
            assert a.t.send("b", hb("a", "b", 7))
            assert a.t.send("b", append("a", "b", 1, 1000))
            await wait_until(lambda: len(b2.from_peer("a")) == 2, 10, "both lanes")
            st = a.t.stats()["peers"]["b"]
            assert st["control"]["connects"] >= 2 and st["control"]["disconnects"] >= 1
            assert st["connects"] >= 2
        finally:
            await close_all([a, b] + ([b2] if b2 else []))
    run(loop_factory, body)


@pytest.mark.parametrize("frame,reason", [
    (lambda: _wire(append("a", "b", 1, 100)), "frame type 0x14 not allowed here"),
    (lambda: encode_frame(0x12, bytes(5000)),    # a "heartbeat" of 5000 bytes
     "is over control_max_frame_bytes=4096"),
])
def test_control_connection_refuses_data_frames(loop_factory, caplog, frame, reason):
    caplog.set_level(logging.INFO, logger=LOG)

    async def body():
        b = Node("b", "ab", config=lanes())
        try:
            await b.t.start()
            b.t.add_peer("a", None)
            loop = asyncio.get_running_loop()

            def misbehave():
                raw = RawPeer(b.t.address)
                try:
                    hs = Handshake.initiator(auth("a", "ab"), "b", role=m.Role.PEER_CONTROL)
                    for x in hs.start():
                        raw.send_msg(x)
                    while not hs.done:
                        for x in hs.receive(raw.recv_msg()):
                            raw.send_msg(x)
                    raw.send_msg(hb("a", "b", 1))
                    raw.send(frame())
                    return raw.closed_by_peer(5)
                finally:
                    raw.close()
            assert await loop.run_in_executor(None, misbehave)
            await wait_until(lambda: reason in caplog.text, 5, "log line")
            assert [x.seq for x in b.from_peer("a")] == [1]
            assert "dropped connection from peer_control 'a'" in caplog.text
        finally:
            await b.t.close()
    run(loop_factory, body)


class _EagerResponder:
    """A peer 'b' that answers the handshake by hand and writes its first Raft frame in the
    same send() as its AUTH_OK, as a fast peer's kernel may deliver them to the dialler."""

    def __init__(self, first_frame: bytes):
        self.first_frame = first_frame
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(10)
        self.address = self.sock.getsockname()[:2]
        self.error = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(10)
                hs = Handshake.responder(auth("b", "ab"))
                hs.start()
                dec = FrameDecoder()
                while not hs.done:
                    data = conn.recv(65536)
                    if not data:
                        raise ConnectionError("dialler closed during the handshake")
                    for fr in dec.feed(data):
                        out = hs.receive(codec.decode_frame(fr, channels=(codec.AUTH,)))
                        wire = b"".join(_wire(x) for x in out)
                        if hs.done:
                            wire += self.first_frame          # one write: AUTH_OK + Raft
                        conn.sendall(wire)
                self.done.set()
                # keep the connection open until the test is over
                while conn.recv(65536):
                    pass
        except Exception as e:   # reported by the test
            self.error = e
            self.done.set()

    def close(self):
        self.sock.close()
        self.thread.join(10)


@pytest.mark.parametrize("first", ["heartbeat", "append"])
def test_first_raft_frame_behind_auth_ok_is_delivered(loop_factory, caplog, first):
    """Before the fix the dialler parsed both frames of that read as handshake frames and
    refused the connection: 'frame type 0x12 not allowed here' (0x14 for an APPEND, or the
    handshake's 4096-byte limit for a large one)."""
    caplog.set_level(logging.INFO, logger=LOG)
    msg = hb("b", "a", 42) if first == "heartbeat" else append("b", "a", 1, 200_000)
    peer = _EagerResponder(_wire(msg))

    async def body():
        a = Node("a", "ab")
        try:
            await a.t.start()
            a.t.add_peer("b", peer.address)
            await wait_until(lambda: a.from_peer("b") or "refused" in caplog.text, 10,
                             "the first frame or a refusal")
            assert "not allowed here" not in caplog.text
            assert "handshake_max_frame_bytes" not in caplog.text
            (got,) = a.from_peer("b")
            assert same(got, msg)
            assert a.t.is_connected("b")
        finally:
            await a.t.close()
    try:
        run(loop_factory, body)
    finally:
        peer.close()
    assert peer.error is None, peer.error
