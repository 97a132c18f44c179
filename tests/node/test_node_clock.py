"""The node's clock seam (node/clock.py): the production clock, and the clock a simulator
gives each node -- read from the loop's virtual time at a rate of its own."""
import asyncio

import pytest

from quorumlog.node.clock import Clock, LoopClock, MonotonicClock
from quorumlog.testing.simloop import VirtualTimeLoop


def test_both_clocks_are_the_seams_clock():
    loop = VirtualTimeLoop()
    try:
        assert isinstance(MonotonicClock(), Clock)
        assert isinstance(LoopClock(loop), Clock)
    finally:
        loop.close()


def test_a_loop_clock_runs_at_its_rate_from_its_offset():
    loop = VirtualTimeLoop()
    fast, slow = LoopClock(loop, 1.02, offset_ms=500), LoopClock(loop, 0.98)

    async def body():
        t0 = loop.time()
        await fast.sleep_ms(1020)           # 1020 ms of the fast clock = 1 s of loop time
        assert loop.time() - t0 == pytest.approx(1.0)
        assert fast.now_ms() == 500 + 1020
        assert slow.now_ms() == 980
    try:
        loop.run_until_complete(body())
    finally:
        loop.close()


def test_a_loop_clock_refuses_an_absurd_rate():
    loop = VirtualTimeLoop()
    try:
        with pytest.raises(ValueError, match="clock rate 3"):
            LoopClock(loop, 3)
    finally:
        loop.close()


def test_the_monotonic_clock_sleeps_and_never_goes_back():
    c = MonotonicClock()

    async def body():
        a = c.now_ms()
        await c.sleep_ms(20)
        assert c.now_ms() >= a + 19
    asyncio.run(body())


def test_a_loop_clocks_timer_fires_after_ms_of_its_own_clock():
    """call_later_ms: the node's tick timer, in the clock's milliseconds (a fast clock's
    100 ms are less loop time), cancellable."""
    loop = VirtualTimeLoop()
    fast = LoopClock(loop, 1.25)
    fired, cancelled = [], []

    async def body():
        t0 = loop.time()
        fast.call_later_ms(loop, 100, lambda: fired.append(loop.time() - t0))
        fast.call_later_ms(loop, 50, lambda: cancelled.append(1)).cancel()
        await asyncio.sleep(1)
    try:
        loop.run_until_complete(body())
    finally:
        loop.close()
    assert fired == [pytest.approx(0.08)] and cancelled == []


def test_the_monotonic_clocks_timer_fires_on_the_given_loop():
    c = MonotonicClock()

    async def body():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        a = c.now_ms()
        c.call_later_ms(loop, 20, lambda: done.set_result(c.now_ms()))
        assert await asyncio.wait_for(done, 5) >= a + 19
    asyncio.run(body())
