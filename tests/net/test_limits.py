"""Limits that hold under abuse, on real sockets in one process:
client connections (max_clients), the buffer budget for unfinished large client frames,
handshake slots a flood cannot take from peers and clients, rate-limited refusal lines,
malformed requests answered with an error on a connection that stays usable, and a wrong
client secret that fails at once with an authentication error."""
from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct

import pytest
from net_support import (CLIENT_SECRET, CLUSTER, SECRET, Node, auth, close_all, fast_config,
                         run, start_mesh, wait_until)

from quorumlog.client import AsyncClient
from quorumlog.errors import AuthenticationError, ConnectionLimitError
from quorumlog.net import codec
from quorumlog.net import messages as m
from quorumlog.net.auth import AuthConfig, Handshake
from quorumlog.net.errors import TooManyConnectionsError
from quorumlog.net.framing import FrameDecoder, encode_frame, encode_header
from quorumlog.net.ratelog import RateLimitedLog
from quorumlog.net.transport import PeerTransport, connect_client

LOOPS = [asyncio.new_event_loop]
LOG = "quorumlog.net.transport"


def _server(config, answer=None, node_id="s1", peers=()):
    """A transport serving clients: every request is answered by `answer(msg)` (default:
    an AdminResponse)."""
    def on_request(session, rid, msg):
        resp = answer(msg) if answer else m.AdminResponse("s1", 2, 1, "s1", None, 0, 0, ())
        session.reply(rid, resp)
    a = AuthConfig(CLUSTER, node_id, SECRET, client_secret=CLIENT_SECRET, peers=peers,
                   accept_clients=True)
    return PeerTransport(node_id, a, lambda p, msg: None, config=config,
                         on_client_request=on_request)


def _client_auth(cid="c1", secret=CLIENT_SECRET):
    return AuthConfig(CLUSTER, cid, secret)


class _RawClient:
    """A non-blocking socket that runs a client handshake by hand, then sends anything."""

    def __init__(self, reader, writer):
        self.r, self.w = reader, writer
        self.decoder = FrameDecoder()
        self.pending: list = []

    @classmethod
    async def connect(cls, address, cid="raw"):
        r, w = await asyncio.open_connection(*address)
        self = cls(r, w)
        hs = Handshake.initiator(_client_auth(cid), None, role=m.Role.CLIENT)
        for msg in hs.start():
            self.send_msg(msg)
        while not hs.done:
            for msg in hs.receive(await self.recv_msg()):
                self.send_msg(msg)
        return self

    def send(self, data: bytes) -> None:
        self.w.write(data)

    def send_msg(self, msg, rid=0) -> None:
        self.send(b"".join(bytes(p) for p in codec.encode(msg, rid)))

    async def recv_frame(self, timeout=5.0):
        while not self.pending:
            data = await asyncio.wait_for(self.r.read(65536), timeout)
            if not data:
                raise ConnectionError("closed by the server")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    async def recv_msg(self, timeout=5.0):
        fr = await self.recv_frame(timeout)
        return codec.decode_frame(fr, "s", "c")

    async def closed_by_server(self, timeout=5.0) -> bool:
        try:
            while True:
                if not await asyncio.wait_for(self.r.read(65536), timeout):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self):
        self.w.close()


# -- 1. max_clients ----------------------------------------------------------------------------

@pytest.mark.parametrize("loop_factory", LOOPS)
def test_client_connections_over_max_clients_are_refused_with_a_specific_error(loop_factory):
    async def main():
        srv = _server(fast_config(max_clients=3, client_idle_evict_ms=600_000))
        await srv.start()
        chans = []
        try:
            for i in range(3):
                chans.append(await connect_client(*srv.address, _client_auth(f"c{i}")))
            with pytest.raises(TooManyConnectionsError) as ei:
                await connect_client(*srv.address, _client_auth("c3"))
            assert isinstance(ei.value, ConnectionLimitError)
            assert "max_clients" in str(ei.value) or "too many client" in str(ei.value)
            assert srv.stats()["clients"] == 3
            assert srv.stats()["rejected"]["too many client connections"] == 1
            # a freed slot is usable again
            await chans.pop().close()
            await wait_until(lambda: srv.stats()["clients"] == 2, 5, "a slot freed")
            chans.append(await connect_client(*srv.address, _client_auth("c4")))
            resp = await chans[-1].request(m.AdminRequest(m.AdminOp.STATUS), 5)
            assert isinstance(resp, m.AdminResponse)
        finally:
            for c in chans:
                await c.close()
            await srv.close()
    run(loop_factory, main)


