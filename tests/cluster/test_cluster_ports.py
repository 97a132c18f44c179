"""LocalCluster's ports (localcluster.free_port): outside the kernel's ephemeral range, so an
outgoing connection (a client reconnecting after a kill) never takes a down replica's port
before it restarts on it; each one bound once to check it is free; never the same twice
from one process; a port in use is skipped."""
import socket

from quorumlog import localcluster
from quorumlog.localcluster import free_port


def test_ports_come_from_below_the_ephemeral_range_and_are_free():
    low = localcluster._ephemeral_low()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    if low - localcluster._PORT_LOW >= 1000:
        assert all(localcluster._PORT_LOW <= p < low for p in ports), (low, ports[:5])
    for p in ports[:20]:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        finally:
            s.close()


def test_a_port_in_use_is_skipped():
    nxt = free_port() + 1
    held = socket.socket()
    try:
        try:
            held.bind(("127.0.0.1", nxt))   # the next port of the walk, taken meanwhile
            held.listen()
        except OSError:
            pass                            # (another process holds it already: the same)
        assert free_port() != nxt
    finally:
        held.close()


def test_no_room_below_the_range_falls_back_to_the_kernels_choice(monkeypatch):
    low = localcluster._ephemeral_low()
    monkeypatch.setattr(localcluster, "_ephemeral_low", lambda: 1024)
    assert free_port() >= low
