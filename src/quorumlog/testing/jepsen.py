"""Jepsen-style fault testing of a replica group: real `python -m quorumlog serve` processes
on loopback, their peer links through the fault proxy, idempotent producers recording every
operation, nemeses injecting faults, then a heal, final reads from every replica, a byte
comparison of the logs and the history checker (quorumlog.testing.history).

    python -m quorumlog.testing.jepsen --seed 7 --duration 300 --kills 20 --partitions 5
    python -m quorumlog.testing.jepsen --seed 7 --flush sync --kills 500 --all-nemeses

The seed fixes the nemesis plan (which fault, in which order, on which node, in which mode)
and the workload's choices; the interleaving of real processes is not reproducible, so a
failing seed is a lead, not a replay. Exit status: 0 valid, 1 findings, 2 harness failure.
Everything a run produced (replica logs, history.jsonl, summary.json) stays in its
directory when it fails or with --keep.

Replicas are started by ProxiedCluster, a LocalCluster whose command gives each replica its
own view of the peers: itself at its real address, every other node at the proxy listener
of the link (self -> other). Clients talk to the replicas directly.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import logging
import mmap
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from .._clientframe import decode_fetched
from ..errors import InvalidArgumentError, InvalidQueueError, QuorumlogError
from ..localcluster import LocalCluster
from ..net import messages as m
from ..net.auth import AuthConfig
from ..net.errors import NetError
from ..net.transport import TransportConfig, connect_client
from ..node.config import parse_address
from ..raft.messages import Role
from . import nemesis as nem
from .faultproxy import FaultProxy
from .history import (CheckResult, History, ReadMessage, ReplicaLog, ReplicaRead, Unreadable,
                      check, make_body, message_id, parse_body)

log = logging.getLogger(__name__)

__all__ = ["RunConfig", "ProxiedCluster", "Harness", "Workload", "run", "main"]

TOPIC = "jepsen"
MAX_QUEUES_READ = 1024


@dataclasses.dataclass
class RunConfig:
    seed: int
    nodes: int = 3
    flush: str = "async"
    duration_s: float = 600.0          # hard cap on the nemesis phase
    kills: int = 20
    kill_target: str = "leader"        # leader | follower | any | mixed
    partitions: int = 5
    pauses: int = 0
    power_cuts: int = 0
    bit_flips: int = 0
    disk_fulls: int = 0
    slow_networks: int = 0
    resets: int = 0
    lagging_power_losses: int = 0      # nemesis.LaggingPowerLoss (3 nodes)
    workers: int = 4
    rate_ops_s: float = 100.0          # produce batches per second, all workers together
    op_timeout_s: float = 10.0         # a batch retried this long, then indeterminate
    request_timeout_s: float = 2.0
    invalid_ratio: float = 0.02        # batches that must fail (oversize body, bad queue)
    large_ratio: float = 0.002         # batches over one APPEND's byte budget
    segment_size_bytes: int = 1 << 20
    quiet_s: tuple = (0.3, 1.5)        # load without faults between two nemeses
    hold_s: tuple = (0.5, 3.0)         # how long a fault stays
    converge_limit_s: float = 10.0
    recover_timeout_s: float = 30.0    # waits for recovery before the run goes on anyway
    disk_size_mb: int = 512
    power_model: str = "dirty-pages"   # or "checkpoint" (nemesis.lose_unflushed_tail)
    flip_repair: str = "wipe"          # or "undo" (nemesis.BitFlip)
    trace_msync: bool = False          # strace every replica's msync (checks power cuts)
    directory: str | None = None
    keep: bool = False
    log_level: str = "INFO"

    def validate(self) -> "RunConfig":
        if self.nodes < 3 or self.nodes > 9:
            raise InvalidArgumentError("nodes must be in [3, 9]")
        if self.flush not in ("sync", "async"):
            raise InvalidArgumentError("flush must be sync or async")
        if self.power_model not in ("dirty-pages", "checkpoint"):
            raise InvalidArgumentError("power_model must be dirty-pages or checkpoint")
        if self.flip_repair not in ("wipe", "undo"):
            raise InvalidArgumentError("flip_repair must be wipe or undo")
        if self.kill_target not in ("leader", "follower", "any", "mixed"):
            raise InvalidArgumentError("kill_target must be leader, follower, any or mixed")
        for name in ("kills", "partitions", "pauses", "power_cuts", "bit_flips", "disk_fulls",
                     "slow_networks", "resets", "lagging_power_losses"):
            if not 0 <= getattr(self, name) <= 100_000:
                raise InvalidArgumentError(f"{name} must be in [0, 100000]")
        if not 1 <= self.workers <= 64 or not 0 < self.rate_ops_s <= 10_000:
            raise InvalidArgumentError("workers in [1, 64], rate_ops_s in (0, 10000]")
        return self


# ------------------------------------------------------------------------------ the cluster
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


def _wait(cond, timeout: float, interval: float = 0.05):
    """Poll cond() until truthy (-> its value) or the deadline (-> None)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)


