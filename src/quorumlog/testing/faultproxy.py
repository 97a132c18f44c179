"""A user-space TCP fault proxy for the links between replicas (no `tc netem` needed): one
listener per directed link dialler -> target, and faults set at runtime per direction of
traffic (src -> dst), whichever connection carries it.

    net = FaultNetwork(seed=7)                    # in an event loop; or FaultProxy (a thread)
    addr = await net.add_link("n1", "n2", ("127.0.0.1", 7002))   # n1 dials n2 at `addr`
    net.set_faults("n1", "n2", delay_ms=20, jitter_ms=10, bandwidth_bytes_per_s=1 << 20)
    net.partition({"n1"}, {"n2", "n3"})           # both directions across the cut
    net.cut("n1", "n2")                           # n1 -> n2 only (asymmetric)
    net.reset("n1", "n2")                         # RST every connection between them
    net.heal()                                    # no faults; connections that lost bytes RST

Why per direction rather than per connection: the transport keeps one connection per peer
pair and either side may have dialled it, so the bytes n1 sends to n2 travel either "up" a
connection n1 dialled (through link n1->n2) or "down" one n2 dialled (through link n2->n1).
A fault on (n1, n2) applies to both.

Lanes: a replica with a control lane (quorumlog.net.transport) keeps a second connection per
pair for votes and heartbeats. The proxy tells them apart by the role in the dialler's
AUTH_HELLO (the stream's first frame), and `set_faults(src, dst, lane="data", ...)` faults
only the data connections of a direction (or lane="control" only the control ones). While a
lane has faults of its own they replace the direction's for its connections; cleared
(`set_faults(src, dst, lane=...)` with no fault, or heal), the direction's apply again.

Fault modes of a direction:
  * pass      -- forward, after `delay_ms` + uniform(0, `jitter_ms`) (FIFO: a byte stream is
                 never reordered) and within `bandwidth_bytes_per_s` (a token bucket per
                 direction, shared by its connections);
  * blackhole -- read and discard (packets vanish; the sender sees no back-pressure). A
                 connection that lost bytes can never carry a valid stream again, so it is
                 reset (SO_LINGER 0) when the fault is lifted -- as TCP would eventually give
                 up on it -- never resumed mid-frame;
  * stall     -- stop reading: bytes wait in the kernel's buffers and the sender's, and are
                 delivered when the fault is lifted (a long outage that TCP rides out).
  * refuse    -- (a flag, with any mode) new connections of the link are reset at accept.

Bounded: a direction of a connection holds at most `max_buffered_chunks` chunks of at most
`chunk_bytes` each; when the queue is full the proxy stops reading that socket.
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import random
import socket
import struct
import threading
import time

from ..errors import InvalidArgumentError

log = logging.getLogger(__name__)

__all__ = ["LinkFaults", "FaultNetwork", "FaultProxy", "MODES"]

MODES = ("pass", "blackhole", "stall")
LANES = ("data", "control")
# the dialler's first frame is its AUTH_HELLO: 24-byte header (magic "QN", version, type 0x01
# at offset 3), then mode u8 and role u8 (Role.PEER_CONTROL = 3: the control lane)
_HELLO_ROLE_OFFSET = 25
_ROLE_PEER_CONTROL = 3
CHUNK_BYTES = 65536
MAX_BUFFERED_CHUNKS = 64
CONNECT_TIMEOUT_S = 2.0


@dataclasses.dataclass(frozen=True)
class LinkFaults:
    """The faults of one direction of traffic (src -> dst)."""
    mode: str = "pass"
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    bandwidth_bytes_per_s: int | None = None
    refuse: bool = False

    def validate(self) -> "LinkFaults":
        if self.mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.delay_ms < 0 or self.jitter_ms < 0:
            raise InvalidArgumentError("delay_ms and jitter_ms must be >= 0")
        if self.delay_ms > 600_000 or self.jitter_ms > 600_000:
            raise InvalidArgumentError("delay_ms and jitter_ms are limited to 600000")
        bw = self.bandwidth_bytes_per_s
        if bw is not None and (not isinstance(bw, int) or bw < 1):
            raise InvalidArgumentError(
                f"bandwidth_bytes_per_s must be a positive int or None, got {bw!r}")
        return self

    @property
    def healthy(self) -> bool:
        return self == LinkFaults()


class _Direction:
    """Fault state and counters of traffic src -> dst (shared by every connection)."""

    def __init__(self, src: str, dst: str):
        self.src, self.dst = src, dst
        self.faults = LinkFaults()
        self.changed = asyncio.Event()
        self.tokens = 0.0
        self.refilled = time.monotonic()
        self.stats = {"bytes_in": 0, "bytes_out": 0, "bytes_discarded": 0}

    def set(self, faults: LinkFaults) -> None:
        old = self.faults
        self.faults = faults
        if faults.bandwidth_bytes_per_s != old.bandwidth_bytes_per_s:
            self.tokens = 0.0
            self.refilled = time.monotonic()
        # wake every pump waiting on this direction, then arm a fresh event
        self.changed.set()
        self.changed = asyncio.Event()

    async def take(self, n: int) -> None:
        """Token bucket: wait until n bytes may pass (burst: 50 ms worth of bytes)."""
        while True:
            rate = self.faults.bandwidth_bytes_per_s
            if rate is None:
                return
            now = time.monotonic()
            burst = max(rate * 0.05, 1.0)
            self.tokens = min(burst, self.tokens + (now - self.refilled) * rate)
            self.refilled = now
            if self.tokens >= 0:
                # allow a debt of one chunk, paid for before the next one passes
                self.tokens -= n
                return
            ev = self.changed
            try:
                await asyncio.wait_for(ev.wait(), -self.tokens / rate)
            except TimeoutError:
                pass


class _Pump:
    """One direction of one proxied connection: a reader task and a writer task joined by a
    bounded queue of (due time, bytes)."""

    def __init__(self, conn: "_Connection", direction: _Direction, reader, writer, rng):
        self.conn = conn
        self.base = direction           # the direction's faults without a lane
        self.reader = reader
        self.writer = writer
        self.rng = rng
        self.queue: asyncio.Queue = asyncio.Queue(conn.net.max_buffered_chunks)
        self.last_due = 0.0
        self.tasks: list[asyncio.Task] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._read()), loop.create_task(self._write())]

    @property
    def dir(self) -> _Direction:
        """The faults that apply: those of the connection's lane while it has any of its
        own, else the direction's."""
        lane = self.conn.lane
        if lane is not None:
            d = self.conn.net.lane_direction(self.base.src, self.base.dst, lane)
            if d is not None and not d.faults.healthy:
                return d
        return self.base

    async def _unstalled(self) -> _Direction:
        """Wait while the faults that apply stall -> the direction that applies then."""
        d = self.dir
        while d.faults.mode == "stall":
            await d.changed.wait()
            d = self.dir
        return d

    async def _read(self) -> None:
        try:
            while True:
                await self._unstalled()
                data = await self.reader.read(self.conn.net.chunk_bytes)
                if not data:
                    break
                if self.conn.lane is None and self is self.conn.up:
                    self.conn.classify(data)
                d = self.dir
                d.stats["bytes_in"] += len(data)
                f = d.faults
                now = time.monotonic()
                due = now + (f.delay_ms + self.rng.uniform(0, f.jitter_ms)) / 1000.0
                if due < self.last_due:       # a stream is FIFO: jitter never reorders
                    due = self.last_due
                self.last_due = due
                await self.queue.put((due, data))
            await self.queue.put((0.0, None))          # EOF after the queued bytes
        except (ConnectionError, OSError):
            self.conn.abort("reset by " + ("dialler" if self is self.conn.up else "target"))
        except asyncio.CancelledError:
            raise

    async def _write(self) -> None:
        try:
            while True:
                due, data = await self.queue.get()
                d = await self._unstalled()
                if d.faults.mode == "blackhole":
                    # the bytes (or the FIN) vanish; the stream is broken for good
                    d.stats["bytes_discarded"] += len(data) if data is not None else 0
                    self.conn.tainted = True
                    continue
                if data is None:
                    if self.writer.can_write_eof():
                        self.writer.write_eof()
                    self.conn.half_closed()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                # the fault may have changed while the bytes waited: check again
                d = self.dir
                if d.faults.mode != "pass":
                    if d.faults.mode == "blackhole":
                        d.stats["bytes_discarded"] += len(data)
                        self.conn.tainted = True
                        continue
                    d = await self._unstalled()
                await d.take(len(data))
                # and while the token bucket held them back (a cut must stop the stream at
                # once: no chunk may pass after it)
                if self.dir.faults.mode == "blackhole":
                    self.dir.stats["bytes_discarded"] += len(data)
                    self.conn.tainted = True
                    continue
                d = await self._unstalled()
                self.writer.write(data)
                d.stats["bytes_out"] += len(data)
                await self.writer.drain()
        except (ConnectionError, OSError):
            self.conn.abort("write failed")
        except asyncio.CancelledError:
            raise


