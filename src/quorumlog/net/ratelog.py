"""Rate-limited log lines for connection events a flood can repeat thousands of times.

A listener under attack refuses, evicts or times out connections by the thousand; one
WARNING line each (~4,600 lines in a 3-minute attack) buries everything else in the log.
`RateLimitedLog` lets the first `burst` lines of each reason in an interval out one by one
and counts the rest by reason; at the end of the interval (a timer on the event loop, so the summary comes
even when the attack stops) one line sums them up. While the flood lasts (the interval
before had a summary) no line goes out one by one: one summary per interval, until an
interval passes without anything counted:

    refused/closed connections: 4590 more in the last 10 s not logged one by one:
    handshake slots full (oldest evicted): 4100, hello timeout: 490

Peer (replica) connection events are rare and always logged: only events anyone can cause
from the network go through here.
"""
from __future__ import annotations

import collections
import logging
import time

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, what: str, interval_s: float, burst: int,
                 clock=time.monotonic):
        self.logger = logger
        self.what = what
        self.interval_s = interval_s
        self.burst = burst
        self.clock = clock
        self.loop = None              # set: the summary is written by a timer on it
        self._start = clock()
        self._lines: collections.Counter = collections.Counter()   # per reason
        self._suppressed: collections.Counter = collections.Counter()
        self._level = logging.DEBUG
        self._timer = None
        self._flooded = False         # the last interval needed a summary: no burst now
        self.summaries = 0            # summary lines written (stats, tests)

    def log(self, level: int, reason: str, msg: str, *args) -> None:
        """One event of kind `reason`: logged as `msg % args` while this interval's burst
        lasts, else counted for the interval's summary."""
        if not self.logger.isEnabledFor(level):
            return
        now = self.clock()
        if now - self._start >= self.interval_s:
            self.flush(now)
        if self._lines[reason] < (0 if self._flooded else self.burst):
            self._lines[reason] += 1
            self.logger.log(level, msg, *args, stacklevel=3)
            return
        self._suppressed[reason] += 1
        self._level = max(self._level, level)
        if self._timer is None and self.loop is not None and not self.loop.is_closed():
            delay = max(0.0, self._start + self.interval_s - now)
            self._timer = self.loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self, now: float | None = None) -> None:
        """Write the summary of what was counted (if anything) and start a new interval."""
        now = self.clock() if now is None else now
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._suppressed:
            total = sum(self._suppressed.values())
            counts = ", ".join(f"{r}: {n}" for r, n in self._suppressed.most_common())
            self.logger.log(self._level, "%s: %d more in the last %.0f s not logged one by "
                            "one: %s", self.what, total, now - self._start, counts)
            self.summaries += 1
        self._flooded = bool(self._suppressed)
        self._suppressed.clear()
        self._level = logging.DEBUG
        self._lines.clear()
        self._start = now

    def close(self) -> None:
        self.flush()
        self.loop = None
