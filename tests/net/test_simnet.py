"""The simulated network: delivery, drop, delay, duplicate, partition, the real codec on
request; and one set of scenarios run over both the simulated and the real TCP transport
(the node is tested over either)."""
import asyncio

import pytest

from quorumlog.errors import ConfigError
from quorumlog.net.errors import TransportClosedError
from quorumlog.net.simnet import SimNetwork, SimTransport
from quorumlog.raft.messages import Append, Heartbeat

from net_support import Node, close_all, run, same, start_mesh, wait_until


class SimNode:
    def __init__(self, node_id, net):
        self.id = node_id
        self.inbox = []
        self.t = SimTransport(node_id, net, lambda p, x: self.inbox.append((p, x)))

    def from_peer(self, peer):
        return [x for p, x in self.inbox if p == peer]


def hb(src, dst, seq):
    return Heartbeat(1, src, dst, 0, seq)


# --- the same scenarios over both transports -----------------------------------------------

@pytest.fixture(params=["sim", "tcp"])
def make_nodes(request):
    def make(ids):
        if request.param == "sim":
            net = SimNetwork(seed=1, delay_ms=(0, 2))
            return [SimNode(i, net) for i in ids]
        return [Node(i, ids) for i in ids]
    return make


def test_both_transports_deliver_in_order_and_report_the_same_shape(make_nodes):
    async def body():
        nodes = make_nodes("xyz")
        try:
            await start_mesh(nodes)
            for n in nodes:
                for o in nodes:
                    if o is not n:
                        for s in range(100):
                            assert n.t.send(o.id, hb(n.id, o.id, s))
            await wait_until(lambda: all(len(n.inbox) == 200 for n in nodes), 10, "delivery")
            for n in nodes:
                for o in nodes:
                    if o is not n:
                        got = n.from_peer(o.id)
                        assert [x.seq for x in got] == list(range(100))
                        assert all((x.src, x.dst) == (o.id, n.id) for x in got)
                st = n.t.stats()
                assert set(st["peers"]) == {o.id for o in nodes if o is not n}
                for s in st["peers"].values():
                    assert s["connected"] and s["sent"] == 100 and s["received"] == 100
        finally:
            await close_all(nodes)
    run(None, body)


def test_both_transports_drop_when_the_peer_is_gone(make_nodes):
    async def body():
        a, b = make_nodes("ab")
        try:
            await start_mesh([a, b])
            assert not a.t.send("nobody", hb("a", "nobody", 1))       # not a peer
            await b.t.close()
            await wait_until(lambda: not a.t.is_connected("b"), 5, "a to see b gone")
            assert not a.t.send("b", hb("a", "b", 2))
            assert a.t.stats()["peers"]["b"]["dropped_no_connection"] >= 1
            with pytest.raises(TransportClosedError):
                b.t.send("a", hb("b", "a", 3))
        finally:
            await close_all([a, b])
    run(None, body)


def test_both_transports_report_a_closed_peer_lost_then_refused(make_nodes):
    # a peer whose process exits: its connection closes (refused False), then a redial is
    # refused (True) -- what the node takes for "its process is gone" (on_peer_down); what
    # it sent before arrives first
    async def body():
        a, b = make_nodes("ab")
        seen = []
        a.t.on_peer_lost = lambda peer, refused: seen.append((peer, refused, len(a.inbox)))
        try:
            await start_mesh([a, b])
            b.t.send("a", hb("b", "a", 1))
            await b.t.close()
            await wait_until(lambda: any(r for _, r, _ in seen), 5, "a redial refused")
            assert seen[0][:2] == ("b", False) and all(p == "b" for p, _, _ in seen)
            first_refused = next(k for k, x in enumerate(seen) if x[1])
            assert all(not r for _, r, _ in seen[:first_refused])
            assert [x.seq for x in a.from_peer("b")] == [1] and seen[0][2] == 1
        finally:
            await close_all([a, b])
    run(None, body)


def test_a_failing_peer_lost_listener_is_logged_and_the_transport_goes_on(make_nodes, caplog):
    # the listener is the node's code: its exception must not break the transport's own
    # connection handling (both implementations report through net/seam.report_peer_lost)
    async def body():
        a, b = make_nodes("ab")
        calls = []

        def listener(peer, refused):
            calls.append((peer, refused))
            raise RuntimeError("listener broke")
        a.t.on_peer_lost = listener
        try:
            await start_mesh([a, b])
            await b.t.close()
            await wait_until(lambda: any(r for _, r in calls), 5, "a redial refused")
            assert all(p == "b" for p, _ in calls)
            assert "on_peer_lost failed for peer 'b'" in caplog.text
        finally:
            await close_all([a, b])
    run(None, body)


