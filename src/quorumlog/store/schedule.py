"""Delay levels (RocketMQ's ScheduleMessageService, seed 004): the delayed-record layout and the
service that delivers due messages.

A put with delay_level = L > 0 is stored under SCHEDULE_TOPIC_XXXX, queue L-1, with its real
topic and queue in the properties REAL_TOPIC / REAL_QID (`delayed_properties`, called by the
store's append path). deliver_due(now_ms) walks each level's queue from its progress offset and
re-puts every message whose store timestamp + the level's delay is due into its real topic and
queue (same body, tags, keys, other properties; the record flag FLAG_FROM_SCHEDULE and property
SCHEDULE_OFFSET="<level>:<offset>" mark it). Messages of one level are due in queue order, so
each level stops at its first not-yet-due one.

Progress survives restarts exactly (no loss, no re-delivery):
- after a round that delivered anything, the log is flushed and then <dir>/delay_offsets.json
  is written atomically (with its own checksum, files.write_checked_json) with every level's
  next offset and the log end position P at that time;
- a delay_offsets.json that is missing, damaged, or names an offset past its level's queue is
  not used: the progress is recovered from the log (every delivery record after the oldest
  retained delayed message);
- on open, the records after P are scanned for FLAG_FROM_SCHEDULE and their SCHEDULE_OFFSET
  advances the progress past deliveries made after the last save (a crash between re-put and
  save). Deliveries are flushed before the progress that names them, so the file is never ahead
  of the log.

Replicated mode: only the leader delivers (the store's timer does not; the Raft driver calls
MessageStore.deliver_due on the leader), and a new leader's progress file knows nothing of what
earlier leaders delivered. So before each round the records added to the log since the last
look (replicated ones included, committed or not: a leader's log keeps its tail) are scanned for
FLAG_FROM_SCHEDULE exactly as on open, and the progress moves past them: no re-delivery.
Queue offsets of the deliveries come from the store's counters, which account for replicated
records.

The service sees the store only through StoreServices (services.py).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable

from ..config import parse_delay_levels
from ..errors import InvalidArgumentError, InvalidTopicError
from ..format import TYPE_MESSAGE, check_topic_name
from ..errors import CorruptLogError
from .files import read_checked_json, write_checked_json
from .nativelog import PER_MESSAGE
from .services import StoreServices

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"      # RocketMQ's TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_DELAY = "DELAY"
PROP_SCHEDULE_OFFSET = "SCHEDULE_OFFSET"     # "<level>:<offset in the schedule queue>"
RESERVED_PROPERTIES = (PROP_REAL_TOPIC, PROP_REAL_QID, PROP_DELAY, PROP_SCHEDULE_OFFSET)
FLAG_FROM_SCHEDULE = 1                       # record flag: delivered by the schedule service
PROGRESS_FILE = "delay_offsets.json"
DELIVER_BATCH = 256
MAX_SCAN_RECORDS = 65536


def check_delay_properties(properties, n: int) -> None:
    """A delayed put's properties (one dict, or a list with one per message) may not use the
    names the schedule service writes."""
    for i in range(n):
        p = properties[i] if isinstance(properties, PER_MESSAGE) else properties
        if p:
            for k in RESERVED_PROPERTIES:
                if k in p:
                    raise InvalidArgumentError(f"property {k!r} is reserved")


def delayed_properties(real_topic: str, real_queue_ids: list[int], level: int,
                       properties) -> list[dict]:
    """The properties of delayed records: each message's own (one dict, or a list with one per
    message) plus its real topic and queue and its level."""
    out = []
    for i, qid in enumerate(real_queue_ids):
        p = properties[i] if isinstance(properties, PER_MESSAGE) else properties
        d = dict(p) if p else {}
        d[PROP_REAL_TOPIC] = real_topic
        d[PROP_REAL_QID] = str(qid)
        d[PROP_DELAY] = str(level)
        out.append(d)
    return out


class ScheduleService:
    def __init__(self, store: StoreServices):
        self.store = store
        self.levels_ms = parse_delay_levels(store.config.delay_levels)
        self.path = os.path.join(store.path, PROGRESS_FILE)
        self.progress = {lvl: 0 for lvl in range(1, len(self.levels_ms) + 1)}
        self.rejected = 0             # delayed records not delivered: bad destination
        self._saved_position = 0
        self._load()
        self._reconcile()
        self._scanned_to = store.commitlog.committed_position   # replicated: see _catch_up

    def _load(self):
        """Progress from delay_offsets.json; left at 0 (recovered from the log by _reconcile)
        when the file is missing, damaged or wrong."""
        try:
            data = read_checked_json(self.path)
            if data is None:
                return
            offsets, pos = data.get("offsets"), data.get("log_position")
            if (data.get("version") != 1 or not isinstance(offsets, dict)
                    or type(pos) is not int or pos < 0
                    or not all(k.isdigit() and type(v) is int and v >= 0
                               for k, v in offsets.items())):
                raise CorruptLogError(f"{self.path}: not a version-1 delay progress", self.path,
                                      0)
        except CorruptLogError as exc:
            log.error("%s: recovering delay progress from the log", exc)
            return
        for lvl, q in self._levels():
            off = offsets.get(str(lvl), 0)
            end = self.store.queue_range(SCHEDULE_TOPIC, q)[1]
            if off > end:
                log.error("%s names offset %d for delay level %d, past its queue's end %d: "
                          "recovering delay progress from the log", self.path, off, lvl, end)
                return
        self._saved_position = pos
        for k, off in offsets.items():
            if int(k) in self.progress:
                self.progress[int(k)] = off

    def _catch_up(self):
        """Replicated mode: advance progress past deliveries in records added since the last
        look (an earlier leader's, arrived by replication)."""
        lg = self.store.commitlog
        end = lg.end_position
        pos = max(self._scanned_to, lg.min_position)
        if pos > end:            # the log was truncated below what was looked at
            pos = max(self.store.dispatched_position, lg.min_position)
        if pos < end:
            self._advance_from_log(pos, end)
        self._scanned_to = end

    def _advance_from_log(self, pos, limit) -> int:
        """Scan [pos, limit) for FLAG_FROM_SCHEDULE records; move progress past each."""
        lg = self.store.commitlog
        found = 0
        while pos < limit:
            info, nxt = lg.scan(pos, limit, MAX_SCAN_RECORDS)
            if nxt == pos:
                break
            hits = info[(info["type"] == TYPE_MESSAGE)
                        & ((info["flags"] & FLAG_FROM_SCHEDULE) != 0)]
            for p in hits["position"].tolist():
                src = lg.decode_at(p).properties.get(PROP_SCHEDULE_OFFSET, "")
                lvl, _, off = src.partition(":")
                if lvl.isdigit() and off.isdigit() and int(lvl) in self.progress:
                    self.progress[int(lvl)] = max(self.progress[int(lvl)], int(off) + 1)
                    found += 1
            pos = nxt
        return found

    def _levels(self):
        """(level, queue id) of every level that has a queue in the schedule topic."""
        nq = self.store.queue_count(SCHEDULE_TOPIC)
        return [(lvl, lvl - 1) for lvl in self.progress if lvl <= nq]

    def _reconcile(self):
        """Advance progress past deliveries recorded in the log after the last save."""
        s = self.store
        lg = s.commitlog
        # Only deliveries of still-pending messages matter, and each delivery comes after the
        # record it delivers: start at the oldest pending one (or the last save if later).
        first_pending = None
        for lvl, q in self._levels():
            lo, end = s.queue_range(SCHEDULE_TOPIC, q)
            off = max(self.progress[lvl], lo)
            if off < end:
                p = s.queue_position(SCHEDULE_TOPIC, q, off)
                if p is not None and (first_pending is None or p < first_pending):
                    first_pending = p
        if first_pending is None:
            return               # nothing pending (or nothing ever delayed): nothing to learn
        pos = max(self._saved_position, first_pending, lg.min_position)
        limit = lg.committed_position
        if pos > limit:
            log.warning("%s: saved log position %d beyond the log's committed end %d",
                        self.path, pos, limit)
            return
        found = self._advance_from_log(pos, limit)
        if found:
            log.info("%s: %d deliveries after the last save recovered from the log", self.path,
                     found)

    def save(self):
        data = {"version": 1, "offsets": {str(k): v for k, v in self.progress.items()},
                "log_position": self.store.commitlog.end_position}
        write_checked_json(self.path, data)

    def pending(self) -> int:
        s = self.store
        return sum(max(0, s.queue_range(SCHEDULE_TOPIC, q)[1] - self.progress.get(q + 1, 0))
                   for q in range(s.queue_count(SCHEDULE_TOPIC)))

    def deliver_due(self, now_ms: int, submit: Callable) -> int:
        """Deliver every due message -> count; `submit(request)` appends a delivery batch
        (the store's own append, or a Raft proposal on a driven store)."""
        s = self.store
        levels = self._levels()
        if not levels:
            return 0
        if s.replicated:
            self._catch_up()
        lg = s.commitlog
        scanned_end = lg.end_position
        total = 0
        moved = False
        for lvl, q in levels:
            delay = self.levels_ms[lvl - 1]
            lo, end = s.queue_range(SCHEDULE_TOPIC, q)
            off = max(self.progress[lvl], lo)
            while off < end:
                msgs = s.read_queue(SCHEDULE_TOPIC, q, off, DELIVER_BATCH)
                due = []
                for m in msgs:
                    if m.store_timestamp_ms + delay > now_ms:
                        break
                    due.append(m)
                if due:
                    total += self._deliver(lvl, due, submit)
                    moved = True
                    off = due[-1].queue_offset + 1
                    self.progress[lvl] = off
                if len(due) < len(msgs) or not msgs:
                    break
                end = s.queue_range(SCHEDULE_TOPIC, q)[1]
        if moved:
            if s.replicated and self._scanned_to == scanned_end:
                self._scanned_to = lg.end_position   # our own deliveries: nothing to learn
            lg.flush()           # deliveries durable before the progress that names them
            self.save()
        return total

    def _deliverable(self, m) -> bool:
        """A delayed record may come from another replica: its real topic and queue are
        checked (topic name rules, queue id in [0, max_queues_per_topic)) before anything is
        created for them. An undeliverable one is logged as an error, counted in the store's
        stats "delay_rejected" and passed over (progress moves past it)."""
        p = m.properties
        topic = p.get(PROP_REAL_TOPIC)
        qid = p.get(PROP_REAL_QID, "")
        maxq = self.store.config.max_queues_per_topic
        reason = None
        try:
            check_topic_name(topic)
            if topic == SCHEDULE_TOPIC:
                reason = "real topic is the schedule topic"
        except InvalidTopicError as exc:
            reason = str(exc)
        if reason is None and not (qid.isdigit() and len(qid) <= 6 and int(qid) < maxq):
            reason = f"queue id {qid!r} outside [0, {maxq})"
        if reason is None:
            return True
        self.rejected += 1
        log.error("store %s: REJECTED delayed message at position %d (schedule offset %d): "
                  "%s; not delivered", self.store.path, m.position, m.queue_offset, reason)
        return False

    def _deliver(self, lvl, msgs, submit) -> int:
        """Re-put `msgs` (consecutive, one level) into their real topics, one batch per run of
        messages with the same real topic -> number delivered (undeliverable ones skipped)."""
        msgs = [m for m in msgs if self._deliverable(m)]
        i = 0
        while i < len(msgs):
            props0 = msgs[i].properties
            topic = props0[PROP_REAL_TOPIC]
            j = i
            bodies, queue_ids, tags, keys, props, born = [], [], [], [], [], []
            while j < len(msgs):
                p = props0 if j == i else msgs[j].properties
                if p[PROP_REAL_TOPIC] != topic:
                    break
                m = msgs[j]
                bodies.append(m.body)
                queue_ids.append(int(p.pop(PROP_REAL_QID)))
                del p[PROP_REAL_TOPIC]
                p.pop(PROP_DELAY, None)
                p[PROP_SCHEDULE_OFFSET] = f"{lvl}:{m.queue_offset}"
                props.append(p)
                tags.append(m.tags)
                keys.append(m.keys)
                born.append(m.born_timestamp_ms)
                j += 1
            submit(self.store.prepare_delivery(topic, bodies, queue_ids, tags, keys, props,
                                               born, FLAG_FROM_SCHEDULE))
            i = j
        return len(msgs)