# ------------------------------------------------------------------------------ the harness
class Harness:
    """What the nemeses act on: the cluster, the proxy, the history, the seeded rng, and
    status helpers (which ask every node over the client protocol)."""

    def __init__(self, cfg: RunConfig, cluster: ProxiedCluster, proxy: FaultProxy,
                 history: History, rng: random.Random, io: IoThread):
        self.cfg = cfg
        self.cluster = cluster
        self.proxy = proxy
        self.history = history
        self.rng = rng
        self.io = io
        self.recover_timeout_s = cfg.recover_timeout_s
        ids = list(cluster.ids)
        self.flip_victim = rng.choice(ids)
        self.disk_victim: str | None = None
        self.power_model = cfg.power_model
        self.flip_repair = cfg.flip_repair
        self._channels: Channels | None = None
        self.msync_tracing = cfg.trace_msync
        self._tracers: dict = {}

    @property
    def channels(self) -> Channels:
        """The admin's connections (made once the cluster wrote its secret)."""
        if self._channels is None:
            self._channels = Channels(self.cluster.clients, self.cluster.secret(),
                                      "jepsen-admin", 1.0)
        return self._channels

    # -- status ------------------------------------------------------------------------------
    def statuses(self) -> dict:
        async def one(n):
            try:
                return await self.channels.request(n, m.AdminRequest(m.AdminOp.STATUS))
            except Exception as e:   # a dead or stopped member: report it, go on
                return e

        async def every():
            return dict(zip(self.cluster.ids,
                            await asyncio.gather(*(one(n) for n in self.cluster.ids))))
        return self.io.run(every(), 10)

    @staticmethod
    def _leaders(st: dict) -> list:
        ls = [s for s in st.values() if isinstance(s, m.AdminResponse) and s.role == Role.LEADER]
        return sorted(ls, key=lambda s: -s.term)

    def leader(self, timeout: float = 5.0) -> str | None:
        """The leader of the highest term among the answering nodes (None if none within
        timeout)."""
        def find():
            ls = self._leaders(self.statuses())
            return ls[0].node_id if ls else None
        return _wait(find, timeout, 0.05)

    def caught_up(self, nid: str, timeout: float) -> bool:
        """nid has the leader's commit index as of the call (last and commit index)."""
        target = {}

        def ok():
            st = self.statuses()
            ls = self._leaders(st)
            if not ls:
                return False
            target.setdefault("c", ls[0].commit_index)
            s = st.get(nid)
            return isinstance(s, m.AdminResponse) and s.last_index >= target["c"] \
                and s.commit_index >= target["c"]
        return bool(_wait(ok, timeout, 0.1))

    def wait_healthy(self, since: str, *, final: bool = False) -> float | None:
        """Wait until one leader has a majority and every node reached the commit index the
        leader had at the first look (final: every node holds exactly the leader's log and
        commit index). Records a `converged` event -> seconds, None if not within
        recover_timeout_s."""
        t0 = time.monotonic()
        target = {}

        def ok():
            st = self.statuses()
            ls = self._leaders(st)
            if not ls:
                return False
            lead = ls[0]
            c = target.setdefault("c", lead.commit_index)
            for s in st.values():
                if not isinstance(s, m.AdminResponse):
                    return False
                if final:
                    if (s.term, s.leader_id, s.commit_index, s.last_index) != \
                            (lead.term, lead.node_id, lead.commit_index, lead.last_index) or \
                            lead.commit_index != lead.last_index:
                        return False
                elif s.last_index < c or s.commit_index < c:
                    return False
            return True
        got = _wait(ok, self.recover_timeout_s if not final else max(60.0, self.recover_timeout_s),
                    0.1)
        after = time.monotonic() - t0 if got else None
        self.history.event("converged", (), after_s=after, since=since)
        return after

    # -- actions -----------------------------------------------------------------------------
    def restart(self, nid: str, *, expect_failure: bool = False) -> bool:
        """Start a stopped node and wait until it listens -> True; False (with a
        `restart-failed` event unless expect_failure) if it exits or does not start."""
        if self.cluster.alive(nid):
            return True
        try:
            self.cluster.restart(nid)
        except (QuorumlogError, TimeoutError) as e:
            if self.cluster.alive(nid):
                self.cluster.kill(nid)
            if not expect_failure:
                self.history.event("restart-failed", [nid], error=str(e)[-2000:])
            log.warning("%s did not start: %s", nid, self.last_start_error(nid))
            return False
        self.history.event("restart", [nid], pid=self.cluster.pid(nid))
        self.trace(nid)
        return True

    # -- msync tracing (checks the power-loss model against what was really made durable) --
    def trace(self, nid: str) -> None:
        """Attach strace (msync calls only) to nid's current process."""
        if not self.msync_tracing:
            return
        pid = self.cluster.pid(nid)
        out = os.path.join(self.cluster.dir, f"{nid}.msync.{pid}")
        p = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=msync", "-o", out,
                              "-p", str(pid)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._tracers[nid] = (p, out, pid)

        def attached():
            try:
                with open(f"/proc/{pid}/status") as fh:
                    return any(ln.startswith("TracerPid:") and ln.split()[1] != "0"
                               for ln in fh)
            except OSError:
                return True        # gone: nothing more to trace
        if not _wait(attached, 10, 0.01):
            raise QuorumlogError(f"strace did not attach to {nid} (pid {pid}) in 10 s")

    def msync_maps(self, nid: str) -> str | None:
        """nid's memory map (to place its msync addresses in files), before it is killed."""
        if not self.msync_tracing or nid not in self._tracers:
            return None
        with open(f"/proc/{self._tracers[nid][2]}/maps") as fh:
            return fh.read()

    def msync_end(self, nid: str, maps: str | None) -> int | None:
        """Stop tracing nid's (killed) process -> the highest log position it msync'd."""
        t = self._tracers.pop(nid, None)
        if t is None or maps is None:
            return None
        p, out, _pid = t
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
        return msync_end_from_trace(out, maps)

    def stop_tracing(self) -> None:
        for p, _out, _pid in self._tracers.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        self._tracers.clear()

    def last_start_error(self, nid: str) -> str:
        """The replica's last CRITICAL/ERROR log line (why it would not start)."""
        lines = [ln for ln in self.cluster.tail_log(nid, 8000).splitlines()
                 if " CRITICAL " in ln or " ERROR " in ln]
        return lines[-1][-500:] if lines else "(no error logged)"

    def move_leadership_away(self, nid: str) -> bool:
        other = self.rng.choice([n for n in self.cluster.ids if n != nid])
        try:
            self.io.run(self.channels.request(
                nid, m.AdminRequest(m.AdminOp.TRANSFER_LEADERSHIP, other)), 10)
        except Exception as e:
            log.info("transfer of leadership from %s failed: %s", nid, e)
        return bool(_wait(lambda: self.leader(1.0) not in (None, nid), 10, 0.1))

    def heal_everything(self) -> list:
        """Lift every fault: proxy healed, paused nodes continued, ballast removed, dead
        nodes restarted."""
        self.proxy.heal()
        for n in self.cluster.ids:
            if self.cluster.alive(n):
                self.cluster.signal(n, signal.SIGCONT)
        if self.disk_victim is not None:
            ballast = os.path.join(self.cluster.data_dir(self.disk_victim), ".ballast")
            if os.path.exists(ballast):
                os.unlink(ballast)
        for n in self.cluster.ids:
            self.restart(n)
        self.history.event("heal", (), final=True)
        return [n for n in self.cluster.ids if self.cluster.alive(n)]

    def close(self) -> None:
        if self._channels is None:
            return
        try:
            self.io.run(self._channels.close(), 10)
        except Exception:
            log.exception("closing the admin channels failed")