# --- simulated faults -----------------------------------------------------------------------

def test_a_partition_or_a_crash_behind_it_reports_nothing():
    # a partition is silent (no reset crosses it): only the leak's timeout notices it
    async def body():
        net = SimNetwork(seed=6, delay_ms=(1, 3))
        a, b, c = (SimNode(i, net) for i in "abc")
        seen = []
        a.t.on_peer_lost = lambda peer, refused: seen.append((peer, refused))
        await start_mesh([a, b, c])
        net.partition({"a", "b"}, {"c"})
        await c.t.close()                       # c exits where a cannot hear it
        await b.t.close()                       # b exits on a's side: reported
        await wait_until(lambda: ("b", True) in seen, 5, "b's exit reported")
        assert all(p == "b" for p, _ in seen)
    run(None, body)

def test_drop_rate_loses_about_that_share_silently():
    async def body():
        net = SimNetwork(seed=3, drop_rate=0.3)
        a, b = SimNode("a", net), SimNode("b", net)
        await start_mesh([a, b])
        for s in range(1000):
            assert a.t.send("b", hb("a", "b", s))         # the sender cannot tell
        await wait_until(lambda: net.delivered + net.dropped == 1000, 5, "all settled")
        assert 230 < net.dropped < 370
        seqs = [x.seq for x in b.from_peer("a")]
        assert seqs == sorted(seqs) and len(seqs) == net.delivered
    run(None, body)


def test_duplicates_and_delay():
    async def body():
        net = SimNetwork(seed=4, duplicate_rate=0.5, delay_ms=(20, 40))
        a, b = SimNode("a", net), SimNode("b", net)
        await start_mesh([a, b])
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for s in range(200):
            a.t.send("b", hb("a", "b", s))
        assert b.inbox == []                               # nothing before the delay
        await wait_until(lambda: len(b.inbox) == 200 + net.duplicated, 5, "all delivered")
        assert loop.time() - t0 >= 0.02
        assert 60 < net.duplicated < 140
        seqs = [x.seq for x in b.from_peer("a")]
        assert sorted(set(seqs)) == list(range(200)) and seqs == sorted(seqs)   # FIFO link
    run(None, body)


def test_reorder():
    async def body():
        net = SimNetwork(seed=5, delay_ms=(0, 50), reorder=True)
        a, b = SimNode("a", net), SimNode("b", net)
        await start_mesh([a, b])
        for s in range(200):
            a.t.send("b", hb("a", "b", s))
        await wait_until(lambda: len(b.inbox) == 200, 5, "all delivered")
        seqs = [x.seq for x in b.from_peer("a")]
        assert sorted(seqs) == list(range(200)) and seqs != list(range(200))
    run(None, body)


def test_partition_and_heal():
    async def body():
        net = SimNetwork(seed=6, delay_ms=(5, 5))
        a, b, c = (SimNode(i, net) for i in "abc")
        await start_mesh([a, b, c])
        a.t.send("c", hb("a", "c", 0))                    # in flight when the cut happens
        net.partition({"a", "b"}, {"c"})
        assert a.t.is_connected("b") and not a.t.is_connected("c")
        assert not a.t.send("c", hb("a", "c", 1))
        assert a.t.send("b", hb("a", "b", 2))
        await wait_until(lambda: b.from_peer("a"), 5, "a->b")
        await wait_until(lambda: net.dropped == 1, 5, "the in-flight message lost")
        assert c.inbox == []
        net.heal()
        await c.t.wait_connected("a", 1)
        assert a.t.send("c", hb("a", "c", 3))
        await wait_until(lambda: c.from_peer("a"), 5, "a->c after heal")
        net.isolate("b")
        assert not b.t.is_connected("a") and a.t.is_connected("c")
    run(None, body)


def test_one_way_cut_and_heal():
    async def body():
        net = SimNetwork(seed=8, delay_ms=(1, 1))
        a, b = (SimNode(i, net) for i in "ab")
        await start_mesh([a, b])
        net.cut("a", "b")                                 # a -> b lost, b -> a arrives
        assert not a.t.send("b", hb("a", "b", 0))
        assert b.t.send("a", hb("b", "a", 1))
        await wait_until(lambda: a.from_peer("b"), 5, "b->a during the cut")
        assert b.inbox == []
        net.heal()
        assert a.t.send("b", hb("a", "b", 2))
        await wait_until(lambda: b.from_peer("a"), 5, "a->b after heal")
        assert [x.seq for x in b.from_peer("a")] == [2]
    run(None, body)


