"""The store's single-writer seam, as the Raft driver uses it, over today's MessageStore.

The node codes against four names of the store:

    store.prepare_put(topic, bodies, ...) -> PutRequest   validates cheaply, writes nothing
    store.raft_log() -> RaftLog        its append_as_leader(term, request) is the one append path
    store.apply_committed(index) -> dispatched index      commit -> dispatch -> complete requests
    store.abandon_pending(exc)         fail every request not yet committed

`bridge_for(store)` returns the store itself when it provides them, else a `StoreBridge` that
implements them on MessageStore's replicated mode (put/put_batch append without committing;
CommitLog.commit + store.dispatch commit), so the driver has one code path either way.

The bridge also owns META records (meta.py): `prepare_meta` makes a request that appends one,
and `apply_committed` applies every committed META record before it commits (and so before
anything dispatches) the records after it. Applying before CommitLog.commit matters: a reader
thread's get() dispatches up to the committed position on its own.
"""
from __future__ import annotations

import collections
import logging

from ..errors import InvalidArgumentError, QuorumlogError
from ..raft.errors import NotLeaderError
from ..raft.nativelog import NativeRaftLog
from . import meta

log = logging.getLogger(__name__)

__all__ = ["PutRequest", "StoreBridge", "bridge_for"]

MAX_SCAN = 65536


class PutRequest:
    """One proposal: a batch of one topic's messages (or one META record).

    count/nbytes go to RaftCore.propose; on_done(result_or_exception) is called once, on the
    driver's thread, when the batch committed and dispatched (result: PutResult for one
    message, BatchResult for several, the index for META) or failed."""

    __slots__ = ("topic", "bodies", "kwargs", "count", "nbytes", "on_done", "result", "term",
                 "first_index", "last_index", "meta", "single", "done", "extra")

    def __init__(self, topic, bodies, kwargs, nbytes, *, meta_payload=None, single=False):
        self.topic = topic
        self.bodies = bodies
        self.kwargs = kwargs
        self.count = 1 if meta_payload is not None else len(bodies)
        self.nbytes = nbytes
        self.on_done = None
        self.result = None
        self.term = 0
        self.first_index = 0
        self.last_index = 0
        self.meta = meta_payload
        self.single = single
        self.done = False
        self.extra = None          # free for the driver (producer id, sequence)

    def finish(self, value) -> None:
        if self.done:
            return
        self.done = True
        cb = self.on_done
        if cb is not None:
            try:
                cb(value)
            except Exception:
                log.exception("put completion callback failed")


class _BridgeLog(NativeRaftLog):
    """NativeRaftLog whose leader append goes through the store (it assigns queue offsets)."""

    def __init__(self, bridge: "StoreBridge"):
        super().__init__(bridge.store.commitlog)
        self.bridge = bridge

    def append_as_leader(self, term: int, req: PutRequest) -> int:
        return self.bridge._append(term, req)


