"""msync tracing: strace every replica's msync calls, and the highest commit-log position
a killed process had made durable (checks the power-loss model at each power cut)."""
from __future__ import annotations

import os
import re
import subprocess

from ...errors import QuorumlogError
from ..syscall_faults import stop_process, strace_attached
from .cluster import wait_for

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


class MsyncTracer:
    """One strace per replica process (msync calls only), when `enabled`."""

    def __init__(self, cluster, enabled: bool):
        self.cluster = cluster
        self.enabled = enabled
        self._tracers: dict = {}

    def attach(self, nid: str) -> None:
        """Attach strace (msync calls only) to nid's current process."""
        if not self.enabled:
            return
        pid = self.cluster.pid(nid)
        out = os.path.join(self.cluster.dir, f"{nid}.msync.{pid}")
        p = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=msync", "-o", out,
                              "-p", str(pid)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._tracers[nid] = (p, out, pid)
        if not wait_for(lambda: strace_attached(pid), 10, 0.01):
            raise QuorumlogError(f"strace did not attach to {nid} (pid {pid}) in 10 s")

    def maps(self, nid: str) -> str | None:
        """nid's memory map (to place its msync addresses in files), before it is killed."""
        if not self.enabled or nid not in self._tracers:
            return None
        with open(f"/proc/{self._tracers[nid][2]}/maps") as fh:
            return fh.read()

    def end(self, nid: str, maps: str | None) -> int | None:
        """Stop tracing nid's (killed) process -> the highest log position it msync'd."""
        t = self._tracers.pop(nid, None)
        if t is None or maps is None:
            return None
        p, out, _pid = t
        stop_process(p)
        return msync_end_from_trace(out, maps)

    def stop(self) -> None:
        for p, _out, _pid in self._tracers.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        self._tracers.clear()