def test_at_max_clients_a_new_client_takes_the_place_of_the_longest_idle_one():
    async def main():
        srv = _server(fast_config(max_clients=2, client_idle_evict_ms=1000))
        await srv.start()
        idle = await connect_client(*srv.address, _client_auth("idle"))
        busy = await connect_client(*srv.address, _client_auth("busy"))
        try:
            t0 = asyncio.get_running_loop().time()
            while asyncio.get_running_loop().time() - t0 < 1.5:   # busy keeps talking
                await busy.request(m.AdminRequest(m.AdminOp.STATUS), 5)
                await asyncio.sleep(0.05)
            new = await connect_client(*srv.address, _client_auth("new"))
            await wait_until(lambda: idle.closed, 5, "the idle client closed")
            assert not busy.closed
            assert isinstance(await new.request(m.AdminRequest(m.AdminOp.STATUS), 5),
                              m.AdminResponse)
            assert srv.stats()["rejected"]["idle client evicted (max_clients)"] == 1
            # both active just now (none idle for 1 s): the next one is refused
            await busy.request(m.AdminRequest(m.AdminOp.STATUS), 5)
            with pytest.raises(TooManyConnectionsError):
                await connect_client(*srv.address, _client_auth("late"))
            await new.close()
        finally:
            await idle.close()
            await busy.close()
            await srv.close()
    run(asyncio.new_event_loop, main)


# -- 2. unfinished large frames ----------------------------------------------------------------

@pytest.mark.parametrize("loop_factory", LOOPS)
def test_stalled_large_frames_are_budgeted_timed_out_and_logged(loop_factory, caplog):
    mib = 1 << 20
    cfg = fast_config(max_frame_bytes=mib + 24, max_send_queue_bytes=4 * mib,
                      max_buffered_frame_bytes=2 * mib, frame_timeout_ms=600, log_burst=100)

    async def main():
        srv = _server(cfg, answer=lambda msg: m.ProduceResponse(1, 0, 0, 0, (1,)))
        await srv.start()
        raws = []
        try:
            # 6 clients announce a 1 MiB produce frame, send 100 KiB of it and stall
            for i in range(6):
                rc = await _RawClient.connect(srv.address, f"stall{i}")
                rc.send(encode_header(0x40, mib, i + 1) + b"\0" * (100 << 10))
                raws.append(rc)
            await wait_until(lambda: srv.stats()["frame_waiters"] == 4, 5,
                             "2 frames buffered, 4 waiting")
            assert srv.stats()["buffered_frame_bytes"] == 2 * mib   # never over the budget
            # each stalled frame times out in turn: every connection is dropped, the
            # budget is free again, and it was logged
            for rc in raws:
                assert await rc.closed_by_server(10)
            await wait_until(lambda: srv.stats()["buffered_frame_bytes"] == 0, 5,
                             "the budget freed")
            assert srv.stats()["rejected"]["FrameTimeoutError"] == 6
            timeouts = [r for r in caplog.records if r.name == LOG and "FrameTimeoutError:"
                        in r.getMessage() and r.levelno == logging.WARNING]
            assert len(timeouts) == 6, [r.getMessage() for r in caplog.records]
            # an honest client's large frame goes through
            ch = await connect_client(*srv.address, _client_auth("honest"))
            resp = await ch.request(m.ProduceRequest("t", [b"x" * (mib - 4096)]), 5)
            assert isinstance(resp, m.ProduceResponse)
            await ch.close()
        finally:
            for rc in raws:
                rc.close()
            await srv.close()
    with caplog.at_level(logging.INFO, logger="quorumlog"):
        run(loop_factory, main)


# -- 3. handshake floods -------------------------------------------------------------------------

async def _slow_flood(address, n, stop: asyncio.Event, hello_for=None):
    """Keep `n` connections open that send one byte per 0.5 s (hello_for: a valid HELLO
    claiming to be that peer, then nothing); reopen each one the server closes."""
    async def one(i):
        while not stop.is_set():
            try:
                r, w = await asyncio.open_connection(*address)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            try:
                if hello_for is not None:
                    hs = Handshake.initiator(AuthConfig(CLUSTER, hello_for, SECRET), "a")
                    w.write(b"".join(bytes(p) for p in codec.encode(hs.start()[0])))
                while not stop.is_set() and not r.at_eof():
                    if hello_for is None:
                        w.write(b"\x51")
                    await asyncio.sleep(0.5)
                    if r.at_eof():
                        break
                    try:
                        await asyncio.wait_for(r.read(100), 0.01)
                    except TimeoutError:
                        pass
            except OSError:
                pass
            finally:
                w.close()
    return [asyncio.get_running_loop().create_task(one(i)) for i in range(n)]


