"""node/pipeline.py's Tracker: the one record of a leader's proposals in flight -- completed
in log order when applied (with the request's result, or NotLeaderError when the entry is of
another term by then), failed from the tail by a truncation, failed whole when the leadership
is lost, and the messages/bytes it holds (what backpressure counts) kept exact."""
import asyncio

import pytest

from quorumlog.node.pipeline import SyncFuture, Tracker
from quorumlog.raft.errors import NotLeaderError


class _Req:
    def __init__(self, first, last, nbytes=10):
        self.first_index, self.last_index = first, last
        self.count, self.nbytes = last - first + 1, nbytes

    @property
    def result(self):
        return ("result", self.first_index, self.last_index)


def _tracked(loop, t, spans, term=2):
    futs = []
    for first, last in spans:
        f = loop.create_future()
        t.add(_Req(first, last), term, f)
        futs.append(f)
    return futs


def test_applied_proposals_complete_in_log_order_and_only_up_to_the_index():
    loop = asyncio.new_event_loop()
    try:
        t = Tracker()
        a, b, c = _tracked(loop, t, [(1, 1), (2, 4), (5, 5)])
        assert (len(t), t.messages, t.bytes) == (3, 5, 30)
        t.on_applied(4, lambda i: 2)
        assert a.result() == ("result", 1, 1) and b.result() == ("result", 2, 4)
        assert not c.done() and (len(t), t.messages, t.bytes) == (1, 1, 10)
    finally:
        loop.close()


def test_an_entry_of_another_term_fails_instead_of_answering():
    loop = asyncio.new_event_loop()
    try:
        t = Tracker()
        a, b = _tracked(loop, t, [(1, 2), (3, 3)])
        t.on_applied(3, lambda i: 2 if i < 3 else 3)     # entry 3 is a newer leader's
        assert a.result() == ("result", 1, 2)
        with pytest.raises(NotLeaderError, match="entry 3 was replaced"):
            b.result()
        assert (len(t), t.messages, t.bytes) == (0, 0, 0)
    finally:
        loop.close()


def test_truncation_fails_the_tail_and_loss_fails_the_rest():
    loop = asyncio.new_event_loop()
    try:
        t = Tracker()
        a, b, c = _tracked(loop, t, [(1, 1), (2, 3), (4, 6)])
        t.fail_after(2, NotLeaderError("truncated"))     # drops entries 3.. : b and c
        assert not a.done()
        for f in (b, c):
            with pytest.raises(NotLeaderError, match="truncated"):
                f.result()
        assert (len(t), t.messages) == (1, 1)
        t.fail_all(NotLeaderError("lost"))
        with pytest.raises(NotLeaderError, match="lost"):
            a.result()
        assert (len(t), t.messages, t.bytes) == (0, 0, 0)
    finally:
        loop.close()


def test_a_sync_future_acts_inside_the_call_that_completes_it():
    """SyncFuture (the client service's answers, a coalesced proposal's split): its function
    runs in the tracker's on_applied / on_lost call itself -- not from a done-callback a loop
    turn later -- once, with the future done, for a result, an error and a cancellation."""
    loop = asyncio.new_event_loop()
    try:
        seen = []
        t = Tracker()
        futs = [SyncFuture(lambda f, k: seen.append((k, f.done())), k, loop=loop)
                for k in range(3)]
        for k, f in enumerate(futs[:2]):
            t.add(_Req(k + 1, k + 1), 2, f)
        t.on_applied(1, lambda i: 2)
        assert seen == [(0, True)] and futs[0].result() == ("result", 1, 1)
        t.fail_all(NotLeaderError("lost"))
        assert seen == [(0, True), (1, True)]
        assert isinstance(futs[1].exception(), NotLeaderError)
        assert futs[2].cancel() and seen[-1] == (2, True) and not futs[2].cancel()
        assert len(seen) == 3
    finally:
        loop.close()


def test_what_a_sync_futures_function_raises_stays_out_of_the_completing_call(caplog):
    """(The completing call is the node's apply: an error there would stop the node.)"""
    loop = asyncio.new_event_loop()
    try:
        t = Tracker()
        f = SyncFuture(lambda _f: 1 / 0, loop=loop)
        t.add(_Req(1, 1), 2, f)
        t.on_applied(1, lambda i: 2)
        assert f.result() == ("result", 1, 1) and len(t) == 0
        assert "completing a proposal's future failed" in caplog.text
    finally:
        loop.close()
