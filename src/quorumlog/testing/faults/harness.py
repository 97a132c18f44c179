"""What the nemeses act on (Harness): the cluster, the proxy, the history, the seeded rng,
status helpers that ask every node over the client protocol, restarts, leadership moves,
and the final heal."""
from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import time

from ...errors import QuorumlogError
from ...net import messages as m
from ...raft.messages import Role
from ..faultproxy import FaultProxy
from ..history import History
from .cluster import Channels, IoThread, ProxiedCluster, wait_for
from .config import RunConfig
from .tracing import MsyncTracer

log = logging.getLogger(__name__)


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
        self.tracer = MsyncTracer(cluster, cfg.trace_msync)
        self.clock_dir: str | None = None      # clock-rate control files (clockskew.py)
        self.clock_skew_permille = cfg.clock_skew_permille

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
        return wait_for(find, timeout, 0.05)

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
        return bool(wait_for(ok, timeout, 0.1))

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
        got = wait_for(ok, self.recover_timeout_s if not final
                       else max(60.0, self.recover_timeout_s), 0.1)
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
        """Attach strace (msync calls only) to nid's current process (tracing.MsyncTracer)."""
        self.tracer.attach(nid)

    def msync_maps(self, nid: str) -> str | None:
        return self.tracer.maps(nid)

    def msync_end(self, nid: str, maps: str | None) -> int | None:
        return self.tracer.end(nid, maps)

    def stop_tracing(self) -> None:
        self.tracer.stop()

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
        return bool(wait_for(lambda: self.leader(1.0) not in (None, nid), 10, 0.1))

    def heal_everything(self) -> list:
        """Lift every fault: proxy healed, paused nodes continued, ballast removed, dead
        nodes restarted."""
        self.history.event("heal", ())      # before the proxy lets held traffic go (nemesis.py)
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