# ------------------------------------------------------------------------------ the workload
DEFINITE_FAILURES = (InvalidArgumentError,)   # refused before anything was appended


class Workload:
    """`workers` idempotent producers on the io loop, `rate_ops_s` batches per second in
    all. Every batch: invoke, then ok (with the answering node and the acknowledged
    position) / fail (a definite refusal) / info (gave up after op_timeout_s, outcome
    unknown). A retried batch keeps its producer id and sequence."""

    def __init__(self, h: Harness, cfg: RunConfig, seed: int):
        self.h = h
        self.cfg = cfg
        self.seed = seed
        self.stop_event: asyncio.Event | None = None
        self.future = None
        self.counts = collections.Counter()
        self.max_body = cfg.segment_size_bytes     # > max_message_bytes (capped below it)

    def start(self) -> None:
        async def main():
            self.stop_event = asyncio.Event()
            await asyncio.gather(*(self._worker(w) for w in range(self.cfg.workers)))
        self.future = self.h.io.submit(main())
        _wait(lambda: self.stop_event is not None, 10, 0.01)

    def stop(self, timeout: float) -> None:
        self.h.io.loop.call_soon_threadsafe(self.stop_event.set)
        self.future.result(timeout)

    def _batch(self, rng: random.Random, pid: int, seq: int):
        """-> (bodies, message ids, queue id, expect_failure)."""
        r = rng.random()
        qid = -1
        if r < self.cfg.invalid_ratio:
            n = rng.randint(1, 4)
            mids = [message_id(pid, seq, i) for i in range(n)]
            bodies = [make_body(x, rng.randint(16, 256)) for x in mids]
            if rng.random() < 0.5:
                k = rng.randrange(n)
                bodies[k] = make_body(mids[k], self.max_body)   # over max_message_bytes
            else:
                qid = 60000                                     # no such queue
            return bodies, mids, qid, True
        if r < self.cfg.invalid_ratio + self.cfg.large_ratio:
            n, lo, hi = 135, 8192, 8192                         # > max_batch_bytes (1 MiB)
        else:
            n, lo, hi = rng.randint(1, 8), 16, 400
        mids = [message_id(pid, seq, i) for i in range(n)]
        return [make_body(x, rng.randint(lo, hi)) for x in mids], mids, qid, False

    async def _worker(self, w: int) -> None:
        cfg = self.cfg
        rng = random.Random(f"{self.seed}/worker/{w}")
        pid = rng.getrandbits(63) | 1
        ids = list(self.h.cluster.ids)
        ch = Channels(self.h.cluster.clients, self.h.cluster.secret(), f"jepsen-w{w}",
                      cfg.request_timeout_s)
        hist = self.h.history
        guess = rng.choice(ids)
        interval = cfg.workers / cfg.rate_ops_s
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        seq = 0
        try:
            while not self.stop_event.is_set():
                now = loop.time()
                if next_at > now:
                    try:
                        await asyncio.wait_for(self.stop_event.wait(), next_at - now)
                        break
                    except TimeoutError:
                        pass
                next_at = max(next_at + interval, loop.time() - 1.0)
                seq += 1
                bodies, mids, qid, expect_fail = self._batch(rng, pid, seq)
                base = dict(process=w, producer_id=pid, sequence=seq, topic=TOPIC,
                            message_ids=tuple(mids))
                hist.op("invoke", **base)
                outcome, value, node, guess, attempts = await self._produce(
                    ch, ids, guess, bodies, qid, pid, seq)
                self.counts[outcome] += 1
                if attempts > 1:
                    self.counts["retried"] += 1
                if outcome == "ok":
                    hist.op("ok", **base, queue_id=value.queue_id,
                            first_offset=value.first_queue_offset,
                            positions=tuple(value.positions), node=node)
                    if expect_fail:
                        log.error("batch %x/%d should have been refused but was stored",
                                  pid, seq)
                else:
                    hist.op(outcome, **base, node=node,
                            error=f"{type(value).__name__}: {value}"[:300])
        finally:
            await ch.close()

    async def _produce(self, ch: Channels, ids, guess, bodies, qid, pid, seq):
        """One batch until acknowledged, definitely refused, or op_timeout_s ran out ->
        (outcome, response or error, answering node, next guess, attempts)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.op_timeout_s
        node = guess
        delay = 0.02
        last: BaseException | None = None
        req = m.ProduceRequest(TOPIC, bodies, qid, None, 0, pid, seq)
        attempts = 0
        while True:
            attempts += 1
            try:
                r = await ch.request(node, req)
                return "ok", r, node, node, attempts
            except DEFINITE_FAILURES as e:
                return "fail", e, node, node, attempts
            except Exception as e:     # unknown outcome: retry the same sequence elsewhere
                last = e
                lid = getattr(e, "leader_id", None)
                if lid in ch.addresses and lid != node:
                    node = lid
                else:
                    node = ids[(ids.index(node) + 1) % len(ids)]
            if loop.time() + delay > deadline:
                return "info", last, None, node, attempts
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)


# ------------------------------------------------------------------------------ end state
_MSYNC = re.compile(r"^(\d+)\s+msync\((0x[0-9a-f]+), (\d+), MS_SYNC(?:\) += 0| <unfinished)")
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. msync resumed>\) += 0")


def msync_end_from_trace(trace_path: str, maps: str) -> int:
    """The highest commit-log position covered by a successful msync in an strace log
    (`strace -f -e trace=msync`), placing addresses through the process's /proc maps."""
    segs = []
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and "/commitlog/" in parts[5]:
            a, b = (int(x, 16) for x in parts[0].split("-"))
            name = os.path.basename(parts[5].strip())
            if name.isdigit():
                segs.append((a, b, int(parts[2], 16), int(name)))
    end = 0
    pending = {}

    def place(addr, n):
        nonlocal end
        for a, b, off, start in segs:
            if a <= addr < b:
                end = max(end, start + off + (addr - a) + n)
    with open(trace_path) as fh:
        for line in fh:
            mm = _MSYNC.match(line)
            if mm:
                tid, addr, n = mm.group(1), int(mm.group(2), 16), int(mm.group(3))
                if line.rstrip().endswith("<unfinished ...>"):
                    pending[tid] = (addr, n)
                else:
                    place(addr, n)
                continue
            mm = _RESUMED.match(line)
            if mm and mm.group(1) in pending:
                place(*pending.pop(mm.group(1)))
    return end


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


