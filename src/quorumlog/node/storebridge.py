"""The store's single-writer seam as the node drives it, plus META records.

The store (quorumlog.store) gives a Raft driver four calls: prepare_put -> PutRequest,
raft_log() (its append_as_leader(term, request) is the store's one append path),
apply_committed(index) (commit -> dispatch) and abandon_pending(exc). `MetaSeam` passes
those through and adds store metadata replicated through the log. It keeps no request: the
completion of every proposal (a put's, a META record's) is node/pipeline.py's tracker.

* `prepare_meta(payload)` makes a request the core proposes like any other; the raft log
  below appends it as one META record (CommitLog.append_control) after applying it locally
  (the leader needs the topic's queues before it appends the topic's first message).
* `apply_committed(index)` applies every META record up to `index` (store.create_topic)
  BEFORE the store commits and dispatches them: a reader thread's get() dispatches up to the
  committed position on its own, so the topic must exist first -- followers then hold the
  leader's topics and queue counts, and never meet a message of a topic they do not know.
"""
from __future__ import annotations

import logging

from ..errors import InvalidArgumentError, QuorumlogError
from .._clientframe import record_indexes_of_type as _meta_indexes
from ..raft.log import EntryKind
from . import meta

log = logging.getLogger(__name__)

__all__ = ["MetaRequest", "MetaSeam"]

MAX_SCAN = 65536


class MetaRequest:
    """A proposal of one META record; `result` (once appended): its index. Its completion is
    the proposer's (node/pipeline.py's tracker), as for a PutRequest."""

    __slots__ = ("payload", "count", "nbytes", "term", "first_index", "last_index")

    def __init__(self, payload: bytes):
        self.payload = payload
        self.count = 1
        self.nbytes = len(payload)
        self.term = self.first_index = self.last_index = 0

    @property
    def result(self) -> int:
        return self.last_index


class _MetaRaftLog:
    """The store's RaftLog, with META requests appended as control records. Every RaftLog
    method (raft/log.py) is written out -- no forwarding by __getattr__ -- so the seam is
    what this class says; the ones that are not about META pass to the store's log."""

    def __init__(self, seam: "MetaSeam", inner):
        self._seam = seam
        self._inner = inner
        # The core asks these several times per request (~15 last_index, ~10 term_at per
        # produce over leader and followers): the instance attributes are the inner log's own
        # bound methods, a Python frame less per call. The methods below say the same.
        self.first_index = inner.first_index
        self.last_index = inner.last_index
        self.last_term = inner.last_term
        self.term_at = inner.term_at
        # the last read() as (lo, hi, max_bytes, result): a leader reads the same batch for
        # each follower in one propose; the second read is answered without a second CRC
        # pass over the same bytes. Forgotten at every change of entries already written
        # (a truncation, an install) -- appends add entries after hi, never change these.
        self._last_read = None

    # -- reads and the plain writes: the store's log --------------------------------------
    def first_index(self) -> int:
        return self._inner.first_index()

    def last_index(self) -> int:
        return self._inner.last_index()

    def last_term(self) -> int:
        return self._inner.last_term()

    def term_at(self, index: int) -> int:
        return self._inner.term_at(index)

    def read(self, lo: int, hi: int, max_bytes: int):
        r = self._last_read
        if r is not None and r[0] == lo and r[1] == hi and r[2] == max_bytes:
            return r[3]
        out = self._inner.read(lo, hi, max_bytes)
        self._last_read = (lo, hi, max_bytes, out)
        return out

    def append_control(self, term: int, kind, data: bytes) -> int:
        return self._inner.append_control(term, kind, data)

    def truncate_after(self, index: int) -> None:
        self._last_read = None
        self._inner.truncate_after(index)
        self._seam._unstage_after(index)
        if self._seam.on_truncated is not None:
            self._seam.on_truncated(index)

    def flush(self) -> int:
        return self._inner.flush()

    # -- producers (what the node's producer table reads and appends) ---------------------
    def append_producer_batch(self, term: int, batch, pid: int, seq: int) -> int:
        return self._inner.append_producer_batch(term, batch, pid, seq)

    def producers(self, lo: int, hi: int) -> list:
        return self._inner.producers(lo, hi)

    def producer_snapshot(self) -> list:
        return self._inner.producer_snapshot()

    # -- installs ---------------------------------------------------------------------------
    def install_image(self):
        return self._inner.install_image()

    def read_image(self, image, offset: int, max_bytes: int):
        return self._inner.read_image(image, offset, max_bytes)

    def begin_install(self, image, head_config) -> None:
        self._last_read = None
        self._inner.begin_install(image, head_config)

    def write_chunk(self, offset: int, chunk) -> int:
        return self._inner.write_chunk(offset, chunk)

    def abort_install(self) -> None:
        self._last_read = None
        self._inner.abort_install()

    # -- what the seam adds: META records ---------------------------------------------------
    def append_as_leader(self, term: int, req) -> int:
        if type(req) is MetaRequest:
            return self._seam._append_meta(term, req)
        return self._inner.append_as_leader(term, req)

    def finish_install(self) -> int:
        """The store reopened on an installed log: the seam starts over from it."""
        self._last_read = None
        last = self._inner.finish_install()
        self._last_read = None
        self._seam._log_replaced()
        return last

    def append_replicated(self, payload) -> int:
        self._last_read = None      # (a follower reads nothing to send; kept out of doubt)
        last = self._inner.append_replicated(payload)
        metas = _meta_indexes(payload, self._seam._META)
        if metas:
            self._seam._meta_indexes.extend(metas)
        return last


