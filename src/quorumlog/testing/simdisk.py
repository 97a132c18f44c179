"""A simulated disk under real stores: what a crash or a power loss keeps, on virtual time.

The store's files are real files (on /dev/shm when it exists); what the simulation models is
which of their bytes are *durable*. The durable image of a replica is its checkpoint: the
commit log's own background threads are given intervals no run reaches
(`SIM_STORE_SETTINGS`), and every flush the simulation makes -- the sync-mode group commit of
`SimFlusher`, the async-mode background flush of `SimDisk.flush_loop` every
flush_interval_ms of virtual time -- is `CommitLog.flush()` followed by
`CommitLog.checkpoint()`, so the checkpoint's flushed position is exactly what the last flush
made durable. A process crash (`Node.crash_for_testing`) keeps every written byte (the page
cache survives the process); a power loss then cuts the files back to the checkpoint
(`nemesis.lose_unflushed_tail`, model "checkpoint"): the log after the flushed position,
raft-index entries after the flushed index, consume-queue entries at or after the durable
dispatched position.

A flush can be made to fail (`fail_next_flush`): the next flush's msync returns EIO through
the native log's own test hook, so the log's real failure path runs (LogFailedError, the
driver stops the node's Raft participation; the harness restarts it after a power loss,
since the bytes of a failed write-back are not known to be on the disk).
"""
from __future__ import annotations

import asyncio
import errno

from .._commitlog import _fail_msync
from .nemesis import lose_unflushed_tail

__all__ = ["SIM_STORE_SETTINGS", "SimDisk", "SimFlusher"]

_NEVER_MS = 3_600_000        # the log's own threads: not within a simulated run
SIM_STORE_SETTINGS = dict(flush_interval_ms=_NEVER_MS, checkpoint_interval_ms=_NEVER_MS,
                          background=False)


class SimDisk:
    """One replica's disk: flush timing (virtual), flush failures, power loss."""

    def __init__(self, rng, *, flush_ms: tuple = (0, 3), async_interval_ms: int = 50):
        self.rng = rng
        self.flush_ms = flush_ms
        self.async_interval_ms = async_interval_ms
        self.fail_next = False
        self.flushes = 0
        self.failed_flushes = 0

    def flush(self, cl) -> int:
        """Make what `cl` holds durable: msync, then the checkpoint that says so. An
        injected failure raises the log's LogFailedError (real failure path)."""
        if self.fail_next:
            self.fail_next = False
            self.failed_flushes += 1
            _fail_msync(errno.EIO)
        try:
            pos = cl.flush()
            cl.checkpoint()
        finally:
            _fail_msync(0)     # (a hook not consumed must not hit another log)
        self.flushes += 1
        return pos

    def delay_s(self) -> float:
        lo, hi = self.flush_ms
        return (lo + self.rng.random() * (hi - lo)) / 1000

    async def flush_loop(self, node) -> None:
        """flush = "async": the background flush, every async_interval_ms of virtual time,
        of the node's current log (an install replaces it). Ends when the log fails or
        closes (the node crashed or stopped)."""
        while True:
            await asyncio.sleep(self.async_interval_ms / 1000)
            cl = node.store.commitlog if node.store is not None else None
            if cl is None or cl.closed:
                return
            try:
                self.flush(cl)
            except Exception:       # LogFailedError: the log refuses writes from now on
                return

    @staticmethod
    def power_loss(path) -> dict:
        """On a crashed replica's directory: lose what was not durable."""
        return lose_unflushed_tail(path, "checkpoint")


class SimFlusher:
    """FlushService (node/flusher.py) for flush = "sync" on virtual time: one flush at a time,
    each after a random disk delay, covering every request made before it began (group
    commit), reported on the loop."""

    def __init__(self, disk: SimDisk):
        self.disk = disk
        self.cl = self.loop = self.on_flushed = self.on_error = None
        self._want: tuple | None = None
        self._busy = False
        self._closed = False

    def start(self, commitlog, loop, on_flushed, on_error) -> None:
        self.cl, self.loop, self.on_flushed, self.on_error = commitlog, loop, on_flushed, on_error

    def request(self, index: int, gen: int) -> None:
        w = self._want
        if w is None or gen != w[1] or index > w[0]:
            self._want = (index, gen)
        if not self._busy:
            self._busy = True
            self.loop.call_later(self.disk.delay_s(), self._run)

    def _run(self) -> None:
        if self._closed:
            return
        want, self._want = self._want, None
        try:
            self.disk.flush(self.cl)
        except Exception as e:
            self._closed = True
            self.on_error(e)
            return
        self.on_flushed(*want)
        if self._want is not None:
            self.loop.call_later(self.disk.delay_s(), self._run)
        else:
            self._busy = False

    def retarget(self, commitlog) -> None:
        self.cl = commitlog

    async def close(self) -> None:
        self._closed = True
