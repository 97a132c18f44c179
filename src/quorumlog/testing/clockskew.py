"""Clock-rate skew against the leader lease: each replica runs under clockrate.c
(LD_PRELOAD), whose monotonic clock runs at a rate the harness sets per process through a
control file; the ClockSkew nemesis slows the leader's clock and speeds up the followers'
(within the configured drift bound, max_clock_rate_skew_permille), isolates the leader so
the others elect a new one, and samples every replica's role meanwhile: how long two of
them claimed leadership at once, and whether the old leader acknowledged anything after
the new one was elected."""
from __future__ import annotations

import asyncio
import mmap
import os
import struct
import subprocess
import time

from ..errors import QuorumlogError
from ..net import messages as m
from ..raft.messages import Role

__all__ = ["build_shim", "ClockControl", "ClockSkew", "DEFAULT_SKEW_PERMILLE"]

_CONTROL = struct.Struct("<Qdqq")      # seq, rate, anchor_real_ns, anchor_virt_ns
DEFAULT_SKEW_PERMILLE = 50             # raft.core.RaftConfig.max_clock_rate_skew_permille
SAMPLE_EVERY_S = 0.02


def build_shim(directory: str) -> str:
    """Compile clockrate.c into `directory` -> the shared object's path."""
    src = os.path.join(os.path.dirname(__file__), "clockrate.c")
    out = os.path.join(directory, "clockrate.so")
    r = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", out, src, "-ldl"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise QuorumlogError(f"cannot build the clock-rate shim: {r.stderr.strip()[-500:]}")
    return out


def _mapped(c: "ClockControl") -> bool:
    """The process has mapped its control file (its clock follows the rate set)."""
    try:
        with open(f"/proc/{c.pid}/maps") as fh:
            return c.path in fh.read()
    except OSError:
        return False


class ClockControl:
    """The control file of one process: its clock's rate from now on, continuous (the
    virtual time never jumps, and never goes back)."""

    def __init__(self, directory: str, pid: int):
        self.pid = pid
        self.path = os.path.join(directory, str(pid))
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, _CONTROL.size)
            self.map = mmap.mmap(fd, _CONTROL.size)
        finally:
            os.close(fd)
        self.seq, self.rate, self.anchor_real, self.anchor_virt = 0, 1.0, 0, 0

    def now_virtual(self, real_ns: int) -> int:
        if self.seq == 0:
            return real_ns
        return self.anchor_virt + int((real_ns - self.anchor_real) * self.rate)

    def set_rate(self, rate: float) -> None:
        real = time.monotonic_ns()
        virt = self.now_virtual(real)
        self.map[0:8] = struct.pack("<Q", self.seq + 1)          # odd: being written
        self.map[8:] = _CONTROL.pack(0, rate, real, virt)[8:]
        self.seq += 2
        self.map[0:8] = struct.pack("<Q", self.seq)
        self.rate, self.anchor_real, self.anchor_virt = rate, real, virt

    def close(self) -> None:
        self.map.close()


class ClockSkew:
    """The leader's clock runs slow and the followers' fast (each within `skew`), the
    leader is isolated for the hold; healed: the partition lifted, every clock back to
    rate 1 (continuing from where it is). Events: clock-skew (rates, leader), clock-skew-
    healed (samples, samples with two claimed leaders at once and the longest such run,
    when another node first claimed leadership, acknowledgements by the old leader after
    that)."""

    counter = "clock_skews"
    name = "clock-skew"

    def __init__(self):
        self.controls: list[ClockControl] = []
        self.lead = None
        self.task = None
        self.samples: list = []

    def start(self, h) -> bool:
        if h.clock_dir is None:
            return False
        lead = h.leader()
        if lead is None:
            return False
        skew = h.rng.uniform(0.5, 1.0) * h.clock_skew_permille / 1000.0
        rates = {n: (1.0 - skew if n == lead else 1.0 + skew) for n in h.cluster.ids}
        for n, rate in rates.items():
            c = ClockControl(h.clock_dir, h.cluster.pid(n))
            c.set_rate(rate)
            self.controls.append(c)
        self.lead = lead
        # the shim looks for its control file every 50 ms: evidence that each one took it
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not all(_mapped(c) for c in self.controls):
            time.sleep(0.02)
        h.history.event("clock-skew", [lead], rates=rates, leader=lead,
                        mapped=sum(1 for c in self.controls if _mapped(c)))
        h.proxy.isolate(lead)
        h.history.event("partition", [lead], groups=[[lead], sorted(
            n for n in h.cluster.ids if n != lead)], partition_kind="isolate-leader",
            mode="blackhole")
        self.samples = []
        self.task = h.io.submit(self._sample(h))
        return True

    async def _sample(self, h) -> None:
        """Every replica's role every SAMPLE_EVERY_S until cancelled."""
        async def one(n):
            try:
                return await h.channels.request(n, m.AdminRequest(m.AdminOp.STATUS), 0.5)
            except Exception:        # an unreachable member claims nothing
                return None
        while True:
            t = h.history.clock()
            st = await asyncio.gather(*(one(n) for n in h.cluster.ids))
            self.samples.append((t, sorted(s.node_id for s in st if s is not None
                                           and s.role == Role.LEADER)))
            await asyncio.sleep(SAMPLE_EVERY_S)

    def stop(self, h) -> None:
        self.task.cancel()
        h.history.event("heal")          # before the proxy lets held traffic go (nemesis.py)
        h.proxy.heal()
        for c in self.controls:
            c.set_rate(1.0)
            c.close()
        both = [t for t, ls in self.samples if len(ls) > 1]
        longest, run_start = 0.0, None
        for t, ls in self.samples:
            if len(ls) > 1:
                run_start = t if run_start is None else run_start
                longest = max(longest, t - run_start)
            else:
                run_start = None
        first_other = next((t for t, ls in self.samples if any(x != self.lead for x in ls)),
                           None)
        late_acks = 0 if first_other is None else sum(
            1 for o in list(h.history.ops)
            if o.type == "ok" and o.node == self.lead and o.time > first_other)
        h.history.event("clock-skew-healed", [self.lead], samples=len(self.samples),
                        new_leader_after_s=None if first_other is None or not self.samples
                        else round(first_other - self.samples[0][0], 3),
                        two_leaders_samples=len(both), two_leaders_longest_s=round(longest, 3),
                        old_leader_acks_after_new=late_acks)
        self.controls = []
