"""Consumer-group offsets stored in the store (RocketMQ's consumerOffset): which queue offset
each consumer group has consumed up to, per (topic, queue).

An offset commit is a META record of the log (payload: UTF-8 JSON
`{"op": "offset", "group": g, "offsets": [[topic, queue, offset], ...]}`), appended through the
store's one append path and applied to the table when dispatch reaches it, i.e. once it is
committed. So offsets are exactly as durable as messages (flush mode), and in a replicated
group they replicate with the log and survive a failover (seed 001: DLedger keeps them
outside the log and loses them). Other META ops (the node's topic records) are not ours and
are ignored here.

The table is derived data: `consumer_offsets.json` = `{"version": 1, "offsets": {group:
{topic: {queue: offset}}}, "log_position": P, "crc32c": C}` holds it as of log position P
(written atomically with the consume-queue checkpoint; C is the checksum of files.py, as for
topics.json and queue_offsets.json); at open, META records from P on are applied again. A
damaged file (not JSON, a wrong checksum, a bad member; a truncated one) is not trusted: the
table is rebuilt from every META record the log still holds, logged as an error (offsets
committed only in records retention has deleted are lost then). A file of an older version
without "crc32c" is read once if it is otherwise well formed. Limits: group names as topic names (1..255 bytes of UTF-8, no NUL or '/'), at most
MAX_OFFSETS_PER_COMMIT offsets per commit (one record of at most MAX_META_PAYLOAD_BYTES) and
`max_consumer_offsets` entries in the table.
"""
from __future__ import annotations

import json
import logging
import os

from ..errors import (CorruptLogError, InvalidArgumentError, InvalidTypeError,
                      QueueTypeError)
from ..format import TYPE_META, check_topic_name
from .files import CHECKSUM_KEY, MAX_METADATA_BYTES, read_checked_json, write_checked_json

log = logging.getLogger(__name__)

OFFSETS_FILE = "consumer_offsets.json"
MAX_META_PAYLOAD_BYTES = 4096      # the replicated node's limit on a META payload
MAX_OFFSETS_PER_COMMIT = 64
RESAVE_LAG_BYTES = 64 << 20        # rewrite the file when its position lags this much


def check_group(group) -> None:
    if not isinstance(group, str):
        raise InvalidTypeError(f"group must be a str, got {type(group).__name__}")
    try:
        check_topic_name(group)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"group name: {exc}") from None


def encode_commit(group: str, offsets) -> bytes:
    """The META payload of one offset commit; `offsets`: iterable of (topic, queue, offset).
    Validates everything (InvalidArgumentError / the TypeError subclasses)."""
    check_group(group)
    rows = []
    for item in offsets:
        topic, queue, offset = item
        check_topic_name(topic)
        if type(queue) is not int:
            raise QueueTypeError(f"queue_id must be an int, got {type(queue).__name__}")
        if type(offset) is not int:
            raise InvalidTypeError(f"offset must be an int, got {type(offset).__name__}")
        if not 0 <= queue < 65536 or offset < 0:
            raise InvalidArgumentError(f"queue_id {queue} outside [0, 65536) or offset "
                                       f"{offset} < 0")
        rows.append([topic, queue, offset])
    if not 1 <= len(rows) <= MAX_OFFSETS_PER_COMMIT:
        raise InvalidArgumentError(f"1..{MAX_OFFSETS_PER_COMMIT} offsets per commit, got "
                                   f"{len(rows)}")
    payload = json.dumps({"op": "offset", "group": group, "offsets": rows},
                         separators=(",", ":")).encode()
    if len(payload) > MAX_META_PAYLOAD_BYTES:
        raise InvalidArgumentError(f"offset commit of {len(payload)} bytes > "
                                   f"{MAX_META_PAYLOAD_BYTES}: commit fewer offsets at once")
    return payload