def test_a_stalled_link_holds_everything_then_delivers_in_order():
    async def body():
        net = SimNetwork(seed=9, delay_ms=(1, 1))
        a, b = (SimNode(i, net) for i in "ab")
        await start_mesh([a, b])
        loop = asyncio.get_running_loop()
        a.t.send("b", hb("a", "b", 0))                    # in flight when the stall begins
        t0 = loop.time()
        net.stall("a", "b", 300)
        for s in range(1, 4):
            a.t.send("b", hb("a", "b", s))
        b.t.send("a", hb("b", "a", 9))                     # the other direction flows
        await wait_until(lambda: a.from_peer("b"), 5, "b->a during the stall")
        assert b.inbox == []
        await wait_until(lambda: len(b.inbox) == 4, 5, "a->b after the stall")
        assert loop.time() - t0 >= 0.29
        assert [x.seq for x in b.from_peer("a")] == [0, 1, 2, 3]
    run(None, body)


def test_both_transports_are_the_seams_transport():
    from quorumlog.net.auth import AuthConfig
    from quorumlog.net.seam import Transport
    from quorumlog.net.transport import PeerTransport
    assert isinstance(SimTransport("s1", SimNetwork(), None), Transport)
    tcp = PeerTransport("t1", AuthConfig("c", "t1", None, insecure=True), None)
    assert isinstance(tcp, Transport)


def test_per_link_settings_and_validation():
    async def body():
        net = SimNetwork(seed=7)
        a, b, c = (SimNode(i, net) for i in "abc")
        await start_mesh([a, b, c])
        net.set_link("a", "b", drop_rate=1.0)
        for s in range(20):
            a.t.send("b", hb("a", "b", s))
            a.t.send("c", hb("a", "c", s))
        await wait_until(lambda: len(c.inbox) == 20, 5, "a->c")
        assert b.inbox == [] and net.dropped == 20
    run(None, body)
    with pytest.raises(ConfigError):
        SimNetwork(drop_rate=1.5)
    with pytest.raises(ConfigError):
        SimNetwork(delay_ms=(5, 1))


def test_wire_mode_goes_through_the_real_codec():
    async def body():
        net = SimNetwork(seed=8, wire=True)
        a, b = SimNode("a", net), SimNode("b", net)
        await start_mesh([a, b])
        msg = Append(2, "a", "b", 0, 0, 1, 3, 2, b"r" * 100_000, 100_000, 0, ((2, ("a", "b"), ()),), 1)
        a.t.send("b", msg)
        await wait_until(lambda: b.inbox, 5, "delivery")
        got = b.from_peer("a")[0]
        assert got is not msg and same(got, msg) and isinstance(got.payload, memoryview)
    run(None, body)


@pytest.mark.parametrize("wire", [False, True])
def test_a_payload_arrives_as_it_was_sent_though_the_senders_memory_changed(wire):
    """A socket copies what is sent; the simulated network too. An APPEND's payload is a view
    of the sender's mapped log: a power loss that zeroed the log's tail while the message
    was in flight made the receiver refuse "bad magic/version" (nodesim seed 15370)."""
    async def body():
        net = SimNetwork(seed=10, delay_ms=(20, 20), wire=wire)
        a, b = SimNode("a", net), SimNode("b", net)
        await start_mesh([a, b])
        mem = bytearray(b"r" * 1000)
        a.t.send("b", Append(2, "a", "b", 0, 0, 1, 1, 2, memoryview(mem), 1000, 0, (), 1))
        mem[:] = bytes(1000)                           # (the sender's log cut meanwhile)
        await wait_until(lambda: b.inbox, 5, "delivery")
        assert bytes(b.from_peer("a")[0].payload) == b"r" * 1000
    run(None, body)


def test_max_inflight_is_backpressure():
    async def body():
        net = SimNetwork(seed=9, delay_ms=(50, 50), max_inflight=10)
        a, b = SimNode("a", net), SimNode("b", net)
        await start_mesh([a, b])
        ok = [a.t.send("b", hb("a", "b", s)) for s in range(15)]
        assert ok == [True] * 10 + [False] * 5
        assert a.t.stats()["peers"]["b"]["dropped_backpressure"] == 5
        await wait_until(lambda: len(b.inbox) == 10, 5, "delivery")
    run(None, body)
