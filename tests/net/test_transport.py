"""The TCP transport on 127.0.0.1 (ports from the OS), on asyncio and on uvloop: messages
flow, one connection per pair, reconnect after a restart, bad connections refused with a log
line while the legitimate peers keep talking, bounded memory behind a stalled receiver,
client connections, TLS."""
import asyncio
import logging
import socket
import shutil
import ssl
import subprocess
import struct
import zlib

import pytest

from quorumlog.net import codec
from quorumlog.net import messages as m
from quorumlog.net.auth import AuthConfig
from quorumlog.net.errors import AuthRejectedError
from quorumlog.net.framing import MAGIC, encode_frame
from quorumlog.net.transport import PeerTransport, TransportConfig, connect_client
from quorumlog.raft.messages import Append, Heartbeat, VoteRequest

from net_support import (CLIENT_SECRET, CLUSTER, SECRET, Node, RawPeer, auth, close_all,
                         fast_config, run, same, start_mesh, wait_until)

LOG = "quorumlog.net.transport"


def hb(src, dst, seq, term=1):
    return Heartbeat(term, src, dst, 0, seq)


def append(src, dst, first, nbytes):
    payload = bytes((first + i) % 251 for i in range(nbytes))
    return Append(2, src, dst, first - 1, 2, first, first, 2, payload, nbytes, 0, (), 1)


async def exchange(a: Node, b: Node, seq: int, timeout=10):
    """a -> b one heartbeat; wait until b has it."""
    assert a.t.send(b.id, hb(a.id, b.id, seq))
    await wait_until(lambda: any(x.seq == seq for x in b.from_peer(a.id)), timeout,
                     f"{b.id} to receive seq {seq} from {a.id}")