class ConsumerOffsets:
    """The table, applied from META records at dispatch. Not thread-safe: called under the
    store's lock."""

    def __init__(self, root: str, max_entries: int, read_only: bool = False):
        self.path = os.path.join(root, OFFSETS_FILE)
        self.max_entries = max_entries
        self.read_only = read_only
        self.table: dict[tuple[str, str, int], int] = {}
        self.position = 0          # META records before this position are in the table
        self.saved_position = 0
        self.dirty = False
        self.applied = 0           # offset commits applied since open (stats)
        self.rejected = 0          # malformed or over-limit commits found in the log

    def load(self) -> None:
        """Read the file. A damaged one is logged and not used: the table starts empty from
        log position 0, so catch_up applies every META record the log holds."""
        try:
            data = self._read()
            if data is None:
                return
            table = {}
            if data.get("version") != 1 or set(data) != {"version", "offsets", "log_position"}:
                raise ValueError("not a version-1 offsets table")
            for group, topics in data["offsets"].items():
                for topic, queues in topics.items():
                    for q, off in queues.items():
                        if type(off) is not int or off < 0:
                            raise ValueError(f"offset {off!r}")
                        table[(group, topic, int(q))] = off
            position = data["log_position"]
            if type(position) is not int or position < 0:
                raise ValueError(f"log_position {position!r}")
        except (CorruptLogError, KeyError, TypeError, ValueError, AttributeError) as exc:
            log.error("%s is damaged (%s): the consumer offsets are rebuilt from the log's "
                      "META records (offsets committed only in records retention deleted are "
                      "lost)", self.path, exc)
            self.table, self.position, self.saved_position = {}, 0, 0
            self.dirty = True          # rewritten at the next checkpoint
            return
        self.table = table
        self.position = self.saved_position = position

    def _read(self) -> dict | None:
        """The file's object: checksummed (files.py), or an older file without a checksum."""
        try:
            return read_checked_json(self.path)
        except CorruptLogError as exc:
            if not str(exc).endswith("no checksum"):
                raise
        with open(self.path, "rb") as fh:
            data = json.loads(fh.read(MAX_METADATA_BYTES))
        if not isinstance(data, dict) or CHECKSUM_KEY in data:
            raise ValueError("not a JSON object")
        log.warning("%s has no checksum (an older version wrote it): read once, rewritten "
                    "with one at the next checkpoint", self.path)
        self.dirty = True
        return data

    def as_dict(self, group: str | None = None) -> dict:
        out: dict = {}
        for (g, t, q), off in sorted(self.table.items()):
            if group is None or g == group:
                out.setdefault(g, {}).setdefault(t, {})[q] = off
        return out if group is None else out.get(group, {})

    def get(self, group: str, topic: str, queue: int) -> int | None:
        return self.table.get((group, topic, queue))

    # -- applying the log's META records ------------------------------------------------------
    def apply_records(self, commitlog, info) -> None:
        """`info`: RECORD_INFO rows of dispatched records; the META ones at or past
        `position` are applied in log order."""
        metas = info[info["type"] == TYPE_META]
        for p, off, n in zip(metas["position"].tolist(), metas["body_offset"].tolist(),
                             metas["body_len"].tolist()):
            if p >= self.position:
                self.apply_payload(bytes(commitlog.record_at(p)[off:off + n]), p)
        if len(info):
            last = info[len(info) - 1]
            self.position = max(self.position, int(last["position"]) + int(last["size"]))

    def apply_payload(self, payload: bytes, position: int) -> None:
        try:
            d = json.loads(payload)
        except ValueError:
            return                      # not ours (another layer's META)
        if not isinstance(d, dict) or d.get("op") != "offset":
            return
        try:
            group, rows = d["group"], d["offsets"]
            check_group(group)
            for topic, queue, offset in rows:
                key = (group, topic, int(queue))
                if key not in self.table and len(self.table) >= self.max_entries:
                    raise InvalidArgumentError(f"more than max_consumer_offsets "
                                               f"{self.max_entries} entries")
                if type(offset) is not int or offset < 0:
                    raise InvalidArgumentError(f"offset {offset!r}")
                self.table[key] = offset
        except (KeyError, TypeError, ValueError) as exc:
            self.rejected += 1
            log.error("offset commit at log position %d not applied: %s", position, exc)
            return
        self.applied += 1
        self.dirty = True

    def catch_up(self, commitlog, upto: int, max_records: int = 65536) -> None:
        """Apply the META records in [position, upto) (at open, when the file is older than
        what dispatch re-reads)."""
        pos = max(self.position, commitlog.min_position)
        while pos < upto:
            info, nxt = commitlog.scan(pos, upto, max_records)
            if nxt == pos:
                break
            self.apply_records(commitlog, info)
            pos = nxt
        self.position = max(self.position, upto)

    def save(self, position: int) -> None:
        """At each consume-queue checkpoint: write the file when the table changed, or when
        its position lags far behind (so a reopen re-reads little of the log)."""
        if self.read_only:
            return
        self.position = max(self.position, position)
        if not self.dirty and self.position - self.saved_position < RESAVE_LAG_BYTES:
            return
        data = {"version": 1, "offsets": {g: {t: {str(q): o for q, o in qs.items()}
                                              for t, qs in ts.items()}
                                          for g, ts in self.as_dict().items()},
                "log_position": self.position}
        write_checked_json(self.path, data)
        self.saved_position = self.position
        self.dirty = False
