"""META records: store metadata (topics and their queue counts) replicated through the log.

A leader appends a META record (CommitLog.append_control(META, payload)) before the first
message of a topic it creates, and every replica applies it when the record commits, before
the records after it are dispatched: followers hold the same topics and queue counts as the
leader, registered from the log rather than guessed from the first message they see.

Payload: UTF-8 JSON `{"op": "topic", "name": <str>, "queues": <int>}` (a small, versionless,
self-describing body; unknown ops are logged and skipped so an older replica can follow a
newer leader).
"""
from __future__ import annotations

import json

from ..errors import InvalidArgumentError

__all__ = ["encode_topic", "decode", "MAX_META_BYTES"]

MAX_META_BYTES = 4096


def encode_topic(name: str, queues: int) -> bytes:
    return json.dumps({"op": "topic", "name": name, "queues": int(queues)},
                      separators=(",", ":"), sort_keys=True).encode()


def decode(payload) -> dict:
    """The META payload as a dict with at least "op"; InvalidArgumentError if malformed."""
    b = bytes(payload)
    if len(b) > MAX_META_BYTES:
        raise InvalidArgumentError(f"META payload of {len(b)} bytes > {MAX_META_BYTES}")
    try:
        d = json.loads(b.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidArgumentError(f"META payload is not UTF-8 JSON: {e}") from None
    if not isinstance(d, dict) or not isinstance(d.get("op"), str):
        raise InvalidArgumentError("META payload has no 'op'")
    if d["op"] == "topic" and not (isinstance(d.get("name"), str)
                                   and type(d.get("queues")) is int):
        raise InvalidArgumentError("META topic record needs a str name and an int queues")
    return d