class StoreBridge:
    def __init__(self, store):
        from ..commitlog import META
        self.store = store
        self.cl = store.commitlog
        self._META = META
        self._log = _BridgeLog(self)
        self._pending: collections.deque[PutRequest] = collections.deque()
        self.pending_bytes = 0
        # META records are applied from here on (everything before was dispatched, so its
        # topics are in topics.json already)
        self._meta_pos = store.dispatched_position
        self._dispatched_index = self.cl.committed_index
        self._known_topics = set(store.topics())

    # -- the seam ---------------------------------------------------------------------------
    def raft_log(self):
        return self._log

    def has_topic(self, name: str) -> bool:
        return name in self._known_topics

    def prepare_put(self, topic, bodies, *, queue_id=None, tags=None, keys=None,
                    properties=None, sharding_key=None, born_timestamps_ms=None) -> PutRequest:
        if not isinstance(topic, str):
            raise InvalidArgumentError(f"topic must be a str, got {type(topic).__name__}")
        if not isinstance(bodies, (list, tuple)) or not bodies:
            raise InvalidArgumentError("bodies must be a non-empty list or tuple of bytes")
        nbytes = 0
        for b in bodies:
            try:
                nbytes += memoryview(b).nbytes
            except TypeError:
                raise InvalidArgumentError("every body must be a bytes-like object") from None
        kw = {}
        if queue_id is not None:
            kw["queue_id"] = queue_id
        if tags is not None:
            kw["tags"] = tags
        if keys is not None:
            kw["keys"] = keys
        if properties is not None:
            kw["properties"] = properties
        if sharding_key is not None:
            kw["sharding_key"] = sharding_key
        if born_timestamps_ms is not None:
            kw["born_timestamps_ms"] = born_timestamps_ms
        return PutRequest(topic, bodies, kw, nbytes, single=False)

    def prepare_meta(self, payload: bytes) -> PutRequest:
        return PutRequest(None, None, None, len(payload), meta_payload=bytes(payload))

    def apply_committed(self, index: int) -> int:
        cl = self.cl
        index = min(index, cl.last_index)
        if index > cl.committed_index:
            end = cl.position_of(index) + cl.size_of(index)
            self._apply_meta(end)
            cl.commit(index)
        dpos = self.store.dispatch()
        if dpos >= cl.committed_position:
            self._dispatched_index = cl.committed_index
        self._complete(min(self._dispatched_index, index))
        return self._dispatched_index

    def abandon_pending(self, exc: BaseException) -> None:
        pend = self._pending
        self._pending = collections.deque()
        self.pending_bytes = 0
        for req in pend:
            req.finish(exc)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    # -- internals --------------------------------------------------------------------------
    def _append(self, term: int, req: PutRequest) -> int:
        st = self.store
        if st.term < term:
            st.term = term
        if req.meta is not None:
            self._apply_meta_payload(req.meta, local=True)
            idx, _pos = self.cl.append_control(self._META, req.meta, term=term)
            req.first_index = req.last_index = idx
            req.result = idx
        elif len(req.bodies) == 1 and "born_timestamps_ms" not in req.kwargs \
                and not isinstance(req.kwargs.get("properties"), list):
            kw = dict(req.kwargs)
            if "keys" in kw and isinstance(kw["keys"], list):
                kw["keys"] = kw["keys"][0] or ()
            if isinstance(kw.get("tags"), list):
                kw["tags"] = kw["tags"][0]
            if isinstance(kw.get("sharding_key"), list):
                kw["sharding_key"] = kw["sharding_key"][0]
            r = st.put(req.topic, req.bodies[0], **kw)
            req.first_index = req.last_index = r.index
            req.result = r
        else:
            r = st.put_batch(req.topic, req.bodies, **req.kwargs)
            req.first_index = r.first_index
            req.last_index = r.first_index + len(r) - 1
            req.result = r
        req.term = term
        if req.topic is not None:
            self._known_topics.add(req.topic)
        self._pending.append(req)
        self.pending_bytes += req.nbytes
        return req.last_index

    def _complete(self, upto: int) -> None:
        pend = self._pending
        cl = self.cl
        while pend and pend[0].last_index <= upto:
            req = pend.popleft()
            self.pending_bytes -= req.nbytes
            # Raft: a proposal of term T is committed when the entry at its last index still
            # has term T (a new leader may have replaced it)
            if cl.term_at(req.last_index) == req.term:
                req.finish(req.result)
            else:
                req.finish(NotLeaderError(
                    f"entries {req.first_index}..{req.last_index} of term {req.term} were "
                    "replaced by a newer leader", None, 0))

    def _apply_meta(self, end: int) -> None:
        cl = self.cl
        pos = max(self._meta_pos, cl.min_position)
        while pos < end:
            info, nxt = cl.scan(pos, end, MAX_SCAN)
            if nxt == pos:
                break
            metas = info[info["type"] == self._META]
            for p, off, n in zip(metas["position"].tolist(), metas["body_offset"].tolist(),
                                 metas["body_len"].tolist()):
                rec = cl.record_at(p)
                self._apply_meta_payload(rec[off:off + n], local=False, position=p)
            pos = nxt
        self._meta_pos = pos

    def _apply_meta_payload(self, payload, *, local: bool, position: int = -1) -> None:
        try:
            d = meta.decode(payload)
        except InvalidArgumentError as e:
            log.error("store %s: META record at position %d is malformed (%s); skipped",
                      self.store.path, position, e)
            return
        if d["op"] != "topic":
            log.warning("store %s: META record at position %d: unknown op %r; skipped",
                        self.store.path, position, d["op"])
            return
        name, queues = d["name"], d["queues"]
        try:
            self.store.create_topic(name, queues)
        except QuorumlogError as e:
            if local:
                raise
            # (a topic with more queues than the record: nothing to do)
            log.debug("META topic %r/%d not applied: %s", name, queues, e)
        self._known_topics.add(name)


def bridge_for(store):
    """The store itself if it implements the seam, else a StoreBridge over it."""
    if all(hasattr(store, n) for n in ("prepare_put", "raft_log", "apply_committed",
                                       "abandon_pending")):
        return store
    return StoreBridge(store)
