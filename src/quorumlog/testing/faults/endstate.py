"""The end state: every message each replica serves (final reads through the client
protocol) and the stopped replicas' logs mapped read-only for the byte comparison."""
from __future__ import annotations

import asyncio
import mmap
import os

from ..._clientframe import decode_fetched
from ...errors import InvalidQueueError, QuorumlogError
from ...localcluster import LocalCluster
from ...net import messages as m
from ...net.errors import NetError
from .. import nemesis as nem
from ..history import ReadMessage, ReplicaLog, ReplicaRead, Unreadable, parse_body
from .cluster import Channels
from .config import MAX_QUEUES_READ, TOPIC
from .harness import Harness


class ReadFailedError(QuorumlogError):
    """A final read could not reach a replica (not a finding about the data: the run
    fails as a harness failure)."""


_NETWORK_ERRORS = (NetError, OSError, TimeoutError)


async def _read_replica(ch: Channels, node: str, timeout: float) -> ReplicaRead:
    """Every message of TOPIC that `node` serves, queue by queue; offsets whose records
    cannot be read (the server answers an error, or the client finds a bad CRC) are listed
    with the error."""
    out = ReplicaRead(node)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout

    async def req(msg):
        for attempt in range(5):
            try:
                return await ch.request(node, msg, 10.0)
            except _NETWORK_ERRORS as e:
                if attempt == 4 or loop.time() > deadline:
                    raise ReadFailedError(f"{node}: read failed: {e!r}") from e
                await asyncio.sleep(0.2)

    for q in range(MAX_QUEUES_READ):
        try:
            r = await req(m.OffsetsRequest(TOPIC, q))
        except InvalidQueueError:
            break                  # past the topic's last queue
        lo, hi = r.min_offset, r.max_offset
        out.ranges[(TOPIC, q)] = (lo, hi)
        off = lo
        while off < hi:
            try:
                resp = await req(m.FetchRequest(TOPIC, q, off, 4096, 4 << 20))
                msgs = decode_fetched(resp.records)
            except ReadFailedError:
                raise
            except QuorumlogError:
                # find the offset that fails: one message at a time
                try:
                    resp = await req(m.FetchRequest(TOPIC, q, off, 1, 4 << 20))
                    msgs = decode_fetched(resp.records)
                except ReadFailedError:
                    raise
                except QuorumlogError as e1:
                    out.unreadable.append(Unreadable(TOPIC, q, off, f"{type(e1).__name__}: "
                                                                    f"{e1}"[:200]))
                    off += 1
                    continue
            if not msgs:
                off += 1           # nothing served at this offset: the checker sees a gap
                continue
            for fm in msgs:
                mid, intact = parse_body(fm.body)
                out.messages.append(ReadMessage(TOPIC, q, fm.queue_offset, mid, intact))
            off = msgs[-1].queue_offset + 1
    return out


def read_all(h: Harness, nodes, timeout: float = 300.0) -> list[ReplicaRead]:
    async def every():
        ch = Channels(h.cluster.clients, h.cluster.secret(), "jepsen-reader", 10.0)
        try:
            return [await _read_replica(ch, n, timeout) for n in nodes]
        finally:
            await ch.close()
    return h.io.run(every(), timeout + 30)


def replica_logs(cluster: LocalCluster, nodes) -> tuple[list[ReplicaLog], list]:
    """The stopped replicas' logs (segments mapped read-only) -> (logs, open files)."""
    logs, opened = [], []
    for n in nodes:
        d = cluster.data_dir(n)
        cp = nem.read_checkpoint(d)
        segs = {}
        cdir = os.path.join(d, "commitlog")
        for name in sorted(os.listdir(cdir)):
            if not name.isdigit():
                continue
            fh = open(os.path.join(cdir, name), "rb")
            opened.append(fh)
            if os.fstat(fh.fileno()).st_size == 0:
                continue
            mm = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
            opened.append(mm)
            segs[int(name)] = mm
        logs.append(ReplicaLog(n, cp.committed_position, segs))
    return logs, opened
