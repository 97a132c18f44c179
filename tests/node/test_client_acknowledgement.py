"""The client checks that a produce acknowledgement names every message of the batch: an
answer with fewer (or more) positions than messages is an IncompleteAcknowledgementError
(sync and async client), never a success."""
import asyncio

import pytest

from quorumlog.client import AsyncClient, Client, IncompleteAcknowledgementError
from quorumlog.net import messages as m


def _answering(client: AsyncClient, positions):
    sent = []

    async def with_retries(msg, *, to_leader, timeout=None):
        sent.append(msg)
        return m.ProduceResponse(10, 0, 5, 1, tuple(positions))
    client._with_retries = with_retries
    return sent


def test_async_client_refuses_a_short_or_long_acknowledgement():
    async def run():
        c = AsyncClient(["127.0.0.1:9"], insecure=True)
        sent = _answering(c, [100, 200])
        r = await c.produce("t", [b"a", b"b"])
        assert r.positions == (100, 200)
        with pytest.raises(IncompleteAcknowledgementError, match="2 positions for 3 messages") \
                as e:
            await c.produce("t", [b"a", b"b", b"c"])
        assert e.value.response.positions == (100, 200)
        with pytest.raises(IncompleteAcknowledgementError, match="2 positions for 1 messages"):
            await c.produce("t", b"one")
        r = await c.produce("t", (b for b in [b"x", b"y"]))     # any iterable of bodies
        assert r.positions == (100, 200)
        assert len(sent) == 4
    asyncio.run(run())


def test_sync_client_refuses_a_short_acknowledgement():
    with Client(["127.0.0.1:9"], insecure=True) as c:
        _answering(c.aclient, [7])
        assert c.produce("t", [b"a"]).positions == (7,)
        with pytest.raises(IncompleteAcknowledgementError):
            c.produce("t", [b"a", b"b"])
        with pytest.raises(IncompleteAcknowledgementError):
            c.produce_many("t", [[b"a", b"b"]])