# ------------------------------------------------------------------------------ disk volume
class DiskVolume:
    """A small file system of its own for one node's data directory: tmpfs, else a
    loop-mounted ext4 image. `reason` says why neither could be mounted."""

    def __init__(self, path: str, size_mb: int):
        self.path = path
        self.size_mb = size_mb
        self.kind = None
        self.image = None
        self.reason = None

    def mount(self) -> bool:
        os.makedirs(self.path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs",
                            self.path], capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            self.kind = "tmpfs"
            return True
        why = f"tmpfs: {r.stderr.strip() or r.returncode}"
        self.image = self.path.rstrip("/") + ".img"
        try:
            with open(self.image, "wb") as fh:
                fh.truncate(self.size_mb << 20)
            r = subprocess.run(["mkfs.ext4", "-q", "-F", self.image], capture_output=True,
                               text=True, timeout=60)
            if r.returncode == 0:
                r = subprocess.run(["mount", "-o", "loop", self.image, self.path],
                                   capture_output=True, text=True, timeout=30)
                if r.returncode == 0:
                    self.kind = "ext4-loop"
                    return True
            why += f"; loop ext4: {r.stderr.strip() or r.returncode}"
        except (OSError, subprocess.SubprocessError) as e:
            why += f"; loop ext4: {e}"
        self.reason = why
        return False

    def unmount(self) -> None:
        if self.kind is None:
            return
        r = subprocess.run(["umount", self.path], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=60)
        if self.image and os.path.exists(self.image):
            os.unlink(self.image)
        self.kind = None


