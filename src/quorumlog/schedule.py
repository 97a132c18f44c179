"""Delay levels (RocketMQ's ScheduleMessageService, seed 004).

A put with delay_level = L > 0 is stored under SCHEDULE_TOPIC_XXXX, queue L-1, with its real
topic and queue in the properties REAL_TOPIC / REAL_QID (store.py). deliver_due(now_ms) walks each
level's queue from its progress offset and re-puts every message whose store timestamp + the
level's delay is due into its real topic and queue (same body, tags, keys, other properties; the
record flag FLAG_FROM_SCHEDULE and property SCHEDULE_OFFSET="<level>:<offset>" mark it).
Messages of one level are due in queue order, so each level stops at its first not-yet-due one.

Progress survives restarts exactly (no loss, no re-delivery):
- after a round that delivered anything, the log is flushed and then <dir>/delay_offsets.json
  is written atomically with every level's next offset and the log end position P at that time;
- on open, the records after P are scanned for FLAG_FROM_SCHEDULE and their SCHEDULE_OFFSET
  advances the progress past deliveries made after the last save (a crash between re-put and
  save). Deliveries are flushed before the progress that names them, so the file is never ahead
  of the log.

Replicated mode: only the leader delivers (the Raft driver calls store.deliver_due(); the
store's timer does not), and a new leader's progress file knows nothing of what earlier leaders
delivered. So before each round the records added to the log since the last look (replicated
ones included, committed or not: a leader's log keeps its tail) are scanned for
FLAG_FROM_SCHEDULE exactly as on open, and the progress moves past them: no re-delivery.
Queue offsets of the deliveries come from the store's counters, which account for replicated
records (store._sync_counters).
"""
from __future__ import annotations

import json
import logging
import os

from .config import parse_delay_levels

log = logging.getLogger(__name__)

PROGRESS_FILE = "delay_offsets.json"
DELIVER_BATCH = 256


