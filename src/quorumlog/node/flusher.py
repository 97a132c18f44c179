"""Group commit for flush = "sync": one thread makes the log durable off the event loop.

The driver asks for `request(index, gen)` whenever a Ready says flush_to; the thread runs one
CommitLog.flush() (msync with the GIL released) for everything appended so far -- every
request that arrived while the previous flush ran is covered by the next one -- and reports
`on_flushed(index, gen)` on the event loop through call_soon_threadsafe. The index reported is
the log's last index captured on the loop when the request was made (so it never names an
entry appended after the flush began), and gen is the Ready's flush_gen (the core ignores a
report that raced a truncation). An install that replaces the log closes the old one; the
driver then `retarget`s the flusher, and a flush that met the closed log is dropped (the core
ignores reports from before the install: their gen is older).

The driver takes its flusher passed in (`FlushService`): this thread in production, the
simulated disk's flusher (quorumlog.testing.simdisk) under deterministic simulation. It calls
`start(commitlog, loop, on_flushed, on_error)` once the store is open, `request` for every
flush_to, `retarget` after an install and `await close()` at the end.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Protocol

from ..errors import LogClosedError

log = logging.getLogger(__name__)

__all__ = ["FlushService", "Flusher"]


class FlushService(Protocol):
    """What the driver needs of a flusher (see the module docstring)."""

    def start(self, commitlog, loop, on_flushed, on_error) -> None: ...

    def request(self, index: int, gen: int) -> None: ...

    def retarget(self, commitlog) -> None: ...

    async def close(self) -> None: ...


class Flusher:
    def __init__(self, name="quorumlog-flusher"):
        self.name = name
        self.cl = self.loop = self.on_flushed = self.on_error = None
        self._cv = threading.Condition()
        self._want: tuple | None = None     # (index, gen) of the newest request
        self._stop = False
        self.flushes = 0
        self._thread: threading.Thread | None = None

    def start(self, commitlog, loop, on_flushed, on_error) -> None:
        self.cl = commitlog
        self.loop = loop
        self.on_flushed = on_flushed
        self.on_error = on_error
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def request(self, index: int, gen: int) -> None:
        with self._cv:
            w = self._want
            if w is None or gen != w[1] or index > w[0]:
                self._want = (index, gen)
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._want is None and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                index, gen = self._want
                self._want = None
            cl = self.cl
            try:
                cl.flush()
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
            self._cv.notify()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=30)
