"""The fault proxy itself: bytes pass unchanged, delay and jitter hold bytes back (in order),
a blackhole forwards nothing and resets the connection when lifted, a stall delivers late,
RST resets, refuse resets at accept, the bandwidth cap bounds throughput, partitions cut the
right directions. Correctness of the proxy, not performance: every wait is bounded."""
from __future__ import annotations

import asyncio
import os
import time

import pytest

from quorumlog.errors import InvalidArgumentError
from quorumlog.testing.faultproxy import FaultNetwork, FaultProxy, LinkFaults

DEADLINE_S = 20.0


class Upstream:
    """A target server: records what it receives; `echo` sends it back."""

    def __init__(self, echo=False):
        self.echo = echo
        self.received = bytearray()
        self.arrivals: list[tuple[float, int]] = []    # (time, total bytes so far)
        self.writers = []
        self.errors = []
        self.server = None

    async def start(self):
        self.server = await asyncio.start_server(self._on, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[:2]

    async def _on(self, reader, writer):
        self.writers.append(writer)
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                self.received += data
                self.arrivals.append((time.monotonic(), len(self.received)))
                if self.echo:
                    writer.write(data)
                    await writer.drain()
        except (ConnectionError, OSError) as e:
            self.errors.append(e)

    async def close(self):
        for w in self.writers:
            w.transport.abort()
        self.server.close()


async def wait_for_cond(cond, what, timeout=DEADLINE_S):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.01)


async def read_exactly(reader, n, timeout=DEADLINE_S):
    return await asyncio.wait_for(reader.readexactly(n), timeout)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def _setup(echo=False, **kw):
    up = Upstream(echo=echo)
    addr = await up.start()
    net = FaultNetwork(seed=1, **kw)
    paddr = await net.add_link("a", "b", addr)
    reader, writer = await asyncio.open_connection(*paddr)
    await wait_for_cond(lambda: net.connections() == 1 and up.writers, "proxied connection")
    return up, net, reader, writer


async def _teardown(up, net, writer):
    writer.transport.abort()
    await net.close()
    await up.close()


def test_bytes_pass_unchanged_both_ways():
    async def main():
        up, net, reader, writer = await _setup(echo=True)
        try:
            payload = os.urandom(3 << 20)
            writer.write(payload)
            got = await read_exactly(reader, len(payload))
            assert got == payload
            assert bytes(up.received) == payload
            st = net.stats()["directions"]
            assert st["a->b"]["bytes_in"] == st["a->b"]["bytes_out"] == len(payload)
            assert st["b->a"]["bytes_out"] == len(payload)
            assert st["a->b"]["bytes_discarded"] == 0
        finally:
            await _teardown(up, net, writer)
    run(main())


def test_delay_holds_bytes_back_and_jitter_keeps_order():
    async def main():
        up, net, reader, writer = await _setup()
        try:
            net.set_faults("a", "b", delay_ms=200)
            t0 = time.monotonic()
            writer.write(b"x")
            await wait_for_cond(lambda: len(up.received) == 1, "delayed byte")
            assert up.arrivals[0][0] - t0 >= 0.2
            # jitter: every message takes delay..delay+jitter and the stream stays in order
            net.set_faults("a", "b", delay_ms=30, jitter_ms=60)
            sent = []
            for i in range(40):
                sent.append((time.monotonic(), i))
                writer.write(bytes([i]))
                await asyncio.sleep(0.005)
            await wait_for_cond(lambda: len(up.received) == 41, "jittered bytes")
            assert bytes(up.received[1:]) == bytes(range(40))
            for (t_sent, i) in sent:
                t_arr = next(t for t, total in up.arrivals if total >= i + 2)
                assert t_arr - t_sent >= 0.03, (i, t_arr - t_sent)
            # the other direction was not delayed by a's faults
            assert net.faults("b", "a") == LinkFaults()
        finally:
            await _teardown(up, net, writer)
    run(main())


def test_blackhole_forwards_nothing_one_way_and_resets_when_lifted():
    async def main():
        up, net, reader, writer = await _setup()
        try:
            net.cut("a", "b")
            payload = os.urandom(200_000)
            writer.write(payload)
            await wait_for_cond(
                lambda: net.stats()["directions"]["a->b"]["bytes_discarded"] == len(payload),
                "bytes discarded")
            assert len(up.received) == 0
            # asymmetric: b -> a still flows
            up.writers[0].write(b"hello")
            assert await read_exactly(reader, 5) == b"hello"
            # a new connection is accepted but nothing of it reaches b either
            r2, w2 = await asyncio.open_connection(*net.address("a", "b"))
            w2.write(b"more")
            await wait_for_cond(
                lambda: net.stats()["directions"]["a->b"]["bytes_discarded"]
                == len(payload) + 4, "second connection's bytes discarded")
            assert len(up.received) == 0
            # lifting the fault resets the connections that lost bytes
            net.heal()
            with pytest.raises(ConnectionResetError):
                await read_exactly(reader, 1)
            with pytest.raises(ConnectionResetError):
                await read_exactly(r2, 1)
            w2.transport.abort()
            # and a new connection forwards again
            r3, w3 = await asyncio.open_connection(*net.address("a", "b"))
            w3.write(b"after")
            await wait_for_cond(lambda: bytes(up.received) == b"after", "bytes after heal")
            w3.transport.abort()
        finally:
            await _teardown(up, net, writer)
    run(main())


