"""The replicas and the ways to talk to them: ProxiedCluster (a LocalCluster whose peer
links go through the fault proxy), Channels (one authenticated client connection per node,
so every answer is attributed), IoThread (the clients' event loop) and wait_for (a bounded
poll)."""
from __future__ import annotations

import asyncio
import threading
import time

from ...errors import QuorumlogError
from ...localcluster import LocalCluster
from ...net import messages as m
from ...net.auth import AuthConfig
from ...net.transport import TransportConfig, connect_client
from ...node.config import parse_address
from ..faultproxy import FaultProxy


class ProxiedCluster(LocalCluster):
    """A LocalCluster whose peer traffic goes through a FaultProxy: one listener per
    directed link, created when the first replica's command is built (ports are known)."""

    def __init__(self, directory, nodes: int, proxy: FaultProxy, **kw):
        super().__init__(directory, nodes, **kw)
        self.proxy = proxy
        self.via: dict[tuple[str, str], str] = {}

    def _ensure_links(self) -> None:
        if self.via:
            return
        for s in self.ids:
            for d in self.ids:
                if s != d:
                    host, port = self.proxy.add_link(s, d, parse_address(self.peers[d]))
                    self.via[(s, d)] = f"{host}:{port}"

    def peer_map(self, nid) -> dict:
        """The peers as `nid` sees them: itself where it listens, the others via the proxy."""
        self._ensure_links()
        return {o: (self.peers[o] if o == nid else self.via[(nid, o)]) for o in self.ids}

    def command(self, nid) -> list[str]:
        cmd = super().command(nid)
        try:
            k = cmd.index("--peers")
        except ValueError:
            raise QuorumlogError("LocalCluster.command no longer passes --peers: the proxy "
                                 "cannot be put between the replicas") from None
        cmd[k + 1] = ",".join(f"{o}={a}" for o, a in self.peer_map(nid).items())
        return cmd


class Channels:
    """One authenticated client connection per node (the client protocol of quorumlog.net),
    so every answer is attributed to the node that gave it."""

    def __init__(self, addresses: dict, secret: str, client_id: str, timeout_s: float):
        self.addresses = {n: parse_address(a) for n, a in addresses.items()}
        self.auth = AuthConfig("quorumlog", client_id, secret)
        self.timeout_s = timeout_s
        self._ch: dict = {}
        self._config = TransportConfig(max_frame_bytes=(16 << 20) + 24,
                                       max_send_queue_bytes=64 << 20)

    async def request(self, node: str, msg, timeout: float | None = None):
        t = timeout or self.timeout_s
        ch = self._ch.get(node)
        if ch is None:
            host, port = self.addresses[node]
            ch = await connect_client(host, port, self.auth, timeout=t, config=self._config)
            self._ch[node] = ch
        try:
            resp = await ch.request(msg, t)
        except BaseException:
            # the connection's state is unknown (a late answer would be misattributed)
            self._ch.pop(node, None)
            await ch.close()
            raise
        if isinstance(resp, m.ErrorResponse):
            raise resp.to_exception()
        return resp

    async def close(self) -> None:
        for ch in self._ch.values():
            await ch.close()
        self._ch.clear()


class IoThread:
    """An event loop on a thread of its own for the clients (workload, status, reads)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="jepsen-io",
                                       daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def wait_for(cond, timeout: float, interval: float = 0.05):
    """Poll cond() until truthy (-> its value) or the deadline (-> None)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)
