"""Group commit for flush = "sync": threads make the log durable off the event loop.

The driver asks for `request(index, gen)` whenever a Ready says flush_to; a thread runs one
CommitLog.flush() (msync with the GIL released) for everything appended so far and reports
`on_flushed(index, gen)` on the event loop through call_soon_threadsafe. Flushes may
overlap: with `in_flight` = 2 (NodeConfig.flushes_in_flight) two threads take requests, so a
request that arrives while a flush runs starts the next flush at once instead of waiting for
the running one to end (a message then waits about one flush, not one and a half); with 1
(the default) a request waits for the running flush and the next one covers it. The native log publishes overlapping flushes in start
order and never past a failed one (commitlog_flush.pxi); a report that arrives after a
higher one is ignored by the core. A request for no more than a flush in flight already
took (same gen) starts nothing: that flush's report covers it. The index reported is
the log's last index captured on the loop when the request was made (so it never names an
entry appended after the flush began), and gen is the Ready's flush_gen (the core ignores a
report that raced a truncation). An install that replaces the log closes the old one; the
driver then `retarget`s the flusher, and a flush that met the closed log is dropped (the core
ignores reports from before the install: their gen is older).

The driver takes its flusher passed in (`FlushService`): this thread in production, the
simulated disk's flusher (quorumlog.testing.simdisk) under deterministic simulation. It calls
`start(commitlog, loop, on_flushed, on_error)` once the store is open, `request` for every
flush_to, `retarget` after an install and `await close()` at the end.

`SharedFlusher`: one thread for the groups of a process (node/host.py): a round flushes
every group's log with a waiting request and reports to each group.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Protocol

from ..errors import LogClosedError

log = logging.getLogger(__name__)

__all__ = ["FLUSHES_IN_FLIGHT", "FlushService", "Flusher", "MAX_FLUSHES_IN_FLIGHT", "SharedFlusher"]


class FlushService(Protocol):
    """What the driver needs of a flusher (see the module docstring)."""

    def start(self, commitlog, loop, on_flushed, on_error) -> None: ...

    def request(self, index: int, gen: int) -> None: ...

    def retarget(self, commitlog) -> None: ...

    async def close(self) -> None: ...


# Flushes of one log in flight at once (NodeConfig.flushes_in_flight). 2: a request that
# arrives during a flush starts its own at once -- shorter waits for the flush alone
# (bench/sync_flush_overlap.py), no gain measured in a loaded 3-replica group, where every
# extra flush is CPU (a report, a drain) on 2 busy cores: 1 by default (docs/benchmarks.md).
FLUSHES_IN_FLIGHT = 1
MAX_FLUSHES_IN_FLIGHT = 4


class Flusher:
    def __init__(self, name="quorumlog-flusher", in_flight: int = FLUSHES_IN_FLIGHT):
        if not 1 <= in_flight <= MAX_FLUSHES_IN_FLIGHT:
            raise ValueError(f"in_flight must be 1..{MAX_FLUSHES_IN_FLIGHT}, got {in_flight}")
        self.name = name
        self.in_flight = in_flight
        self.cl = self.loop = self.on_flushed = self.on_error = None
        self._cv = threading.Condition()
        self._want: tuple | None = None     # (index, gen) of the newest request
        self._taken: tuple | None = None    # (index, gen) of the newest flush started
        self._running = 0                   # flushes in flight
        self._stop = False
        self.flushes = 0
        self.overlapped = 0                 # flushes started while another one ran
        self._threads: list[threading.Thread] = []

    def start(self, commitlog, loop, on_flushed, on_error) -> None:
        self.cl = commitlog
        self.loop = loop
        self.on_flushed = on_flushed
        self.on_error = on_error
        self._threads = [threading.Thread(target=self._run, name=f"{self.name}-{k}", daemon=True)
                         for k in range(self.in_flight)]
        for t in self._threads:
            t.start()

    def request(self, index: int, gen: int) -> None:
        with self._cv:
            t = self._taken
            if self._running and t is not None and gen == t[1] and index <= t[0]:
                return      # a flush in flight took this much already: its report covers it
            w = self._want
            if w is None or gen != w[1] or index > w[0]:
                self._want = (index, gen)
            self._cv.notify()

    def _take(self) -> tuple | None:
        """The newest request, once there is one (None: stop)."""
        with self._cv:
            while self._want is None and not self._stop:
                self._cv.wait()
            if self._stop:
                return None
            want, self._want = self._want, None
            self._taken = want
            if self._running:
                self.overlapped += 1
            self._running += 1
            return want

    def _run(self) -> None:
        while True:
            want = self._take()
            if want is None:
                return
            index, gen = want
            cl = self.cl
            try:
                try:
                    cl.flush()
                finally:
                    with self._cv:
                        self._running -= 1
            except LogClosedError as e:
                if self._replaced(cl):
                    continue      # an install replaced the log: this request was for the old one
                log.critical("flush of %s failed: %s", getattr(cl, "path", "?"), e)
                self._post(self.on_error, e)
                return
            except Exception as e:  # EIO: never retried into success (the driver stops)
                log.critical("flush of %s failed: %s", getattr(self.cl, "path", "?"), e)
                self._post(self.on_error, e)
                return
            with self._cv:
                self.flushes += 1
            self._post(self.on_flushed, index, gen)

    def retarget(self, commitlog) -> None:
        """Flush `commitlog` from now on (an install replaced the log)."""
        with self._cv:
            self.cl = commitlog
            self._cv.notify_all()

    def _replaced(self, cl, timeout: float = 1.0) -> bool:
        """The log `cl` was closed: is it (within `timeout` s) replaced by another? The driver
        retargets in the same step of the core that closed it."""
        with self._cv:
            return self._cv.wait_for(lambda: self.cl is not cl or self._stop, timeout) \
                and not self._stop

    def _post(self, fn, *args) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:   # the loop is closed: the node is stopping
            pass

    async def close(self) -> None:
        """stop() off the loop (it joins the thread)."""
        await asyncio.get_running_loop().run_in_executor(None, self.stop)

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=30)


class SharedFlusher:
    """Group commit across the Raft groups of one process (node/host.py, flush = "sync"):
    one thread; each round flushes every group's log with a waiting request, one after the
    other (each msync releases the GIL), and reports to each group on the loop. Give each
    group's Node its own `handle()` (a FlushService). A group whose flush fails gets its
    on_error and leaves the round; the others go on."""

    def __init__(self, name="quorumlog-group-flusher"):
        self.name = name
        self.cv = threading.Condition()      # guards the handles and their requests
        self._handles: list = []
        self._stop = False
        self._thread: threading.Thread | None = None
        self.rounds = 0          # rounds that flushed at least one log
        self.flushes = 0         # logs flushed, over all rounds

    def handle(self) -> "_GroupFlush":
        return _GroupFlush(self)

    def add(self, h) -> None:
        with self.cv:
            self._handles.append(h)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def _take(self) -> list:
        """Wait for requests -> [(handle, log, index, gen)] of this round (empty: stop)."""
        with self.cv:
            while not self._stop and not any(h.want for h in self._handles):
                self.cv.wait()
            if self._stop:
                return []
            out = []
            for h in self._handles:
                if h.want is not None:
                    out.append((h, h.cl, *h.want))
                    h.want = None
            return out

    def _run(self) -> None:
        while True:
            work = self._take()
            if not work:
                return
            for h, cl, index, gen in work:
                try:
                    cl.flush()
                except Exception as e:  # EIO (or a closed log): never retried into success
                    if isinstance(e, LogClosedError) and h.cl is not cl:
                        continue        # an install replaced this group's log meanwhile
                    log.critical("flush of %s failed: %s", getattr(cl, "path", "?"), e)
                    self._drop(h)
                    h.post(h.on_error, e)
                    continue
                self.flushes += 1
                h.post(h.on_flushed, index, gen)
            self.rounds += 1

    def _drop(self, h) -> None:
        with self.cv:
            if h in self._handles:
                self._handles.remove(h)

    def remove(self, h) -> None:
        """A group closed its handle; the last one stops the thread."""
        with self.cv:
            if h in self._handles:
                self._handles.remove(h)
            last = not self._handles
            if last:
                self._stop = True
                self.cv.notify()
        t = self._thread
        if last and t is not None and t is not threading.current_thread():
            t.join(timeout=30)


class _GroupFlush:
    """One group's FlushService on a SharedFlusher."""

    def __init__(self, shared: SharedFlusher):
        self.shared = shared
        self.cl = self.loop = self.on_flushed = self.on_error = None
        self.want: tuple | None = None      # (index, gen) of the newest request

    def start(self, commitlog, loop, on_flushed, on_error) -> None:
        self.cl, self.loop = commitlog, loop
        self.on_flushed, self.on_error = on_flushed, on_error
        self.shared.add(self)

    def request(self, index: int, gen: int) -> None:
        with self.shared.cv:
            w = self.want
            if w is None or gen != w[1] or index > w[0]:
                self.want = (index, gen)
            self.shared.cv.notify()

    def retarget(self, commitlog) -> None:
        with self.shared.cv:
            self.cl = commitlog

    def post(self, fn, *args) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:   # the loop is closed: the node is stopping
            pass

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.shared.remove, self)
