"""The node's Flusher (node/flusher.py) under flush = "sync": a request that arrives while a
flush runs starts the next flush at once (in_flight = 2), a report never names an
index the flush that made it did not cover, a request no bigger than a flush in flight
already took starts nothing (that flush reports it), and a failed flush reports an error,
never an index. The log is a stand-in whose flush() blocks until the test lets it go."""
import asyncio
import contextlib
import threading
import time

import pytest

from quorumlog.errors import ConfigError
from quorumlog.node import load_node_config
from quorumlog.node.flusher import FLUSHES_IN_FLIGHT, MAX_FLUSHES_IN_FLIGHT, Flusher

DEADLINE_S = 10.0


class GatedLog:
    """flush() covers the indexes appended before it started, and returns only when the
    test releases it (one Event per flush, in start order)."""

    def __init__(self):
        self.last = 0
        self.lock = threading.Lock()
        self.started: list[int] = []       # last index each flush covers, in start order
        self.gates: list[threading.Event] = []
        self.fail: dict[int, BaseException] = {}

    def flush(self):
        with self.lock:
            k = len(self.started)
            self.started.append(self.last)
            gate = threading.Event()
            self.gates.append(gate)
        assert gate.wait(DEADLINE_S)
        if k in self.fail:
            raise self.fail[k]
        return self.started[k]


async def _until(cond, what):
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


@contextlib.asynccontextmanager
async def _gated(in_flight, fail=None):
    """A Flusher over a GatedLog -> (log, flusher, reports, errors); every gate is released
    and the flusher closed at the end, whatever the test did."""
    cl, reports, errors = GatedLog(), [], []
    cl.fail.update(fail or {})
    fl = Flusher(in_flight=in_flight)
    fl.start(cl, asyncio.get_running_loop(), lambda i, g: reports.append((i, g)),
             errors.append)
    try:
        yield cl, fl, reports, errors
    finally:
        for g in cl.gates:
            g.set()
        await fl.close()


def test_a_request_during_a_flush_starts_the_next_one_at_once():
    async def main():
        async with _gated(2) as (cl, fl, reports, errors):
            cl.last = 5
            fl.request(5, 0)
            await _until(lambda: len(cl.started) == 1, "the first flush")
            cl.last = 9
            fl.request(9, 0)
            # the second flush starts while the first is still inside flush()
            await _until(lambda: len(cl.started) == 2, "the second flush to start")
            assert not cl.gates[0].is_set() and fl.overlapped == 1
            cl.gates[1].set()
            cl.gates[0].set()
            await _until(lambda: len(reports) == 2, "both reports")
            # each report names only what its own flush covered
            for index, _gen in reports:
                assert index in (5, 9)
            assert sorted(reports) == [(5, 0), (9, 0)] and not errors
    asyncio.run(main())


def test_one_flush_in_flight_waits_as_before():
    async def main():
        async with _gated(1) as (cl, fl, reports, errors):
            cl.last = 5
            fl.request(5, 0)
            await _until(lambda: len(cl.started) == 1, "the first flush")
            cl.last = 9
            fl.request(9, 0)
            await asyncio.sleep(0.05)
            assert len(cl.started) == 1
            cl.gates[0].set()
            await _until(lambda: len(cl.started) == 2, "the second flush")
            cl.gates[1].set()
            await _until(lambda: len(reports) == 2, "both reports")
            assert reports == [(5, 0), (9, 0)] and fl.overlapped == 0
    asyncio.run(main())


def test_a_request_covered_by_a_flush_in_flight_starts_nothing():
    async def main():
        async with _gated(2) as (cl, fl, reports, errors):
            cl.last = 7
            fl.request(7, 3)
            await _until(lambda: len(cl.started) == 1, "the first flush")
            fl.request(7, 3)      # the same again (a re-sent batch): the flush in flight has it
            fl.request(6, 3)
            await asyncio.sleep(0.05)
            assert len(cl.started) == 1
            fl.request(7, 4)      # another gen (a truncation came between): a flush of its own
            await _until(lambda: len(cl.started) == 2, "the new gen's flush")
            cl.gates[0].set()
            cl.gates[1].set()
            await _until(lambda: len(reports) == 2, "both reports")
            assert sorted(reports) == [(7, 3), (7, 4)]
    asyncio.run(main())


def test_a_failed_flush_reports_an_error_not_an_index():
    async def main():
        boom = OSError(5, "EIO")
        async with _gated(2, fail={0: boom}) as (cl, fl, reports, errors):
            cl.last = 5
            fl.request(5, 0)
            await _until(lambda: len(cl.started) == 1, "the flush")
            cl.gates[0].set()
            await _until(lambda: errors, "the error report")
            assert errors == [boom] and reports == []
    asyncio.run(main())


def test_in_flight_is_bounded_and_configurable():
    for bad in (0, MAX_FLUSHES_IN_FLIGHT + 1):
        with pytest.raises(ValueError, match="in_flight"):
            Flusher(in_flight=bad)
    assert Flusher().in_flight == FLUSHES_IN_FLIGHT == 1
    cfg, _, _ = load_node_config(None, {"QUORUMLOG_FLUSHES_IN_FLIGHT": "2"}, node_id="n1",
                                 peers={"n1": "127.0.0.1:1"}, insecure=True)
    assert cfg.flushes_in_flight == 2
    with pytest.raises(ConfigError, match="flushes_in_flight"):
        load_node_config(None, {"QUORUMLOG_FLUSHES_IN_FLIGHT": "9"}, node_id="n1",
                         peers={"n1": "127.0.0.1:1"}, insecure=True)
