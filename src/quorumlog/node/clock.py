"""The node's clock seam: the time the Raft core ticks on, and the driver's timers.

`MonotonicClock` is the production clock (time.monotonic, asyncio timers). The deterministic
simulator (quorumlog.testing.nodesim) passes a clock read from its virtual-time event loop,
running at a rate of its own per node (clock-rate skew), so the driver never reads the wall
clock itself.
"""
from __future__ import annotations

import asyncio
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "MonotonicClock", "LoopClock"]


@runtime_checkable
class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds on this node's clock (monotonic; any origin)."""

    async def sleep_ms(self, ms: float) -> None:
        """Return after `ms` milliseconds of this clock."""

    def call_later_ms(self, loop: asyncio.AbstractEventLoop, ms: float,
                      fn) -> asyncio.TimerHandle:
        """Call fn() on `loop` after `ms` milliseconds of this clock; the handle cancels it.
        (The node's tick: a plain timer costs no task step, future or getpid per tick.)"""


class MonotonicClock:
    """time.monotonic(); timers are the running loop's."""

    def now_ms(self) -> int:
        return int(time.monotonic() * 1000)

    async def sleep_ms(self, ms: float) -> None:
        await asyncio.sleep(ms / 1000)

    def call_later_ms(self, loop, ms: float, fn) -> asyncio.TimerHandle:
        return loop.call_later(ms / 1000, fn)


class LoopClock:
    """A clock read from an event loop's own time (a simulator's virtual time), running
    `rate` times as fast as that time from `offset_ms` (clock-rate skew between nodes)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, rate: float = 1.0,
                 offset_ms: int = 0):
        if not 0.5 <= rate <= 2.0:
            raise ValueError(f"clock rate {rate} outside 0.5..2.0")
        self.loop, self.rate, self.offset_ms = loop, rate, offset_ms

    def now_ms(self) -> int:
        return self.offset_ms + int(self.loop.time() * 1000 * self.rate)

    async def sleep_ms(self, ms: float) -> None:
        await asyncio.sleep(ms / 1000 / self.rate)

    def call_later_ms(self, loop, ms: float, fn) -> asyncio.TimerHandle:
        return loop.call_later(ms / 1000 / self.rate, fn)