async def deliver(a: Node, b: Node, seq: int, timeout=10):
    """a -> b one heartbeat, sent again every 0.2 s until b has it. Right after a restart
    both sides dial and a may briefly have no connection (the peer's FIN on the duplicate
    it retired arrives before a's own dial authenticates): that send is dropped, and Raft
    would resend."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not any(x.seq == seq for x in b.from_peer(a.id)):
        assert asyncio.get_running_loop().time() < deadline, (
            f"timed out after {timeout} s waiting for {b.id} to receive seq {seq} from {a.id}")
        a.t.send(b.id, hb(a.id, b.id, seq))
        try:
            await wait_until(lambda: any(x.seq == seq for x in b.from_peer(a.id)), 0.2)
        except AssertionError:
            pass


def test_messages_flow_between_three_nodes(loop_factory):
    async def body():
        nodes = [Node(i, "abc") for i in "abc"]
        try:
            await start_mesh(nodes)
            sent = {}
            for n in nodes:
                for o in nodes:
                    if o is not n:
                        msgs = [hb(n.id, o.id, s) for s in range(50)] + \
                               [append(n.id, o.id, 1, 300_000), VoteRequest(3, n.id, o.id, 9, 2)]
                        sent[(n.id, o.id)] = msgs
                        for x in msgs:
                            assert n.t.send(o.id, x)
            await wait_until(lambda: all(len(n.inbox) == 2 * 52 for n in nodes), 15, "all")
            for n in nodes:
                for o in nodes:
                    if o is not n:
                        got = n.from_peer(o.id)
                        want = sent[(o.id, n.id)]
                        assert len(got) == len(want)
                        assert all(same(g, w) for g, w in zip(got, want))   # in order
        finally:
            await close_all(nodes)
    run(loop_factory, body)


def test_one_connection_per_pair_when_both_dial(loop_factory):
    async def body():
        a, b = Node("a", "ab"), Node("b", "ab")
        try:
            await start_mesh([a, b])       # both add each other: both dial
            await exchange(a, b, 1)
            await exchange(b, a, 2)
            # every duplicate got closed: one live connection on each side
            await wait_until(lambda: a.t.stats()["connections"] == 1 and
                             b.t.stats()["connections"] == 1, 5, "duplicates closed")
            # both sides kept the same connection: the one the lower id dialled
            assert a.t.stats()["peers"]["b"]["dialled"]
            assert not b.t.stats()["peers"]["a"]["dialled"]
        finally:
            await close_all([a, b])
    run(loop_factory, body)


def test_frames_on_the_losing_duplicate_are_delivered(loop_factory):
    """The race behind test_both_lanes_reconnect_after_a_restart's 1-in-8 failure, driven
    directly: b already gave up connection Y for a newer one (Z) when a, which has not
    resolved the pair yet, sends on Y. Before the fix b closed Y at once and the frame was
    lost (Y read nothing more); now b half-closes Y, delivers what still arrives on it, and
    closes it once a does -- or after duplicate_drain_ms if a never does."""
    async def body():
        b = Node("b", "ab", config=fast_config(duplicate_drain_ms=300))
        raws = []
        try:
            await b.t.start()
            b.t.add_peer("a", None)                      # known, not dialled
            loop = asyncio.get_running_loop()

            def race():
                y = RawPeer(b.t.address)
                raws.append(y)
                y.handshake(auth("a", "ab"), "b")
                z = RawPeer(b.t.address)
                raws.append(z)
                z.handshake(auth("a", "ab"), "b")        # b keeps Z (the newer), drops Y
                y.send_msg(hb("a", "b", 1))              # a has not noticed yet
                z.send_msg(hb("a", "b", 2))
                return y.closed_by_peer(5)               # b's FIN on Y
            assert await loop.run_in_executor(None, race)
            await wait_until(lambda: sorted(x.seq for x in b.from_peer("a")) == [1, 2], 5,
                             "both heartbeats, the one on the dropped duplicate too")
            st = b.t.stats()["peers"]["a"]
            assert st["duplicates_closed"] == 1 and st["connected"] and st["received"] == 2
            # a never closes Y: b does, after duplicate_drain_ms
            await wait_until(lambda: b.t.stats()["connections"] == 1, 5, "Y closed by b")
            assert b.t.send("a", hb("b", "a", 3))       # on Z, which b kept
            got = await loop.run_in_executor(None, raws[1].recv_msg)
            assert got.seq == 3
        finally:
            for r in raws:
                r.close()
            await b.t.close()
    run(loop_factory, body)


def test_reconnect_after_a_restart_on_the_same_port(loop_factory):
    async def body():
        a, b = Node("a", "ab"), Node("b", "ab")
        b2 = None
        try:
            await start_mesh([a, b])
            await exchange(a, b, 1)
            port = b.t.address
            await b.t.close()
            await wait_until(lambda: not a.t.is_connected("b"), 5, "a to notice")
            assert not a.t.send("b", hb("a", "b", 2))       # no connection: dropped, counted
            assert a.t.stats()["peers"]["b"]["dropped_no_connection"] == 1
            b2 = Node("b", "ab", listen=port)
            await b2.t.start()
            b2.t.add_peer("a", a.t.address)
            await a.t.wait_connected("b", 10)
            await b2.t.wait_connected("a", 10)
            await deliver(a, b2, 3)
            await deliver(b2, a, 4)
            assert a.t.stats()["peers"]["b"]["connects"] >= 2
        finally:
            await close_all([a, b] + ([b2] if b2 else []))
    run(loop_factory, body)


def test_half_open_connection_is_replaced_when_the_peer_comes_back(loop_factory):
    """b 'dies' without closing its socket (it stops reading and never sends); a restarted b
    dials a: a drops the silent old connection for the new one instead of refusing it."""
    async def body():
        cfg = fast_config(replace_silent_after_ms=200)
        a, b = Node("a", "ab", config=cfg), Node("b", "ab", config=cfg)
        b2 = None
        try:
            await start_mesh([a, b])
            await exchange(b, a, 1)
            assert a.t.stats()["peers"]["b"]["dialled"]      # a's own dial was kept
            b.t.add_peer("a", None)          # the dead process does not redial...
            b.t.pause_reading("a")           # ...reads nothing, sends nothing
            b2 = Node("b", "ab", config=cfg)
            await b2.t.start()
            b2.t.add_peer("a", a.t.address)
            # replaced by the connection b2 dialled
            await wait_until(lambda: a.t.is_connected("b") and
                             not a.t.stats()["peers"]["b"]["dialled"], 10, "replacement")
            await b2.t.wait_connected("a", 10)
            await exchange(a, b2, 2)
            await exchange(b2, a, 3)
            assert not b.from_peer("a")
        finally:
            await close_all([a, b] + ([b2] if b2 else []))
    run(loop_factory, body)


def test_reconnect_when_the_peer_starts_late(loop_factory):
    async def body():
        a = Node("a", "ab")
        b = None
        # hold a port that refuses connections (bound, not listening) until b starts on it
        hold = socket.socket()
        hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hold.bind(("127.0.0.1", 0))
        port = hold.getsockname()
        try:
            await a.t.start()
            a.t.add_peer("b", port)                 # a dials, fails, backs off, retries
            await wait_until(lambda: a.t.stats()["peers"]["b"]["dial_failures"] >= 3, 10,
                             "a few failed dials")
            hold.close()
            b = Node("b", "ab", listen=port)
            await b.t.start()
            b.t.add_peer("a", a.t.address)
            await a.t.wait_connected("b", 10)
            await exchange(a, b, 1)
            pa = a.t.stats()["peers"]["b"]
            assert pa["dial_failures"] >= 3 and pa["connected"], pa
        finally:
            hold.close()
            await close_all([a] + ([b] if b else []))
    run(loop_factory, body)


def _raw_frame_header(length, ftype=0x01):
    prefix = struct.pack("<HBBHHQI", MAGIC, 1, ftype, 0, 0, 0, length)
    return prefix + struct.pack("<I", zlib.crc32(prefix))


@pytest.mark.parametrize("attack,reason", [
    ("oversized", "FrameTooLargeError: frame of 4294967319 bytes (payload 4294967295) is over "
                  "handshake_max_frame_bytes=4096"),
    ("garbage", "FrameError: bad frame magic"),
    ("wrong_secret", "BadProofError"),
    ("unknown_node", "UnknownNodeError: unknown peer node id 'mallory'"),
    ("wrong_cluster", "WrongClusterError"),
    ("raft_before_auth", "FrameError: frame type 0x12 not allowed here"),
])
def test_bad_connections_refused_while_peers_keep_talking(loop_factory, caplog, attack, reason):
    caplog.set_level(logging.INFO, logger=LOG)

    async def body():
        a, b = Node("a", "ab"), Node("b", "ab")
        try:
            await start_mesh([a, b])
            await exchange(a, b, 1)
            loop = asyncio.get_running_loop()

            def attack_b():
                raw = RawPeer(b.t.address)
                try:
                    if attack == "oversized":
                        raw.send(_raw_frame_header(0xFFFFFFFF))
                    elif attack == "garbage":
                        raw.send(b"GET / HTTP/1.1\r\nHost: b\r\n\r\n" + bytes(range(256)) * 16)
                    elif attack == "raft_before_auth":
                        raw.send_msg(hb("x", "b", 1))
                    else:
                        secret = b"not-the-secret-not-the-secret!!!" if attack == "wrong_secret" \
                            else SECRET
                        node = "mallory" if attack == "unknown_node" else "a"
                        cluster = "other" if attack == "wrong_cluster" else CLUSTER
                        try:
                            raw.handshake(AuthConfig(cluster, node, secret, peers=["b"]), "b")
                        except AuthRejectedError:
                            pass                            # b told us why: expected
                    return raw.closed_by_peer(5)
                finally:
                    raw.close()
            assert await loop.run_in_executor(None, attack_b), "b kept the bad connection open"
            await wait_until(lambda: reason in caplog.text, 5, f"log line {reason!r}")
            # the legitimate pair still talks, both ways
            await exchange(a, b, 2)
            await exchange(b, a, 3)
            assert b.t.stats()["rejected"]
        finally:
            await close_all([a, b])
    run(loop_factory, body)
    line = next(r for r in caplog.records if reason.split(":")[0] in r.getMessage())
    assert line.levelno == logging.WARNING and "refused connection from 127.0.0.1:" in line.getMessage()


def test_oversized_frame_from_an_authenticated_peer_drops_it(loop_factory, caplog):
    caplog.set_level(logging.INFO, logger=LOG)

    async def body():
        cfg = fast_config(max_frame_bytes=1 << 20, max_send_queue_bytes=4 << 20)
        b = Node("b", "ab", config=cfg)
        try:
            await b.t.start()
            b.t.add_peer("a", None)                      # known, not dialled
            loop = asyncio.get_running_loop()

            def misbehave():
                raw = RawPeer(b.t.address)
                try:
                    raw.handshake(auth("a", "ab"), "b")
                    raw.send_msg(hb("a", "b", 1))
                    raw.send(_raw_frame_header((1 << 20) + 1, ftype=0x14))
                    return raw.closed_by_peer(5)
                finally:
                    raw.close()
            assert await loop.run_in_executor(None, misbehave)
            await wait_until(lambda: " max_frame_bytes=1048576" in caplog.text, 5, "log line")
            assert [x.seq for x in b.from_peer("a")] == [1]   # what came before was delivered
            assert "dropped connection from peer 'a'" in caplog.text
        finally:
            await b.t.close()
    run(loop_factory, body)


def test_handshake_timeout_and_unauthenticated_cap(loop_factory, caplog):
    caplog.set_level(logging.INFO, logger=LOG)

    async def body():
        # 1.5 s: the third connection must be accepted while the first two still wait
        b = Node("b", "ab", config=fast_config(handshake_timeout_ms=1500, max_unauthenticated=2,
                                               hello_timeout_ms=30_000))
        try:
            await b.t.start()
            loop = asyncio.get_running_loop()

            def silent_clients():
                raws = [RawPeer(b.t.address) for _ in range(3)]
                try:
                    # the third is over the cap: it evicts the oldest (no HELLO sent);
                    # the other two time out
                    return [r.closed_by_peer(5) for r in raws]
                finally:
                    for r in raws:
                        r.close()
            assert await loop.run_in_executor(None, silent_clients) == [True, True, True]
            await wait_until(lambda: caplog.text.count("HandshakeTimeoutError") == 2, 5,
                             "two timeouts logged")
            assert "in its handshake: handshake slots full: oldest evicted" in caplog.text
            assert b.t.stats()["unauthenticated"] == 0
            assert b.t.stats()["rejected"]["handshake slots full: oldest evicted"] == 1
        finally:
            await b.t.close()
    run(loop_factory, body)


def test_sends_of_one_loop_turn_go_out_in_one_write(loop_factory):
    """Issue 20 §3: the frames one loop turn sends to a peer (a Ready's APPENDs and
    heartbeats) leave in one write at the end of the turn, in order; a turn that sends
    nothing writes nothing. A turn of 64 KiB or more goes to the idle socket as one writev
    of the callers' buffers: an APPEND's payload (a view of the leader's log) is not copied
    in user space (only what a full socket refuses is: the test after the next)."""
    async def body():
        a, b = Node("a", "ab"), Node("b", "ab")
        try:
            await start_mesh([a, b])
            await exchange(a, b, 1)
            before = a.t.stats()["peers"]["b"]["writes"]
            mem = bytearray(bytes(range(250)) * 800)
            msgs = [append("a", "b", i + 1, 1000) for i in range(5)] + [hb("a", "b", 2)] + \
                [Append(2, "a", "b", 5, 2, 6, 6, 2, memoryview(mem), len(mem), 0, (), 1)]
            for x in msgs:
                assert a.t.send("b", x)
            # held (and counted against the budget) until the turn ends
            assert a.t.held_bytes("b") > 200_000
            await wait_until(lambda: len(b.from_peer("a")) == 1 + len(msgs), 10, "7 frames")
            assert a.t.stats()["peers"]["b"]["writes"] - before == 1
            assert a.t.stats()["peers"]["b"]["copied_bytes"] == 0
            got = b.from_peer("a")[1:]
            assert all(same(g, w) for g, w in zip(got, msgs))      # in order
            await asyncio.sleep(0.05)
            assert a.t.stats()["peers"]["b"]["writes"] - before == 1
        finally:
            await close_all([a, b])
    run(loop_factory, body)


def test_send_memory_is_bounded_when_the_receiver_stops_reading(loop_factory):
    async def body():
        budget = 4 << 20
        cfg = fast_config(max_send_queue_bytes=budget, max_frame_bytes=1 << 20,
                          control_reserve_bytes=64 << 10, write_high_water_bytes=256 << 10,
                          write_low_water_bytes=64 << 10)
        a, b = Node("a", "ab", config=cfg), Node("b", "ab", config=cfg)
        try:
            await start_mesh([a, b])
            await exchange(a, b, 1)
            assert b.t.pause_reading("a")             # b stops reading its socket
            accepted = dropped = 0
            peak = 0
            for i in range(200):                       # 200 x 256 KiB = 50 MiB offered
                if a.t.send("b", append("a", "b", i + 1, 256 << 10)):
                    accepted += 1
                else:
                    dropped += 1
                peak = max(peak, a.t.held_bytes("b"))
                if i % 10 == 0:
                    await asyncio.sleep(0)             # let the loop write what it can
            st = a.t.stats()["peers"]["b"]
            assert dropped > 0 and st["dropped_backpressure"] == dropped
            assert peak <= budget and st["max_held_bytes"] <= budget
            # a small control message still fits in the reserve, and jumps the APPEND queue
            assert a.t.stats()["peers"]["b"]["queued_bytes"] > 0
            assert a.t.send("b", hb("a", "b", 99))
            assert a.t.held_bytes("b") <= budget + (64 << 10)
            b.t.resume_reading("a")
            await wait_until(lambda: len(b.from_peer("a")) == 1 + accepted + 1, 20, "drain")
            got = b.from_peer("a")
            seqs = [x.seq for x in got if isinstance(x, Heartbeat)]
            assert seqs == [1, 99]
            assert not isinstance(got[-1], Heartbeat)          # it overtook queued APPENDs
            await wait_until(lambda: a.t.held_bytes("b") == 0, 5, "empty queue")
        finally:
            await close_all([a, b])
    run(loop_factory, body, timeout=60)


async def _client_and_server(on_client_request):
    """A transport serving clients (handler `on_client_request`) and one client channel."""
    server = PeerTransport("s", AuthConfig(CLUSTER, "s", SECRET, client_secret=CLIENT_SECRET),
                           lambda p, x: None, on_client_request=on_client_request,
                           config=fast_config())
    await server.start()
    host, port = server.address
    try:
        ch = await connect_client(host, port, AuthConfig(CLUSTER, "app-1", CLIENT_SECRET),
                                  server_id="s")
    except BaseException:
        await server.close()
        raise
    return server, ch


def test_client_connection_request_response(loop_factory, caplog):
    caplog.set_level(logging.INFO, logger=LOG)

    async def body():
        def on_client_request(session, request_id, msg):
            assert isinstance(msg, m.ProduceRequest)
            session.reply(request_id, m.ProduceResponse(7, 0, 10, 123,
                                                        tuple(range(len(msg.bodies)))))

        server, ch = await _client_and_server(on_client_request)
        host, port = server.address
        try:
            try:
                r = await ch.request(m.ProduceRequest("t", [b"x", b"y" * 100_000]), timeout=5)
                assert r == m.ProduceResponse(7, 0, 10, 123, (0, 1))
                assert server.stats()["clients"] == 1
            finally:
                await ch.close()
            # a client with the cluster (peer) secret instead of the client secret: refused
            with pytest.raises(AuthRejectedError, match="BAD_PROOF"):
                await connect_client(host, port, AuthConfig(CLUSTER, "app-2", SECRET))
        finally:
            await server.close()
    run(loop_factory, body)
    assert "BadProofError" in caplog.text


def test_client_request_times_out_and_a_late_response_is_dropped(loop_factory):
    async def body():
        held = []

        def on_client_request(session, request_id, msg):
            held.append((session, request_id))      # answered only later (or never)

        server, ch = await _client_and_server(on_client_request)
        host, port = server.address
        try:
            try:
                loop = asyncio.get_running_loop()
                t0 = loop.time()
                with pytest.raises(TimeoutError):
                    await ch.request(m.ProduceRequest("t", [b"x"]), timeout=0.2)
                assert 0.15 <= loop.time() - t0 < 5
                # the late answer to the timed-out request is dropped; the next one is served
                session, rid = held.pop()
                session.reply(rid, m.ProduceResponse(1, 0, 0, 1, (0,)))
                nxt = loop.create_task(ch.request(m.ProduceRequest("t", [b"y"]), timeout=5))
                await wait_until(lambda: held, 5, "second request")
                session, rid2 = held.pop()
                assert rid2 != rid
                session.reply(rid2, m.ProduceResponse(2, 0, 1, 1, (9,)))
                assert (await nxt).positions == (9,)
            finally:
                await ch.close()
        finally:
            await server.close()
    run(loop_factory, body)


def test_peer_transport_refuses_clients_without_a_handler(loop_factory):
    async def body():
        server = PeerTransport("s", AuthConfig(CLUSTER, "s", SECRET, client_secret=CLIENT_SECRET),
                               lambda p, x: None, config=fast_config())
        await server.start()
        try:
            with pytest.raises(AuthRejectedError, match="ROLE_REFUSED"):
                await connect_client(*server.address, AuthConfig(CLUSTER, "app", CLIENT_SECRET))
        finally:
            await server.close()
    run(loop_factory, body)


def _make_cert(tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl command not available to make a test certificate")
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", crt, "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return key, crt


def test_tls(loop_factory, tmp_path):
    key, crt = _make_cert(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(crt, key)
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(crt))

    async def body():
        a = Node("a", "ab", ssl_server=server_ctx, ssl_client=client_ctx)
        b = Node("b", "ab", ssl_server=server_ctx, ssl_client=client_ctx)
        try:
            await start_mesh([a, b])
            await exchange(a, b, 1)
            big = append("b", "a", 5, 2 << 20)
            assert b.t.send("a", big)
            await wait_until(lambda: any(isinstance(x, Append) for x in a.from_peer("b")), 10,
                             "append over TLS")
            got = [x for x in a.from_peer("b") if isinstance(x, Append)][0]
            assert same(got, big)
            assert a.t.stats()["peers"]["b"]["tls"] and b.t.stats()["peers"]["a"]["tls"]
        finally:
            await close_all([a, b])
    run(loop_factory, body)


def test_config_validation():
    from quorumlog.errors import ConfigError
    with pytest.raises(ConfigError, match="a full frame could never be sent"):
        TransportConfig(max_send_queue_bytes=1024).validate()
    with pytest.raises(ConfigError):
        TransportConfig(handshake_timeout_ms=0).validate()
    with pytest.raises(ConfigError, match="auth config is for node"):
        PeerTransport("a", auth("b", "ab"), lambda p, x: None)


def test_a_payload_is_sent_as_it_was_at_send_even_if_its_memory_changes_later(loop_factory):
    """An APPEND's payload is a view of the leader's mapped log. A deposed leader's log is
    truncated and written again by the next leader; what the transport still holds for a
    slow peer must be the bytes of the send, not what the log says later (nodesim seed 15370:
    "bad magic/version at byte 0 of the range"; with same-sized records, a newer leader's
    entries under the old leader's prev). Held by the transport's own queue (asyncio, once
    paused) or by uvloop's write buffer, the views used to change with the memory."""
    async def body():
        cfg = fast_config(write_high_water_bytes=256 << 10, write_low_water_bytes=64 << 10)
        a, b = Node("a", "ab", config=cfg), Node("b", "ab", config=cfg)
        try:
            await start_mesh([a, b])
            await exchange(a, b, 1)
            assert b.t.pause_reading("a")             # b stops reading: a's sends back up
            mems, want = [], []
            for i in range(32):                        # 32 x 256 KiB, well past the socket
                mem = bytearray(bytes([i + 1]) * (256 << 10))
                mems.append(mem)
                want.append(bytes(mem))
                assert a.t.send("b", Append(2, "a", "b", i, 2, i + 1, i + 1, 2,
                                            memoryview(mem), len(mem), 0, (), 1))
                if i in (15, 31):
                    # the end of a turn: its frames are written (the first half pauses the
                    # transport; the second half waits in the connection's own queue)
                    await asyncio.sleep(0)
            assert a.t.held_bytes("b") > 0           # (some of it is still on a's side)
            for mem in mems:                           # the log is cut and written again
                mem[:] = bytes(len(mem))
            b.t.resume_reading("a")
            await wait_until(lambda: len(b.from_peer("a")) == 1 + 32, 20, "drain")
            got = [bytes(x.payload) for x in b.from_peer("a") if isinstance(x, Append)]
            assert [g == w for g, w in zip(got, want)] == [True] * 32
            # what the socket refused was copied (the writes past the first were left
            # to the transport whole)
            assert a.t.stats()["peers"]["b"]["copied_bytes"] > 0
        finally:
            await close_all([a, b])
    run(loop_factory, body, timeout=60)
