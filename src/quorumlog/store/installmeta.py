"""What a store ships with an install image and restores from it (docs/raft.md "Installing a
follower"): the topic list and the consumer-group offsets, the store state that is not in the
retained log (the META records that created topics and committed offsets before the leader's
first retained record are gone). Everything else is derived from the log and rebuilt by the
store's open: consume queues, queue summary, key index, delay progress."""
from __future__ import annotations

import json
import os

from ..errors import InstallError
from .files import atomic_write, write_checked_json
from .offsets import OFFSETS_FILE
from .topics import TOPICS_FILE

# Store entries derived from the replaced log: removed when an installed log replaces it.
INSTALL_DERIVED = ("consumequeue", "queue_offsets.json", "queue_offsets.json.tmp", "keyindex",
                   TOPICS_FILE, TOPICS_FILE + ".tmp", OFFSETS_FILE, OFFSETS_FILE + ".tmp",
                   "delay_offsets.json", "delay_offsets.json.tmp")


def install_meta(topics, offsets) -> dict:
    """The leader's side: {"topics": topics.json's entries, "consumer_offsets": the offsets
    table as of its log position} (JSON values only)."""
    return {"topics": {t.name: {"queues": len(t.queues), "system": t.system,
                                "created_ms": t.created_ms} for t in topics.durable()},
            "consumer_offsets": {"offsets": {g: {t: {str(q): o for q, o in qs.items()}
                                                 for t, qs in ts.items()}
                                             for g, ts in offsets.as_dict().items()},
                                 "log_position": offsets.position}}


def write_install_meta(path: str, meta: dict) -> None:
    """The follower's side, while no store is open on `path`: topics.json and
    consumer_offsets.json from the leader's state. A malformed entry is InstallError (a
    topics.json the store cannot parse would only be rebuilt from the log; it is refused
    here so the mistake is visible)."""
    topics = meta.get("topics", {})
    offsets = meta.get("consumer_offsets")
    if not isinstance(topics, dict) or (offsets is not None and not isinstance(offsets, dict)):
        raise InstallError(f"{path}: the install image's store state is malformed")
    write_checked_json(os.path.join(path, TOPICS_FILE), {"version": 1, "topics": topics})
    if offsets and offsets.get("offsets"):
        atomic_write(os.path.join(path, OFFSETS_FILE),
                     json.dumps({"version": 1, "offsets": offsets["offsets"],
                                 "log_position": offsets.get("log_position", 0)},
                                sort_keys=True).encode())