def _set_linger_zero(writer) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass


class _Connection:
    """A proxied TCP connection: dialler <-> proxy <-> target, two pumps."""

    _ids = itertools.count(1)

    def __init__(self, net: "FaultNetwork", link: "_Link"):
        self.id = next(self._ids)
        self.net = net
        self.link = link
        self.tainted = False          # bytes were discarded: never resume this stream
        self.closed = False
        self.lane: str | None = None  # "data" / "control" once the dialler's hello was seen
        self._eofs = 0
        self.down_writer = None       # towards the dialler
        self.up_writer = None         # towards the target
        self.up: _Pump | None = None
        self.down: _Pump | None = None

    def start(self, dreader, dwriter, ureader, uwriter) -> None:
        n = self.net
        self.down_writer, self.up_writer = dwriter, uwriter
        self.up = _Pump(self, n.direction(self.link.src, self.link.dst), dreader, uwriter, n.rng)
        self.down = _Pump(self, n.direction(self.link.dst, self.link.src), ureader, dwriter,
                          n.rng)
        self.up.start()
        self.down.start()

    def classify(self, first: bytes) -> None:
        """The lane of this connection, from the role in the dialler's AUTH_HELLO."""
        control = (len(first) > _HELLO_ROLE_OFFSET and first[:2] == b"QN" and first[3] == 0x01
                   and first[_HELLO_ROLE_OFFSET] == _ROLE_PEER_CONTROL)
        self.lane = "control" if control else "data"

    def half_closed(self) -> None:
        self._eofs += 1
        if self._eofs >= 2:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._cancel()
        for w in (self.down_writer, self.up_writer):
            if w is not None:
                w.close()
        self.net._forget(self)

    def abort(self, why: str = "") -> None:
        """Close both sockets with RST (SO_LINGER 0), dropping whatever is queued."""
        if self.closed:
            return
        self.closed = True
        log.debug("proxy %s->%s connection %d reset (%s)", self.link.src, self.link.dst,
                  self.id, why)
        self._cancel()
        for w in (self.down_writer, self.up_writer):
            if w is not None:
                _set_linger_zero(w)
                w.transport.abort()
        self.net._forget(self)
        self.net.counters["resets"] += 1

    def _cancel(self) -> None:
        cur = asyncio.current_task()
        for p in (self.up, self.down):
            if p is not None:
                for t in p.tasks:
                    if t is not cur:
                        t.cancel()


