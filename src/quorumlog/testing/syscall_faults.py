"""Storage errors injected into one running replica: its msync / fsync / fdatasync /
fallocate calls fail with EIO (a failing device) or ENOSPC (a thin device out of space
during write-back), through `strace --inject` attached to the process (no device mapper
needed; root or ptrace rights). The DiskError nemesis holds such a fault, then lifts it and
restarts the replica if it did not recover by itself: a failed flush cannot be retried into
success, so a replica whose log failed refuses writes until it is reopened.

    inj = SyscallFaults(pid, "eio"); inj.start(); ...; inj.stop()
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time

from ..errors import QuorumlogError

log = logging.getLogger(__name__)

__all__ = ["SyscallFaults", "MODES", "syscall_faults_available", "DiskError",
           "strace_attached", "stop_process"]

# the calls that make a replica's writes durable (the log's msync, raft-state and
# checkpoint fsyncs, preallocation), and the error each mode gives them
MODES = {
    "eio": ("msync,fsync,fdatasync", "EIO"),
    "enospc": ("msync,fsync,fdatasync,fallocate", "ENOSPC"),
}
ATTACH_TIMEOUT_S = 10.0


def strace_attached(pid: int) -> bool:
    """A tracer is attached to pid (or the process is gone: nothing more to trace)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return any(ln.startswith("TracerPid:") and ln.split()[1] != "0" for ln in fh)
    except OSError:
        return True


def stop_process(p: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s; reaped."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def syscall_faults_available() -> str | None:
    """None when strace can inject faults here, else why not."""
    if shutil.which("strace") is None:
        return "no strace on PATH"
    return None


class SyscallFaults:
    """strace attached to `pid` (every thread), failing the mode's calls from now on."""

    def __init__(self, pid: int, mode: str, log_path: str = os.devnull):
        if mode not in MODES:
            raise QuorumlogError(f"unknown syscall fault mode {mode!r}: one of {sorted(MODES)}")
        self.pid = pid
        self.mode = mode
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        calls, err = MODES[self.mode]
        self.proc = subprocess.Popen(
            ["strace", "-f", "-qq", "-e", f"trace={calls}", "-e",
             f"inject={calls}:error={err}", "-o", self.log_path, "-p", str(self.pid)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        while not strace_attached(self.pid):
            if self.proc.poll() is not None:
                raise QuorumlogError(f"strace could not attach to pid {self.pid} "
                                     f"(exit {self.proc.returncode})")
            if time.monotonic() > deadline:
                self.stop()
                raise QuorumlogError(f"strace did not attach to pid {self.pid} in "
                                     f"{ATTACH_TIMEOUT_S} s")
            time.sleep(0.01)

    def stop(self) -> None:
        """Detach (the calls succeed again)."""
        p, self.proc = self.proc, None
        if p is not None:
            stop_process(p)


class DiskError:
    """One replica's storage calls fail (EIO or ENOSPC, chosen by the seeded rng) while the
    others serve; healed by detaching, then by a restart when the replica did not catch up
    by itself within recover_timeout_s (its log refuses writes after a failed flush).
    Events: disk-error (victim, mode, leader, acknowledgements so far), disk-error-healed
    (acknowledgements during the fault), restart-after-disk-error."""

    counter = "disk_errors"
    name = "disk-error"

    def __init__(self, target: str = "any"):
        self.target = target
        self.node = None
        self.inj: SyscallFaults | None = None
        self.acked_before = 0

    @staticmethod
    def _acked(h) -> int:
        return sum(1 for o in list(h.history.ops) if o.type == "ok")

    def start(self, h) -> bool:
        if syscall_faults_available() is not None:
            return False
        lead = h.leader()
        if lead is None:
            return False
        n = h.rng.choice(list(h.cluster.ids)) if self.target == "any" else lead
        mode = h.rng.choice(sorted(MODES))
        out = os.path.join(h.cluster.dir, f"{n}.inject.{h.cluster.pid(n)}")
        self.inj = SyscallFaults(h.cluster.pid(n), mode, out)
        try:
            self.inj.start()
        except QuorumlogError as e:
            log.warning("disk-error skipped: %s", e)
            return False
        self.node = n
        self.acked_before = self._acked(h)
        h.history.event("disk-error", [n], mode=mode, leader=lead, was_leader=(n == lead))
        return True

    def stop(self, h) -> None:
        n = self.node
        self.inj.stop()
        h.history.event("disk-error-healed", [n], alive=h.cluster.alive(n),
                        acked_during=self._acked(h) - self.acked_before)
        if not h.cluster.alive(n) or not h.caught_up(n, timeout=h.recover_timeout_s):
            log.warning("%s did not recover from the storage errors by itself: restarting it",
                        n)
            h.history.event("restart-after-disk-error", [n], alive=h.cluster.alive(n))
            if h.cluster.alive(n):
                h.cluster.kill(n)
            h.restart(n)
