"""Installing a follower past retention with the native commit log (NativeRaftLog), through
three RaftCores whose messages cross the wire codec: the lagging follower receives the
leader's retained segment files in bounded chunks, ends byte-identical and replicates on."""
from __future__ import annotations

import os
import random

from quorumlog.commitlog import CommitLog
from quorumlog.net import codec
from quorumlog.net.framing import HEADER_SIZE
from quorumlog.raft import RaftConfig, RaftCore, Role
from quorumlog.raft.core import BehindRetention, LogInstalled
from quorumlog.raft.messages import InstallSegment
from quorumlog.store.nativelog import NativeRaftLog

SEGMENT = 1 << 16
VOTERS = ("n1", "n2", "n3")


class Group:
    """Three cores over native logs; a synchronous driver that flushes at once and sends
    every message through the codec (encode, then decode as the receiver would)."""

    def __init__(self, tmp_path, cfg: RaftConfig):
        self.cls = {v: CommitLog(tmp_path / v, segment_size_bytes=SEGMENT) for v in VOTERS}
        self.logs = {v: NativeRaftLog(cl) for v, cl in self.cls.items()}
        self.cores = {v: RaftCore(v, self.logs[v], random.Random(i), cfg, voters=VOTERS,
                                  peers=VOTERS) for i, v in enumerate(VOTERS)}
        self.down: set = set()
        self.now = 0
        self.events: list = []
        self.sent: list = []

    def pump(self):
        busy = True
        while busy:
            busy = False
            for v, c in self.cores.items():
                if v in self.down or not c.has_ready():
                    continue
                busy = True
                r = c.ready()
                if r.flush_to is not None:
                    c.on_persisted(self.logs[v].flush(), r.flush_gen)
                if r.commit_index is not None:
                    self.logs[v].cl.commit(min(r.commit_index, self.logs[v].last_index()))
                    c.on_dispatched(r.commit_index)
                self.events += [(v, e) for e in r.events]
                for m in r.messages:
                    if m.dst in self.down:
                        continue
                    self.sent.append(m)
                    wire = b"".join(bytes(p) for p in codec.encode(m))
                    self.cores[m.dst].step(codec.decode(wire[3], wire[HEADER_SIZE:], m.src,
                                                        m.dst))

    def run(self, ms):
        for _ in range(ms // 10):
            self.now += 10
            for v, c in self.cores.items():
                if v not in self.down:
                    c.tick(self.now)
            self.pump()

    def leader(self):
        return self.cores["n1"]

    def close(self):
        for lg in self.logs.values():
            lg.cl.close()


def _elect(g):
    ld = g.leader()
    now = ld.next_time_to_request_vote
    for step in range(40):
        for v in VOTERS if step else ("n1",):
            g.cores[v].tick(now + step)
        g.pump()
        if ld.role == Role.LEADER:
            break
    assert ld.role == Role.LEADER
    g.now = now + 40


def _propose(g, rounds):
    for i in range(rounds):
        ld = g.leader()
        bodies = [os.urandom(400) for _ in range(10)]
        ld.propose(("t", bodies), len(bodies), 4000)
        g.pump()


def test_a_follower_behind_the_native_leaders_retention_is_installed(tmp_path):
    g = Group(tmp_path, RaftConfig(max_batch_bytes=20_000, max_inflight_batches=3))
    try:
        _elect(g)
        _propose(g, 5)
        g.down.add("n3")
        _propose(g, 60)
        ld, l1 = g.leader(), g.logs["n1"]
        assert ld.commit_index == l1.last_index()
        n3_last = g.logs["n3"].last_index()
        assert l1.cl.delete_segments_before(l1.cl.position_of(l1.last_index())) > 0
        assert l1.first_index() > n3_last + 1        # n3 needs what n1 deleted
        g.down.discard("n3")
        g.run(3000)
        l3 = g.logs["n3"]
        assert (l3.first_index(), l3.last_index()) == (l1.first_index(), l1.last_index())
        assert g.cores["n3"].commit_index == ld.commit_index
        assert any(isinstance(e, BehindRetention) and v == "n1" for v, e in g.events)
        assert [e.first_index for v, e in g.events if isinstance(e, LogInstalled)] == \
            [l1.first_index()]
        chunks = [m for m in g.sent if isinstance(m, InstallSegment)]
        assert chunks and max(m.chunk.nbytes for m in chunks) <= 20_000   # the byte budget
        # replication goes on, and the files are byte-identical from the first position
        _propose(g, 3)
        g.run(500)
        assert l3.last_index() == l1.last_index() and l3.cl.end_position == l1.cl.end_position
        for (s1, p1), (s3, p3) in zip(l1.cl.segments(), l3.cl.segments(), strict=True):
            assert s1 == s3
            with open(p1, "rb") as f1, open(p3, "rb") as f3:
                assert f1.read() == f3.read()
    finally:
        g.close()
