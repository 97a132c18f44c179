"""StoreServices: the typing.Protocol of what the schedule service and retention use of the store.

They see the store only through this protocol (message_store.Services implements it over the
store's parts), so neither imports the store and neither touches its internals. Every method
is called with the store's lock held.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .._consumequeue import Message
    from ..config import StoreConfig
    from .writes import PutRequest


class StoreServices(Protocol):
    config: StoreConfig
    path: str                  # the store directory
    commitlog: Any             # the store's quorumlog.commitlog.CommitLog
    replicated: bool           # a Raft driver commits (only the leader may append)

    @property
    def dispatched_position(self) -> int:
        """Log position up to which records are in the consume queues."""

    def queue_count(self, topic: str) -> int:
        """Number of queues of `topic`; 0 when it does not exist."""

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset still readable, next offset) of a dispatched queue."""

    def queue_position(self, topic: str, queue_id: int, offset: int) -> int | None:
        """Log position of the entry at `offset`, None for a hole."""

    def read_queue(self, topic: str, queue_id: int, offset: int,
                   max_messages: int) -> list[Message]:
        """MessageStore.get."""

    def prepare_delivery(self, topic: str, bodies: list, queue_ids: list[int], tags: list,
                         keys: list, properties: list, born_timestamps_ms: list,
                         flags: int) -> PutRequest:
        """A validated request that re-puts delayed messages into (topic, queue_ids[i]),
        creating the topic or its queues at append when missing."""

    def checkpoint_dispatch(self) -> None:
        """Make the consume queues durable up to the dispatched position (and tell the log)."""

    def segments_deleted(self, count: int) -> None:
        """Retention deleted `count` commit-log segments: consume-queue files, min offsets and
        read mappings follow the log's new min position."""