@pytest.mark.parametrize("hello_for", [None, "b"])
def test_peer_rejoins_and_client_connects_during_a_handshake_flood(hello_for):
    async def main():
        cfg = fast_config(max_unauthenticated=8, hello_timeout_ms=30_000,
                          handshake_timeout_ms=30_000)
        a = Node("a", ["a", "b"], config=cfg,
                 on_client_request=lambda s, rid, msg: s.reply(
                     rid, m.AdminResponse("a", 2, 1, "a", None, 0, 0, ())))
        a.t.auth.client_secret = CLIENT_SECRET
        b = Node("b", ["a", "b"], config=fast_config())
        await a.t.start()
        stop = asyncio.Event()
        tasks = await _slow_flood(a.t.address, 30, stop, hello_for)
        try:
            await wait_until(lambda: a.t.stats()["unauthenticated"] >= 8, 10, "slots full")
            await b.t.start()
            b.t.add_peer("a", a.t.address)
            a.t.add_peer("b", b.t.address)
            await b.t.wait_connected("a", 5)
            ch = await connect_client(*a.t.address, AuthConfig(CLUSTER, "c1", CLIENT_SECRET),
                                      timeout=3)
            assert isinstance(await ch.request(m.AdminRequest(m.AdminOp.STATUS), 5),
                              m.AdminResponse)
            await ch.close()
            assert a.t.stats()["unauthenticated"] <= 8
        finally:
            stop.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await close_all([a, b])
    run(asyncio.new_event_loop, main, timeout=40)


def test_a_connection_that_sends_no_hello_in_time_is_closed():
    async def main():
        srv = _server(fast_config(hello_timeout_ms=200, handshake_timeout_ms=30_000))
        await srv.start()
        r, w = await asyncio.open_connection(*srv.address)
        try:
            w.write(b"\x51")
            assert await asyncio.wait_for(r.read(100), 5) == b""
            assert srv.stats()["rejected"]["handshake timeout"] == 1
        finally:
            w.close()
            await srv.close()
    run(asyncio.new_event_loop, main)


# -- 4. refusal lines ----------------------------------------------------------------------------

def test_refusal_lines_are_rate_limited_into_a_summary(caplog):
    async def main():
        srv = _server(fast_config(log_interval_ms=400, log_burst=3))
        await srv.start()
        try:
            for _ in range(40):
                r, w = await asyncio.open_connection(*srv.address)
                w.write(b"GET / HTTP/1.1\r\n\r\n" + b"\0" * 8)
                assert await asyncio.wait_for(r.read(100), 5) == b""
                w.close()
            await wait_until(lambda: any("not logged one by one" in r.getMessage()
                                         for r in caplog.records), 5, "the summary line")
            assert srv.stats()["rejected"]["FrameError"] == 40
        finally:
            await srv.close()
    with caplog.at_level(logging.INFO, logger="quorumlog"):
        run(asyncio.new_event_loop, main)
    lines = [r.getMessage() for r in caplog.records if r.name == LOG]
    refused = [x for x in lines if x.startswith("refused connection")]
    summary = [x for x in lines if "not logged one by one" in x]
    assert len(refused) <= 3 * 2            # the burst of each interval (at most two here)
    assert len(summary) >= 1
    counted = sum(int(x.split(": ")[1].split(" more")[0]) for x in summary)
    assert counted + len(refused) == 40    # every refusal is in a line or in a count
    assert "FrameError: " in summary[0]


# -- 5. malformed requests ---------------------------------------------------------------------

def _fetch_payload(offset, max_messages):
    """A FetchRequest payload by hand (the encoder refuses these values)."""
    return struct.pack("<iqIII", 0, offset, max_messages, 1 << 20, 0) + b"\x01t"


