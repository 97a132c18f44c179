"""Stand-in for quorumlog.format.Record until the reference codec (branch cltests) is merged:
the decoded form of one commit-log record that CommitLog.decode_at/record return."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Record:
    type: int
    flags: int = 0
    index: int = 0
    term: int = 0
    position: int = 0
    queue_offset: int = 0
    born_timestamp_ms: int = 0
    store_timestamp_ms: int = 0
    tag_hash: int = 0
    queue_id: int = 0
    topic: str = ""
    tags: str | None = None
    keys: tuple = ()
    properties: dict = field(default_factory=dict)
    body: bytes = b""
    size: int = 0