class _Link:
    def __init__(self, src: str, dst: str, upstream: tuple[str, int]):
        self.src, self.dst = src, dst
        self.upstream = upstream
        self.server: asyncio.base_events.Server | None = None
        self.address: tuple[str, int] | None = None
        self.accepted = 0


class FaultNetwork:
    """The proxies of a group of nodes; every method runs in the loop that started them."""

    def __init__(self, *, seed: int | None = None, host: str = "127.0.0.1",
                 chunk_bytes: int = CHUNK_BYTES, max_buffered_chunks: int = MAX_BUFFERED_CHUNKS):
        if not 1 <= chunk_bytes <= 16 << 20:
            raise InvalidArgumentError("chunk_bytes must be in [1, 16 MiB]")
        if not 1 <= max_buffered_chunks <= 4096:
            raise InvalidArgumentError("max_buffered_chunks must be in [1, 4096]")
        self.rng = random.Random(seed)
        self.host = host
        self.chunk_bytes = chunk_bytes
        self.max_buffered_chunks = max_buffered_chunks
        self._links: dict[tuple[str, str], _Link] = {}
        self._dirs: dict[tuple[str, str], _Direction] = {}
        self._lane_dirs: dict[tuple[str, str, str], _Direction] = {}   # lane-only faults
        self._conns: set[_Connection] = set()
        self._handshakes: set[asyncio.Task] = set()
        self.counters = {"accepted": 0, "refused": 0, "resets": 0, "upstream_failures": 0}

    # -- links -------------------------------------------------------------------------------
    def direction(self, src: str, dst: str) -> _Direction:
        d = self._dirs.get((src, dst))
        if d is None:
            d = self._dirs[(src, dst)] = _Direction(src, dst)
        return d

    def lane_direction(self, src: str, dst: str, lane: str) -> _Direction | None:
        return self._lane_dirs.get((src, dst, lane))

    async def add_link(self, src: str, dst: str, upstream: tuple[str, int],
                       port: int = 0) -> tuple[str, int]:
        """Listen for src's connections to dst (a port from the OS) -> the listen address."""
        if src == dst:
            raise InvalidArgumentError("a link joins two different nodes")
        if (src, dst) in self._links:
            raise InvalidArgumentError(f"link {src}->{dst} exists")
        link = _Link(src, dst, (upstream[0], int(upstream[1])))
        self.direction(src, dst)
        self.direction(dst, src)

        async def on_accept(reader, writer, link=link):
            t = asyncio.current_task()
            self._handshakes.add(t)
            try:
                await self._accept(link, reader, writer)
            finally:
                self._handshakes.discard(t)
        link.server = await asyncio.start_server(on_accept, self.host, port)
        link.address = link.server.sockets[0].getsockname()[:2]
        self._links[(src, dst)] = link
        return link.address

    def address(self, src: str, dst: str) -> tuple[str, int]:
        return self._links[(src, dst)].address

    def set_upstream(self, src: str, dst: str, upstream: tuple[str, int]) -> None:
        """Where link src->dst connects from now on (a node restarted on another port)."""
        self._links[(src, dst)].upstream = (upstream[0], int(upstream[1]))

    def nodes(self) -> list[str]:
        return sorted({n for k in self._links for n in k})

    async def _accept(self, link: _Link, reader, writer) -> None:
        self.counters["accepted"] += 1
        link.accepted += 1
        f_up = self.direction(link.src, link.dst).faults
        f_down = self.direction(link.dst, link.src).faults
        if f_up.refuse or f_down.refuse:
            self.counters["refused"] += 1
            _set_linger_zero(writer)
            writer.transport.abort()
            return
        try:
            ureader, uwriter = await asyncio.wait_for(
                asyncio.open_connection(*link.upstream), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            # the target is down: the dialler sees a reset, as it would from a closed port
            self.counters["upstream_failures"] += 1
            log.debug("proxy %s->%s: upstream %s: %s", link.src, link.dst, link.upstream, e)
            _set_linger_zero(writer)
            writer.transport.abort()
            return
        conn = _Connection(self, link)
        self._conns.add(conn)
        conn.start(reader, writer, ureader, uwriter)

    def _forget(self, conn: _Connection) -> None:
        self._conns.discard(conn)

    # -- faults ------------------------------------------------------------------------------
    def set_faults(self, src: str, dst: str, *, lane: str | None = None, **kw) -> LinkFaults:
        """Replace the faults of direction src -> dst (unnamed fields: their defaults); with
        `lane`, of that direction's connections of that lane only ("data" / "control")."""
        if lane is not None:
            return self._set_lane(src, dst, lane, LinkFaults(**kw).validate())
        return self._set(src, dst, LinkFaults(**kw).validate())

    def _set_lane(self, src: str, dst: str, lane: str, faults: LinkFaults) -> LinkFaults:
        if lane not in LANES:
            raise InvalidArgumentError(f"lane must be one of {LANES}, got {lane!r}")
        if faults.mode == "blackhole":
            raise InvalidArgumentError("a lane's faults may delay or stall, not blackhole")
        d = self._lane_dirs.get((src, dst, lane))
        if d is None:
            d = self._lane_dirs[(src, dst, lane)] = _Direction(src, dst)
        d.set(faults)
        # pumps of that lane that waited on the direction's own faults look again
        self.direction(src, dst).set(self.direction(src, dst).faults)
        return faults

    def update_faults(self, src: str, dst: str, **kw) -> LinkFaults:
        """Change some fields of direction src -> dst's faults, keep the others."""
        d = self.direction(src, dst)
        return self._set(src, dst, dataclasses.replace(d.faults, **kw).validate())

    def faults(self, src: str, dst: str) -> LinkFaults:
        return self.direction(src, dst).faults

    def _set(self, src, dst, faults: LinkFaults) -> LinkFaults:
        d = self.direction(src, dst)
        was_blackhole = d.faults.mode == "blackhole"
        d.set(faults)
        if was_blackhole and faults.mode != "blackhole":
            self._reset_tainted(src, dst)
        return faults

    def _reset_tainted(self, a: str, b: str) -> None:
        for c in list(self._conns):
            if c.tainted and {c.link.src, c.link.dst} == {a, b}:
                c.abort("lost bytes while blackholed")

    def cut(self, src: str, dst: str, mode: str = "blackhole") -> None:
        """Traffic src -> dst stops (dst -> src is untouched)."""
        self.update_faults(src, dst, mode=mode)

    def partition(self, *groups, mode: str = "blackhole") -> list[tuple[str, str]]:
        """No traffic between nodes of different groups (both directions); nodes named in no
        group form one more group. -> the directions cut."""
        groups = [set(g) for g in groups]
        named = set().union(*groups) if groups else set()
        rest = set(self.nodes()) - named
        if rest:
            groups.append(rest)
        side = {n: i for i, g in enumerate(groups) for n in g}
        cut = []
        for (s, d) in list(self._dirs):
            if s in side and d in side and side[s] != side[d]:
                self.cut(s, d, mode)
                cut.append((s, d))
        return cut

    def isolate(self, node: str, mode: str = "blackhole") -> list[tuple[str, str]]:
        return self.partition({node}, mode=mode)

    def heal(self, src: str | None = None, dst: str | None = None) -> None:
        """Clear faults: every one (no argument), those of direction src -> dst (both), or
        of every direction to or from a node (src alone). Connections that lost bytes are
        reset."""
        if src is None and dst is not None:
            raise InvalidArgumentError("heal(dst=...) needs src")
        for (s, d) in list(self._dirs):
            if src is None or (dst is None and src in (s, d)) or (s, d) == (src, dst):
                self._set(s, d, LinkFaults())
        for (s, d, lane), x in list(self._lane_dirs.items()):
            if src is None or (dst is None and src in (s, d)) or (s, d) == (src, dst):
                x.set(LinkFaults())

    def reset(self, a: str | None = None, b: str | None = None) -> int:
        """RST (SO_LINGER 0) every connection between a and b (None: any node) -> count."""
        n = 0
        for c in list(self._conns):
            ends = {c.link.src, c.link.dst}
            if (a is None or a in ends) and (b is None or b in ends):
                c.abort("reset by the nemesis")
                n += 1
        return n

    def connections(self, src: str | None = None, dst: str | None = None) -> int:
        return sum(1 for c in self._conns if (src is None or c.link.src == src)
                   and (dst is None or c.link.dst == dst))

    def stats(self) -> dict:
        return {"counters": dict(self.counters), "connections": len(self._conns),
                "directions": {f"{s}->{d}": dict(x.stats, mode=x.faults.mode)
                               for (s, d), x in sorted(self._dirs.items())}}

    async def close(self) -> None:
        for link in self._links.values():
            if link.server is not None:
                link.server.close()
        for t in list(self._handshakes):
            t.cancel()
        for c in list(self._conns):
            c.abort("proxy closing")
        for link in self._links.values():
            if link.server is not None:
                try:
                    await asyncio.wait_for(link.server.wait_closed(), 5)
                except TimeoutError:
                    log.warning("proxy %s->%s: listener did not close in 5 s", link.src,
                                link.dst)
        self._links.clear()


class FaultProxy:
    """A FaultNetwork on an event loop of its own (a daemon thread), for synchronous callers:
    the same methods, each run on that loop and waited for (at most `call_timeout_s`)."""

    def __init__(self, *, seed: int | None = None, call_timeout_s: float = 10.0, **kw):
        self.call_timeout_s = call_timeout_s
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fault-proxy",
                                        daemon=True)
        self._thread.start()
        self.net: FaultNetwork = self._call(self._make, seed, kw)
        self._closed = False

    @staticmethod
    async def _make(seed, kw):
        return FaultNetwork(seed=seed, **kw)

    def _call(self, fn, *args, **kw):
        if asyncio.iscoroutinefunction(fn):
            fut = asyncio.run_coroutine_threadsafe(fn(*args, **kw), self.loop)
        else:
            async def run():
                return fn(*args, **kw)
            fut = asyncio.run_coroutine_threadsafe(run(), self.loop)
        return fut.result(self.call_timeout_s)

    def add_link(self, src, dst, upstream, port: int = 0):
        return self._call(self.net.add_link, src, dst, upstream, port)

    def __getattr__(self, name):
        # set_faults, update_faults, faults, cut, partition, isolate, heal, reset, address,
        # set_upstream, nodes, connections, stats: run on the proxy's loop
        if name.startswith("_") or name in ("net", "loop"):
            raise AttributeError(name)
        fn = getattr(self.net, name)
        return lambda *a, **kw: self._call(fn, *a, **kw)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self.net.close)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
