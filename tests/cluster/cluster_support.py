"""Checkers for the cluster tests: bounded waits, commit-log comparison, queue reads, and
the producers that load a cluster from a thread of their own."""
from __future__ import annotations

import asyncio
import collections
import os
import threading
import time

from quorumlog.client import AsyncClient, Client
from quorumlog.format import decode_checkpoint
from quorumlog.localcluster import LocalCluster

SEGMENT = 1 << 24   # small segments: the tests cross segment boundaries


class Producers:
    """`n` producers writing batches of `batch` distinct bodies to `topic` (queue chosen by
    the client) from a thread of their own, `limit` batches each (None: until stopped).
    The first failure of any produce ends its producer and is kept in `errors`."""

    def __init__(self, addresses, secret, n=2, batch=50, *, topic="events", groups=1,
                 limit=None):
        self.addresses, self.secret, self.n, self.batch = addresses, secret, n, batch
        self.topic, self.groups, self.limit = topic, groups, limit
        self.acked = []          # (queue_id, first_offset, bodies)
        self.errors = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _one(self, pid):
        async with AsyncClient(self.addresses, secret=self.secret, retry_timeout=60,
                               request_timeout=3, groups=self.groups) as c:
            k = 0
            while not self.stop.is_set() and (self.limit is None or k < self.limit):
                bodies = [f"p{pid}-b{k:06d}-m{i:03d}".encode() for i in range(self.batch)]
                try:
                    r = await c.produce(self.topic, bodies)
                except Exception as e:  # (any failure ends the test with this error)
                    self.errors.append(e)
                    return
                self.acked.append((r.queue_id, r.first_queue_offset, bodies))
                k += 1

    async def _run(self):
        await asyncio.gather(*(self._one(p) for p in range(self.n)))

    def count(self):
        return sum(len(b) for _, _, b in self.acked)


def wait_until(cond, timeout, what, interval=0.02):
    """Poll cond() until it returns a truthy value or the deadline passes (`what`: a text, or
    a function giving one at the deadline, e.g. the state that was waited for)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what() if callable(what) else what}: not within {timeout} s")
        time.sleep(interval)


def store_dir(c: LocalCluster, nid, group=None) -> str:
    """A replica's store directory (group g of a many-group cluster: groups/<g>/)."""
    d = c.data_dir(nid)
    return d if group is None else os.path.join(d, "groups", str(group))


def checkpoint(c: LocalCluster, nid, group=None):
    with open(os.path.join(store_dir(c, nid, group), "checkpoint"), "rb") as fh:
        return decode_checkpoint(fh.read())


def log_bytes(c: LocalCluster, nid, upto: int, group=None) -> bytes:
    """The first `upto` bytes of a replica's commit log (segments concatenated)."""
    d = os.path.join(store_dir(c, nid, group), "commitlog")
    out = bytearray()
    for name in sorted(os.listdir(d)):
        start = int(name)
        if start >= upto:
            break
        with open(os.path.join(d, name), "rb") as fh:
            out += fh.read(min(upto - start, SEGMENT))
    return bytes(out)


def assert_logs_identical(c: LocalCluster, nodes=None, group=None) -> int:
    """Every replica's commit log (of `group`, in a many-group cluster) byte-identical up to
    the smallest committed position (from the checkpoints of stopped replicas) -> that
    position."""
    nodes = nodes or c.ids
    upto = min(checkpoint(c, n, group).committed_position for n in nodes)
    assert upto > 0
    ref = log_bytes(c, nodes[0], upto, group)
    assert len(ref) == upto
    for n in nodes[1:]:
        other = log_bytes(c, n, upto, group)
        if other != ref:
            i = next(k for k in range(upto) if other[k] != ref[k])
            raise AssertionError(f"{n}'s log differs from {nodes[0]}'s at byte {i} "
                                 f"(committed up to {upto})")
    return upto


def read_queue(client, address, topic, queue_id, upto_offset) -> list[bytes]:
    """Every body of (topic, queue) offsets [0, upto_offset) as served by one member."""
    out: list[bytes] = []
    off = 0
    while off < upto_offset:
        r = client.fetch(topic, queue_id, off, max_messages=4096, max_bytes=8 << 20)
        if not r.messages:
            raise AssertionError(f"{address}: {topic}/{queue_id} ends at {off}, "
                                 f"expected {upto_offset}")
        out.extend(bytes(m.body) for m in r.messages)
        off = r.next_offset
    return out[:upto_offset]


def wait_all_follow(c: LocalCluster, client, leader, timeout=10):
    """Until every member names `leader` and all are in one term (a follower learns of its
    leader from the first heartbeat) -> the statuses."""
    def agreed():
        st = c.statuses(client)
        ok = (all(not isinstance(s, Exception) for s in st.values())
              and {s.leader_id for s in st.values()} == {leader}
              and len({s.term for s in st.values()}) == 1)
        return st if ok else None
    return wait_until(agreed, timeout, "every member following the leader")


def kill_leaders_under_load(c: LocalCluster, admin, leader, load, kills: int, *,
                            before: int, after: int = 1) -> str:
    """kill -9 the leader `kills` times while `load` runs (load.count(): acknowledgements so
    far, load.errors: a list that is not empty once the load failed): each time after `before`
    more acknowledgements, then until a new leader and `after` more, then restart the killed
    replica -> the last leader."""
    for k in range(kills):
        at = load.count()
        wait_until(lambda: load.count() > at + before or load.errors, 30, "load before the kill")
        c.kill(leader)
        t0 = time.monotonic()
        new = c.wait_leader(client=admin, timeout=20, exclude=(leader,))
        assert new != leader
        at_kill = load.count()
        wait_until(lambda: load.count() >= at_kill + after or load.errors, 30,
                   f"acknowledgements after kill {k}")
        print(f"kill {k}: {leader} -> {new}, next acks after {time.monotonic() - t0:.2f} s")
        c.restart(leader)
        leader = new
    return leader


def check_acked_on_every_replica(c: LocalCluster, prod: Producers) -> dict:
    """Every message `prod` had acknowledged at its (queue, offset) on every replica, no
    offset acknowledged twice, no body stored twice -> {queue: {offset: body}}."""
    acked = collections.defaultdict(dict)
    for q, first, bodies in prod.acked:
        for i, b in enumerate(bodies):
            assert first + i not in acked[q], f"offset {q}/{first + i} acknowledged twice"
            acked[q][first + i] = b
    seen = collections.Counter()
    topic = prod.topic
    for nid in c.ids:
        addr = c.clients[nid]
        with Client([addr], secret=c.secret(), retry_timeout=30, groups=prod.groups) as m:
            for q in sorted(acked):
                end = max(acked[q]) + 1
                wait_until(lambda: m.offsets(topic, q)[1] >= end, 60,
                           f"{nid} catching up {topic}/{q}")
                got = read_queue(m, addr, topic, q, m.offsets(topic, q)[1])
                for off, b in acked[q].items():
                    assert got[off] == b, f"{nid}: {topic}/{q}@{off} is {got[off]!r}, acked {b!r}"
                if nid == c.ids[0]:
                    seen.update(got)
    dups = [b for b, n in seen.items() if n > 1]
    assert not dups, f"{len(dups)} messages stored twice, e.g. {dups[:3]}"
    assert sum(len(v) for v in acked.values()) == prod.count()
    return acked
