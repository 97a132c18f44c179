"""The client's producer window (client.py _ProducerWindow): at most max_in_flight sequences
unresolved, numbered first come first served, the lowest unresolved one sent as base_sequence,
and after an error the batches go out again oldest first; asking for a window over what a
leader remembers is refused. No network: the window alone, on an event loop."""
from __future__ import annotations

import asyncio

import pytest

from quorumlog.client import AsyncClient, _ProducerWindow
from quorumlog.errors import InvalidArgumentError
from quorumlog.net.messages import MAX_PRODUCER_IN_FLIGHT


def test_a_window_over_what_a_leader_remembers_is_refused():
    for bad in (0, MAX_PRODUCER_IN_FLIGHT + 1, "4", 2.0):
        with pytest.raises(InvalidArgumentError, match="max_in_flight"):
            AsyncClient(["127.0.0.1:1"], insecure=True, max_in_flight=bad)
    c = AsyncClient(["127.0.0.1:1"], insecure=True, max_in_flight=4)
    assert c.max_in_flight == 4

    async def run():
        with pytest.raises(InvalidArgumentError, match="window=5 > this client's"):
            await c.produce_many("t", [[b"x"]], window=5)
        with pytest.raises(InvalidArgumentError, match="1..8"):
            await c.produce_many("t", [[b"x"]], window=9)
    asyncio.run(run())


def test_sequences_stay_within_the_window_of_the_lowest_unresolved():
    async def run():
        w = _ProducerWindow(3)
        got = [await w.acquire() for _ in range(3)]
        assert got == [1, 2, 3] and w.base() == 1
        later = [asyncio.ensure_future(w.acquire()) for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(f.done() for f in later)       # 4 would be 3 above 1
        w.release(2)                                  # 1 still unresolved: no room yet
        await asyncio.sleep(0)
        assert not any(f.done() for f in later) and w.base() == 1
        w.release(1)                                  # lowest now 3: 4 and 5 fit
        await asyncio.sleep(0)
        assert [f.result() for f in later[:2]] == [4, 5] and not later[2].done()
        assert w.base() == 3
        w.release(3)
        await asyncio.sleep(0)
        assert later[2].result() == 6                 # first come, first numbered
    asyncio.run(run())


def test_after_an_error_batches_are_sent_again_oldest_first():
    async def run():
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        w = _ProducerWindow(8)
        for _ in range(4):
            await w.acquire()
        sent = []

        async def resend(seq):
            await w.turn(seq, deadline)
            sent.append(seq)
        for s in (4, 3, 2):                  # the younger ones failed first
            w.failed(s)
        w.failed(1)
        tasks = [asyncio.ensure_future(resend(s)) for s in (4, 2, 3)]
        await asyncio.sleep(0)
        assert sent == []                    # 1 is older and not sent again yet
        await resend(1)
        await asyncio.gather(*tasks)
        assert sent == [1, 2, 3, 4]
        # a new batch is not sent ahead of an older one that waits to be sent again
        w.failed(2)
        t5 = asyncio.ensure_future(resend(await w.acquire()))
        await asyncio.sleep(0)
        assert sent[-1] == 4 and not t5.done()
        await resend(2)
        await t5
        assert sent[-2:] == [2, 5]
        with pytest.raises(TimeoutError):    # bounded by the batch's deadline
            w.failed(1)
            await w.turn(3, loop.time() + 0.01)
    asyncio.run(run())
