"""Where and when the client retries after a failure (client.py _after_failure): a broken
connection (the leader's process died) is retried at once on the next member, a redirect
goes to the named leader at once, and while no member knows a leader (an election) the
members are asked again every few tens of ms -- not after a backoff grown to half a second.
An overloaded leader (BACKPRESSURE) still gets the long backoff. The members here are
scripted answers to AsyncClient._request; the backoff's sleeps are recorded."""
import asyncio
import types

import pytest

import quorumlog.client as client_mod
from quorumlog.client import AsyncClient
from quorumlog.net import messages as m
from quorumlog.net.errors import TransportClosedError
from quorumlog.raft.errors import BackpressureError

A, B, C = ("127.0.0.1", 7001), ("127.0.0.1", 7002), ("127.0.0.1", 7003)
OK = m.ProduceResponse(10, 0, 5, 1, (100,))


def _redirect(to=None):
    return m.LeaderRedirectError("not the leader", None, 3, f"{to[0]}:{to[1]}" if to else None)


def _scripted(client: AsyncClient, answers: dict, monkeypatch) -> tuple[list, list]:
    """answers: address -> list of exceptions to raise (in turn) before answering OK.
    -> (the addresses asked, in order; the backoff sleeps)."""
    asked, slept = [], []
    real = asyncio

    async def sleep(delay, *a):
        slept.append(delay)
        await real.sleep(0)
    names = {n: getattr(real, n) for n in dir(real) if not n.startswith("__")}
    names["sleep"] = sleep
    monkeypatch.setattr(client_mod, "asyncio", types.SimpleNamespace(**names))

    async def request(msg, prefer=None, timeout=None, exact=False, **kw):
        addr = prefer or client.addresses[0]
        client._channel_addr = addr
        asked.append(addr)
        todo = answers.get(addr, [])
        if todo:
            raise todo.pop(0)
        return OK
    client._request = request
    return asked, slept


def _client(leader=A) -> AsyncClient:
    c = AsyncClient([A, B, C], insecure=True, retry_timeout=30.0)
    c._leader_addr = leader
    return c


def test_a_broken_connection_goes_to_the_next_member_and_the_new_leader_at_once(monkeypatch):
    # A (the leader) died: its connection broke; B knows the new leader, C. Before: a 20 ms
    # backoff sleep after the broken connection
    c = _client()
    asked, slept = _scripted(c, {A: [TransportClosedError("connection lost")],
                                 B: [_redirect(C)]}, monkeypatch)
    r = asyncio.run(c.produce("t", [b"x"]))
    assert r.positions == (100,)
    assert asked == [A, B, C] and slept == []


def test_while_no_leader_is_known_the_members_are_asked_every_few_tens_of_ms(monkeypatch):
    # an election runs: every member answers NOT_LEADER naming nobody, 12 times. Before: the
    # backoff doubled to 500 ms, so the client found the new leader up to half a second late
    c = _client()
    errors = [_redirect(None) for _ in range(4)]
    asked, slept = _scripted(c, {A: [TransportClosedError("lost")] + errors[:2],
                                 B: list(errors), C: list(errors)}, monkeypatch)
    asyncio.run(c.produce("t", [b"x"]))
    assert len(slept) >= 8
    assert max(slept) <= 0.06               # (_ELECTION_BACKOFF_S 50 ms, +- 20 % jitter)
    assert len(set(asked)) == 3                 # round the members


def test_backpressure_still_backs_off_long(monkeypatch):
    c = _client()
    asked, slept = _scripted(c, {A: [BackpressureError("full") for _ in range(8)]},
                             monkeypatch)
    asyncio.run(c.produce("t", [b"x"]))
    assert set(asked) == {A}                    # the leader answered: stay with it
    assert max(slept) > 0.3


@pytest.mark.parametrize("prefer,others", [(B, [C, A]), (C, [A, B]), (None, [A, B, C])])
def test_members_are_tried_from_the_one_after_the_preferred(prefer, others):
    assert client_mod._after([A, B, C], prefer) == others