def test_malformed_requests_get_an_error_and_the_connection_stays_usable():
    async def main():
        srv = _server(fast_config())
        await srv.start()
        rc = await _RawClient.connect(srv.address)
        try:
            good = encode_frame(0x42, _fetch_payload(0, 1), 1)
            assert codec.decode_frame(FrameDecoder().feed(good)[0], "c", "s").offset == 0
            for rid, payload, names in ((7, _fetch_payload(-1, 1), "offset"),
                                        (8, _fetch_payload(0, 0), "max_messages"),
                                        (9, _fetch_payload(0, 1) + b"trailing", "unexpected")):
                rc.send(encode_frame(0x42, payload, rid))
                fr = await rc.recv_frame()
                resp = codec.decode_frame(fr, "s", "c")
                assert fr.request_id == rid
                assert isinstance(resp, m.ErrorResponse)
                assert resp.code == m.ErrorCode.MALFORMED_REQUEST
                assert isinstance(resp.to_exception(), m.MalformedRequestError)
                assert names in resp.message, resp.message      # it names what is wrong
            rc.send_msg(m.AdminRequest(m.AdminOp.STATUS), 10)
            fr = await rc.recv_frame()
            assert fr.request_id == 10 and isinstance(codec.decode_frame(fr, "s", "c"),
                                                      m.AdminResponse)
            assert srv.stats()["rejected"]["malformed request"] == 3
        finally:
            rc.close()
            await srv.close()
    run(asyncio.new_event_loop, main)


def test_fuzzed_client_requests_are_answered_and_never_drop_the_connection():
    rng = random.Random(21)
    seeds = [m.ProduceRequest("orders", [b"a", b"bb"], queue_id=3, tags="t"),
             m.FetchRequest("orders", 1, 5, 10, 4096, 0), m.OffsetsRequest("orders", 2, 77),
             m.AdminRequest(m.AdminOp.ADD_MEMBER, "n9", "127.0.0.1:9")]
    encoded = [(codec.spec_for(s).type_code,
                b"".join(bytes(p) for p in codec.encode_payload(s)[1])) for s in seeds]

    async def main():
        srv = _server(fast_config())
        await srv.start()
        rc = await _RawClient.connect(srv.address)
        try:
            for rid in range(1, 301):
                code, payload = encoded[rng.randrange(len(encoded))]
                b = bytearray(payload)
                for _ in range(rng.randint(1, 4)):
                    op = rng.randrange(3)
                    if op == 0 and b:
                        b[rng.randrange(len(b))] = rng.randrange(256)
                    elif op == 1 and b:
                        del b[rng.randrange(len(b)):]
                    else:
                        b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
                rc.send(encode_frame(code, bytes(b), rid))
                fr = await rc.recv_frame()
                assert fr.request_id == rid       # every request answered, in order
                resp = codec.decode_frame(fr, "s", "c")
                assert isinstance(resp, (m.ErrorResponse, m.AdminResponse))
        finally:
            rc.close()
            await srv.close()
    run(asyncio.new_event_loop, main)


# -- 6. a wrong client secret --------------------------------------------------------------------

def test_a_wrong_client_secret_fails_at_once_with_an_authentication_error():
    async def main():
        srv = _server(fast_config())
        await srv.start()
        c = AsyncClient([f"{srv.address[0]}:{srv.address[1]}"] * 3, cluster_id=CLUSTER,
                        secret=b"not-the-client-secret-0123456789", retry_timeout=5)
        try:
            with pytest.raises(AuthenticationError) as ei:
                await c.status()
            assert "BAD_PROOF" in str(ei.value)
            with pytest.raises(AuthenticationError):
                await c.produce("t", b"x")      # no retries: one attempt per call
            assert srv.stats()["rejected"]["bad proof (wrong secret?)"] == 2
        finally:
            await c.close()
            await srv.close()
    run(asyncio.new_event_loop, main)


def test_a_sustained_flood_logs_one_summary_per_interval(caplog):
    now = [0.0]
    lg = logging.getLogger("quorumlog.test.ratelog")
    rl = RateLimitedLog(lg, "conns", interval_s=10, burst=3, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="quorumlog.test.ratelog"):
        for second in range(60):                     # 6 intervals, 100 refusals a second
            now[0] = float(second)
            for _ in range(100):
                rl.log(logging.WARNING, "slots full", "refused %d", second)
        now[0] = 60.0
        rl.flush()
        lines = [r.getMessage() for r in caplog.records]
        assert len([x for x in lines if x.startswith("refused")]) == 3   # the first burst
        summaries = [x for x in lines if "not logged one by one" in x]
        assert len(summaries) == 6
        assert sum(int(x.split(": ")[1].split(" more")[0]) for x in summaries) == 6000 - 3
        caplog.clear()
        now[0] = 75.0                                # a quiet interval passed: a burst again
        rl.log(logging.WARNING, "slots full", "refused again")
        now[0] = 86.0
        rl.log(logging.WARNING, "slots full", "refused later")
        assert [r.getMessage() for r in caplog.records] == ["refused again", "refused later"]