# ------------------------------------------------------------------------------ the run
COUNTERS = (("kills", "kill"), ("partitions", "partition"), ("pauses", "pause"),
            ("power_cuts", "power-cut"), ("bit_flips", "bit-flip"),
            ("disk_fulls", "disk-full"), ("slow_networks", "slow-network"),
            ("resets", "reset"), ("lagging_power_losses", "lagging-power-loss"))


def build_plan(cfg: RunConfig, rng: random.Random) -> list[str]:
    """The nemeses of the run in a seeded random order."""
    plan = []
    kill_kinds = {"leader": ["kill-leader"], "follower": ["kill-follower"],
                  "any": ["kill-any"], "mixed": ["kill-leader", "kill-leader", "kill-any"]}
    for _ in range(cfg.kills):
        plan.append(rng.choice(kill_kinds[cfg.kill_target]))
    plan += ["partition"] * cfg.partitions
    plan += [rng.choice(("pause-leader", "pause-follower")) for _ in range(cfg.pauses)]
    plan += [rng.choice(("power-cut", "power-cut-leader")) for _ in range(cfg.power_cuts)]
    plan += ["bit-flip"] * cfg.bit_flips
    plan += ["disk-full"] * cfg.disk_fulls
    plan += ["slow-network"] * cfg.slow_networks
    plan += ["reset"] * cfg.resets
    plan += ["lagging-power-loss"] * cfg.lagging_power_losses
    rng.shuffle(plan)
    return plan


@dataclasses.dataclass
class Report:
    seed: int
    result: CheckResult
    summary: dict
    directory: str
    notes: list

    @property
    def valid(self) -> bool:
        return self.result.valid and not self.notes_fatal

    @property
    def notes_fatal(self) -> bool:
        return any(n.startswith("FATAL") for n in self.notes)


def _say(msg: str) -> None:
    print(msg, flush=True)