class ScheduleService:
    def __init__(self, store):
        from . import store as _store
        self._s = _store
        self.store = store
        self.levels_ms = parse_delay_levels(store.config.delay_levels)
        self.path = os.path.join(store.path, PROGRESS_FILE)
        self.progress = {lvl: 0 for lvl in range(1, len(self.levels_ms) + 1)}
        self._saved_position = 0
        self._load()
        self._reconcile()
        self._scanned_to = store._log.committed_position   # replicated mode: see _catch_up

    def _load(self):
        try:
            with open(self.path, "rb") as fh:
                data = json.loads(fh.read())
            offsets = {int(k): int(v) for k, v in data["offsets"].items()}
            self._saved_position = int(data["log_position"])
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError) as exc:
            log.error("%s is damaged (%s): recovering delay progress from the log", self.path,
                      exc)
            self._saved_position = 0
            return
        for lvl, off in offsets.items():
            if lvl in self.progress:
                self.progress[lvl] = off

    def _catch_up(self):
        """Replicated mode: advance progress past deliveries in records added since the last
        look (an earlier leader's, arrived by replication)."""
        lg = self.store._log
        end = lg.end_position
        pos = max(self._scanned_to, lg.min_position)
        if pos > end:            # the log was truncated below what was looked at
            pos = max(self.store._dispatched, lg.min_position)
        if pos < end:
            self._advance_from_log(pos, end)
        self._scanned_to = end

    def _advance_from_log(self, pos, limit) -> int:
        """Scan [pos, limit) for FLAG_FROM_SCHEDULE records; move progress past each."""
        lg = self.store._log
        found = 0
        while pos < limit:
            info, nxt = lg.scan(pos, limit, 65536)
            if nxt == pos:
                break
            hits = info[(info["type"] == self._s.TYPE_MESSAGE)
                        & ((info["flags"] & self._s.FLAG_FROM_SCHEDULE) != 0)]
            for p in hits["position"].tolist():
                src = lg.decode_at(p).properties.get(self._s.PROP_SCHEDULE_OFFSET, "")
                lvl, _, off = src.partition(":")
                if lvl.isdigit() and off.isdigit() and int(lvl) in self.progress:
                    self.progress[int(lvl)] = max(self.progress[int(lvl)], int(off) + 1)
                    found += 1
            pos = nxt
        return found

    def _reconcile(self):
        """Advance progress past deliveries recorded in the log after the last save."""
        s = self.store
        lg = s._log
        st = s._topics.get(self._s.SCHEDULE_TOPIC)
        if st is None:
            return                  # nothing was ever delayed, so nothing was delivered
        # Only deliveries of still-pending messages matter, and each delivery comes after the
        # record it delivers: start at the oldest pending one (or the last save if later).
        first_pending = None
        for lvl in self.progress:
            if lvl <= len(st.queues):
                cq = st.queues[lvl - 1]
                off = max(self.progress[lvl], s._cq_min(cq))
                if off < cq.next_offset:
                    e = cq.position_of(off)
                    if e is not None and (first_pending is None or e[0] < first_pending):
                        first_pending = e[0]
        if first_pending is None:
            return
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
                "log_position": self.store._log.end_position}
        self._s._atomic_write(self.path, json.dumps(data, sort_keys=True).encode())

    def pending(self) -> int:
        st = self.store._topics.get(self._s.SCHEDULE_TOPIC)
        if st is None:
            return 0
        return sum(max(0, cq.next_offset - self.progress.get(q + 1, 0))
                   for q, cq in enumerate(st.queues))

    def deliver_due(self, now_ms: int) -> int:
        s = self.store
        S = self._s
        st = s._topics.get(S.SCHEDULE_TOPIC)
        if st is None:
            return 0
        if s._replicated:
            self._catch_up()
        scanned_end = s._log.end_position
        total = 0
        moved = False
        for lvl, delay in enumerate(self.levels_ms, start=1):
            if lvl > len(st.queues):
                break
            cq = st.queues[lvl - 1]
            off = max(self.progress[lvl], s._cq_min(cq))
            while off < cq.next_offset:
                msgs = s.get(S.SCHEDULE_TOPIC, lvl - 1, off, DELIVER_BATCH)
                due = []
                for m in msgs:
                    if m.store_timestamp_ms + delay > now_ms:
                        break
                    due.append(m)
                if due:
                    total += self._deliver(lvl, due)
                    moved = True
                    off = due[-1].queue_offset + 1
                    self.progress[lvl] = off
                if len(due) < len(msgs) or not msgs:
                    break
        if moved:
            if s._replicated and self._scanned_to == scanned_end:
                self._scanned_to = s._log.end_position   # our own deliveries: nothing to learn
            s._log.flush()       # deliveries durable before the progress that names them
            self.save()
        return total

    def _deliverable(self, m) -> bool:
        """A delayed record may come from another replica: its real topic and queue are
        checked (topic name rules, queue id in [0, max_queues_per_topic)) before anything is
        created for them. An undeliverable one is logged as an error, counted in the store's
        stats "delay_rejected" and passed over (progress moves past it)."""
        S = self._s
        p = m.properties
        topic = p.get(S.PROP_REAL_TOPIC)
        qid = p.get(S.PROP_REAL_QID, "")
        reason = None
        try:
            S._check_topic_name(topic)
            if topic == S.SCHEDULE_TOPIC:
                reason = "real topic is the schedule topic"
        except S.InvalidTopicError as exc:
            reason = str(exc)
        if reason is None and not (qid.isdigit() and len(qid) <= 6
                                   and int(qid) < self.store.config.max_queues_per_topic):
            reason = (f"queue id {qid!r} outside [0, "
                      f"{self.store.config.max_queues_per_topic})")
        if reason is None:
            return True
        self.store._stats["delay_rejected"] += 1
        log.error("store %s: REJECTED delayed message at position %d (schedule offset %d): "
                  "%s; not delivered", self.store.path, m.position, m.queue_offset, reason)
        return False

    def _deliver(self, lvl, msgs):
        """Re-put `msgs` (consecutive, one level) into their real topics, one batch per run of
        messages with the same real topic -> number delivered (undeliverable ones skipped)."""
        S = self._s
        s = self.store
        msgs = [m for m in msgs if self._deliverable(m)]
        delivered = len(msgs)
        i = 0
        while i < len(msgs):
            props0 = msgs[i].properties
            topic = props0[S.PROP_REAL_TOPIC]
            j = i
            bodies, qids, tags, keys, props, born = [], [], [], [], [], []
            while j < len(msgs):
                p = props0 if j == i else msgs[j].properties
                if p[S.PROP_REAL_TOPIC] != topic:
                    break
                m = msgs[j]
                bodies.append(m.body)
                qids.append(int(p.pop(S.PROP_REAL_QID)))
                del p[S.PROP_REAL_TOPIC]
                p.pop(S.PROP_DELAY, None)
                p[S.PROP_SCHEDULE_OFFSET] = f"{lvl}:{m.queue_offset}"
                props.append(p)
                tags.append(m.tags)
                keys.append(m.keys)
                born.append(m.born_timestamp_ms)
                j += 1
            t = s._topics.get(topic)
            if t is None:
                t = s._add_topic(topic, max(s.config.default_topic_queues, max(qids) + 1),
                                 False, s._clock_ms())
            elif max(qids) >= len(t.queues):
                s._extend_topic(t, max(qids) + 1)
            import numpy as np
            s._put(topic, bodies, None, tags, keys, props, 0, None, born,
                   S.FLAG_FROM_SCHEDULE, internal_queue_ids=np.asarray(qids, dtype=np.int64))
            i = j
        return delivered