def test_stall_holds_bytes_and_delivers_them_after_heal():
    async def main():
        up, net, reader, writer = await _setup()
        try:
            net.cut("a", "b", mode="stall")
            payload = os.urandom(100_000)
            writer.write(payload)
            # the proxy stops reading a stalled direction (a read already waiting takes one
            # chunk, which the writer holds) and forwards nothing
            t_end = time.monotonic() + 0.3
            await wait_for_cond(lambda: time.monotonic() > t_end, "stall window")
            assert len(up.received) == 0
            assert net.stats()["directions"]["a->b"]["bytes_in"] <= net.chunk_bytes
            net.heal()
            await wait_for_cond(lambda: len(up.received) == len(payload), "stalled bytes")
            assert bytes(up.received) == payload
            assert net.stats()["counters"]["resets"] == 0
        finally:
            await _teardown(up, net, writer)
    run(main())


def test_reset_sends_rst_to_both_ends():
    async def main():
        up, net, reader, writer = await _setup()
        try:
            assert net.reset("a", "b") == 1
            with pytest.raises(ConnectionResetError):
                await read_exactly(reader, 1)
            await wait_for_cond(lambda: any(isinstance(e, ConnectionResetError)
                                            for e in up.errors), "upstream reset")
            assert net.connections() == 0
        finally:
            await _teardown(up, net, writer)
    run(main())


def test_refuse_resets_new_connections_and_a_down_target_resets_too():
    async def main():
        up = Upstream()
        addr = await up.start()
        net = FaultNetwork(seed=2)
        paddr = await net.add_link("a", "b", addr)
        try:
            net.set_faults("a", "b", refuse=True)
            r, w = await asyncio.open_connection(*paddr)
            with pytest.raises(ConnectionResetError):
                await read_exactly(r, 1)
            w.transport.abort()
            assert net.stats()["counters"]["refused"] == 1
            assert not up.writers
            net.heal()
            await up.close()          # the target goes away
            r, w = await asyncio.open_connection(*paddr)
            with pytest.raises(ConnectionResetError):
                await read_exactly(r, 1)
            w.transport.abort()
            await wait_for_cond(lambda: net.stats()["counters"]["upstream_failures"] == 1,
                                "upstream failure counted")
        finally:
            await net.close()
    run(main())


def test_bandwidth_cap_bounds_throughput():
    async def main():
        up, net, reader, writer = await _setup(chunk_bytes=16384)
        try:
            rate = 200_000
            net.set_faults("a", "b", bandwidth_bytes_per_s=rate)
            n = 600_000
            t0 = time.monotonic()
            writer.write(os.urandom(n))
            await wait_for_cond(lambda: len(up.received) == n, "capped transfer", 60)
            elapsed = up.arrivals[-1][0] - t0
            # the first chunk and a 50 ms burst may pass at once; the rest at the rate
            allowance = 16384 + rate * 0.05
            assert elapsed >= (n - allowance) / rate, elapsed
            # and the cap is a cap, not a stall: the bounded run finished (loose bound)
            assert n / elapsed >= rate * 0.25, n / elapsed
            # lifting the cap lets bytes through at once
            net.heal()
            writer.write(b"z" * 100_000)
            await wait_for_cond(lambda: len(up.received) == n + 100_000, "uncapped")
        finally:
            await _teardown(up, net, writer)
    run(main())


def test_a_cut_stops_a_capped_stream_at_once():
    """Bytes the token bucket holds back when the direction is cut are discarded, not sent:
    nothing passes the proxy after cut() returns (before: one chunk waiting for tokens
    went out after the cut -- with the partial-batch scenario, one more APPEND's worth)."""
    async def main():
        up, net, reader, writer = await _setup(chunk_bytes=65536)
        try:
            net.set_faults("a", "b", bandwidth_bytes_per_s=100_000)
            writer.write(os.urandom(2 << 20))
            await wait_for_cond(lambda: len(up.received) >= 200_000, "capped bytes flow")
            await asyncio.sleep(0.2)           # a chunk waits in the bucket (0.65 s each)
            net.cut("a", "b")
            out_at_cut = net.stats()["directions"]["a->b"]["bytes_out"]
            await asyncio.sleep(1.5)           # two more chunks' worth of tokens
            st = net.stats()["directions"]["a->b"]
            assert st["bytes_out"] == out_at_cut, st
            assert st["bytes_discarded"] > 0
        finally:
            await _teardown(up, net, writer)
    run(main())