class MetaSeam:
    def __init__(self, store):
        from ..commitlog import META
        self.store = store
        self._META = META
        self._rlog = _MetaRaftLog(self, store.raft_log())
        # called (on the loop, inside the core's step) once an install replaced the log, and
        # with the index kept once a truncation dropped the entries after it
        self.on_log_replaced = None
        self.on_truncated = None
        self._start()

    def _start(self) -> None:
        # raft indexes of META records not applied yet: found in replicated payloads as they
        # arrive (a C walk over the headers), and at open in the log after the dispatched
        # position (records before it were applied when they committed: their topics are in
        # topics.json). Applied when they commit, before the store commits them.
        self._meta_indexes: list[int] = self._scan_meta(self.store.dispatched_position,
                                                         self.cl.end_position)
        self._known_topics = set(self.store.topics())
        # own META records appended as leader and not committed yet: index -> (topic, queues)
        # of the topic they staged in the store (in memory until the record commits)
        self._staged: dict[int, tuple[str, int]] = {}

    @property
    def cl(self):
        """The store's CommitLog (a new one after an install replaced the log)."""
        return self.store.commitlog

    def _log_replaced(self) -> None:
        """An install replaced the log (a follower: nothing of ours was pending): the META
        records still to apply and the known topics come from the new log and store."""
        self._start()
        if self.on_log_replaced is not None:
            self.on_log_replaced()

    def raft_log(self):
        return self._rlog

    def has_topic(self, name: str) -> bool:
        return name in self._known_topics

    def prepare_put(self, topic, bodies, **kw):
        return self.store.prepare_put(topic, bodies, **kw)

    @staticmethod
    def prepare_meta(payload: bytes) -> MetaRequest:
        return MetaRequest(bytes(payload))

    def apply_committed(self, index: int) -> int:
        cl = self.store.commitlog      # (self.cl, a property less per commit)
        index = min(index, cl.last_index)
        if self._staged and index > cl.committed_index:
            self._confirm_staged(index)
        if self._meta_indexes and index > cl.committed_index:
            self._apply_meta(index)
        return self.store.apply_committed(index)

    def abandon_pending(self, exc: BaseException) -> None:
        self.store.abandon_pending(exc)

    # -- META --------------------------------------------------------------------------------
    def _append_meta(self, term: int, req: MetaRequest) -> int:
        """The leader's META record: a new topic is staged in the store (its first messages
        follow at once and need its queues) and made durable when the record commits; any
        other META is applied now, as before."""
        try:
            d = meta.decode(req.payload)
        except InvalidArgumentError:
            d = {"op": None}             # (_apply_payload logs it, as before)
        staged = d["op"] == "topic" and self.store.stage_topic(d["name"], d["queues"])
        if not staged:
            self._apply_payload(req.payload, local=True)
        try:
            idx = self._rlog.append_control(term, EntryKind.META, req.payload)
        except BaseException:
            if staged:
                self.store.unstage_topic(d["name"])
            raise
        if staged:
            self._staged[idx] = (d["name"], d["queues"])
            self._known_topics.add(d["name"])
        req.term = term
        req.first_index = req.last_index = idx
        return idx

    def _confirm_staged(self, upto: int) -> None:
        """Own META records committed up to `upto`: their staged topics become durable."""
        for idx in sorted(i for i in self._staged if i <= upto):
            name, queues = self._staged.pop(idx)
            self.store.create_topic(name, queues)

    def _unstage_after(self, index: int) -> None:
        """A truncation took the entries after `index`: a topic staged by an own META record
        among them is dropped (unless a record still kept staged it too), and forgotten, so
        that the next put of it proposes its META record again."""
        gone = [i for i in self._staged if i > index]
        if not gone:
            return
        names = {self._staged.pop(i)[0] for i in gone}
        for name in names - {n for n, _ in self._staged.values()}:
            if self.store.unstage_topic(name):
                self._known_topics.discard(name)

    def _scan_meta(self, pos: int, end: int) -> list[int]:
        cl = self.cl
        pos = max(pos, cl.min_position)
        out = []
        while pos < end:
            info, nxt = cl.scan(pos, end, MAX_SCAN)
            if nxt == pos:
                break
            out.extend(info["index"][info["type"] == self._META].tolist())
            pos = nxt
        return out

    def _apply_meta(self, upto: int) -> None:
        """Apply the META records with index <= upto (still META of the same bytes: a
        truncation may have replaced an entry found earlier)."""
        cl = self.cl
        keep = []
        for idx in sorted(set(self._meta_indexes)):
            if idx > upto:
                keep.append(idx)
                continue
            if idx > cl.last_index or idx < cl.first_index:
                continue
            pos = cl.position_of(idx)
            info, _ = cl.scan(pos, pos + cl.size_of(idx), 1)
            if len(info) != 1 or int(info["type"][0]) != self._META:
                continue     # truncated and replaced by a message
            off, n = int(info["body_offset"][0]), int(info["body_len"][0])
            self._apply_payload(cl.record_at(pos)[off:off + n], local=False, position=pos)
        self._meta_indexes = keep

    def _apply_payload(self, payload, *, local: bool, position: int = -1) -> None:
        try:
            d = meta.decode(payload)
        except InvalidArgumentError as e:
            log.error("store %s: META record at position %d is malformed (%s); skipped",
                      self.store.path, position, e)
            return
        if d["op"] == "offset":
            return        # consumer offsets: the store applies them itself at dispatch
        if d["op"] != "topic":
            log.warning("store %s: META record at position %d: unknown op %r; skipped",
                        self.store.path, position, d["op"])
            return
        name, queues = d["name"], d["queues"]
        have = self.store.topics().get(name)
        staged = any(n == name for n, _ in self._staged.values())
        if have is None or have < queues or staged:   # (create_topic confirms a staged one)
            try:
                self.store.create_topic(name, queues)
            except QuorumlogError as e:
                if local:
                    raise
                log.error("store %s: META record at position %d: topic %r with %d queues "
                          "not applied: %s", self.store.path, position, name, queues, e)
        self._known_topics.add(name)