def _prepare(h: Harness, cfg: RunConfig, rng: random.Random, notes: list):
    """Choose the power-loss model and mount the full-disk victim's volume -> the volume
    (None without one)."""
    if (cfg.power_cuts or cfg.lagging_power_losses) and cfg.power_model == "dirty-pages":
        why = nem.dirty_page_model_available()
        if why is not None:
            notes.append(f"power cuts use the checkpoint model: dirty pages are not "
                         f"visible here ({why})")
            _say(notes[-1])
            cfg.power_model = h.power_model = "checkpoint"
    if not cfg.disk_fulls:
        return None
    victim = rng.choice(h.cluster.ids)
    volume = DiskVolume(h.cluster.data_dir(victim), cfg.disk_size_mb)
    if volume.mount():
        h.disk_victim = victim
        _say(f"disk-full victim {victim}: {volume.kind} of {cfg.disk_size_mb} MiB")
        return volume
    notes.append(f"disk-full nemesis skipped: could not mount a small file system "
                 f"({volume.reason})")
    _say(notes[-1])
    return None


def _apply(h: Harness, name: str) -> nem.Nemesis | None:
    """Start nemesis `name` (three tries, waiting for health between) -> it, or None."""
    n = nem.NEMESES[name]()
    for _attempt in range(3):
        if n.start(h):
            return n
        h.wait_healthy(f"{name} could not start")
    return None


def _nemesis_phase(h: Harness, cfg: RunConfig, rng: random.Random, workload: "Workload",
                   notes: list, t_start: float) -> None:
    """Every nemesis of the plan in turn: quiet load, inject, hold, heal, wait for health."""
    counts = collections.Counter()
    plan = build_plan(cfg, rng)
    plan = [p for p in plan if p != "disk-full" or h.disk_victim is not None]
    deadline = t_start + cfg.duration_s
    postponed: set = set()
    for k, name in enumerate(plan):
        if time.monotonic() > deadline:
            notes.append(f"duration cap {cfg.duration_s} s reached after {k} of "
                         f"{len(plan)} nemeses")
            _say(notes[-1])
            break
        time.sleep(rng.uniform(*cfg.quiet_s))
        n = _apply(h, name)
        if n is None:
            if k not in postponed:           # try once more at the end of the plan
                postponed.add(len(plan))
                plan.append(name)
            else:
                notes.append(f"{name} could not be applied (no leader, or nothing to act "
                             "on yet)")
            continue
        counts[n.counter] += 1
        time.sleep(rng.uniform(*cfg.hold_s))
        n.stop(h)
        after = h.wait_healthy(f"{name} healed")
        if (k + 1) % 10 == 0 or after is None:
            _say(f"[{time.monotonic() - t_start:6.1f}s] {k + 1}/{len(plan)} nemeses; "
                 f"{dict(counts)}; workload {dict(workload.counts)}; last heal -> "
                 f"{'not converged' if after is None else f'{after:.2f} s'}")


def _end_phase(h: Harness, cfg: RunConfig, workload: "Workload", notes: list):
    """Stop the load, heal everything, wait for convergence, read every replica, stop
    them, compare their logs, check -> (CheckResult, files to close)."""
    workload.stop(cfg.op_timeout_s + 30)
    up = h.heal_everything()
    after = h.wait_healthy("final heal", final=True)
    _say(f"final heal: replicas converged in "
         f"{'(not within limit)' if after is None else f'{after:.2f} s'}")
    if len(up) < cfg.nodes:
        notes.append(f"only {up} are running at the end: reads and log comparison "
                     "cover them alone")
    reads = read_all(h, up)
    h.close()
    codes = h.cluster.stop()
    bad_exit = {n: c for n, c in codes.items() if c != 0 and n in up}
    if bad_exit:
        notes.append(f"replicas exited with {bad_exit} on SIGTERM")
    logs, opened = replica_logs(h.cluster, up)
    return check(h.history.ops, h.history.events, reads, logs, nodes_total=cfg.nodes,
                 converge_limit_s=cfg.converge_limit_s), opened


def _summary(cfg: RunConfig, history: History, result: CheckResult, workload, notes,
             elapsed: float) -> dict:
    c = result.counts
    s = {"seed": cfg.seed, "flush": cfg.flush, "nodes": cfg.nodes,
         "elapsed_s": round(elapsed, 1), "ops": c.get("ops", 0),
         "acked_batches": c.get("acked_batches", 0),
         "acked_messages": c.get("acked_messages", 0),
         "failed_batches": c.get("failed_batches", 0),
         "indeterminate_batches": c.get("indeterminate_batches", 0)}
    for key, kind in COUNTERS:
        s[key] = history.count_events(kind)
    s.update({"acked_lost": c.get("acked_lost", 0),
              "acked_lost_by_short_acks": c.get("acked_lost_by_short_acks", 0),
              "short_acks": result.by_kind().get("short-ack", 0),
              "wrong_data": c.get("wrong_data", 0),
              "duplicates": c.get("duplicates", 0),
              "failed_appeared": c.get("failed_appeared", 0),
              "findings": c.get("findings", 0), "by_kind": result.by_kind(),
              "compared_bytes": c.get("compared_bytes", 0),
              "max_converge_s": round(c.get("max_converge_s", 0), 2),
              "damaged_unreadable": c.get("damaged_unreadable", 0),
              "restarts_after_disk_full": history.count_events("restart-after-disk-full"),
              "refused_starts": history.count_events("refused-start"),
              "power_model_violations": history.count_events("power-model-violation"),
              "restart_failures": history.count_events("restart-failed"),
              "retried_batches": workload.counts["retried"] if workload else 0,
              "power_model": cfg.power_model
              if cfg.power_cuts or cfg.lagging_power_losses else None,
              "notes": notes})
    return s