def test_partition_cuts_the_directions_across_groups_only():
    async def main():
        net = FaultNetwork(seed=3)
        ups = []
        try:
            for s in "abc":
                for d in "abc":
                    if s != d:
                        u = Upstream()
                        ups.append(u)
                        await net.add_link(s, d, await u.start())
            cut = net.partition({"a"})
            assert sorted(cut) == [("a", "b"), ("a", "c"), ("b", "a"), ("c", "a")]
            assert net.faults("b", "c") == LinkFaults() == net.faults("c", "b")
            net.heal()
            assert all(net.faults(s, d).healthy for s in "abc" for d in "abc" if s != d)
            assert sorted(net.isolate("c", mode="stall")) == [("a", "c"), ("b", "c"),
                                                             ("c", "a"), ("c", "b")]
            assert net.faults("a", "c").mode == "stall"
            net.heal("c")
            assert net.faults("a", "c").healthy
        finally:
            await net.close()
            for u in ups:
                await u.close()
    run(main())


def test_bad_faults_are_refused_and_change_nothing():
    async def main():
        net = FaultNetwork(seed=4)
        await net.add_link("a", "b", ("127.0.0.1", 9))
        try:
            for kw in ({"mode": "sideways"}, {"delay_ms": -1}, {"bandwidth_bytes_per_s": 0},
                       {"jitter_ms": 10 ** 9}):
                with pytest.raises(InvalidArgumentError):
                    net.set_faults("a", "b", **kw)
                assert net.faults("a", "b").healthy
            with pytest.raises(InvalidArgumentError):
                await net.add_link("a", "b", ("127.0.0.1", 9))
            with pytest.raises(InvalidArgumentError):
                await net.add_link("a", "a", ("127.0.0.1", 9))
        finally:
            await net.close()
    run(main())


def test_fault_proxy_thread_facade():
    """The synchronous facade runs the same network on a thread of its own."""
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    try:
        with FaultProxy(seed=5) as fp:
            paddr = fp.add_link("a", "b", srv.getsockname())
            c = socket.create_connection(paddr, timeout=DEADLINE_S)
            srv.settimeout(DEADLINE_S)
            s, _ = srv.accept()
            s.settimeout(DEADLINE_S)
            try:
                c.sendall(b"ping")
                assert s.recv(4) == b"ping"
                fp.set_faults("b", "a", mode="blackhole")
                s.sendall(b"lost")
                deadline = time.monotonic() + DEADLINE_S
                while fp.stats()["directions"]["b->a"]["bytes_discarded"] < 4:
                    assert time.monotonic() < deadline, "discard not counted"
                    time.sleep(0.01)
                fp.heal()
                c.settimeout(DEADLINE_S)
                with pytest.raises(ConnectionResetError):
                    c.recv(1)
            finally:
                c.close()
                s.close()
    finally:
        srv.close()


def _hello_bytes(role: int) -> bytes:
    """The first bytes of a replica's AUTH_HELLO as the proxy sees them: the 24-byte frame
    header (magic "QN", version 1, type 0x01), then mode and role."""
    return b"QN\x01\x01" + bytes(20) + bytes((1, role)) + b"rest of the hello"


def test_lane_faults_stall_the_data_connection_and_let_the_control_one_pass():
    async def main():
        up = Upstream(echo=True)
        addr = await up.start()
        net = FaultNetwork(seed=1)
        paddr = await net.add_link("a", "b", addr)
        conns = {}
        try:
            for lane, role in (("data", 1), ("control", 3)):
                reader, writer = await asyncio.open_connection(*paddr)
                writer.write(_hello_bytes(role))
                conns[lane] = (reader, writer)
                hello = await read_exactly(reader, len(_hello_bytes(role)))
                assert hello == _hello_bytes(role)
            net.set_faults("a", "b", lane="data", mode="stall")
            for lane, (reader, writer) in conns.items():
                writer.write(lane.encode() * 1000)
            got = await read_exactly(conns["control"][0], 7000)
            assert got == b"control" * 1000                   # the control lane passes
            with pytest.raises(TimeoutError):                 # the data lane is stalled
                await read_exactly(conns["data"][0], 1, timeout=0.3)
            net.heal("a", "b")
            assert await read_exactly(conns["data"][0], 4000) == b"data" * 1000
            # a lane without faults of its own follows the direction's again
            net.cut("a", "b", mode="stall")
            conns["data"][1].write(b"again")
            with pytest.raises(TimeoutError):
                await read_exactly(conns["data"][0], 1, timeout=0.3)
            net.heal()
            assert await read_exactly(conns["data"][0], 5) == b"again"
            with pytest.raises(InvalidArgumentError, match="lane must be one of"):
                net.set_faults("a", "b", lane="bulk", mode="stall")
        finally:
            for _, writer in conns.values():
                writer.transport.abort()
            await net.close()
            await up.close()
    run(main())
