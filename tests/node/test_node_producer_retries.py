"""Producer retries through the node driver (three Nodes in one process): a retry with another
message count is refused, a sequence below the last written is refused, a new leader answers
a batch from its own log (records of the earlier format included) and refuses what it cannot
answer whole -- never a result for part of a batch."""
from __future__ import annotations

import asyncio

import pytest

from quorumlog.errors import (InvalidArgumentError, OutOfOrderSequenceError,
                              ProducerSequenceError)
from quorumlog.node.producers import BatchMismatchError, UncompletableBatchError
from quorumlog.raft.messages import Role
from test_node_inprocess import _group


async def _new_leader(nodes, old):
    """Move leadership from `old` to another node; returns the new leader once it serves."""
    target = next(n for n in nodes if n is not old)
    old.transfer_leadership(target.id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not (target.role == Role.LEADER and target.ready_to_serve):
        assert loop.time() < deadline, "the transfer did not complete"
        await asyncio.sleep(0.01)
    return target


def test_retries_through_the_driver(tmp_path):
    async def run():
        nodes, leader, _ = await _group(tmp_path)
        try:
            r1 = await leader.put_batch("t", [b"a", b"b"], queue_id=0, producer_id=5,
                                        sequence=1)
            with pytest.raises(BatchMismatchError, match="batch of 2 messages"):
                await leader.put_batch("t", [b"a", b"b", b"c"], queue_id=0, producer_id=5,
                                       sequence=1)
            await leader.put_batch("t", [b"c"], queue_id=0, producer_id=5, sequence=3)
            with pytest.raises(ProducerSequenceError, match="not above the last written"):
                await leader.put_batch("t", [b"x"], queue_id=0, producer_id=5, sequence=2)
            # a batch of the earlier record format: QL_PID/QL_SEQ only (size unknown)
            req = leader.seam.prepare_put("t", [b"o1", b"o2"], queue_id=1,
                                          properties={"QL_PID": "9", "QL_SEQ": "4"})
            old = await leader.pipeline.submit(req)
            end = leader.store.max_offset("t", 0), leader.store.max_offset("t", 1)
            new = await _new_leader(nodes, leader)
            # the new leader's table, rebuilt from its log, answers both from the log
            again = await new.put_batch("t", [b"a", b"b"], queue_id=0, producer_id=5,
                                        sequence=1)
            assert again.positions.tolist() == r1.positions.tolist()
            assert again.queue_offsets.tolist() == r1.queue_offsets.tolist()
            same = await new.put_batch("t", [b"o1", b"o2"], queue_id=1, producer_id=9,
                                       sequence=4)
            assert same.positions.tolist() == old.positions.tolist()
            with pytest.raises(UncompletableBatchError, match="do not say the batch's size"):
                await new.put_batch("t", [b"o1", b"o2", b"o3"], queue_id=1, producer_id=9,
                                    sequence=4)
            assert (new.store.max_offset("t", 0), new.store.max_offset("t", 1)) == end
            assert new.stats["duplicates"] == 3
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(run())


def test_sequence_gaps_through_the_driver(tmp_path):
    # base_sequence: the client's lowest unresolved sequence. A gap while the client still
    # has the missing batch in flight is refused as retriable, and nothing is appended.
    async def run():
        nodes, leader, _ = await _group(tmp_path)
        try:
            await leader.put_batch("t", [b"w"], queue_id=0)
            end = leader.store.max_offset("t", 0)
            with pytest.raises(OutOfOrderSequenceError, match="no batch of the producer"):
                await leader.put_batch("t", [b"b"], queue_id=0, producer_id=6, sequence=5,
                                       base_sequence=4)
            with pytest.raises(InvalidArgumentError, match="base_sequence <= sequence"):
                await leader.put_batch("t", [b"b"], queue_id=0, producer_id=6, sequence=5,
                                       base_sequence=6)
            assert leader.store.max_offset("t", 0) == end     # nothing appended
            a = await leader.put_batch("t", [b"a"], queue_id=0, producer_id=6, sequence=4,
                                       base_sequence=4)
            b = await leader.put_batch("t", [b"b"], queue_id=0, producer_id=6, sequence=5,
                                       base_sequence=4)
            with pytest.raises(OutOfOrderSequenceError, match="up to sequence 5"):
                await leader.put_batch("t", [b"d"], queue_id=0, producer_id=6, sequence=7,
                                       base_sequence=6)
            # 6 given up by the client: 7 goes on
            c = await leader.put_batch("t", [b"d"], queue_id=0, producer_id=6, sequence=7,
                                       base_sequence=7)
            assert a.positions[0] < b.positions[0] < c.positions[0]
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(run())