def run(cfg: RunConfig) -> Report:
    """One run: start, load + nemeses, heal, read, check; prints the seed and a summary."""
    cfg.validate()
    rng = random.Random(cfg.seed)
    _say(f"quorumlog jepsen: seed {cfg.seed} (flush={cfg.flush}, nodes={cfg.nodes})")
    own_dir = cfg.directory is None
    directory = cfg.directory or tempfile.mkdtemp(prefix=f"jepsen-{cfg.seed}-")
    os.makedirs(directory, exist_ok=True)
    history = History()
    notes: list[str] = []
    proxy = FaultProxy(seed=rng.getrandbits(32))
    io = IoThread()
    # retention off (ratios 1.0): a replica must not delete acknowledged data under disk
    # pressure during the check; small index files so a small data volume holds them
    env = {"QUORUMLOG_DISK_CLEAN_RATIO": "1.0", "QUORUMLOG_DISK_FORCE_CLEAN_RATIO": "1.0",
           "QUORUMLOG_DISK_REJECT_RATIO": "1.0", "QUORUMLOG_INDEX_FILE_ENTRIES": "65536",
           "QUORUMLOG_CONSUME_QUEUE_FILE_ENTRIES": "65536"}
    cluster = ProxiedCluster(directory, cfg.nodes, proxy, flush=cfg.flush,
                             segment_size_bytes=cfg.segment_size_bytes, env=env,
                             log_level=cfg.log_level)
    h = Harness(cfg, cluster, proxy, history, rng, io)
    volume = workload = result = None
    t_start = time.monotonic()
    opened: list = []
    try:
        volume = _prepare(h, cfg, rng, notes)
        cluster.start()
        cluster.wait_started(timeout=60)
        for n in cluster.ids:
            h.trace(n)
        if h.leader(30) is None:
            raise QuorumlogError("no leader within 30 s of the start")
        _say(f"cluster up in {directory}; bit-flip victim {h.flip_victim}")
        workload = Workload(h, cfg, rng.getrandbits(32))
        workload.start()
        _nemesis_phase(h, cfg, rng, workload, notes, t_start)
        result, opened = _end_phase(h, cfg, workload, notes)
    except BaseException as e:
        notes.append(f"FATAL {type(e).__name__}: {e}")
        log.exception("jepsen run failed")
        if workload is not None and workload.stop_event is not None:
            try:
                workload.stop(cfg.op_timeout_s + 30)
            except Exception:
                pass
        if result is None:
            result = check(history.ops, history.events, (), (), nodes_total=cfg.nodes)
    finally:
        for o in opened:
            o.close()
        cluster.kill_all()
        h.stop_tracing()
        if volume is not None:
            volume.unmount()
        proxy.close()
        io.close()
    summary = _summary(cfg, history, result, workload, notes, time.monotonic() - t_start)
    report = Report(cfg.seed, result, summary, directory, notes)
    _write_artifacts(directory, history, result, summary)
    _print_summary(report)
    if own_dir and report.valid and not cfg.keep:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        _say(f"run directory kept: {directory}")
    return report


def _write_artifacts(directory, history: History, result: CheckResult, summary) -> None:
    try:
        with open(os.path.join(directory, "history.jsonl"), "w") as fh:
            for o in history.ops:
                fh.write(json.dumps(dataclasses.asdict(o)) + "\n")
            for e in history.events:
                fh.write(json.dumps({"event": e.kind, "time": e.time, "nodes": e.nodes,
                                     **dict(e.detail)}, default=str) + "\n")
        with open(os.path.join(directory, "summary.json"), "w") as fh:
            json.dump({**summary, "findings_text": [f"{f.kind}: {f.text}"
                                                   for f in result.findings]}, fh, indent=1)
    except OSError as e:
        log.warning("could not write the run's artifacts: %s", e)


def _print_summary(r: Report) -> None:
    s = r.summary
    _say("summary: " + ", ".join(f"{k}={v}" for k, v in s.items()
                                 if k not in ("notes", "by_kind")))
    for f in r.result.findings:
        _say(f"  FINDING {f.kind}: {f.text}")
    for n in r.notes:
        _say(f"  note: {n}")
    _say(f"seed {r.seed}: {'VALID' if r.valid else 'INVALID'} -- kills={s['kills']}, "
         f"partitions={s['partitions']}, power cuts={s['power_cuts']}, "
         f"bit flips={s['bit_flips']}, acked lost={s['acked_lost']}, "
         f"wrong data={s['wrong_data']}, duplicates={s['duplicates']}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m quorumlog.testing.jepsen",
                                description="Jepsen-style fault testing of a local replica "
                                            "group (real processes, fault proxy, checker).")
    p.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--flush", choices=("sync", "async"), default="async")
    p.add_argument("--duration", type=float, default=600.0,
                   help="cap on the nemesis phase, seconds")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--kill-target", choices=("leader", "follower", "any", "mixed"),
                   default="leader")
    p.add_argument("--partitions", type=int, default=5)
    p.add_argument("--pauses", type=int, default=0)
    p.add_argument("--power-cuts", type=int, default=0)
    p.add_argument("--bit-flips", type=int, default=0)
    p.add_argument("--disk-fulls", type=int, default=0)
    p.add_argument("--slow-networks", type=int, default=0)
    p.add_argument("--resets", type=int, default=0)
    p.add_argument("--lagging-power-losses", type=int, default=0,
                   help="compound fault: a follower lags, the other crashes, the leader "
                        "loses power (nemesis.LaggingPowerLoss)")
    p.add_argument("--all-nemeses", action="store_true",
                   help="add, per 10 kills: 1 partition, 1 power cut, and every 20 kills: 1 "
                        "pause, 1 slow network, 1 reset; per 50 kills: 1 bit flip, 1 full "
                        "disk (at least one of each)")
    p.add_argument("--power-model", choices=("dirty-pages", "checkpoint"),
                   default="dirty-pages",
                   help="what a power cut loses: the page cache's dirty pages (needs root), "
                        "or everything after the checkpoint's flushed position")
    p.add_argument("--flip-repair", choices=("wipe", "undo"), default="wipe",
                   help="how a replica refusing to start on a flipped bit is repaired")
    p.add_argument("--trace-msync", action="store_true",
                   help="strace every replica's msync calls and report a power cut that "
                        "zeroed bytes a replica had made durable (checks the model)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--rate", type=float, default=100.0, help="batches per second in all")
    p.add_argument("--large-ratio", type=float, default=0.002,
                   help="share of batches larger than one APPEND (1 MiB)")
    p.add_argument("--disk-size-mb", type=int, default=512,
                   help="size of the full-disk victim's own file system")
    p.add_argument("--dir", default=None, help="run directory (default: a new temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the run directory when valid")
    p.add_argument("--log-level", default="WARNING", help="the replicas' log level")
    return p


def config_from_args(a) -> RunConfig:
    seed = a.seed if a.seed is not None else random.SystemRandom().getrandbits(31)
    cfg = RunConfig(seed=seed, nodes=a.nodes, flush=a.flush, duration_s=a.duration,
                    kills=a.kills, kill_target=a.kill_target, partitions=a.partitions,
                    pauses=a.pauses, power_cuts=a.power_cuts, bit_flips=a.bit_flips,
                    disk_fulls=a.disk_fulls, slow_networks=a.slow_networks, resets=a.resets,
                    lagging_power_losses=a.lagging_power_losses,
                    workers=a.workers, rate_ops_s=a.rate, directory=a.dir, keep=a.keep,
                    power_model=a.power_model, flip_repair=a.flip_repair,
                    disk_size_mb=a.disk_size_mb, large_ratio=a.large_ratio,
                    trace_msync=a.trace_msync,
                    log_level=a.log_level.upper())
    if a.all_nemeses:
        k = a.kills
        for name, per in (("partitions", 10), ("power_cuts", 10), ("pauses", 20),
                          ("slow_networks", 20), ("resets", 20), ("bit_flips", 50),
                          ("disk_fulls", 50), ("lagging_power_losses", 20)):
            setattr(cfg, name, max(getattr(cfg, name), k // per, 1))
    return cfg


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        cfg = config_from_args(a)
        cfg.validate()
    except QuorumlogError as e:
        print(f"jepsen: {e}", file=sys.stderr)
        return 2
    report = run(cfg)
    if report.notes_fatal:
        return 2
    return 0 if report.valid else 1


if __name__ == "__main__":
    sys.exit(main())
